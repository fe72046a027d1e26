package classify

import (
	"strconv"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// now is the fixed clock of every test: 2025-06-01T12:00:00Z, Unix 1748779200.
var now = testfixture.T0

// Shorthands for the verdict tables.
const (
	apikey = policies.ProfileAPIKey
	oauth  = policies.ProfileOAuth
	local  = policies.ProfileLocal
)

// classifyCase is one attempt and the verdict expected for it.
type classifyCase struct {
	name     string           // what the row shows
	provider string           // provider id
	profile  policies.Profile // provider profile
	status   int              // upstream status (0 = transport failure)
	timedOut bool             // with status 0: the attempt timed out
	headers  [][2]string      // upstream response headers
	body     string           // upstream response body
	want     failure.Verdict  // the full expected verdict
}

func runCases(t *testing.T, c *Classifier, cases []classifyCase) {
	t.Helper()
	for _, tc := range cases {
		got, _ := c.Classify(Input{
			Provider: tc.provider, Profile: tc.profile, Status: tc.status, TimedOut: tc.timedOut,
			Headers: tc.headers, Body: []byte(tc.body), Now: now,
		})
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestOpenAI(t *testing.T) {
	runCases(t, New(nil, nil), []classifyCase{
		{"429 TPM with reset headers: rate limit, hint from the spent limit", "openai", apikey, 429,
			false, [][2]string{{"x-ratelimit-remaining-requests", "499"}, {"x-ratelimit-reset-requests", "120ms"}, {"x-ratelimit-remaining-tokens", "0"}, {"x-ratelimit-reset-tokens", "1.91s"}},
			openAITokensPerMin, failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily,
				RetryHint: 1910 * time.Millisecond, HintSource: failure.HintRateLimitReset}},
		{"429 TPM body only: hint from the message", "openai", apikey, 429, false, nil, openAITokensPerMin,
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily,
				RetryHint: 1910 * time.Millisecond, HintSource: failure.HintBodyText}},
		{"429 insufficient_quota: credits exhausted, terminal", "openai", apikey, 429, false, nil, openAIInsufficientQuota,
			failure.Verdict{Status: 429, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalCreditsExhausted}},
		{"401 invalid key: auth error on the connection", "openai", apikey, 401, false, nil, openAIInvalidKey,
			failure.Verdict{Status: 401, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeConnection}},
		{"404 model_not_found: bare model, the model alone", "openai", apikey, 404, false, nil, openAIModelNotFound,
			failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}},
		{"400 context length: bad request, but another target may fit it", "openai", apikey, 400, false, nil, openAIContextLength,
			failure.Verdict{Status: 400, Reason: failure.ReasonBadRequest, Fallback: true, Scope: failure.ScopeNone}},
		{"400 bad parameter: the client's fault, no fallback", "openai", apikey, 400, false, nil, openAIBadParam,
			failure.Verdict{Status: 400, Reason: failure.ReasonBadRequest}},
		{"500 server error: breaker counts", "openai", apikey, 500, false, nil, openAIServerError,
			failure.Verdict{Status: 500, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"503 engine overloaded: capacity, breaker counts", "openai", apikey, 503, false, [][2]string{{"Retry-After", "20"}}, openAIEngineOverloaded,
			failure.Verdict{Status: 503, Reason: failure.ReasonModelCapacity, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true,
				RetryHint: 20 * time.Second, HintSource: failure.HintRetryAfter}},
		{"401 Codex token expired: expired, not terminal yet", "codex", oauth, 401, false, nil, codexTokenExpired,
			failure.Verdict{Status: 401, Reason: failure.ReasonExpired, Fallback: true, Scope: failure.ScopeConnection}},
		{"429 Codex usage limit resetting in 90 min: quota until that reset", "codex", oauth, 429, false, nil, codexUsageLimit,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
				Cooldown: 90 * time.Minute, QuotaWindow: true, RetryHint: 90 * time.Minute, HintSource: failure.HintBodyField}},
	})
}

