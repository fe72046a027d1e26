package hostsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/connmgr"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/retry"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/route"
	"github.com/spillwayproxy/spillway/hostsim/internal/sched"
)

// Request is a whole downstream request for StartHTTP and RunHTTP.
type Request struct {
	Headers [][2]string // must include :method, :path, :authority (and :scheme)
	// Body is sent as one chunk; BodyChunks, when set, as several (Body is then ignored).
	Body       []byte
	BodyChunks [][]byte
	// ChunkDelays[i] is how long after the previous part (the headers, for chunk 0) body
	// chunk i arrives: virtual time with a virtual clock. Missing entries are 0.
	ChunkDelays []time.Duration
	Trailers    [][2]string
	// ResetAfter, when positive, is the client going away (a downstream disconnect: flag DC,
	// details downstream_remote_disconnect) this long after the request started, unless the
	// exchange ended before.
	ResetAfter time.Duration
	// Plugin names the WithPlugin plugin (PluginConfig.Name) whose filter the request goes
	// through, in a filter chain of its own; empty: the first plugin's. An unknown name is
	// ErrNoPlugin.
	Plugin string
}

// UpstreamRequest is what reached the upstream after the filter: on one try, after the
// upstream filter (WithUpstreamFilter) if there is one.
type UpstreamRequest struct {
	// Attempt is the try's number, 1 for the first (the router's attempt count).
	Attempt uint32
	// Cluster is the try's cluster, the route's pick (WithRouteCluster; refreshed before a
	// retry with RetryPolicy.RefreshClusterOnRetry); empty without WithRouteCluster.
	Cluster           string
	Headers, Trailers [][2]string
	// Body is the whole body (not kept for a StartStream exchange with a streaming upstream,
	// which reads it as it passes).
	Body []byte
	// BodyChunks is Body as it passed the filter, one entry per step of the stream (a body
	// callback that continued, or a continue that released buffered data).
	BodyChunks [][]byte
}

// UpstreamResponse is the upstream's answer.
type UpstreamResponse struct {
	Headers    [][2]string // must include ":status"
	Body       []byte
	BodyChunks [][]byte // when set, sent as several chunks (Body is then ignored)
	// ChunkDelays[i] is how long after the previous part (the headers, for chunk 0) body chunk
	// i arrives: SSE pacing, virtual time with a virtual clock. Missing entries are 0.
	ChunkDelays []time.Duration
	Trailers    [][2]string
	// Delay is how long the upstream takes to send its headers (virtual time with a virtual
	// clock).
	Delay time.Duration
	// Reset, when set, ends the response with an upstream reset after the body chunks
	// instead of end of stream (Trailers are then not sent): the router resets the client's
	// stream, or answers 503 if the filter still holds the response headers.
	Reset *UpstreamReset
}

// Response is what the downstream client received.
type Response struct {
	StatusCode int
	Headers    [][2]string
	Body       []byte
	Trailers   [][2]string
	// LocalReply is the local reply the plugin sent, if any.
	LocalReply *LocalResponse
	// Reset holds the reset details when the stream was reset (by the filter, the router, or
	// the client). Headers and Body then hold what the client had received before.
	Reset string
	// Flags and Details are the stream's response flags and response code details at its
	// end, what on_log read as response.flags and response.code_details.
	Flags   ResponseFlags
	Details string
	// Upstream is what reached the upstream on the last try (nil if the request never got
	// there); Tries is what reached it on every try, in order (Upstream is the last).
	Upstream *UpstreamRequest
	Tries    []*UpstreamRequest
	// VM names the worker that served the stream; ContextID is its context id there.
	VM        string
	ContextID uint32
	// Start is when the exchange started; Received is everything that reached the client,
	// in order, with the host clock's time (virtual with a virtual clock).
	Start    time.Time
	Received []ClientEvent
}

// TimeToFirstByte is how long after the start the response headers reached the client
// (false if they never did).
func (r *Response) TimeToFirstByte() (time.Duration, bool) { return r.firstOf(ClientHeaders) }

