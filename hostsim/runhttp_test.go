package hostsim_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

func echoUpstream(calls *int) hostsim.UpstreamFunc {
	return func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		if calls != nil {
			*calls++
		}
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200", "content-type", "text/plain"),
			BodyChunks: [][]byte{[]byte("echo:"), r.Body}}, nil
	}
}

// RunHTTP walks a request through the filter and the upstream and the response back.
func TestRunHTTPPassThrough(t *testing.T) {
	h := probe(t, `
request_headers add_header 0 x-route openai
request_body get_buffer 0 0 100
response_headers add_header 2 x-spillway-provider openai
response_body get_buffer 1 0 100
`, hostsim.WithUpstream(echoUpstream(nil)))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq, BodyChunks: [][]byte{[]byte("{\"a\":"), []byte("1}")}})
	if resp.StatusCode != 200 || string(resp.Body) != "echo:{\"a\":1}" {
		t.Fatalf("response %d %q", resp.StatusCode, resp.Body)
	}
	if v, _ := headerOf(resp.Upstream.Headers, "x-route"); v != "openai" {
		t.Fatalf("upstream headers %v", resp.Upstream.Headers)
	}
	if v, _ := headerOf(resp.Headers, "x-spillway-provider"); v != "openai" {
		t.Fatalf("response headers %v", resp.Headers)
	}
	requireTrace(t, h.Host, "worker-0", "cb request_body ctx=2 5 0", "cb request_body ctx=2 2 1",
		"cb response_headers", "cb response_body ctx=2 5 0", "cb response_body ctx=2 7 1",
		"cb log", "cb done", "cb delete")
}

// A paused request resumes when its callout returns; RunHTTP moves the virtual clock. Without
// allow_on_headers_stop_iteration the body waits with the headers (stop-all), so headers
// edited from the callout's callback reach the upstream.
func TestRunHTTPPauseForCalloutWithoutOption(t *testing.T) {
	h := probe(t, `
request_headers http_call auth 0 :method=GET,:path=/,:authority=auth -
request_headers ret 1
http_call_response effective 2
http_call_response add_header 0 x-authz ok
http_call_response continue 0
`, hostsim.WithUpstream(echoUpstream(nil)),
		hostsim.WithCalloutHandler(func(context.Context, *hostsim.Callout) *hostsim.CalloutResponse {
			return &hostsim.CalloutResponse{Headers: hdrs(":status", "200"), Delay: 200 * time.Millisecond}
		}), hostsim.WithoutAllowOnHeadersStopIteration())
	start := h.Clock().Now()
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Body: []byte("hi")})
	if resp.StatusCode != 200 || string(resp.Body) != "echo:hi" {
		t.Fatalf("response %+v", resp)
	}
	if v, _ := headerOf(resp.Upstream.Headers, "x-authz"); v != "ok" {
		t.Fatalf("headers edited while paused did not reach upstream: %v", resp.Upstream.Headers)
	}
	if d := h.Clock().Now().Sub(start); d != 200*time.Millisecond {
		t.Fatalf("virtual clock moved %v, want 200ms", d)
	}
}

// Local replies in RunHTTP: request phase (no upstream, own response callbacks run) and
// response phase (upstream answered, response replaced).
func TestRunHTTPLocalReplies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		script     string
		opts       []hostsim.Option
		wantStatus int
		wantBody   string
		wantUp     int  // upstream calls
		wantHeader bool // x-seen added by on_response_headers
	}{
		{"request phase", "request_headers local_response 429 queue_full full\nresponse_headers add_header 2 x-seen 1",
			nil, 429, "full", 0, true},
		{"response phase, headers held (StopIteration with allow_on_headers_stop_iteration)",
			"response_headers ret 1\nresponse_body ret 1\nresponse_body local_response 503 restated down\nresponse_headers add_header 2 x-seen 1",
			nil, 503, "down", 1, false},
		{"response phase, from on_response_headers",
			"response_headers local_response 503 restated down",
			nil, 503, "down", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			h := probe(t, tc.script, append(tc.opts, hostsim.WithUpstream(echoUpstream(&calls)))...)
			resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Body: []byte("x")})
			if resp.StatusCode != tc.wantStatus || string(resp.Body) != tc.wantBody || calls != tc.wantUp {
				t.Fatalf("got %d %q after %d upstream calls", resp.StatusCode, resp.Body, calls)
			}
			if _, ok := headerOf(resp.Headers, "x-seen"); ok != tc.wantHeader {
				t.Fatalf("x-seen present=%v, want %v: %v", ok, tc.wantHeader, resp.Headers)
			}
			if resp.LocalReply == nil {
				t.Fatal("local reply not reported")
			}
		})
	}
}

// Without allow_on_headers_stop_iteration a headers Pause stops all iteration, so a response
// body never reaches a filter that holds the response headers: the stream stalls.
func TestResponseHeadersPauseStopsBodyWithoutOption(t *testing.T) {
	h := probe(t, "response_headers ret 1", hostsim.WithUpstream(echoUpstream(nil)), hostsim.WithoutAllowOnHeadersStopIteration())
	_, err := h.Host.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq})
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("want a stall, got %v", err)
	}
	requireNoLine(t, h.Host, "worker-0", "cb response_body")
}

// A stream paused with nothing to resume it is reported, not waited on forever.
func TestRunHTTPStalled(t *testing.T) {
	h := probe(t, "request_headers ret 1", hostsim.WithUpstream(echoUpstream(nil)))
	_, err := h.Host.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq})
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("want a stalled error, got %v", err)
	}
}

// With a real clock, requests run concurrently across workers while callouts are answered
// on their own goroutines.
func TestRunHTTPRealClockConcurrent(t *testing.T) {
	var logs hostsimtest.Lines
	h3 := probe(t, `
request_headers http_call auth 0 :method=GET,:path=/,:authority=auth -
response_headers add_header 2 x-done 1
`, hostsim.WithRealClock(), hostsim.WithWorkers(2), hostsim.WithUpstream(
		func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
			return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Body: r.Body, Delay: 2 * time.Millisecond}, nil
		}),
		hostsim.WithCalloutHandler(func(context.Context, *hostsim.Callout) *hostsim.CalloutResponse {
			return &hostsim.CalloutResponse{Headers: hdrs(":status", "200"), Delay: time.Millisecond}
		}), hostsim.WithLogWriter(&logs))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	byVM := map[string]int{}
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := h3.Host.RunHTTP(ctx, &hostsim.Request{Headers: getReq, Body: []byte("b")})
			if err != nil {
				errs <- err
				return
			}
			if v, _ := headerOf(resp.Headers, "x-done"); v != "1" || string(resp.Body) != "b" {
				errs <- errors.New("bad response")
				return
			}
			mu.Lock()
			byVM[resp.VM]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if byVM["worker-0"] != 20 || byVM["worker-1"] != 20 {
		t.Fatalf("requests per worker %v", byVM)
	}
	// The requests did not wait for their callouts: every answer reaches its root, which
	// logs it, after the callout left the pending set.
	if n := len(logs.Wait("cb http_call_response", 40)); n != 40 {
		t.Fatalf("%d of 40 callouts answered", n)
	}
	if n := len(h3.PendingCallouts()); n != 0 {
		t.Fatalf("%d callouts never answered", n)
	}
	if errs := h3.AsyncErrors(); len(errs) > 0 {
		t.Fatal(errs)
	}
}
