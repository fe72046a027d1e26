package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// refusedURL is an upstream that refuses every connection at once (ECONNREFUSED on Linux):
// nothing can listen on port 0 (binding it picks another port), so unlike a port once
// listened on and closed, no other process can take it in the meantime.
const refusedURL = "http://127.0.0.1:0"

// probeServe runs the probe guest (hostsim's scriptable test module) behind serve with one
// worker, so the first stream's context id is 2. The fake OpenAI provider is the default
// cluster "up"; "dead" is a cluster nobody listens on.
func probeServe(t *testing.T, script string, timeout time.Duration) (url string, up *fakeprovider.Server, logs, access *logBuf) {
	t.Helper()
	p := probeServer(t, script, timeout, "")
	return p.url, p.up, p.logs, p.access
}

// probeEnv is a running probeServer.
type probeEnv struct {
	url          string
	srv          *Server
	up           *fakeprovider.Server // the fake behind "up" (nil when upURL was given)
	logs, access *logBuf
}

// probeServer is probeServe that also returns the Server; upURL, when set, replaces the
// fake behind "up".
func probeServer(t *testing.T, script string, timeout time.Duration, upURL string) *probeEnv {
	t.Helper()
	env := &probeEnv{logs: &logBuf{}, access: &logBuf{}}
	p, err := fakeprovider.New(fakeprovider.OpenAI, "up")
	if err != nil {
		t.Fatal(err)
	}
	if upURL == "" {
		env.up, err = fakeprovider.Start(p, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { env.up.Close() })
		upURL = env.up.URL
	}
	env.srv, err = New(Config{
		Wasm: hostsimtest.Guest(t, "probe"), PluginConfig: []byte(script),
		Clusters:       []Cluster{{"up", upURL}, {"dead", refusedURL}},
		DefaultCluster: "up", Workers: 1, Timeout: timeout, GuestLog: env.logs, AccessLog: env.access,
		Runtime: hostsimtest.Runtime(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(env.srv)
	t.Cleanup(func() {
		hs.Close()
		env.srv.Close()
	})
	env.url = hs.URL
	return env
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// requireLog waits for a guest log line (callouts answer on their own goroutine).
func requireLog(t *testing.T, logs *logBuf, want string) {
	t.Helper()
	if len(logs.await(want, 1)) == 0 {
		t.Fatalf("guest log lacks %q:\n%s", want, logs)
	}
}

// A paused request is resumed from proxy_on_http_call_response after a callout really
// went to the named cluster; then it goes upstream.
func TestCalloutToAClusterThenResume(t *testing.T) {
	url, up, logs, _ := probeServe(t, `
request_headers http_call up 2000 :method=GET,:path=/v1/models,:authority=up.example,x-from=probe -
request_headers ret 1
http_call_response get_header 6 :status
http_call_response get_buffer 4 0 16
http_call_response effective 2
http_call_response continue 0
`, 5*time.Second)
	status, body := get(t, url+"/v1/models")
	if status != 200 || !strings.Contains(body, `"object":"list"`) {
		t.Fatalf("%d %s", status, body)
	}
	requireLog(t, logs, "op get_header 6 :status -> Ok 200")
	requireLog(t, logs, `op get_buffer 4 0 16 -> Ok {"data":[{"crea`)
	rec := up.Requests()
	if len(rec) != 2 {
		t.Fatalf("upstream saw %d requests, want the callout and the request", len(rec))
	}
	if rec[0].Header.Get("x-from") != "probe" || rec[1].Header.Get("x-from") != "" {
		t.Errorf("callout headers %v, request headers %v", rec[0].Header, rec[1].Header)
	}
}

// Callout failures are reported as Envoy does: zero counts and a reset status, or the
// async client's 504 when the callout's own timeout passes first.
func TestCalloutFailures(t *testing.T) {
	tests := []struct {
		name string
		call string // the probe's http_call op
		want string // guest log line
	}{
		{"connection refused", "http_call dead 2000 :method=GET,:path=/v1/models,:authority=a -", "op get_status -> Ok 11 reset"},
		{"timeout", "http_call up 100 :method=GET,:path=/v1/models,:authority=a,x-fake-delay-ms=3000 -", "op get_header 6 :status -> Ok 504"},
		{"unknown cluster", "http_call elsewhere 0 :method=GET,:path=/,:authority=a -", "-> BadArgument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _, logs, _ := probeServe(t, "request_headers "+tt.call+`
http_call_response get_status
http_call_response get_header 6 :status
`, 5*time.Second)
			if status, body := get(t, url+"/v1/models"); status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			requireLog(t, logs, tt.want)
		})
	}
}

// A request paused until a tick fires on the real clock is resumed by it.
func TestTickResumesAPausedRequest(t *testing.T) {
	url, _, _, access := probeServe(t, `
configure tick_period 20
request_headers ret 1
tick effective 2
tick continue 0
`, 5*time.Second)
	if status, body := get(t, url+"/v1/models"); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if len(access.await("GET /v1/models 200", 1)) != 1 {
		t.Errorf("access log:\n%s", access)
	}
}

// A queue notification (asynchronous, on the real clock's dispatcher) resumes a request.
func TestQueueNotificationResumesAPausedRequest(t *testing.T) {
	url, _, logs, _ := probeServe(t, `
configure register_queue wake
request_headers ret 1
request_headers enqueue $queue go
queue_ready dequeue $queue
queue_ready effective 2
queue_ready continue 0
`, 5*time.Second)
	if status, body := get(t, url+"/v1/models"); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	requireLog(t, logs, "op dequeue $queue -> Ok go")
}

// A request the filter never resumes is answered 504 after the timeout.
func TestFilterThatNeverResumesTimesOut(t *testing.T) {
	url, up, _, access := probeServe(t, "request_headers ret 1\n", 200*time.Millisecond)
	status, body := get(t, url+"/v1/models")
	if status != 504 || !strings.Contains(body, `"code":"hostsim_timeout"`) {
		t.Fatalf("%d %s", status, body)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests", n)
	}
	if len(access.await("GET /v1/models 504", 1)) != 1 {
		t.Errorf("access log:\n%s", access)
	}
}

// A local reply from the filter is what the client gets; the upstream never sees the
// request.
func TestLocalReply(t *testing.T) {
	url, up, _, _ := probeServe(t, `
request_headers local_response 429 quota {"error":"slow"} retry-after=3,content-type=application/json
`, 5*time.Second)
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || string(b) != `{"error":"slow"}` || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("upstream saw %d requests", n)
	}
}

// A request answered before its body was read leaves the HTTP/1.1 connection usable: the
// next request on it is answered on the same connection. (With full duplex on, Go's server
// panics peeking for the next request when the handler left the body unread and its own
// close reads it to the end: golang/go#68560; serve closes the body itself.)
func TestEarlyAnswerKeepsTheConnection(t *testing.T) {
	url, _, _, _ := probeServe(t, `
request_headers local_response 429 quota {"error":"slow"} content-type=application/json
`, 5*time.Second)
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 64<<10) + `"}]}`
	var reused []bool
	for i := range 3 {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(c httptrace.GotConnInfo) { reused = append(reused, c.Reused) }}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 429 || string(b) != `{"error":"slow"}` {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if len(reused) != 3 || reused[0] || !reused[1] || !reused[2] {
		t.Errorf("connections reused: %v, want a new one then the same one twice", reused)
	}
}
