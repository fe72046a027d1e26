package hostsim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// proxy_http_call validation: :method, :path, :authority present; a declared cluster set
// rejects unknown clusters; the token is written even on failure.
func TestHTTPCallValidation(t *testing.T) {
	for _, tc := range []struct {
		call string // probe op
		want string // status
	}{
		{"http_call llm 0 :method=POST,:path=/v1,:authority=a -", "Ok"},
		{"http_call llm 0 :method=POST,:path=/v1 -", "BadArgument"},
		// Present but empty is enough (Context::httpCall checks headers().Host() != nullptr).
		{"http_call llm 0 :method=GET,:path=/,:authority= -", "Ok"},
		{"http_call llm 0 :path=/v1,:authority=a -", "BadArgument"},
		{"http_call other 0 :method=POST,:path=/v1,:authority=a -", "BadArgument"},
		{"http_call llm -5 :method=POST,:path=/v1,:authority=a -", "BadArgument"},
	} {
		t.Run(tc.call, func(t *testing.T) {
			h := probe(t, "tick "+tc.call, hostsim.WithCluster("llm"))
			h.Tick()
			requireTrace(t, h.Host, "worker-0", "op "+tc.call+" -> "+tc.want+" token=")
			requireNoLine(t, h.Host, "worker-0", "token=0")
		})
	}
}

// Callouts answered by a handler arrive after the calling callback, on the root context;
// the response maps and body are readable only there. A failure gives zero counts and
// BrokenConnection "reset"; a timeout gives the async client's 504.
func TestHTTPCallDelivery(t *testing.T) {
	script := `
request_headers http_call llm 500 :method=POST,:path=/v1,:authority=a body
request_headers get_header 0 :method
http_call_response get_header 6 :status
http_call_response get_buffer 4 0 100
http_call_response get_status
tick get_header 6 :status
`
	for _, tc := range []struct {
		name    string
		resp    *hostsim.CalloutResponse // handler's answer (nil: none)
		advance time.Duration            // virtual time to let pass
		want    []string                 // trace lines in order
	}{
		{"success", &hostsim.CalloutResponse{Headers: hdrs(":status", "200"), Body: []byte("pong")}, 0,
			[]string{"op get_header 0 :method -> Ok GET", "cb http_call_response ctx=1 1 1 4 0", "op get_header 6 :status -> Ok 200",
				"op get_buffer 4 0 100 -> Ok pong", "op get_status -> Ok 0"}},
		{"failure", &hostsim.CalloutResponse{Fail: true}, 0,
			[]string{"cb http_call_response ctx=1 1 0 0 0", "op get_header 6 :status -> BadArgument",
				"op get_buffer 4 0 100 -> NotFound", "op get_status -> Ok 11 reset"}},
		{"delayed past the timeout", &hostsim.CalloutResponse{Headers: hdrs(":status", "200"), Delay: time.Second}, time.Second,
			[]string{"cb http_call_response ctx=1 1 3 24 0", "op get_header 6 :status -> Ok 504"}},
		{"delayed within the timeout", &hostsim.CalloutResponse{Headers: hdrs(":status", "204"), Delay: 100 * time.Millisecond}, time.Second,
			[]string{"cb http_call_response ctx=1 1 1 0 0", "op get_header 6 :status -> Ok 204"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *hostsim.Callout
			h := probe(t, script, hostsim.WithCalloutHandler(func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
				got = c
				return tc.resp
			}))
			id := h.InitializeHttpContext()
			h.CallOnRequestHeaders(id, getReq, true)
			h.Advance(tc.advance)
			requireTrace(t, h.Host, "worker-0", tc.want...)
			if got == nil || got.Upstream != "llm" || string(got.Body) != "body" || got.Timeout != 500*time.Millisecond || got.ContextID != id {
				t.Fatalf("callout %+v", got)
			}
			if v, _ := headerOf(got.Headers, "content-length"); v != "4" {
				t.Fatalf("content-length %q", v)
			}
			h.Tick()
			requireTrace(t, h.Host, "worker-0", "cb tick", "op get_header 6 :status -> BadArgument")
		})
	}
}

// Without a handler the test answers (proxytest's CallOnHttpCallResponse); stream teardown
// does not cancel a callout owned by the root.
func TestHTTPCallAnsweredByTest(t *testing.T) {
	h := probe(t, `
request_headers http_call llm 0 :method=GET,:path=/,:authority=a -
http_call_response get_header 6 x-answer
`)
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	h.CompleteHttpContext(id)
	pending := h.PendingCallouts()
	if len(pending) != 1 {
		t.Fatalf("%d pending callouts", len(pending))
	}
	h.CallOnHttpCallResponse(pending[0].Token, hdrs(":status", "200", "X-Answer", "42"), nil, nil)
	requireTrace(t, h.Host, "worker-0", "cb delete ctx=2", fmt.Sprintf("cb http_call_response ctx=1 %d", pending[0].Token),
		"op get_header 6 x-answer -> Ok 42")
	if len(h.PendingCallouts()) != 0 {
		t.Fatal("callout still pending")
	}
	if err := h.Host.CallOnHttpCallResponse(pending[0].Token, nil, nil, nil); err == nil {
		t.Fatal("answering twice succeeded")
	}
}

func headerOf(h [][2]string, k string) (string, bool) {
	for _, kv := range h {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}
