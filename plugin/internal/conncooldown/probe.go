package conncooldown

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// The recovery probe: Spillway's deviation from the guide (README, "The resilience engine").
//
// Guide §2 lets a cooling connection back only when its rateLimitedUntil has passed. After
// an outage every key of a provider has climbed the same ladder (3 → 6 → 12 → 24 s for an API
// key), so clients get Spillway's own 503s for up to one more step after the provider is
// healthy again, and the breaker, whose HALF_OPEN probe would govern recovery, never opens:
// the connection cooldowns stop the traffic that would trip it. So when every target of a
// request is cooling for a server error (failure.Reason.ServerError), one request may go to
// the connection whose cooldown ends soonest, before it ends: the provider's recovery probe.
//
// The claim is the breaker's HALF_OPEN pattern (breaker.Allow): one record per provider in
// shared data, claimed by compare-and-swap with a deadline, so exactly one probe is in flight
// across every worker VM, and a probe whose outcome never comes (its VM died) frees the claim
// at the deadline, the breaker's probeTimeout. On top of that a provider is probed at most
// once per base cooldown, and a connection only once its cooldown has run for one base
// cooldown: the probe never comes sooner than the ladder's first step would. The probe is an
// ordinary attempt: its success clears the connection (RecordSuccess) and its failure
// escalates it (Failure.Probe). Cooldowns for 429s, quotas, auth errors or any other reason,
// and terminal states, are never probed.

// Probe record encoding in shared data (key: probeKey).
const (
	probeKind    = state.KindRecoveryProbe
	probeVersion = 1
	// maxProbeLen is the longest encoding: kind and version bytes, two signed varints.
	maxProbeLen = 2 + 2*10
)

// probeRecord is a provider's recovery probe claim. Times are Unix milliseconds, 0 = unset.
type probeRecord struct {
	claimedAt int64 // when the last probe was claimed: the next may come one base cooldown later
	until     int64 // the claim's deadline while its probe is in flight; 0 once it ended
}

func (r probeRecord) encode() []byte {
	return state.NewEncoder(make([]byte, 0, maxProbeLen), probeKind, probeVersion).
		Int(r.claimedAt).
		Int(r.until).
		Bytes()
}

func decodeProbe(b []byte) (probeRecord, error) {
	d := state.NewDecoder(b, probeKind, probeVersion)
	r := probeRecord{claimedAt: d.Int(), until: d.Int()}
	if err := d.Err(); err != nil {
		return probeRecord{}, fmt.Errorf("conncooldown: probe claim: %w", err)
	}
	if r.claimedAt < 0 || r.until < 0 {
		return probeRecord{}, fmt.Errorf("conncooldown: probe claim: %w: negative time", state.ErrCorrupt)
	}
	return r, nil
}

// free reports whether the provider may be probed at now: no probe claimed within the last
// base cooldown, and none in flight. A claim or deadline further ahead than the settings
// allow can only come from a clock that moved back; it counts as passed, as the breaker's
// probe claim does (breaker record.refreshed).
func (c Config) free(p probeRecord, now int64) bool {
	base, timeout := c.BaseCooldown.Milliseconds(), c.ProbeTimeout.Milliseconds()
	spaced := p.claimedAt == 0 || now-p.claimedAt >= base || p.claimedAt-now > base
	idle := p.until == 0 || now >= p.until || p.until-now > timeout
	return spaced && idle
}

// probeable reports whether a connection's record may be probed at now: it cools for a server
// error, under no terminal state, and its cooldown has run for at least one base cooldown.
func (c Config) probeable(r record, now int64) bool {
	return r.terminal == failure.TerminalNone && r.until > now && r.lastErrorType.ServerError() &&
		now-r.setAt >= c.BaseCooldown.Milliseconds()
}

// Claim is a recovery probe claim held by one attempt; the zero Claim holds none.
type Claim struct {
	claimedAt, until int64 // the record written by the claim, which identifies it
}

// Held reports whether the claim is one.
func (c Claim) Held() bool { return c.until != 0 }