func TestAnthropic(t *testing.T) {
	unified := [][2]string{
		{"anthropic-ratelimit-unified-status", "rejected"},
		{"anthropic-ratelimit-unified-reset", strconv.FormatInt(now.Add(3*time.Hour).Unix(), 10)},
	}
	runCases(t, New(nil, nil), []classifyCase{
		{"429 rate_limit_error with Retry-After", "anthropic", apikey, 429, false,
			[][2]string{{"retry-after", "15"}, {"anthropic-ratelimit-input-tokens-remaining", "0"}, {"anthropic-ratelimit-input-tokens-reset", "2025-06-01T12:00:14Z"}},
			anthropicRateLimit, failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily,
				RetryHint: 15 * time.Second, HintSource: failure.HintRetryAfter}},
		{"429 subscription usage limit (unified rejected): quota until the reset", "claude", oauth, 429, false, unified, anthropicUsageLimit5h,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
				Cooldown: 3 * time.Hour, QuotaWindow: true, RetryHint: 3 * time.Hour, HintSource: failure.HintRateLimitReset}},
		{"429 burst without unified headers: plain rate limit", "claude", oauth, 429, false, nil, anthropicUsageLimit5h,
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily}},
		{"529 overloaded: capacity, no breaker (529 is not a trip status)", "anthropic", apikey, 529, false, nil, anthropicOverloaded,
			failure.Verdict{Status: 529, Reason: failure.ReasonModelCapacity, Fallback: true, Scope: failure.ScopeExact}},
		{"500 api_error: breaker counts", "anthropic", apikey, 500, false, nil, anthropicAPIError,
			failure.Verdict{Status: 500, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"400 credit balance too low: credits exhausted, terminal", "anthropic", apikey, 400, false, nil, anthropicCreditsLow,
			failure.Verdict{Status: 400, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalCreditsExhausted}},
		{"OAuth 403 Request not allowed: request rejected (streak counted by the connection layer)", "claude", oauth, 403, false, nil, anthropicNotAllowed,
			failure.Verdict{Status: 403, Reason: failure.ReasonRequestRejected, Fallback: true, Scope: failure.ScopeConnection}},
		{"API-key 403 Request not allowed: recoverable auth error", "anthropic", apikey, 403, false, nil, anthropicNotAllowed,
			failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeQuotaFamily}},
		{"401 OAuth token expired: expired", "claude", oauth, 401, false, nil, anthropicOAuthExpired,
			failure.Verdict{Status: 401, Reason: failure.ReasonExpired, Fallback: true, Scope: failure.ScopeConnection}},
		{"401 invalid key: auth error", "anthropic", apikey, 401, false, nil, anthropicInvalidKey,
			failure.Verdict{Status: 401, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeConnection}},
		{"403 organization disabled: banned, terminal", "anthropic", apikey, 403, false, nil, anthropicOrgDisabled,
			failure.Verdict{Status: 403, Reason: failure.ReasonBanned, Fallback: true, Scope: failure.ScopeConnection, Terminal: failure.TerminalBanned}},
		{"404 not_found_error: bare model, the model alone", "anthropic", apikey, 404, false, nil, anthropicNotFound,
			failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}},
		{"400 model not supported: not found, bare model, the model alone", "anthropic", apikey, 400, false, nil, anthropicModelNotFound4,
			failure.Verdict{Status: 400, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}},
		{"413 request too large: the client's fault", "anthropic", apikey, 413, false, nil, anthropicTooLarge,
			failure.Verdict{Status: 413, Reason: failure.ReasonBadRequest}},
	})
}

