package fakeprovider

import (
	"bufio"
	"context"

	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve starts p on loopback with no pacing (tests that measure pacing set their own).
func serve(t *testing.T, p *Provider) *Server {
	t.Helper()
	p.SetPacing(Pacing{})
	s, err := Start(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// On the wire Anthropic's stream has a ping right after content_block_start, as Anthropic
// sends it (the SDK drops pings; e2e reads the stream with it).
func TestAnthropicPingAfterContentBlockStart(t *testing.T) {
	an := serve(t, mustNew(t, Anthropic))
	resp := rawStream(t, an, "/v1/messages", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stream":true}`, nil)
	b, _ := io.ReadAll(resp.Body)
	if i, j := strings.Index(string(b), "event: content_block_start\n"), strings.Index(string(b), "event: ping\ndata: {\"type\":\"ping\"}\n\n"); i < 0 || j < i {
		t.Fatalf("no ping after content_block_start:\n%s", b)
	}
}

// rawStream posts a streaming chat request and returns the response (the caller reads it).
func rawStream(t *testing.T, s *Server, path, body string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const streamChat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`

// readEvents reads n SSE events (blocks separated by a blank line).
func readEvents(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		if line == "\n" {
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return out
}

// Truncated, reset, stalled and heartbeat-only streams, read raw.
func TestBrokenStreams(t *testing.T) {
	oa := serve(t, mustNew(t, OpenAI))

	t.Run("truncated: a clean end without [DONE]", func(t *testing.T) {
		resp := rawStream(t, oa, "/v1/chat/completions", streamChat, map[string]string{HeaderScenario: "truncate", HeaderAfterEvents: "3"})
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read: %v (a truncated stream ends cleanly)", err)
		}
		// The role chunk and three content chunks, no finish chunk, no [DONE].
		if n := strings.Count(string(b), "data: "); n != 4 || strings.Contains(string(b), "[DONE]") || strings.Contains(string(b), `"stop"`) {
			t.Fatalf("%d events: %s", n, b)
		}
	})
	t.Run("reset after content", func(t *testing.T) {
		resp := rawStream(t, oa, "/v1/chat/completions", streamChat, map[string]string{HeaderScenario: "reset", HeaderAfterEvents: "1"})
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatalf("read the whole body %q: want the connection cut", b)
		}
		if !strings.Contains(string(b), `"content":"Hello"`) {
			t.Fatalf("before the reset: %q", b)
		}
	})
	t.Run("reset before any answer", func(t *testing.T) {
		req, _ := http.NewRequest("POST", oa.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{}]}`))
		req.Header.Set(HeaderScenario, "reset")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("got %d, want a connection error", resp.StatusCode)
		}
	})
	t.Run("stall after two events until the client goes", func(t *testing.T) {
		p := mustNew(t, OpenAI)
		s := serve(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions", strings.NewReader(streamChat))
		req.Header.Set(HeaderScenario, "stall")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		ev := readEvents(t, bufio.NewReader(resp.Body), 3) // the role chunk and two content chunks
		if !strings.Contains(ev[2], `"content":" from"`) {
			t.Fatalf("events %q", ev)
		}
		if st := p.TotalStats(); st.InFlight != 1 {
			t.Fatalf("in flight %d while stalled, want 1", st.InFlight)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, func() bool { return p.TotalStats().InFlight == 0 })
	})
	t.Run("heartbeats only", func(t *testing.T) {
		an := serve(t, mustNew(t, Anthropic))
		resp := rawStream(t, an, "/v1/messages", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stream":true}`,
			map[string]string{HeaderScenario: "heartbeat-only", HeaderEventDelayMs: "1"})
		for _, ev := range readEvents(t, bufio.NewReader(resp.Body), 3) {
			if ev != "event: ping\ndata: {\"type\":\"ping\"}\n" {
				t.Fatalf("event %q, want a ping", ev)
			}
		}
		resp2 := rawStream(t, oa, "/v1/chat/completions", streamChat, map[string]string{HeaderScenario: "heartbeat-only", HeaderEventDelayMs: "1"})
		for _, ev := range readEvents(t, bufio.NewReader(resp2.Body), 3) {
			if ev != ": keep-alive\n" {
				t.Fatalf("event %q, want a keep-alive comment", ev)
			}
		}
	})
}

// waitFor polls cond until it holds (bounded, for state another goroutine reaches).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("condition not reached within 10s")
}

