// Package classify turns one failed upstream attempt into a failure.Verdict: restate the
// status first (restate), consult the provider error rules (errorrules), then the guide's
// generic rules for status, headers and body (guide §2: checkFallbackError / classify429).
//
// The verdict says whether to fall back, why (failure.Reason), what to blame (Scope), whether
// the provider breaker counts it (the provider's trip statuses — by default 408/500/502/503/
// 504 — and transport failures), which terminal state to set, the upstream's own retry hint,
// and a cooldown only where classification itself decides one: a rule's declared cooldown,
// the upstream's hint for a concurrency limit, or an exhausted quota's window (0 leaves the
// layer's default: its escalating backoff, the fixed concurrency-limit cooldown, or the hint
// where its policy prefers hints). Streaks are not counted here: expired credentials,
// 401s and request_rejected are reported as reasons, and the connection layer turns the
// ExpiredRetryMax-th / RequestRejectedStreak-th in a row into a terminal state.
//
// Rate limits and quotas (guide §2, §3, §4, classify429): a 429 or 403 is quota_exhausted
// only when its body names an exhausted quota in so many words — a daily, weekly, monthly or
// session cap, a subscription usage limit — or, on a 429, when generic quota words come with
// an upstream wait of at least QuotaScaleHint; a shorter upstream wait makes a 429 a rate
// limit whatever the words, except for subscription usage-limit text. A quota verdict
// carries its window (Verdict.QuotaWindow): the reset the upstream announced, else midnight
// in Options.QuotaResetLocation for a daily quota, else QuotaTextCooldown.
// Exhausted credits, balances and free tiers are credits_exhausted, terminal.
//
// A failure that concerns only the model — a 400, 404 or 410 naming a missing or retired
// model, a rule that blames the model — is Verdict.ModelOnly: a model lockout may record it,
// the connection is not to be cooled for it (guide "Foutopsporing").
//
// Precedence, when one body matches several signals: a restatement rule, then a provider
// error rule, decide first; then banned > credits exhausted > quota exhausted (daily, then
// subscription and long-period caps) > on a 403 the route and project texts below >
// concurrency limit > rate limit. So "The free tier of the model has been exhausted; daily
// rate limit exceeded" is credits_exhausted, and "daily rate limit exceeded; too many
// requests" a quota.
//
// Where the guide is silent, Spillway follows OmniRoute 3.7.9 (accountFallback.ts
// checkFallbackError, CREDITS_EXHAUSTED_SIGNALS, classify429):
//   - "The free tier of the model has been exhausted" (Alibaba, on a 429 or a 403) and
//     "payment required" (in any status's body) are credits_exhausted, terminal;
//   - "daily rate limit exceeded" on a 429 names a daily cap: quota_exhausted until midnight;
//   - a 403 "not authorized for this route" (a key valid but not for the route) is the
//     request's own: bad_request, no fallback, nothing cooled;
//   - a 403 "… has not been used in project …" (Google: the project lacks the API) falls
//     back with failure.ScopeRequest: auth_error, the connection stays active;
//   - a 4xx no rule names (418, 409, 421, 451, …) is unknown: fall back, and the connection
//     cools for its base cooldown, never terminal; the 4xx that describe the request as
//     sent (405, 406, 411–417, 422, 428, 431: see clientFault) stay bad_request, no
//     fallback, like a plain 400.
//
// # Echoes
//
// Providers echo client input back in their errors — OpenAI's 404 "The model `X` does not
// exist", its 400 "'X' is not one of ['system', …]", other providers' parameter values — so a
// marker phrase in an error body may be the client's words, not the provider's: a model
// named gpt-5-insufficient_quota under a gpt-5* route would otherwise end a shared connection
// as credits_exhausted until an operator resets it. A marker counts only if the client did
// not send it: when a marker that is evidence matched in the body — a signal fragment below
// that blames more than the status alone (ban, credits, quota, subscription, expiry,
// request-rejected, concurrency, credential, rate-limit and capacity wording), a restatement
// rule's textMarker, a provider error rule's marker — and the same phrase occurs in what the
// client sent (Input.Sent: the request body with its JSON escapes decoded, the requested
// model, the request headers; compared as the marker is, ignoring ASCII case), the match is
// ignored: the body is classified as if the phrase were absent, and status-based defaults
// apply. A multi-fragment signal counts only if none of its fragments was sent. The reset
// text a retry hint is read from ("try again in 30s") is checked the same way, with the same
// Echo (the retryhint package doc).
//
// Phrases that can only narrow the blame are read whoever wrote them: the model-missing
// wording that makes a 404 model-only, the 403 route-denied and project-setup texts, the
// 400 context-overflow texts, and every rule's excludeMarkers. Ignoring one of them would
// let a client widen the blame — every request body holds the word "model", and a planted
// "does not exist" would turn a genuine model-only 404 into a connection-wide one — while
// planting one can only make its own failure milder. So what a client sends can take
// evidence away, never add evidence for a harsher verdict. An operator's rule is evidence
// whatever it declares: a client that echoes its marker, or one of its excludeMarkers, keeps
// its own failure from that rule and leaves the body to the built-in rules.
//
// The check errs toward safety: a genuine account error whose phrase also appears in the
// client's request (a prompt about "insufficient_quota") loses its terminal or quota
// classification for that one response; later responses classify normally. It costs
// nothing on success, nothing on a failure no marker matched, and one pass over the request
// per distinct matched phrase, within textscan.MaxEchoScanBytes (four passes over an 8 MiB
// body: textscan's BenchmarkSentContains8MiB). What it cannot see: a marker whose words are
// split between the provider's own text and the echo, and echoes the provider transforms
// beyond JSON escaping and ASCII case (percent-encoding, HTML entities, a cut inside the
// phrase).
//
// Classification is pure: no state, no clock but Input.Now, bounded work on arbitrary input
// (at most textscan.MaxScanBytes of a body, textscan.MaxEchoScanBytes of what the client
// sent), and it never panics.
package classify