func TestGoogle(t *testing.T) {
	runCases(t, New(nil, nil), []classifyCase{
		{"429 per-minute: quota wording but a 38 s RetryInfo → rate limit", "gemini", apikey, 429, false, nil, geminiPerMinute,
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily,
				RetryHint: 38 * time.Second, HintSource: failure.HintGoogleRetryInfo}},
		{"429 per-day with a 20 h RetryInfo → quota exhausted until that reset", "gemini", apikey, 429, false, nil, geminiPerDay,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
				Cooldown: 20 * time.Hour, QuotaWindow: true, RetryHint: 20 * time.Hour, HintSource: failure.HintGoogleRetryInfo}},
		{"400 API key not valid: auth error on the connection", "gemini", apikey, 400, false, nil, geminiBadKey,
			failure.Verdict{Status: 400, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeConnection}},
		{"503 model overloaded: capacity, breaker counts", "gemini", apikey, 503, false, nil, geminiOverload,
			failure.Verdict{Status: 503, Reason: failure.ReasonModelCapacity, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"500 internal: server error", "gemini", apikey, 500, false, nil, geminiInternal,
			failure.Verdict{Status: 500, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
	})
}

func TestGLMAndConcurrencyLimits(t *testing.T) {
	concurrency := func(cooldown, hint time.Duration, source failure.HintSource) failure.Verdict {
		return failure.Verdict{Status: 429, Reason: failure.ReasonConcurrencyLimited, Fallback: true, Scope: failure.ScopeConnection,
			Cooldown: cooldown, RetryHint: hint, HintSource: source, KeepBackoff: true}
	}
	runCases(t, New(nil, nil), []classifyCase{
		{"1302 并发数过高: concurrency limited, layer's fixed cooldown, keep backoff, no breaker", "glm", apikey, 429, false, nil, glmConcurrency,
			concurrency(0, 0, failure.HintNone)},
		{"1302 with Retry-After: the upstream hint is the cooldown", "glm", apikey, 429, false, [][2]string{{"Retry-After", "3"}}, glmConcurrency,
			concurrency(3*time.Second, 3*time.Second, failure.HintRetryAfter)},
		{"1302 \\u-escaped: still concurrency", "glm", oauth, 429, false, nil, glmConcurrencyEscaped,
			concurrency(0, 0, failure.HintNone)},
		{"English concurrency wording", "together", apikey, 429, false, nil, plainConcurrency,
			concurrency(0, 0, failure.HintNone)},
		{"concurrency with a reset header: that is the cooldown", "together", apikey, 429, false, [][2]string{{"x-ratelimit-reset", "2"}}, plainConcurrency,
			concurrency(2*time.Second, 2*time.Second, failure.HintRateLimitReset)},
		{"concurrency plus explicit daily cap: quota wins, until UTC midnight (12 h from noon)", "glm", apikey, 429, false, nil, glmConcurrencyAndCap,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
				Cooldown: 12 * time.Hour, QuotaWindow: true}},
		{"1113 余额不足: credits exhausted, terminal", "glm", apikey, 429, false, nil, glmBalance,
			failure.Verdict{Status: 429, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalCreditsExhausted}},
		{"1305 too many requests: rate limit", "glm", apikey, 429, false, nil, glmTooManyRequests,
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily}},
		{"1308 five-hour cap: quota exhausted, the long quota-text cooldown", "glm", oauth, 429, false, nil, glmFiveHourCap,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
				Cooldown: QuotaTextCooldown, QuotaWindow: true}},
		{"封禁: banned, terminal", "glm", apikey, 403, false, nil, glmBanned,
			failure.Verdict{Status: 403, Reason: failure.ReasonBanned, Fallback: true, Scope: failure.ScopeConnection, Terminal: failure.TerminalBanned}},
	})
}

