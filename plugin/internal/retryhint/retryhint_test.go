package retryhint

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

// Real-looking upstream bodies.
const (
	geminiPerMinute429   = testfixture.GeminiPerMinute429
	geminiStreamArray429 = `[{"error":{"code":429,"message":"Resource exhausted","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"86399s"}]}}]`
	openAIRateLimit429   = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29755, Requested 1200. Please try again in 1.91s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	codexUsageLimit      = testfixture.CodexUsageLimit
	antigravityQuota     = `{"error":{"code":429,"message":"Individual quota reached. Contact your administrator to enable overages. Resets in 164h27m24s.","status":"RESOURCE_EXHAUSTED"}}`
)

func TestFindSources(t *testing.T) {
	cases := []struct {
		name    string             // what the row shows
		headers [][2]string        // response headers
		body    string             // response body
		want    time.Duration      // expected delay
		source  failure.HintSource // expected source
	}{
		{"typed Google RetryInfo", nil, geminiPerMinute429, 38 * time.Second, failure.HintGoogleRetryInfo},
		{"Gemini streaming array", nil, geminiStreamArray429, 86399 * time.Second, failure.HintGoogleRetryInfo},
		{"RetryInfo as proto object", nil, `{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":{"seconds":12,"nanos":500000000}}]}}`, 12*time.Second + 500*time.Millisecond, failure.HintGoogleRetryInfo},
		{"untyped retryDelay in details", nil, `{"error":{"details":[{"retryDelay":"7s"}]}}`, 7 * time.Second, failure.HintBodyField},
		{"Retry-After seconds", [][2]string{{"Retry-After", "20"}}, `{}`, 20 * time.Second, failure.HintRetryAfter},
		{"Retry-After date", [][2]string{{"retry-after", "Sun, 01 Jun 2025 12:02:00 GMT"}}, ``, 2 * time.Minute, failure.HintRetryAfter},
		{"retry-after-ms wins over Retry-After", [][2]string{{"retry-after", "2"}, {"retry-after-ms", "1250"}}, ``, 1250 * time.Millisecond, failure.HintRetryAfter},
		{"bad retry-after-ms falls back to Retry-After", [][2]string{{"retry-after-ms", "soon"}, {"Retry-After", "3"}}, ``, 3 * time.Second, failure.HintRetryAfter},
		{"retry_after_ms field", nil, `{"error":{"message":"slow down"},"retry_after_ms":2500}`, 2500 * time.Millisecond, failure.HintBodyField},
		{"error.retry_after seconds", nil, `{"error":{"retry_after":7}}`, 7 * time.Second, failure.HintBodyField},
		{"ISO-8601 retryAfter", nil, `{"retryAfter":"PT1M30S"}`, 90 * time.Second, failure.HintBodyField},
		// Absolute times in body fields are hints like durations (guide §2: the upstream's
		// reset wins; checkFallbackError's ISO retry timestamps, #2321). The clock is 12:00 UTC.
		{"ISO-8601 timestamp retryAfter", nil, `{"retryAfter":"2025-06-01T12:05:00Z"}`, 5 * time.Minute, failure.HintBodyField},
		{"ISO-8601 timestamp with offset", nil, `{"error":{"retryAfter":"2025-06-01T14:30:00+02:00"}}`, 30 * time.Minute, failure.HintBodyField},
		{"ISO-8601 timestamp with fraction", nil, `{"retry_after":"2025-06-01T12:00:20.500Z"}`, 20*time.Second + 500*time.Millisecond, failure.HintBodyField},
		{"HTTP date retryAfter", nil, `{"retryAfter":"Sun, 01 Jun 2025 12:01:00 GMT"}`, time.Minute, failure.HintBodyField},
		{"reset_at timestamp", nil, `{"error":{"message":"quota exhausted","reset_at":"2025-06-01T18:00:00Z"}}`, 6 * time.Hour, failure.HintBodyField},
		{"resetAt timestamp", nil, `{"resetAt":"2025-06-01T12:10:00Z"}`, 10 * time.Minute, failure.HintBodyField},
		{"Codex resets_at epoch seconds", nil, `{"error":{"type":"usage_limit_reached","resets_at":1748782800}}`, time.Hour, failure.HintBodyField},
		{"reset_time epoch milliseconds", nil, `{"reset_time":1748779260000}`, time.Minute, failure.HintBodyField},
		{"timestamp in the past is no hint", nil, `{"retryAfter":"2025-06-01T11:00:00Z"}`, 0, failure.HintNone},
		{"past reset field falls through to the next field", nil, `{"reset_at":"2025-06-01T11:00:00Z","error":{"reset_at":"2025-06-01T12:00:30Z"}}`, 30 * time.Second, failure.HintBodyField},
		{"timestamp without a zone is no hint", nil, `{"retryAfter":"2025-06-01 12:05:00"}`, 0, failure.HintNone},
		{"retryAfter numeric string", nil, `{"error":{"retryAfter":"45"}}`, 45 * time.Second, failure.HintBodyField},
		{"negative body field is skipped", nil, `{"retry_after_ms":-5,"retry_after":4}`, 4 * time.Second, failure.HintBodyField},
		{"float exponent field is skipped", nil, `{"retry_after":1e3}`, 0, failure.HintNone},
		{"x-ratelimit-reset seconds", [][2]string{{"X-RateLimit-Reset", "30"}}, ``, 30 * time.Second, failure.HintRateLimitReset},
		{"x-ratelimit-reset epoch", [][2]string{{"x-ratelimit-reset", "1748779320"}}, ``, 2 * time.Minute, failure.HintRateLimitReset},
		{"x-ratelimit-reset-ms", [][2]string{{"x-ratelimit-reset-ms", "750"}}, ``, 750 * time.Millisecond, failure.HintRateLimitReset},
		{"anthropic RFC 3339 reset", [][2]string{{"anthropic-ratelimit-requests-reset", "2025-06-01T12:00:15Z"}}, ``, 15 * time.Second, failure.HintRateLimitReset},
		{"header beats body text", [][2]string{{"x-ratelimit-reset-tokens", "5s"}}, openAIRateLimit429, 5 * time.Second, failure.HintRateLimitReset},
		{"OpenAI body text", nil, openAIRateLimit429, 1910 * time.Millisecond, failure.HintBodyText},
		{"antigravity resets in", nil, antigravityQuota, MaxDelay, failure.HintBodyText},
		{"reset after text", nil, `{"error":{"message":"All accounts have exhausted their quota (reset after 2h30m14s)"}}`, 2*time.Hour + 30*time.Minute + 14*time.Second, failure.HintBodyText},
		{"retry after worded", nil, `too many requests, retry after 20 seconds`, 20 * time.Second, failure.HintBodyText},
		{"first trigger without duration is skipped", nil, `please try again in a moment; try again in 9s`, 9 * time.Second, failure.HintBodyText},
		{"Google typed beats Retry-After", [][2]string{{"Retry-After", "1"}}, geminiPerMinute429, 38 * time.Second, failure.HintGoogleRetryInfo},
		{"Retry-After beats body field", [][2]string{{"Retry-After", "1"}}, `{"retry_after_ms":9000}`, time.Second, failure.HintRetryAfter},
		{"no hint", [][2]string{{"content-type", "application/json"}}, `{"error":{"message":"bad"}}`, 0, failure.HintNone},
		{"zero Retry-After is no hint", [][2]string{{"Retry-After", "0"}}, ``, 0, failure.HintNone},
		{"Codex resets_in_seconds", nil, codexUsageLimit, 90 * time.Minute, failure.HintBodyField},
		{"HTML error page", nil, `<html><body><h1>429 Too Many Requests</h1></body></html>`, 0, failure.HintNone},
	}
	for _, c := range cases {
		got := Find(c.headers, []byte(c.body), now, nil)
		if got.Delay != c.want || got.Source != c.source {
			t.Errorf("%s: Find = %v/%d, want %v/%d", c.name, got.Delay, got.Source, c.want, c.source)
		}
		if got.Found() != (c.source != failure.HintNone) {
			t.Errorf("%s: Found() = %v", c.name, got.Found())
		}
	}
}

