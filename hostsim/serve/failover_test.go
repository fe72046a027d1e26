package serve

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// requireSpillwayHeaders checks the filter's x-spillway-* headers on a routed answer: the
// provider, connection and upstream model that answered, and the attempts it took.
func requireSpillwayHeaders(t *testing.T, h http.Header, provider, connection, model, attempts string) {
	t.Helper()
	for _, kv := range [][2]string{{"x-spillway-provider", provider}, {"x-spillway-connection", connection},
		{"x-spillway-model", model}, {"x-spillway-attempts", attempts}} {
		if got := h.Get(kv[0]); got != kv[1] {
			t.Errorf("%s = %q, want %q", kv[0], got, kv[1])
		}
	}
}

// A fault aimed at one key (x-fake-key-suffix) is answered by the next key: the client gets
// openai-b's 200 after 2 attempts, and the fake saw each key once.
func TestFaultAimedAtOneKeyFailsOver(t *testing.T) {
	d := startDemo(t, nil)
	status, h, body := post(t, d.URL()+"/v1/chat/completions", chatBody,
		map[string]string{"x-fake-scenario": "rate-limit", "x-fake-key-suffix": "key-a"})
	if status != 200 || !strings.Contains(body, "answering as gpt-4o") {
		t.Fatalf("%d %s", status, body)
	}
	requireSpillwayHeaders(t, h, "openai", "openai-b", "gpt-4o", "2")
	fake := d.fake(t, "fake-openai")
	if a, b := fake.StatsFor("demo-key-a").Requests, fake.StatsFor("demo-key-b").Requests; a != 1 || b != 1 {
		t.Errorf("requests: openai-a %d, openai-b %d; want one each", a, b)
	}
}

// post sends a JSON POST to the front end and returns the status, headers and body.
func post(t *testing.T, url, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	resp, b := postJSON(t, url, strings.NewReader(body), header)
	return resp.StatusCode, resp.Header, string(b)
}

// postJSON posts body as JSON with header and returns the answer, read whole.
func postJSON(t *testing.T, url string, body io.Reader, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return resp, b
}

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`

// An upstream slower than the timeout is answered 504; the stream is reset and the
// abandoned upstream call cancelled.
func TestSlowUpstreamTimesOut(t *testing.T) {
	d := startDemo(t, func(o *Options) { o.Timeout = 300 * time.Millisecond })
	status, _, body := post(t, d.URL()+"/v1/chat/completions", chatBody, map[string]string{"x-fake-delay-ms": "5000"})
	if status != 504 || !strings.Contains(body, `"code":"hostsim_timeout"`) || !strings.Contains(body, "300ms") {
		t.Fatalf("%d %s", status, body)
	}
	if len(d.access.await("POST /v1/chat/completions 504", 1)) != 1 {
		t.Errorf("access log:\n%s", d.access)
	}
	// The reset at the timeout ended the stream in its VM before the 504 went out (and
	// cancelled the upstream call); the next request is served.
	if n := d.Server.Host().LiveStreams(); n != 0 {
		t.Errorf("%d streams left in the VMs after the 504", n)
	}
	if status, _, body := post(t, d.URL()+"/v1/chat/completions", chatBody, nil); status != 200 {
		t.Errorf("next request: %d %s", status, body)
	}
}

// The README's Quickstart failover: a streamed request whose first key is rate-limited is
// answered by openai-b after 2 attempts as a stream (no Content-Length: the router's retry
// streams) by the demo (failover through the router is the default, on every supported
// release: a 429 decides on its status) and by the router example (its switches need
// -envoy-version 1.39), where the demo with via: callout answers with the whole stream as
// a local reply (its Content-Length).
func TestTheRouterExampleStreamsItsFailover(t *testing.T) {
	stream := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hello"}]}`
	fault := map[string]string{"x-fake-scenario": "rate-limit", "x-fake-key-suffix": "key-a"}
	calloutDemo, _ := routerDemo(t, "callout", 0)
	for _, tt := range []struct {
		name     string // the policy
		policy   string // its path ("" the demo)
		envoy    int    // Options.EnvoyMinor (0: the default, 1.36)
		streamed bool   // the failover's answer streams
	}{
		{"demo (the default)", "", 0, true},
		{"router example on 1.39", filepath.Join("..", "..", "policies", "examples", "router.yaml"), 39, true},
		{"demo with via: callout", calloutDemo, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := startDemo(t, func(o *Options) { o.PolicyPath, o.EnvoyMinor = tt.policy, tt.envoy })
			resp, body := postJSON(t, d.URL()+"/v1/chat/completions", strings.NewReader(stream), fault)
			if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			requireSpillwayHeaders(t, resp.Header, "openai", "openai-b", "gpt-4o", "2")
			if cl := resp.Header.Get("Content-Length"); (cl == "") != tt.streamed {
				t.Errorf("Content-Length %q: streamed %v, want %v", cl, cl == "", tt.streamed)
			}
			fake := d.fake(t, "fake-openai")
			if a, b := fake.StatsFor("demo-key-a").Requests, fake.StatsFor("demo-key-b").Requests; a != 1 || b != 1 {
				t.Errorf("requests: openai-a %d, openai-b %d; want one each", a, b)
			}
			// What the filter does not route still passes through to the default cluster
			// (under the example's crossCluster, a request without the filter state).
			models, err := http.Get(d.URL() + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			models.Body.Close()
			if models.StatusCode != 200 {
				t.Errorf("GET /v1/models: %d, want the default cluster's 200", models.StatusCode)
			}
		})
	}
}