// TimeToFirstData is how long after the start the first body bytes reached the client (an
// SSE stream's first event), false if none did.
func (r *Response) TimeToFirstData() (time.Duration, bool) { return r.firstOf(ClientData) }

func (r *Response) firstOf(k ClientEventKind) (time.Duration, bool) {
	for _, ev := range r.Received {
		if ev.Kind == k {
			return ev.At.Sub(r.Start), true
		}
	}
	return 0, false
}

// ClientEventKind says what reached the client.
type ClientEventKind int

// What can reach the client, in the order it can happen.
const (
	ClientHeaders  ClientEventKind = iota + 1 // the response headers
	ClientData                                // body bytes
	ClientTrailers                            // the trailers
	ClientEnd                                 // end of stream
	ClientReset                               // the stream was reset (no end of stream)
)

var clientEventNames = [...]string{"", "headers", "data", "trailers", "end", "reset"}

func (k ClientEventKind) String() string {
	if k > 0 && int(k) < len(clientEventNames) {
		return clientEventNames[k]
	}
	return "event " + strconv.Itoa(int(k))
}

// ClientEvent is one thing that reached the client.
type ClientEvent struct {
	Kind    ClientEventKind
	At      time.Time   // host clock
	Headers [][2]string // ClientHeaders, ClientTrailers
	Data    []byte      // ClientData
	Reset   string      // ClientReset: the reset details
}

// ErrUpstreamGone is returned to an upstream that answers an exchange which no longer wants
// the answer: it ended, the client went away, or the router gave up (a timeout).
var ErrUpstreamGone = errors.New("hostsim: the exchange no longer takes the upstream's answer")

// Exchange is one request being driven through a worker VM: the downstream side (what the
// client sends, what reaches it), the filter, and the router with its upstream. Everything
// but the channels is guarded by the VM's lock.
type Exchange struct {
	vm     *VM
	s      *httpStream // valid until done (the stream is then recycled)
	id     uint32
	gen    uint64
	ctx    context.Context
	cancel context.CancelFunc
	start  time.Time
	// record keeps everything that reached the client for Response (StartHTTP); a
	// StartStream exchange hands events out through Next and forgets them.
	record bool

	// Scripted request parts (StartHTTP).
	reqChunks   [][]byte
	reqDelays   []time.Duration
	reqTrailers [][2]string
	reqNext     int
	reqDue      bool // reqChunks[reqNext] is waiting for its timer
	reqTrlSent  bool
	// clientEnded: the client's request is complete (the filter manager's
	// remoteDecodeComplete), whatever the filter made of it.
	clientEnded bool

	// The connection manager's stream idle timer (WithStreamIdleTimeout).
	idle connmgr.IdleTimer
	// timers are the exchange's scheduled events (after), cancelled when it finishes.
	timers []*sched.Timer[event]

	// The router: what passed the filter, the retry state, and the current try (embedded:
	// its fields are the upstream request's, replaced on each retry).
	routed      bool        // the request headers reached the router (Filter::decodeHeaders)
	reqSent     int         // bytes of s.Req.ForwardedBody the router took
	reqEnded    bool        // the end of the request passed the filter
	fwdTrailers [][2]string // the request trailers that passed the filter
	retry       *retry.State
	retryReq    retry.Request
	hasPolicy   bool     // the route has a retry policy (WithRetryPolicy)
	rbody       []byte   // the request body buffered for retries (the decoding buffer)
	waiting     bool     // a retry's back-off is running: no try in flight
	respStarted bool     // a try's response went downstream (downstream_response_started_)
	tries       []*upTry // every try, in order
	// routeEntry is the request's route entry's cluster pick (WithRouteCluster; nil:
	// none); clientHeaders the request headers as the client sent them, which the
	// connection manager matched the route on.
	routeEntry    *route.Entry
	clientHeaders [][2]string
	*upTry

	// The client side.
	cliHeaders bool
	sentHdrs   [][2]string // the response headers the client got (for Response in stream mode)
	cliSent    int         // bytes of s.Resp.ForwardedBody already emitted
	events     []ClientEvent
	nextEvent  int // Next's position in events (record mode)
	queued     int // bytes emitted and not read by Next (stream mode: flow control)
	clientGone bool
	changed    chan struct{} // closed at the next change, for those who wait

	done   bool
	resp   *Response
	errs   []error
	doneCh chan struct{}
}

