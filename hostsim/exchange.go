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
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
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
}

// UpstreamRequest is what reached the upstream after the filter.
type UpstreamRequest struct {
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
	// Upstream is what reached the upstream (nil if the request never got there).
	Upstream *UpstreamRequest
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

	// The request as it passed the filter, and the upstream.
	upReq     *UpstreamRequest // what passed the filter so far (nil until the headers did)
	reqSent   int              // bytes of s.Req.ForwardedBody already taken into upReq
	reqEnded  bool             // the end of the request passed the filter
	upStarted bool             // the upstream was called
	upCtx     context.Context
	upCancel  context.CancelFunc
	call      *UpstreamCall   // streaming upstream
	up        router.Upstream // the router's upstream request

	// A buffered upstream response being played.
	play       *UpstreamResponse
	playChunks [][]byte
	playNext   int
	playDue    bool

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

func chunksOf(body []byte, chunks [][]byte) [][]byte {
	if chunks != nil {
		return chunks
	}
	if len(body) > 0 {
		return [][]byte{body}
	}
	return nil
}

func delayAt(delays []time.Duration, i int) time.Duration {
	if i < len(delays) {
		return delays[i]
	}
	return 0
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
	ex, err := vm.newExchange(ctx, true)
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
	ex, err := vm.newExchange(ctx, false)
	if ex == nil {
		vm.mu.Unlock()
		return nil, err
	}
	n := len(ex.errs)
	if s := ex.s; s.Final == nil {
		ex.fromClient(endOfStream)
		_, err := s.OnHeaders(&s.Req, headers, endOfStream)
		ex.note(err)
	}
	ex.step()
	err = errors.Join(ex.errs[n:]...)
	vm.mu.Unlock()
	return ex, joinErr(err, vm.host.drain())
}

// newExchange allocates the stream and applies the failure policy (VM locked).
func (vm *VM) newExchange(ctx context.Context, record bool) (*Exchange, error) {
	if vm.streams == nil {
		return nil, errNotStarted
	}
	s := vm.newStream()
	ex := &Exchange{vm: vm, s: s, id: s.ID, gen: vm.gen, doneCh: make(chan struct{}), record: record,
		start: vm.host.clock.Now()}
	ex.ctx, ex.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ex.upCtx, ex.upCancel = context.WithCancel(ex.ctx)
	ex.up = router.New((*modelStream)(ex), vm.host.cfg.upstreamIdleTimeout)
	ex.idle = connmgr.NewIdleTimer((*modelStream)(ex), vm.host.cfg.streamIdleTimeout)
	s.ex = ex
	s.SetDriver((*modelStream)(ex))
	ex.touchStreamIdle() // armed when the connection manager creates the stream
	if err := vm.beginStream(s); err != nil {
		ex.errs = append(ex.errs, err)
	}
	ex.gen = vm.gen // FAIL_RELOAD may have replaced the instance
	return ex, nil
}

func (ex *Exchange) note(err error) {
	if err != nil {
		ex.errs = append(ex.errs, err)
	}
}

// after runs f on the exchange d from now on the host's clock (VM locked when it runs).
func (ex *Exchange) after(d time.Duration, f func(ex *Exchange) error) {
	h := ex.vm.host
	h.schedule(h.clock.Now().Add(d), event{kind: evExchange, vm: ex.vm, gen: ex.gen, ex: ex, exFn: f})
}

// runEvent runs a timer's work on a live exchange (VM locked).
func (ex *Exchange) runEvent(f func(ex *Exchange) error) error {
	if ex.done {
		return nil
	}
	n := len(ex.errs)
	ex.note(f(ex))
	ex.step()
	return errors.Join(ex.errs[n:]...)
}

// feedRequest delivers the scripted body chunks and trailers that are due (VM locked).
func (ex *Exchange) feedRequest() {
	s := ex.s
	for !ex.done && ex.reqNext < len(ex.reqChunks) {
		i := ex.reqNext
		if d := delayAt(ex.reqDelays, i); d > 0 && !ex.reqDue {
			ex.reqDue = true
			ex.after(d, func(ex *Exchange) error { ex.feedRequest(); return nil })
			return
		}
		ex.reqDue = false
		ex.reqNext++
		last := i == len(ex.reqChunks)-1
		ex.fromClient(last && ex.reqTrailers == nil)
		_, err := s.OnBody(&s.Req, ex.reqChunks[i], last && ex.reqTrailers == nil)
		ex.note(err)
	}
	if !ex.done && ex.reqTrailers != nil && !ex.reqTrlSent {
		ex.reqTrlSent = true
		ex.fromClient(true)
		_, err := s.OnTrailers(&s.Req, ex.reqTrailers)
		ex.note(err)
	}
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

// waitBelow locks the VM once the exchange is live and held (if given) is below the buffer
// limit; with a virtual clock it never waits. On error the VM is unlocked.
func (ex *Exchange) waitBelow(ctx context.Context, held func(*Exchange) int) error {
	vm := ex.vm
	for {
		vm.mu.Lock()
		if !ex.live() {
			vm.mu.Unlock()
			return fmt.Errorf("%w: %s: stream %d already ended", ErrNoStream, vm.name, ex.id)
		}
		if held == nil || !vm.host.realtime || held(ex) < ex.s.BufferLimit() {
			return nil
		}
		ch := ex.waitCh()
		vm.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// requestHeld is the request data the stream holds without passing it on: held back at
// paused headers (stop-all) and waiting for the upstream to read it.
func (ex *Exchange) requestHeld() int {
	n := len(ex.s.Req.HeldBody)
	if ex.call != nil {
		n += ex.call.body.Queued()
	}
	return n
}

// responseHeld is the response data the stream holds without the client having it: held
// back at paused headers (stop-all) and not yet read by the client (Next).
func (ex *Exchange) responseHeld() int {
	n := len(ex.s.Resp.HeldBody)
	if !ex.record {
		n += ex.queued
	}
	return n
}

// waitCh returns a channel closed at the exchange's next change (VM locked).
func (ex *Exchange) waitCh() chan struct{} {
	if ex.changed == nil {
		ex.changed = make(chan struct{})
	}
	return ex.changed
}

// signal wakes those waiting for a change (VM locked).
func (ex *Exchange) signal() {
	if ex.changed != nil {
		close(ex.changed)
		ex.changed = nil
	}
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

// emit records what reached the client (VM locked).
func (ex *Exchange) emit(ev ClientEvent) {
	ev.At = ex.vm.host.clock.Now()
	if ev.Kind == ClientHeaders {
		ex.sentHdrs = ev.Headers
	}
	ex.events = append(ex.events, ev)
	if !ex.record {
		ex.queued += len(ev.Data)
	}
}

// step moves the exchange on after the stream changed (VM locked): what passed the filter
// goes to the upstream and to the client, and the exchange finishes with the response.
func (ex *Exchange) step() {
	if ex.done {
		return
	}
	ex.stepRequest()
	if !ex.done { // the router may have answered and finished the exchange meanwhile
		ex.stepClient()
	}
	ex.signal()
}

// stepRequest passes what the filter let through on to the upstream, calling it as Envoy's
// router would: a streaming upstream as soon as the headers passed (Router::Filter::
// decodeHeaders opens the upstream request), a buffered one once the whole request did.
func (ex *Exchange) stepRequest() {
	s, h := ex.s, ex.vm.host
	if s.Local != nil || s.Final != nil || s.ResetDetails != "" {
		// The stream is answered (or gone): Envoy's router never proceeds, or is reset.
		ex.abandonUpstream()
		return
	}
	d := &s.Req
	if !d.ForwardedHeaders || d.Halted {
		return
	}
	if ex.upReq == nil {
		ex.upReq = &UpstreamRequest{Headers: abi.ClonePairs(d.Headers)}
		if resolve := h.cfg.routeResolver; resolve != nil {
			if err := resolve(ex.upReq.Headers); err != nil {
				ex.up.Failed(err)
				return
			}
		}
	}
	if ex.up.Done() {
		return // the router answered or gave up
	}
	if h.cfg.streamUpstream != nil && !ex.upStarted {
		ex.upStarted = true
		ex.call = &UpstreamCall{ex: ex, ctx: ex.upCtx, headers: abi.ClonePairs(d.Headers)}
		ex.up.Activity()
		go h.cfg.streamUpstream(ex.call)
	}
	if len(d.ForwardedBody) > ex.reqSent {
		chunk := append([]byte(nil), d.ForwardedBody[ex.reqSent:]...)
		ex.upReq.BodyChunks = append(ex.upReq.BodyChunks, chunk)
		if ex.record || ex.call == nil {
			ex.upReq.Body = append(ex.upReq.Body, chunk...)
		}
		if ex.call != nil {
			ex.call.body.Push(chunk)
			ex.up.Activity()
		}
		ex.reqSent = len(d.ForwardedBody)
		if !ex.record {
			d.ForwardedBody, ex.reqSent = d.ForwardedBody[:0], 0
		}
	}
	if d.Complete && !ex.reqEnded {
		ex.reqEnded = true
		ex.upReq.Trailers = abi.ClonePairs(d.ForwardedTrailers)
		if ex.call != nil {
			ex.call.body.End(ex.upReq.Trailers)
		}
		if !ex.upStarted {
			ex.upStarted = true
			ex.up.Activity()
			h.post(event{kind: evUpstreamInvoke, ex: ex})
		}
		ex.up.RequestComplete(h.cfg.routeTimeout)
	}
}

// stepClient emits what passed the filter towards the client, and finishes the exchange
// once the response ended or the stream was reset or replaced.
func (ex *Exchange) stepClient() {
	s := ex.s
	switch {
	case s.ResetDetails != "":
		if !ex.clientGone {
			ex.emit(ClientEvent{Kind: ClientReset, Reset: s.ResetDetails})
		}
		ex.finish()
		return
	case s.Final != nil && !ex.cliHeaders:
		ex.cliHeaders = true
		ex.emit(ClientEvent{Kind: ClientHeaders, Headers: filtermanager.ReplyHeaders(s.Final)})
		if len(s.Final.Data) > 0 {
			ex.emit(ClientEvent{Kind: ClientData, Data: append([]byte(nil), s.Final.Data...)})
		}
		ex.emit(ClientEvent{Kind: ClientEnd})
		ex.finish()
		return
	}
	d := &s.Resp
	if d.ForwardedHeaders && !ex.cliHeaders {
		ex.cliHeaders = true
		ex.emit(ClientEvent{Kind: ClientHeaders, Headers: abi.ClonePairs(d.Headers)})
	}
	if ex.cliHeaders && len(d.ForwardedBody) > ex.cliSent {
		ex.emit(ClientEvent{Kind: ClientData, Data: append([]byte(nil), d.ForwardedBody[ex.cliSent:]...)})
		ex.cliSent = len(d.ForwardedBody)
		if !ex.record {
			d.ForwardedBody, ex.cliSent = d.ForwardedBody[:0], 0
		}
	}
	if d.Complete && ex.cliHeaders {
		if d.ForwardedTrailers != nil {
			ex.emit(ClientEvent{Kind: ClientTrailers, Headers: abi.ClonePairs(d.ForwardedTrailers)})
		}
		ex.emit(ClientEvent{Kind: ClientEnd})
		ex.finish()
	}
}

// finish builds the downstream response and ends the stream (log → done → delete).
func (ex *Exchange) finish() {
	if ex.done {
		return
	}
	ex.done = true
	s := ex.s
	r := &Response{LocalReply: s.Local, Reset: s.ResetDetails, VM: ex.vm.name, ContextID: s.ID, Start: ex.start}
	if ex.upStarted {
		r.Upstream = ex.upReq
	}
	for _, ev := range ex.events {
		switch ev.Kind {
		case ClientHeaders:
			r.Headers = ev.Headers
		case ClientData:
			r.Body = append(r.Body, ev.Data...)
		case ClientTrailers:
			r.Trailers = ev.Headers
		}
	}
	if ex.record {
		r.Received = ex.events
	}
	if r.Headers == nil {
		r.Headers = ex.sentHdrs // stream mode: the events were handed out
	}
	if v, ok := abi.HeaderValue(r.Headers, ":status"); ok {
		r.StatusCode, _ = strconv.Atoi(v)
	}
	s.Req.Halted, s.Resp.Halted = true, true
	ex.abandonUpstream()
	ex.note(s.Complete())
	r.Flags, r.Details = s.Flags, s.Details
	ex.resp = r
	ex.cancel()
	close(ex.doneCh)
	ex.signal()
}

// abandonUpstream stops taking the upstream's answer and cancels its context, as the
// router resets its upstream request (VM locked).
func (ex *Exchange) abandonUpstream() {
	if ex.up.Abandon() {
		ex.upCancel()
	}
	ex.play = nil
	if ex.call != nil {
		ex.call.body.Abandon()
	}
}

// fromClient notes a request part the client sent (VM locked): it re-arms the stream idle
// timer (ActiveStream::decodeHeaders/decodeTrailers, FilterManager::decodeData), and eos
// completes the client's request.
func (ex *Exchange) fromClient(eos bool) {
	ex.touchStreamIdle()
	if eos {
		ex.clientEnded = true
	}
}

// touchStreamIdle re-arms the connection manager's stream idle timer after a headers, data
// or trailers event either way (VM locked).
func (ex *Exchange) touchStreamIdle() {
	if !ex.done {
		ex.idle.Touch()
	}
}

// streamIdleTimeout is ActiveStream::onIdleTimeout (connmgr.TimeoutReply). Its upstream
// request is reset with the stream (VM locked).
func (ex *Exchange) streamIdleTimeout() {
	r := connmgr.TimeoutReply(ex.clientEnded)
	ex.envoyReply(r.Code, r.Body, r.Flag, r.Details)
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

// live reports whether the exchange goes on (VM locked). A stream of a VM instance that
// FAIL_RELOAD replaced is gone: the exchange ends as "VM gone".
func (ex *Exchange) live() bool {
	if !ex.done && ex.vm.gen != ex.gen {
		ex.vmGone()
	}
	return !ex.done
}

// vmGone ends an exchange whose VM instance is gone: the client's stream is reset.
func (ex *Exchange) vmGone() {
	ex.s.ResetDetails = "VM gone"
	ex.emit(ClientEvent{Kind: ClientReset, Reset: ex.s.ResetDetails})
	ex.finish()
}

func (ex *Exchange) finishFailedVM() {
	ex.vm.mu.Lock()
	defer ex.vm.mu.Unlock()
	if !ex.done {
		ex.vmGone()
	}
}

// invokeUpstream calls the buffered upstream outside the VM (on its own goroutine with a
// real clock).
func (h *Host) invokeUpstream(ex *Exchange) {
	run := func() {
		var resp *UpstreamResponse
		err := errors.New("no upstream configured")
		if h.cfg.upstream != nil {
			resp, err = h.cfg.upstream(ex.upCtx, ex.upReq)
		}
		if err == nil && resp == nil {
			err = errors.New("upstream returned no response")
		}
		ev := event{kind: evUpstreamDeliver, vm: ex.vm, gen: ex.gen, ex: ex, up: resp, upErr: err}
		if err == nil && resp.Delay > 0 {
			h.schedule(h.clock.Now().Add(resp.Delay), ev)
			return
		}
		h.post(ev)
	}
	if h.realtime {
		go run()
		return
	}
	run()
}

// deliverUpstream plays a buffered upstream's answer through the filter (VM locked): the
// headers now, each body chunk at its delay, then trailers, end of stream or a reset. An
// upstream error becomes the router's own reply.
func (ex *Exchange) deliverUpstream(resp *UpstreamResponse, upErr error) error {
	if ex.done || ex.up.Done() {
		return nil
	}
	n := len(ex.errs)
	if upErr != nil {
		ex.up.Failed(upErr)
	} else {
		ex.play, ex.playChunks, ex.playNext = resp, chunksOf(resp.Body, resp.BodyChunks), 0
		ex.responseHeaders(resp.Headers, len(ex.playChunks) == 0 && resp.Trailers == nil && resp.Reset == nil)
		ex.playUpstream()
	}
	ex.step()
	return errors.Join(ex.errs[n:]...)
}

// playUpstream delivers the buffered response's parts that are due (VM locked).
func (ex *Exchange) playUpstream() {
	for !ex.done && ex.play != nil && ex.playNext < len(ex.playChunks) {
		i := ex.playNext
		if d := delayAt(ex.play.ChunkDelays, i); d > 0 && !ex.playDue {
			ex.playDue = true
			ex.after(d, func(ex *Exchange) error { ex.playUpstream(); return nil })
			return
		}
		ex.playDue = false
		ex.playNext++
		last := i == len(ex.playChunks)-1
		ex.responseData(ex.playChunks[i], last && ex.play.Trailers == nil && ex.play.Reset == nil)
	}
	p := ex.play
	if ex.done || p == nil {
		return
	}
	if r := p.Reset; r != nil {
		if r.After > 0 && !ex.playDue {
			ex.playDue = true
			ex.after(r.After, func(ex *Exchange) error { ex.playUpstream(); return nil })
			return
		}
		ex.playDue, ex.play = false, nil
		ex.up.Reset(r)
		return
	}
	if p.Trailers != nil {
		ex.responseTrailers(p.Trailers)
	}
	ex.play = nil
}

// responseHeaders is the router's onUpstreamHeaders: details via_upstream, then the
// filter's encodeHeaders (VM locked).
func (ex *Exchange) responseHeaders(headers [][2]string, eos bool) {
	s := ex.s
	ex.up.Headers(eos)
	ex.touchStreamIdle() // FilterManager::encodeHeaders
	if s.Resp.Halted || s.Resp.GotHeaders {
		return
	}
	s.SetDetails(DetailsViaUpstream)
	_, err := s.OnHeaders(&s.Resp, headers, eos)
	ex.note(err)
}

// responseData passes an upstream body chunk to the filter (VM locked).
func (ex *Exchange) responseData(chunk []byte, eos bool) {
	ex.up.Data(eos)
	ex.touchStreamIdle() // FilterManager::encodeData
	if s := ex.s; !s.Resp.Halted {
		_, err := s.OnBody(&s.Resp, chunk, eos)
		ex.note(err)
	}
}

// responseTrailers passes the upstream's trailers to the filter (VM locked).
func (ex *Exchange) responseTrailers(trailers [][2]string) {
	ex.up.Trailers()
	ex.touchStreamIdle() // FilterManager::encodeTrailers
	if s := ex.s; !s.Resp.Halted {
		_, err := s.OnTrailers(&s.Resp, trailers)
		ex.note(err)
	}
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

func (ex *Exchange) err() error {
	ex.vm.mu.Lock()
	defer ex.vm.mu.Unlock()
	return errors.Join(ex.errs...)
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
