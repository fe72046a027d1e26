package replies

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// errorBody is the parsed shape of every reply body.
type errorBody struct {
	Error struct {
		Message     string `json:"message"`
		Type        string `json:"type"`
		Code        string `json:"code"`
		Provider    string `json:"provider"`
		RetryAfter  *int64 `json:"retry_after"`
		ResetAt     string `json:"reset_at"`
		LimitBytes  int64  `json:"limit_bytes"`
		Diagnostics *struct {
			Excluded []struct {
				Provider          string `json:"provider"`
				Connection        string `json:"connection"`
				Model             string `json:"model"`
				Reason            string `json:"reason"`
				RetryAfterSeconds *int64 `json:"retryAfterSeconds"`
			} `json:"excluded"`
			Omitted int `json:"omitted"`
		} `json:"diagnostics"`
	} `json:"error"`
}

// parse decodes a reply body strictly: valid JSON, one value, nothing after it.
func parse(t *testing.T, body []byte) errorBody {
	t.Helper()
	var out errorBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, body)
	}
	if dec.More() {
		t.Fatalf("trailing data after the body: %s", body)
	}
	return out
}

// keyOrder returns the keys of the "error" object in the order they appear.
func keyOrder(t *testing.T, body []byte) []string {
	t.Helper()
	var outer struct {
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &outer); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(outer.Error))
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func header(r Reply, name string) (string, bool) {
	for _, h := range r.Headers {
		if h[0] == name {
			return h[1], true
		}
	}
	return "", false
}