// Done reports whether the exchange has finished.
func (ex *Exchange) Done() bool {
	select {
	case <-ex.doneCh:
		return true
	default:
		return false
	}
}

// Response returns the response once Done (nil before).
func (ex *Exchange) Response() *Response {
	if !ex.Done() {
		return nil
	}
	return ex.resp
}

// StartHTTP is StartHTTPContext with context.Background().
func (vm *VM) StartHTTP(req *Request) (*Exchange, error) {
	return vm.StartHTTPContext(context.Background(), req)
}

// StartHTTPContext sends a request into the VM as far as it goes without waiting: the
// filter may pause it (waiting for a callout, a queue notification, a tick), and body chunks
// with a ChunkDelay arrive later. Events and timers move it on; Wait (or RunHTTP) waits for
// the end, Reset ends it early, Next reads what reached the client so far.
//
// The exchange's context (Context, and the ctx the upstream gets) carries ctx's values and
// is cancelled when the exchange ends or is reset. ctx's own cancellation does not end the
// exchange: in Envoy only the stream's end (or a reset) cancels its upstream request, so a
// caller whose client went away calls Reset.
func (vm *VM) StartHTTPContext(ctx context.Context, req *Request) (*Exchange, error) {
	vm.mu.Lock()
	ex, err := vm.newExchange(ctx, true, req.Plugin)
	if ex == nil {
		vm.mu.Unlock()
		return nil, err
	}
	s := ex.s
	if s.Final == nil {
		ex.reqChunks = chunksOf(req.Body, req.BodyChunks)
		ex.reqDelays, ex.reqTrailers = req.ChunkDelays, req.Trailers
		eos := len(ex.reqChunks) == 0 && req.Trailers == nil
		ex.fromClient(eos)
		ex.clientHeaders = abi.ClonePairs(req.Headers)
		_, err := s.OnHeaders(&s.Req, req.Headers, eos)
		ex.note(err)
		ex.feedRequest()
	}
	if req.ResetAfter > 0 {
		ex.after(req.ResetAfter, func(ex *Exchange) error { return ex.s.ResetDownstream(DownstreamDisconnect) })
	}
	ex.step()
	vm.mu.Unlock()
	return ex, vm.host.drain()
}

// StartStream starts a request whose body the caller sends with SendData (and SendTrailers)
// as it arrives, and whose response it reads with Next, as a front end does (hostsim
// serve); the error reports guest traps in the headers' callbacks (the exchange still runs,
// under the failure policy): the filter sees each chunk when it comes, and what passes the filter reaches the
// upstream (see WithStreamingUpstream) and the client at once. Events are not kept once
// read, so a long stream costs no memory; Response then has no Received, Body or Upstream
// body.
func (vm *VM) StartStream(ctx context.Context, headers [][2]string, endOfStream bool) (*Exchange, error) {
	vm.mu.Lock()
	ex, err := vm.newExchange(ctx, false, "")
	if ex == nil {
		vm.mu.Unlock()
		return nil, err
	}
	n := len(ex.errs)
	if s := ex.s; s.Final == nil {
		ex.fromClient(endOfStream)
		ex.clientHeaders = abi.ClonePairs(headers)
		_, err := s.OnHeaders(&s.Req, headers, endOfStream)
		ex.note(err)
	}
	ex.step()
	err = errors.Join(ex.errs[n:]...)
	vm.mu.Unlock()
	return ex, joinErr(err, vm.host.drain())
}