import (
	"fmt"
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

// QuotaTextCooldown is how long a quota exhausted by the body's own words stays locked when
// the upstream announces no reset and the quota is not a daily one: the guide's long
// quota-text cooldown (buildSubscriptionQuotaFallback, 1 hour; guide §7 "Lock op basis van
// egress-buckets"), for "You've reached your usage limit", weekly and session limits alike.
// Options.QuotaTextCooldown overrides it.
const QuotaTextCooldown = time.Hour

// Options are the policy settings classification reads beyond the rule sets.
type Options struct {
	// TripStatuses maps a provider id to its providerBreaker.tripStatuses: the statuses
	// whose provider-level failures count against its breaker (Verdict.CountBreaker). A
	// provider not listed uses policies.BreakerTripStatuses. Statuses must be 400–599 and
	// never the account-level 401, 403 or 429 (guide §1).
	TripStatuses map[string][]int
	// QuotaResetLocation is where a daily quota resets at midnight when the upstream
	// announces no reset of its own (resilience.quotaResetTimeZone); nil means UTC.
	QuotaResetLocation *time.Location
	// QuotaTextCooldown replaces the package's QuotaTextCooldown when positive.
	QuotaTextCooldown time.Duration
}

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
	// Sent is what the client sent on the request this attempt answers (zero: unknown, every
	// marker counts). A marker phrase it holds is no evidence (the package doc, "Echoes").
	Sent textscan.Sent
}

// Classifier holds the restatement and provider error rules and the classification options.
// It is immutable and safe for concurrent use.
type Classifier struct {
	restatements *restate.Table
	rules        *errorrules.Catalogue
	trips        map[string]statusSet // per provider; absent = defaultTrips
	defaultTrips statusSet
	resetIn      *time.Location
	quotaText    time.Duration
}

// statusSet is a bitset of HTTP statuses 0..639.
type statusSet [10]uint64

func newStatusSet(statuses []int) statusSet {
	var s statusSet
	for _, st := range statuses {
		if st >= 0 && st < 640 {
			s[st/64] |= 1 << (st % 64)
		}
	}
	return s
}

func (s *statusSet) has(status int) bool {
	return status >= 0 && status < 640 && s[status/64]&(1<<(status%64)) != 0
}

