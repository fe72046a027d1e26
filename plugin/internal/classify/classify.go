// Package classify turns one failed upstream attempt into a failure.Verdict: restate the
// status first (restate), consult the provider error rules (errorrules), then the guide's
// generic rules for status, headers and body (checkFallbackError / classify429).
//
// The verdict says whether to fall back, why (failure.Reason), what to blame (Scope), whether
// the provider breaker counts it (only 408/500/502/503/504 and transport failures), which
// terminal state to set, the upstream's own retry hint, and a cooldown only where
// classification itself decides one: a rule's declared cooldown, or the upstream's hint for
// a concurrency limit (0 leaves the layer's default: its escalating backoff, the fixed
// concurrency-limit cooldown, or the hint where its policy prefers hints). Streaks are not counted here: expired credentials and request_rejected are
// reported as reasons, and the connection layer turns the ExpiredRetryMax-th /
// RequestRejectedStreak-th in a row into a terminal state.
//
// Classification is pure: no state, no clock but Input.Now, bounded work on arbitrary input
// (at most textscan.MaxScanBytes of a body), and it never panics.
package classify

import (
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/retryhint"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/tidwall/gjson"
)

// QuotaScaleHint separates a quota verdict from a rate limit when the body uses quota
// wording: an upstream hint shorter than this says the throttle clears soon (Gemini's
// per-minute 429 also says "You exceeded your current quota"), so it is a rate limit.
// Spillway's choice, after OmniRoute's classify429 (the guide is silent).
const QuotaScaleHint = time.Hour

// Input is one failed attempt as the response path sees it.
type Input struct {
	Provider string           // provider id (breaker scope, rule matching)
	Profile  policies.Profile // the provider's profile
	// Status is the upstream's HTTP status, before restatement. 0 means no response
	// arrived: a transport failure (connection refused or reset, no healthy upstream).
	Status int
	// TimedOut, with Status 0, says the attempt ran out of time rather than failing to
	// connect.
	TimedOut bool
	Headers  [][2]string // upstream response headers, as proxy-wasm delivers them
	Body     []byte      // upstream response body (only its first textscan.MaxScanBytes are read)
	Now      time.Time   // the filter clock, for HTTP-date and epoch hints
}

// Classifier holds the restatement and provider error rules. It is immutable and safe for
// concurrent use.
type Classifier struct {
	restatements *restate.Table
	rules        *errorrules.Catalogue
}

// New returns a classifier over the given rule sets; nil means the built-in rules only.
func New(restatements *restate.Table, rules *errorrules.Catalogue) *Classifier {
	if restatements == nil {
		restatements = restate.Default()
	}
	if rules == nil {
		rules = errorrules.Default()
	}
	return &Classifier{restatements: restatements, rules: rules}
}

// Classify restates the status if a rule says so, then classifies the attempt. The
// restatement result is returned too: the response path reports it
// (x-spillway-restated-from, Retry-After). A status below 400 is not a failure: its verdict
// has no reason and no fallback.
func (c *Classifier) Classify(in Input) (failure.Verdict, restate.Result) {
	res := restate.Result{Status: in.Status, FromStatus: in.Status}
	switch {
	case in.Status == 0:
		return transportVerdict(in.TimedOut), res
	case 100 <= in.Status && in.Status < 400:
		return failure.Verdict{Status: in.Status}, res
	case in.Status < 100 || in.Status > 599:
		// Not HTTP: distrust the attempt, blame nothing wider than the exact target.
		v := failure.Verdict{Status: in.Status, Reason: failure.ReasonUnknown, Fallback: true, Scope: failure.ScopeExact}
		return v, res
	}
	res = c.restatements.Apply(in.Provider, in.Status, in.Headers, in.Body, in.Now)
	var folded [foldBuffer]byte // typical error bodies fold into it without allocating
	a := newAttempt(in, res.Status, folded[:0])
	v := c.decide(&a, in)
	if a.hint.Found() {
		v.RetryHint, v.HintSource = a.hint.Delay, a.hint.Source
	} else if res.Restated {
		// Only what the restated response advertises; never a cooldown (guide §7).
		v.RetryHint, v.HintSource = res.RetryAfter, failure.HintRestatement
	}
	if v.Reason == failure.ReasonConcurrencyLimited && v.Cooldown == 0 && a.hint.Found() {
		// The upstream's own wait; without one the connection layer applies its fixed
		// concurrency-limit cooldown (policies.ConcurrencyLimitCooldown unless configured).
		v.Cooldown = a.hint.Delay
	}
	if v.RuleID == "" && res.Restated {
		v.RuleID = res.RuleID
	}
	return v, res
}

