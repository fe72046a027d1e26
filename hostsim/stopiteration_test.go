package hostsim_test

import (
	"context"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
)

var postReq = hdrs(":method", "POST", ":path", "/v1/chat/completions", ":authority", "api.example", ":scheme", "http",
	"content-type", "application/json")

// With allow_on_headers_stop_iteration (hostsim's default, the configuration Spillway ships)
// a headers Pause holds the headers while body callbacks keep arriving; the headers stay
// editable from on_request_body (Context::decodeData never clears request_headers_), and a
// continue once end of stream was seen sends the edited headers and the whole body.
func TestHeadersPauseHoldsHeadersWhileBodyArrives(t *testing.T) {
	h := probe(t, `
request_headers ret 1
request_body ret 1
request_body replace_header 0 x-route b
request_body get_header 0 x-route
tick effective 2
tick continue 0
`)
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, postReq, false); a != types.ActionPause {
		t.Fatalf("headers action %v, want Pause", a)
	}
	for i, chunk := range []string{"abc", "def"} {
		if a := h.CallOnRequestBody(id, []byte(chunk), i == 1); a != types.ActionPause {
			t.Fatalf("chunk %d: action %v, want Pause", i, a)
		}
	}
	requireTrace(t, h.Host, "worker-0",
		"cb request_body ctx=2 3 0", "op replace_header 0 x-route b -> Ok", "op get_header 0 x-route -> Ok b",
		"cb request_body ctx=2 6 1") // cumulative: the body is buffered
	st, _ := h.Worker(0).StreamState(id)
	if st.RequestHeadersForwarded || len(st.ForwardedRequestBody) != 0 || st.HeldRequestBody != 0 {
		t.Fatalf("while held: %+v", st)
	}
	h.Tick()
	st, _ = h.Worker(0).StreamState(id)
	if !st.RequestHeadersForwarded || !st.RequestComplete || string(st.ForwardedRequestBody) != "abcdef" {
		t.Fatalf("after continue: %+v", st)
	}
	if v, _ := headerOf(h.GetCurrentRequestHeaders(id), "x-route"); v != "b" {
		t.Fatalf("headers after continue: %v", h.GetCurrentRequestHeaders(id))
	}
}

// A Continue from on_request_body while the headers are held resumes the headers too
// (true StopIteration: the next Continue sends what the filter manager holds).
func TestHeadersPauseBodyContinueResumesHeaders(t *testing.T) {
	h := probe(t, "request_headers ret 1")
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, postReq, false)
	if a := h.CallOnRequestBody(id, []byte("abc"), false); a != types.ActionContinue {
		t.Fatalf("body action %v", a)
	}
	st, _ := h.Worker(0).StreamState(id)
	if !st.RequestHeadersForwarded || string(st.ForwardedRequestBody) != "abc" || st.RequestComplete {
		t.Fatalf("after a body Continue: %+v", st)
	}
}

// Through RunHTTP the router routes on the headers as the body callback left them, and the
// upstream receives every chunk byte for byte.
func TestRunHTTPRoutesOnHeadersEditedFromBody(t *testing.T) {
	var got *hostsim.UpstreamRequest
	h := probe(t, `
configure tick_period 100
request_headers ret 1
request_body ret 1
request_body replace_header 0 x-spillway-cluster fake-b
tick effective 2
tick continue 0
`, hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		got = r
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200")}, nil
	}))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq, BodyChunks: [][]byte{[]byte(`{"model":`), []byte(`"gpt-4o"`), []byte(`}`)}})
	if resp.StatusCode != 200 || got == nil {
		t.Fatalf("response %+v", resp)
	}
	if v, _ := headerOf(got.Headers, "x-spillway-cluster"); v != "fake-b" {
		t.Fatalf("upstream headers %v", got.Headers)
	}
	if string(got.Body) != `{"model":"gpt-4o"}` {
		t.Fatalf("upstream body %q", got.Body)
	}
}

// Response headers held while the (error) body arrives: on_response_body rewrites :status and
// adds Retry-After before continuing (Context::encodeHeaders keeps response_headers_).
func TestResponseHeadersHeldWhileBodyArrives(t *testing.T) {
	h := probe(t, `
configure tick_period 100
response_headers ret 1
response_body ret 1
response_body replace_header 2 :status 429
response_body replace_header 2 retry-after 60
tick effective 2
tick continue 1
`, hostsim.WithUpstream(func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "403"), BodyChunks: [][]byte{[]byte("quota"), []byte(" gone")}}, nil
	}))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if resp.StatusCode != 429 || string(resp.Body) != "quota gone" {
		t.Fatalf("response %d %q", resp.StatusCode, resp.Body)
	}
	if v, _ := headerOf(resp.Headers, "retry-after"); v != "60" {
		t.Fatalf("headers %v", resp.Headers)
	}
	requireTrace(t, h.Host, "worker-0", "cb response_headers", "cb response_body ctx=2 5 0", "cb response_body ctx=2 10 1")
}
