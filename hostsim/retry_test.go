package hostsim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/internal/manualclock"
)

// Context ids on worker-0 with an upstream filter: the downstream plugin's root is 1, the
// upstream plugin's root 2 (started second, cpp-host WasmBase::start), the first request's
// downstream stream 3 and its tries' upstream filter streams 4, 5, ...
const (
	downRoot, upRoot = "1", "2"
)

// probeUp starts the probe as both plugins: down as the downstream filter's configuration,
// up as the upstream filter's (root id "upstream").
func probeUp(t *testing.T, down, up string, opts ...hostsim.Option) *hostsimtest.Host {
	t.Helper()
	all := append([]hostsim.Option{hostsim.WithUpstreamFilter("upstream", []byte(strings.TrimSpace(up)))}, opts...)
	return probe(t, down, all...)
}

// tries records what each try brought to the upstream, and answers by attempt; an answer
// with a Reset and no headers is a reset before the response (the UpstreamFunc's error).
type tries struct {
	mu   sync.Mutex
	reqs []*hostsim.UpstreamRequest
	at   []time.Time
}

func (tr *tries) upstream(clock hostsim.Clock, answer func(n uint32) *hostsim.UpstreamResponse) hostsim.UpstreamFunc {
	return func(_ context.Context, req *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		tr.mu.Lock()
		tr.reqs = append(tr.reqs, req)
		tr.at = append(tr.at, clock.Now())
		tr.mu.Unlock()
		resp := answer(req.Attempt)
		if resp.Headers == nil && resp.Reset != nil { // a reset before the response
			return nil, resp.Reset
		}
		return resp, nil
	}
}

func status(code string) *hostsim.UpstreamResponse {
	return &hostsim.UpstreamResponse{Headers: hdrs(":status", code), Body: []byte("upstream " + code)}
}

// fixedRandom is a back-off random source that always draws v.
type fixedRandom uint64

func (f fixedRandom) Uint64() uint64 { return uint64(f) }

// hostClock is a clock shared between a test's upstream and the host it builds.
func hostClock() hostsim.SettableClock { return manualclock.New(hostsim.VirtualStart()) }

