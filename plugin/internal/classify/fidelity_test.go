package classify

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// Verdict shorthands for the tables below.
func rateLimit(status int) failure.Verdict {
	return failure.Verdict{Status: status, Reason: failure.ReasonRateLimit, Fallback: true, Scope: StatusScope(status)}
}

func quotaFor(d time.Duration) failure.Verdict {
	return failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Fallback: true, Scope: failure.ScopeQuotaFamily,
		Cooldown: d, QuotaWindow: true}
}

func credits(status int) failure.Verdict {
	return failure.Verdict{Status: status, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
		Terminal: failure.TerminalCreditsExhausted}
}

// Bodies of the quota and rate-limit cases (ids made up).
const (
	// Gemini / Vertex RESOURCE_EXHAUSTED for a per-minute throttle, without RetryInfo.
	geminiResourceExhausted = `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`
	// The same with a short RetryInfo.
	geminiResourceExhaustedRetry = `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED",` +
		`"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"6s"}]}}`
	// A gateway's per-organization throttle.
	gatewayOrgQuota = `{"error":{"message":"organization quota exceeded, please slow down","type":"rate_limit_error"}}`
	// Gemini's boilerplate without a metric or a hint.
	geminiBoilerplate = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED"}}`
	// Vertex per-minute and per-day quota metrics.
	vertexPerMinute = `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-2.0-flash. Please submit a quota increase request.","status":"RESOURCE_EXHAUSTED"}}`
	vertexPerDay    = `{"error":{"code":429,"message":"Quota exceeded for quota metric 'Generate Content API requests per day' and limit 'GenerateContent request limit per day' of service 'generativelanguage.googleapis.com'.","status":"RESOURCE_EXHAUSTED"}}`
	// Long-period caps named in words.
	monthlyQuota     = `{"error":{"message":"You have exceeded your monthly quota for this API key.","type":"quota_error"}}`
	openRouterPerDay = `{"error":{"message":"Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day","code":429}}`
	cloudflareDaily  = `{"errors":[{"message":"you have used up your daily free allocation of 10,000 neurons, please upgrade to Cloudflare's Workers Paid plan if you would like to continue usage.","code":4006}],"success":false}`
	// Subscription usage limits (Claude, Codex, Ollama Cloud).
	claudeUsageLimit   = `{"type":"error","error":{"type":"rate_limit_error","message":"You've reached your usage limit. Your limit will reset at 5pm."}}`
	ollamaWeeklyLimit  = `{"error":"you (jdoe) have reached your weekly usage limit, upgrade for higher limits: https://ollama.com/upgrade"}`
	ollamaSessionLimit = `{"error":"you (jdoe) have reached your session usage limit, please wait or upgrade to continue"}`
)

