package hostsim_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// sse is a paced upstream: 200 text/event-stream, one event per chunk.
func sse(events []string, delays []time.Duration) hostsim.UpstreamFunc {
	return func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		chunks := make([][]byte, len(events))
		for i, e := range events {
			chunks[i] = []byte(e)
		}
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200", "content-type", "text/event-stream"),
			BodyChunks: chunks, ChunkDelays: delays}, nil
	}
}

var events3 = []string{"data: {\"n\":1}\n\n", "data: {\"n\":2}\n\n", "data: [DONE]\n\n"}

// A paced SSE stream flows through a filter that continues, chunk by chunk at the upstream's
// virtual times: the client's first event arrives at the upstream's first delay, not at the
// end, and every body callback sees one event.
func TestPacedStreamReachesTheClientEventByEvent(t *testing.T) {
	delays := []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	h := probe(t, "", hostsim.WithUpstream(sse(events3, delays)))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq, Body: []byte(`{"stream":true}`)})
	if resp.StatusCode != 200 || string(resp.Body) != strings.Join(events3, "") {
		t.Fatalf("response %d %q", resp.StatusCode, resp.Body)
	}
	var data []hostsim.ClientEvent
	for _, ev := range resp.Received {
		if ev.Kind == hostsim.ClientData {
			data = append(data, ev)
		}
	}
	if len(data) != 3 {
		t.Fatalf("received %d data events, want 3: %+v", len(data), resp.Received)
	}
	want := []time.Duration{300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond}
	for i, ev := range data {
		if got := ev.At.Sub(resp.Start); got != want[i] || string(ev.Data) != events3[i] {
			t.Errorf("event %d at %v %q, want at %v %q", i, got, ev.Data, want[i], events3[i])
		}
	}
	if ttfb, ok := resp.TimeToFirstByte(); !ok || ttfb != 0 {
		t.Errorf("time to first byte %v %v, want 0 (headers come at once)", ttfb, ok)
	}
	if ttfd, _ := resp.TimeToFirstData(); ttfd != 300*time.Millisecond {
		t.Errorf("time to first data %v, want 300ms", ttfd)
	}
	if last := resp.Received[len(resp.Received)-1]; last.Kind != hostsim.ClientEnd {
		t.Errorf("last event %v, want end", last.Kind)
	}
	requireTrace(t, h.Host, "worker-0", "cb response_body ctx=2 15 0", "cb response_body ctx=2 15 0", "cb response_body ctx=2 14 1")
}

// A filter that holds the response headers and buffers until the first event (the filter's
// first-event hold, README "How Spillway handles a request") delays the client's first byte
// to that event, then streams.
func TestHeldFirstEventThenStreams(t *testing.T) {
	delays := []time.Duration{200 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	h := probe(t, `
response_headers ret 1
response_body@2 ret 0
`, hostsim.WithUpstream(sse(events3, delays)))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq})
	ttfb, _ := resp.TimeToFirstByte()
	if ttfb != 200*time.Millisecond || string(resp.Body) != strings.Join(events3, "") {
		t.Fatalf("ttfb %v body %q", ttfb, resp.Body)
	}
}

// An upstream reset after some chunks: the client has the headers and the chunks, then its
// stream is reset (Envoy cannot answer after headers went downstream); on_log sees flag UC
// and details upstream_reset_after_response_started{connection_termination}.
func TestUpstreamResetMidStream(t *testing.T) {
	h := probe(t, `
log get_property response.flags
log get_property response.code_details
`, hostsim.WithUpstream(func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), BodyChunks: [][]byte{[]byte(events3[0])},
			ChunkDelays: []time.Duration{50 * time.Millisecond},
			Reset:       &hostsim.UpstreamReset{Reason: hostsim.ResetConnectionTermination, After: 100 * time.Millisecond}}, nil
	}))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq})
	if resp.StatusCode != 200 || string(resp.Body) != events3[0] || resp.Reset == "" {
		t.Fatalf("response %d %q reset %q", resp.StatusCode, resp.Body, resp.Reset)
	}
	last := resp.Received[len(resp.Received)-1]
	if last.Kind != hostsim.ClientReset || last.At.Sub(resp.Start) != 150*time.Millisecond {
		t.Fatalf("last event %+v, want a reset at 150ms", last)
	}
	const details = "upstream_reset_after_response_started{connection_termination}"
	if resp.Flags != hostsim.FlagUpstreamConnectionTermination || resp.Details != details {
		t.Fatalf("flags %v details %q", resp.Flags, resp.Details)
	}
	requireTrace(t, h.Host, "worker-0", "cb log", "op get_property response.flags -> Ok 0x4000000000000000",
		"op get_property response.code_details -> Ok "+details)
}