// The streaming-failover path end to end: the first try answers 429, which the upstream
// filter marks retriable with a header the route's retriable_headers matches; the router
// resets that try (its filter context gets on_done and on_delete at once, never on_log) and,
// after the back-off, replays the request to a second try, whose filter context is new. The
// upstream filter's header edits persist into the second try (one shared header map), its
// body edit does not (each try gets the router's copy); the downstream filter never sees the
// 429 and receives the second try's SSE stream event by event, not at its end; filter
// state written by either filter is read by the other; each try reads its own attempt count.
func TestRetryMarkedByTheUpstreamFilterStreamsTheSecondTry(t *testing.T) {
	clock := hostClock()
	var tr tries
	delays := []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	answer := func(n uint32) *hostsim.UpstreamResponse {
		if n == 1 {
			return status("429")
		}
		resp, _ := sse(events3, delays)(context.Background(), nil)
		return resp
	}
	down := `
request_headers set_property chosen providers-a-b
response_headers get_header 2 :status
log get_property last_try
log get_header 0 x-try1
`
	up := `
request_headers get_property upstream.request_attempt_count
request_headers get_property chosen
request_headers get_property plugin_root_id
request_headers@4 replace_header 0 authorization key-A
request_headers@4 add_header 0 x-try1 seen
request_body@4 set_buffer 0 0 15 {"rewritten":1}
request_headers@5 replace_header 0 authorization key-B
response_headers get_header 2 :status
response_headers@4 add_header 2 x-spillway-retry 1
response_headers@5 set_property last_try 2
`
	h := probeUp(t, down, up, hostsim.WithClock(clock), hostsim.WithRetryRandom(fixedRandom(17)),
		hostsim.WithUpstream(tr.upstream(clock, answer)),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-headers",
			RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: "X-Spillway-Retry", Kind: hostsim.RetryHeaderPresent}}}))
	body := `{"stream":true}`
	resp := h.RunHTTP(&hostsim.Request{Headers: append(hdrs("authorization", "client-key"), postReq...), Body: []byte(body)})

	if resp.StatusCode != 200 || string(resp.Body) != strings.Join(events3, "") {
		t.Fatalf("response %d %q, want the second try's 200 stream", resp.StatusCode, resp.Body)
	}
	if resp.Flags != 0 {
		t.Errorf("flags %v, want none (the retry succeeded)", resp.Flags)
	}
	if len(tr.reqs) != 2 || len(resp.Tries) != 2 {
		t.Fatalf("upstream called %d times, Response.Tries %d; want 2", len(tr.reqs), len(resp.Tries))
	}
	first, second := tr.reqs[0], tr.reqs[1]
	if v, _ := headerValue(first.Headers, "authorization"); v != "key-A" || first.Attempt != 1 {
		t.Errorf("try 1: attempt %d authorization %q, want 1 key-A", first.Attempt, v)
	}
	if v, _ := headerValue(second.Headers, "authorization"); v != "key-B" || second.Attempt != 2 {
		t.Errorf("try 2: attempt %d authorization %q, want 2 key-B", second.Attempt, v)
	}
	if v, ok := headerValue(second.Headers, "x-try1"); !ok || v != "seen" {
		t.Errorf("try 2 lacks the header try 1's filter added (shared header map): %v", second.Headers)
	}
	if string(first.Body) != `{"rewritten":1}` || string(second.Body) != body {
		t.Errorf("bodies %q then %q, want try 1's rewrite then the original (a copy per try)", first.Body, second.Body)
	}
	if got := tr.at[1].Sub(tr.at[0]); got != 17*time.Millisecond {
		t.Errorf("second try %v after the first, want the back-off of 17 ms (17 mod 25)", got)
	}
	// The stream reaches the client as it comes: the first event 300 ms after the second try.
	var firstData time.Time
	for _, ev := range resp.Received {
		if ev.Kind == hostsim.ClientData {
			firstData = ev.At
			break
		}
	}
	if got := firstData.Sub(tr.at[1]); got != 300*time.Millisecond {
		t.Errorf("first event %v after the second try started, want 300ms (streamed, not buffered)", got)
	}

	requireTrace(t, h.Host, "worker-0",
		"cb context_create ctx=3 "+downRoot,
		"cb request_headers ctx=3",
		"cb context_create ctx=4 "+upRoot,
		"cb request_headers ctx=4",
		"op get_property upstream.request_attempt_count -> Ok 0x0100000000000000",
		"op get_property chosen -> Ok providers-a-b",
		"op get_property plugin_root_id -> Ok upstream",
		"cb response_headers ctx=4",
		"op get_header 2 :status -> Ok 429",
		"cb done ctx=4",
		"cb delete ctx=4",
		"cb context_create ctx=5 "+upRoot,
		"cb request_headers ctx=5",
		"op get_property upstream.request_attempt_count -> Ok 0x0200000000000000",
		"cb response_headers ctx=5",
		"op get_header 2 :status -> Ok 200",
		"cb response_headers ctx=3",
		"op get_header 2 :status -> Ok 200",
		"cb done ctx=5",
		"cb delete ctx=5",
		"cb log ctx=3",
		"op get_property last_try -> Ok 2",
		"op get_header 0 x-try1 -> Ok seen",
		"cb done ctx=3",
		"cb delete ctx=3",
	)
	requireNoLine(t, h.Host, "worker-0", "cb log ctx=4")
	requireNoLine(t, h.Host, "worker-0", "cb log ctx=5")
	if n := h.Worker(0).LiveStreams(); n != 0 {
		t.Errorf("%d streams live after the exchange, want 0 (every try's filter stream ended)", n)
	}
	if n := countLines(h.Host, "worker-0", "cb log ctx=3"); n != 1 {
		t.Errorf("downstream on_log ran %d times, want 1", n)
	}
	if n := countLines(h.Host, "worker-0", "cb response_headers ctx=3"); n != 1 {
		t.Errorf("downstream on_response_headers ran %d times, want 1 (the retried 429 never reaches it)", n)
	}
}