func TestQuotaNeedsAPhraseNotWords(t *testing.T) {
	// guide §2 ("Een expliciete quota-body wint") and classify429: a 429 is quota exhaustion
	// only when the body names an exhausted quota; quota words in any order are also in
	// per-minute throttles, and a short upstream hint is a rate limit whatever the words.
	runCases(t, New(nil, nil), []classifyCase{
		{"Gemini 'Resource has been exhausted (e.g. check quota)' without a hint: rate limit", "gemini", apikey, 429, false, nil,
			geminiResourceExhausted, rateLimit(429)},
		{"the same with a 6 s RetryInfo: rate limit with the hint", "gemini", apikey, 429, false, nil,
			geminiResourceExhaustedRetry, testfixture.WithHint(rateLimit(429), 6*time.Second, failure.HintGoogleRetryInfo)},
		{"gateway 'organization quota exceeded': rate limit", "gateway", apikey, 429, false, nil, gatewayOrgQuota, rateLimit(429)},
		{"Gemini boilerplate without metric or hint: rate limit", "gemini", apikey, 429, false, nil, geminiBoilerplate, rateLimit(429)},
		{"Vertex per-minute quota metric: rate limit", "vertex", apikey, 429, false, nil, vertexPerMinute, rateLimit(429)},
		{"Vertex per-day quota metric: quota until UTC midnight", "vertex", apikey, 429, false, nil, vertexPerDay, quotaFor(12 * time.Hour)},
		{"generic quota words with a 2 h Retry-After: quota for that window", "gateway", apikey, 429, false,
			[][2]string{{"Retry-After", "7200"}}, gatewayOrgQuota,
			testfixture.WithHint(quotaFor(2*time.Hour), 2*time.Hour, failure.HintRetryAfter)},
		{"generic quota words with a 20 min Retry-After: rate limit", "gateway", apikey, 429, false,
			[][2]string{{"Retry-After", "1200"}}, gatewayOrgQuota,
			testfixture.WithHint(rateLimit(429), 20*time.Minute, failure.HintRetryAfter)},
		{"monthly quota in words: quota, long quota-text cooldown", "x", apikey, 429, false, nil, monthlyQuota, quotaFor(QuotaTextCooldown)},
		{"OpenRouter free-models-per-day: daily quota until UTC midnight", "openrouter", apikey, 429, false, nil, openRouterPerDay,
			quotaFor(12 * time.Hour)},
		{"Cloudflare daily free allocation: daily quota until UTC midnight", "cloudflare", apikey, 429, false, nil, cloudflareDaily,
			quotaFor(12 * time.Hour)},
		{"daily cap with a 30 s hint: the hint says it clears soon, rate limit", "mistral", apikey, 429, false,
			[][2]string{{"Retry-After", "30"}}, mistralDailyLimit, testfixture.WithHint(rateLimit(429), 30*time.Second, failure.HintRetryAfter)},
	})
}

func TestQuotaWordingOnA403IsAQuota(t *testing.T) {
	// guide §3: "429 / 403 / 402 — een quota- of entitlement-signaal". A 403 that names an
	// exhausted quota is quota_exhausted with its window, not a recoverable auth error; a
	// 403 without such wording stays one.
	quota403 := func(d time.Duration) failure.Verdict {
		v := quotaFor(d)
		v.Status = 403
		return v
	}
	runCases(t, New(nil, nil), []classifyCase{
		{"Google API 403 Daily Limit Exceeded: daily quota until UTC midnight", "google", apikey, 403, false, nil,
			`{"error":{"code":403,"message":"Daily Limit Exceeded. The quota will be reset at midnight Pacific Time (PT).","status":"PERMISSION_DENIED"}}`,
			quota403(12 * time.Hour)},
		{"403 monthly quota: the quota-text cooldown", "x", apikey, 403, false, nil, monthlyQuota, quota403(QuotaTextCooldown)},
		{"403 permission denied: recoverable auth error", "x", apikey, 403, false, nil,
			`{"error":{"message":"Permission denied for this project","status":"PERMISSION_DENIED"}}`,
			failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeQuotaFamily}},
	})
}

