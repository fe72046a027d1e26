package hostsim_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// A stream's buffer limit, one for both directions, is the connection's raised by the
// route's request_body_buffer_limit (never lowered), from the request headers on
// (envoyproxy/envoy#42607) or, for an Envoy without that change, once the headers reach
// the router: there a filter that holds the headers while it buffers the body gets
// Envoy's 413 past the connection's limit unless that limit is raised.
func TestBufferLimits(t *testing.T) {
	// The probe buffers the request body and continues at the trailers ...
	const bufferRequest = "request_body ret 1"
	// ... or holds the request headers too while it buffers the body, as Spillway does ...
	const holdRequest = "request_headers ret 1\nrequest_body ret 1"
	// ... or holds the response headers and buffers its body (a response over the limit is
	// then answered 500; once headers went out it would be a reset).
	const bufferResponse = "response_headers ret 1\nresponse_body ret 1"
	tests := []struct {
		name      string
		script    string // the probe's script
		connLimit int    // WithBufferLimit
		reqLimit  int    // WithRequestBodyBufferLimit (0: not set)
		atRouter  bool   // WithRouteBufferLimitAtRouter: Envoy before #42607
		reqBody   int    // request body bytes, in two chunks
		respBody  int    // response body bytes, in two chunks
		wantCode  int    // the client's status
		details   string // the stream's response code details
	}{
		{"request within the connection limit", bufferRequest, 8, 0, false, 8, 2, 200, "via_upstream"},
		{"request over the connection limit", bufferRequest, 8, 0, false, 10, 2, 413, "request_payload_too_large"},
		{"request within the raised limit", bufferRequest, 8, 16, false, 12, 2, 200, "via_upstream"},
		{"request over the raised limit", bufferRequest, 8, 16, false, 20, 2, 413, "request_payload_too_large"},
		{"a smaller route limit lowers nothing", bufferRequest, 8, 4, false, 8, 2, 200, "via_upstream"},
		// With #42607 the route's limit holds from the request headers on, held or not.
		{"held request within the route limit", holdRequest, 8, 16, false, 12, 2, 200, "via_upstream"},
		// Without it a request held at its headers buffers under the connection's limit ...
		{"held request before #42607", holdRequest, 8, 16, true, 12, 2, 413, "request_payload_too_large"},
		// ... unless the connection's limit is raised, as Spillway's bootstrap does ...
		{"held request before #42607, connection limit raised", holdRequest, 16, 16, true, 12, 2, 200, "via_upstream"},
		// ... and still within it.
		{"held request before #42607 over the raised connection limit", holdRequest, 16, 16, true, 20, 2, 413, "request_payload_too_large"},
		// Headers the filter lets through reach the router, which applies the route's limit.
		{"request buffered after the headers passed, before #42607", bufferRequest, 8, 16, true, 12, 2, 200, "via_upstream"},
		{"responses within the connection limit", bufferResponse, 8, 0, false, 2, 8, 200, "via_upstream"},
		{"responses over the connection limit", bufferResponse, 8, 0, false, 2, 12, 500, "response_payload_too_large"},
		// The route's limit raises the response side too: the filter manager has one limit.
		{"responses within the raised limit", bufferResponse, 8, 16, false, 2, 12, 200, "via_upstream"},
		{"responses within the raised limit, before #42607", bufferResponse, 8, 16, true, 2, 12, 200, "via_upstream"},
		{"responses over the raised limit", bufferResponse, 8, 16, false, 2, 20, 500, "response_payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			upstreamCalls := 0
			opts := []hostsim.Option{hostsim.WithBufferLimit(tt.connLimit),
				hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
					upstreamCalls++
					if len(r.Body) != tt.reqBody {
						t.Errorf("upstream got %d body bytes, want %d", len(r.Body), tt.reqBody)
					}
					return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"),
						BodyChunks: halves(tt.respBody), Trailers: hdrs("x-end", "1")}, nil
				})}
			if tt.reqLimit > 0 {
				opts = append(opts, hostsim.WithRequestBodyBufferLimit(tt.reqLimit))
			}
			if tt.atRouter {
				opts = append(opts, hostsim.WithRouteBufferLimitAtRouter())
			}
			h := probe(t, tt.script, opts...)
			resp := h.RunHTTP(&hostsim.Request{Headers: postReq, BodyChunks: halves(tt.reqBody), Trailers: hdrs("x-end", "1")})
			if resp.StatusCode != tt.wantCode || resp.Details != tt.details {
				t.Fatalf("status %d details %q, want %d %q", resp.StatusCode, resp.Details, tt.wantCode, tt.details)
			}
			if wantCalls := map[bool]int{true: 0, false: 1}[tt.wantCode == 413]; upstreamCalls != wantCalls {
				t.Fatalf("%d upstream calls, want %d", upstreamCalls, wantCalls)
			}
			if tt.wantCode == 200 && len(resp.Body) != tt.respBody {
				t.Fatalf("client got %d body bytes, want %d", len(resp.Body), tt.respBody)
			}
		})
	}
}

// halves splits n bytes into two chunks.
func halves(n int) [][]byte {
	b := bytes.Repeat([]byte("x"), n)
	return [][]byte{b[:n/2], b[n/2:]}
}