func TestOtherProviders(t *testing.T) {
	runCases(t, New(nil, nil), []classifyCase{
		{"OpenRouter 402 insufficient credits: terminal", "openrouter", apikey, 402, false, nil, openRouterNoCredits,
			failure.Verdict{Status: 402, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalCreditsExhausted}},
		{"bare 402: payment required is terminal too", "x", apikey, 402, false, nil, ``,
			failure.Verdict{Status: 402, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalCreditsExhausted}},
		{"DeepSeek Insufficient Balance on 402", "deepseek", apikey, 402, false, nil, deepseekBalance,
			failure.Verdict{Status: 402, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalCreditsExhausted}},
		{"Groq tokens per day with a 14 min wait: rate limit", "groq", apikey, 429, false, nil, groqTokensPerDay,
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily,
				RetryHint: 14*time.Minute + 46560*time.Millisecond, HintSource: failure.HintBodyText}},
		{"Mistral daily request limit without a hint: quota until UTC midnight", "mistral", apikey, 429, false, nil, mistralDailyLimit,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
				Cooldown: 12 * time.Hour, QuotaWindow: true}},
		{"Cloudflare 502 HTML: server error, breaker counts", "openai", apikey, 502, false, nil, cloudflareBadGateway,
			failure.Verdict{Status: 502, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"plain-text suspension: banned", "x", apikey, 403, false, nil, suspendedAccountPlain,
			failure.Verdict{Status: 403, Reason: failure.ReasonBanned, Fallback: true, Scope: failure.ScopeConnection, Terminal: failure.TerminalBanned}},
		{"local 404 for a missing model: bare model, the model alone", "ollama", local, 404, false, nil, `{"error":"model \"llama9\" not found, try pulling it first"}`,
			failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}},
		{"410 gone: retired model, the model alone", "x", apikey, 410, false, nil, `{"error":{"message":"This model has reached its end of life"}}`,
			failure.Verdict{Status: 410, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}},
		{"400 rate limit text: connection-scope rate limit", "mimo", apikey, 400, false, nil, `{"error":{"message":"request frequency too high, rate limit"}}`,
			failure.Verdict{Status: 400, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeConnection}},
		{"422 unprocessable: the client's fault", "x", apikey, 422, false, nil, `{"detail":[{"msg":"field required"}]}`,
			failure.Verdict{Status: 422, Reason: failure.ReasonBadRequest}},
		{"501 not implemented: server error, no breaker", "x", apikey, 501, false, nil, ``,
			failure.Verdict{Status: 501, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact}},
	})
}

