// Package recheck schedules the re-checks of connections in the terminal expired state: when
// a connection's next check may start, which worker of the process starts a tick's checks
// (claimed by compare-and-swap in shared data), and how a refused check backs off.
//
// The guide keeps a terminal state until an operator resets it or the credential changes
// (§2: "Deze blijven bestaan totdat de credentials wijzigen of een operator ze reset"), so a
// revoked key that is fixed upstream stays out of routing. The re-check is Spillway's own
// opt-in addition (issue 19, resilience.terminalRecheck): it leaves the terminal state in
// place and only asks, now and then, whether the key works again. The guide is silent on it.
//
// Rules:
//   - A connection is due once Interval has passed since it became expired, and afterwards
//     once its schedule's next check time has passed. Claiming its check moves that time on
//     by Interval × 2^refusals (capped at MaxInterval) before the check is sent, so each
//     connection is checked at most once per Interval, by one worker, whatever the answer
//     and even when none comes.
//   - A refused check (401/403: still revoked) counts a refusal: the next check waits for the
//     doubled interval, counted from when the refused check was sent. A passing check forgets
//     the schedule. Any other answer leaves it as the claim set it.
//   - Each worker looks for due connections at most once per Tick (its own memory: no shared
//     data). A worker that finds some claims the tick process-wide with one CAS on the tick
//     key, which holds the end of the claimed tick: the one that wins starts up to MaxPerTick
//     checks, every other worker none, so at most MaxPerTick checks start per Tick across
//     the process. A lost tick is not retried: the next look is a Tick later.
//   - A schedule belongs to one expiry: it is keyed by when the connection became expired
//     (conncooldown's terminal time), so a connection restored and expired again, or with a
//     new credential, starts a new schedule.
//
// Why a CAS claim rather than the VM directory's lowest id (filter/peers.go, which elects the
// gauge publisher): the directory's view lags by up to a heartbeat, and a VM without an entry
// publishes on its own, so two workers may both believe they are elected; a tick claimed by
// CAS is exact. Its cost is one read of the tick key and one write, made only by a worker that
// found a due connection.
//
// The keys are state.KeyRecheckTick (one per process) and state.KeyRecheck of the
// connection's upstream account: a schedule is the account's, as the terminal state it
// re-checks is (conncooldown), so one claim per account serves every policy on it. Both
// change without a request being routed and are read only here, so they are live kinds in
// state's key registry (outside the per-VM cache).
package recheck

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// tickKey holds the end of the tick last claimed, process-wide (state.KeyRecheckTick).
var tickKey = state.KeyRecheckTick.Key()

const (
	scheduleVersion = 1
	tickVersion     = 1
	maxIDBytes      = 128
	maxRefusals     = 30 // 2^30 × Interval is far past any MaxInterval
)

// Config holds the resolved re-check settings.
type Config struct {
	// Interval is the wait from a connection's expiry to its first check, and between checks.
	Interval time.Duration
	// MaxInterval caps the interval doubled by refusals.
	MaxInterval time.Duration
	// MaxPerTick is the most checks started per Tick across the process.
	MaxPerTick int
	// Tick is the round MaxPerTick counts in.
	Tick time.Duration
	// Timeout bounds one check's request.
	Timeout time.Duration
}

// ConfigFrom converts the resolved settings; enabled is the policy's switch.
func ConfigFrom(s policies.TerminalRecheckSettings) (cfg Config, enabled bool) {
	return Config{Interval: s.Interval, MaxInterval: s.MaxInterval, MaxPerTick: s.MaxPerTick, Tick: s.Tick,
		Timeout: s.Timeout}, s.Enabled
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.Tick < time.Millisecond:
		return fmt.Errorf("recheck: tick %v below 1ms", c.Tick)
	case c.Interval < c.Tick:
		return fmt.Errorf("recheck: interval %v below the tick %v", c.Interval, c.Tick)
	case c.MaxInterval < c.Interval:
		return fmt.Errorf("recheck: maxInterval %v below interval %v", c.MaxInterval, c.Interval)
	case c.MaxInterval > 7*24*time.Hour:
		return fmt.Errorf("recheck: maxInterval %v above 7 days", c.MaxInterval)
	case c.MaxPerTick < 1 || c.MaxPerTick > 100:
		return fmt.Errorf("recheck: maxPerTick %d outside [1, 100]", c.MaxPerTick)
	case c.Timeout < time.Millisecond:
		return fmt.Errorf("recheck: timeout %v below 1ms", c.Timeout)
	}
	return nil
}