func headerValue(h [][2]string, k string) (string, bool) {
	for _, kv := range h {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

func countLines(h *hostsim.Host, vm, prefix string) int {
	n := 0
	for _, l := range trace(h, vm) {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// The router's retry decisions without an upstream filter, on the policy's status codes
// and the request's x-envoy-* overrides.
func TestRetryDecisions(t *testing.T) {
	tests := []struct {
		name   string
		policy hostsim.RetryPolicy
		// down is the downstream filter's script (x-envoy-* headers it sets).
		down string
		// opts are extra host options.
		opts []hostsim.Option
		// body is the request body.
		body string
		// codes answers each attempt (the last repeats).
		codes []string
		// wantTries is how many tries reached the upstream.
		wantTries int
		// wantCode is what the client got; wantFlags the stream's flags.
		wantCode  int
		wantFlags hostsim.ResponseFlags
	}{
		{name: "retries exhausted pass the last response through with URX",
			policy: hostsim.RetryPolicy{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{429}},
			codes:  []string{"429"}, wantTries: 2, wantCode: 429, wantFlags: hostsim.FlagUpstreamRetryLimitExceeded},
		{name: "a retry that succeeds",
			policy: hostsim.RetryPolicy{RetryOn: "5xx", NumRetries: hostsim.RetryCount(3)},
			codes:  []string{"503", "502", "200"}, wantTries: 3, wantCode: 200},
		{name: "num_retries 0 never retries",
			policy: hostsim.RetryPolicy{RetryOn: "5xx", NumRetries: hostsim.RetryCount(0)},
			codes:  []string{"503"}, wantTries: 1, wantCode: 503, wantFlags: hostsim.FlagUpstreamRetryLimitExceeded},
		{name: "x-envoy-max-retries from the downstream filter overrides num_retries",
			policy: hostsim.RetryPolicy{RetryOn: "5xx"},
			down:   "request_headers add_header 0 x-envoy-max-retries 3",
			codes:  []string{"503"}, wantTries: 4, wantCode: 503, wantFlags: hostsim.FlagUpstreamRetryLimitExceeded},
		{name: "x-envoy-retry-on from the downstream filter adds conditions",
			policy: hostsim.RetryPolicy{},
			down:   "request_headers add_header 0 x-envoy-retry-on gateway-error",
			codes:  []string{"504", "200"}, wantTries: 2, wantCode: 200},
		{name: "a status the policy does not name is not retried",
			policy: hostsim.RetryPolicy{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{429}},
			codes:  []string{"500"}, wantTries: 1, wantCode: 500},
		{name: "a body over the retry buffer limit turns retries off, silently",
			policy: hostsim.RetryPolicy{RetryOn: "5xx", BufferLimit: uint64p(4)},
			body:   "ten bytes!", codes: []string{"503", "200"}, wantTries: 1, wantCode: 503},
		{name: "a body within the retry buffer limit is replayed",
			policy: hostsim.RetryPolicy{RetryOn: "5xx", BufferLimit: uint64p(10)},
			body:   "ten bytes!", codes: []string{"503", "200"}, wantTries: 2, wantCode: 200},
		{name: "a body the downstream filter buffered and released counts twice (envoy#30613)",
			policy: hostsim.RetryPolicy{RetryOn: "5xx", BufferLimit: uint64p(12)},
			down:   "request_body ret 1\nrequest_body continue 0",
			body:   "ten bytes!", codes: []string{"503", "200"}, wantTries: 1, wantCode: 503},
		{name: "the same body passed on as it came fits",
			policy: hostsim.RetryPolicy{RetryOn: "5xx", BufferLimit: uint64p(12)},
			body:   "ten bytes!", codes: []string{"503", "200"}, wantTries: 2, wantCode: 200},
		{name: "a reset is retried with reset, the retry's answer passed on",
			policy: hostsim.RetryPolicy{RetryOn: "reset"},
			codes:  []string{"reset", "200"}, wantTries: 2, wantCode: 200},
		{name: "resets exhausted: the router's 503, flags of the reset and URX",
			policy: hostsim.RetryPolicy{RetryOn: "reset"},
			codes:  []string{"reset"}, wantTries: 2, wantCode: 503,
			wantFlags: hostsim.FlagUpstreamRemoteReset | hostsim.FlagUpstreamRetryLimitExceeded},
		{name: "a full max_retries breaker overflows with UO",
			policy: hostsim.RetryPolicy{RetryOn: "5xx"}, opts: []hostsim.Option{hostsim.WithMaxRetries(0)},
			codes: []string{"503"}, wantTries: 1, wantCode: 503, wantFlags: hostsim.FlagUpstreamOverflow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := hostClock()
			var tr tries
			answer := func(n uint32) *hostsim.UpstreamResponse {
				code := tc.codes[min(int(n), len(tc.codes))-1]
				if code == "reset" { // a remote reset before the response
					return &hostsim.UpstreamResponse{Reset: &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteReset}}
				}
				return status(code)
			}
			opts := append([]hostsim.Option{hostsim.WithClock(clock), hostsim.WithUpstream(tr.upstream(clock, answer)),
				hostsim.WithRetryPolicy(tc.policy)}, tc.opts...)
			h := probe(t, tc.down, opts...)
			resp := h.RunHTTP(&hostsim.Request{Headers: postReq, Body: []byte(tc.body)})
			if len(tr.reqs) != tc.wantTries || resp.StatusCode != tc.wantCode || resp.Flags != tc.wantFlags {
				t.Fatalf("%d tries, %d, flags %v; want %d tries, %d, flags %v", len(tr.reqs), resp.StatusCode,
					resp.Flags, tc.wantTries, tc.wantCode, tc.wantFlags)
			}
			for i, req := range tr.reqs {
				for _, kv := range req.Headers {
					if kv[0] == "x-envoy-max-retries" || kv[0] == "x-envoy-retry-on" {
						t.Errorf("try %d carries %s: the router reads and removes it", i+1, kv[0])
					}
				}
				if string(req.Body) != tc.body {
					t.Errorf("try %d body %q, want %q", i+1, req.Body, tc.body)
				}
			}
		})
	}
}

func uint64p(v uint64) *uint64 { return &v }

// Back-offs run on the host's virtual clock, jittered exponentially from the 25 ms base:
// with every draw 40, retry 1 waits 40 mod 25 = 15 ms, retry 2 40 mod 50 = 40 ms, retry 3
// 40 mod 100 = 40 ms; the router writes x-envoy-attempt-count into each try's headers.
func TestRetryBackoffOnTheVirtualClock(t *testing.T) {
	clock := hostClock()
	var tr tries
	h := probe(t, "", hostsim.WithClock(clock), hostsim.WithRetryRandom(fixedRandom(40)),
		hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("503") })),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "5xx", NumRetries: hostsim.RetryCount(3),
			IncludeAttemptCount: true, IncludeAttemptCountInResponse: true}))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if len(tr.at) != 4 {
		t.Fatalf("%d tries, want 4", len(tr.at))
	}
	want := []time.Duration{15 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
	for i, w := range want {
		if got := tr.at[i+1].Sub(tr.at[i]); got != w {
			t.Errorf("back-off before try %d: %v, want %v", i+2, got, w)
		}
	}
	for i, req := range tr.reqs {
		if v, _ := headerValue(req.Headers, "x-envoy-attempt-count"); v != string(rune('1'+i)) {
			t.Errorf("try %d x-envoy-attempt-count %q", i+1, v)
		}
	}
	if v, _ := headerValue(resp.Headers, "x-envoy-attempt-count"); v != "4" || resp.StatusCode != 503 {
		t.Errorf("client got %d with x-envoy-attempt-count %q, want 503 and 4", resp.StatusCode, v)
	}
}