func TestRateLimitResetPrefersTheSpentLimit(t *testing.T) {
	cases := []struct {
		name    string        // what the row shows
		headers [][2]string   // OpenAI-style limit headers
		want    time.Duration // expected wait
	}{
		{"tokens spent, requests free", [][2]string{
			{"x-ratelimit-remaining-requests", "59"}, {"x-ratelimit-reset-requests", "1s"},
			{"x-ratelimit-remaining-tokens", "0"}, {"x-ratelimit-reset-tokens", "12s"},
		}, 12 * time.Second},
		{"requests spent, tokens free with a longer reset", [][2]string{
			{"x-ratelimit-remaining-requests", "0"}, {"x-ratelimit-reset-requests", "6s"},
			{"x-ratelimit-remaining-tokens", "4000"}, {"x-ratelimit-reset-tokens", "30s"},
		}, 6 * time.Second},
		{"both spent: the longer wait", [][2]string{
			{"X-RateLimit-Remaining-Requests", "0"}, {"X-RateLimit-Reset-Requests", "6s"},
			{"X-RateLimit-Remaining-Tokens", "0"}, {"X-RateLimit-Reset-Tokens", "30s"},
		}, 30 * time.Second},
		{"no remaining headers: the longer wait", [][2]string{
			{"x-ratelimit-reset-requests", "2s"}, {"x-ratelimit-reset-tokens", "9s"},
		}, 9 * time.Second},
		{"all limits claim room: the longer wait anyway", [][2]string{
			{"x-ratelimit-remaining-requests", "3"}, {"x-ratelimit-reset-requests", "2s"},
			{"x-ratelimit-remaining-tokens", "10"}, {"x-ratelimit-reset-tokens", "4s"},
		}, 4 * time.Second},
		{"garbage remaining counts as unknown", [][2]string{
			{"x-ratelimit-remaining-requests", "lots"}, {"x-ratelimit-reset-requests", "2s"},
			{"x-ratelimit-remaining-tokens", "10"}, {"x-ratelimit-reset-tokens", "4s"},
		}, 2 * time.Second},
	}
	for _, c := range cases {
		h := FromHeaders(c.headers, now)
		if h.Delay != c.want || h.Source != failure.HintRateLimitReset {
			t.Errorf("%s: FromHeaders = %v/%d, want %v/%d", c.name, h.Delay, h.Source, c.want, failure.HintRateLimitReset)
		}
	}
}