// ProbeReady reports whether c may be sent its provider's recovery probe now: c cools for a
// server error, its cooldown has run for one base cooldown, and the provider has no probe in
// flight and claimed none within the last base cooldown. It only reads (the records a plan
// reads anyway, through the filter's cache); ClaimProbe decides. On a store error it reports
// false: without a claim there is no probe, and the request is answered as without one.
func (t *Tracker) ProbeReady(c Conn) (bool, error) {
	rec, _, err := t.load(c)
	if err != nil {
		return false, err
	}
	now := t.nowMillis()
	if !t.cfg.probeable(rec, now) {
		return false, nil
	}
	p, err := t.loadProbe(c)
	if err != nil {
		return false, err
	}
	return t.cfg.free(p, now), nil
}

// ClaimProbe claims the provider's recovery probe for an attempt on c, by compare-and-swap on
// the provider's claim record: at most one attempt in the process holds it, until EndProbe or
// the claim's deadline (ProbeTimeout). It returns the zero Claim when ProbeReady's conditions
// do not hold (another worker claimed first, c no longer cools for a server error), and on a
// store error, which it returns too.
func (t *Tracker) ClaimProbe(c Conn) (Claim, error) {
	rec, _, err := t.load(c)
	if err != nil {
		return Claim{}, err
	}
	now := t.nowMillis()
	if !t.cfg.probeable(rec, now) {
		return Claim{}, nil
	}
	var claim Claim
	_, err = state.Update(t.store, c.probeKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		claim = Claim{}
		if !t.cfg.free(t.effectiveProbe(cur, found), now) {
			return nil, state.Keep, nil
		}
		next := probeRecord{claimedAt: now, until: now + t.cfg.ProbeTimeout.Milliseconds()}
		claim = Claim(next)
		return next.encode(), state.Write, nil
	})
	if err != nil {
		return Claim{}, fmt.Errorf("conncooldown: claim the recovery probe of %s: %w", c.provider, err)
	}
	return claim, nil
}

// EndProbe ends a claim once its attempt is over (an outcome recorded, or the attempt
// abandoned): the provider may be probed again one base cooldown after the claim was made,
// not only at its deadline. A claim that lapsed and was taken again is left alone, and the
// zero Claim ends nothing.
func (t *Tracker) EndProbe(c Conn, claim Claim) error {
	if !claim.Held() {
		return nil
	}
	_, err := state.Update(t.store, c.probeKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		p := t.effectiveProbe(cur, found)
		if p.claimedAt != claim.claimedAt || p.until != claim.until {
			return nil, state.Keep, nil
		}
		p.until = 0
		return p.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("conncooldown: end the recovery probe of %s: %w", c.provider, err)
	}
	return nil
}

// RecoverServerError clears c's cooldown, backoff level and error fields when its last failure
// was a server error recorded no later than since, under no terminal state: the provider's
// recovery probe, sent at since, succeeded on a sibling of c. A server error is the
// provider's service failing (guide §1 counts it against the whole provider, whose HALF_OPEN
// probe's success closes the circuit for every connection), so the probe's success is the
// news c's cooldown waits for; a failure recorded after the probe was sent is newer evidence
// and stays, and so does every other kind of cooldown. It writes nothing when there is
// nothing to clear.
func (t *Tracker) RecoverServerError(c Conn, since time.Time) error {
	at := millis(since)
	_, err := state.Update(t.store, c.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		rec := t.effective(c, cur, found)
		if rec == (record{}) || rec.terminal != failure.TerminalNone || !rec.lastErrorType.ServerError() ||
			rec.setAt > at {
			return nil, state.Keep, nil
		}
		return nil, state.Delete, nil
	})
	if err != nil {
		return fmt.Errorf("conncooldown: recover %s/%s: %w", c.provider, c.connection, err)
	}
	return nil
}

// loadProbe reads the provider's claim record; absent or corrupt reads as none.
func (t *Tracker) loadProbe(c Conn) (probeRecord, error) {
	cur, _, found, err := t.store.Get(c.probeKey)
	if err != nil {
		return probeRecord{}, fmt.Errorf("conncooldown: read the recovery probe of %s: %w", c.provider, err)
	}
	return t.effectiveProbe(cur, found), nil
}

// effectiveProbe decodes a stored claim record; a corrupt one counts and claims nothing.
func (t *Tracker) effectiveProbe(cur []byte, found bool) probeRecord {
	if !found {
		return probeRecord{}
	}
	p, err := decodeProbe(cur)
	if err != nil {
		t.corrupt.Add(1)
		return probeRecord{}
	}
	return p
}