// A local reply from the upstream filter is final: the router does not retry it, whatever
// the policy, and it reaches the downstream filter (whose response callbacks see it) and
// the client as any local reply would; the try's filter context ends without on_log.
func TestUpstreamFilterLocalReplyIsFinal(t *testing.T) {
	clock := hostClock()
	var tr tries
	h := probeUp(t, "response_headers get_header 2 :status", "response_headers@4 local_response 418 no+retry teapot -",
		hostsim.WithClock(clock),
		hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("429") })),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{429, 418}}))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if resp.StatusCode != 418 || string(resp.Body) != "teapot" || len(tr.reqs) != 1 {
		t.Fatalf("client got %d %q after %d tries, want 418 teapot after 1", resp.StatusCode, resp.Body, len(tr.reqs))
	}
	if resp.Details != "no_retry" {
		t.Errorf("details %q, want the upstream filter's no_retry", resp.Details)
	}
	requireTrace(t, h.Host, "worker-0", "cb response_headers ctx=4", "cb response_headers ctx=3",
		"op get_header 2 :status -> Ok 418", "cb done ctx=4", "cb delete ctx=4", "cb log ctx=3")
	requireNoLine(t, h.Host, "worker-0", "cb log ctx=4")
}

// A local reply from the upstream filter's request headers never reaches the upstream; it
// goes through the downstream filter's response callbacks to the client.
func TestUpstreamFilterRequestLocalReply(t *testing.T) {
	clock := hostClock()
	var tr tries
	h := probeUp(t, "response_headers get_header 2 :status", "request_headers local_response 429 quota slow+down -",
		hostsim.WithClock(clock),
		hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("200") })),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{429}}))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if resp.StatusCode != 429 || len(tr.reqs) != 0 || resp.Upstream != nil {
		t.Fatalf("client got %d after %d tries (Upstream %v), want the upstream filter's 429 and no try", resp.StatusCode,
			len(tr.reqs), resp.Upstream)
	}
	requireTrace(t, h.Host, "worker-0", "cb request_headers ctx=4", "cb response_headers ctx=3",
		"op get_header 2 :status -> Ok 429", "cb done ctx=4", "cb delete ctx=4", "cb log ctx=3")
	requireNoLine(t, h.Host, "worker-0", "cb response_headers ctx=4") // "Local replies will not be seen by upstream filters"
}