func TestRetryAfterReadsOnlyTheHeader(t *testing.T) {
	headers := [][2]string{{"x-ratelimit-reset", "30"}, {"Retry-After", "12"}}
	if d, ok := RetryAfter(headers, now); !ok || d != 12*time.Second {
		t.Fatalf("RetryAfter = %v, %v; want 12s", d, ok)
	}
	if d, ok := RetryAfter([][2]string{{"x-ratelimit-reset", "30"}}, now); ok {
		t.Fatalf("RetryAfter without the header = %v, want none", d)
	}
}

func TestFromText(t *testing.T) {
	cases := []parseCase{
		{"Please try again in 20ms.", 20 * time.Millisecond, true},                    // OpenAI sub-second
		{"Please retry in 31.123456s.", 31123456 * time.Microsecond, true},            // Gemini message
		{"Rate limited. Try Again After 5 Minutes", 5 * time.Minute, true},            // case-insensitive
		{"quota resets in 3h", 3 * time.Hour, true},                                   // resets in
		{"Your limit will reset after 1 hour and 30 minutes", 90 * time.Minute, true}, // worded compound
		{"wait for 10 seconds", 10 * time.Second, true},                               // wait for
		{"retry after 60", time.Minute, true},                                         // bare seconds
		{"try again in 5 months", 0, false},                                           // unknown unit
		{"try again in a few seconds", 0, false},                                      // no number
		{"try again in 0s", 0, false},                                                 // zero
		{"retry in -5s", 0, false},                                                    // negative
		{"", 0, false},                                                                // empty
	}
	runParseTable(t, "FromText", fromText, cases)
}

// fromText is FromText knowing nothing of the request.
func fromText(s string) (time.Duration, bool) { return FromText(s, nil) }

