package conncooldown

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// The two operations the opt-in re-check of expired connections needs (plugin/internal/recheck,
// issue 19): find an expired connection and when it expired, and clear that expiry once a check
// sent with the connection's current credential passed. Neither touches banned or
// credits_exhausted, and neither writes anything else.

// ExpiredSince reports whether the connection is in the terminal expired state under its
// current credential, and since when. A clean connection costs one shared-data read.
func (t *Tracker) ExpiredSince(c Conn) (since time.Time, expired bool, err error) {
	rec, _, err := t.load(c)
	if err != nil || rec.terminal != failure.TerminalExpired {
		return time.Time{}, false, err
	}
	return fromMillis(rec.terminalAt), true, nil
}

// RestoreExpired clears the connection's expired state if it is still the expiry that began at
// since, under the connection's current credential: the record is removed as a success
// removes it (guide §2's clearAccountError: cooldown, backoff and error fields go too). It
// reports whether it cleared anything; a connection reset, expired again or in another state
// meanwhile is left as it is.
func (t *Tracker) RestoreExpired(c Conn, since time.Time) (bool, error) {
	cleared := false
	_, err := state.Update(t.store, c.key, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		cleared = false
		rec := t.effective(c, cur, found)
		if rec.terminal != failure.TerminalExpired || rec.terminalAt != millis(since) {
			return nil, state.Keep, nil
		}
		cleared = true
		return nil, state.Delete, nil
	})
	if err != nil {
		return false, fmt.Errorf("conncooldown: restore %s/%s: %w", c.provider, c.connection, err)
	}
	return cleared, nil
}
