// Package failure is the shared vocabulary of an upstream failure: why an attempt failed,
// which scope it blames, and what each resilience layer should do about it. Classification
// produces a Verdict; the breaker, connection cooldown, model lockout and combo retry
// consume it.
package failure

import "time"

// Reason says why an attempt failed. The string values are stable: they appear in admin
// output, logs and error diagnostics.
type Reason string

// Reasons, after the guide's checkFallbackError() and classify429() (§2).
const (
	ReasonNone               Reason = ""                    // success
	ReasonRateLimit          Reason = "rate_limit"          // transient 429
	ReasonQuotaExhausted     Reason = "quota_exhausted"     // daily/monthly quota, locked until reset
	ReasonConcurrencyLimited Reason = "concurrency_limited" // account healthy but busy
	ReasonServerError        Reason = "server_error"        // 5xx at provider level
	ReasonTimeout            Reason = "timeout"             // 408/504 or upstream timeout
	ReasonTransport          Reason = "transport_error"     // connection reset, refused, no upstream
	ReasonAuthError          Reason = "auth_error"          // 401/403 credential problem
	ReasonNotFound           Reason = "not_found"           // 404 model or route
	ReasonModelCapacity      Reason = "model_capacity"      // model overloaded (e.g. Anthropic 529)
	ReasonCreditsExhausted   Reason = "credits_exhausted"   // billing: no credits left (terminal)
	ReasonBanned             Reason = "banned"              // account banned (terminal)
	ReasonExpired            Reason = "expired"             // credential expired
	ReasonRequestRejected    Reason = "request_rejected"    // upstream refused this request
	ReasonBadRequest         Reason = "bad_request"         // 400 caused by the request itself
	ReasonStreamStall        Reason = "stream_stall"        // content stall / slow stream watchdog
	ReasonStreamTruncated    Reason = "stream_truncated"    // a stream ended without its terminal event
	ReasonUnknown            Reason = "unknown"
)

// Scope says what a failure blames, and so which state it writes.
type Scope string

// Scopes, from widest to narrowest.
const (
	ScopeNone        Scope = ""           // nothing to record (e.g. the client's own 400)
	ScopeProvider    Scope = "provider"   // the whole provider: breaker
	ScopeConnection  Scope = "connection" // one account/key: connection cooldown
	ScopeQuotaFamily Scope = "quota"      // the model's quota family on one connection
	ScopeModel       Scope = "model"      // the bare model on one connection
	ScopeExact       Scope = "exact"      // exactly provider + connection + model

	// ScopeRequest, outside that order, blames the attempt's connection for the rest of this
	// request only: nothing is recorded in any layer and the connection stays active for
	// every other request (an account's project not set up for the API, which says nothing
	// about its key). Never a lockout key, never a rule's scope.
	ScopeRequest Scope = "request"
)

// Terminal is a connection state that is not a cooldown: it stays until an operator resets
// it or the credential changes.
type Terminal string

// Terminal states (guide §2).
const (
	TerminalNone             Terminal = ""
	TerminalBanned           Terminal = "banned"
	TerminalExpired          Terminal = "expired"
	TerminalCreditsExhausted Terminal = "credits_exhausted"
)

// HintSource says where an upstream retry hint came from. Only typed Google RetryInfo
// hints may turn into a long model lockout.
type HintSource uint8

// Hint sources.
const (
	HintNone            HintSource = iota
	HintRetryAfter                 // Retry-After header (seconds or HTTP date)
	HintRateLimitReset             // X-RateLimit-Reset style headers
	HintGoogleRetryInfo            // typed google.rpc.RetryInfo retryDelay in the body
	HintBodyField                  // retry_after_ms / retryAfter fields in the body
	HintBodyText                   // "try again in 30s", "reset after 2h30m14s"
	HintRestatement                // a restatement rule's defaultRetryAfterMs
	HintRule                       // a provider error rule's declared cooldown
)