func TestExhaustedFreeTiersAreCreditsExhausted(t *testing.T) {
	// guide §2 (terminal credits_exhausted; CREDITS_EXHAUSTED_SIGNALS "free tier of the model
	// has been exhausted", "tier has been exhausted"), in each major provider's wording:
	// Alibaba Model Studio error codes AllocationQuota.FreeTierOnly and
	// AllocationQuota.FreeAllocatedQuotaExceeded, xAI's "used all available credits",
	// Hugging Face's "monthly included credits", and the common English and Chinese forms.
	cases := []struct {
		provider string // provider id
		status   int    // upstream status
		body     string // upstream body
	}{
		{"qwen", 403, `{"error":{"message":"The free tier of the model has been exhausted. If you wish to continue access the model on a paid basis, please disable the \"use free tier only\" mode in the management console.","type":"AllocationQuota.FreeTierOnly","code":"AllocationQuota.FreeTierOnly"}}`},
		{"qwen", 429, `{"error":{"message":"Free allocated quota exceeded.","code":"AllocationQuota.FreeAllocatedQuotaExceeded"}}`},
		{"qwen", 429, `{"code":"AllocationQuota.FreeTierOnly","message":"free tier only"}`},
		{"x", 429, `{"error":{"message":"You have exhausted your free tier quota for this month."}}`},
		{"x", 429, `{"error":{"message":"Free tier exhausted. Upgrade to continue."}}`},
		{"x", 429, `{"error":{"message":"Your free tier quota has been exhausted."}}`},
		{"x", 429, `{"error":{"message":"Your free quota has been exhausted, please recharge."}}`},
		{"x", 429, `{"error":{"message":"You are out of free credits."}}`},
		{"x", 403, `{"error":{"message":"Your free trial has ended. Add a payment method to continue."}}`},
		{"xai", 429, `{"code":"Some resource has been exhausted","error":"Your team 1a2b has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit."}`},
		{"huggingface", 402, `{"error":"You have exceeded your monthly included credits for Inference Providers. Subscribe to PRO to get 20x more monthly included credits."}`},
		{"zhipu", 429, `{"error":{"code":"1113","message":"免费额度已用完，请充值后继续使用。"}}`},
		{"moonshot", 429, `{"error":{"message":"免费额度已用尽","type":"exceeded_current_quota_error"}}`},
	}
	c := New(nil, nil)
	for _, tc := range cases {
		v, _ := c.Classify(Input{Provider: tc.provider, Profile: apikey, Status: tc.status, Body: []byte(tc.body), Now: now})
		if v != credits(tc.status) {
			t.Errorf("%s %d %s:\n got %+v\nwant credits_exhausted", tc.provider, tc.status, tc.body, v)
		}
	}
	// Gemini's per-minute free-tier metric names the tier but nothing exhausted it: a rate
	// limit, never terminal.
	if v, _ := c.Classify(Input{Provider: "gemini", Profile: apikey, Status: 429, Now: now, Body: []byte(
		`{"error":{"code":429,"message":"Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10","status":"RESOURCE_EXHAUSTED"}}`)}); v != rateLimit(429) {
		t.Errorf("Gemini free-tier per-minute metric: %+v, want a rate limit", v)
	}
}

func TestSubscriptionUsageLimitTextCoolsForTheQuotaWindow(t *testing.T) {
	// guide §7 "Lock op basis van egress-buckets": subscription quota text takes the
	// quota-text fallback (buildSubscriptionQuotaFallback, 1 hour), not the 5 s base; an
	// announced reset, however short, is the window (the text says the quota is spent).
	runCases(t, New(nil, nil), []classifyCase{
		{"Claude 'You've reached your usage limit': quota, 1 h", "claude", oauth, 429, false, nil, claudeUsageLimit, quotaFor(time.Hour)},
		{"Ollama Cloud weekly usage limit: quota, 1 h", "ollama-cloud", apikey, 429, false, nil, ollamaWeeklyLimit, quotaFor(time.Hour)},
		{"Ollama Cloud session usage limit: quota, 1 h", "ollama-cloud", apikey, 429, false, nil, ollamaSessionLimit, quotaFor(time.Hour)},
		{"usage limit with a 20 min Retry-After: quota until that reset", "claude", oauth, 429, false,
			[][2]string{{"retry-after", "1200"}}, claudeUsageLimit, testfixture.WithHint(quotaFor(20*time.Minute), 20*time.Minute, failure.HintRetryAfter)},
	})
	// The cooldown is a policy setting.
	c, err := NewWithOptions(nil, nil, Options{QuotaTextCooldown: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runCases(t, c, []classifyCase{
		{"configured quota-text cooldown", "claude", oauth, 429, false, nil, claudeUsageLimit, quotaFor(3 * time.Hour)},
	})
}

func TestDailyQuotaLocksUntilTheProvidersReset(t *testing.T) {
	// guide §4: quota_exhausted is "vergrendeld tot middernacht" — until the reset the
	// provider announces (a hint or a reset header), else midnight where the policy says
	// daily quotas reset (UTC by default). The clock stands at 12:00 UTC.
	shanghai := time.FixedZone("UTC+8", 8*3600)
	losAngeles := time.FixedZone("UTC-7", -7*3600)
	reset := strconv.FormatInt(now.Add(5*time.Hour).Unix(), 10)
	cases := []struct {
		name    string         // what the row shows
		loc     *time.Location // Options.QuotaResetLocation
		headers [][2]string    // upstream headers
		want    failure.Verdict
	}{
		{"no reset announced, UTC: midnight is 12 h away", nil, nil, quotaFor(12 * time.Hour)},
		{"no reset announced, UTC+8 (20:00 local): 4 h", shanghai, nil, quotaFor(4 * time.Hour)},
		{"no reset announced, UTC-7 (05:00 local): 19 h", losAngeles, nil, quotaFor(19 * time.Hour)},
		{"x-ratelimit-reset epoch 5 h ahead: that reset, whatever the zone", shanghai, [][2]string{{"x-ratelimit-reset", reset}},
			testfixture.WithHint(quotaFor(5*time.Hour), 5*time.Hour, failure.HintRateLimitReset)},
		{"Retry-After 3 h: that reset", nil, [][2]string{{"Retry-After", "10800"}},
			testfixture.WithHint(quotaFor(3*time.Hour), 3*time.Hour, failure.HintRetryAfter)},
	}
	for _, tc := range cases {
		c, err := NewWithOptions(nil, nil, Options{QuotaResetLocation: tc.loc})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := c.Classify(Input{Provider: "mistral", Profile: apikey, Status: 429, Headers: tc.headers, Body: []byte(mistralDailyLimit), Now: now})
		if v != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, v, tc.want)
		}
		if v.Transient() {
			t.Errorf("%s: a quota verdict must never be waited out by combo retry", tc.name)
		}
	}
}

