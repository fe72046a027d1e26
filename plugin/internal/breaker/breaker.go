// Package breaker is the provider circuit breaker (CLOSED, DEGRADED, OPEN, HALF_OPEN),
// kept in shared data so every Envoy worker sees one circuit per provider.
//
// Rules (Resilience Guide §1): only provider-level failures count (trip statuses 408,
// 500, 502, 503, 504 and failures without any upstream response; never the account-level
// 401/403/429). Failures move CLOSED to DEGRADED at the degradation threshold and open the
// circuit at the failure threshold. The OPEN period is the failure kind's cooldown
// (cooldownByKind, else resetTimeout), doubled for each further OPEN cycle up to
// maxBackoffMultiplier. Recovery is lazy, with no timer: every read sees an OPEN period
// that ended as HALF_OPEN, and a DEGRADED provider that stayed quiet for its quiet period
// as CLOSED. HALF_OPEN lets exactly one probe through across all workers: the probe is
// claimed by a CAS write that records a deadline, after which an unreported probe is
// released. The probe's success closes the circuit; its failure reopens it, escalated.
//
// Only the probe decides HALF_OPEN. Every outcome is recorded with its Attempt (when it was
// sent, and the Decision that let it through): an attempt sent before the circuit last
// opened overlapped the outage, and its late failure or success changes nothing, in any
// state — a late failure must not reopen a recovering circuit, nor a stale success close
// it. A probe whose outcome is not provider-level (an account-level error, or a status
// that is not one of the provider's trip statuses) gives the probe back at once, so the
// next request probes instead of waiting out the claim.
//
// A success in CLOSED resets the failure count (failures count in a row); in DEGRADED it
// takes RecoverySuccesses successes in a row, a passed connection test, or a quiet period
// to return to CLOSED. The escalation level is forgotten after a quiet period too. A
// healthy provider has no stored record at all, so its reads cost one shared-data lookup
// and no allocation.
package breaker

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// maxIDLen bounds a provider id (it becomes part of a shared-data key).
const maxIDLen = 128

// Provider is one provider's circuit: its id, its shared-data key and its settings. Build
// it once per policy load with NewProvider; it is immutable and cheap to copy.
type Provider struct {
	id  string
	key string
	cfg Config
}

// NewProvider validates a provider id and its settings and binds them to the shared-data
// key of the provider's upstream (state.KeyBreaker of upstream, a state.UpstreamID): every
// policy whose provider reaches that upstream shares the circuit.
func NewProvider(id, upstream string, cfg Config) (Provider, error) {
	if err := validID(id); err != nil {
		return Provider{}, err
	}
	if err := validID(upstream); err != nil {
		return Provider{}, fmt.Errorf("breaker: upstream of %q: %w", id, err)
	}
	if err := cfg.Validate(); err != nil {
		return Provider{}, fmt.Errorf("breaker: provider %q: %w", id, err)
	}
	cfg.TripStatuses = append([]int(nil), cfg.TripStatuses...) // immune to the caller's later edits
	return Provider{id: id, key: state.KeyBreaker.Key(upstream), cfg: cfg}, nil
}

// ID returns the provider id.
func (p Provider) ID() string { return p.id }

// Config returns the provider's breaker settings.
func (p Provider) Config() Config { return p.cfg }

func (p Provider) check() error {
	if p.key == "" {
		return fmt.Errorf("breaker: provider not built with NewProvider")
	}
	return nil
}

// validID accepts 1..maxIDLen printable bytes other than space and ':' (the key
// separator), so no two ids can share a key.
func validID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("breaker: provider id must be 1..%d bytes, got %d", maxIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c == ':' || c == 0x7f {
			return fmt.Errorf("breaker: provider id %q: byte %d (%q) is not allowed", id, i, c)
		}
	}
	return nil
}

// Breaker reads and updates provider circuits in a shared Store. It holds no state of
// its own besides a counter, so one Breaker per worker (or one shared by goroutines in
// tests) sees the same circuits.
type Breaker struct {
	store   state.Store
	clock   state.Clock
	corrupt atomic.Uint64
}

// New returns a Breaker over store, telling time with clock.
func New(store state.Store, clock state.Clock) *Breaker {
	return &Breaker{store: store, clock: clock}
}

// CorruptRecords counts stored records that could not be decoded and were treated as
// absent (a stat for operators).
func (b *Breaker) CorruptRecords() uint64 { return b.corrupt.Load() }

// Decision is the breaker's answer for one candidate request.
type Decision struct {
	// Allowed says the request may be sent to the provider.
	Allowed bool
	// State is the circuit's state as seen by this decision (HALF_OPEN for the probe).
	State State
	// RetryAfter, when not allowed, is how long until the provider may take traffic
	// again: the rest of the OPEN period, or the rest of another worker's probe claim.
	RetryAfter time.Duration
	// Probe says this caller holds the single HALF_OPEN probe. It must report the
	// outcome with RecordSuccess or RecordFailure, or give the probe up with
	// ReleaseProbe(p, thisDecision) if the attempt ended without a provider-level verdict.
	Probe bool

	claim     int64 // the probe claim's deadline, which identifies the claim for ReleaseProbe
	claimedAt int64 // when the probe was claimed (Unix ms)
}

