package conncooldown

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Snapshot is one connection's state for the admin API. It never holds a credential.
type Snapshot struct {
	Provider          string
	Connection        string
	Status            Status
	CooldownRemaining time.Duration // 0 unless cooling
	RateLimitedUntil  time.Time     // zero unless cooling
	BackoffLevel      int
	LastErrorType     failure.Reason
	LastError         string
	ErrorCode         int       // upstream status of the last failure
	LastFailureAt     time.Time // zero if none recorded
	TerminalSince     time.Time // zero unless terminal
	RejectStreak      int       // consecutive request_rejected verdicts
	ExpiredRetries    int       // expired-credential verdicts since the last success
}

// Inspect returns the connection's state for operators.
func (t *Tracker) Inspect(c Conn) (Snapshot, error) {
	rec, _, err := t.load(c)
	if err != nil {
		return Snapshot{}, err
	}
	a := rec.availability(t.nowMillis())
	return Snapshot{
		Provider:          c.provider,
		Connection:        c.connection,
		Status:            a.Status,
		CooldownRemaining: a.RetryAfter,
		RateLimitedUntil:  a.Until,
		BackoffLevel:      rec.level,
		LastErrorType:     rec.lastErrorType,
		LastError:         rec.lastError,
		ErrorCode:         rec.errorCode,
		LastFailureAt:     fromMillis(rec.lastFailureAt),
		TerminalSince:     fromMillis(rec.terminalAt),
		RejectStreak:      rec.rejectStreak,
		ExpiredRetries:    rec.expiredCount,
	}, nil
}

// ClearResult says what an operator clear did to one connection.
type ClearResult int

// Clear results.
const (
	Unchanged       ClearResult = iota // nothing was stored
	Cleared                            // cooldown, backoff and error fields (and terminal state, if asked) removed
	SkippedTerminal                    // terminal, and the clear did not include terminal states
)

// String returns the admin API's name of the result.
func (r ClearResult) String() string {
	switch r {
	case Cleared:
		return "cleared"
	case SkippedTerminal:
		return "skippedTerminal"
	}
	return "unchanged"
}

// Clear is an operator reset of one connection. A terminal state is cleared only when
// includeTerminal is set; otherwise the connection is left as it is and SkippedTerminal
// reported.
func (t *Tracker) Clear(c Conn, includeTerminal bool) (ClearResult, error) {
	result := Unchanged
	_, err := state.Update(t.store, c.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		rec := t.effective(c, cur, found)
		switch {
		case rec == record{}:
			result = Unchanged
			if found {
				return nil, state.Delete, nil // corrupt or another credential's: tidy it away
			}
			return nil, state.Keep, nil
		case rec.terminal != failure.TerminalNone && !includeTerminal:
			result = SkippedTerminal
			return nil, state.Keep, nil
		}
		result = Cleared
		return nil, state.Delete, nil
	})
	if err != nil {
		return Unchanged, fmt.Errorf("conncooldown: clear %s/%s: %w", c.provider, c.connection, err)
	}
	return result, nil
}

// ClearReport lists connection ids by what a bulk clear did to them.
type ClearReport struct {
	Cleared         []string
	Unchanged       []string
	SkippedTerminal []string
}

// ClearMany clears every connection in conns (the admin API's {connectionIds} or {all,
// provider} selection, resolved by the caller from the policy). It carries on past a failing
// connection and returns the joined errors; failed connections appear in no list.
func (t *Tracker) ClearMany(conns []Conn, includeTerminal bool) (ClearReport, error) {
	var rep ClearReport
	var errs []error
	for _, c := range conns {
		r, err := t.Clear(c, includeTerminal)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch r {
		case Cleared:
			rep.Cleared = append(rep.Cleared, c.connection)
		case SkippedTerminal:
			rep.SkippedTerminal = append(rep.SkippedTerminal, c.connection)
		default:
			rep.Unchanged = append(rep.Unchanged, c.connection)
		}
	}
	return rep, errors.Join(errs...)
}