// foldBuffer is the stack buffer for the folded body; larger bodies fold onto the heap.
const foldBuffer = 4 << 10

// attempt is a failed response, prepared for matching.
type attempt struct {
	status int
	text   []byte // the body capped, \u-decoded and ASCII-folded to lower case
	folded folded // text prepared for signal matching
	code   string // structured error code (OpenAI code, GLM code, Google status)
	typ    string // structured error type (OpenAI / Anthropic error.type)
	// unifiedRejected: Anthropic's subscription usage limit (5-hour / weekly window)
	// answered this 429 (anthropic-ratelimit-unified-status: rejected).
	unifiedRejected bool
	hint            retryhint.Hint // the upstream's own retry hint
}

// maxHeaders bounds how many response headers are looked at.
const maxHeaders = 128

// errorRoots are where an error object lives: the usual {"error": {...}} and the array a
// streaming Gemini endpoint wraps it in.
var errorRoots = [...]struct{ code, status, typ string }{
	{"error.code", "error.status", "error.type"},
	{"0.error.code", "0.error.status", "0.error.type"},
}

// newAttempt prepares a response for matching, folding the body into buf. It returns a
// value, so buf can stay on the caller's stack.
func newAttempt(in Input, status int, buf []byte) attempt {
	text := textscan.AppendFolded(buf, in.Body)
	a := attempt{
		status: status,
		text:   text,
		folded: newFolded(textscan.String(text)),
		hint:   retryhint.Find(in.Headers, in.Body, in.Now),
	}
	json := textscan.String(textscan.Cap(in.Body))
	root := errorRoots[0]
	if trimmed := trimLeft(json); len(trimmed) > 0 && trimmed[0] == '[' {
		root = errorRoots[1]
	}
	code := gjson.Get(json, root.code)
	switch code.Type {
	case gjson.String:
		a.code = code.Str
	case gjson.Number:
		a.code = code.Raw
	}
	if s := gjson.Get(json, root.status); s.Type == gjson.String && (a.code == "" || code.Type == gjson.Number) {
		a.code = s.Str // Google: "RESOURCE_EXHAUSTED" says more than 429
	}
	if t := gjson.Get(json, root.typ); t.Type == gjson.String {
		a.typ = t.Str
	}
	if status == 429 {
		for i, h := range in.Headers {
			if i == maxHeaders {
				break
			}
			if textscan.EqualFold(h[0], "anthropic-ratelimit-unified-status") && textscan.EqualFold(h[1], "rejected") {
				a.unifiedRejected = true
			}
		}
	}
	return a
}

// trimLeft drops leading JSON whitespace.
func trimLeft(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}

// decide applies the provider error rules, then the generic rules.
func (c *Classifier) decide(a *attempt, in Input) failure.Verdict {
	if m, ok := c.rules.Match(in.Provider, a.status, errorrules.Text{Code: a.code, Type: a.typ, Full: a.text}); ok {
		v := newVerdict(a.status, m.Reason)
		if m.ScopeHonoured {
			v.Scope = m.Scope
		}
		v.Cooldown = m.Cooldown
		v.RuleID = m.RuleID
		return v
	}
	return generic(a, in.Profile)
}

// generic is the guide's status handling, with the body signals that refine it.
func generic(a *attempt, profile policies.Profile) failure.Verdict {
	s := a.status
	// Account-level terminal signals, whatever the status.
	switch {
	case a.folded.anyOf(banSignals):
		return newVerdict(s, failure.ReasonBanned)
	case a.folded.anyOf(creditSignals):
		return newVerdict(s, failure.ReasonCreditsExhausted)
	}
	switch {
	case s == 429:
		return rateLimited(a)
	case s == 401:
		if a.folded.anyOf(expiredSignals) {
			return newVerdict(s, failure.ReasonExpired)
		}
		return newVerdict(s, failure.ReasonAuthError)
	case s == 402:
		// Payment Required: the account must pay before it serves again.
		return newVerdict(s, failure.ReasonCreditsExhausted)
	case s == 403:
		if profile == policies.ProfileOAuth && a.folded.anyOf(requestRejectedSignals) {
			return newVerdict(s, failure.ReasonRequestRejected)
		}
		// A generic 403 stays recoverable (guide: not terminal unless classified so).
		return newVerdict(s, failure.ReasonAuthError)
	case s == 404 || s == 410:
		return newVerdict(s, failure.ReasonNotFound)
	case s == 408:
		return newVerdict(s, failure.ReasonTimeout)
	case s == 400:
		return badRequest(a)
	case s < 500:
		return newVerdict(s, failure.ReasonBadRequest)
	case s == 504:
		return newVerdict(s, failure.ReasonTimeout)
	case s == 529 || a.typ == "overloaded_error" || a.folded.anyOf(capacitySignals):
		return newVerdict(s, failure.ReasonModelCapacity)
	}
	return newVerdict(s, failure.ReasonServerError)
}