// SendData delivers the next request body chunk as the client sent it. With a real clock
// it first waits while the stream holds the buffer limit's worth of request data it cannot
// pass on (the filter stopped at the headers without allow_on_headers_stop_iteration, or
// the upstream is not reading): Envoy's watermark stops reading the downstream then
// (onDecoderFilterAboveWriteBufferHighWatermark), so a paused body is never read without
// bound. A body the filter buffers past the limit is answered 413 instead, as in Envoy. The
// error wraps ErrNoStream once the exchange has ended (the rest of the body is unwanted), or
// reports guest traps and ctx's end.
func (ex *Exchange) SendData(ctx context.Context, chunk []byte, endOfStream bool) error {
	vm := ex.vm
	if err := ex.waitBelow(ctx, (*Exchange).requestHeld); err != nil {
		return err
	}
	s := ex.s
	ex.fromClient(endOfStream)
	_, err := s.OnBody(&s.Req, chunk, endOfStream)
	ex.note(err)
	ex.step()
	vm.mu.Unlock()
	return joinErr(err, vm.host.drain())
}

// SendTrailers delivers the request trailers (which end the request).
func (ex *Exchange) SendTrailers(trailers [][2]string) error {
	vm := ex.vm
	if err := ex.waitBelow(context.Background(), nil); err != nil {
		return err
	}
	s := ex.s
	ex.fromClient(true)
	_, err := s.OnTrailers(&s.Req, trailers)
	ex.note(err)
	ex.step()
	vm.mu.Unlock()
	return joinErr(err, vm.host.drain())
}

// Next returns the next thing that reached the client, waiting for it: with a real clock
// until it comes or ctx ends, with a virtual clock by moving the clock to the next timer
// (an error if nothing is scheduled). After the last event (ClientEnd or ClientReset, or
// nothing when the client itself reset) it returns io.EOF.
func (ex *Exchange) Next(ctx context.Context) (ClientEvent, error) {
	vm, h := ex.vm, ex.vm.host
	for {
		vm.mu.Lock()
		if ex.nextEvent < len(ex.events) {
			ev := ex.events[ex.nextEvent]
			if ex.record {
				ex.nextEvent++
			} else {
				ex.events[0] = ClientEvent{}
				ex.events = ex.events[1:]
				ex.queued -= len(ev.Data)
				ex.signal()
			}
			vm.mu.Unlock()
			return ev, nil
		}
		if !ex.live() {
			if ex.nextEvent < len(ex.events) {
				vm.mu.Unlock()
				continue // live() just ended it: hand out the reset first
			}
			vm.mu.Unlock()
			return ClientEvent{}, io.EOF
		}
		ch := ex.waitCh()
		vm.mu.Unlock()
		if h.realtime {
			select {
			case <-ch:
			case <-ctx.Done():
				return ClientEvent{}, ctx.Err()
			}
			continue
		}
		if err := h.drainNow(); err != nil {
			return ClientEvent{}, err
		}
		select {
		case <-ch:
			continue
		default:
		}
		next, ok := h.NextTimer()
		if !ok {
			return ClientEvent{}, fmt.Errorf("hostsim: stream %d stalled: paused with nothing scheduled to resume it", ex.id)
		}
		if err := h.Advance(next.Sub(h.clock.Now())); err != nil {
			return ClientEvent{}, err
		}
		if err := ctx.Err(); err != nil {
			return ClientEvent{}, err
		}
	}
}

// Context returns the exchange's context: it carries the values of the context the
// exchange was started with and is cancelled when the exchange ends or is reset. The
// upstream is called with a context derived from it, which the router also cancels when it
// gives up on the upstream (a timeout).
func (ex *Exchange) Context() context.Context { return ex.ctx }