// Pacing: events go out at least the pacing apart, the first after the time to first token.
func TestPacing(t *testing.T) {
	p := mustNew(t, OpenAI)
	s := serve(t, p)
	p.SetPacing(Pacing{First: 80 * time.Millisecond, Between: 20 * time.Millisecond})
	resp := rawStream(t, s, "/v1/chat/completions", streamChat, nil)
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	rec := p.Requests()[0]
	// Sent: headers, role chunk, content chunks..., finish chunk, [DONE].
	if len(rec.Sent) < 5 {
		t.Fatalf("sent %d parts", len(rec.Sent))
	}
	if d := rec.Sent[2].Sub(rec.Sent[1]); d < 80*time.Millisecond {
		t.Errorf("first content %v after the role chunk, want ≥ 80ms", d)
	}
	for i := 3; i < len(rec.Sent)-2; i++ {
		if d := rec.Sent[i].Sub(rec.Sent[i-1]); d < 20*time.Millisecond {
			t.Errorf("event %d %v after the previous, want ≥ 20ms", i, d)
		}
	}
	// A request's own x-fake-event-delay-ms overrides the pacing.
	p.Reset()
	resp = rawStream(t, s, "/v1/chat/completions", streamChat, map[string]string{HeaderScenario: "slow-stream", HeaderEventDelayMs: "30"})
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	rec = p.Requests()[0]
	if d := rec.Sent[2].Sub(rec.Sent[1]); d < 30*time.Millisecond {
		t.Errorf("slow stream's first gap %v, want ≥ 30ms", d)
	}
}

