package serve

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// probeStream runs the probe guest behind serve (one worker: the first stream is context 2)
// with the fake OpenAI provider "up" as the default cluster, HTTP/1.1 and h2c in front;
// change adjusts the Config.
func probeStream(t *testing.T, script string, change func(*Config)) *probeEnv {
	t.Helper()
	env := &probeEnv{logs: &logBuf{}, access: &logBuf{}}
	p, err := fakeprovider.New(fakeprovider.OpenAI, "up")
	if err != nil {
		t.Fatal(err)
	}
	if env.up, err = fakeprovider.Start(p, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.up.Close() })
	cfg := Config{Wasm: hostsimtest.Guest(t, "probe"), PluginConfig: []byte(script),
		Clusters: []Cluster{{"up", env.up.URL}, {"empty", ""}}, DefaultCluster: "up", Workers: 1,
		Timeout: time.Minute, GuestLog: env.logs, AccessLog: env.access, Runtime: hostsimtest.Runtime(t)}
	if change != nil {
		change(&cfg)
	}
	if env.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(env.srv)
	hs.Config.Protocols = frontEndProtocols()
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		env.srv.Close()
	})
	env.url = hs.URL
	return env
}

const streamChatBody = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hello"}]}`

// sseRead posts body and reads the SSE answer: the time from the request to its first
// content event, and every event.
func sseRead(t *testing.T, client *http.Client, url, body string, header map[string]string) (first time.Duration, events []string, resp *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var cur strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return first, events, resp
		}
		if line == "\n" {
			ev := cur.String()
			if first == 0 && strings.Contains(ev, `"content":"Hello"`) {
				first = time.Since(start)
			}
			events = append(events, ev)
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
}

