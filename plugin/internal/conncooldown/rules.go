package conncooldown

import (
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

// Status is a connection's state as routing and the admin API see it. The values are stable.
type Status string

// Statuses.
const (
	StatusAvailable        Status = "available"   // eligible for routing
	StatusUnavailable      Status = "unavailable" // cooling down (guide §2's testStatus "unavailable")
	StatusBanned           Status = "banned"
	StatusExpired          Status = "expired"
	StatusCreditsExhausted Status = "credits_exhausted"
)

// Terminal reports whether s is a terminal state, which only an operator reset or a credential
// change clears.
func (s Status) Terminal() bool {
	return s == StatusBanned || s == StatusExpired || s == StatusCreditsExhausted
}

// Failure is one failed attempt on a connection, as the response path reports it.
type Failure struct {
	// Verdict is the classifier's decision about the attempt.
	Verdict failure.Verdict
	// Started is when the failed attempt was sent; zero if unknown. A failure of an attempt
	// that started before the connection's current cooldown was set is a concurrent one and
	// does not escalate.
	Started time.Time
	// Message is a short operator-facing summary (guide §2's lastError), never a credential
	// or an upstream body; it is truncated to 160 bytes.
	Message string
	// Probe says the attempt was the provider's recovery probe (ClaimProbe), sent while the
	// connection cooled: its failure is new evidence, not a concurrent one, so it escalates
	// as the first failure after the cooldown would, even though the cooldown still runs.
	Probe bool
}

// failureKind sorts a verdict into the rule that handles it.
type failureKind int

const (
	kindTransient   failureKind = iota // escalating backoff
	kindConcurrency                    // busy account: fixed cooldown, backoff level kept
	kindUnknown                        // no rule names it: the base cooldown, backoff level kept
	kindStall                          // content stall: error recorded, cooling only if enabled
	kindExpired                        // expired or revoked credential (any 401): cools, terminal on the Nth
	kindRejected                       // upstream refused the request: cools, banned on a streak
	kindBanned                         // terminal at once
	kindCredits                        // terminal at once
)

func classify(v failure.Verdict) failureKind {
	switch {
	case v.Terminal == failure.TerminalBanned || v.Reason == failure.ReasonBanned:
		return kindBanned
	case v.Terminal == failure.TerminalCreditsExhausted || v.Reason == failure.ReasonCreditsExhausted:
		return kindCredits
	case v.Terminal == failure.TerminalExpired || v.Reason == failure.ReasonExpired || revoked(v):
		return kindExpired
	case v.Reason == failure.ReasonRequestRejected:
		return kindRejected
	case v.Reason == failure.ReasonStreamStall:
		return kindStall
	case v.KeepBackoff || v.Reason == failure.ReasonConcurrencyLimited:
		return kindConcurrency
	case v.Reason == failure.ReasonUnknown:
		return kindUnknown
	}
	return kindTransient
}

// revoked reports a 401 that blames the credential, whatever its body says: a revoked or
// deleted key answers 401 with "invalid key" wording, never "expired", and must still end
// in the terminal expired state after the guide's bounded retries (§2, EXPIRED_RETRY_MAX).
func revoked(v failure.Verdict) bool {
	return v.Status == 401 && v.Reason == failure.ReasonAuthError
}

// applyFailure is the pure transition of a stored record on a failure at now (Unix ms). It
// returns the next record and whether it differs enough to be written. cur must already be
// the effective record (absent, corrupt or another credential's record read as zero).
func (c Config) applyFailure(cur record, f Failure, now int64) (next record, write bool) {
	if cur.terminal != failure.TerminalNone {
		return cur, false // never overwritten by anything but a reset or a new credential
	}
	v := f.Verdict
	if v.ModelOnly {
		// The model alone failed: the connection serves its other models (guide
		// "Foutopsporing": only one model fails → model lockout, not connection cooldown).
		return cur, false
	}
	next = cur
	kind := classify(v)
	switch kind {
	case kindBanned, kindCredits:
		next.noteError(f, now)
		next.setTerminal(kind, now)
		return next, true
	case kindStall:
		if !c.StreamStallCooldown {
			if cur.until > now {
				return cur, false // the running cooldown keeps its reason
			}
			next.noteError(f, now)
			return next, true
		}
	}
	started := millis(f.Started)
	cooling := cur.until > now && !f.Probe
	inFlightBefore := started != 0 && cur.setAt != 0 && started < cur.setAt
	if cooling || inFlightBefore {
		// Thundering herd: this failure overlaps one that was already counted. Only an
		// exhausted quota's own window may extend the cooldown (it is the upstream's word
		// on when the account serves again, not an escalation).
		if w := quotaWindow(v); w > 0 && now+ceilMillis(w) > cur.until {
			next.noteError(f, now)
			next.until = now + ceilMillis(w)
			return next, true
		}
		return cur, false
	}
	next.noteError(f, now)
	if kind != kindRejected {
		next.rejectStreak = 0
	}
	switch kind {
	case kindConcurrency:
		d := v.UpstreamHint()
		if d == 0 {
			d = v.Cooldown
		}
		if d <= 0 {
			d = c.ConcurrencyLimitCooldown
		}
		next.cool(min(d, c.MaxCooldown), now)
		return next, true
	case kindUnknown:
		// A failure no classification rule names (an unlisted 4xx, a status outside HTTP):
		// the base cooldown (a rule's declared one where given) each time, never a climb —
		// OmniRoute 3.7.9 checkFallbackError's last branch, cooldownMs = baseCooldownMs with
		// the backoff level untouched; the guide is silent.
		d := c.BaseCooldown
		if v.Cooldown > 0 {
			d = v.Cooldown
		}
		next.cool(min(d, c.MaxCooldown), now)
		return next, true
	case kindExpired:
		next.expiredCount = min(next.expiredCount+1, maxStreakLimit)
		if next.expiredCount >= c.ExpiredRetryMax {
			next.setTerminal(kind, now)
			return next, true
		}
	case kindRejected:
		next.rejectStreak = min(next.rejectStreak+1, maxStreakLimit)
		if next.rejectStreak >= c.RequestRejectedStreak {
			next.setTerminal(kindBanned, now)
			return next, true
		}
	}
	d, ladder := c.failureCooldown(v, cur.level)
	next.cool(d, now)
	if ladder {
		next.level = min(cur.level+1, c.MaxBackoffSteps)
	} else {
		// The upstream decided the wait: the ladder starts again from the base cooldown
		// for the next failure that carries no hint (guide §2; newBackoffLevel 0).
		next.level = 0
	}
	return next, true
}

// failureCooldown is the cooldown of a counted failure at backoff level level, and whether
// it came from the backoff ladder: an exhausted quota's window as it is (up to
// failure.MaxQuotaWindow); the upstream hint of a 429 where preferred (clamped to
// MaxCooldown); otherwise base × 2^level, with a rule's declared cooldown as the base,
// clamped to MaxCooldown.
func (c Config) failureCooldown(v failure.Verdict, level int) (time.Duration, bool) {
	if w := quotaWindow(v); w > 0 {
		return w, false
	}
	if hint := v.UpstreamHint(); c.PreferRetryHint && v.Status == 429 && hint > 0 {
		return min(hint, c.MaxCooldown), false
	}
	base := c.BaseCooldown
	if v.Cooldown > 0 {
		base = min(v.Cooldown, c.MaxCooldown)
	}
	return failure.Backoff(base, min(level, c.MaxBackoffSteps), c.MaxCooldown), true
}

// quotaWindow is the verdict's exhausted-quota window, or 0.
func quotaWindow(v failure.Verdict) time.Duration {
	if !v.QuotaWindow || v.Cooldown <= 0 {
		return 0
	}
	return min(v.Cooldown, failure.MaxQuotaWindow)
}

// ceilMillis converts a positive duration to whole milliseconds, rounding up.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (r *record) noteError(f Failure, now int64) {
	r.lastFailureAt = now
	r.errorCode = f.Verdict.Status
	if r.errorCode < 0 || r.errorCode > 999 {
		r.errorCode = 0
	}
	r.lastErrorType = f.Verdict.Reason
	if len(r.lastErrorType) > maxMessageBytes {
		r.lastErrorType = failure.ReasonUnknown
	}
	r.lastError = truncateMessage(f.Message)
}

func (r *record) cool(d time.Duration, now int64) {
	r.until = now + ceilMillis(d) // round up: never ends before it starts
	r.setAt = now
}

func (r *record) setTerminal(kind failureKind, now int64) {
	switch kind {
	case kindBanned:
		r.terminal = failure.TerminalBanned
	case kindCredits:
		r.terminal = failure.TerminalCreditsExhausted
	default:
		r.terminal = failure.TerminalExpired
	}
	r.terminalAt = now
	r.until = 0
}

// status derives the routing status of a record at now (lazy recovery: an elapsed cooldown
// reads as available, no timer involved).
func (r record) status(now int64) Status {
	switch r.terminal {
	case failure.TerminalBanned:
		return StatusBanned
	case failure.TerminalExpired:
		return StatusExpired
	case failure.TerminalCreditsExhausted:
		return StatusCreditsExhausted
	}
	if r.until > now {
		return StatusUnavailable
	}
	return StatusAvailable
}
