package hostsim_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Envoy's order: context created lazily at request headers; teardown log → done → delete.
func TestStreamLifecycleOrder(t *testing.T) {
	h := probe(t, "")
	id := h.InitializeHttpContext()
	requireNoLine(t, h.Host, "worker-0", "cb context_create ctx=2")
	if a := h.CallOnRequestHeaders(id, getReq, true); a != types.ActionContinue {
		t.Fatalf("action %v", a)
	}
	h.CallOnResponseHeaders(id, hdrs(":status", "200"), false)
	h.CallOnResponseBody(id, []byte("abc"), true)
	h.CompleteHttpContext(id)
	requireTrace(t, h.Host, "worker-0",
		"cb context_create ctx=2 1",
		"cb request_headers ctx=2 4 1", // bodyless request: eos on headers
		"cb response_headers ctx=2 1 0",
		"cb response_body ctx=2 3 1",
		"cb log ctx=2", "cb done ctx=2", "cb delete ctx=2")
}

// A response whose request headers never reached the filter passes it without callbacks
// (Context::encodeHeaders/encodeData/encodeTrailers return Continue while
// in_vm_context_created_ is false); the end of the stream still creates the context for
// on_log (Context::log calls onCreate), then done and delete.
func TestResponseWithoutContextSkipsTheFilter(t *testing.T) {
	h := probe(t, "response_headers add_header 2 x-seen yes")
	id := h.InitializeHttpContext()
	for _, a := range []types.Action{
		h.CallOnResponseHeaders(id, hdrs(":status", "200"), false),
		h.CallOnResponseBody(id, []byte("abc"), false),
		h.CallOnResponseTrailers(id, hdrs("grpc-status", "0")),
	} {
		if a != types.ActionContinue {
			t.Fatalf("action %v, want Continue", a)
		}
	}
	requireNoLine(t, h.Host, "worker-0", "cb ")
	h.CompleteHttpContext(id)
	requireTrace(t, h.Host, "worker-0", "cb context_create ctx=2 1", "cb log ctx=2", "cb done ctx=2", "cb delete ctx=2")
	requireNoLine(t, h.Host, "worker-0", "cb response_")
}

// Without allow_on_headers_stop_iteration a headers Pause stops all iteration: body chunks
// are held without callbacks and delivered (cumulatively) when the plugin continues from its
// callout callback.
func TestHeadersPauseHoldsBodyWithoutOption(t *testing.T) {
	h := probe(t, `
request_headers http_call auth 0 :method=GET,:path=/check,:authority=auth.local -
request_headers ret 1
http_call_response effective 2
http_call_response get_header 0 :path
http_call_response continue 0
request_body get_buffer 0 0 100
`, hostsim.WithoutAllowOnHeadersStopIteration())
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, getReq, false); a != types.ActionPause {
		t.Fatalf("headers action %v, want Pause", a)
	}
	for i, chunk := range []string{"abc", "def"} {
		if a := h.CallOnRequestBody(id, []byte(chunk), i == 1); a != types.ActionPause {
			t.Fatalf("body action %v while headers paused", a)
		}
	}
	requireNoLine(t, h.Host, "worker-0", "cb request_body")
	st, _ := h.Worker(0).StreamState(id)
	if st.HeldRequestBody != 6 || st.RequestHeadersForwarded {
		t.Fatalf("while paused: %+v", st)
	}
	calls := h.GetCalloutAttributesFromContext(id)
	if len(calls) != 1 || calls[0].Upstream != "auth" {
		t.Fatalf("callouts %+v", calls)
	}
	h.CallOnHttpCallResponse(calls[0].CalloutID, hdrs(":status", "200"), nil, nil)
	requireTrace(t, h.Host, "worker-0",
		fmt.Sprintf("cb http_call_response ctx=1 %d 1 0 0", calls[0].CalloutID), // owned by the root
		"op effective 2 -> Ok",
		"op get_header 0 :path -> Ok /v1/models?x=1", // still paused: headers readable
		"op continue 0 -> Ok",
		"cb request_body ctx=2 6 1", // held data arrives in one cumulative callback
		"op get_buffer 0 0 100 -> Ok abcdef")
	st, _ = h.Worker(0).StreamState(id)
	if !st.RequestComplete || string(st.ForwardedRequestBody) != "abcdef" {
		t.Fatalf("after continue: %+v", st)
	}
}