func TestUntilMidnight(t *testing.T) {
	plus2 := time.FixedZone("UTC+2", 2*3600)
	cases := []struct {
		now  time.Time      // the clock
		loc  *time.Location // where the day ends
		want time.Duration  // time to the next midnight there
	}{
		{time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), nil, 12 * time.Hour},
		{time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC), time.UTC, 24 * time.Hour}, // at midnight: the next one
		{time.Date(2025, 6, 1, 23, 59, 59, 0, time.UTC), time.UTC, time.Second},
		{time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC), plus2, 23 * time.Hour}, // 01:00 on Jan 1 there
		{time.Date(2025, 6, 1, 21, 30, 0, 0, time.UTC), plus2, 30 * time.Minute},
	}
	for _, c := range cases {
		if got := UntilMidnight(c.now, c.loc); got != c.want {
			t.Errorf("UntilMidnight(%v, %v) = %v, want %v", c.now, c.loc, got, c.want)
		}
	}
}

func TestModelOnlyFailures(t *testing.T) {
	// guide "Foutopsporing": "Slechts één model faalt → model-lockout, niet
	// connection-cooldown". A 400/404/410 that names the missing model is the model's alone;
	// a bare 404 (a wrong base URL fails every model) is not.
	notFound := func(status int, modelOnly bool) failure.Verdict {
		return failure.Verdict{Status: status, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: modelOnly}
	}
	runCases(t, New(nil, nil), []classifyCase{
		{"OpenAI 404 model_not_found", "openai", apikey, 404, false, nil, openAIModelNotFound, notFound(404, true)},
		{"OpenAI-compatible 400 model_not_found", "together", apikey, 400, false, nil, openAIModelNotFound, notFound(400, true)},
		{"Azure 404 DeploymentNotFound", "azure", apikey, 404, false, nil,
			`{"error":{"code":"deployment_not_found","message":"The API deployment for this resource does not exist."}}`, notFound(404, true)},
		{"Gemini 404 model not found for API version", "gemini", apikey, 404, false, nil,
			`{"error":{"code":404,"message":"models/gemini-9 is not found for API version v1beta, or is not supported for generateContent.","status":"NOT_FOUND"}}`, notFound(404, true)},
		{"vLLM 404 model does not exist", "vllm", local, 404, false, nil,
			`{"object":"error","message":"The model ` + "`llama-9`" + ` does not exist.","type":"NotFoundError","code":404}`, notFound(404, true)},
		{"Anthropic 404 not_found_error about a model", "anthropic", apikey, 404, false, nil, anthropicNotFound, notFound(404, true)},
		{"Anthropic 404 not_found_error about a path: not the model's", "anthropic", apikey, 404, false, nil,
			`{"type":"error","error":{"type":"not_found_error","message":"Not Found"}}`, notFound(404, false)},
		{"bare 404 page: not the model's", "x", apikey, 404, false, nil, `404 page not found`, notFound(404, false)},
		{"Chinese 400 模型不存在", "glm", apikey, 400, false, nil, `{"error":{"code":"1211","message":"模型不存在，请检查模型代码。"}}`, notFound(400, true)},
	})
}

