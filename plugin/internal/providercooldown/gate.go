// Package providercooldown is the opt-in provider cooldown window gate: a cross-request,
// cross-worker memory (in shared data) of providers and connections that just failed, so
// consecutive combo requests skip them.
//
// Rules (Resilience Guide §1, "Opt-in globale Provider Cooldown"; off by default): a
// provider entry cools for providerCooldown once providerFailureThreshold failures fall
// within the sliding providerFailureWindow, the window's ends included (oauth 10 in 15 min
// → 5 min, apikey 15 in 30 min → 10 min, local 2 in 5 min → 1 min); below the threshold it
// is not cooling, and a success clears the window. A connection entry (provider:connection)
// instead cools for minRetryCooldown × 2^(failures in a row − 1), at most
// maxRetryCooldown, and a success clears it.
//
// A concurrency-limit 429 (the account is healthy but busy; guide §2) is not a failure in a
// row: it cools the connection entry for the upstream's hint or a fixed
// ConcurrencyLimitCooldown and leaves the backoff alone, and it never counts in a provider
// window. A model-only failure (failure.Verdict.ModelOnly) is not the connection's and is
// not recorded on its entry.
//
// Failures that arrive while an entry is already cooling belong to the same incident
// (requests that were in flight): they neither extend the cooldown nor escalate it. An
// active cooldown runs out on its own; a success does not cut it short. A connection's
// backoff starts over once it has stayed quiet for maxRetryCooldown after its cooldown.
// The gate is only a signal for target selection: the caller decides which failures to
// record where (provider-level failures on the provider entry, account-level ones on the
// connection entry).
package providercooldown

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// ConcurrencyLimitCooldown is how long a concurrency-limit 429 without an upstream hint cools
// a connection entry (CONCURRENCY_LIMIT_COOLDOWN_MS, guide §2), at most MaxRetryCooldown.
const ConcurrencyLimitCooldown = policies.ConcurrencyLimitCooldown

// maxIDLen bounds a provider or connection id (it becomes part of a shared-data key).
const maxIDLen = 128

// Entry is one gate entry: a provider (window gate) or one of its connections (backoff).
// Build it once per policy load; it is immutable and cheap to copy.
type Entry struct {
	key        string
	provider   string
	connection string
	cfg        Config
}