// Body Pause buffers: each callback sees the cumulative size and the whole buffer; Pause
// with end_of_stream stalls until proxy_continue_stream.
func TestBodyPauseAccumulates(t *testing.T) {
	h := probe(t, `
request_body ret 1
request_body get_buffer 0 0 100
tick effective 2
tick continue 0
`)
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, false)
	for i, c := range []string{"ab", "cd", "ef"} {
		if a := h.CallOnRequestBody(id, []byte(c), i == 2); a != types.ActionPause {
			t.Fatalf("chunk %d: %v", i, a)
		}
	}
	requireTrace(t, h.Host, "worker-0",
		"cb request_body ctx=2 2 0", "op get_buffer 0 0 100 -> Ok ab",
		"cb request_body ctx=2 4 0", "op get_buffer 0 0 100 -> Ok abcd",
		"cb request_body ctx=2 6 1", "op get_buffer 0 0 100 -> Ok abcdef")
	if st, _ := h.Worker(0).StreamState(id); st.RequestComplete {
		t.Fatal("request completed while the body is paused at end of stream")
	}
	h.Tick() // a tick continues the stream through the effective context
	if st, _ := h.Worker(0).StreamState(id); !st.RequestComplete || string(st.ForwardedRequestBody) != "abcdef" {
		t.Fatalf("after continue: %+v", st)
	}
}

// Maps only in their phase: BadArgument elsewhere, read-only in on_log (NotFound when
// missing), empty pairs when unavailable, size in bytes; header edits as Envoy makes them.
func TestMapPhases(t *testing.T) {
	h := probe(t, `
request_headers get_header 2 :status
request_headers get_header 1 x
request_headers get_pairs 2
request_headers map_size 0
request_headers get_header 0 MISSING
request_headers get_header 0 :AUTHORITY
response_headers get_header 0 :path
response_headers add_header 2 X-Dup a
response_headers add_header 2 x-dup b
response_headers replace_header 2 x-new n
response_headers remove_header 2 server
log get_header 0 :path
log add_header 0 x y
log get_header 3 x
`)
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	h.CallOnResponseHeaders(id, hdrs(":status", "200", "server", "up", "x-new", "old", "x-new", "old2"), true)
	h.CompleteHttpContext(id)
	requireTrace(t, h.Host, "worker-0",
		"op get_header 2 :status -> BadArgument",
		"op get_header 1 x -> BadArgument",
		"op get_pairs 2 -> Ok n=0 ",
		"op map_size 0 -> Ok 62", // bytes of keys and values, not a count
		"op get_header 0 MISSING -> NotFound",
		"op get_header 0 :AUTHORITY -> Ok api.example",
		"op get_header 0 :path -> BadArgument", // request headers went upstream
		"op add_header 2 X-Dup a -> Ok",
	)
	requireTrace(t, h.Host, "worker-0",
		"cb log ctx=2",
		"op get_header 0 :path -> Ok /v1/models?x=1",
		"op add_header 0 x y -> BadArgument",
		"op get_header 3 x -> NotFound")
	want := hdrs(":status", "200", "x-new", "n", "x-dup", "a", "x-dup", "b")
	if got := h.GetCurrentResponseHeaders(id); !reflect.DeepEqual(got, want) {
		t.Fatalf("response headers %v, want %v", got, want)
	}
}

// proxy_continue_stream is deferred until the callback returns and then clears the request
// maps: a later root callback with the stream as effective context gets BadArgument.
func TestContinueClearsMaps(t *testing.T) {
	h := probe(t, `
request_headers ret 1
tick effective 2
tick get_header 0 :path
tick continue 0
tick get_header 0 :path
`)
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	h.Tick()
	if st, _ := h.Worker(0).StreamState(id); !st.RequestComplete {
		t.Fatal("continue did not resume the stream")
	}
	h.Tick()
	requireTrace(t, h.Host, "worker-0",
		"cb tick ctx=1", "op get_header 0 :path -> Ok /v1/models?x=1", "op continue 0 -> Ok",
		"op get_header 0 :path -> Ok /v1/models?x=1", // deferred: still paused inside this callback
		"cb tick ctx=1", "op get_header 0 :path -> BadArgument")
}

// A request-phase local reply stops the callback and runs the plugin's own response
// callbacks on the reply; later request data is ignored.
func TestLocalReplyRequestPhase(t *testing.T) {
	h := probe(t, `
request_headers local_response 429 rate_limited slow-down retry-after=3
response_headers get_header 2 :status
response_headers add_header 2 x-plugin seen
`)
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, getReq, false); a != types.ActionPause {
		t.Fatalf("action %v: a local reply forces stop", a)
	}
	lr := h.GetSentLocalResponse(id)
	if lr == nil || lr.StatusCode != 429 || lr.StatusCodeDetail != "rate_limited" || string(lr.Data) != "slow-down" {
		t.Fatalf("local response %+v", lr)
	}
	h.CallOnRequestBody(id, []byte("late"), true)
	requireNoLine(t, h.Host, "worker-0", "cb request_body")
	requireTrace(t, h.Host, "worker-0", "cb response_headers ctx=2 4 0", "op get_header 2 :status -> Ok 429",
		"cb response_body ctx=2 9 1")
	want := hdrs(":status", "429", "retry-after", "3", "content-length", "9", "content-type", "text/plain", "x-plugin", "seen")
	if got := h.GetCurrentResponseHeaders(id); !reflect.DeepEqual(got, want) {
		t.Fatalf("reply headers %v, want %v", got, want)
	}
}

