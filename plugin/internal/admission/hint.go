package admission

import (
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

// HintAction is what to do with an upstream 429's own wait ("retry after N") in view of the
// queue wait budget (guide §5, "pacing versus lockout").
type HintAction uint8

// Hint actions.
const (
	// HintNone: no usable hint.
	HintNone HintAction = iota
	// HintPace: the wait fits the remaining queue budget, so it is pacing: the
	// connection is paused for that long (the connection cooldown layer honours the hint)
	// and a waiting request may sit it out. Nothing is locked.
	HintPace
	// HintLockModel: a typed Google RetryInfo wait longer than the budget (a daily quota
	// says "86399s"); the queue cannot sit it out, so lock the model on that connection
	// (capped at 24 h by the lockout layer) and do not hold the queue.
	HintLockModel
	// HintRejectWaiter: an untyped wait (plain text, Retry-After) longer than the budget;
	// the pause stays, and the caller, whose budget ends before it, is answered
	// RATE_LIMIT_QUEUE_TIMEOUT at once instead of waiting its budget out.
	HintRejectWaiter
)

var hintActionNames = [...]string{"none", "pace", "lock_model", "reject_waiter"}

// String names the action for logs.
func (h HintAction) String() string {
	if int(h) < len(hintActionNames) {
		return hintActionNames[h]
	}
	return "unknown"
}

// DecideRetryHint classifies an upstream wait hint against the queue wait budget the
// caller has left (a fresh request's whole maxWait, or a Ticket's Remaining).
func DecideRetryHint(hint time.Duration, source failure.HintSource, remaining time.Duration) HintAction {
	switch {
	case hint <= 0 || source == failure.HintNone:
		return HintNone
	case hint <= remaining:
		return HintPace
	case source == failure.HintGoogleRetryInfo:
		return HintLockModel
	}
	return HintRejectWaiter
}