// ProviderEntry is the window-gate entry of a provider, kept under its upstream's key
// (state.KeyGateWindow of upstream, a state.UpstreamID): an upstream fact every policy that
// reaches it shares.
func ProviderEntry(provider, upstream string, cfg Config) (Entry, error) {
	if err := validID("provider", provider); err != nil {
		return Entry{}, err
	}
	if err := validID("upstream", upstream); err != nil {
		return Entry{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Entry{}, fmt.Errorf("providercooldown: provider %q: %w", provider, err)
	}
	return Entry{key: state.KeyGateWindow.Key(upstream), provider: provider, cfg: cfg}, nil
}

// ConnectionEntry is the backoff entry of one of a provider's connections, kept under its
// account's key (state.KeyGateBackoff of account, a state.AccountID): every policy on that
// credential shares it.
func ConnectionEntry(provider, connection, account string, cfg Config) (Entry, error) {
	if err := validID("provider", provider); err != nil {
		return Entry{}, err
	}
	if err := validID("connection", connection); err != nil {
		return Entry{}, err
	}
	if err := validID("account", account); err != nil {
		return Entry{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Entry{}, fmt.Errorf("providercooldown: connection %q of %q: %w", connection, provider, err)
	}
	return Entry{key: state.KeyGateBackoff.Key(account), provider: provider, connection: connection, cfg: cfg}, nil
}

// Provider returns the entry's provider id.
func (e Entry) Provider() string { return e.provider }

// Connection returns the entry's connection id ("" for a provider entry).
func (e Entry) Connection() string { return e.connection }

// Config returns the entry's settings.
func (e Entry) Config() Config { return e.cfg }

func (e Entry) isConnection() bool { return e.connection != "" }

func (e Entry) check() error {
	if e.key == "" {
		return fmt.Errorf("providercooldown: entry not built with ProviderEntry or ConnectionEntry")
	}
	return nil
}

// validID accepts 1..maxIDLen printable bytes other than space and ':' (the key
// separator), so no two entries can share a key.
func validID(what, id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("providercooldown: %s id must be 1..%d bytes, got %d", what, maxIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c == ':' || c == 0x7f {
			return fmt.Errorf("providercooldown: %s id %q: byte %d (%q) is not allowed", what, id, i, c)
		}
	}
	return nil
}

// Gate reads and updates gate entries in a shared Store. It holds no state of its own
// besides a counter, so every worker's Gate sees the same entries.
type Gate struct {
	store   state.Store
	clock   state.Clock
	corrupt atomic.Uint64
}

// New returns a Gate over store, telling time with clock.
func New(store state.Store, clock state.Clock) *Gate {
	return &Gate{store: store, clock: clock}
}

// CorruptRecords counts stored records that could not be decoded and were treated as
// absent (a stat for operators).
func (g *Gate) CorruptRecords() uint64 { return g.corrupt.Load() }

// Status is an entry's state.
type Status struct {
	// Cooling says target selection should skip the entry now.
	Cooling bool
	// RetryAfter is how long the cooldown still runs (0 when not cooling).
	RetryAfter time.Duration
	// Until is when the cooldown ends (zero when not cooling).
	Until time.Time
	// Failures is, for a provider entry, the failures inside the window; for a
	// connection entry, the failures in a row that set its backoff.
	Failures int
}

// Check reads an entry. With the gate disabled it passes without touching the store. On a
// store error it returns the error with a not-cooling status, so a caller can fail open.
func (g *Gate) Check(e Entry) (Status, error) {
	if err := e.check(); err != nil || !e.cfg.Enabled {
		return Status{}, err
	}
	raw, _, found, err := g.store.Get(e.key)
	if err != nil {
		return Status{}, fmt.Errorf("providercooldown: read %q: %w", e.key, err)
	}
	if !found {
		return Status{}, nil
	}
	now := g.nowMs()
	if e.isConnection() {
		b, err := decodeBackoff(raw)
		if err != nil {
			g.corrupt.Add(1)
			return Status{}, nil
		}
		return b.refreshed(e.cfg, now).status(now), nil
	}
	r, err := readWindow(raw)
	if err != nil {
		g.corrupt.Add(1)
		return Status{}, nil
	}
	s := coolingStatus(activeCooldown(r.coolingUntil, e.cfg.Cooldown, now), now)
	for at, ok := r.next(); ok; at, ok = r.next() {
		if inWindow(at, e.cfg.FailureWindow, now) {
			s.Failures++
		}
	}
	if r.done() != nil {
		g.corrupt.Add(1)
		return Status{}, nil
	}
	return s, nil
}

// RecordFailure records a failed attempt's verdict on the entry and returns its status
// afterwards. A concurrency-limit verdict cools a connection entry for a fixed time without
// counting a failure in a row, and is not recorded on a provider entry; a model-only verdict
// is not recorded on a connection entry (see the package doc). With the gate disabled it
// does nothing.
func (g *Gate) RecordFailure(e Entry, v failure.Verdict) (Status, error) {
	if err := e.check(); err != nil || !e.cfg.Enabled {
		return Status{}, err
	}
	busy := v.KeepBackoff || v.Reason == failure.ReasonConcurrencyLimited
	switch {
	case busy && !e.isConnection():
		return g.Check(e) // a busy account says nothing about the provider
	case busy:
		return g.recordBusy(e, v)
	case v.ModelOnly && e.isConnection():
		return g.Check(e)
	}
	now := g.nowMs()
	if e.isConnection() {
		var out backoff
		err := g.update(e, func(raw []byte, found bool) ([]byte, state.Mutation, bool) {
			b, corrupt := backoff{}, false
			if found {
				var err error
				if b, err = decodeBackoff(raw); err != nil {
					b, corrupt = backoff{}, true
				}
			}
			out = b.refreshed(e.cfg, now)
			if out.coolingUntil != 0 { // already cooling: same incident (never after corrupt)
				return nil, state.Keep, false
			}
			out.failures = min(out.failures+1, maxBackoffFailures)
			out.coolingUntil = now + e.cfg.RetryCooldown(int(out.failures)).Milliseconds()
			return out.encode(), state.Write, corrupt
		})
		return out.status(now), err
	}
	var out window
	err := g.update(e, func(raw []byte, found bool) ([]byte, state.Mutation, bool) {
		w, corrupt := window{}, false
		if found {
			var err error
			if w, err = decodeWindow(raw); err != nil {
				w, corrupt = window{}, true
			}
		}
		out = w.refreshed(e.cfg, now)
		if out.coolingUntil != 0 { // already cooling: same incident (never after corrupt)
			return nil, state.Keep, false
		}
		out.failures = insertSorted(out.failures, now)
		if over := len(out.failures) - e.cfg.FailureThreshold; over > 0 {
			out.failures = out.failures[over:] // only the newest threshold matter
		}
		if len(out.failures) >= e.cfg.FailureThreshold {
			out.coolingUntil = now + e.cfg.Cooldown.Milliseconds()
		}
		return out.encode(), state.Write, corrupt
	})
	s := coolingStatus(out.coolingUntil, now)
	s.Failures = len(out.failures)
	return s, err
}

// recordBusy cools a connection entry for a concurrency limit: the upstream's hint, else the
// verdict's cooldown, else ConcurrencyLimitCooldown, at most MaxRetryCooldown. The failures in
// a row stay as they are; a running cooldown is the same incident.
func (g *Gate) recordBusy(e Entry, v failure.Verdict) (Status, error) {
	d := v.UpstreamHint()
	if d <= 0 {
		d = v.Cooldown
	}
	if d <= 0 {
		d = ConcurrencyLimitCooldown
	}
	d = min(d, e.cfg.MaxRetryCooldown)
	now := g.nowMs()
	var out backoff
	err := g.update(e, func(raw []byte, found bool) ([]byte, state.Mutation, bool) {
		b, corrupt := backoff{}, false
		if found {
			var err error
			if b, err = decodeBackoff(raw); err != nil {
				b, corrupt = backoff{}, true
			}
		}
		out = b.refreshed(e.cfg, now)
		if out.coolingUntil != 0 {
			return nil, state.Keep, false
		}
		out.coolingUntil = now + max(d.Milliseconds(), 1)
		return out.encode(), state.Write, corrupt
	})
	return out.status(now), err
}

// RecordSuccess records a success on the entry: a provider's failure window is cleared,
// a connection's backoff is forgotten. A cooldown already running is left to run out.
// With the gate disabled it does nothing.
func (g *Gate) RecordSuccess(e Entry) error {
	if err := e.check(); err != nil || !e.cfg.Enabled {
		return err
	}
	now := g.nowMs()
	return g.update(e, func(raw []byte, found bool) ([]byte, state.Mutation, bool) {
		if !found {
			return nil, state.Keep, false
		}
		var coolingUntil int64
		var clean bool
		if e.isConnection() {
			b, err := decodeBackoff(raw)
			if err != nil {
				return nil, state.Delete, true
			}
			b = b.refreshed(e.cfg, now)
			coolingUntil, clean = b.coolingUntil, b.failures == 0
		} else {
			w, err := decodeWindow(raw)
			if err != nil {
				return nil, state.Delete, true
			}
			w = w.refreshed(e.cfg, now)
			coolingUntil, clean = w.coolingUntil, len(w.failures) == 0
		}
		switch {
		case coolingUntil == 0:
			return nil, state.Delete, false
		case clean:
			return nil, state.Keep, false // only the running cooldown is left
		case e.isConnection():
			return backoff{coolingUntil: coolingUntil}.encode(), state.Write, false
		}
		return window{coolingUntil: coolingUntil}.encode(), state.Write, false
	})
}

// Reset clears the entry, cooldown included (operator action). It works whether or not
// the gate is enabled.
func (g *Gate) Reset(e Entry) error {
	if err := e.check(); err != nil {
		return err
	}
	return g.update(e, func([]byte, bool) ([]byte, state.Mutation, bool) {
		return nil, state.Delete, false
	})
}

// update runs one CAS read-modify-write of an entry; fn also reports whether it found a
// corrupt record (counted once, after the loop).
func (g *Gate) update(e Entry, fn func(raw []byte, found bool) ([]byte, state.Mutation, bool)) error {
	var corrupt bool
	_, err := state.Update(g.store, e.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		next, m, bad := fn(cur, found)
		corrupt = bad
		return next, m, nil
	})
	if corrupt {
		g.corrupt.Add(1)
	}
	if err != nil {
		return fmt.Errorf("providercooldown: update %q: %w", e.key, err)
	}
	return nil
}

// refreshed drops the failures that left the window and a cooldown that ended.
func (w window) refreshed(c Config, now int64) window {
	out := window{coolingUntil: activeCooldown(w.coolingUntil, c.Cooldown, now), failures: w.failures[:0]}
	for _, at := range w.failures {
		if inWindow(at, c.FailureWindow, now) {
			out.failures = append(out.failures, at)
		}
	}
	return out
}

// insertSorted adds a failure time keeping the list oldest first: another worker (with
// its own clock reading) may have stored a slightly later failure since this one began.
func insertSorted(failures []int64, at int64) []int64 {
	i := len(failures)
	for i > 0 && failures[i-1] > at {
		i--
	}
	failures = append(failures, 0)
	copy(failures[i+1:], failures[i:])
	failures[i] = at
	return failures
}

// refreshed ends a cooldown that ran out, and forgets the backoff once the connection
// stayed quiet for MaxRetryCooldown after it.
func (b backoff) refreshed(c Config, now int64) backoff {
	until := activeCooldown(b.coolingUntil, c.MaxRetryCooldown, now)
	if until == 0 && b.coolingUntil != 0 && now-b.coolingUntil >= c.MaxRetryCooldown.Milliseconds() {
		return backoff{}
	}
	if until == 0 && b.coolingUntil > now { // deadline beyond any cooldown: the clock moved back
		return backoff{}
	}
	return backoff{coolingUntil: until, failures: b.failures}
}

func (b backoff) status(now int64) Status {
	s := coolingStatus(b.coolingUntil, now)
	s.Failures = int(b.failures)
	return s
}

// activeCooldown returns until if a cooldown ending then is still running at now, else
// 0. A deadline further away than the longest possible cooldown can only come from a
// clock that moved back; it is treated as over.
func activeCooldown(until int64, longest time.Duration, now int64) int64 {
	if until <= now || until-now > longest.Milliseconds() {
		return 0
	}
	return until
}

// inWindow reports whether a failure at time at is inside the window ending at now; the
// window is inclusive, so a failure exactly one window old still counts ("10 within 15
// min"). Failures "in the future" (a clock that moved back) count only within one window.
func inWindow(at int64, window time.Duration, now int64) bool {
	w := window.Milliseconds()
	return now-at <= w && at-now <= w
}

func coolingStatus(until, now int64) Status {
	if until <= now {
		return Status{}
	}
	return Status{Cooling: true, RetryAfter: time.Duration(until-now) * time.Millisecond, Until: time.UnixMilli(until)}
}

func (g *Gate) nowMs() int64 { return g.clock.Now().UnixMilli() }