// Attempt identifies the attempt an outcome belongs to. The zero Attempt is one of unknown
// start that held no probe: it counts while the circuit is CLOSED or DEGRADED only.
type Attempt struct {
	// Started is when the attempt was sent; zero if unknown.
	Started time.Time
	// Decision is the Decision of Allow that let the attempt through (it holds the
	// HALF_OPEN probe, if any); zero if Allow was not asked.
	Decision Decision
}

func (a Attempt) internal() attempt {
	x := attempt{probe: a.Decision.Probe, claimedAt: a.Decision.claimedAt}
	if !a.Started.IsZero() {
		x.started = a.Started.UnixMilli()
	}
	return x
}

// Allow decides whether a request may go to the provider now. On a store error it
// returns the error with an allowing decision, so a caller that fails open can use it.
// It writes only to claim the HALF_OPEN probe or to drop a record that recovered.
func (b *Breaker) Allow(p Provider) (Decision, error) {
	open := Decision{Allowed: true, State: Closed}
	if err := p.check(); err != nil {
		return open, err
	}
	raw, _, found, err := b.store.Get(p.key)
	if err != nil {
		return open, fmt.Errorf("breaker: read %q: %w", p.id, err)
	}
	if !found {
		return open, nil
	}
	now := b.nowMs()
	stored, err := decodeRecord(raw)
	if err != nil {
		b.corrupt.Add(1)
		stored = record{} // a record we cannot trust blocks nothing; the next write replaces it
	}
	fresh := stored.refreshed(p.cfg, now)
	if !(fresh.state == HalfOpen && fresh.probeUntil == 0) && !(fresh.clean() && err == nil && !stored.clean()) {
		return decide(fresh, now), nil
	}
	// Slow path: claim the probe, or drop a record that recovered, under CAS.
	var d Decision
	_, err = b.update(p, now, func(r record) record {
		if r.state == HalfOpen && r.probeUntil == 0 {
			r.probeUntil = now + p.cfg.ProbeTimeout.Milliseconds()
			d = Decision{Allowed: true, State: HalfOpen, Probe: true, claim: r.probeUntil, claimedAt: now}
			return r
		}
		d = decide(r, now)
		return r
	})
	if err != nil {
		return open, err
	}
	return d, nil
}

// decide is the decision for a refreshed record whose probe, if any, is someone else's.
func decide(r record, now int64) Decision {
	switch r.state {
	case Open:
		return Decision{State: Open, RetryAfter: millis(r.openUntil - now)}
	case HalfOpen:
		return Decision{State: HalfOpen, RetryAfter: millis(r.probeUntil - now)}
	}
	return Decision{Allowed: true, State: r.state}
}

// RecordSuccess reports attempt a's success: it resets a CLOSED provider's failure count,
// counts toward DEGRADED recovery, and — the probe's only — closes a HALF_OPEN circuit. A
// success while OPEN, or of an attempt sent before the circuit last opened, changes
// nothing. On a clean provider it writes nothing. It returns the state after the update.
func (b *Breaker) RecordSuccess(p Provider, a Attempt) (State, error) {
	x := a.internal()
	return b.apply(p, "record success", func(r record) record { return r.afterSuccess(&p.cfg, x) })
}

// RecordFailure reports attempt a's failure. A verdict that KindOf does not count
// (account-level failures, non-trip statuses) changes nothing, except that a probe it ended
// is given back (see ReleaseProbe). A counted failure counts toward DEGRADED and OPEN, and
// the probe's reopens a HALF_OPEN circuit with an escalated period; it is ignored while the
// circuit is OPEN, in HALF_OPEN when it is not the probe's, and whenever the attempt was
// sent before the circuit last opened. It returns the state after the update.
func (b *Breaker) RecordFailure(p Provider, v failure.Verdict, a Attempt) (State, error) {
	k := p.cfg.KindOf(v)
	if k == KindNone {
		if err := p.check(); err != nil {
			return Closed, err
		}
		if a.Decision.Probe {
			if err := b.ReleaseProbe(p, a.Decision); err != nil {
				return Closed, err
			}
		}
		st, err := b.Status(p)
		return st.State, err
	}
	return b.RecordKind(p, k, a)
}

// RecordKind reports attempt a's provider-level failure of a known kind (for callers that
// classify failures themselves, e.g. a transport error without a verdict), with the rules
// of RecordFailure. KindNone changes nothing.
func (b *Breaker) RecordKind(p Provider, k Kind, a Attempt) (State, error) {
	if k >= kindCount {
		return Closed, fmt.Errorf("breaker: record failure for %q: unknown kind %d", p.id, k)
	}
	now := b.nowMs()
	x := a.internal()
	return b.apply(p, "record failure", func(r record) record {
		if k == KindNone {
			return r
		}
		return r.afterFailure(&p.cfg, k, now, x)
	})
}