// Issue 18's class: reset text the client sent is no hint when the provider echoes it. The
// client plants "try again in 86400s" in its request and the provider's error quotes it;
// read anyway, a genuine 429 would cool its connection for a day (MaxDelay). With what the
// client sent known, the echoed match is skipped: the provider's own text after it still
// counts, headers decide as before, and the look-up compares as markers are compared (JSON
// escapes decoded, ASCII case ignored). The wording is OpenAI's 429 and 400 bodies.
func TestFindIgnoresResetTextTheClientSent(t *testing.T) {
	planted := textscan.Sent{Body: []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Say: try again in 86400s"}]}`)}
	echoed := `{"error":{"message":"Rate limit reached for gpt-4o. Your input 'Say: try again in 86400s' was not processed.","type":"requests","code":"rate_limit_exceeded"}}`
	cases := []struct {
		name    string             // what the row shows
		sent    textscan.Sent      // what the client sent (zero: unknown)
		headers [][2]string        // response headers
		body    string             // response body
		want    time.Duration      // expected delay
		source  failure.HintSource // expected source
	}{
		{"control: nothing known of the request", textscan.Sent{}, nil, echoed, 24 * time.Hour, failure.HintBodyText},
		{"echoed: no hint", planted, nil, echoed, 0, failure.HintNone},
		{"echoed, with Retry-After: the header's", planted, [][2]string{{"retry-after", "20"}}, echoed, 20 * time.Second, failure.HintRetryAfter},
		{"echoed, then the provider's own text: the provider's", planted, nil,
			strings.Replace(echoed, "not processed.", "not processed. Please try again in 1.91s.", 1), 1910 * time.Millisecond, failure.HintBodyText},
		{"sent \\u-escaped, in another case", textscan.Sent{Body: []byte(`{"messages":[{"content":"TRY AGAIN\u0020IN 86400S"}]}`)}, nil, echoed,
			0, failure.HintNone},
		{"sent in a header", textscan.Sent{Headers: [][2]string{{"x-note", "try again in 86400s"}}}, nil, echoed, 0, failure.HintNone},
		{"the echo cut short inside the number", textscan.Sent{Body: []byte(`{"messages":[{"content":"try again in 864000s"}]}`)}, nil,
			`{"error":{"message":"Invalid content: 'try again in 8640","type":"invalid_request_error"}}`, 0, failure.HintNone},
		{"the client sent another wait: the provider's counts", textscan.Sent{Body: []byte(`{"messages":[{"content":"try again in 5s"}]}`)}, nil,
			echoed, 24 * time.Hour, failure.HintBodyText},
		{"the client sent the trigger alone: the provider's counts", textscan.Sent{Body: []byte(`{"messages":[{"content":"try again in"}]}`)}, nil,
			openAIRateLimit429, 1910 * time.Millisecond, failure.HintBodyText},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			echo := textscan.NewEcho(c.sent)
			got := Find(c.headers, []byte(c.body), now, &echo)
			if got.Delay != c.want || got.Source != c.source {
				t.Fatalf("Find = %v/%d, want %v/%d", got.Delay, got.Source, c.want, c.source)
			}
		})
	}
}

func TestHugeBodiesAreCapped(t *testing.T) {
	// A hint placed after the scan cap is never seen, however valid.
	body := strings.Repeat("x", 70<<10) + " try again in 5s"
	if h := Find(nil, []byte(body), now, nil); h.Found() {
		t.Fatalf("hint beyond the scan cap was read: %+v", h)
	}
	if d, ok := FromText(body, nil); ok {
		t.Fatalf("FromText read beyond the cap: %v", d)
	}
	// The same hint inside the cap is found.
	if h := Find(nil, []byte("try again in 5s "+strings.Repeat("x", 70<<10)), now, nil); h.Delay != 5*time.Second {
		t.Fatalf("hint inside the cap: %+v", h)
	}
}