// The connection manager's stream idle timeout on the virtual clock: an exchange silent in
// both directions for the timeout is answered 408 while the client's request is
// incomplete, 504 once it was complete, replaces response headers the filter holds, and
// resets a stream whose headers went out; every event either way re-arms it.
func TestStreamIdleTimeout(t *testing.T) {
	const idle = time.Second
	tests := []struct {
		name      string
		script    string          // the probe's script
		req       hostsim.Request // the client's request (Headers default to postReq)
		upDelay   time.Duration   // before the upstream's headers
		upGaps    []time.Duration // before each upstream body chunk
		wantCode  int             // the client's status (0: none reached it)
		wantReset bool            // the stream ends in a reset
		wantFlags hostsim.ResponseFlags
		details   string
		at        time.Duration // when the exchange ended, from its start
	}{
		// The upstream takes 2 s to answer a complete request: 504 at 1 s.
		{name: "slow upstream", req: hostsim.Request{Body: []byte("{}")}, upDelay: 2 * time.Second,
			wantCode: 504, wantFlags: hostsim.FlagStreamIdleTimeout, details: "stream_idle_timeout", at: idle},
		// The client sends half its body, then nothing: 408 one second after the last chunk.
		{name: "client stalls", req: hostsim.Request{BodyChunks: [][]byte{[]byte("{"), []byte("}")},
			ChunkDelays: []time.Duration{300 * time.Millisecond, 5 * time.Second}},
			wantCode: 408, wantFlags: hostsim.FlagStreamIdleTimeout, details: "stream_idle_timeout", at: 300*time.Millisecond + idle},
		// A filter holding the request (no continue, no callout answer) re-arms nothing.
		{name: "filter holds the request", script: "request_headers ret 1\nrequest_body ret 1",
			req: hostsim.Request{Body: []byte("{}")}, wantCode: 504, wantFlags: hostsim.FlagStreamIdleTimeout,
			details: "stream_idle_timeout", at: idle},
		// Response headers went out, then the stream stalls: reset at 1 s after them.
		{name: "stalled stream", req: hostsim.Request{Body: []byte("{}")}, upDelay: 200 * time.Millisecond,
			upGaps: []time.Duration{5 * time.Second}, wantCode: 200, wantReset: true,
			wantFlags: hostsim.FlagStreamIdleTimeout, details: "stream_idle_timeout", at: 200*time.Millisecond + idle},
		// The filter holds the response headers and no body follows: the reply replaces them.
		{name: "filter holds the response", script: "response_headers ret 1", req: hostsim.Request{Body: []byte("{}")},
			upDelay: 200 * time.Millisecond, upGaps: []time.Duration{5 * time.Second}, wantCode: 504,
			wantFlags: hostsim.FlagStreamIdleTimeout, details: "stream_idle_timeout", at: 200*time.Millisecond + idle},
		// Events less than a second apart keep a 3 s stream alive.
		{name: "events re-arm it", req: hostsim.Request{BodyChunks: [][]byte{[]byte("{"), []byte("}")},
			ChunkDelays: []time.Duration{800 * time.Millisecond, 800 * time.Millisecond}},
			upDelay: 800 * time.Millisecond, upGaps: []time.Duration{800 * time.Millisecond, 800 * time.Millisecond},
			wantCode: 200, details: "via_upstream", at: 5 * 800 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var upCtx context.Context
			h := probe(t, tt.script, hostsim.WithStreamIdleTimeout(idle),
				hostsim.WithUpstream(func(ctx context.Context, _ *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
					upCtx = ctx
					chunks := make([][]byte, len(tt.upGaps))
					for i := range chunks {
						chunks[i] = []byte("data")
					}
					return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Delay: tt.upDelay,
						BodyChunks: chunks, ChunkDelays: tt.upGaps}, nil
				}))
			req := tt.req
			req.Headers = postReq
			resp := h.RunHTTP(&req)
			if resp.StatusCode != tt.wantCode || (resp.Reset != "") != tt.wantReset {
				t.Fatalf("status %d reset %q, want %d (reset %v)", resp.StatusCode, resp.Reset, tt.wantCode, tt.wantReset)
			}
			if resp.Flags != tt.wantFlags || resp.Details != tt.details {
				t.Fatalf("flags %v details %q, want %v %q", resp.Flags, resp.Details, tt.wantFlags, tt.details)
			}
			if tt.wantReset && resp.Reset != "stream_idle_timeout" {
				t.Fatalf("reset details %q", resp.Reset)
			}
			if !tt.wantReset && tt.wantFlags != 0 && string(resp.Body) != "stream timeout" {
				t.Fatalf("body %q, want Envoy's \"stream timeout\"", resp.Body)
			}
			last := resp.Received[len(resp.Received)-1]
			if got := last.At.Sub(resp.Start); got != tt.at {
				t.Fatalf("ended %v after the start, want %v", got, tt.at)
			}
			if upCtx != nil && tt.wantFlags != 0 && upCtx.Err() == nil {
				t.Fatal("the upstream request outlived the stream")
			}
		})
	}
}

// Without WithStreamIdleTimeout there is no stream idle timer: a silent upstream is waited
// for.
func TestNoStreamIdleTimeoutByDefault(t *testing.T) {
	h := probe(t, "", hostsim.WithUpstream(func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		return &hostsim.UpstreamResponse{Headers: hdrs(":status", "200"), Delay: 30 * time.Minute}, nil
	}))
	if resp := h.RunHTTP(&hostsim.Request{Headers: getReq}); resp.StatusCode != 200 || resp.Flags != 0 {
		t.Fatalf("status %d flags %v", resp.StatusCode, resp.Flags)
	}
}