// A response-phase local reply replaces the upstream response, bypassing the plugin; after
// response headers went downstream it resets the stream instead.
func TestLocalReplyResponsePhase(t *testing.T) {
	for _, tc := range []struct {
		name      string
		script    string
		wantReset bool
	}{
		{"headers not yet sent", "response_headers local_response 503 restated upstream-down", false},
		{"headers already sent", "response_body local_response 503 restated upstream-down", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := probe(t, tc.script)
			id := h.InitializeHttpContext()
			h.CallOnRequestHeaders(id, getReq, true)
			h.CallOnResponseHeaders(id, hdrs(":status", "500"), false)
			h.CallOnResponseBody(id, []byte("err"), true)
			st, _ := h.Worker(0).StreamState(id)
			if tc.wantReset {
				if st.Reset == "" {
					t.Fatalf("want a reset: %+v", st)
				}
				return
			}
			if st.Replaced == nil || st.Replaced.StatusCode != 503 || st.Reset != "" {
				t.Fatalf("want a replaced response: %+v", st)
			}
			requireNoLine(t, h.Host, "worker-0", "cb response_body")
		})
	}
}

// proxy_close_stream resets the stream after the callback.
func TestCloseStream(t *testing.T) {
	h := probe(t, "request_headers close 0")
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	if st, _ := h.Worker(0).StreamState(id); st.Reset != "wasm_close_stream" {
		t.Fatalf("reset %q", st.Reset)
	}
}

// proxy_get/set_buffer_bytes follow Envoy's Buffer semantics.
func TestBufferBytes(t *testing.T) {
	for _, tc := range []struct {
		op       string // probe op run in on_request_body with body "hello"
		wantLine string // its log line
		wantBody string // body afterwards ("" = not checked)
	}{
		{"set_buffer 0 0 0 X-", "op set_buffer 0 0 0 X- -> Ok", "X-hello"},      // start 0, len 0: prepend
		{"set_buffer 0 0 99 new", "op set_buffer 0 0 99 new -> Ok", "new"},      // start 0, len ≥ size: replace
		{"set_buffer 0 0 2 J", "op set_buffer 0 0 2 J -> Ok", "Jllo"},           // drain 2, prepend
		{"set_buffer 0 5 0 !", "op set_buffer 0 5 0 ! -> Ok", "hello!"},         // start ≥ size: append
		{"set_buffer 0 2 0 z", "op set_buffer 0 2 0 z -> BadArgument", "hello"}, // inside: BadArgument
		{"get_buffer 0 1 3", "op get_buffer 0 1 3 -> Ok ell", ""},
		{"get_buffer 0 3 100", "op get_buffer 0 3 100 -> Ok lo", ""},                     // clamped
		{"get_buffer 0 9 1", "op get_buffer 0 9 1 -> Ok", ""},                            // past the end: empty
		{"get_buffer 9 0 1", "op get_buffer 9 0 1 -> BadArgument", ""},                   // no such type
		{"get_buffer 4 0 1", "op get_buffer 4 0 1 -> NotFound", ""},                      // no callout response here
		{"get_buffer 1 0 1", "op get_buffer 1 0 1 -> NotFound", ""},                      // response body not in phase
		{"set_buffer 7 0 0 x", "op set_buffer 7 0 0 x -> NotFound", ""},                  // config not in phase
		{"get_buffer 0 4294967295 2", "op get_buffer 0 4294967295 2 -> BadArgument", ""}, // overflow
	} {
		t.Run(tc.op, func(t *testing.T) {
			h := probe(t, "request_body "+tc.op)
			id := h.InitializeHttpContext()
			h.CallOnRequestHeaders(id, getReq, false)
			h.CallOnRequestBody(id, []byte("hello"), true)
			requireTrace(t, h.Host, "worker-0", tc.wantLine)
			if tc.wantBody != "" {
				if st, _ := h.Worker(0).StreamState(id); string(st.ForwardedRequestBody) != tc.wantBody {
					t.Fatalf("body %q, want %q", st.ForwardedRequestBody, tc.wantBody)
				}
			}
		})
	}
}

// httpStream actions from a root context are silent no-ops; set_property needs stream info.
func TestRootContextNoOps(t *testing.T) {
	h := probe(t, `
tick continue 0
tick local_response 500 x y -
tick close 0
tick set_property a b
tick continue 3
tick continue 7
tick effective 99
`)
	h.Tick()
	requireTrace(t, h.Host, "worker-0", "op continue 0 -> Ok", "op local_response 500 x y - -> Ok",
		"op close 0 -> Ok", "op set_property a b -> NotFound", "op continue 3 -> Unimplemented",
		"op continue 7 -> BadArgument", "op effective 99 -> BadArgument")
}