func TestThrottlingReportedAs400(t *testing.T) {
	// RATE_LIMIT_TEXT_PATTERNS (guide §7 notes the 400 branch classifies by its own
	// patterns): throttling wording on a 400 is a retriable rate limit with fallback, at
	// connection scope, never the breaker.
	want := failure.Verdict{Status: 400, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeConnection}
	runCases(t, New(nil, nil), []classifyCase{
		{"MiMo high-frequency non-compliant", "mimo", apikey, 400, false, nil,
			`{"error":{"message":"Detected high-frequency non-compliant requests from you.","code":"400"}}`, want},
		{"GLM high frequency", "glm", apikey, 400, false, nil,
			`{"error":{"code":"1214","message":"High frequency of requests detected, please try again later"}}`, want},
		{"non-compliant requests alone", "glm", apikey, 400, false, nil,
			`{"error":{"message":"Your account has sent non-compliant requests, please slow down"}}`, want},
		{"请求过于频繁", "glm", apikey, 400, false, nil, `{"error":{"message":"请求过于频繁，请稍后重试。"}}`, want},
	})
	v, _ := New(nil, nil).Classify(Input{Provider: "mimo", Profile: apikey, Status: 400, Now: now,
		Body: []byte(`Detected high-frequency non-compliant requests from you.`)})
	if !v.Transient() || !v.Fallback {
		t.Errorf("400 throttling must be transient with fallback: %+v", v)
	}
}

