package fakeprovider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func mustNew(t *testing.T, kind Kind) *Provider {
	t.Helper()
	p, err := New(kind, "fake-"+string(kind))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// do sends one request to p and returns the status, headers and decoded JSON body.
func do(t *testing.T, p *Provider, method, path, body string, header map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v: %s", method, path, err, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: content-type %q", method, path, ct)
	}
	return rec.Code, rec.Header(), out
}

// get walks a decoded JSON document: keys for objects, ints for arrays.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func TestNewRejectsUnknownKind(t *testing.T) {
	if _, err := New("gemini", "x"); err == nil || !strings.Contains(err.Error(), `unknown kind "gemini"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestSuccessShapes(t *testing.T) {
	tests := []struct {
		name   string
		kind   Kind   // which fake
		method string // request method
		path   string // request path
		body   string // request body
		want   map[string]any
		// checks are JSON paths that must hold a value (non-nil) in the answer
		checks [][]any
	}{
		{
			name: "chat completion", kind: OpenAI, method: "POST", path: "/v1/chat/completions",
			body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			want: map[string]any{"object": "chat.completion", "model": "gpt-4o"},
			checks: [][]any{{"choices", 0, "message", "content"}, {"usage", "total_tokens"}, {"id"},
				{"choices", 0, "finish_reason"}},
		},
		{
			name: "legacy completion", kind: OpenAI, method: "POST", path: "/v1/completions",
			body:   `{"model":"gpt-3.5-turbo-instruct","prompt":"say hi"}`,
			want:   map[string]any{"object": "text_completion", "model": "gpt-3.5-turbo-instruct"},
			checks: [][]any{{"choices", 0, "text"}, {"usage", "prompt_tokens"}},
		},
		{
			name: "embeddings of two strings", kind: OpenAI, method: "POST", path: "/v1/embeddings",
			body:   `{"model":"text-embedding-3-small","input":["a","b"]}`,
			want:   map[string]any{"object": "list", "model": "text-embedding-3-small"},
			checks: [][]any{{"data", 0, "embedding", 7}, {"data", 1, "embedding", 0}, {"usage", "total_tokens"}},
		},
		{
			name: "embeddings of token arrays", kind: OpenAI, method: "POST", path: "/v1/embeddings",
			body: `{"model":"e","input":[[1,2],[3]],"dimensions":3}`,
			want: map[string]any{"object": "list"}, checks: [][]any{{"data", 1, "embedding", 2}},
		},
		{
			name: "responses", kind: OpenAI, method: "POST", path: "/v1/responses",
			body:   `{"model":"gpt-4o","input":"hello"}`,
			want:   map[string]any{"object": "response", "status": "completed", "model": "gpt-4o"},
			checks: [][]any{{"output", 0, "content", 0, "text"}, {"usage", "output_tokens"}},
		},
		{
			name: "models", kind: OpenAI, method: "GET", path: "/v1/models",
			want: map[string]any{"object": "list"}, checks: [][]any{{"data", 0, "id"}},
		},
		{
			name: "anthropic message", kind: Anthropic, method: "POST", path: "/v1/messages",
			body:   `{"model":"claude-sonnet-4","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
			want:   map[string]any{"type": "message", "role": "assistant", "model": "claude-sonnet-4", "stop_reason": "end_turn"},
			checks: [][]any{{"content", 0, "text"}, {"usage", "input_tokens"}, {"usage", "output_tokens"}},
		},
		{
			name: "anthropic models", kind: Anthropic, method: "GET", path: "/v1/models",
			want: map[string]any{"has_more": false}, checks: [][]any{{"data", 0, "id"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, out := do(t, mustNew(t, tt.kind), tt.method, tt.path, tt.body, nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, out)
			}
			for k, v := range tt.want {
				if out[k] != v {
					t.Errorf("%s = %v, want %v", k, out[k], v)
				}
			}
			for _, c := range tt.checks {
				if get(out, c...) == nil {
					t.Errorf("missing %v in %v", c, out)
				}
			}
		})
	}
}