func TestStatusLevelHandling(t *testing.T) {
	runCases(t, New(nil, nil), []classifyCase{
		{"transport failure: breaker counts", "x", apikey, 0, false, nil, ``,
			failure.Verdict{Reason: failure.ReasonTransport, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"transport timeout", "x", apikey, 0, true, nil, ``,
			failure.Verdict{Reason: failure.ReasonTimeout, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"408: timeout, breaker counts", "x", apikey, 408, false, nil, ``,
			failure.Verdict{Status: 408, Reason: failure.ReasonTimeout, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"504: timeout, breaker counts", "x", apikey, 504, false, nil, ``,
			failure.Verdict{Status: 504, Reason: failure.ReasonTimeout, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"bare 429: rate limit, quota family, no breaker", "x", apikey, 429, false, nil, ``,
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily}},
		{"bare 403: auth error, quota family, recoverable", "x", apikey, 403, false, nil, ``,
			failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeQuotaFamily}},
		{"bare 401: auth error on the connection", "x", apikey, 401, false, nil, ``,
			failure.Verdict{Status: 401, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeConnection}},
		{"200: not a failure", "x", apikey, 200, false, nil, `{"error":"banned"}`, failure.Verdict{Status: 200}},
		{"304: not a failure", "x", apikey, 304, false, nil, ``, failure.Verdict{Status: 304}},
		{"status 999: unknown, exact, no breaker", "x", apikey, 999, false, nil, ``,
			failure.Verdict{Status: 999, Reason: failure.ReasonUnknown, Fallback: true, Scope: failure.ScopeExact}},
		{"negative status: unknown", "x", apikey, -1, false, nil, ``,
			failure.Verdict{Status: -1, Reason: failure.ReasonUnknown, Fallback: true, Scope: failure.ScopeExact}},
	})
}

func TestStatusScope(t *testing.T) {
	cases := []struct {
		status int           // upstream status
		want   failure.Scope // lockout scope it implies
	}{
		{429, failure.ScopeQuotaFamily}, {402, failure.ScopeQuotaFamily}, {403, failure.ScopeQuotaFamily},
		{404, failure.ScopeModel},
		{500, failure.ScopeExact}, {502, failure.ScopeExact}, {503, failure.ScopeExact}, {504, failure.ScopeExact}, {400, failure.ScopeExact},
	}
	for _, c := range cases {
		if got := StatusScope(c.status); got != c.want {
			t.Errorf("StatusScope(%d) = %q, want %q", c.status, got, c.want)
		}
	}
}

func TestOnlyTripStatusesCountForTheBreaker(t *testing.T) {
	c := New(nil, nil)
	trip := map[int]bool{}
	for _, s := range policies.BreakerTripStatuses {
		trip[s] = true
	}
	for status := 400; status <= 599; status++ {
		v, _ := c.Classify(Input{Provider: "x", Profile: apikey, Status: status, Now: now})
		if v.CountBreaker != trip[status] {
			t.Errorf("status %d: CountBreaker = %v, want %v", status, v.CountBreaker, trip[status])
		}
	}
	// Account-level bodies never trip it, even on a trip status.
	v, _ := c.Classify(Input{Provider: "x", Profile: apikey, Status: 503, Body: []byte(openAIInsufficientQuota), Now: now})
	if v.CountBreaker || v.Reason != failure.ReasonCreditsExhausted {
		t.Errorf("503 with a credits body: %+v", v)
	}
}

func TestAgentrouterRestatementThenRules(t *testing.T) {
	c := New(nil, nil)
	cases := []struct {
		name     string          // what the row shows
		status   int             // upstream status
		headers  [][2]string     // upstream headers
		body     string          // upstream body
		want     failure.Verdict // expected verdict
		restated bool            // expected: the status was restated
	}{
		{"403 用户额度不足 → 429 → quota rule: connection scope, backoff default", 403, nil, agentrouterUserQuota,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeConnection,
				RetryHint: 60 * time.Second, HintSource: failure.HintRestatement, RuleID: errorrules.AgentrouterQuotaID}, true},
		{"400 用户额度不足 with upstream Retry-After 15", 400, [][2]string{{"Retry-After", "15"}}, agentrouterUserQuota,
			failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeConnection,
				RetryHint: 15 * time.Second, HintSource: failure.HintRetryAfter, RuleID: errorrules.AgentrouterQuotaID}, true},
		{"403 无权访问模型: not restated; model scope, the model alone, 6 h declared cooldown", 403, nil, agentrouterNoModel,
			failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true,
				Cooldown: 6 * time.Hour, RuleID: errorrules.AgentrouterModelAccessDeniedID}, false},
		{"403 other error: generic recoverable auth error", 403, nil, agentrouterBadToken,
			failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeQuotaFamily}, false},
	}
	for _, tc := range cases {
		v, res := c.Classify(Input{Provider: "agentrouter", Profile: apikey, Status: tc.status, Headers: tc.headers, Body: []byte(tc.body), Now: now})
		if v != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, v, tc.want)
		}
		if res.Restated != tc.restated || res.FromStatus != tc.status || res.Status != tc.want.Status {
			t.Errorf("%s: restatement %+v", tc.name, res)
		}
		if res.Restated && (res.RuleID != restate.AgentrouterQuotaRuleID || res.RetryAfter != tc.want.RetryHint) {
			t.Errorf("%s: restatement %+v, want rule %q advertising %v", tc.name, res, restate.AgentrouterQuotaRuleID, tc.want.RetryHint)
		}
		if v.Terminal != failure.TerminalNone {
			t.Errorf("%s: an agentrouter rule must never be terminal", tc.name)
		}
	}
}

func TestRestatementWithoutMatchingRuleNamesTheRestatement(t *testing.T) {
	table, err := restate.New([]restate.Rule{{ID: "acme-403", Provider: "acme", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: []string{"slow down"}}})
	if err != nil {
		t.Fatal(err)
	}
	v, res := New(table, nil).Classify(Input{Provider: "acme", Profile: apikey, Status: 403, Body: []byte("please slow down"), Now: now})
	want := failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily,
		RetryHint: policies.RestatementDefaultRetryAfter, HintSource: failure.HintRestatement, RuleID: "acme-403"}
	if v != want || !res.Restated {
		t.Errorf("got %+v (%+v)\nwant %+v", v, res, want)
	}
}