// Verdict is what classification decides about one failed attempt.
type Verdict struct {
	Status       int           // upstream status after restatement
	Reason       Reason        // why it failed
	Fallback     bool          // try the next candidate within the same request
	Scope        Scope         // what to blame
	CountBreaker bool          // counts against the provider breaker
	Cooldown     time.Duration // cooldown to apply at Scope (0 = the layer's own default)
	RetryHint    time.Duration // upstream's own retry hint (0 = none)
	HintSource   HintSource    // where RetryHint came from
	Terminal     Terminal      // terminal state to set on the connection
	// KeepBackoff leaves the connection's backoff level alone (concurrency-limit 429s).
	KeepBackoff bool
	// QuotaWindow says Cooldown is how long an exhausted quota stays exhausted: the reset
	// the upstream announced, midnight for a daily quota without one, or the guide's fixed
	// quota-text cooldown (guide §2, §4 "vergrendeld tot middernacht"). A layer applies it
	// as it is: no escalation, no backoff climb, and not clamped to its usual maximum, only
	// to its hard limit (MaxQuotaWindow).
	QuotaWindow bool
	// ModelOnly says the failure is about the model alone — it does not exist, was retired,
	// or this account may not use it — and says nothing about the connection. Only a model
	// lockout may record it; when the lockout does not take it (off, or not one of its
	// error codes) nothing is cooled (guide "Foutopsporing": only one model fails → model
	// lockout, not connection cooldown). Scope is then ScopeModel.
	ModelOnly bool
	// RuleID names the restatement or provider error rule that decided, if any.
	RuleID string
}

// MaxQuotaWindow bounds a QuotaWindow cooldown in every layer: a daily quota resets within
// a day, and no upstream hint is honoured for longer (retryhint.MaxDelay).
const MaxQuotaWindow = 24 * time.Hour

// Waitable reports whether comboCooldownWait may wait out a lock set for this reason: only
// the rate-limit class, the locks behind a would-be 429 (guide §4 "Cooldown-bewuste retry
// voor combo's": a request that would answer a 429 waits a SHORT transient cooldown out) —
// a rate limit and a busy account (concurrency limit). Everything else is answered at once
// with its Retry-After: a server error, timeout, transport failure or overloaded model
// (a would-be 5xx, which the provider breaker and connection cooldown handle), an
// exhausted quota ("vergrendeld tot middernacht"), auth, not-found and terminal states.
// Every layer that reports whether its lock may be waited on (conncooldown's Availability,
// lockout's Lock, the engine's exclusions, combo's decisions) asks this one rule.
func (r Reason) Waitable() bool {
	return r == ReasonRateLimit || r == ReasonConcurrencyLimited
}

// ServerError reports the provider-level reasons of guide §1: a failure on one of the
// breaker's trip codes (408, 500, 502, 503, 504) or without any response — server_error,
// timeout, transport_error. A connection cooled for one of these is what a recovery probe
// may try before its cooldown ends (conncooldown, Spillway's deviation from the guide): the
// provider's service failed, not the account. Never a rate limit, quota, auth or capacity
// verdict, which name the account or the model, and never a terminal state.
func (r Reason) ServerError() bool {
	return r == ReasonServerError || r == ReasonTimeout || r == ReasonTransport
}

// Transient reports whether waiting a little could make the target usable again: true for
// rate limits, concurrency limits, capacity and server errors; false for quota exhaustion,
// auth, not-found and terminal states. Whether comboCooldownWait may wait is narrower:
// Reason.Waitable.
func (v Verdict) Transient() bool {
	if v.Terminal != TerminalNone {
		return false
	}
	switch v.Reason {
	case ReasonRateLimit, ReasonConcurrencyLimited, ReasonServerError, ReasonTimeout,
		ReasonTransport, ReasonModelCapacity:
		return true
	}
	return false
}

// UpstreamHint returns the verdict's retry hint if the upstream itself gave it (a header,
// a typed or untyped body field, reset text). A restatement rule's synthetic default is
// what the client is told, not how long a layer should cool, so it does not count; nor
// does a rule's declared cooldown, which is Cooldown's business.
func (v Verdict) UpstreamHint() time.Duration {
	switch v.HintSource {
	case HintRetryAfter, HintRateLimitReset, HintGoogleRetryInfo, HintBodyField, HintBodyText:
		return max(v.RetryHint, 0)
	}
	return 0
}

// Backoff returns base × 2^index, clamped to max, without overflowing: the exponential
// backoff every cooling layer uses.
func Backoff(base time.Duration, index int, max time.Duration) time.Duration {
	d := base
	for i := 0; i < index && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