func TestValidationErrorsUseTheProviderShape(t *testing.T) {
	tests := []struct {
		name      string
		kind      Kind   // which fake
		path      string // POST path
		body      string // request body
		wantParam any    // OpenAI error.param (nil: none)
		wantText  string // substring of the message
	}{
		{"openai bad JSON", OpenAI, "/v1/chat/completions", `{"model":`, nil, "could not parse the JSON body"},
		{"openai empty body", OpenAI, "/v1/chat/completions", ``, nil, "body is empty"},
		{"openai no model", OpenAI, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, "model", "model"},
		{"openai no messages", OpenAI, "/v1/chat/completions", `{"model":"m","messages":[]}`, "messages", "non-empty"},
		{"openai wrong type", OpenAI, "/v1/chat/completions", `{"model":3,"messages":[{}]}`, "model", "invalid type"},
		{"openai bad stream type", OpenAI, "/v1/chat/completions", `{"model":"m","messages":[{}],"stream":"yes"}`, "stream", "invalid type"},
		{"completion no prompt", OpenAI, "/v1/completions", `{"model":"m"}`, "prompt", "prompt"},
		{"embeddings empty input", OpenAI, "/v1/embeddings", `{"model":"m","input":""}`, "input", "empty"},
		{"embeddings object input", OpenAI, "/v1/embeddings", `{"model":"m","input":{"a":1}}`, "input", "must be"},
		{"embeddings bad dims", OpenAI, "/v1/embeddings", `{"model":"m","input":"x","dimensions":0}`, "dimensions", "dimensions"},
		{"embeddings bad format", OpenAI, "/v1/embeddings", `{"model":"m","input":"x","encoding_format":"hex"}`, "encoding_format", "encoding_format"},
		{"responses no input", OpenAI, "/v1/responses", `{"model":"m"}`, "input", "input"},
		{"anthropic bad JSON", Anthropic, "/v1/messages", `nope`, nil, "could not parse"},
		{"anthropic no max_tokens", Anthropic, "/v1/messages", `{"model":"c","messages":[{}]}`, nil, "max_tokens: Field required"},
		{"anthropic zero max_tokens", Anthropic, "/v1/messages", `{"model":"c","max_tokens":0,"messages":[{}]}`, nil, "greater than or equal to 1"},
		{"anthropic no messages", Anthropic, "/v1/messages", `{"model":"c","max_tokens":5}`, nil, "messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, out := do(t, mustNew(t, tt.kind), "POST", tt.path, tt.body, nil)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %v", status, out)
			}
			msg, _ := get(out, "error", "message").(string)
			if !strings.Contains(msg, tt.wantText) {
				t.Errorf("message %q does not contain %q", msg, tt.wantText)
			}
			if tt.kind == Anthropic {
				if out["type"] != "error" || get(out, "error", "type") != "invalid_request_error" {
					t.Errorf("not Anthropic's error shape: %v", out)
				}
				return
			}
			if get(out, "error", "type") != "invalid_request_error" || get(out, "error", "param") != tt.wantParam {
				t.Errorf("error = %v, want type invalid_request_error, param %v", out["error"], tt.wantParam)
			}
		})
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	p := mustNew(t, OpenAI)
	if status, _, _ := do(t, p, "POST", "/v1/messages", `{}`, nil); status != http.StatusNotFound {
		t.Errorf("anthropic path on the OpenAI fake: %d, want 404", status)
	}
	status, h, _ := do(t, p, "GET", "/v1/chat/completions", "", nil)
	if status != http.StatusMethodNotAllowed || h.Get("Allow") != "POST" {
		t.Errorf("GET chat: %d Allow=%q, want 405 POST", status, h.Get("Allow"))
	}
}