// The same reset while the filter still holds the response headers: the router's reply
// replaces the response (sendDirectLocalReply), bypassing the filter.
func TestUpstreamResetWhileHeadersHeld(t *testing.T) {
	h := probe(t, "response_headers ret 1\nresponse_body ret 1", hostsim.WithUpstream(
		func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
			return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), BodyChunks: [][]byte{[]byte("partial")},
				Reset: &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteReset}}, nil
		}))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq})
	want := "upstream connect error or disconnect/reset before headers. reset reason: remote reset"
	if resp.StatusCode != 503 || string(resp.Body) != want || resp.Reset != "" {
		t.Fatalf("response %d %q reset %q", resp.StatusCode, resp.Body, resp.Reset)
	}
	if resp.Flags != hostsim.FlagUpstreamRemoteReset || resp.Details != "upstream_reset_after_response_started{remote_reset}" {
		t.Fatalf("flags %v details %q", resp.Flags, resp.Details)
	}
	requireNoLine(t, h.Host, "worker-0", "ctx=2 0 1") // no body callback for the router's reply
}

// The router's own replies when the upstream cannot answer go through the filter, which
// reads Envoy's flag and details in on_response_headers; an upstream response reads
// via_upstream and no flags. Before any response the details are NotFound and flags 0.
func TestRouterRepliesCarryFlagsAndDetails(t *testing.T) {
	tests := []struct {
		name    string
		err     error  // what the upstream returns
		status  int    // what the client gets
		body    string // and its body
		flags   string // response.flags as the probe logs it (8-byte LE hex)
		details string
	}{
		{"upstream answers", nil, 200, "ok", "0x0000000000000000", "via_upstream"},
		{"cluster not found", hostsim.ErrClusterNotFound, 503, "", "0x0000000100000000", "cluster_not_found"},
		{"no healthy upstream", hostsim.ErrNoHealthyUpstream, 503, "no healthy upstream", "0x0200000000000000", "no_healthy_upstream"},
		{"connection refused", &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteConnectionFailure,
			TransportFailure: "delayed connect error: Connection refused"}, 503,
			"upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
			"0x2000000000000000", "upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}"},
		{"connect timeout", &hostsim.UpstreamReset{Reason: hostsim.ResetConnectionTimeout}, 503,
			"upstream connect error or disconnect/reset before headers. reset reason: connection timeout",
			"0x2000000000000000", "upstream_reset_before_response_started{connection_timeout}"},
		{"any other error", errors.New("dial tcp: boom"), 503,
			"upstream connect error or disconnect/reset before headers. reset reason: remote connection failure",
			"0x2000000000000000", "upstream_reset_before_response_started{remote_connection_failure}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := probe(t, `
request_headers get_property response.flags
request_headers get_property response.code_details
response_headers get_property response.flags
response_headers get_property response.code_details
`, hostsim.WithUpstream(func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
				if tt.err != nil {
					return nil, tt.err
				}
				return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Body: []byte("ok")}, nil
			}))
			resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
			if resp.StatusCode != tt.status || string(resp.Body) != tt.body {
				t.Fatalf("response %d %q", resp.StatusCode, resp.Body)
			}
			requireTrace(t, h.Host, "worker-0",
				"cb request_headers", "op get_property response.flags -> Ok 0x0000000000000000",
				"op get_property response.code_details -> NotFound",
				"cb response_headers", "op get_property response.flags -> Ok "+tt.flags,
				"op get_property response.code_details -> Ok "+tt.details)
			if resp.Details != tt.details {
				t.Errorf("Response.Details %q", resp.Details)
			}
		})
	}
}

// The filter's own local reply: its details with spaces made underscores
// (StringUtil::replaceAllEmptySpace), seen by its own response callbacks in the request phase.
func TestLocalReplyDetailsAsEnvoyRecordsThem(t *testing.T) {
	// The probe reads '+' as a space: the plugin sends "all targets cooling down".
	h := probe(t, `
request_headers local_response 503 all+targets+cooling+down -
response_headers get_property response.code_details
log get_property response.code_details
`)
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	const want = "all_targets_cooling_down"
	if resp.StatusCode != 503 || resp.Details != want || resp.Flags != 0 {
		t.Fatalf("response %d details %q flags %v", resp.StatusCode, resp.Details, resp.Flags)
	}
	if resp.LocalReply == nil || resp.LocalReply.StatusCodeDetail != "all targets cooling down" {
		t.Fatalf("local reply %+v: want the plugin's own details", resp.LocalReply)
	}
	requireTrace(t, h.Host, "worker-0", "cb response_headers", "op get_property response.code_details -> Ok "+want,
		"cb log", "op get_property response.code_details -> Ok "+want)
}

// Request body chunks arrive at their virtual delays; the filter sees each one, and the
// upstream receives the body byte for byte with the chunk boundaries it passed the filter in.
func TestPacedRequestBodyReachesUpstreamByteForByte(t *testing.T) {
	var got *hostsim.UpstreamRequest
	h := probe(t, "", hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		got = r
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200")}, nil
	}))
	chunks := [][]byte{[]byte(`{"model":"gpt-4o",`), []byte(`"messages":[]`), []byte(`}`)}
	start := h.Clock().Now()
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq, BodyChunks: chunks,
		ChunkDelays: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}})
	if resp.StatusCode != 200 || got == nil || string(got.Body) != `{"model":"gpt-4o","messages":[]}` || len(got.BodyChunks) != 3 {
		t.Fatalf("response %d upstream %+v", resp.StatusCode, got)
	}
	for i, c := range got.BodyChunks {
		if string(c) != string(chunks[i]) {
			t.Errorf("chunk %d %q, want %q", i, c, chunks[i])
		}
	}
	if d := h.Clock().Now().Sub(start); d != 60*time.Millisecond {
		t.Errorf("virtual time %v, want 60ms", d)
	}
	requireTrace(t, h.Host, "worker-0", "cb request_body ctx=2 18 0", "cb request_body ctx=2 13 0", "cb request_body ctx=2 1 1")
}

// A client that goes away mid-response (Request.ResetAfter): the stream is reset as a
// downstream disconnect (on_log reads DC and downstream_remote_disconnect), nothing more
// reaches the filter, and the upstream's context is cancelled.
func TestClientResetMidResponse(t *testing.T) {
	var upCtx context.Context
	h := probe(t, "log get_property response.flags\nlog get_property response.code_details",
		hostsim.WithUpstream(func(ctx context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
			upCtx = ctx
			return sse(events3, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond})(ctx, r)
		}))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq, ResetAfter: 150 * time.Millisecond})
	if resp.Reset != hostsim.ResetDownstreamRemoteDisconnect || string(resp.Body) != events3[0] {
		t.Fatalf("response reset %q body %q", resp.Reset, resp.Body)
	}
	if resp.Flags != hostsim.FlagDownstreamConnectionTermination {
		t.Fatalf("flags %v", resp.Flags)
	}
	if upCtx == nil || upCtx.Err() == nil {
		t.Fatal("the upstream's context was not cancelled")
	}
	requireTrace(t, h.Host, "worker-0", "cb response_body ctx=2 15 0", "cb log",
		"op get_property response.flags -> Ok 0x0040000000000000",
		"op get_property response.code_details -> Ok downstream_remote_disconnect", "cb done", "cb delete")
	if n := strings.Count(strings.Join(trace(h.Host, "worker-0"), "\n"), "cb response_body"); n != 1 {
		t.Fatalf("%d body callbacks, want 1 (the client left after the first event)", n)
	}
	if n := h.Host.LiveStreams(); n != 0 {
		t.Fatalf("%d live streams", n)
	}
}

// Next reads what reached the client event by event on the virtual clock, so a test can
// reset after the first event.
func TestNextThenReset(t *testing.T) {
	h := probe(t, "", hostsim.WithUpstream(sse(events3, []time.Duration{time.Second, time.Second, time.Second})))
	ex, err := h.Worker(0).StartHTTP(&hostsim.Request{Headers: postReq})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ev, err := ex.Next(ctx); err != nil || ev.Kind != hostsim.ClientHeaders {
		t.Fatalf("first event %+v %v", ev, err)
	}
	ev, err := ex.Next(ctx)
	if err != nil || ev.Kind != hostsim.ClientData || string(ev.Data) != events3[0] || ev.At.Sub(h.Clock().Now()) != 0 {
		t.Fatalf("second event %+v %v", ev, err)
	}
	if err := ex.ResetBy(hostsim.DownstreamStreamReset); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the reset: %v, want io.EOF", err)
	}
	if r := ex.Response(); r.Flags != hostsim.FlagDownstreamRemoteReset || r.Details != "via_upstream" {
		t.Fatalf("flags %v details %q", r.Flags, r.Details)
	}
}

// The route timeout and the upstream idle timeout: before the response started the router
// answers 504 through the filter; a stalled stream is reset after its headers went out.
func TestUpstreamTimeouts(t *testing.T) {
	tests := []struct {
		name      string
		opt       hostsim.Option
		delay     time.Duration // before the upstream's headers
		chunkGap  time.Duration // before its first chunk
		wantCode  int
		wantReset bool
		details   string
	}{
		{"route timeout before headers", hostsim.WithRouteTimeout(time.Second), 2 * time.Second, 0, 504, false, "response_timeout"},
		{"idle before headers", hostsim.WithUpstreamIdleTimeout(time.Second), 2 * time.Second, 0, 504, false, "upstream_per_try_idle_timeout"},
		{"stalled stream", hostsim.WithUpstreamIdleTimeout(time.Second), 0, 5 * time.Second, 200, true, "upstream_per_try_idle_timeout"},
		{"route timeout mid-stream", hostsim.WithRouteTimeout(time.Second), 0, 5 * time.Second, 200, true, "response_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := probe(t, "", tt.opt, hostsim.WithUpstream(func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
				return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Delay: tt.delay,
					BodyChunks: [][]byte{[]byte("late")}, ChunkDelays: []time.Duration{tt.chunkGap}}, nil
			}))
			resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
			if resp.StatusCode != tt.wantCode || (resp.Reset != "") != tt.wantReset {
				t.Fatalf("response %d reset %q", resp.StatusCode, resp.Reset)
			}
			if resp.Flags != hostsim.FlagUpstreamRequestTimeout || resp.Details != tt.details {
				t.Fatalf("flags %v details %q", resp.Flags, resp.Details)
			}
			if !tt.wantReset && string(resp.Body) != "upstream request timeout" {
				t.Fatalf("body %q", resp.Body)
			}
		})
	}
}

// The router resolves the cluster when the request headers pass the filter: an unknown one
// is answered before any request body reaches the filter, as in Envoy.
func TestRouteResolvedAtHeaders(t *testing.T) {
	calls := 0
	h := probe(t, "request_body log 2 body-seen", hostsim.WithUpstream(echoUpstream(&calls)),
		hostsim.WithRouteResolver(func(_ string, headers [][2]string) error {
			if v, _ := headerOf(headers, "x-spillway-cluster"); v == "nowhere" {
				return hostsim.ErrClusterNotFound
			}
			return nil
		}))
	resp := h.RunHTTP(&hostsim.Request{Headers: append(hdrs("x-spillway-cluster", "nowhere"), postReq...), Body: []byte("{}")})
	if resp.StatusCode != 503 || len(resp.Body) != 0 || resp.Flags != hostsim.FlagNoClusterFound || calls != 0 {
		t.Fatalf("response %d %q flags %v after %d upstream calls", resp.StatusCode, resp.Body, resp.Flags, calls)
	}
	requireNoLine(t, h.Host, "worker-0", "cb request_body")
	if resp := h.RunHTTP(&hostsim.Request{Headers: postReq, Body: []byte("{}")}); resp.StatusCode != 200 || calls != 1 {
		t.Fatalf("a known cluster: %d after %d calls", resp.StatusCode, calls)
	}
}

// proxy_close_stream while the response goes to the client (Context::closeStream): the
// stream is reset after the callback that asks for it, before what that callback let
// through goes on — so its data never reaches the client — while the chunks of earlier
// callbacks have; the upstream request is cancelled; the details stay via_upstream, set by
// the router before the headers (closeStream sets wasm_close_stream only when none are
// set); log, done and delete still run.
func TestCloseStreamMidResponse(t *testing.T) {
	delays := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	for _, c := range []struct {
		name     string        // where the plugin asks for the reset
		script   string        // the probe's script
		body     string        // what reached the client
		bodyCbs  int           // body callbacks the plugin got
		resetAt  time.Duration // when the client's stream was reset
		closedBy string        // the trace line of the close
	}{
		{"in a body callback, after replacing its data",
			"response_body set_buffer 1 0 99 REPLACED\nresponse_body close 1",
			"", 1, 50 * time.Millisecond, "op close 1 -> Ok"},
		{"from a tick through the stream's context",
			"request_headers tick_period 100\ntick effective 2\ntick close 1",
			events3[0], 1, 100 * time.Millisecond, "op close 1 -> Ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var upCtx context.Context
			h := probe(t, c.script+"\nlog get_property response.code_details",
				hostsim.WithUpstream(func(ctx context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
					upCtx = ctx
					return sse(events3, delays)(ctx, r)
				}))
			resp := h.RunHTTP(&hostsim.Request{Headers: postReq})
			if resp.StatusCode != 200 || string(resp.Body) != c.body || resp.Reset != hostsim.DetailsWasmCloseStream {
				t.Fatalf("response %d %q reset %q", resp.StatusCode, resp.Body, resp.Reset)
			}
			last := resp.Received[len(resp.Received)-1]
			if last.Kind != hostsim.ClientReset || last.At.Sub(resp.Start) != c.resetAt {
				t.Fatalf("last event %+v, want a reset at %v", last, c.resetAt)
			}
			if resp.Details != hostsim.DetailsViaUpstream || resp.Flags != 0 {
				t.Fatalf("details %q flags %v, want via_upstream and none", resp.Details, resp.Flags)
			}
			if upCtx == nil || upCtx.Err() == nil {
				t.Fatal("the upstream's context was not cancelled")
			}
			requireTrace(t, h.Host, "worker-0", c.closedBy, "cb log", "op get_property response.code_details -> Ok via_upstream",
				"cb done", "cb delete")
			if n := strings.Count(strings.Join(trace(h.Host, "worker-0"), "\n"), "cb response_body"); n != c.bodyCbs {
				t.Fatalf("%d body callbacks, want %d", n, c.bodyCbs)
			}
			if n := h.Host.LiveStreams(); n != 0 {
				t.Fatalf("%d live streams", n)
			}
		})
	}
}

// Before anything set the details (a request-phase close), they become wasm_close_stream.
func TestCloseStreamDetailsWhenUnset(t *testing.T) {
	h := probe(t, "request_headers close 0\nlog get_property response.code_details")
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq})
	if resp.Reset != hostsim.DetailsWasmCloseStream || resp.Details != hostsim.DetailsWasmCloseStream {
		t.Fatalf("reset %q details %q", resp.Reset, resp.Details)
	}
}