func TestRepliesStatusCodeTypeAndHeaders(t *testing.T) {
	resetAt := time.Date(2026, 3, 1, 12, 0, 41, 300e6, time.UTC)
	tests := []struct {
		name       string
		reply      Reply
		status     int      // HTTP status
		code       string   // error.code
		typ        string   // error.type
		retryAfter string   // Retry-After header ("" = must be absent)
		bodyRetry  int64    // error.retry_after (0 = must be absent)
		inMessage  []string // fragments the message must contain
		keys       []string // keys of the error object, in order
		breaker    string   // x-spillway-breaker ("" = must be absent; issue 19)
	}{
		{
			name:       "cooling down",
			reply:      AllTargetsCoolingDown("gpt-4o", 1500*time.Millisecond, nil),
			status:     503,
			code:       "all_targets_cooling_down",
			typ:        TypeServiceUnavailable,
			retryAfter: "2", // 1.5 s rounds up
			bodyRetry:  2,
			inMessage:  []string{`"gpt-4o"`, "retry after 2s"},
			keys:       []string{"message", "type", "code", "retry_after", "diagnostics"},
		},
		{
			name:       "cooling down, no known wait",
			reply:      AllTargetsCoolingDown("gpt-4o", 0, nil),
			status:     503,
			code:       "all_targets_cooling_down",
			typ:        TypeServiceUnavailable,
			retryAfter: "",
			keys:       []string{"message", "type", "code", "diagnostics"},
		},
		{
			name:       "circuit open",
			reply:      ProviderCircuitOpen("openai", 30*time.Second),
			status:     503,
			code:       "provider_circuit_open",
			typ:        TypeServiceUnavailable,
			retryAfter: "30",
			bodyRetry:  30,
			inMessage:  []string{`"openai"`, "circuit open"},
			keys:       []string{"message", "type", "code", "provider", "retry_after"},
			breaker:    "open",
		},
		{
			name:      "no executable targets",
			reply:     NoExecutableTargets("claude-x"),
			status:    404,
			code:      "no_executable_targets",
			typ:       TypeInvalidRequest,
			inMessage: []string{`"claude-x"`},
			keys:      []string{"message", "type", "code"},
		},
		{
			name:       "rate limited",
			reply:      RateLimited("gemini-2.5-pro", 59*time.Second+time.Millisecond, resetAt),
			status:     429,
			code:       "rate_limit_error",
			typ:        TypeRateLimit,
			retryAfter: "60",
			bodyRetry:  60,
			inMessage:  []string{"rate limited", "retry after 60s"},
			keys:       []string{"message", "type", "code", "retry_after", "reset_at"},
		},
		{
			// guide §5 (maxQueueDepth): the refusal names the limit, where it applies and the
			// queue's real length (7 waiting under a limit of 5 after the limit was lowered).
			name:      "queue full",
			reply:     QueueFull("glm", "glm-a", "glm-5", 5, 7),
			status:    429,
			code:      "RATE_LIMIT_QUEUE_FULL",
			typ:       TypeRateLimit,
			inMessage: []string{`"glm"`, `"glm-a"`, `"glm-5"`, "7 waiting", "maxQueueDepth 5"},
			keys:      []string{"message", "type", "code", "provider", "connection", "model", "max_queue_depth", "queue_length"},
		},
		{
			name:      "queue timeout",
			reply:     QueueTimeout("glm", "glm-a", 30*time.Second),
			status:    429,
			code:      "RATE_LIMIT_QUEUE_TIMEOUT",
			typ:       TypeRateLimit,
			inMessage: []string{"30s"},
			keys:      []string{"message", "type", "code"},
		},
		{
			name:      "execution timeout",
			reply:     ExecutionTimeout("glm", "glm-a", 10*time.Minute),
			status:    504,
			code:      "RATE_LIMIT_EXECUTION_TIMEOUT",
			typ:       TypeTimeout,
			inMessage: []string{"10m0s"},
			keys:      []string{"message", "type", "code"},
		},
		{
			name:      "invalid request",
			reply:     InvalidRequest("request has no model"),
			status:    400,
			code:      "invalid_request",
			typ:       TypeInvalidRequest,
			inMessage: []string{"request has no model"},
			keys:      []string{"message", "type", "code"},
		},
		{
			name:      "too large",
			reply:     RequestTooLarge(8 << 20),
			status:    413,
			code:      "request_too_large",
			typ:       TypeInvalidRequest,
			inMessage: []string{"8388608 bytes"},
			keys:      []string{"message", "type", "code", "limit_bytes"},
		},
		{
			name:   "unauthorized",
			reply:  Unauthorized(),
			status: 401,
			code:   "unauthorized",
			typ:    TypeAuthentication,
			keys:   []string{"message", "type", "code"},
		},
		{
			name:   "forbidden",
			reply:  Forbidden(),
			status: 403,
			code:   "forbidden",
			typ:    TypePermission,
			keys:   []string{"message", "type", "code"},
		},
		{
			name:   "internal",
			reply:  Internal(),
			status: 500,
			code:   "internal_error",
			typ:    TypeServer,
			keys:   []string{"message", "type", "code"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.reply
			if r.Status != tc.status || r.Code != tc.code {
				t.Fatalf("status/code = %d %q, want %d %q", r.Status, r.Code, tc.status, tc.code)
			}
			if ct, _ := header(r, HeaderContentType); ct != ContentTypeJSON {
				t.Errorf("content-type = %q", ct)
			}
			if b, _ := header(r, "x-spillway-breaker"); b != tc.breaker {
				t.Errorf("x-spillway-breaker = %q, want %q", b, tc.breaker)
			}
			ra, has := header(r, HeaderRetryAfter)
			if tc.retryAfter == "" && has {
				t.Errorf("unexpected Retry-After %q", ra)
			}
			if tc.retryAfter != "" && ra != tc.retryAfter {
				t.Errorf("Retry-After = %q, want %q", ra, tc.retryAfter)
			}
			got := parse(t, r.Body)
			if got.Error.Code != tc.code || got.Error.Type != tc.typ {
				t.Errorf("body code/type = %q %q, want %q %q", got.Error.Code, got.Error.Type, tc.code, tc.typ)
			}
			if got.Error.Message == "" {
				t.Error("empty message")
			}
			for _, frag := range tc.inMessage {
				if !strings.Contains(got.Error.Message, frag) {
					t.Errorf("message %q lacks %q", got.Error.Message, frag)
				}
			}
			switch {
			case tc.bodyRetry == 0 && got.Error.RetryAfter != nil:
				t.Errorf("unexpected retry_after %d", *got.Error.RetryAfter)
			case tc.bodyRetry != 0 && (got.Error.RetryAfter == nil || *got.Error.RetryAfter != tc.bodyRetry):
				t.Errorf("retry_after = %v, want %d", got.Error.RetryAfter, tc.bodyRetry)
			}
			if keys := keyOrder(t, r.Body); strings.Join(keys, ",") != strings.Join(tc.keys, ",") {
				t.Errorf("keys = %v, want %v", keys, tc.keys)
			}
		})
	}
}

func TestRateLimitedResetAtIsRFC3339RoundedUp(t *testing.T) {
	resetAt := time.Date(2026, 3, 1, 13, 0, 41, 300e6, time.FixedZone("CET", 3600))
	got := parse(t, RateLimited("m", 10*time.Second, resetAt).Body)
	parsed, err := time.Parse(time.RFC3339, got.Error.ResetAt)
	if err != nil {
		t.Fatalf("reset_at %q: %v", got.Error.ResetAt, err)
	}
	// 12:00:41.3 UTC rounds up to 12:00:42Z, never earlier than the real reset.
	if want := time.Date(2026, 3, 1, 12, 0, 42, 0, time.UTC); !parsed.Equal(want) || !strings.HasSuffix(got.Error.ResetAt, "Z") {
		t.Errorf("reset_at = %q, want %s", got.Error.ResetAt, want.Format(time.RFC3339))
	}
	// A zero reset time leaves the field out.
	if got := parse(t, RateLimited("m", time.Second, time.Time{}).Body); got.Error.ResetAt != "" {
		t.Errorf("reset_at for zero time = %q", got.Error.ResetAt)
	}
}