func TestOperatorErrorRules(t *testing.T) {
	rules, err := errorrules.New([]errorrules.Rule{
		{ID: "acme-maint", Provider: "acme", Status: 503, Markers: []string{"maintenance"},
			Reason: failure.ReasonServerError, Scope: failure.ScopeProvider, Cooldown: 5 * time.Minute},
		{ID: "acme-503-quota", Provider: "acme", Status: 503, Markers: []string{"quota"},
			Reason: failure.ReasonQuotaExhausted, Scope: failure.ScopeConnection},
		{ID: "acme-ban", Provider: "acme", Markers: []string{"flagged"}, Reason: failure.ReasonBanned, Scope: failure.ScopeConnection},
		{ID: "acme-expired", Provider: "acme", Status: 403, Markers: []string{"stale session"}, Reason: failure.ReasonExpired},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCases(t, New(nil, rules), []classifyCase{
		{"operator scope and cooldown honoured; 503 server error still trips", "acme", apikey, 503, false, nil, `scheduled maintenance`,
			failure.Verdict{Status: 503, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeProvider, CountBreaker: true,
				Cooldown: 5 * time.Minute, RuleID: "acme-maint"}},
		{"a rule calling a 503 quota keeps it off the breaker", "acme", apikey, 503, false, nil, `daily quota used`,
			failure.Verdict{Status: 503, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeConnection, RuleID: "acme-503-quota"}},
		{"operator ban reason is terminal", "acme", apikey, 400, false, nil, `account flagged`,
			failure.Verdict{Status: 400, Reason: failure.ReasonBanned, Fallback: true, Scope: failure.ScopeConnection,
				Terminal: failure.TerminalBanned, RuleID: "acme-ban"}},
		{"rule without scope keeps the reason's scope", "acme", oauth, 403, false, nil, `stale session`,
			failure.Verdict{Status: 403, Reason: failure.ReasonExpired, Fallback: true, Scope: failure.ScopeConnection, RuleID: "acme-expired"}},
		{"no rule matches: generic handling", "acme", apikey, 503, false, nil, `upstream connect error`,
			failure.Verdict{Status: 503, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
		{"rules of one provider never apply to another", "other", apikey, 503, false, nil, `scheduled maintenance`,
			failure.Verdict{Status: 503, Reason: failure.ReasonServerError, Fallback: true, Scope: failure.ScopeExact, CountBreaker: true}},
	})
}

func TestVerdictTransience(t *testing.T) {
	// The combo retry waits only on transient verdicts: never on quota, auth, not-found or
	// terminal ones.
	c := New(nil, nil)
	cases := []struct {
		status    int    // upstream status
		body      string // upstream body
		transient bool   // expected Verdict.Transient()
	}{
		{429, geminiPerMinute, true},
		{429, glmConcurrency, true},
		{529, anthropicOverloaded, true},
		{503, geminiOverload, true},
		{429, geminiPerDay, false},
		{429, openAIInsufficientQuota, false},
		{401, openAIInvalidKey, false},
		{404, openAIModelNotFound, false},
	}
	for _, tc := range cases {
		v, _ := c.Classify(Input{Provider: "x", Profile: apikey, Status: tc.status, Body: []byte(tc.body), Now: now})
		if v.Transient() != tc.transient {
			t.Errorf("%d %s: Transient() = %v, want %v (%+v)", tc.status, v.Reason, v.Transient(), tc.transient, v)
		}
	}
}

func TestSignalFragmentsAreLowerCase(t *testing.T) {
	// The text is folded to lower case before matching: an upper-case fragment could never
	// match.
	lists := map[string][]signal{
		"ban": banSignals, "credit": creditSignals, "quota": quotaSignals, "concurrency": concurrencySignals,
		"expired": expiredSignals, "rejected": requestRejectedSignals, "capacity": capacitySignals,
		"credential": credentialSignals, "rateLimit": rateLimitSignals, "modelMissing": modelMissingSignals,
		"dailyQuota": dailyQuotaSignals, "quotaWord": quotaWordSignals, "subscription": subscriptionSignals,
		"contextOverflow": contextOverflowSignals, "routeDenied": routeDeniedSignals, "projectSetup": projectSetupSignals,
	}
	for name, list := range lists {
		for _, s := range list {
			if len(s) == 0 {
				t.Errorf("%s: empty signal", name)
			}
			for _, f := range s {
				if f == "" || f != string(textscan.AppendLower(nil, []byte(f))) {
					t.Errorf("%s: fragment %q is empty or not lower case", name, f)
				}
			}
		}
	}
}
