package stream

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// fakeGuest is a guest without a VM: it records each callback with its arguments and
// answers with the case's function for it (0 without one).
type fakeGuest struct {
	s         *Stream
	answer    map[Callback]func(g *fakeGuest) (uint64, error)
	calls     []string
	forceStop bool
	failed    bool // Failed and Gone answer this
	ended     int  // how many times Ended was heard
}

func (g *fakeGuest) Call(cb Callback, a, b uint64) (uint64, bool, error) {
	g.calls = append(g.calls, fmt.Sprintf("%v(%d,%d)", cb, a, b))
	g.forceStop = false
	var r uint64
	var err error
	if f := g.answer[cb]; f != nil {
		r, err = f(g)
	}
	return r, g.forceStop, err
}

func (g *fakeGuest) Failed() bool { return g.failed }
func (g *fakeGuest) Gone() bool   { return g.failed }
func (g *fakeGuest) Ended()       { g.ended++ }

// localReply is proxy_send_local_response from the running callback, as the VM does it.
func (g *fakeGuest) localReply(code uint32, details, body string) {
	lr := &filtermanager.LocalReply{StatusCode: code, StatusCodeDetail: details, Data: []byte(body), GRPCStatus: -1}
	if SendLocalResponse(g.s, lr) {
		g.forceStop = true
	}
}

// returns answers a callback with a fixed status.
func returns(r uint64) func(*fakeGuest) (uint64, error) {
	return func(*fakeGuest) (uint64, error) { return r, nil }
}

var errTrap = errors.New("wasm error: unreachable")

// step drives the stream one event on and returns the action and error it got.
type step func(s *Stream, th *Thread) (types.Action, error)

func reqHeaders(eos bool) step {
	return func(s *Stream, _ *Thread) (types.Action, error) {
		return s.OnHeaders(&s.Req, [][2]string{{":path", "/"}}, eos)
	}
}

func reqBody(chunk string, eos bool) step {
	return func(s *Stream, _ *Thread) (types.Action, error) { return s.OnBody(&s.Req, []byte(chunk), eos) }
}

func respHeaders(eos bool) step {
	return func(s *Stream, _ *Thread) (types.Action, error) {
		s.SetDetails("via_upstream") // the router sets it before encodeHeaders
		return s.OnHeaders(&s.Resp, [][2]string{{":status", "200"}}, eos)
	}
}

func respBody(chunk string, eos bool) step {
	return func(s *Stream, _ *Thread) (types.Action, error) { return s.OnBody(&s.Resp, []byte(chunk), eos) }
}

// continueFromRoot is a continue a root callback (a tick, a callout answer) asked for on
// the stream, run once that callback returned.
func continueFromRoot(t abi.StreamType, settle bool) step {
	return func(s *Stream, th *Thread) (types.Action, error) {
		st := ContinueStream(s, t)
		if settle {
			th.Settle()
		}
		return s.Action, statusErr(st)
	}
}

// localReplyFromRoot is a local reply a root callback sent on the stream, not yet run.
func localReplyFromRoot(s *Stream, _ *Thread) (types.Action, error) {
	SendLocalResponse(s, &filtermanager.LocalReply{StatusCode: 403, GRPCStatus: -1})
	return s.Action, nil
}

// settle is the end of a later callback, which runs what is deferred.
func settle(s *Stream, th *Thread) (types.Action, error) {
	th.Settle()
	return s.Action, nil
}

func closeFromRoot(s *Stream, th *Thread) (types.Action, error) {
	st := CloseStream(s, abi.StreamRequest)
	th.Settle()
	return s.Action, statusErr(st)
}

func downstreamReset(s *Stream, _ *Thread) (types.Action, error) {
	return s.Action, s.ResetDownstream(filtermanager.DownstreamDisconnect)
}

func statusErr(st abi.Status) error {
	if st != abi.StatusOK {
		return fmt.Errorf("status %d", st)
	}
	return nil
}