// New returns a classifier over the given rule sets with the default options (guide §1's
// trip statuses for every provider, daily quotas resetting at UTC midnight); nil means the
// built-in rules only.
func New(restatements *restate.Table, rules *errorrules.Catalogue) *Classifier {
	c, _ := NewWithOptions(restatements, rules, Options{}) // the zero Options are valid
	return c
}

// NewWithOptions returns a classifier over the given rule sets (nil means the built-in rules
// only) and options, or an error naming the first trip status out of range.
func NewWithOptions(restatements *restate.Table, rules *errorrules.Catalogue, opts Options) (*Classifier, error) {
	if restatements == nil {
		restatements = restate.Default()
	}
	if rules == nil {
		rules = errorrules.Default()
	}
	c := &Classifier{restatements: restatements, rules: rules, defaultTrips: newStatusSet(policies.BreakerTripStatuses),
		resetIn: opts.QuotaResetLocation, quotaText: opts.QuotaTextCooldown}
	if c.resetIn == nil {
		c.resetIn = time.UTC
	}
	if c.quotaText <= 0 {
		c.quotaText = QuotaTextCooldown
	}
	c.quotaText = min(c.quotaText, failure.MaxQuotaWindow)
	if len(opts.TripStatuses) > 0 {
		c.trips = make(map[string]statusSet, len(opts.TripStatuses))
		for provider, statuses := range opts.TripStatuses {
			for _, st := range statuses {
				switch {
				case st < 400 || st > 599:
					return nil, fmt.Errorf("classify: provider %q: trip status %d is not an HTTP error status", provider, st)
				case st == 401 || st == 403 || st == 429:
					return nil, fmt.Errorf("classify: provider %q: trip status %d is account-level and must not trip the provider breaker", provider, st)
				}
			}
			c.trips[provider] = newStatusSet(statuses)
		}
	}
	return c, nil
}

// TripsBreaker reports whether status is one of provider's trip statuses.
func (c *Classifier) TripsBreaker(provider string, status int) bool {
	if set, ok := c.trips[provider]; ok {
		return set.has(status)
	}
	return c.defaultTrips.has(status)
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
	echo := textscan.NewEcho(in.Sent)
	res = c.restatements.Apply(in.Provider, in.Status, in.Headers, in.Body, in.Now, &echo)
	var folded [foldBuffer]byte // typical error bodies fold into it without allocating
	a := newAttempt(in, res.Status, folded[:0], &echo)
	v := c.decide(&a, in)
	v.CountBreaker = c.TripsBreaker(in.Provider, v.Status) && providerLevel(v.Reason)
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
	echo            *textscan.Echo // what the client sent, for the marker phrases that matched
}

// shows reports whether the text shows any of signals in the provider's own words: a
// signal counts when every fragment occurs in the text and none of them occurs in what the
// client sent (the package doc, "Echoes"). Signals that only narrow the blame are read with
// a.folded.anyOf instead.
func (a *attempt) shows(signals []signal) bool {
	for _, s := range signals {
		if a.folded.all(s) && !a.echoed(s) {
			return true
		}
	}
	return false
}

// echoed reports whether any fragment of s is in what the client sent.
func (a *attempt) echoed(s signal) bool {
	for _, fragment := range s {
		if a.echo.Echoed(fragment) {
			return true
		}
	}
	return false
}

// maxHeaders bounds how many response headers are looked at.
const maxHeaders = 128

// errorRoots are where an error object lives: the usual {"error": {...}} and the array a
// streaming Gemini endpoint wraps it in.
var errorRoots = [...]struct{ code, status, typ string }{
	{"error.code", "error.status", "error.type"},
	{"0.error.code", "0.error.status", "0.error.type"},
}

