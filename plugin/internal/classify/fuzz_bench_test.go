package classify

import (
	"bytes"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/retryhint"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func FuzzClassify(f *testing.F) {
	for _, body := range []string{
		openAITokensPerMin, openAIInsufficientQuota, anthropicRateLimit, anthropicOverloaded, geminiPerMinute,
		geminiPerDay, glmConcurrency, glmConcurrencyEscaped, glmBalance, agentrouterUserQuota, agentrouterNoModel,
		cloudflareBadGateway, geminiResourceExhausted, claudeUsageLimit, vertexPerDay, `[{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"99999999999999999999s"}]}}]`,
		`{"error":{"code":{"nested":[1,2,3]},"type":["x"]}}`, "\\u\\ud800\\udc00\xff", "",
	} {
		for _, status := range []int{0, 200, 400, 401, 402, 403, 404, 429, 500, 503, 529, 999} {
			f.Add("agentrouter", status, []byte(body), "Retry-After", "30")
		}
	}
	for _, body := range testfixture.HostileBodies() { // issue 18's nesting and duplicate-key families
		f.Add("openai", 429, body, "Retry-After", "30")
	}
	c := New(nil, nil)
	f.Fuzz(func(t *testing.T, provider string, status int, body []byte, name, value string) {
		profile := apikey
		if len(body)%2 == 1 {
			profile = oauth
		}
		in := Input{Provider: provider, Profile: profile, Status: status, Headers: [][2]string{{name, value}}, Body: body, Now: now}
		before := bytes.Clone(body)
		v, res := c.Classify(in)
		if !bytes.Equal(before, body) {
			t.Fatal("Classify modified the body")
		}
		// Invariants every consumer relies on.
		if status >= 100 && status < 400 {
			if v != (failure.Verdict{Status: status}) {
				t.Fatalf("non-failure status %d got %+v", status, v)
			}
			return
		}
		if v.Reason == failure.ReasonNone {
			t.Fatalf("failure without a reason: %+v", v)
		}
		if v.RetryHint < 0 || v.RetryHint > retryhint.MaxDelay || (v.RetryHint > 0) != (v.HintSource != failure.HintNone) {
			t.Fatalf("hint out of range: %+v", v)
		}
		if v.Cooldown < 0 || (v.KeepBackoff && v.Reason != failure.ReasonConcurrencyLimited) {
			t.Fatalf("bad cooldown/backoff: %+v", v)
		}
		if v.Reason == failure.ReasonConcurrencyLimited && v.Cooldown != 0 && (v.Cooldown != v.RetryHint || v.HintSource == failure.HintRestatement) {
			t.Fatalf("concurrency cooldown is not the upstream hint: %+v", v)
		}
		if v.ModelOnly && (v.Scope != failure.ScopeModel || v.Terminal != failure.TerminalNone || v.CountBreaker) {
			t.Fatalf("model-only verdict blames more than the model: %+v", v)
		}
		if v.QuotaWindow && (v.Reason != failure.ReasonQuotaExhausted || v.Cooldown <= 0 || v.Cooldown > failure.MaxQuotaWindow) {
			t.Fatalf("quota window out of range: %+v", v)
		}
		if v.Terminal != failure.TerminalNone && v.Scope != failure.ScopeConnection {
			t.Fatalf("terminal state not on the connection: %+v", v)
		}
		if v.CountBreaker && !(status == 0 || c.TripsBreaker(provider, v.Status)) {
			t.Fatalf("breaker counted status %d: %+v", v.Status, v)
		}
		if res.FromStatus != status || (!res.Restated && res.Status != status) || v.Status != res.Status {
			t.Fatalf("restatement inconsistent: %+v / %+v", res, v)
		}
	})
}

// TestWorstCaseBodyIsBounded classifies the largest body the filter can be handed: a
// garbage body far over the scan cap, built to make every matcher work hard (near-miss
// prefixes of many signals, escapes that force decoding). It must finish, and the work must
// not depend on the part past the cap.
func TestWorstCaseBodyIsBounded(t *testing.T) {
	unit := []byte(`\u00e9concurren quot daily usag insufficien account has been ` + "\xe5\xb9" + `retry in 9x `)
	body := bytes.Repeat(unit, (4*textscan.MaxScanBytes)/len(unit))
	c := New(nil, nil)
	v, _ := c.Classify(Input{Provider: "agentrouter", Profile: apikey, Status: 429, Body: body, Now: now})
	if v.Reason != failure.ReasonRateLimit {
		t.Fatalf("garbage 429 classified as %+v", v)
	}
	capped, _ := c.Classify(Input{Provider: "agentrouter", Profile: apikey, Status: 429, Body: body[:textscan.MaxScanBytes], Now: now})
	if capped != v {
		t.Fatalf("bytes past the cap changed the verdict: %+v vs %+v", v, capped)
	}
}

func BenchmarkClassifyOpenAI429(b *testing.B) {
	c := New(nil, nil)
	in := Input{Provider: "openai", Profile: apikey, Status: 429, Now: now, Body: []byte(openAITokensPerMin),
		Headers: [][2]string{
			{"content-type", "application/json"}, {"x-request-id", "req_abc"},
			{"x-ratelimit-limit-requests", "500"}, {"x-ratelimit-remaining-requests", "499"}, {"x-ratelimit-reset-requests", "120ms"},
			{"x-ratelimit-limit-tokens", "30000"}, {"x-ratelimit-remaining-tokens", "0"}, {"x-ratelimit-reset-tokens", "1.91s"},
		}}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := c.Classify(in); v.Reason != failure.ReasonRateLimit {
			b.Fatal(v)
		}
	}
}

func BenchmarkClassifyGemini429(b *testing.B) {
	c := New(nil, nil)
	in := Input{Provider: "gemini", Profile: apikey, Status: 429, Now: now, Body: []byte(geminiPerMinute)}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := c.Classify(in); v.HintSource != failure.HintGoogleRetryInfo {
			b.Fatal(v)
		}
	}
}

func BenchmarkClassifyGLMConcurrency(b *testing.B) {
	c := New(nil, nil)
	in := Input{Provider: "glm", Profile: apikey, Status: 429, Now: now, Body: []byte(glmConcurrency)}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := c.Classify(in); v.Reason != failure.ReasonConcurrencyLimited {
			b.Fatal(v)
		}
	}
}

func BenchmarkClassifyAgentrouterRestated(b *testing.B) {
	c := New(nil, nil)
	in := Input{Provider: "agentrouter", Profile: apikey, Status: 403, Now: now, Body: []byte(agentrouterUserQuota)}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := c.Classify(in); v.Status != 429 {
			b.Fatal(v)
		}
	}
}

func BenchmarkClassifyWorstCaseBody(b *testing.B) {
	unit := []byte(`\u00e9concurren quot daily usag insufficien account has been ` + "\xe5\xb9" + `retry in 9x `)
	body := bytes.Repeat(unit, textscan.MaxScanBytes/len(unit)+1)
	c := New(nil, nil)
	in := Input{Provider: "agentrouter", Profile: apikey, Status: 429, Now: now, Body: body}
	b.ReportAllocs()
	for b.Loop() {
		c.Classify(in)
	}
}