// A trap in the upstream filter follows the failure policy for the try's filter chain:
// FAIL_CLOSED answers 503 wasm_fail_stream without reaching the upstream, FAIL_OPEN lets the
// try through without the filter; the downstream filter, on the same failed VM, gets no
// more callbacks.
func TestUpstreamFilterTrap(t *testing.T) {
	for _, tc := range []struct {
		policy    hostsim.FailurePolicy
		wantCode  int
		wantTries int
	}{
		{hostsim.FailClosed, 503, 0},
		{hostsim.FailOpen, 200, 1},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			clock := hostClock()
			var tr tries
			h := probeUp(t, "", "request_headers@4 trap", hostsim.WithClock(clock), hostsim.WithFailurePolicy(tc.policy),
				hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("200") })))
			resp, err := h.Host.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq})
			var trap *hostsim.TrapError
			if !errors.As(err, &trap) || trap.Callback != "proxy_on_request_headers" {
				t.Fatalf("error %v, want the upstream filter's trap", err)
			}
			if resp.StatusCode != tc.wantCode || len(tr.reqs) != tc.wantTries {
				t.Fatalf("client got %d after %d tries, want %d after %d", resp.StatusCode, len(tr.reqs), tc.wantCode, tc.wantTries)
			}
			// The downstream filter shares the failed VM: no more callbacks for it
			// (cpp-host CHECK_FAIL_HTTP), neither the reply's nor the response's.
			requireNoLine(t, h.Host, "worker-0", "cb response_headers ctx=3")
		})
	}
}

// proxy_close_stream from the upstream filter resets the downstream stream, with no retry
// (UpstreamRequestFilterManagerCallbacks::resetStream).
func TestUpstreamFilterCloseResetsTheClient(t *testing.T) {
	clock := hostClock()
	var tr tries
	h := probeUp(t, "", "response_headers close 1",
		hostsim.WithClock(clock),
		hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("503") })),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "5xx"}))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if resp.Reset != hostsim.DetailsWasmCloseStream || len(tr.reqs) != 1 {
		t.Fatalf("reset %q after %d tries, want %s after 1", resp.Reset, len(tr.reqs), hostsim.DetailsWasmCloseStream)
	}
	requireTrace(t, h.Host, "worker-0", "cb done ctx=4", "cb delete ctx=4", "cb log ctx=3")
}