// Reset ends the exchange as Envoy ends a stream the downstream reset (a client that went
// away, or a front end that gave up on it): whatever the filter was waiting for, the
// stream runs proxy_on_log, proxy_on_done and proxy_on_delete and is gone from its VM;
// continue or a local reply it had pending is dropped; its callouts still complete on the
// root context; the upstream call, if any, sees its context cancelled. details "" (or
// ResetDownstreamRemoteDisconnect) is a client disconnect, recorded as Envoy does (flag DC,
// details downstream_remote_disconnect); other details are recorded as given, without a flag.
// The response then has Reset set. The error wraps ErrNoStream if the exchange had already
// ended, and otherwise joins guest traps in the lifecycle callbacks.
func (ex *Exchange) Reset(details string) error {
	return ex.ResetBy(filtermanager.DownstreamResetFor(details))
}

// ResetBy is Reset with the flag and details to record, e.g. DownstreamStreamReset for an
// HTTP/2 client's RST_STREAM.
func (ex *Exchange) ResetBy(r DownstreamReset) error {
	vm := ex.vm
	vm.mu.Lock()
	if ex.done {
		vm.mu.Unlock()
		return fmt.Errorf("%w: %s: stream %d already ended", ErrNoStream, vm.name, ex.id)
	}
	err := ex.s.ResetDownstream(r)
	vm.mu.Unlock()
	return joinErr(err, vm.host.drain())
}

// Wait waits for the exchange to finish. With a virtual clock it moves the clock to the
// next timer while the stream is paused, up to the host's maximum virtual wait; with a real
// clock it blocks until the end or ctx is done. The error joins guest traps seen on the way.
func (ex *Exchange) Wait(ctx context.Context) (*Response, error) {
	h := ex.vm.host
	if h.realtime {
		select {
		case <-ex.doneCh:
			return ex.resp, ex.err()
		case <-ctx.Done():
			return nil, fmt.Errorf("hostsim: waiting for stream %d: %w", ex.id, ctx.Err())
		}
	}
	deadline := h.clock.Now().Add(h.cfg.maxVirtualWait)
	var errs []error
	for !ex.Done() {
		if err := h.drainNow(); err != nil {
			errs = append(errs, err)
		}
		if ex.Done() {
			break
		}
		next, ok := h.NextTimer()
		if !ok {
			return nil, errors.Join(append(errs, fmt.Errorf("hostsim: stream %d stalled: paused with nothing scheduled to resume it", ex.id))...)
		}
		if next.After(deadline) {
			return nil, errors.Join(append(errs, fmt.Errorf("hostsim: stream %d still paused after %v of virtual time", ex.id, h.cfg.maxVirtualWait))...)
		}
		if err := h.Advance(next.Sub(h.clock.Now())); err != nil {
			errs = append(errs, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return ex.resp, errors.Join(append(errs, ex.err())...)
}

// RunHTTP drives a whole request through this VM, like Envoy's filter manager with this
// filter and the router: request headers/body/trailers through the filter (honouring
// pause and continue), the upstream (WithUpstream), the response back through the filter,
// then log → done → delete. When ctx ends first the caller is the client that went away:
// the stream is reset (ResetDownstreamRemoteDisconnect) and ctx's error returned.
func (vm *VM) RunHTTP(ctx context.Context, req *Request) (*Response, error) {
	ex, err := vm.StartHTTPContext(ctx, req)
	if ex == nil {
		return nil, err
	}
	resp, werr := ex.Wait(ctx)
	if resp == nil && ctx.Err() != nil {
		rerr := ex.Reset(ResetDownstreamRemoteDisconnect)
		if errors.Is(rerr, ErrNoStream) && ex.Done() { // it ended meanwhile after all
			return ex.Response(), joinErr(err, ex.err())
		}
		werr = joinErr(werr, rerr)
	}
	return resp, joinErr(err, werr)
}

// RunHTTP drives a request through a worker VM, chosen round-robin like Envoy's
// connection balancing.
func (h *Host) RunHTTP(ctx context.Context, req *Request) (*Response, error) {
	if len(h.workers) == 0 {
		return nil, errNotStarted
	}
	n := h.rr.Add(1) - 1
	return h.workers[int(n%uint64(len(h.workers)))].RunHTTP(ctx, req)
}