func FuzzFind(f *testing.F) {
	for _, seed := range []string{
		geminiPerMinute429, geminiStreamArray429, openAIRateLimit429, codexUsageLimit, antigravityQuota,
		`{"retry_after_ms":99999999999999999999999}`, `{"retryAfter":"PT99999999999999999999H"}`,
		`{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":{"seconds":-1,"nanos":-5}}]}}`,
		`try again in 1.` + strings.Repeat("9", 100) + `s`, `[[[[[[[[[[`, "\xff\xfe\x00",
	} {
		f.Add([]byte(seed), "Retry-After", "Sun, 01 Jun 2025 12:01:30 GMT")
		f.Add([]byte(seed), "x-ratelimit-reset-tokens", "1m30s")
	}
	for _, b := range testfixture.HostileBodies() { // issue 18's nesting and duplicate-key families
		f.Add(b, "Retry-After", "30")
	}
	f.Fuzz(func(t *testing.T, body []byte, name, value string) {
		headers := [][2]string{{name, value}, {"retry-after-ms", value}, {"x-ratelimit-remaining-tokens", value}}
		h := Find(headers, body, now, nil)
		if h.Found() != (h.Delay > 0) || h.Delay < 0 || h.Delay > MaxDelay {
			t.Fatalf("Find = %+v: delay must be in (0, MaxDelay] exactly when found", h)
		}
		for _, parse := range []func(string) (time.Duration, bool){
			ParseDuration, ParseISO8601, fromText,
			func(s string) (time.Duration, bool) { return ParseRetryAfter(s, now) },
			func(s string) (time.Duration, bool) { return ParseReset(s, now, false) },
		} {
			if d, ok := parse(value); ok != (d > 0) || d > MaxDelay {
				t.Fatalf("parser(%q) = %v, %v: out of range", value, d, ok)
			}
		}
	})
}

// FuzzFindEcho: planting reset text in the request never changes the hint from what the same
// error body gets with the echo removed. The body is a provider's error whose message quotes
// the planted text between backticks (a wait split between the provider's words and the
// echo is what the check cannot see: the package doc); the other body is the same message
// with the echo empty. Both are read knowing what the client sent, encoded as a client's
// JSON would be.
func FuzzFindEcho(f *testing.F) {
	for _, seed := range []struct{ message, planted string }{
		{"Rate limit reached for gpt-4o. Please try again in 1.91s.", "try again in 86400s"},
		{"You exceeded your current quota. Please retry in 38s.", "retry in 86399s"},
		{"Invalid value for 'stop'.", "Try Again After 5 Minutes"},
		{"Individual quota reached. Resets in 164h27m24s.", "resets in 2h30m14s"},
		{"The model does not exist.", "reset after 1 hour and 30 minutes"},
		{"slow down", "wait for 10 seconds, retry after 60"},
	} {
		f.Add(seed.message, len(seed.message)/2, seed.planted)
		f.Add(seed.message, 0, seed.planted)
	}
	f.Fuzz(func(t *testing.T, message string, at int, planted string) {
		if len(message) > 4096 || len(planted) > 512 {
			return // well under the scan cap, with room for the echo
		}
		at = min(max(at, 0), len(message))
		jsonOf := func(v any) []byte {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		body := func(echo string) []byte {
			type errorObject struct {
				Message string `json:"message"`
			}
			return jsonOf(struct {
				Error errorObject `json:"error"`
			}{errorObject{message[:at] + "`" + echo + "`" + message[at:]}})
		}
		sent := textscan.Sent{Body: jsonOf(map[string]any{"model": "gpt-4o",
			"messages": []map[string]string{{"role": "user", "content": planted}}})}
		e1, e2 := textscan.NewEcho(sent), textscan.NewEcho(sent)
		echoed, removed := Find(nil, body(planted), now, &e1), Find(nil, body(""), now, &e2)
		if echoed != removed {
			t.Fatalf("%q echoed in %s: %+v; with the echo removed %+v", planted, body(planted), echoed, removed)
		}
	})
}

func BenchmarkFindGoogleRetryInfo(b *testing.B) {
	body := []byte(geminiPerMinute429)
	b.ReportAllocs()
	for b.Loop() {
		if h := Find(nil, body, now, nil); h.Source != failure.HintGoogleRetryInfo {
			b.Fatal(h)
		}
	}
}

func BenchmarkFindOpenAIHeaders(b *testing.B) {
	body := []byte(openAIRateLimit429)
	headers := [][2]string{
		{"content-type", "application/json"},
		{"x-ratelimit-limit-requests", "10000"}, {"x-ratelimit-remaining-requests", "9999"},
		{"x-ratelimit-reset-requests", "6ms"}, {"x-ratelimit-limit-tokens", "30000"},
		{"x-ratelimit-remaining-tokens", "0"}, {"x-ratelimit-reset-tokens", "1.91s"},
	}
	b.ReportAllocs()
	for b.Loop() {
		if h := Find(headers, body, now, nil); h.Source != failure.HintRateLimitReset {
			b.Fatal(h)
		}
	}
}