// A second plugin on the VM starts as cpp-host starts one: its own canary, then on each VM
// after the first plugin a new root context with on_vm_start and on_configure of its own.
func TestUpstreamFilterPluginStartsOnEveryVM(t *testing.T) {
	h := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithUpstreamFilter("upstream", []byte("configure log 2 upstream-config")),
		hostsim.WithPluginConfiguration([]byte("configure log 2 downstream-config")))
	if !h.StartPlugin() {
		t.Fatalf("plugin did not start:\n%s", dump(h.Host))
	}
	for _, vm := range []string{"main", "worker-0"} {
		requireTrace(t, h.Host, vm,
			"cb context_create ctx=1 0", "cb vm_start ctx=1", "cb configure ctx=1",
			"cb context_create ctx=2 0", "cb vm_start ctx=2", "cb configure ctx=2")
	}
	var got []string
	for _, l := range h.Logs() {
		if strings.HasSuffix(l.Message, "-config") {
			got = append(got, l.VM+" "+l.Message)
		}
	}
	want := []string{"canary downstream-config", "canary upstream-config", "main downstream-config", "main upstream-config",
		"worker-0 downstream-config", "worker-0 upstream-config"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("configure scripts ran as\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// New rejects a policy Envoy (or hostsim) would not load.
func TestRetryPolicyValidation(t *testing.T) {
	for _, p := range []hostsim.RetryPolicy{
		{RetryOn: "5xx,bogus"},
		{RetryOn: "5xx", BaseInterval: 100 * time.Millisecond, MaxInterval: 10 * time.Millisecond},
		{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{42}},
	} {
		_, err := hostsim.New(hostsimtest.Guest(t, "probe"), hostsim.WithRetryPolicy(p))
		if !errors.Is(err, hostsim.ErrInvalidRetryPolicy) {
			t.Errorf("%+v: error %v, want ErrInvalidRetryPolicy", p, err)
		}
	}
	if _, err := hostsim.New(hostsimtest.Guest(t, "probe"), hostsim.WithMaxRetries(1)); err == nil {
		t.Error("WithMaxRetries without a policy accepted")
	}
}

// The router's 503 after a retried reset says so: "retried and the latest reset reason".
func TestRetriedResetReply(t *testing.T) {
	var tr tries
	clock := hostClock()
	h := probe(t, "", hostsim.WithClock(clock), hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "connect-failure",
		IncludeAttemptCountInResponse: true}),
		hostsim.WithUpstream(tr.upstream(clock, func(n uint32) *hostsim.UpstreamResponse {
			reason := hostsim.ResetRemoteConnectionFailure
			if n == 2 {
				reason = hostsim.ResetOverflow // a connection pool's circuit breaker: never retried
			}
			return &hostsim.UpstreamResponse{Reset: &hostsim.UpstreamReset{Reason: reason}}
		})))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	const prefix = "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: "
	if resp.StatusCode != 503 || !strings.HasPrefix(string(resp.Body), prefix) || len(tr.reqs) != 2 {
		t.Fatalf("%d %q after %d tries", resp.StatusCode, resp.Body, len(tr.reqs))
	}
	if want := hostsim.FlagUpstreamOverflow; resp.Flags != want {
		t.Errorf("flags %v, want %v (the overflow's, no URX: an overflow is not retriable)", resp.Flags, want)
	}
	// The router's own reply carries its modify_headers_: the attempt count, and
	// x-envoy-overloaded for a reset by a circuit breaker.
	if v, _ := headerValue(resp.Headers, "x-envoy-attempt-count"); v != "2" {
		t.Errorf("x-envoy-attempt-count %q, want 2", v)
	}
	if v, _ := headerValue(resp.Headers, "x-envoy-overloaded"); v != "true" {
		t.Errorf("x-envoy-overloaded %q, want true", v)
	}
}

// Per-try timeouts: a try that does not answer in time is reset and retried (a LocalReset
// outcome, retriable with 5xx); the last one not retried is the router's 504 with details
// upstream_per_try_timeout; once a response went downstream the timeout is ignored.
func TestPerTryTimeout(t *testing.T) {
	tests := []struct {
		name string
		// delays are each try's header delay (the last repeats); bodyDelay delays the
		// answer's body.
		delays    []time.Duration
		bodyDelay time.Duration
		// wantTries, wantCode and wantDetails are what the router did.
		wantTries   int
		wantCode    int
		wantDetails string
	}{
		{name: "the slow try is retried", delays: []time.Duration{time.Second, 0},
			wantTries: 2, wantCode: 200, wantDetails: hostsim.DetailsViaUpstream},
		{name: "every try slow: 504", delays: []time.Duration{time.Second},
			wantTries: 2, wantCode: 504, wantDetails: "upstream_per_try_timeout"},
		{name: "ignored once the response went downstream", delays: []time.Duration{0}, bodyDelay: time.Second,
			wantTries: 1, wantCode: 200, wantDetails: hostsim.DetailsViaUpstream},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := hostClock()
			var tr tries
			h := probe(t, "", hostsim.WithClock(clock), hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "5xx",
				PerTryTimeout: 100 * time.Millisecond}),
				hostsim.WithUpstream(tr.upstream(clock, func(n uint32) *hostsim.UpstreamResponse {
					return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Body: []byte("ok"),
						Delay: tc.delays[min(int(n), len(tc.delays))-1], ChunkDelays: []time.Duration{tc.bodyDelay}}
				})))
			resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
			if len(tr.reqs) != tc.wantTries || resp.StatusCode != tc.wantCode || resp.Details != tc.wantDetails {
				t.Fatalf("%d tries, %d %q; want %d tries, %d %q", len(tr.reqs), resp.StatusCode, resp.Details,
					tc.wantTries, tc.wantCode, tc.wantDetails)
			}
			if tc.wantCode == 504 && resp.Flags&hostsim.FlagUpstreamRequestTimeout == 0 {
				t.Errorf("flags %v, want UT", resp.Flags)
			}
		})
	}
}