// rateLimited splits a 429 into quota_exhausted, concurrency_limited and rate_limit.
// Explicit quota wording beats concurrency wording; a short upstream hint turns quota
// wording back into a rate limit (see QuotaScaleHint).
func rateLimited(a *attempt) failure.Verdict {
	if a.unifiedRejected {
		return newVerdict(a.status, failure.ReasonQuotaExhausted)
	}
	if a.folded.anyOf(quotaSignals) {
		if shortHint(a) {
			return newVerdict(a.status, failure.ReasonRateLimit)
		}
		return newVerdict(a.status, failure.ReasonQuotaExhausted)
	}
	if a.folded.anyOf(concurrencySignals) {
		return newVerdict(a.status, failure.ReasonConcurrencyLimited)
	}
	return newVerdict(a.status, failure.ReasonRateLimit)
}

// shortHint reports whether the upstream declared a wait shorter than QuotaScaleHint.
func shortHint(a *attempt) bool {
	return a.hint.Found() && a.hint.Delay < QuotaScaleHint
}

// badRequest refines a 400: most are the client's own fault (no fallback, nothing to
// blame), but some are a target's problem another target may not have.
func badRequest(a *attempt) failure.Verdict {
	s := a.status
	switch {
	case a.folded.anyOf(credentialSignals):
		return newVerdict(s, failure.ReasonAuthError)
	case a.folded.anyOf(rateLimitSignals):
		v := newVerdict(s, failure.ReasonRateLimit)
		v.Scope = failure.ScopeConnection
		return v
	case a.typ == "not_found_error" || a.folded.anyOf(modelMissingSignals):
		return newVerdict(s, failure.ReasonNotFound)
	case a.folded.anyOf(contextOverflowSignals):
		v := newVerdict(s, failure.ReasonBadRequest)
		v.Fallback = true // a larger context window may take it
		return v
	}
	return newVerdict(s, failure.ReasonBadRequest)
}

// newVerdict fills the consequences every layer reads from a reason and a status.
func newVerdict(status int, reason failure.Reason) failure.Verdict {
	v := failure.Verdict{Status: status, Reason: reason, Fallback: true, Scope: StatusScope(status)}
	switch reason {
	case failure.ReasonBadRequest:
		v.Fallback, v.Scope = false, failure.ScopeNone
	case failure.ReasonBanned:
		v.Terminal, v.Scope = failure.TerminalBanned, failure.ScopeConnection
	case failure.ReasonCreditsExhausted:
		v.Terminal, v.Scope = failure.TerminalCreditsExhausted, failure.ScopeConnection
	case failure.ReasonExpired, failure.ReasonRequestRejected:
		v.Scope = failure.ScopeConnection
	case failure.ReasonConcurrencyLimited:
		v.Scope, v.KeepBackoff = failure.ScopeConnection, true
	case failure.ReasonAuthError:
		if status == 401 || status == 400 {
			v.Scope = failure.ScopeConnection // the credential itself
		}
	case failure.ReasonNotFound:
		v.Scope = failure.ScopeModel
	}
	v.CountBreaker = tripsBreaker(status) && providerLevel(reason)
	return v
}

// StatusScope is the lockout scope a status implies (resolveLockoutScope): 429/402/403 are
// quota or entitlement signals and lock the model's quota family, 404 locks the bare model,
// anything else only the exact provider/connection/model.
func StatusScope(status int) failure.Scope {
	switch status {
	case 429, 402, 403:
		return failure.ScopeQuotaFamily
	case 404:
		return failure.ScopeModel
	}
	return failure.ScopeExact
}

// tripsBreaker reports whether status is a provider-level status (BreakerTripStatuses).
func tripsBreaker(status int) bool {
	for _, s := range policies.BreakerTripStatuses {
		if s == status {
			return true
		}
	}
	return false
}

// providerLevel reports whether a reason is about the provider's service rather than one
// account: only these may count against the breaker, even on a trip status (a rule that
// calls a 503 quota_exhausted blames the account).
func providerLevel(r failure.Reason) bool {
	switch r {
	case failure.ReasonServerError, failure.ReasonTimeout, failure.ReasonTransport,
		failure.ReasonModelCapacity, failure.ReasonUnknown:
		return true
	}
	return false
}

// transportVerdict is a failure with no HTTP response.
func transportVerdict(timedOut bool) failure.Verdict {
	reason := failure.ReasonTransport
	if timedOut {
		reason = failure.ReasonTimeout
	}
	return failure.Verdict{Reason: reason, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}
}