func TestHeaderFaults(t *testing.T) {
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name       string
		kind       Kind              // which fake
		header     map[string]string // fault headers
		wantStatus int
		wantType   string // error.type in the provider's shape
		wantRetry  string // Retry-After header
		wantMsg    string // substring of the message
	}{
		{"429 with retry-after", OpenAI, map[string]string{HeaderStatus: "429", HeaderRetryAfter: "7"}, 429, "rate_limit_error", "7", "429"},
		{"503 with message", OpenAI, map[string]string{HeaderStatus: "503", HeaderMessage: "overloaded now"}, 503, "server_error", "", "overloaded now"},
		{"anthropic 529", Anthropic, map[string]string{HeaderStatus: "529"}, 529, "overloaded_error", "", "529"},
		{"anthropic 401", Anthropic, map[string]string{HeaderStatus: "401"}, 401, "authentication_error", "", "401"},
		{"bad status value", OpenAI, map[string]string{HeaderStatus: "abc"}, 400, "invalid_request_error", "", HeaderStatus},
		{"status out of range", OpenAI, map[string]string{HeaderStatus: "700"}, 400, "invalid_request_error", "", "200-599"},
		{"bad delay", OpenAI, map[string]string{HeaderDelayMs: "-1"}, 400, "invalid_request_error", "", HeaderDelayMs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, body := "/v1/chat/completions", chat
			if tt.kind == Anthropic {
				path, body = "/v1/messages", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
			}
			status, h, out := do(t, mustNew(t, tt.kind), "POST", path, body, tt.header)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %v", status, tt.wantStatus, out)
			}
			if got := get(out, "error", "type"); got != tt.wantType {
				t.Errorf("error.type %v, want %s", got, tt.wantType)
			}
			if h.Get("Retry-After") != tt.wantRetry {
				t.Errorf("Retry-After %q, want %q", h.Get("Retry-After"), tt.wantRetry)
			}
			if msg, _ := get(out, "error", "message").(string); !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", msg, tt.wantMsg)
			}
		})
	}
}

func TestScriptAnswersInOrderThenRecovers(t *testing.T) {
	p := mustNew(t, OpenAI)
	p.Script(Fault{Status: 429, RetryAfter: "2"}, Fault{Status: 500, Message: "boom"})
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	want := []int{429, 500, 200}
	for i, w := range want {
		status, h, out := do(t, p, "POST", "/v1/chat/completions", chat, nil)
		if status != w {
			t.Fatalf("request %d: status %d, want %d (%v)", i, status, w, out)
		}
		if i == 0 && h.Get("Retry-After") != "2" {
			t.Errorf("scripted Retry-After %q", h.Get("Retry-After"))
		}
		if i == 1 && get(out, "error", "message") != "boom" {
			t.Errorf("scripted message: %v", out)
		}
	}
	if n := len(p.Requests()); n != 3 {
		t.Errorf("recorded %d requests, want 3", n)
	}
	p.Reset()
	if n := len(p.Requests()); n != 0 {
		t.Errorf("after Reset: %d requests", n)
	}
}

func TestRecordingIsBounded(t *testing.T) {
	p := mustNew(t, OpenAI)
	for i := 0; i < MaxRecorded+5; i++ {
		req := httptest.NewRequest("GET", "/v1/models?i="+string(rune('a'+i%26)), nil)
		req.Header.Set("x-n", strings.Repeat("x", i%3))
		p.ServeHTTP(httptest.NewRecorder(), req)
	}
	rs := p.Requests()
	if len(rs) != MaxRecorded {
		t.Fatalf("kept %d, want %d", len(rs), MaxRecorded)
	}
	// The oldest five went: the first kept one is request #5.
	if rs[0].Path != "/v1/models?i=f" {
		t.Errorf("oldest kept %q, want request 5", rs[0].Path)
	}
}