// With a streaming upstream (real clock) every try is its own UpstreamCall: the retried
// one's context is cancelled, and the next reads the request body again — the part the
// router buffered replayed, the rest as the client sends it.
func TestStreamingUpstreamRetry(t *testing.T) {
	calls := make(chan *hostsim.UpstreamCall, 4)
	h := probe(t, "", hostsim.WithRealClock(), hostsim.WithRetryRandom(fixedRandom(0)),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-status-codes", RetriableStatusCodes: []uint32{429}}),
		hostsim.WithStreamingUpstream(func(c *hostsim.UpstreamCall) { calls <- c }))
	ctx := context.Background()
	ex, err := h.Worker(0).StartStream(ctx, postReq, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.SendData(ctx, []byte(`{"model":`), false); err != nil {
		t.Fatal(err)
	}
	first := <-calls
	if err := first.Respond(hdrs(":status", "429"), true); err != nil {
		t.Fatalf("first Respond: %v", err)
	}
	<-first.Context().Done() // the router reset the retried try
	second := <-calls
	if err := ex.SendData(ctx, []byte(`"m"}`), true); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(second.Body())
	if err != nil || string(b) != `{"model":"m"}` {
		t.Fatalf("second try read %q, %v", b, err)
	}
	if err := second.Respond(hdrs(":status", "200"), false); err != nil {
		t.Fatal(err)
	}
	if err := second.Data([]byte("ok"), true); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for {
		ev, err := ex.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, ev.Kind.String())
		if ev.Kind == hostsim.ClientHeaders {
			if v, _ := headerValue(ev.Headers, ":status"); v != "200" {
				t.Errorf("client got status %s, want the second try's 200", v)
			}
		}
	}
	if strings.Join(kinds, ",") != "headers,data,end" {
		t.Errorf("client events %v", kinds)
	}
}

// A request body chunk arriving while a retry's back-off runs, past the retry buffer
// limit, is answered 507 (Filter::decodeData with no try in flight).
func TestRetryBufferOverflowDuringBackoff(t *testing.T) {
	calls := make(chan *hostsim.UpstreamCall, 4)
	h := probe(t, "", hostsim.WithRealClock(), hostsim.WithRetryRandom(fixedRandom(3_599_999)),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "5xx", BufferLimit: uint64p(8),
			BaseInterval: time.Hour, MaxInterval: time.Hour}),
		hostsim.WithStreamingUpstream(func(c *hostsim.UpstreamCall) { calls <- c }))
	ctx := context.Background()
	ex, err := h.Worker(0).StartStream(ctx, postReq, false)
	if err != nil {
		t.Fatal(err)
	}
	first := <-calls
	if err := first.Respond(hdrs(":status", "503"), true); err != nil {
		t.Fatal(err)
	}
	// The retry now waits its back-off (about an hour): no try is in flight.
	if err := ex.SendData(ctx, []byte("more than eight bytes"), true); err != nil && !errors.Is(err, hostsim.ErrNoStream) {
		t.Fatal(err)
	}
	ev, err := ex.Next(ctx)
	if err != nil || ev.Kind != hostsim.ClientHeaders {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	if v, _ := headerValue(ev.Headers, ":status"); v != "507" {
		t.Fatalf("status %s, want 507", v)
	}
	for err == nil {
		_, err = ex.Next(ctx)
	}
	if resp := ex.Response(); resp == nil || resp.Details != "request_payload_exceeded_retry_buffer_limit" {
		t.Errorf("response %+v, want details request_payload_exceeded_retry_buffer_limit", resp)
	}
}

// An upstream filter can hold a try's response headers, look at the first body chunk and
// only then mark the try retriable (the "200 whose first SSE event is an error" case): the
// router decides on the released headers and drops the held body with the try, as Envoy
// ≥ 1.37 does (envoyproxy/envoy#41879; before it the release was undefined behaviour).
func TestUpstreamFilterHoldsThenMarksRetriable(t *testing.T) {
	clock := hostClock()
	var tr tries
	up := `
response_headers@4 ret 1
response_body@4 add_header 2 x-spillway-retry 1
`
	h := probeUp(t, "", up, hostsim.WithClock(clock),
		hostsim.WithUpstream(tr.upstream(clock, func(n uint32) *hostsim.UpstreamResponse {
			if n == 1 {
				return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Body: []byte("data: {\"error\":\"overloaded\"}\n\n")}
			}
			return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Body: []byte("data: ok\n\n")}
		})),
		hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-headers",
			RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: "x-spillway-retry"}}}))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if len(tr.reqs) != 2 || string(resp.Body) != "data: ok\n\n" {
		t.Fatalf("%d tries, client got %q; want 2 tries and the second's body", len(tr.reqs), resp.Body)
	}
	if _, marked := headerValue(resp.Headers, "x-spillway-retry"); marked {
		t.Errorf("the retried try's marker reached the client: %v", resp.Headers)
	}
	requireTrace(t, h.Host, "worker-0", "cb response_headers ctx=4", "cb response_body ctx=4", "cb done ctx=4",
		"cb response_headers ctx=5", "cb response_headers ctx=3", "cb response_body ctx=3")
	if n := countLines(h.Host, "worker-0", "cb response_body ctx=3"); n != 1 {
		t.Errorf("downstream on_response_body ran %d times, want 1 (the held body went with its try)", n)
	}
}