func TestConfiguredTripStatuses(t *testing.T) {
	// guide §1: the trip statuses are configurable (providerBreaker.tripStatuses); the
	// classifier counts the provider's own list, the default for everyone else.
	c, err := NewWithOptions(nil, nil, Options{TripStatuses: map[string][]int{
		"anthropic": {408, 500, 502, 503, 504, 529}, // 529 overloaded added
		"flaky":     {408, 502, 503, 504},           // 500 removed
	}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		provider string // provider id
		status   int    // upstream status
		body     string // upstream body
		want     bool   // expected CountBreaker
	}{
		{"anthropic", 529, anthropicOverloaded, true},
		{"anthropic", 500, anthropicAPIError, true},
		{"other", 529, anthropicOverloaded, false}, // the default list
		{"other", 500, anthropicAPIError, true},
		{"flaky", 500, openAIServerError, false},
		{"flaky", 502, cloudflareBadGateway, true},
		{"anthropic", 529, openAIInsufficientQuota, false}, // account-level, even on a trip status
	}
	for _, tc := range cases {
		v, _ := c.Classify(Input{Provider: tc.provider, Profile: apikey, Status: tc.status, Body: []byte(tc.body), Now: now})
		if v.CountBreaker != tc.want {
			t.Errorf("%s %d: CountBreaker %v, want %v (%+v)", tc.provider, tc.status, v.CountBreaker, tc.want, v)
		}
		if c.TripsBreaker(tc.provider, tc.status) != (tc.want || tc.body == openAIInsufficientQuota) {
			t.Errorf("%s %d: TripsBreaker disagrees", tc.provider, tc.status)
		}
	}
	for _, bad := range []int{399, 600, 401, 403, 429} {
		_, err := NewWithOptions(nil, nil, Options{TripStatuses: map[string][]int{"p": {500, bad}}})
		if err == nil || !strings.HasPrefix(err.Error(), "classify: ") || !strings.Contains(err.Error(), strconv.Itoa(bad)) {
			t.Errorf("trip status %d: got %v, want a classify error naming it", bad, err)
		}
	}
	if d := New(nil, nil); !d.TripsBreaker("any", 503) || d.TripsBreaker("any", 529) || len(policies.BreakerTripStatuses) != 5 {
		t.Errorf("default trip statuses changed")
	}
}

func TestQuotaAndCreditListsArePhrases(t *testing.T) {
	// A multi-fragment signal matches its words in any order, which is how per-minute
	// throttles became quota verdicts: these lists hold whole phrases only.
	for name, list := range map[string][]signal{
		"credit": creditSignals, "dailyQuota": dailyQuotaSignals, "quota": quotaSignals,
		"subscription": subscriptionSignals, "quotaWord": quotaWordSignals,
	} {
		for _, s := range list {
			if len(s) != 1 {
				t.Errorf("%s: signal %q is not one phrase", name, s)
			}
		}
	}
}

// Issue 19's bodies, in the issue's own words. The guide is silent on each; Spillway follows
// OmniRoute 3.7.9 (accountFallback.ts checkFallbackError, CREDITS_EXHAUSTED_SIGNALS,
// classify429).
const (
	alibabaFreeTier   = `The free tier of the model has been exhausted`
	dailyRateLimit    = `daily rate limit exceeded`
	paymentRequired   = `payment required`
	teapot            = `teapot`
	routeNotAllowed   = `not authorized for this route`
	geminiAPIDisabled = `Generative Language API has not been used in project 123 before or it is disabled`
)

func TestProviderErrorsTheGuideLeavesOpen(t *testing.T) {
	// issue 19 "Classification still wrong on real provider errors", each text bare and in
	// its provider's envelope.
	wrap := func(message string) string { return `{"error":{"message":"` + message + `"}}` }
	gemini := func(message string) string {
		return `{"error":{"code":403,"message":"` + message + `. Enable it by visiting https://console.developers.google.com/apis/api/generativelanguage.googleapis.com/overview?project=123 then retry.","status":"PERMISSION_DENIED"}}`
	}
	unknown := func(status int) failure.Verdict {
		return failure.Verdict{Status: status, Reason: failure.ReasonUnknown, Fallback: true, Scope: failure.ScopeExact}
	}
	daily := quotaFor(12 * time.Hour) // until UTC midnight: the clock stands at 12:00 UTC
	routeDenied := failure.Verdict{Status: 403, Reason: failure.ReasonBadRequest}
	projectSetup := failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeRequest}
	var cases []classifyCase
	for _, form := range []struct {
		name string
		body func(string) string
	}{{"bare", func(s string) string { return s }}, {"in an error envelope", wrap}} {
		cases = append(cases,
			classifyCase{"429 Alibaba free tier (" + form.name + "): credits exhausted, terminal", "qwen", apikey, 429, false, nil,
				form.body(alibabaFreeTier), credits(429)},
			classifyCase{"403 Alibaba free tier (" + form.name + "): credits exhausted, terminal", "qwen", apikey, 403, false, nil,
				form.body(alibabaFreeTier), credits(403)},
			classifyCase{"429 daily rate limit (" + form.name + "): a daily quota, until midnight", "x", apikey, 429, false, nil,
				form.body(dailyRateLimit), daily},
			classifyCase{"403 payment required (" + form.name + "): credits exhausted, terminal", "x", apikey, 403, false, nil,
				form.body(paymentRequired), credits(403)},
			classifyCase{"418 teapot (" + form.name + "): unknown, falls back, nothing terminal", "x", apikey, 418, false, nil,
				form.body(teapot), unknown(418)},
			classifyCase{"403 route not authorized (" + form.name + "): no fallback, nothing to blame", "fireworks", apikey, 403, false, nil,
				form.body(routeNotAllowed), routeDenied},
			classifyCase{"OAuth 403 route not authorized (" + form.name + ")", "fireworks", oauth, 403, false, nil,
				form.body(routeNotAllowed), routeDenied},
			classifyCase{"Gemini 403 API not used in project (" + form.name + "): falls back, the connection stays active", "gemini", apikey, 403, false, nil,
				form.body(geminiAPIDisabled), projectSetup},
		)
	}
	cases = append(cases,
		classifyCase{"Fireworks' own route text", "fireworks", apikey, 403, false, nil,
			wrap(`Fire Pass API keys are not authorized for this route.`), routeDenied},
		classifyCase{"Gemini's whole SERVICE_DISABLED body", "gemini", apikey, 403, false, nil, gemini(geminiAPIDisabled), projectSetup},
		classifyCase{"OAuth Gemini 403 API not used in project", "gemini-cli", oauth, 403, false, nil, gemini(geminiAPIDisabled), projectSetup},
	)
	runCases(t, New(nil, nil), cases)
}

