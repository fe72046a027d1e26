// Package combo decides, when a combo request has no target left to try, whether it waits
// out a short transient cooldown and re-dispatches or answers now, and with which reply
// (guide §4 "Cooldown-bewuste retry voor combo's", #16319).
//
// The decisions are pure functions of the settings, the request's progress and the list of
// exclusions the target resolution collected; the filter glue does the waiting (with ticks,
// never a runtime timer) and sends the reply.
package combo

import (
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/policies"
)

// Config is the resolved comboCooldownWait setting.
type Config struct {
	Enabled     bool          // wait at all
	MaxWait     time.Duration // longest single wait worth sitting out (maxWaitMs)
	MaxAttempts int           // how many waits one request may make (maxAttempts)
	Budget      time.Duration // total waiting one request may do (budgetMs)
}

// DefaultConfig returns the defaults from policies (policies.Defaults).
func DefaultConfig() Config {
	return ConfigFrom(policies.Defaults().ComboCooldownWait)
}

// Reason says why a target was excluded before dispatch. The string values are stable:
// they appear in the diagnostics of a 503 all_targets_cooling_down.
type Reason string

// Exclusion reasons, the diagnostics.excluded[].reason of a 503 all_targets_cooling_down:
// an external contract like the error codes (README, "The HTTP surface").
const (
	ReasonModelLockout     Reason = "model_lockout"     // model locked on that connection
	ReasonCircuitOpen      Reason = "circuit_open"      // provider breaker OPEN
	ReasonProviderCooldown Reason = "provider_cooldown" // opt-in provider cooldown window
	ReasonUnavailable      Reason = "unavailable"       // connection cooling down or not available
	ReasonTerminal         Reason = "terminal"          // banned / expired / credits exhausted
	ReasonAPIMismatch      Reason = "api_mismatch"      // the provider does not speak the request's API
)

// Exclusion is one combo target skipped before dispatch.
type Exclusion struct {
	Provider   string        // provider id
	Connection string        // connection id
	Model      string        // upstream model
	Reason     Reason        // why it was skipped
	RetryAfter time.Duration // time left on the excluding timer (0 = none known)
	// Transient marks a short rate-limit-class lock that comboCooldownWait may wait out (a
	// rate limit or concurrency limit, failure.Reason.Waitable); false for an open breaker,
	// server errors and overloaded models, quota_exhausted, auth, not-found and terminal
	// states.
	Transient bool
	// Cause is why the connection cools (Reason unavailable; empty for every other
	// reason): a connection cooling for a server error may take the provider's recovery
	// probe (engine). Not part of the diagnostics.
	Cause failure.Reason
}

// Progress is what one request has already spent on cooldown waits.
type Progress struct {
	Attempts int           // waits already made
	Waited   time.Duration // total time spent in them
}

// Refusal says why a request does not wait.
type Refusal uint8

// Refusals, in the order the gate checks them.
const (
	RefusalNone         Refusal = iota // it waits
	RefusalNotTransient                // quota, auth, not-found or terminal: never waited out
	RefusalDisabled                    // comboCooldownWait.enabled is off
	RefusalNoWait                      // no positive wait is known
	RefusalTooLong                     // the wait is longer than maxWaitMs
	RefusalAttempts                    // maxAttempts waits already made
	RefusalBudget                      // the wait does not fit the budget left
)

var refusalNames = [...]string{"none", "not_transient", "disabled", "no_wait", "too_long", "attempts", "budget"}

// String names the refusal for logs and stats.
func (r Refusal) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return "unknown"
}

// Outcome is what a request with every target excluded does next.
type Outcome uint8

// Outcomes.
const (
	OutcomeWait                Outcome = iota // wait Decision.Wait, then re-dispatch
	OutcomeRateLimited                        // 429 rate_limit_error (a transient lock exists)
	OutcomeCoolingDown                        // 503 all_targets_cooling_down (timers, none transient)
	OutcomeNoExecutableTargets                // 404 no_executable_targets (no resilience timer)
	OutcomeCircuitOpen                        // 503 provider_circuit_open (one provider, its breaker open)
)

// Decision is the answer for a request whose every target is excluded.
type Decision struct {
	Outcome Outcome
	// Wait is how long to wait before re-dispatching (OutcomeWait only).
	Wait time.Duration
	// RetryAfter is the earliest relevant timer: the earliest transient lock for 429, the
	// earliest timer of any kind for 503; 0 when none is known.
	RetryAfter time.Duration
	// ResetAt is when the earliest transient lock expires (429 only).
	ResetAt time.Time
	// Refusal says why the request does not wait (RefusalNone for OutcomeWait).
	Refusal Refusal
	// Provider names the provider whose circuit is open (OutcomeCircuitOpen only).
	Provider string
}