func TestEmbeddingsAreDeterministicUnitVectorsAndBase64Matches(t *testing.T) {
	p := mustNew(t, OpenAI)
	_, _, a := do(t, p, "POST", "/v1/embeddings", `{"model":"e","input":"same text","dimensions":16}`, nil)
	_, _, b := do(t, p, "POST", "/v1/embeddings", `{"model":"e","input":"same text","dimensions":16}`, nil)
	_, _, c := do(t, p, "POST", "/v1/embeddings", `{"model":"e","input":"same text","dimensions":16,"encoding_format":"base64"}`, nil)
	va, _ := get(a, "data", 0, "embedding").([]any)
	vb, _ := get(b, "data", 0, "embedding").([]any)
	if len(va) != 16 || len(vb) != 16 {
		t.Fatalf("dims %d/%d, want 16", len(va), len(vb))
	}
	var norm float64
	for i := range va {
		if va[i] != vb[i] {
			t.Fatalf("component %d differs: %v vs %v", i, va[i], vb[i])
		}
		norm += va[i].(float64) * va[i].(float64)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("norm² %v, want 1", norm)
	}
	raw, err := base64.StdEncoding.DecodeString(get(c, "data", 0, "embedding").(string))
	if err != nil || len(raw) != 64 {
		t.Fatalf("base64 embedding: %d bytes, %v", len(raw), err)
	}
	if want := base64Floats(embedding([]byte("same text"), 16)); get(c, "data", 0, "embedding") != want {
		t.Errorf("base64 does not encode the float vector")
	}
}

func TestDelayHonoured(t *testing.T) {
	p := mustNew(t, OpenAI)
	srv, err := Start(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
	req.Header.Set(HeaderDelayMs, "150")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(start) < 150*time.Millisecond {
		t.Errorf("status %d after %v, want 200 after ≥150ms", resp.StatusCode, time.Since(start))
	}
	if got := p.Requests()[0].Header.Get(HeaderDelayMs); got != "150" {
		t.Errorf("recorded header %q", got)
	}
}

// A scripted Until holds the answer until the test closes it; the answer then comes as
// the rest of the fault says, and the request is counted out before its last byte reaches
// the client (so a proxy that frees a slot on the answer's end can never make the fake
// see two at once). A client that gives up first gets nothing and is counted out too.
func TestUntilHoldsTheAnswerUntilReleased(t *testing.T) {
	p := mustNew(t, OpenAI)
	srv, err := Start(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	send := func(ctx context.Context) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(chat))
		req.Header.Set("Authorization", "Bearer key-h")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, err
	}

	release := make(chan struct{})
	p.ScriptFor("key-h", Fault{Until: release}, Fault{Until: release, Status: 429, RetryAfter: "3"})
	answered := make(chan int, 2)
	for range 2 {
		go func() {
			status, err := send(context.Background())
			if err != nil {
				t.Error(err)
			}
			answered <- status
		}()
	}
	waitFor(t, func() bool { return p.StatsFor("key-h").InFlight == 2 })
	select {
	case s := <-answered:
		t.Fatalf("answered %d before the release", s)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	got := map[int]int{}
	for i := range 2 {
		got[<-answered]++
		if n := p.StatsFor("key-h").InFlight; n > 1-i {
			t.Errorf("an answer ended with %d still counted in flight, want it counted out first", n)
		}
	}
	if got[200] != 1 || got[429] != 1 {
		t.Errorf("after the release: statuses %v, want one 200 and one 429", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	p.ScriptFor("key-h", Fault{Until: make(chan struct{})}) // never released
	gaveUp := make(chan error, 1)
	go func() { _, err := send(ctx); gaveUp <- err }()
	waitFor(t, func() bool { return p.StatsFor("key-h").InFlight == 1 })
	cancel()
	if err := <-gaveUp; err == nil {
		t.Error("a client that gave up got an answer")
	}
	waitFor(t, func() bool { return p.StatsFor("key-h").InFlight == 0 })
}