func TestCoolingDownDiagnostics(t *testing.T) {
	excluded := []Excluded{
		{Provider: "gemini", Connection: "g-1", Model: "gemini-2.5-pro", Reason: "model_lockout", RetryAfter: 59500 * time.Millisecond},
		{Provider: "openai", Connection: "o-1", Model: "gpt-4o", Reason: "circuit_open", RetryAfter: 30 * time.Second},
		{Provider: "glm", Connection: "z-1", Model: "glm-5", Reason: "terminal"},
	}
	r := AllTargetsCoolingDown("combo", 30*time.Second, excluded)
	got := parse(t, r.Body)
	if got.Error.Diagnostics == nil {
		t.Fatal("no diagnostics")
	}
	ex := got.Error.Diagnostics.Excluded
	if len(ex) != len(excluded) {
		t.Fatalf("excluded = %d entries, want %d", len(ex), len(excluded))
	}
	wantSeconds := []int64{60, 30, 0} // rounded up; 0 = no timer
	for i, e := range excluded {
		g := ex[i]
		if g.Provider != e.Provider || g.Connection != e.Connection || g.Model != e.Model || g.Reason != e.Reason {
			t.Errorf("entry %d = %+v, want %+v", i, g, e)
		}
		if g.RetryAfterSeconds == nil || *g.RetryAfterSeconds != wantSeconds[i] {
			t.Errorf("entry %d retryAfterSeconds = %v, want %d", i, g.RetryAfterSeconds, wantSeconds[i])
		}
	}
	if got.Error.Diagnostics.Omitted != 0 {
		t.Errorf("omitted = %d", got.Error.Diagnostics.Omitted)
	}
	// The entry's keys come in a fixed order.
	if !bytes.Contains(r.Body, []byte(`{"provider":"gemini","connection":"g-1","model":"gemini-2.5-pro","reason":"model_lockout","retryAfterSeconds":60}`)) {
		t.Errorf("entry layout changed: %s", r.Body)
	}
}

func TestCoolingDownDiagnosticsAreBounded(t *testing.T) {
	excluded := make([]Excluded, MaxExcluded+7)
	for i := range excluded {
		excluded[i] = Excluded{Provider: "p", Connection: "c", Model: "m", Reason: "unavailable", RetryAfter: time.Second}
	}
	got := parse(t, AllTargetsCoolingDown("m", time.Second, excluded).Body)
	if n := len(got.Error.Diagnostics.Excluded); n != MaxExcluded {
		t.Errorf("listed %d, want %d", n, MaxExcluded)
	}
	if got.Error.Diagnostics.Omitted != 7 {
		t.Errorf("omitted = %d, want 7", got.Error.Diagnostics.Omitted)
	}
}

func TestClientTextIsEscapedAndClipped(t *testing.T) {
	hostile := "evil\"}\n\x00\u2028" + strings.Repeat("é", 500) + "\xff"
	r := NoExecutableTargets(hostile)
	got := parse(t, r.Body)
	if len(r.Body) > 700 {
		t.Errorf("body of %d bytes: client text not clipped", len(r.Body))
	}
	if !strings.Contains(got.Error.Message, `evil\"}\n\x00\u2028`) {
		t.Errorf("message lost the quoted prefix: %q", got.Error.Message)
	}
	if !strings.Contains(got.Error.Message, "…") {
		t.Errorf("clipped text not marked: %q", got.Error.Message)
	}
	if got.Error.Code != CodeNoExecutableTargets {
		t.Errorf("code = %q: the hostile text broke out of the message", got.Error.Code)
	}
}

func TestUnauthorizedChallenges(t *testing.T) {
	if v, ok := header(Unauthorized(), HeaderWWWAuthenticate); !ok || !strings.HasPrefix(v, "Bearer") {
		t.Errorf("www-authenticate = %q, %v", v, ok)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration // the wait
		want int64         // Retry-After seconds
	}{
		{in: -time.Second, want: 0},            // past: no wait known
		{in: 0, want: 0},                       // none
		{in: time.Nanosecond, want: 1},         // any positive wait is at least 1
		{in: time.Second, want: 1},             // exact
		{in: time.Second + 1, want: 2},         // rounded up
		{in: 86399 * time.Second, want: 86399}, // Gemini's daily quota hint
	}
	for _, tc := range tests {
		if got := RetryAfterSeconds(tc.in); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string // input
		max  int    // byte limit
		want string // clipped
	}{
		{in: "short", max: 10, want: "short"},
		{in: "abcdefghij", max: 10, want: "abcdefghij"}, // exactly at the limit
		{in: "abcdefghijk", max: 10, want: "abcdefg…"},  // 7 bytes + 3-byte ellipsis
		{in: "ééééé", max: 8, want: "éé…"},              // never splits a 2-byte rune
	}
	for _, tc := range tests {
		if got := clip(tc.in, tc.max); got != tc.want || len(got) > tc.max {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