// backoff is the wait before the next check after refusals refused checks.
func (c Config) backoff(refusals int) time.Duration {
	return failure.Backoff(c.Interval, min(refusals, maxRefusals), c.MaxInterval)
}

// Conn names one connection's schedule in shared data. Build it once per policy load.
type Conn struct {
	key string
}

// NewConn validates the ids and the connection's upstream account (a state.AccountID; as
// conncooldown does: printable ASCII without ':') and binds it to the account's schedule
// key.
func NewConn(provider, connection, account string) (Conn, error) {
	for _, id := range [...]string{provider, connection, account} {
		if id == "" || len(id) > maxIDBytes {
			return Conn{}, fmt.Errorf("recheck: id must be 1 to %d bytes, got %d", maxIDBytes, len(id))
		}
		for i := 0; i < len(id); i++ {
			if b := id[i]; b <= ' ' || b >= 0x7f || b == ':' {
				return Conn{}, fmt.Errorf("recheck: id %q: byte %d (%q) not allowed", id, i, b)
			}
		}
	}
	return Conn{key: state.KeyRecheck.Key(account)}, nil
}

// Scheduler decides the re-checks of one worker over the shared store. It is used by one
// worker at a time (Envoy runs a VM's callbacks one after another).
type Scheduler struct {
	store state.Store
	clock state.Clock
	cfg   Config
	// nextLook is when this worker may look for due connections again (Unix ms; 0: now).
	nextLook int64
}