// newAttempt prepares a response for matching, folding the body into buf; echo is what the
// client sent, for the markers and the reset text of the retry hint. It returns a value, so
// buf can stay on the caller's stack.
func newAttempt(in Input, status int, buf []byte, echo *textscan.Echo) attempt {
	text := textscan.AppendFolded(buf, in.Body)
	a := attempt{
		status: status,
		text:   text,
		folded: newFolded(textscan.String(text)),
		hint:   retryhint.Find(in.Headers, in.Body, in.Now, echo),
		echo:   echo,
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
	if m, ok := c.rules.Match(in.Provider, a.status, errorrules.Text{Code: a.code, Type: a.typ, Full: a.text, Echo: a.echo}); ok {
		v := newVerdict(a.status, m.Reason)
		if m.ScopeHonoured {
			v.Scope = m.Scope
			// A rule that blames the model (agentrouter 无权访问模型) leaves the connection
			// and its other models alone (guide §7).
			v.ModelOnly = m.Scope == failure.ScopeModel && v.Terminal == failure.TerminalNone
		}
		v.Cooldown = m.Cooldown
		v.RuleID = m.RuleID
		return v
	}
	return c.generic(a, in)
}

// generic is the guide's status handling (§2, checkFallbackError), with the body signals that
// refine it.
func (c *Classifier) generic(a *attempt, in Input) failure.Verdict {
	s := a.status
	// Account-level terminal signals, whatever the status.
	switch {
	case a.shows(banSignals):
		return newVerdict(s, failure.ReasonBanned)
	case a.shows(creditSignals):
		return newVerdict(s, failure.ReasonCreditsExhausted)
	}
	switch {
	case s == 429:
		return c.rateLimited(a, in.Now)
	case s == 401:
		if a.shows(expiredSignals) {
			return newVerdict(s, failure.ReasonExpired)
		}
		return newVerdict(s, failure.ReasonAuthError)
	case s == 402:
		// Payment Required: the account must pay before it serves again.
		return newVerdict(s, failure.ReasonCreditsExhausted)
	case s == 403:
		if in.Profile == policies.ProfileOAuth && a.shows(requestRejectedSignals) {
			return newVerdict(s, failure.ReasonRequestRejected)
		}
		if daily := a.shows(dailyQuotaSignals); daily || a.shows(subscriptionSignals) || a.shows(quotaSignals) {
			// A quota signal (guide §3: 429 / 403 / 402 are quota or entitlement signals):
			// Google APIs answer an exhausted daily quota with 403 "Daily Limit Exceeded".
			return c.quota(a, daily, in.Now)
		}
		if a.folded.anyOf(routeDeniedSignals) {
			// The key may not call this route: the request's own, no fallback, nothing
			// cooled (OmniRoute 3.7.9; the guide is silent).
			return newVerdict(s, failure.ReasonBadRequest)
		}
		if a.folded.anyOf(projectSetupSignals) {
			// The account's project lacks the API: another target may serve the request,
			// and the connection stays active (OmniRoute 3.7.9; the guide is silent).
			v := newVerdict(s, failure.ReasonAuthError)
			v.Scope = failure.ScopeRequest
			return v
		}
		// A generic 403 stays recoverable (guide: not terminal unless classified so).
		return newVerdict(s, failure.ReasonAuthError)
	case s == 404 || s == 410:
		v := newVerdict(s, failure.ReasonNotFound)
		// Only a body that names the model says the model alone is missing; a bare 404 may
		// be a wrong base URL, which fails every model of the connection.
		v.ModelOnly = namesMissingModel(a)
		return v
	case s == 408:
		return newVerdict(s, failure.ReasonTimeout)
	case s == 400:
		return badRequest(a)
	case clientFault(s):
		return newVerdict(s, failure.ReasonBadRequest)
	case s < 500:
		// A 4xx no rule names (418, 409, 421, 451, ...): distrust the target, not the
		// request — fall back, and the connection cools for its base cooldown
		// (OmniRoute 3.7.9 checkFallbackError's last branch; the guide is silent).
		return newVerdict(s, failure.ReasonUnknown)
	case s == 504:
		return newVerdict(s, failure.ReasonTimeout)
	case s == 529 || a.typ == "overloaded_error" || a.shows(capacitySignals):
		return newVerdict(s, failure.ReasonModelCapacity)
	}
	return newVerdict(s, failure.ReasonServerError)
}

// rateLimited splits a 429 into quota_exhausted, concurrency_limited and rate_limit
// (classify429). A short upstream hint makes quota wording a rate limit (QuotaScaleHint);
// explicit quota wording beats concurrency wording.
func (c *Classifier) rateLimited(a *attempt, now time.Time) failure.Verdict {
	if a.unifiedRejected {
		return c.quota(a, false, now) // Anthropic's 5-hour / weekly subscription window
	}
	daily := a.shows(dailyQuotaSignals)
	if a.shows(subscriptionSignals) {
		return c.quota(a, daily, now) // a subscription window: its reset, or the long quota-text cooldown
	}
	if daily || a.shows(quotaSignals) {
		if shortHint(a) {
			return newVerdict(a.status, failure.ReasonRateLimit)
		}
		return c.quota(a, daily, now)
	}
	if a.hint.Found() && !shortHint(a) && a.shows(quotaWordSignals) {
		return c.quota(a, false, now)
	}
	if a.shows(concurrencySignals) {
		return newVerdict(a.status, failure.ReasonConcurrencyLimited)
	}
	return newVerdict(a.status, failure.ReasonRateLimit)
}

// quota is a quota_exhausted verdict with its window: the upstream's announced reset, else
// midnight where daily quotas reset (guide §4: "vergrendeld tot middernacht"), else the
// long quota-text cooldown.
func (c *Classifier) quota(a *attempt, daily bool, now time.Time) failure.Verdict {
	v := newVerdict(a.status, failure.ReasonQuotaExhausted)
	v.QuotaWindow = true
	switch {
	case a.hint.Found():
		v.Cooldown = a.hint.Delay
	case daily:
		v.Cooldown = UntilMidnight(now, c.resetIn)
	default:
		v.Cooldown = c.quotaText
	}
	v.Cooldown = min(v.Cooldown, failure.MaxQuotaWindow)
	return v
}

// UntilMidnight is the time from now to the next midnight in loc (nil = UTC): when a daily
// quota without an announced reset becomes usable again. It is always positive and at most
// 25 hours (a day that gains an hour).
func UntilMidnight(now time.Time, loc *time.Location) time.Duration {
	if loc == nil {
		loc = time.UTC
	}
	t := now.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc).Sub(now)
}