// singleOpenCircuit reports whether every target that could have served (api mismatches
// aside) is excluded by the open breaker of one and the same provider: the client is told
// that provider's circuit is open (guide §1: callers get a provider-circuit-open answer).
func singleOpenCircuit(excluded []Exclusion) (provider string, ok bool) {
	for i := range excluded {
		switch e := &excluded[i]; {
		case e.Reason == ReasonAPIMismatch:
		case e.Reason != ReasonCircuitOpen, provider != "" && e.Provider != provider:
			return "", false
		default:
			provider = e.Provider
		}
	}
	return provider, provider != ""
}

// AllowWait is the guide's gate (§4 "Cooldown-bewuste retry voor combo's"): enabled ∧ 0 < wait
// ≤ maxWait ∧ attempts < maxAttempts ∧ budgetLeft ≥ wait. It returns RefusalNone when the
// request may wait.
func AllowWait(cfg Config, wait time.Duration, p Progress) Refusal {
	switch {
	case !cfg.Enabled:
		return RefusalDisabled
	case wait <= 0:
		return RefusalNoWait
	case wait > cfg.MaxWait:
		return RefusalTooLong
	case p.Attempts >= cfg.MaxAttempts:
		return RefusalAttempts
	case cfg.Budget-p.Waited < wait:
		return RefusalBudget
	}
	return RefusalNone
}

// DecideExcluded decides for a request whose every target was excluded before dispatch
// (#16319): wait out the earliest transient lock when the gate allows it; otherwise 429
// with that lock's retry_after / reset_at; 503 with diagnostics when only non-transient
// timers excluded the targets; 404 when no resilience timer was involved at all.
func DecideExcluded(cfg Config, excluded []Exclusion, p Progress, now time.Time) Decision {
	var earliestTransient, earliestTimer time.Duration
	timerInvolved := false
	for i := range excluded {
		e := &excluded[i]
		if e.Reason == ReasonTerminal {
			continue // a terminal state is no timer, whatever else the entry says
		}
		switch e.Reason {
		case ReasonModelLockout, ReasonCircuitOpen, ReasonProviderCooldown:
			timerInvolved = true // resilience timers even when their time left is unknown
		}
		if e.RetryAfter <= 0 {
			continue
		}
		timerInvolved = true
		earliestTimer = earliest(earliestTimer, e.RetryAfter)
		if e.Transient {
			earliestTransient = earliest(earliestTransient, e.RetryAfter)
		}
	}
	switch {
	case !timerInvolved:
		return Decision{Outcome: OutcomeNoExecutableTargets, Refusal: RefusalNoWait}
	case earliestTransient == 0:
		if p, ok := singleOpenCircuit(excluded); ok {
			return Decision{Outcome: OutcomeCircuitOpen, RetryAfter: earliestTimer, Provider: p, Refusal: RefusalNotTransient}
		}
		return Decision{Outcome: OutcomeCoolingDown, RetryAfter: earliestTimer, Refusal: RefusalNotTransient}
	}
	if r := AllowWait(cfg, earliestTransient, p); r != RefusalNone {
		return Decision{
			Outcome:    OutcomeRateLimited,
			RetryAfter: earliestTransient,
			ResetAt:    now.Add(earliestTransient),
			Refusal:    r,
		}
	}
	return Decision{Outcome: OutcomeWait, Wait: earliestTransient}
}

// DecideAfterFailure decides whether a combo request whose answer would be a 429 waits out
// the failing target's cooldown (wait) and re-dispatches instead (guide §4). It waits only
// on the rate-limit class (failure.Reason.Waitable: a rate limit or a busy account), never
// on a server error or an overloaded model (a 5xx), quota_exhausted, auth, not-found or a
// terminal state.
func DecideAfterFailure(cfg Config, v failure.Verdict, wait time.Duration, p Progress) Refusal {
	if v.Terminal != failure.TerminalNone || !v.Reason.Waitable() {
		return RefusalNotTransient
	}
	return AllowWait(cfg, wait, p)
}

// Reply builds the reply for a decision that answers now (ok=false for OutcomeWait).
// model is the model the client asked for.
func (d Decision) Reply(model string, excluded []Exclusion) (reply replies.Reply, ok bool) {
	switch d.Outcome {
	case OutcomeRateLimited:
		return replies.RateLimited(model, d.RetryAfter, d.ResetAt), true
	case OutcomeCoolingDown:
		list := make([]replies.Excluded, len(excluded))
		for i, e := range excluded {
			list[i] = replies.Excluded{
				Provider:   e.Provider,
				Connection: e.Connection,
				Model:      e.Model,
				Reason:     string(e.Reason),
				RetryAfter: e.RetryAfter,
			}
		}
		return replies.AllTargetsCoolingDown(model, d.RetryAfter, list), true
	case OutcomeNoExecutableTargets:
		return replies.NoExecutableTargets(model), true
	case OutcomeCircuitOpen:
		return replies.ProviderCircuitOpen(d.Provider, d.RetryAfter), true
	}
	return replies.Reply{}, false
}

// earliest returns the smaller positive duration, treating 0 as "none yet".
func earliest(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}