func TestOneBodyManySignals(t *testing.T) {
	// The precedence when one body matches several signals (classify's package doc):
	// banned > credits > quota > (on a 403) the route and project texts > rate limit.
	runCases(t, New(nil, nil), []classifyCase{
		{"credits and a daily cap and a rate limit: credits", "x", apikey, 429, false, nil,
			alibabaFreeTier + "; " + dailyRateLimit + "; rate limit reached", credits(429)},
		{"payment required and a daily cap: credits", "x", apikey, 429, false, nil, paymentRequired + ", " + dailyRateLimit, credits(429)},
		{"a daily cap and a rate limit: quota", "x", apikey, 429, false, nil, dailyRateLimit + "; too many requests, rate limit", quotaFor(12 * time.Hour)},
		{"a daily cap with a 30 s hint: the hint says it clears soon, rate limit", "x", apikey, 429, false,
			[][2]string{{"Retry-After", "30"}}, dailyRateLimit, testfixture.WithHint(rateLimit(429), 30*time.Second, failure.HintRetryAfter)},
		{"403 payment required on a route not authorized: credits", "x", apikey, 403, false, nil,
			paymentRequired + "; " + routeNotAllowed, credits(403)},
		{"403 daily limit in a project not set up: quota", "x", apikey, 403, false, nil,
			geminiAPIDisabled + "; daily limit exceeded", func() failure.Verdict { v := quotaFor(12 * time.Hour); v.Status = 403; return v }()},
		{"403 banned and out of credits: banned", "x", apikey, 403, false, nil,
			"account has been suspended; " + paymentRequired, failure.Verdict{Status: 403, Reason: failure.ReasonBanned, Fallback: true,
				Scope: failure.ScopeConnection, Terminal: failure.TerminalBanned}},
	})
}

func TestUnlistedClientErrorsFallBack(t *testing.T) {
	// issue 19: a 4xx the classifier has no rule for falls back (reason unknown, the
	// connection's base cooldown, OmniRoute 3.7.9 checkFallbackError's last branch). The
	// statuses that describe the request as sent stay the client's own fault, no fallback:
	// 405 method, 406 Accept, 411 length, 412 precondition, 413 size, 414 URI, 415 media
	// type, 416 range, 417 expectation, 422 content (RFC 9110 §15.5.6–§15.5.21), 428
	// precondition required and 431 header size (RFC 6585 §3, §5).
	clientFaults := map[int]bool{405: true, 406: true, 411: true, 412: true, 413: true, 414: true, 415: true,
		416: true, 417: true, 422: true, 428: true, 431: true}
	// The statuses with a rule of their own (guide §2 and §3): 400, 401, 402, 403, 404,
	// 408, 410, 429.
	ruled := map[int]bool{400: true, 401: true, 402: true, 403: true, 404: true, 408: true, 410: true, 429: true}
	c := New(nil, nil)
	for status := 400; status <= 499; status++ {
		if ruled[status] {
			continue
		}
		v, _ := c.Classify(Input{Provider: "x", Profile: apikey, Status: status, Body: []byte(`{"error":{"message":"` + teapot + `"}}`), Now: now})
		want := failure.Verdict{Status: status, Reason: failure.ReasonUnknown, Fallback: true, Scope: failure.ScopeExact}
		if clientFaults[status] {
			want = failure.Verdict{Status: status, Reason: failure.ReasonBadRequest}
		}
		if v != want {
			t.Errorf("%d:\n got %+v\nwant %+v", status, v, want)
		}
	}
}