// shortHint reports whether the upstream declared a wait shorter than QuotaScaleHint.
func shortHint(a *attempt) bool {
	return a.hint.Found() && a.hint.Delay < QuotaScaleHint
}

// namesMissingModel reports whether the body says the model itself is missing, retired or
// not served: Anthropic's not_found_error about a model, OpenAI's model_not_found, Azure's
// deployment_not_found, or model-missing wording.
func namesMissingModel(a *attempt) bool {
	return a.code == "model_not_found" || a.code == "deployment_not_found" ||
		(a.typ == "not_found_error" && a.folded.contains("model")) ||
		a.folded.anyOf(modelMissingSignals)
}

// badRequest refines a 400: most are the client's own fault (no fallback, nothing to
// blame), but some are a target's problem another target may not have.
func badRequest(a *attempt) failure.Verdict {
	s := a.status
	switch {
	case a.shows(credentialSignals):
		return newVerdict(s, failure.ReasonAuthError)
	case a.shows(rateLimitSignals):
		v := newVerdict(s, failure.ReasonRateLimit)
		v.Scope = failure.ScopeConnection
		return v
	case a.typ == "not_found_error" || namesMissingModel(a):
		v := newVerdict(s, failure.ReasonNotFound)
		v.ModelOnly = true // a 400 naming the model (guide "Foutopsporing")
		return v
	case a.folded.anyOf(contextOverflowSignals):
		v := newVerdict(s, failure.ReasonBadRequest)
		v.Fallback = true // a larger context window may take it
		return v
	}
	return newVerdict(s, failure.ReasonBadRequest)
}

// clientFault reports the 4xx statuses (beyond 400, which badRequest refines) that say the
// request as sent cannot be processed — its method, its Accept, length, preconditions,
// size, URI, media type, range, expectation or content (RFC 9110 §15.5.6–15.5.21, RFC 6585
// §3 and §5) — which every target would refuse alike: the client's own fault, no fallback.
func clientFault(status int) bool {
	switch status {
	case 405, 406, 411, 412, 413, 414, 415, 416, 417, 422, 428, 431:
		return true
	}
	return false
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