// New returns a Scheduler, or an error when cfg is out of range or store or clock is missing.
func New(store state.Store, clock state.Clock, cfg Config) (*Scheduler, error) {
	if store == nil || clock == nil {
		return nil, errors.New("recheck: store and clock are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scheduler{store: store, clock: clock, cfg: cfg}, nil
}

// Config returns the scheduler's settings.
func (s *Scheduler) Config() Config { return s.cfg }

// Look reports whether this worker may look for due connections now: at most once per Tick.
// It touches no shared data.
func (s *Scheduler) Look() bool {
	now := s.now()
	if now < s.nextLook {
		return false
	}
	s.nextLook = now + s.cfg.Tick.Milliseconds()
	return true
}

// schedule is one connection's stored schedule. Times are Unix milliseconds.
type schedule struct {
	since    int64 // when the connection became expired: the expiry this schedule belongs to
	next     int64 // the earliest start of the next check
	refusals int   // refused checks of this expiry
}

func (r schedule) encode() []byte {
	return state.NewEncoder(nil, state.KindRecheckSchedule, scheduleVersion).
		Int(r.since).Int(r.next).Uint(uint64(r.refusals)).Bytes()
}

func decodeSchedule(b []byte) (schedule, error) {
	d := state.NewDecoder(b, state.KindRecheckSchedule, scheduleVersion)
	r := schedule{since: d.Int(), next: d.Int()}
	refusals := d.Uint()
	if err := d.Err(); err != nil {
		return schedule{}, fmt.Errorf("recheck: %w", err)
	}
	if refusals > maxRefusals {
		return schedule{}, fmt.Errorf("recheck: %w: refusals %d out of range", state.ErrCorrupt, refusals)
	}
	r.refusals = int(refusals)
	return r, nil
}

// current is the stored schedule of the expiry that began at since: a schedule of another
// expiry, an absent one or a corrupt one reads as a fresh schedule, first due Interval after
// since.
func (s *Scheduler) current(cur []byte, found bool, since int64) schedule {
	if found {
		if r, err := decodeSchedule(cur); err == nil && r.since == since {
			return r
		}
	}
	return schedule{since: since, next: since + s.cfg.Interval.Milliseconds()}
}

// Due reports whether the check of c, expired since since, may start now. It reads c's
// schedule: one shared-data read.
func (s *Scheduler) Due(c Conn, since time.Time) (bool, error) {
	cur, _, found, err := s.store.Get(c.key)
	if err != nil {
		return false, fmt.Errorf("recheck: read %s: %w", c.key, err)
	}
	return s.now() >= s.current(cur, found, since.UnixMilli()).next, nil
}

// ClaimTick claims this tick's checks for this worker, process-wide: true for exactly one
// caller per Tick whatever the number of workers.
func (s *Scheduler) ClaimTick() (bool, error) {
	now := s.now()
	won := false
	_, err := state.Update(s.store, tickKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		won = false
		if found {
			d := state.NewDecoder(cur, state.KindRecheckTick, tickVersion)
			if until := d.Int(); d.Err() == nil && now < until {
				return nil, state.Keep, nil // another worker holds this tick
			}
		}
		won = true
		return state.NewEncoder(nil, state.KindRecheckTick, tickVersion).Int(now + s.cfg.Tick.Milliseconds()).Bytes(), state.Write, nil
	})
	if err != nil {
		return false, fmt.Errorf("recheck: claim the tick: %w", err)
	}
	return won, nil
}

// Ticket is one claimed check: report its answer with Refused or Passed (or drop it: the
// claim already moved the next check on).
type Ticket struct {
	conn  Conn
	since int64 // the expiry checked
	sent  int64 // when the check was claimed, and so sent
}

// Since is when the checked connection became expired: the expiry a passing check clears.
func (t Ticket) Since() time.Time { return time.UnixMilli(t.since).UTC() }

// Claim claims the check of c, expired since since, if it is still due: its schedule's next
// check moves on by the interval (doubled per refusal) before the check is sent. ok is false
// when it is not due (another worker claimed it meanwhile).
func (s *Scheduler) Claim(c Conn, since time.Time) (t Ticket, ok bool, err error) {
	now, sinceMs := s.now(), since.UnixMilli()
	_, err = state.Update(s.store, c.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		r := s.current(cur, found, sinceMs)
		if ok = now >= r.next; !ok {
			return nil, state.Keep, nil
		}
		r.next = now + s.cfg.backoff(r.refusals).Milliseconds()
		return r.encode(), state.Write, nil
	})
	if err != nil {
		return Ticket{}, false, fmt.Errorf("recheck: claim %s: %w", c.key, err)
	}
	return Ticket{conn: c, since: sinceMs, sent: now}, ok, nil
}

// Refused records that the check of t was refused (the credential is still rejected): the
// next check waits for the interval doubled once more, counted from when t was sent.
func (s *Scheduler) Refused(t Ticket) error {
	_, err := state.Update(s.store, t.conn.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		r := s.current(cur, found, t.since)
		r.refusals = min(r.refusals+1, maxRefusals)
		r.next = max(r.next, t.sent+s.cfg.backoff(r.refusals).Milliseconds())
		return r.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("recheck: record a refused check of %s: %w", t.conn.key, err)
	}
	return nil
}

// Passed forgets the schedule of t's expiry: the connection was restored.
func (s *Scheduler) Passed(t Ticket) error {
	_, err := state.Update(s.store, t.conn.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		if !found {
			return nil, state.Keep, nil
		}
		if r, err := decodeSchedule(cur); err == nil && r.since != t.since {
			return nil, state.Keep, nil // a later expiry's schedule
		}
		return nil, state.Delete, nil
	})
	if err != nil {
		return fmt.Errorf("recheck: forget the schedule of %s: %w", t.conn.key, err)
	}
	return nil
}

func (s *Scheduler) now() int64 { return s.clock.Now().UnixMilli() }