// Every error scenario answers as the provider would: status, error type and code, the
// text that names the condition, and the headers.
func TestErrorScenarios(t *testing.T) {
	tests := []struct {
		name     string
		kind     Kind
		scenario Scenario
		status   int
		typ      string // error.type
		code     any    // OpenAI error.code (nil: none)
		text     string // substring of error.message
		headers  []string
	}{
		{"openai rate limit", OpenAI, ScenarioRateLimit, 429, "rate_limit_error", "rate_limit_exceeded", "Rate limit reached",
			[]string{"Retry-After", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset"}},
		{"anthropic rate limit", Anthropic, ScenarioRateLimit, 429, "rate_limit_error", nil, "rate limit",
			[]string{"Retry-After", "Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Requests-Remaining"}},
		{"concurrency limit", OpenAI, ScenarioConcurrencyLimit, 429, "rate_limit_error", "rate_limit_exceeded", "Too many concurrent requests", nil},
		{"quota", OpenAI, ScenarioQuota, 429, "rate_limit_error", "daily_quota_exceeded", "daily quota", nil},
		{"unavailable", OpenAI, ScenarioUnavailable, 503, "server_error", nil, "unavailable", nil},
		{"anthropic overloaded", Anthropic, ScenarioOverloaded, 529, "overloaded_error", nil, "Overloaded", nil},
		{"openai overloaded", OpenAI, ScenarioOverloaded, 503, "server_error", nil, "overloaded", nil},
		{"agentrouter quota", OpenAI, ScenarioAgentrouterQuota, 403, "new_api_error", "insufficient_user_quota", "额度不足", nil},
		{"agentrouter no access", OpenAI, ScenarioAgentrouterNoAccess, 403, "new_api_error", "model_not_allowed", "无权访问模型 gpt-4o", nil},
		{"openai credits", OpenAI, ScenarioCredits, 429, "insufficient_quota", "insufficient_quota", "exceeded your current quota", nil},
		{"anthropic credits", Anthropic, ScenarioCredits, 400, "invalid_request_error", nil, "credit balance is too low", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, body := "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
			if tt.kind == Anthropic {
				path, body = "/v1/messages", `{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
			}
			status, h, out := do(t, mustNew(t, tt.kind), "POST", path, body, map[string]string{HeaderScenario: string(tt.scenario)})
			if status != tt.status {
				t.Fatalf("status %d, want %d: %v", status, tt.status, out)
			}
			if got := get(out, "error", "type"); got != tt.typ {
				t.Errorf("error.type %v, want %s", got, tt.typ)
			}
			if tt.kind == OpenAI && get(out, "error", "code") != tt.code {
				t.Errorf("error.code %v, want %v", get(out, "error", "code"), tt.code)
			}
			if msg, _ := get(out, "error", "message").(string); !strings.Contains(msg, tt.text) {
				t.Errorf("message %q does not contain %q", msg, tt.text)
			}
			for _, k := range tt.headers {
				if h.Get(k) == "" {
					t.Errorf("no %s header: %v", k, h)
				}
			}
		})
	}
	if _, _, out := do(t, mustNew(t, OpenAI), "POST", "/v1/chat/completions", `{}`, map[string]string{HeaderScenario: "bogus"}); !strings.Contains(get(out, "error", "message").(string), "unknown scenario") {
		t.Errorf("bad scenario: %v", out)
	}
}

// Scripts per credential go first; other credentials are served normally. Counts are per
// credential, with the most requests in flight at once.
func TestScriptsAndCountsPerCredential(t *testing.T) {
	p := mustNew(t, OpenAI)
	p.ScriptFor("key-a", Fault{Scenario: ScenarioRateLimit}, Fault{Scenario: ScenarioQuota})
	p.Script(Repeat(2, Fault{Scenario: ScenarioUnavailable})...)
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	for i, c := range []struct {
		key    string
		status int
	}{{"key-a", 429}, {"key-b", 503}, {"key-a", 429}, {"key-b", 503}, {"key-b", 200}, {"key-a", 200}} {
		if status, _, out := do(t, p, "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer " + c.key}); status != c.status {
			t.Fatalf("request %d (%s): %d, want %d: %v", i, c.key, status, c.status, out)
		}
	}
	if a, b := p.StatsFor("key-a"), p.StatsFor("key-b"); a.Requests != 3 || b.Requests != 3 || p.TotalStats().Requests != 6 {
		t.Fatalf("counts a=%+v b=%+v total=%+v", a, b, p.TotalStats())
	}
	if p.Requests()[0].Credential != "key-a" {
		t.Errorf("recorded credential %q", p.Requests()[0].Credential)
	}

	// Three requests held at once on x-api-key credentials.
	s := serve(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/models", nil)
			req.Header.Set("X-Api-Key", "key-c")
			req.Header.Set(HeaderScenario, "timeout")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, func() bool { return p.StatsFor("key-c").InFlight == 3 })
	cancel()
	wg.Wait()
	waitFor(t, func() bool { return p.StatsFor("key-c").InFlight == 0 })
	if st := p.StatsFor("key-c"); st.MaxInFlight != 3 || st.Requests != 3 {
		t.Fatalf("key-c %+v", st)
	}
}

// x-fake-key-suffix aims the headers at one credential.
func TestHeaderFaultsForOneKey(t *testing.T) {
	p := mustNew(t, OpenAI)
	h := map[string]string{HeaderStatus: "503", HeaderKeySuffix: "-b"}
	h["Authorization"] = "Bearer demo-key-a"
	if status, _, _ := do(t, p, "GET", "/v1/models", "", h); status != 200 {
		t.Fatalf("key a: %d, want 200", status)
	}
	h["Authorization"] = "Bearer demo-key-b"
	if status, _, _ := do(t, p, "GET", "/v1/models", "", h); status != 503 {
		t.Fatalf("key b: %d, want 503", status)
	}
}

// A scripted Pause stops a stream after AfterEvents content events until the test closes
// it: the client reads those events while the fake has sent nothing more (Sent is the
// headers, the role chunk and those events), and after the release the stream goes on as
// the fault says. A client that goes away during the pause is counted out.
func TestPauseHoldsAStreamUntilReleased(t *testing.T) {
	tests := []struct {
		name   string
		fault  Fault  // scripted, Pause set by the test
		before int    // events the client reads before the release
		sent   int    // parts the fake has sent meanwhile (its headers included)
		last   string // what the stream's last event says after the release
	}{
		// A normal stream held after its first content: the rest, then [DONE].
		{"after the first content", Fault{AfterEvents: 1}, 2, 3, "data: [DONE]"},
		// Held before any content: only the role chunk goes first.
		{"before any content", Fault{}, 1, 2, "data: [DONE]"},
		// An error-mid stream held at its fault: the error event comes after the release.
		{"at an error event", Fault{Scenario: ScenarioErrorMid, AfterEvents: 2}, 3, 4, `"error"`},
		// An error first: only the headers go before the release, then the error event.
		{"before an error first", Fault{Scenario: ScenarioErrorFirst}, 0, 1, `"error"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, OpenAI)
			s := serve(t, p)
			release := make(chan struct{})
			f := tt.fault
			f.Pause = release
			p.ScriptFor("k", f)
			resp := rawStream(t, s, "/v1/chat/completions", streamChat, nil)
			r := bufio.NewReader(resp.Body)
			readEvents(t, r, tt.before)
			// A part is noted just after it is flushed: at most tt.sent now, then exactly.
			if n := len(p.Requests()[0].Sent); n > tt.sent {
				t.Fatalf("the fake sent %d parts while paused, want %d", n, tt.sent)
			}
			waitFor(t, func() bool { return len(p.Requests()[0].Sent) >= tt.sent })
			if n := len(p.Requests()[0].Sent); n != tt.sent {
				t.Fatalf("the fake sent %d parts while paused, want %d", n, tt.sent)
			}
			close(release)
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
			if last := events[len(events)-1]; !strings.Contains(last, tt.last) {
				t.Errorf("last event %q, want %q", last, tt.last)
			}
		})
	}

	t.Run("the client goes away during the pause", func(t *testing.T) {
		p := mustNew(t, OpenAI)
		s := serve(t, p)
		p.ScriptFor("k", Fault{AfterEvents: 1, Pause: make(chan struct{})}) // never released
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions", strings.NewReader(streamChat))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readEvents(t, bufio.NewReader(resp.Body), 2)
		if st := p.StatsFor("k"); st.InFlight != 1 {
			t.Fatalf("in flight %d while paused, want 1", st.InFlight)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, func() bool { return p.StatsFor("k").InFlight == 0 })
	})
}