// WithoutUpstreamAllowOnHeadersStopIteration: the option is per filter config, so the
// upstream filter's headers Pause stops everything (no body callback until it continues)
// while the downstream filter's holds stay a true StopIteration.
func TestUpstreamFilterWithoutTheOptionStopsAll(t *testing.T) {
	down := `
request_headers@3 ret 1
request_body@3 ret 0
`
	up := `
response_headers@4 ret 1
`
	for _, without := range []bool{false, true} {
		t.Run(fmt.Sprintf("without=%v", without), func(t *testing.T) {
			opts := []hostsim.Option{hostsim.WithUpstream(func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
				return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Body: []byte("upstream body")}, nil
			})}
			if without {
				opts = append(opts, hostsim.WithoutUpstreamAllowOnHeadersStopIteration())
			}
			h := probeUp(t, down, up, opts...)
			ex, err := h.Host.Worker(0).StartHTTP(&hostsim.Request{Headers: postReq, Body: []byte("client body")})
			if err != nil {
				t.Fatal(err)
			}
			h.Advance(time.Second)
			// The downstream filter got its body callback either way (the option is on for
			// it); the upstream filter's held response gets one only with the option.
			if n := countLines(h.Host, "worker-0", "cb request_body ctx=3"); n != 1 {
				t.Errorf("downstream on_request_body ran %d times, want 1", n)
			}
			want := 1
			if without {
				want = 0
			}
			if n := countLines(h.Host, "worker-0", "cb response_body ctx=4"); n != want {
				t.Errorf("upstream on_response_body ran %d times while its headers were held, want %d", n, want)
			}
			// With the option the body callback continues the response (the probe's default);
			// without it nothing moves it on.
			if ex.Done() == without {
				t.Errorf("exchange done %v, want %v", ex.Done(), !without)
			}
			if without {
				if err := ex.Reset(""); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// WithRouteResponseHeadersToRemove: the route removes a header from an upstream's response
// after the retry decision and before the downstream filter: a marker the upstream filter
// added reaches neither the downstream filter nor the client, on a try that is retried and
// on the one that is not.
func TestRouteRemovesResponseHeadersBeforeTheDownstreamFilter(t *testing.T) {
	down := `
response_headers get_header 2 x-marker
`
	up := `
response_headers add_header 2 x-marker 1
`
	for _, remove := range []bool{false, true} {
		t.Run(fmt.Sprintf("remove=%v", remove), func(t *testing.T) {
			var tr tries
			clock := hostClock()
			opts := []hostsim.Option{hostsim.WithClock(clock),
				hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("200") })),
				hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-headers", NumRetries: hostsim.RetryCount(1),
					RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: "x-marker", Kind: hostsim.RetryHeaderPresent}}})}
			if remove {
				opts = append(opts, hostsim.WithRouteResponseHeadersToRemove("X-Marker"))
			}
			h := probeUp(t, down, up, opts...)
			resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
			// Retried on the marker either way (the decision comes first); the second try's
			// marker is not retried (one retry), and goes downstream unless removed.
			if len(tr.reqs) != 2 {
				t.Fatalf("%d tries, want 2: the retry decision reads the marker before the route removes it", len(tr.reqs))
			}
			_, atClient := headerValue(resp.Headers, "x-marker")
			seen := "op get_header 2 x-marker -> Ok 1"
			if remove {
				seen = "op get_header 2 x-marker -> NotFound"
			}
			requireTrace(t, h.Host, "worker-0", "cb response_headers ctx=3", seen)
			if atClient == remove {
				t.Errorf("marker at the client %v, want %v", atClient, !remove)
			}
		})
	}
}