// state is what a case checks of the stream once its steps ran.
type state struct {
	calls       []string                 // the callbacks the guest saw, with their two arguments
	action      types.Action             // what the last step returned
	err         error                    // the error any step returned (errors.Is), nil for none
	reqHeaders  bool                     // the request headers went on past the filter
	reqBody     string                   // the request body that went on
	reqComplete bool                     // the whole request went on
	respStatus  string                   // :status of the response headers the filter saw ("" none)
	respBody    string                   // the response body that went on
	respDone    bool                     // the whole response went on
	local       uint32                   // status of the plugin's local reply (0: none)
	final       uint32                   // status of a reply that replaced the response (0: none)
	reset       string                   // the reset details ("" none)
	details     string                   // response code details
	flags       streaminfo.ResponseFlags // response flags
	ended       int                      // how many times the guest heard the stream ended
}

func TestStream(t *testing.T) {
	allow := Config{AllowHeadersStopIteration: true, BufferLimit: 1 << 20, RouteBufferLimit: 1 << 20}
	stopAll := allow
	stopAll.AllowHeadersStopIteration = false
	small := allow
	small.BufferLimit, small.RouteBufferLimit = 4, 4
	failOpen := allow
	failOpen.FailOpen = true
	const create = "proxy_on_context_create(0,0)"
	endCalls := []string{"proxy_on_log(0,0)", "proxy_on_done(0,0)", "proxy_on_delete(0,0)"}

	cases := []struct {
		name    string                                        // the behaviour
		cfg     Config                                        // the filter manager's options
		answer  map[Callback]func(*fakeGuest) (uint64, error) // the guest's callbacks
		failed  bool                                          // the VM has failed
		steps   []step                                        // what happens, in order
		want    state                                         // how the stream ends up
		wantErr error                                         // an error a step returns (errors.Is)
	}{
		{
			name:   "a headers pause holds the headers until a continue from a root callback",
			cfg:    allow,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: returns(1)},
			steps:  []step{reqHeaders(true), continueFromRoot(abi.StreamRequest, true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,1)"}, action: types.ActionPause,
				reqHeaders: true, reqComplete: true},
		},
		{
			name:   "a continue is deferred: nothing moves before the settle",
			cfg:    allow,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: returns(1)},
			steps:  []step{reqHeaders(true), continueFromRoot(abi.StreamRequest, false)},
			want:   state{calls: []string{create, "proxy_on_request_headers(1,1)"}, action: types.ActionPause},
		},
		{
			name:   "without allow_on_headers_stop_iteration the body is held and delivered on continue",
			cfg:    stopAll,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: returns(1)},
			steps:  []step{reqHeaders(false), reqBody("ab", true), continueFromRoot(abi.StreamRequest, true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,0)", "proxy_on_request_body(2,1)"},
				action: types.ActionContinue, reqHeaders: true, reqBody: "ab", reqComplete: true},
		},
		{
			name: "a local reply from a body callback runs the plugin's own response callbacks",
			cfg:  allow,
			answer: map[Callback]func(*fakeGuest) (uint64, error){
				OnRequestBody: func(g *fakeGuest) (uint64, error) {
					g.localReply(429, "rate limited", "slow down")
					return 0, nil // the local reply overrides it to stop
				},
			},
			steps: []step{reqHeaders(false), reqBody("x", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,0)", "proxy_on_request_body(1,1)",
				"proxy_on_response_headers(3,0)", "proxy_on_response_body(9,1)"},
				action: types.ActionPause, reqHeaders: true, respStatus: "429", respBody: "slow down", respDone: true,
				local: 429, details: "rate_limited"},
		},
		{
			name:   "a buffered request body past the buffer limit is answered 413 through the filter",
			cfg:    small,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestBody: returns(1)},
			steps:  []step{reqHeaders(false), reqBody("abc", false), reqBody("de", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,0)", "proxy_on_request_body(3,0)",
				"proxy_on_response_headers(3,0)", "proxy_on_response_body(17,1)"},
				action: types.ActionPause, reqHeaders: true, respStatus: "413", respBody: "Payload Too Large",
				respDone: true, details: filtermanager.DetailsRequestPayloadTooLarge},
		},
		{
			name:   "a buffered response body past the limit after its headers went downstream resets",
			cfg:    small,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnResponseBody: returns(1)},
			steps:  []step{reqHeaders(true), respHeaders(false), respBody("abc", false), respBody("de", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,1)", "proxy_on_response_headers(1,0)",
				"proxy_on_response_body(3,0)"},
				action: types.ActionPause, reqHeaders: true, reqComplete: true, respStatus: "200", respDone: true,
				reset:   "response headers already sent: " + filtermanager.DetailsResponsePayloadTooLarge,
				details: filtermanager.DetailsResponsePayloadTooLarge},
		},
		{
			name: "a close from a response body callback resets the stream and keeps via_upstream",
			cfg:  allow,
			answer: map[Callback]func(*fakeGuest) (uint64, error){
				OnResponseBody: func(g *fakeGuest) (uint64, error) { return 0, statusErr(CloseStream(g.s, abi.StreamResponse)) },
			},
			steps: []step{reqHeaders(true), respHeaders(false), respBody("chunk", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,1)", "proxy_on_response_headers(1,0)",
				"proxy_on_response_body(5,1)"}, action: types.ActionContinue, reqHeaders: true, reqComplete: true,
				respStatus: "200", respBody: "chunk", respDone: true, reset: DetailsWasmCloseStream,
				details: "via_upstream"},
		},
		{
			name:   "a downstream reset runs log, done and delete and drops a pending continue and local reply",
			cfg:    allow,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: returns(1)},
			steps: []step{reqHeaders(true), continueFromRoot(abi.StreamRequest, false), localReplyFromRoot,
				downstreamReset, settle},
			want: state{calls: append([]string{create, "proxy_on_request_headers(1,1)"}, endCalls...),
				action: types.ActionPause, reset: filtermanager.ResetDownstreamRemoteDisconnect,
				details: filtermanager.ResetDownstreamRemoteDisconnect,
				flags:   streaminfo.FlagDownstreamConnectionTermination, ended: 1},
		},
		{
			name:  "a downstream reset before any request headers ends without callbacks",
			cfg:   allow,
			steps: []step{downstreamReset},
			want: state{reset: filtermanager.ResetDownstreamRemoteDisconnect,
				details: filtermanager.ResetDownstreamRemoteDisconnect,
				flags:   streaminfo.FlagDownstreamConnectionTermination, ended: 1},
		},
		{
			name:    "a trap fails the stream closed: 503 wasm_fail_stream",
			cfg:     allow,
			answer:  map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: func(*fakeGuest) (uint64, error) { return 0, errTrap }},
			steps:   []step{reqHeaders(true)},
			want:    state{calls: []string{create, "proxy_on_request_headers(1,1)"}, action: types.ActionPause, respDone: true, final: 503, details: filtermanager.DetailsWasmFailStream},
			wantErr: errTrap,
		},
		{
			name:    "FAIL_OPEN: after a trap the filter is bypassed",
			cfg:     failOpen,
			answer:  map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: func(*fakeGuest) (uint64, error) { return 0, errTrap }},
			steps:   []step{reqHeaders(false), reqBody("ab", true)},
			want:    state{calls: []string{create, "proxy_on_request_headers(1,0)"}, action: types.ActionContinue, reqHeaders: true, reqBody: "ab", reqComplete: true},
			wantErr: errTrap,
		},
		{
			name: "FAIL_OPEN: the chunk whose body callback trapped goes on, with the held headers and what came before",
			cfg:  failOpen,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: returns(1),
				OnRequestBody: func(*fakeGuest) (uint64, error) { return 0, errTrap }},
			steps: []step{reqHeaders(false), reqBody("ab", false), reqBody("cd", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,0)", "proxy_on_request_body(2,0)"},
				action: types.ActionContinue, reqHeaders: true, reqBody: "abcd", reqComplete: true},
			wantErr: errTrap,
		},
		{
			name:   "on a failed VM a deferred continue is dropped and a close still runs",
			cfg:    allow,
			answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestHeaders: returns(1)},
			steps: []step{reqHeaders(true), func(s *Stream, th *Thread) (types.Action, error) {
				s.guest.(*fakeGuest).failed = true
				_ = ContinueStream(s, abi.StreamRequest)
				return closeFromRoot(s, th)
			}},
			want: state{calls: []string{create, "proxy_on_request_headers(1,1)"}, action: types.ActionPause,
				respDone: true, reset: DetailsWasmCloseStream, details: DetailsWasmCloseStream},
		},
		{
			name: "a VM that failed under a live stream: no more callbacks, FAIL_CLOSED fails it once (CHECK_FAIL_HTTP)",
			cfg:  allow,
			steps: []step{reqHeaders(true), func(s *Stream, th *Thread) (types.Action, error) {
				s.guest.(*fakeGuest).failed = true // another context's callback trapped
				return respHeaders(false)(s, th)
			}, respBody("late", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,1)"}, action: types.ActionPause,
				reqHeaders: true, reqComplete: true, respStatus: "200", respDone: true, final: 503,
				details: filtermanager.DetailsWasmFailStream},
		},
		{
			name: "a VM that failed under a live stream: FAIL_OPEN lets the rest through without callbacks",
			cfg:  failOpen,
			steps: []step{reqHeaders(true), func(s *Stream, th *Thread) (types.Action, error) {
				s.guest.(*fakeGuest).failed = true
				return respHeaders(false)(s, th)
			}, respBody("late", true)},
			want: state{calls: []string{create, "proxy_on_request_headers(1,1)"}, action: types.ActionContinue,
				reqHeaders: true, reqComplete: true, respStatus: "200", respBody: "late", respDone: true,
				details: "via_upstream"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			th := NewThread(c.cfg)
			g := &fakeGuest{answer: c.answer}
			s := &Stream{}
			s.Init(th, 2, g, nil)
			g.s = s
			var got state
			for _, st := range c.steps {
				a, err := st(s, th)
				got.action = a
				if err != nil && got.err == nil {
					got.err = err
				}
			}
			if !errors.Is(got.err, c.wantErr) || (c.wantErr == nil && got.err != nil) {
				t.Errorf("error %v, want %v", got.err, c.wantErr)
			}
			got.err = nil
			got.calls, got.ended = g.calls, g.ended
			got.reqHeaders, got.reqBody, got.reqComplete = s.Req.ForwardedHeaders, string(s.Req.ForwardedBody), s.Req.Complete
			got.respStatus, _ = abi.HeaderValue(s.Resp.Headers, ":status")
			got.respBody, got.respDone = string(s.Resp.ForwardedBody), s.Resp.Complete
			if s.Local != nil {
				got.local = s.Local.StatusCode
			}
			if s.Final != nil {
				got.final = s.Final.StatusCode
			}
			got.reset, got.details, got.flags = s.ResetDetails, s.Details, s.Flags
			if !slices.Equal(got.calls, c.want.calls) {
				t.Errorf("callbacks\n got %q\nwant %q", got.calls, c.want.calls)
			}
			got.calls, c.want.calls = nil, nil
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
				t.Errorf("stream\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// fakeDriver counts what the stream tells the exchange driving it.
type fakeDriver struct{ activity, settled, resets int }

func (d *fakeDriver) Activity()          { d.activity++ }
func (d *fakeDriver) Settled()           { d.settled++ }
func (d *fakeDriver) ClientReset() error { d.resets++; return nil }

// A driven stream tells its driver when the filter manager passes something on and when
// deferred actions settled, and leaves a client's reset to it (its finish completes the
// stream).
func TestDriver(t *testing.T) {
	th := NewThread(Config{AllowHeadersStopIteration: true, BufferLimit: 1 << 20, RouteBufferLimit: 1 << 20})
	g := &fakeGuest{answer: map[Callback]func(*fakeGuest) (uint64, error){OnRequestBody: returns(1)}}
	d := &fakeDriver{}
	s := &Stream{}
	s.Init(th, 2, g, d)
	g.s = s
	if _, err := s.OnHeaders(&s.Req, nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OnBody(&s.Req, []byte("ab"), true); err != nil {
		t.Fatal(err)
	}
	if *d != (fakeDriver{settled: 2}) {
		t.Fatalf("after headers and a buffered body: %+v, want 2 settles and no activity", *d)
	}
	ContinueStream(s, abi.StreamRequest)
	th.Settle()
	// commonContinue decodes the buffered data: activity; the continue settles the stream,
	// and the request it completed touches it once more.
	if *d != (fakeDriver{activity: 1, settled: 4}) || string(s.Req.ForwardedBody) != "ab" {
		t.Fatalf("after the continue: %+v, body %q; want 1 activity, 4 settles, body \"ab\"", *d, s.Req.ForwardedBody)
	}
	if err := s.ResetDownstream(filtermanager.DownstreamStreamReset); err != nil {
		t.Fatal(err)
	}
	if d.resets != 1 || g.ended != 0 || len(g.calls) != 3 {
		t.Fatalf("reset: driver %+v, ended %d, calls %q: want the driver to end it", *d, g.ended, g.calls)
	}
	if s.Flags != streaminfo.FlagDownstreamRemoteReset || s.ResetDetails != "downstream_remote_reset" {
		t.Fatalf("reset recorded flags %v, reset %q", s.Flags, s.ResetDetails)
	}
}

// The maps the guest may reach depend on the phase (Context::getMap and friends):
// BadArgument outside their phase, read-only in on_log with NotFound for a missing one.
func TestHeaderMap(t *testing.T) {
	type tc struct {
		name    string          // the phase and map
		setup   func(s *Stream) // where the stream is
		t       abi.MapType     // the map asked for
		mutable bool            // asked for writing
		want    abi.Status      // the answer
		trailer bool            // the call added empty trailers
	}
	headers := func(s *Stream) {
		s.Req.Headers, s.Req.GotHeaders, s.Req.HeadersAvail = [][2]string{{":path", "/"}}, true, true
	}
	inLog := func(s *Stream) {
		s.Req.Headers, s.Req.GotHeaders = [][2]string{{":path", "/"}}, true
		s.inLog = true
	}
	lastBody := func(s *Stream) {
		s.Req.GotHeaders, s.Req.BodyAvail, s.Req.EndStream = true, true, true
	}
	for _, c := range []tc{
		{"request headers in their callback", headers, abi.MapRequestHeaders, true, abi.StatusOK, false},
		{"response headers before the response", headers, abi.MapResponseHeaders, false, abi.StatusBadArgument, false},
		{"request trailers without any", headers, abi.MapRequestTrailers, false, abi.StatusBadArgument, false},
		{"request headers in on_log", inLog, abi.MapRequestHeaders, false, abi.StatusOK, false},
		{"request headers in on_log, for writing", inLog, abi.MapRequestHeaders, true, abi.StatusBadArgument, false},
		{"response headers in on_log without a response", inLog, abi.MapResponseHeaders, false, abi.StatusNotFound, false},
		{"request trailers added from the last body callback", lastBody, abi.MapRequestTrailers, true, abi.StatusOK, true},
		{"request trailers read in the last body callback", lastBody, abi.MapRequestTrailers, false, abi.StatusBadArgument, false},
		{"a callout's headers are not the stream's", headers, abi.MapHTTPCallResponseHeaders, false, abi.StatusBadArgument, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Stream{}
			c.setup(s)
			m, st := s.HeaderMap(c.t, c.mutable)
			if st != c.want || (st == abi.StatusOK) != (m != nil) {
				t.Fatalf("HeaderMap = %v, %v; want status %v", m, st, c.want)
			}
			if s.Req.HasTrailers != c.trailer {
				t.Fatalf("trailers added: %v, want %v", s.Req.HasTrailers, c.trailer)
			}
		})
	}
}

// Continue, close and a local reply from a root context are silent no-ops; the
// stream types outside the request and response answer as Envoy does.
func TestStreamCallsFromRoot(t *testing.T) {
	for _, c := range []struct {
		name string            // the call
		got  func() abi.Status // make it without a stream
		want abi.Status        // Envoy's answer
	}{
		{"continue the request", func() abi.Status { return ContinueStream(nil, abi.StreamRequest) }, abi.StatusOK},
		{"continue the downstream", func() abi.Status { return ContinueStream(nil, abi.StreamDownstream) }, abi.StatusOK},
		{"continue the upstream", func() abi.Status { return ContinueStream(nil, abi.StreamUpstream) }, abi.StatusUnimplemented},
		{"continue an unknown stream type", func() abi.Status { return ContinueStream(nil, abi.StreamUpstream+1) }, abi.StatusBadArgument},
		{"close the response", func() abi.Status { return CloseStream(nil, abi.StreamResponse) }, abi.StatusOK},
		{"close an unknown stream type", func() abi.Status { return CloseStream(nil, abi.StreamUpstream+1) }, abi.StatusBadArgument},
	} {
		if got := c.got(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if SendLocalResponse(nil, &filtermanager.LocalReply{StatusCode: 403}) {
		t.Error("a local reply from a root context was recorded")
	}
}