// ConnectionTestPassed reports a valid connection test for the provider: a DEGRADED
// provider (or a CLOSED one with failures) returns to a clean CLOSED. It does not close
// an OPEN or HALF_OPEN circuit: only the probe does that.
func (b *Breaker) ConnectionTestPassed(p Provider) (State, error) {
	return b.apply(p, "connection test", func(r record) record {
		if r.state == Closed || r.state == Degraded {
			r.state, r.failures, r.successes = Closed, 0, 0
		}
		return r.tidied()
	})
}

// ReleaseProbe gives up the HALF_OPEN probe granted by probe (the Decision of Allow),
// when its attempt ended without a provider-level outcome (client went away,
// account-level error): the next request may probe at once instead of waiting for the
// claim to lapse. A claim that already lapsed and was taken by another request is left
// alone, and a Decision that is not a probe releases nothing.
func (b *Breaker) ReleaseProbe(p Provider, probe Decision) error {
	if !probe.Probe {
		return p.check()
	}
	_, err := b.apply(p, "release probe", func(r record) record {
		if r.state == HalfOpen && r.probeUntil == probe.claim {
			r.probeUntil = 0
		}
		return r
	})
	return err
}

// Reset returns the provider's circuit to a clean CLOSED (operator action).
func (b *Breaker) Reset(p Provider) error {
	_, err := b.apply(p, "reset", func(record) record { return record{} })
	return err
}

// Status is a provider circuit's state for the admin API.
type Status struct {
	Provider        string        // provider id
	State           State         // state after lazy recovery
	Failures        int           // failures counted toward the thresholds
	Successes       int           // successes in a row while DEGRADED
	OpenCycles      int           // OPEN cycles since the provider was last quiet (escalation level)
	LastFailureKind Kind          // kind of the latest counted failure (KindNone if forgotten)
	LastFailureAt   time.Time     // when it happened (zero if forgotten)
	OpenUntil       time.Time     // end of the OPEN period (zero unless OPEN)
	RetryAfter      time.Duration // how long until traffic may flow (0 when it may now)
	ProbeInFlight   bool          // HALF_OPEN and a probe is claimed
}

// Status reads the provider's circuit with lazy recovery applied. It never writes: the
// refreshed state is what Allow and the next update act on.
func (b *Breaker) Status(p Provider) (Status, error) {
	if err := p.check(); err != nil {
		return Status{}, err
	}
	raw, _, found, err := b.store.Get(p.key)
	if err != nil {
		return Status{Provider: p.id}, fmt.Errorf("breaker: read %q: %w", p.id, err)
	}
	var r record
	if found {
		if r, err = decodeRecord(raw); err != nil {
			b.corrupt.Add(1)
			r = record{}
		}
	}
	now := b.nowMs()
	r = r.refreshed(p.cfg, now)
	s := Status{
		Provider:        p.id,
		State:           r.state,
		Failures:        int(r.failures),
		Successes:       int(r.successes),
		OpenCycles:      int(r.cycles),
		LastFailureKind: r.lastKind,
		ProbeInFlight:   r.state == HalfOpen && r.probeUntil != 0,
	}
	if r.lastFailureAt != 0 {
		s.LastFailureAt = time.UnixMilli(r.lastFailureAt)
	}
	switch {
	case r.state == Open:
		s.OpenUntil = time.UnixMilli(r.openUntil)
		s.RetryAfter = millis(r.openUntil - now)
	case s.ProbeInFlight:
		s.RetryAfter = millis(r.probeUntil - now)
	}
	return s, nil
}

// apply runs change on the provider's refreshed record under CAS and returns the state
// it leaves.
func (b *Breaker) apply(p Provider, what string, change func(record) record) (State, error) {
	if err := p.check(); err != nil {
		return Closed, err
	}
	r, err := b.update(p, b.nowMs(), change)
	if err != nil {
		return Closed, fmt.Errorf("breaker: %s for %q: %w", what, p.id, err)
	}
	return r.state, nil
}

// update is the one read-modify-write of a provider's record: decode (a corrupt record
// reads as absent and is overwritten), refresh, change, then write, delete or keep.
func (b *Breaker) update(p Provider, now int64, change func(record) record) (record, error) {
	var next record
	var corrupt bool
	_, err := state.Update(b.store, p.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		var stored record
		corrupt = false
		if found {
			var err error
			if stored, err = decodeRecord(cur); err != nil {
				stored, corrupt = record{}, true
			}
		}
		next = change(stored.refreshed(p.cfg, now))
		switch {
		case next.clean():
			if found {
				return nil, state.Delete, nil
			}
			return nil, state.Keep, nil
		case next == stored && !corrupt:
			return nil, state.Keep, nil
		}
		return next.encode(), state.Write, nil
	})
	if corrupt {
		b.corrupt.Add(1)
	}
	return next, err
}

func (b *Breaker) nowMs() int64 { return b.clock.Now().UnixMilli() }

func millis(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