// calloutCutPolicy: two keys on each built-in fake, failover by callout.
const calloutCutPolicy = `{"providers":[
 {"id":"openai","profile":"apikey","api":"openai","cluster":"fake-openai","connections":[
  {"id":"oa-1","credential":{"header":"authorization","value":"Bearer key-cut-oa-1"}},
  {"id":"oa-2","credential":{"header":"authorization","value":"Bearer key-cut-oa-2"}}]},
 {"id":"anthropic","profile":"apikey","api":"anthropic","cluster":"fake-anthropic","connections":[
  {"id":"an-1","credential":{"header":"x-api-key","value":"key-cut-an-1"}},
  {"id":"an-2","credential":{"header":"x-api-key","value":"key-cut-an-2"}}]}],
"routes":[{"model":"gpt-4o","targets":[{"provider":"openai"}]},{"model":"claude-sonnet-4","targets":[{"provider":"anthropic"}]}],
"resilience":{"failover":{"via":"callout"}}}`

// Issue 19: the fakes' own truncate scenario (a clean end without [DONE] or message_stop)
// on the key a failover callout goes to. The first key's rate limit sends the request to
// the second by callout; the client gets the second's content, then the error event the
// filter ends a cut stream with (code stream_truncated) in its API's shape, and the
// truncation is logged as a streamed one is.
func TestACalloutStreamTheFakeCutsEndsWithAnErrorEvent(t *testing.T) {
	d := startDemo(t, func(o *Options) { o.PolicyPath = writeFile(t, "cut.json", calloutCutPolicy) })
	cases := []struct {
		name, fake, path, body, first, spare, content string
		last                                          string // the client's last event, as the filter adds it
	}{
		{"chat completions", "fake-openai", "/v1/chat/completions", streamChatBody, "key-cut-oa-1", "key-cut-oa-2",
			`"content":"Hello"`, "data: [DONE]"},
		{"anthropic messages", "fake-anthropic", "/v1/messages",
			`{"model":"claude-sonnet-4","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`,
			"key-cut-an-1", "key-cut-an-2", `"text":"Hello"`, "event: error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := d.fake(t, c.fake)
			fake.SetPacing(fakeprovider.Pacing{})
			fake.ScriptFor(c.first, fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit})
			fake.ScriptFor(c.spare, fakeprovider.Fault{Scenario: fakeprovider.ScenarioTruncate})
			resp, got := postJSON(t, d.URL()+c.path, strings.NewReader(c.body), nil)
			if resp.StatusCode != 200 || resp.Header.Get("x-spillway-attempts") != "2" {
				t.Fatalf("%d after %s attempts: %s", resp.StatusCode, resp.Header.Get("x-spillway-attempts"), got)
			}
			events := strings.Split(strings.TrimSuffix(string(got), "\n\n"), "\n\n")
			if !strings.Contains(string(got), c.content) || !strings.Contains(string(got), "stream_truncated") ||
				!strings.HasPrefix(events[len(events)-1], c.last) {
				t.Fatalf("the client got:\n%s", got)
			}
			if n := fake.StatsFor(c.spare).Requests; n != 1 {
				t.Errorf("the spare asked %d times", n)
			}
		})
	}
	if got := d.logs.await("ended without its terminal event; the client got a stream_truncated error event", 2); len(got) != 2 {
		t.Fatalf("truncation warnings %q", got)
	}
}