// A paced SSE stream reaches the client through serve as it does from the fake directly:
// the first content event comes while the fake is still streaming the rest (serve does not
// buffer), and its time to first token is of the same order as the fake's own.
func TestStreamTimeToFirstTokenMatchesTheUpstream(t *testing.T) {
	d := startDemo(t, nil)
	fake := d.fake(t, "fake-openai")
	fake.SetPacing(fakeprovider.Pacing{First: 150 * time.Millisecond, Between: 30 * time.Millisecond})
	direct, directEvents, _ := sseRead(t, http.DefaultClient, fake.URL+"/v1/chat/completions", streamChatBody, nil)
	fake.Reset()
	proxied, events, resp := sseRead(t, http.DefaultClient, d.URL()+"/v1/chat/completions", streamChatBody, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	requireSpillwayHeaders(t, resp.Header, "openai", "openai-a", "gpt-4o", "1")
	if len(events) != len(directEvents) || events[len(events)-1] != "data: [DONE]\n" {
		t.Fatalf("%d events through serve, %d direct; last %q", len(events), len(directEvents), events[len(events)-1])
	}
	sent := fake.Requests()[0].Sent
	if direct == 0 || proxied == 0 || len(sent) < 5 {
		t.Fatalf("first tokens: direct %v, proxied %v; fake sent %d parts", direct, proxied, len(sent))
	}
	// Ordering: the first token reached the client before the fake wrote its last event.
	if arrived := fake.Requests()[0].Start.Add(proxied); !arrived.Before(sent[len(sent)-1]) {
		t.Errorf("the first token arrived after the whole stream was sent: serve buffered it")
	}
	// Ratio: serve adds no more than a fraction of the model's own time to first token.
	if proxied > 3*direct {
		t.Errorf("time to first token %v through serve, %v direct", proxied, direct)
	}
}

// An SSE stream over h2c arrives event by event too.
func TestStreamOverH2C(t *testing.T) {
	d := startDemo(t, nil)
	d.fake(t, "fake-openai").SetPacing(fakeprovider.Pacing{})
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	_, events, resp := sseRead(t, h2, d.URL()+"/v1/chat/completions", streamChatBody, nil)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || len(events) < 5 || events[len(events)-1] != "data: [DONE]\n" {
		t.Fatalf("proto %s status %d, %d events", resp.Proto, resp.StatusCode, len(events))
	}
}

// A client that disconnects mid-stream resets the stream in the filter (on_log reads flag
// DC and downstream_remote_disconnect) and cancels the upstream call, which stops sending.
func TestDisconnectMidStreamResetsAndCancelsTheUpstream(t *testing.T) {
	p := probeStream(t, "log get_property response.flags\nlog get_property response.code_details", nil)
	p.up.SetPacing(fakeprovider.Pacing{First: 10 * time.Millisecond, Between: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/chat/completions", strings.NewReader(streamChatBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	for line, _ := r.ReadString('\n'); !strings.Contains(line, `"content":"Hello"`); line, _ = r.ReadString('\n') {
		if line == "" {
			t.Fatal("the stream ended before its first token")
		}
	}
	cancel()
	resp.Body.Close()
	requireLog(t, p.logs, "worker-0: op get_property response.flags -> Ok 0x0040000000000000")
	requireLog(t, p.logs, "worker-0: op get_property response.code_details -> Ok downstream_remote_disconnect")
	waitUntil(t, func() bool { return p.up.TotalStats().InFlight == 0 })
	if sent, total := len(p.up.Requests()[0].Sent), 17; sent >= total {
		t.Errorf("the upstream sent all %d parts: its call was not cancelled", sent)
	}
	requireOneLine(t, p.access, "client-gone")
	if l := p.access.lines("client-gone")[0]; !strings.Contains(l, "flags=DC details=downstream_remote_disconnect") {
		t.Errorf("access line %q", l)
	}
	requireEnded(t, p)
}

// requireOneLine waits for the line containing sub (woken by the writes) and fails unless
// exactly one does.
func requireOneLine(t *testing.T, l *logBuf, sub string) {
	t.Helper()
	if got := l.await(sub, 1); len(got) != 1 {
		t.Fatalf("%d lines contain %q, want 1:\n%s", len(got), sub, l)
	}
}

// waitUntil polls cond (state other goroutines reach and announce nowhere), bounded.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached within 10s")
}

// chunkedPost sends parts as a chunked request body, one write each, and returns the answer.
func chunkedPost(t *testing.T, url string, parts []string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		for _, p := range parts {
			if _, err := pw.Write([]byte(p)); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return postJSON(t, url, pr, header)
}

// Request and response bodies of many chunks arrive byte for byte, whether the filter
// streams them (Continue) or buffers them (Pause per chunk, continue at the end).
func TestBodiesArriveByteForByte(t *testing.T) {
	var parts []string
	for i := 0; i < 40; i++ {
		parts = append(parts, fmt.Sprintf(`"part-%02d-%s",`, i, strings.Repeat("x", i*37)))
	}
	reqBody := `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"parts":[` + strings.Join(parts, "") + `"end"]}`
	tests := []struct {
		name   string
		script string // the filter
	}{
		{"streamed", ""},
		{"buffered", `
configure tick_period 20
request_headers ret 1
request_body ret 1
response_headers ret 1
response_body ret 1
tick effective 2
tick continue 0
tick continue 1
tick effective 3
tick continue 0
tick continue 1
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := probeStream(t, tt.script, func(c *Config) { c.Timeout = 10 * time.Second })
			p.up.SetPacing(fakeprovider.Pacing{})
			var split []string
			for i := 0; i < len(reqBody); i += 97 {
				split = append(split, reqBody[i:min(i+97, len(reqBody))])
			}
			resp, body := chunkedPost(t, p.url+"/v1/chat/completions", split, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if got := p.up.Requests()[0].Body; !bytes.Equal(got, []byte(reqBody)) {
				t.Fatalf("upstream got %d bytes, want %d:\n%s", len(got), len(reqBody), got)
			}
			// The streamed response: the fake's stream of ~17 events, as the fake sent it.
			_, streamed := chunkedPost(t, p.url+"/v1/chat/completions", []string{streamChatBody}, nil)
			direct, err := http.Post(p.up.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamChatBody))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := io.ReadAll(direct.Body)
			direct.Body.Close()
			if normalizeIDs(streamed) != normalizeIDs(want) {
				t.Fatalf("stream through serve differs from the fake's:\n%s\n---\n%s", streamed, want)
			}
		})
	}
}

// normalizeIDs blanks the per-request parts of a fake's answer (ids, timestamps).
func normalizeIDs(b []byte) string {
	s := string(b)
	for _, key := range []string{`"id":"`, `"created":`} {
		for i := strings.Index(s, key); i >= 0; {
			j := i + len(key)
			k := j
			for k < len(s) && s[k] != '"' && s[k] != ',' {
				k++
			}
			s = s[:j] + s[k:]
			next := strings.Index(s[j:], key)
			if next < 0 {
				break
			}
			i = j + next
		}
	}
	return s
}

// allow_on_headers_stop_iteration on (default): body callbacks reach a filter that holds
// the request headers; off: they do not, and the request waits until serve's timeout.
func TestAllowOnHeadersStopIterationBothWays(t *testing.T) {
	script := `
request_headers ret 1
request_body log 2 body-seen
request_body ret 0
`
	on := probeStream(t, script, nil)
	on.up.SetPacing(fakeprovider.Pacing{})
	if status, _, body := post(t, on.url+"/v1/chat/completions", chatBody, nil); status != 200 {
		t.Fatalf("option on: %d %s", status, body)
	}
	requireLog(t, on.logs, "worker-0: body-seen")

	off := probeStream(t, script, func(c *Config) { c.WithoutHeadersStopIteration = true; c.Timeout = 300 * time.Millisecond })
	if status, _, body := post(t, off.url+"/v1/chat/completions", chatBody, nil); status != 504 || !strings.Contains(body, "hostsim_timeout") {
		t.Fatalf("option off: %d %s", status, body)
	}
	if strings.Contains(off.logs.String(), "body-seen") {
		t.Fatal("a body callback reached a filter stopped at its headers without the option")
	}
}

// The router's replies through serve: a cluster without endpoints (UH), an upstream reset
// mid-stream (the client's stream is cut, UC), a stalled stream ended by the idle timeout
// (UT), a connection reset before the answer (UC before headers).
func TestRouterFailuresThroughServe(t *testing.T) {
	// A filter that names the cluster without endpoints in filter state (and clears the route
	// cache, as Spillway's header edits do): the route's matcher picks it.
	empty := probeStream(t, "request_headers set_property spillway_target empty\nrequest_headers foreign clear_route_cache -", nil)
	status, _, body := post(t, empty.url+"/v1/chat/completions", chatBody, nil)
	if status != 503 || body != "no healthy upstream" {
		t.Errorf("no endpoints: %d %q", status, body)
	}
	requireOneLine(t, empty.access, "flags=UH details=no_healthy_upstream")

	p := probeStream(t, "", func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	p.up.SetPacing(fakeprovider.Pacing{})

	_, events, _ := sseRead(t, http.DefaultClient, p.url+"/v1/chat/completions", streamChatBody,
		map[string]string{"x-fake-scenario": "reset", "x-fake-after-events": "2"})
	if n := len(events); n != 3 || strings.Contains(strings.Join(events, ""), "[DONE]") {
		t.Errorf("reset stream: %d events %q", n, events)
	}
	requireOneLine(t, p.access, "reset(upstream_reset_after_response_started{connection_termination})")
	if l := p.access.lines("reset(upstream_reset_after_response_started")[0]; !strings.Contains(l, "flags=UC ") {
		t.Errorf("access line %q", l)
	}

	_, events, _ = sseRead(t, http.DefaultClient, p.url+"/v1/chat/completions", streamChatBody,
		map[string]string{"x-fake-scenario": "stall", "x-fake-after-events": "1"})
	if n := len(events); n != 2 {
		t.Errorf("stalled stream: %d events before the idle timeout", n)
	}
	requireOneLine(t, p.access, "flags=UT details=upstream_per_try_idle_timeout")

	status, _, body = post(t, p.url+"/v1/chat/completions", chatBody, map[string]string{"x-fake-scenario": "reset"})
	if status != 503 || !strings.HasPrefix(body, "upstream connect error or disconnect/reset before headers. reset reason: connection termination") {
		t.Errorf("reset before the answer: %d %q", status, body)
	}
	requireOneLine(t, p.access, "flags=UC details=upstream_reset_before_response_started{connection_termination}")
}

// Envoy's buffer limits: a request body the filter buffers past the limit is answered 413
// (request_payload_too_large), a buffered response body past it 500
// (response_payload_too_large), both without reaching the other side whole.
func TestBufferLimits(t *testing.T) {
	p := probeStream(t, "request_body ret 1", func(c *Config) { c.BufferLimit = 1024 })
	big := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`
	resp, body := chunkedPost(t, p.url+"/v1/chat/completions", []string{big[:1000], big[1000:2000], big[2000:]}, nil)
	if resp.StatusCode != 413 || string(body) != "Payload Too Large" {
		t.Fatalf("request over the limit: %d %q", resp.StatusCode, body)
	}
	if n := len(p.up.Requests()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	if len(p.access.await("413 ", 1)) != 1 || len(p.access.await("details=request_payload_too_large", 1)) != 1 {
		t.Errorf("access log:\n%s", p.access)
	}

	q := probeStream(t, "response_headers ret 1\nresponse_body ret 1", func(c *Config) { c.BufferLimit = 1024 })
	q.up.SetPacing(fakeprovider.Pacing{})
	status, _, got := post(t, q.url+"/v1/embeddings", `{"model":"e","input":"x","dimensions":512}`, nil)
	if status != 500 || got != "Internal Server Error" {
		t.Fatalf("response over the limit: %d %q", status, got)
	}
	if len(q.access.await("details=response_payload_too_large", 1)) != 1 {
		t.Errorf("access log:\n%s", q.access)
	}
}

// A client that goes away over h2c is recorded as Envoy records it: a stream reset
// (RST_STREAM, the connection stays) is DR with the stream's details unchanged; a closed
// connection is DC with downstream_remote_disconnect, as on HTTP/1.1.
func TestClientGoneOverH2C(t *testing.T) {
	d := startDemo(t, nil)
	d.fake(t, "fake-openai").SetPacing(fakeprovider.Pacing{Between: 50 * time.Millisecond})
	tests := []struct {
		name  string
		close bool   // close the connection (else cancel the request: RST_STREAM)
		want  string // the end of the access line
	}{
		{"stream reset", false, "flags=DR details=via_upstream"},
		{"connection closed", true, "flags=DC details=downstream_remote_disconnect"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conns []net.Conn
			var mu sync.Mutex
			var protocols http.Protocols
			protocols.SetUnencryptedHTTP2(true)
			dialer := &net.Dialer{}
			tr := &http.Transport{Protocols: &protocols, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err == nil {
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
				return c, err
			}}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", d.URL()+"/v1/chat/completions", strings.NewReader(streamChatBody))
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != 2 {
				t.Fatalf("proto %s", resp.Proto)
			}
			r := bufio.NewReader(resp.Body)
			for line, err := r.ReadString('\n'); !strings.Contains(line, `"content":"Hello"`); line, err = r.ReadString('\n') {
				if err != nil {
					t.Fatalf("the stream ended before its first token: %v", err)
				}
			}
			if tt.close {
				mu.Lock()
				for _, c := range conns {
					c.Close()
				}
				mu.Unlock()
			} else {
				cancel()
			}
			resp.Body.Close()
			lines := d.access.await("client-gone", i+1)
			if len(lines) != i+1 || !strings.HasSuffix(lines[i], " "+tt.want) {
				t.Errorf("access lines %q, want the last to end in %q", lines, tt.want)
			}
		})
	}
}
