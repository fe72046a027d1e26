package hostsim_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
)

// A stream paused forever (waiting for a queue notification, a tick and a callout) is
// reset: it ends like Envoy's doDeferredStreamDestroy (log → done → delete, request maps
// readable and no response in on_log), it is gone from the VM, and what would have resumed
// it later reaches only the root context.
func TestResetPausedStream(t *testing.T) {
	h := probe(t, `
configure register_queue wake
configure tick_period 100
request_headers http_call auth 0 :method=GET,:path=/check,:authority=auth -
request_headers ret 1
queue_ready effective 2
queue_ready continue 0
tick effective 2
tick local_response 429 late -
http_call_response effective 2
http_call_response continue 0
log get_header 0 :path
log get_header 2 :status
`)
	w := h.Worker(0)
	id := h.InitializeHttpContext()
	if a := h.CallOnRequestHeaders(id, getReq, true); a != types.ActionPause {
		t.Fatalf("headers action %v, want Pause", a)
	}
	if n := w.LiveStreams(); n != 1 {
		t.Fatalf("live streams before the reset: %d, want 1", n)
	}
	calls := h.PendingCallouts()
	if len(calls) != 1 || calls[0].ContextID != id {
		t.Fatalf("pending callouts %+v", calls)
	}
	h.ResetLogs()

	h.ResetStream(id, "")
	want := []string{
		"cb log ctx=2",
		"op get_header 0 :path -> Ok /v1/models?x=1", // the request maps stay readable in on_log
		"op get_header 2 :status -> NotFound",        // no response ever came
		"cb done ctx=2",
		"cb delete ctx=2",
	}
	if got := trace(h.Host, "worker-0"); !reflect.DeepEqual(got, want) {
		t.Fatalf("lifecycle after the reset:\n got  %q\n want %q", got, want)
	}
	if n := w.LiveStreams(); n != 0 {
		t.Fatalf("live streams after the reset: %d, want 0", n)
	}
	if n := h.Host.LiveStreams(); n != 0 {
		t.Fatalf("live streams on the host after the reset: %d, want 0", n)
	}
	if st, ok := w.StreamState(id); !ok || st.Reset != hostsim.ResetDownstreamRemoteDisconnect || st.RequestHeadersForwarded {
		t.Fatalf("stream state after the reset: %+v (found %v)", st, ok)
	}
	h.ResetLogs()

	// A queue notification, a tick and the callout's answer all come later: each reaches
	// the root, which can no longer make the stream effective, so nothing resumes it.
	token, ok := h.ResolveQueue("wake")
	if !ok {
		t.Fatal("queue wake not registered")
	}
	if st, err := h.EnqueueSharedQueue(token, []byte("go")); st != hostsim.StatusOK || err != nil {
		t.Fatalf("enqueue: %v %v", st, err)
	}
	h.Advance(100 * time.Millisecond)
	h.CallOnHttpCallResponse(calls[0].Token, hdrs(":status", "200"), nil, nil)
	requireTrace(t, h.Host, "worker-0",
		fmt.Sprintf("cb queue_ready ctx=1 %d", token), "op effective 2 -> BadArgument", "op continue 0 -> Ok",
		"cb tick ctx=1", "op effective 2 -> BadArgument", "op local_response 429 late - -> Ok",
		fmt.Sprintf("cb http_call_response ctx=1 %d 1 0 0", calls[0].Token), "op effective 2 -> BadArgument")
	for _, gone := range []string{"ctx=2", "cb request_", "cb response_"} {
		requireNoLine(t, h.Host, "worker-0", gone)
	}
	if n := w.LiveStreams(); n != 0 {
		t.Fatalf("live streams after the late events: %d, want 0", n)
	}
	if lr := w.GetSentLocalResponse(id); lr != nil {
		t.Fatalf("the tick's local reply reached the reset stream: %+v", lr)
	}
	if len(h.PendingCallouts()) != 0 {
		t.Fatalf("callout still pending: %+v", h.PendingCallouts())
	}

	// Later calls on the id report that the stream is gone.
	if _, err := h.Host.CallOnRequestBody(id, []byte("x"), true); !errors.Is(err, hostsim.ErrNoStream) {
		t.Fatalf("body after the reset: %v, want ErrNoStream", err)
	}
	if err := h.Host.ResetStream(id, ""); !errors.Is(err, hostsim.ErrNoStream) {
		t.Fatalf("second reset: %v, want ErrNoStream", err)
	}
	if err := h.Host.CompleteHttpContext(id); !errors.Is(err, hostsim.ErrNoStream) {
		t.Fatalf("complete after the reset: %v, want ErrNoStream", err)
	}
}

// A stream reset before its request headers never had a filter chain in Envoy: no
// callback runs, not even proxy_on_context_create.
func TestResetBeforeRequestHeaders(t *testing.T) {
	h := probe(t, "")
	id := h.InitializeHttpContext()
	h.ResetStream(id, "downstream_remote_disconnect")
	requireNoLine(t, h.Host, "worker-0", "ctx=2")
	if n := h.Worker(0).LiveStreams(); n != 0 {
		t.Fatalf("live streams %d, want 0", n)
	}
}

