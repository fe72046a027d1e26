package breaker

import (
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// State is a provider circuit's state.
type State uint8

// Circuit states (guide §1).
const (
	Closed   State = iota // normal traffic
	Degraded              // traffic flows; failures passed the degradation threshold
	Open                  // provider skipped until its OPEN period ends
	HalfOpen              // OPEN period over: exactly one probe request may go through

	stateCount
)

// String returns the state's name as the guide spells it (§1).
func (s State) String() string {
	switch s {
	case Closed:
		return "CLOSED"
	case Degraded:
		return "DEGRADED"
	case Open:
		return "OPEN"
	case HalfOpen:
		return "HALF_OPEN"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText renders the state by name (admin output).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Record encoding in shared data: kind state.KindBreaker, version 2 (version 1 had no
// openedAt; such a record reads as corrupt, so the circuit starts CLOSED again).
const (
	recordKind    = state.KindBreaker
	recordVersion = 2
	// maxRecordLen is the longest encoding: the kind and version bytes, then five
	// unsigned and four signed varints of at most 10 bytes each.
	maxRecordLen = 2 + 5*10 + 4*10
	// maxCycles bounds the stored OPEN cycle count; escalation is capped long before.
	maxCycles = 64
)

// record is one provider's breaker state. Times are Unix milliseconds of the filter's
// clock; zero means "never" or "not set".
type record struct {
	state         State
	failures      uint64 // failures counted since the provider was last CLOSED and clean
	successes     uint64 // successes in a row while DEGRADED
	cycles        uint64 // OPEN cycles since the provider was last quiet (escalation level)
	lastKind      Kind   // kind of the latest counted failure
	lastFailureAt int64  // when the latest counted failure happened
	openUntil     int64  // end of the OPEN period (state Open)
	probeUntil    int64  // deadline of the current probe claim (state HalfOpen), 0 = none
	// openedAt is when the circuit last opened. An attempt sent before it says nothing
	// about the provider since: its outcome is ignored in every state.
	openedAt int64
}

// clean reports whether the record holds nothing worth storing.
func (r record) clean() bool { return r == record{} }

func (r record) encode() []byte {
	return state.NewEncoder(make([]byte, 0, maxRecordLen), recordKind, recordVersion).
		Uint(uint64(r.state)).
		Uint(r.failures).
		Uint(r.successes).
		Uint(r.cycles).
		Uint(uint64(r.lastKind)).
		Int(r.lastFailureAt).
		Int(r.openUntil).
		Int(r.probeUntil).
		Int(r.openedAt).
		Bytes()
}

// decodeRecord reads a stored record. Anything it cannot trust is state.ErrCorrupt.
func decodeRecord(b []byte) (record, error) {
	d := state.NewDecoder(b, recordKind, recordVersion)
	st := d.Uint()
	r := record{
		failures:      d.Uint(),
		successes:     d.Uint(),
		cycles:        d.Uint(),
		lastKind:      Kind(min(d.Uint(), 255)),
		lastFailureAt: d.Int(),
		openUntil:     d.Int(),
		probeUntil:    d.Int(),
		openedAt:      d.Int(),
	}
	if err := d.Err(); err != nil {
		return record{}, err
	}
	if st >= uint64(stateCount) || r.lastKind >= kindCount || r.cycles > maxCycles ||
		r.failures > maxThreshold*2 || r.successes > maxThreshold*2 {
		return record{}, fmt.Errorf("%w: breaker record out of range", state.ErrCorrupt)
	}
	r.state = State(st)
	return r, nil
}

// refreshed applies lazy recovery at time now: an OPEN period that ended becomes
// HALF_OPEN, a probe claim that lapsed is released, and a provider that stayed quiet for
// its quiet period forgets its failures, DEGRADED state and escalation. Deadlines further
// away than the configuration allows can only come from a clock that moved back; they
// are treated as passed, so one probe decides instead of an endless OPEN.
func (r record) refreshed(c Config, now int64) record {
	switch r.state {
	case Open:
		if now >= r.openUntil || r.openUntil-now > c.longestOpen().Milliseconds() {
			r.state, r.probeUntil, r.successes = HalfOpen, 0, 0
		}
	case HalfOpen:
		if r.probeUntil != 0 && (now >= r.probeUntil || r.probeUntil-now > c.ProbeTimeout.Milliseconds()) {
			r.probeUntil = 0
		}
	case Closed, Degraded:
		quiet := c.QuietPeriod(r.lastKind).Milliseconds()
		if since := now - r.lastFailureAt; since >= quiet || -since > quiet {
			return record{}
		}
	}
	return r
}

// decides reports whether attempt a's outcome may change the refreshed record r: not an
// attempt sent before the circuit last opened (it overlapped the outage), nothing while
// OPEN (in-flight stragglers), and in HALF_OPEN only the probe of this recovery.
func (r record) decides(a attempt) bool {
	if a.started != 0 && r.openedAt != 0 && a.started < r.openedAt {
		return false
	}
	switch r.state {
	case Open:
		return false
	case HalfOpen:
		return a.probe && a.claimedAt >= r.openedAt
	}
	return true
}

// attempt is the part of an Attempt the record transitions read: times in Unix ms.
type attempt struct {
	started   int64 // 0 = unknown
	probe     bool  // it held a HALF_OPEN probe
	claimedAt int64 // when that probe was claimed
}

// afterFailure is the record after a counted failure of kind k at time now (on a
// refreshed record).
func (r record) afterFailure(c *Config, k Kind, now int64, a attempt) record {
	if !r.decides(a) {
		return r
	}
	if r.state == HalfOpen {
		return r.opened(c, k, now) // the probe failed: reopen, escalated
	}
	r.failures = min(r.failures+1, maxThreshold*2)
	r.successes = 0
	r.lastKind, r.lastFailureAt = k, max(r.lastFailureAt, now) // another worker's clock may be ahead
	switch {
	case r.failures >= uint64(c.FailureThreshold):
		return r.opened(c, k, now)
	case r.failures >= uint64(c.DegradationThreshold):
		r.state = Degraded
	}
	return r
}

// opened moves the record to OPEN for the next escalation cycle.
func (r record) opened(c *Config, k Kind, now int64) record {
	r.state = Open
	r.cycles = min(r.cycles+1, maxCycles)
	r.successes, r.probeUntil = 0, 0
	r.lastKind, r.lastFailureAt = k, max(r.lastFailureAt, now)
	r.openUntil = now + c.OpenPeriod(k, int(r.cycles)).Milliseconds()
	r.openedAt = now
	return r
}

// afterSuccess is the record after a successful attempt (on a refreshed record).
func (r record) afterSuccess(c *Config, a attempt) record {
	if !r.decides(a) {
		return r
	}
	switch r.state {
	case Closed:
		r.failures = 0
	case Degraded:
		r.successes++
		if r.successes >= uint64(c.RecoverySuccesses) {
			r.state, r.failures, r.successes = Closed, 0, 0
		}
	case HalfOpen:
		r.state, r.failures, r.successes, r.probeUntil = Closed, 0, 0, 0
	}
	return r.tidied()
}

// tidied drops a CLOSED record's leftovers once nothing in it matters any more, so a
// healthy provider reads as absent (the cheapest read).
func (r record) tidied() record {
	if r.state == Closed && r.failures == 0 && r.cycles == 0 {
		return record{}
	}
	return r
}
