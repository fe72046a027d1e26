package conncooldown

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Tracker applies one Config to connections whose state lives in a shared Store. It keeps no
// per-connection memory of its own, so every worker VM sees the same state; it is safe for
// concurrent use.
type Tracker struct {
	store   state.Store
	clock   state.Clock
	cfg     Config
	corrupt atomic.Uint64
}

// New returns a Tracker, or an error if cfg is out of range or store or clock is missing.
func New(store state.Store, clock state.Clock, cfg Config) (*Tracker, error) {
	if store == nil || clock == nil {
		return nil, errors.New("conncooldown: store and clock are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{store: store, clock: clock, cfg: cfg}, nil
}

// Config returns the tracker's settings.
func (t *Tracker) Config() Config { return t.cfg }

// CorruptReads counts reads of stored records that could not be decoded and were treated as
// absent (a read repeated by a CAS retry counts again). Export it as a stat.
func (t *Tracker) CorruptReads() uint64 { return t.corrupt.Load() }

// Availability is what routing needs to know about a connection now.
type Availability struct {
	Status       Status        // available, unavailable (cooling) or a terminal state
	Until        time.Time     // end of the cooldown (rateLimitedUntil); zero unless cooling
	RetryAfter   time.Duration // time left in the cooldown; 0 unless cooling
	BackoffLevel int           // current backoff level
	// Reason is why the connection cools (the failure that set the cooldown); empty unless
	// cooling.
	Reason failure.Reason
}

// Available reports whether routing may use the connection.
func (a Availability) Available() bool { return a.Status == StatusAvailable }

// Transient reports whether the connection cools for a reason combo retry may wait out:
// the rate-limit class the guide waits on (§4: a request that would answer 429 — a rate
// limit, a busy account; failure.Reason.Waitable). A server error or overloaded model, an
// exhausted quota, an auth error or a terminal state is answered at once with its
// Retry-After instead.
func (a Availability) Transient() bool {
	return a.Status == StatusUnavailable && a.Reason.Waitable()
}

// Check reads the connection's state. A clean connection costs one shared-data read and no
// allocation. On a store error it fails open (available) and returns the error.
func (t *Tracker) Check(c Conn) (Availability, error) {
	rec, _, err := t.load(c)
	if err != nil {
		return Availability{Status: StatusAvailable}, err
	}
	return rec.availability(t.nowMillis()), nil
}

// Outcome reports what a failure did to the connection.
type Outcome struct {
	// Counted is false when the failure changed nothing: the connection was terminal, or the
	// failure overlapped one already counted (thundering-herd protection).
	Counted bool
	// Availability is the connection's state after the failure.
	Availability Availability
}

// RecordFailure applies one failed attempt to the connection. Which failures reach the
// connection layer (rather than, say, a model lockout) is the caller's routing decision.
func (t *Tracker) RecordFailure(c Conn, f Failure) (Outcome, error) {
	now := t.nowMillis()
	var counted bool
	var after record
	_, err := state.Update(t.store, c.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		rec := t.effective(c, cur, found)
		next, write := t.cfg.applyFailure(rec, f, now)
		counted, after = write, next
		if !write {
			return nil, state.Keep, nil
		}
		if c.fingerprint != 0 {
			next.fingerprint = c.fingerprint
		}
		return next.encode(), state.Write, nil
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("conncooldown: record failure on %s/%s: %w", c.provider, c.connection, err)
	}
	return Outcome{Counted: counted, Availability: after.availability(now)}, nil
}

// RecordSuccess clears the connection's error fields, cooldown and backoff level (guide §2's
// clearAccountError). It writes nothing when there is nothing to clear, keeps a terminal state,
// and ignores a success whose attempt started before the current cooldown was set: that
// attempt says nothing about the connection after the failure. started may be zero (unknown).
func (t *Tracker) RecordSuccess(c Conn, started time.Time) error {
	start := millis(started)
	_, err := state.Update(t.store, c.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		if !found {
			return nil, state.Keep, nil
		}
		rec, err := decodeRecord(cur)
		if err != nil || !c.sameCredential(rec) {
			return nil, state.Delete, nil
		}
		if rec.terminal != failure.TerminalNone || (start != 0 && rec.setAt != 0 && start < rec.setAt) {
			return nil, state.Keep, nil
		}
		return nil, state.Delete, nil
	})
	if err != nil {
		return fmt.Errorf("conncooldown: record success on %s/%s: %w", c.provider, c.connection, err)
	}
	return nil
}

// load reads the effective record: absent, corrupt and other-credential records read as the
// zero record with found=false.
func (t *Tracker) load(c Conn) (record, bool, error) {
	cur, _, found, err := t.store.Get(c.key)
	if err != nil {
		return record{}, false, fmt.Errorf("conncooldown: read %s/%s: %w", c.provider, c.connection, err)
	}
	if !found {
		return record{}, false, nil
	}
	rec := t.effective(c, cur, true)
	return rec, rec != (record{}), nil
}

// effective decodes a stored value into the record that applies to c now.
func (t *Tracker) effective(c Conn, cur []byte, found bool) record {
	if !found {
		return record{}
	}
	rec, err := decodeRecord(cur)
	if err != nil {
		t.corrupt.Add(1)
		return record{}
	}
	if !c.sameCredential(rec) {
		return record{} // a changed credential starts from a clean state
	}
	return rec
}

// sameCredential reports whether rec was written under c's current credential. An unknown
// fingerprint on either side matches.
func (c Conn) sameCredential(rec record) bool {
	return c.fingerprint == 0 || rec.fingerprint == 0 || c.fingerprint == rec.fingerprint
}

func (r record) availability(now int64) Availability {
	a := Availability{Status: r.status(now), BackoffLevel: r.level}
	if a.Status == StatusUnavailable {
		a.Until = fromMillis(r.until)
		a.RetryAfter = time.Duration(r.until-now) * time.Millisecond
		a.Reason = r.lastErrorType
	}
	return a
}

func (t *Tracker) nowMillis() int64 { return t.clock.Now().UnixMilli() }