type ctxKey struct{}

// The upstream gets the exchange's context: it carries the values of the context the
// exchange started with and is cancelled by a reset; the upstream's late answer is
// dropped, and the exchange reports the reset.
func TestExchangeResetCancelsUpstream(t *testing.T) {
	var upCtx context.Context
	h := probe(t, `
request_headers log 2 filter-passed
response_headers log 2 response-seen
`, hostsim.WithUpstream(func(ctx context.Context, _ *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		upCtx = ctx
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Delay: time.Second}, nil
	}))
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "rid-1"))
	ex, err := h.Worker(0).StartHTTPContext(parent, &hostsim.Request{Headers: getReq})
	if err != nil {
		t.Fatal(err)
	}
	if upCtx == nil || ex.Done() {
		t.Fatalf("upstream called=%v, exchange done=%v: want a call still waiting for its answer", upCtx != nil, ex.Done())
	}
	if v, _ := upCtx.Value(ctxKey{}).(string); v != "rid-1" {
		t.Fatalf("upstream context value %q, want the starter's rid-1", v)
	}
	// The starter's cancellation does not end the exchange (only a reset does).
	cancelParent()
	if upCtx.Err() != nil || ex.Done() {
		t.Fatalf("cancelling the starter's context ended the exchange: %v", upCtx.Err())
	}
	h.ResetLogs()

	if err := ex.Reset("hostsim_timeout"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if !errors.Is(upCtx.Err(), context.Canceled) || ex.Context().Err() == nil {
		t.Fatalf("upstream context after the reset: %v", upCtx.Err())
	}
	resp := ex.Response()
	if resp == nil || resp.Reset != "hostsim_timeout" || resp.StatusCode != 0 || resp.Upstream == nil {
		t.Fatalf("response after the reset: %+v", resp)
	}
	if got, want := trace(h.Host, "worker-0"), []string{"cb log ctx=2", "cb done ctx=2", "cb delete ctx=2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("lifecycle %q, want %q", got, want)
	}
	h.Advance(2 * time.Second) // the upstream's answer is due now: it must be dropped
	requireNoLine(t, h.Host, "worker-0", "response-seen")
	if n := h.Host.LiveStreams(); n != 0 {
		t.Fatalf("live streams %d, want 0", n)
	}
	if err := ex.Reset(""); !errors.Is(err, hostsim.ErrNoStream) {
		t.Fatalf("second reset: %v, want ErrNoStream", err)
	}

	// An exchange that ends normally cancels its context too.
	upCtx = nil
	if resp := h.RunHTTP(&hostsim.Request{Headers: getReq}); resp.StatusCode != 200 {
		t.Fatalf("second request: %+v", resp)
	}
	if upCtx == nil || upCtx.Err() == nil {
		t.Fatal("a finished exchange left its upstream context live")
	}
}

// RunHTTP whose context ends before the filter resumes the request resets the stream, as
// Envoy does when the client goes away.
func TestRunHTTPContextDoneResets(t *testing.T) {
	h := probe(t, "configure tick_period 10\nrequest_headers ret 1", hostsim.WithUpstream(echoUpstream(nil)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := h.Host.RunHTTP(ctx, &hostsim.Request{Headers: getReq})
	if resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("RunHTTP: %+v, %v; want no response and context.Canceled", resp, err)
	}
	requireTrace(t, h.Host, "worker-0", "cb request_headers ctx=2", "cb log ctx=2", "cb done ctx=2", "cb delete ctx=2")
	if n := h.Host.LiveStreams(); n != 0 {
		t.Fatalf("live streams %d, want 0", n)
	}
}

// A stream left paused in a VM instance that FAIL_RELOAD replaced is reset without any
// callback: its context never existed in the new instance.
func TestResetStreamOfReplacedInstance(t *testing.T) {
	h := probe(t, "request_headers@2 ret 1\nrequest_headers@3 trap",
		hostsim.WithFailurePolicy(hostsim.FailReload), hostsim.WithUpstream(echoUpstream(nil)))
	w := h.Host.Worker(0)
	paused, err := w.StartHTTP(&hostsim.Request{Headers: getReq})
	if err != nil || paused.Done() {
		t.Fatalf("first request: done=%v err=%v, want it paused", paused.Done(), err)
	}
	if _, err := w.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq}); err == nil {
		t.Fatal("second request: want the trap")
	}
	if resp := h.RunHTTP(&hostsim.Request{Headers: getReq}); resp.StatusCode != 200 {
		t.Fatalf("request on the reloaded instance: %+v", resp)
	}
	h.ResetLogs()
	if err := paused.Reset(""); err != nil {
		t.Fatal(err)
	}
	if got := trace(h.Host, "worker-0"); len(got) != 0 {
		t.Fatalf("callbacks on the new instance for a stream of the old one: %q", got)
	}
	if resp := paused.Response(); resp == nil || resp.Reset != hostsim.ResetDownstreamRemoteDisconnect {
		t.Fatalf("response %+v", resp)
	}
	if n := w.LiveStreams(); n != 0 {
		t.Fatalf("live streams %d, want 0", n)
	}
}
