package classify

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/retryhint"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func FuzzClassify(f *testing.F) {
	for _, body := range []string{
		openAITokensPerMin, openAIInsufficientQuota, anthropicRateLimit, anthropicOverloaded, geminiPerMinute,
		geminiPerDay, glmConcurrency, glmConcurrencyEscaped, glmBalance, agentrouterUserQuota, agentrouterNoModel,
		cloudflareBadGateway, geminiResourceExhausted, claudeUsageLimit, vertexPerDay, `[{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"99999999999999999999s"}]}}]`,
		`{"error":{"code":{"nested":[1,2,3]},"type":["x"]}}`, "\\u\\ud800\\udc00\xff", "",
		// issue 19's texts
		alibabaFreeTier, dailyRateLimit, paymentRequired, teapot, routeNotAllowed, geminiAPIDisabled,
		alibabaFreeTier + "; " + dailyRateLimit + "; rate limit reached",
	} {
		for _, status := range []int{0, 200, 400, 401, 402, 403, 404, 418, 422, 429, 500, 503, 529, 999} {
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
		if v.Scope == failure.ScopeRequest && (!v.Fallback || v.CountBreaker || v.Cooldown != 0) {
			t.Fatalf("a request-scoped verdict must fall back and blame nothing: %+v", v)
		}
		if !v.Fallback && v.Scope != failure.ScopeNone {
			t.Fatalf("a verdict without fallback blames %q: %+v", v.Scope, v)
		}
		if v.CountBreaker && !(status == 0 || c.TripsBreaker(provider, v.Status)) {
			t.Fatalf("breaker counted status %d: %+v", v.Status, v)
		}
		if res.FromStatus != status || (!res.Restated && res.Status != status) || v.Status != res.Status {
			t.Fatalf("restatement inconsistent: %+v / %+v", res, v)
		}
		// A client that sent the whole error body (every phrase in it an echo) gets no
		// terminal state from its words: only Payment Required's own status is one.
		in.Sent = textscan.Sent{Body: body}
		if echoed, _ := c.Classify(in); echoed.Terminal != failure.TerminalNone && status != 402 {
			t.Fatalf("a body the client sent whole is terminal on status %d: %+v", status, echoed)
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

// echoRules are operator rules whose markers the echo fuzz plants too: a restatement and a
// provider error rule of a provider "acme".
func echoRules(t testing.TB) (*restate.Table, *errorrules.Catalogue) {
	rt, err := restate.New([]restate.Rule{{ID: "acme-slow", Provider: "acme", FromStatuses: []int{400, 403},
		ToStatus: 429, TextMarkers: []string{"slow down please"}}})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := errorrules.New([]errorrules.Rule{{ID: "acme-locked", Provider: "acme", Markers: []string{"account locked"},
		Reason: failure.ReasonBanned}})
	if err != nil {
		t.Fatal(err)
	}
	return rt, cat
}

// echoPhrases are the phrases that count as evidence (the package doc, "Echoes"): every
// fragment of the evidence signals and every rule's textMarker or marker, built-in and the
// operator's, and reset text a retry hint is read from. A phrase that holds narrowing wording or an exclude marker is left out: those
// count whoever wrote them, so echoing one may narrow the verdict, by design.
func echoPhrases(rt *restate.Table, cat *errorrules.Catalogue) []string {
	var phrases, narrowing []string
	for _, list := range evidenceSignals() {
		for _, s := range list {
			phrases = append(phrases, s...)
		}
	}
	for _, r := range rt.Rules() {
		phrases = append(phrases, r.TextMarkers...)
		narrowing = append(narrowing, r.ExcludeMarkers...)
	}
	for _, r := range append(errorrules.Builtin(), errorrules.Rule{Markers: []string{"account locked"}}) {
		phrases = append(phrases, r.Markers...)
		narrowing = append(narrowing, r.ExcludeMarkers...)
	}
	for _, list := range [][]signal{modelMissingSignals, routeDeniedSignals, projectSetupSignals, contextOverflowSignals, {{"model"}}} {
		for _, s := range list {
			narrowing = append(narrowing, s...)
		}
	}
	// Reset text, which the retry hint reads from the body (retryhint.FromText): a wait long
	// enough to turn quota wording on a 429 into a quota (QuotaScaleHint) and to cool a
	// connection for its longest.
	phrases = append(phrases, "try again in 86400s", "retry in 86399s", "Resets in 164h27m24s", "retry after 2 hours")
	kept := phrases[:0]
	for _, p := range phrases {
		if !slices.ContainsFunc(narrowing, func(n string) bool { return textscan.ContainsFold(p, n) }) {
			kept = append(kept, p)
		}
	}
	return kept
}

// FuzzClassifyEcho: planting a marker phrase in the request never changes the outcome from
// what the same error body gets with that phrase removed from it. The body is a provider's
// error whose message echoes the phrase between backticks, as OpenAI quotes a model name (a
// marker split between the provider's words and the echo is what the check cannot see: the
// package doc); the other body is the same message with the echo empty. Both are classified
// knowing what the client sent.
func FuzzClassifyEcho(f *testing.F) {
	rt, cat := echoRules(f)
	c := New(rt, cat)
	phrases := echoPhrases(rt, cat)
	for i, seed := range []struct {
		provider, message, typ, code string
		status                       int
	}{
		{"openai", "The model  does not exist or you do not have access to it.", "invalid_request_error", "model_not_found", 404},
		{"openai", "'' is not one of ['system', 'assistant', 'user', 'tool', 'function'] - 'messages.0.role'", "invalid_request_error", "", 400},
		{"openai", "You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", "insufficient_quota", 429},
		{"agentrouter", "用户额度不足, 剩余额度: ＄0.000000", "new_api_error", "insufficient_user_quota", 403},
		{"acme", "unknown tool ", "invalid_request", "", 400},
		{"gemini", "You exceeded your current quota. Please retry in 86399s.", "", "RESOURCE_EXHAUSTED", 429},
		{"anthropic", "Overloaded <now>", "overloaded_error", "", 529},
		{"codex", "Provided authentication token is expired.", "", "token_expired", 401},
	} {
		for j := range 4 {
			f.Add(seed.provider, seed.status, seed.message, len(seed.message)/2, seed.typ, seed.code, uint16(i*7+j*31))
		}
	}
	// Reset text echoed into quota wording: read, its day-long wait would make the 429 a quota.
	for _, planted := range []string{"try again in 86400s", "Resets in 164h27m24s"} {
		quota := "You exceeded your current quota, please check your plan and billing details."
		f.Add("openai", 429, quota, len(quota), "", "", uint16(slices.Index(phrases, planted)))
	}
	f.Fuzz(func(t *testing.T, provider string, status int, message string, at int, typ, code string, which uint16) {
		if len(message) > 4096 || len(typ) > 64 || len(code) > 64 {
			return // well under the scan cap, with room for the echo
		}
		phrase := phrases[int(which)%len(phrases)]
		at = min(max(at, 0), len(message))
		body := func(echo string) []byte {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			type errorObject struct {
				Message string `json:"message"`
				Type    string `json:"type,omitempty"`
				Code    string `json:"code,omitempty"`
			}
			_ = enc.Encode(struct {
				Error errorObject `json:"error"`
			}{errorObject{message[:at] + "`" + echo + "`" + message[at:], typ, code}})
			return b.Bytes()
		}
		sent := textscan.Sent{Body: []byte(`{"model":"gpt-5 ` + phrase + `","messages":[{"role":"user","content":"hi"}]}`)}
		in := Input{Provider: provider, Profile: apikey, Status: status, Now: now, Sent: sent}
		in.Body = body(phrase)
		echoed, echoedRes := c.Classify(in)
		in.Body = body("")
		removed, removedRes := c.Classify(in)
		if echoed != removed || echoedRes != removedRes {
			t.Fatalf("phrase %q echoed in %s:\n got %+v %+v\nwith it removed %+v %+v", phrase, body(phrase), echoed, echoedRes, removed, removedRes)
		}
	})
}

// echoRequest is a chat request of about 8 MiB (the default maxRequestBodyBytes) with escapes
// in every message, naming model last.
func echoRequest(model string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"messages":[`)
	msg := `{"role":"user","content":"Summarise the quarterly report, line by line.\nKeep the tables.\t\"Totals\" go last; caf\u00e9 receipts in EUR."},`
	for b.Len() < 8<<20 {
		b.WriteString(msg)
	}
	b.WriteString(`{"role":"user","content":"end"}],"model":"` + model + `"}`)
	return b.Bytes()
}

// BenchmarkClassifyEcho8MiB is the failure-path cost of the echo check on the largest
// default request: the probe's 404 echoing gpt-5-insufficient_quota, looked up in an 8 MiB
// body that names the model at its end (echoed: one pass, then model-not-found), and the
// control where the model is another (one pass, then terminal). The success path and a
// failure no marker matched never read the request.
func BenchmarkClassifyEcho8MiB(b *testing.B) {
	c := New(nil, nil)
	body := []byte(openAIModel404("gpt-5-insufficient_quota"))
	for _, tc := range []struct {
		name  string
		model string
		want  failure.Reason
	}{
		{"echoed", "gpt-5-insufficient_quota", failure.ReasonNotFound},
		{"not-sent", "gpt-5", failure.ReasonCreditsExhausted},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := Input{Provider: "openai", Profile: apikey, Status: 404, Now: now, Body: body,
				Sent: textscan.Sent{Body: echoRequest(tc.model)}}
			b.ReportAllocs()
			for b.Loop() {
				if v, _ := c.Classify(in); v.Reason != tc.want {
					b.Fatal(v)
				}
			}
		})
	}
}

// BenchmarkClassifyEchoWorstCase8MiB is the bound: an error body that echoes every evidence
// phrase back, each of them sent at the end of an 8 MiB request, so every look-up reads the
// whole request until textscan.MaxEchoScanBytes is spent.
func BenchmarkClassifyEchoWorstCase8MiB(b *testing.B) {
	rt, cat := echoRules(b)
	c := New(rt, cat)
	phrases := strings.Join(echoPhrases(rt, cat), "; ")
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"message": "unknown model `" + phrases + "`"}})
	in := Input{Provider: "acme", Profile: apikey, Status: 403, Now: now, Body: body,
		Sent: textscan.Sent{Body: echoRequest(phrases)}}
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := c.Classify(in); v.Terminal != failure.TerminalNone {
			b.Fatal(v)
		}
	}
}
