// Package stream is one HTTP stream's proxy-wasm filter context as Envoy's filter manager
// and the Wasm filter (source/extensions/common/wasm/context.cc) drive it, apart from the VM:
// its state, the callback runners and how a verdict is applied to its two
// filtermanager.Directions, the buffer limit, local replies and resets that end both
// directions, the continue/close/local-reply actions deferred until a callback returns, the
// maps and buffers the guest may see in each phase, and the end of the stream. It reaches
// the guest only through Guest and is moved from outside only through Driver.
package stream

import (
	"fmt"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// DetailsWasmCloseStream is the response code details of a stream the plugin reset with
// proxy_close_stream before anything else set them (Context::closeStream,
// CloseStreamResponseDetails).
const DetailsWasmCloseStream = "wasm_close_stream"

// Callback is a stream callback the guest exports; String is its export name.
type Callback int

// The stream callbacks. Call's two arguments after the context id are, per callback: the
// root context id is the VM's (OnContextCreate: none); the header or trailer count and, for
// headers, end of stream (OnRequestHeaders, OnRequestTrailers, ...); the body's size so far
// and end of stream (OnRequestBody, OnResponseBody); none (OnLog, OnDone, OnDelete).
const (
	OnContextCreate Callback = iota
	OnRequestHeaders
	OnRequestBody
	OnRequestTrailers
	OnResponseHeaders
	OnResponseBody
	OnResponseTrailers
	OnLog
	OnDone
	OnDelete
	NumCallbacks // how many there are, for tables indexed by Callback
)

var callbackNames = [NumCallbacks]string{
	"proxy_on_context_create",
	"proxy_on_request_headers", "proxy_on_request_body", "proxy_on_request_trailers",
	"proxy_on_response_headers", "proxy_on_response_body", "proxy_on_response_trailers",
	"proxy_on_log", "proxy_on_done", "proxy_on_delete",
}

func (c Callback) String() string {
	if c >= 0 && c < NumCallbacks {
		return callbackNames[c]
	}
	return fmt.Sprintf("stream callback %d", int(c))
}

// Guest is the VM a stream lives in, as the stream sees it.
type Guest interface {
	// Call runs callback cb on the stream's context with the callback's arguments after the
	// context id (see Callback), and returns its result, whether the guest sent a local
	// reply during it (cpp-host then overrides the result to stop), and its trap.
	Call(cb Callback, a, b uint64) (result uint64, forceStop bool, err error)
	// Failed reports whether the VM failed: deferred actions other than a close are dropped.
	Failed() bool
	// Gone reports whether the VM can no longer run this stream's callbacks: it failed, it
	// is gone, or FAIL_RELOAD replaced the instance the stream's context lived in.
	Gone() bool
	// Ended hears that the stream ended (completed or reset): the VM forgets it.
	Ended()
}

// Driver moves a stream from outside, as the client and the router do: hostsim's exchange.
// A stream without one (the proxytest-shaped calls) is moved by its caller alone.
type Driver interface {
	// Activity hears of a headers, data or trailers event the filter manager passed on
	// either way (it re-arms the connection manager's stream idle timer).
	Activity()
	// Settled hears that the stream's deferred actions ran: what passed the filter moves on.
	Settled()
	// ClientReset ends a stream the client reset: the driver finishes it, which completes
	// the stream (Complete). It returns the guest's traps on the way.
	ClientReset() error
}

// LocalReplyForwarder is a Driver whose stream's local replies are not its own filter
// manager's to send: an upstream HTTP filter's, which UpstreamFilterManager::sendLocalReply
// (source/common/router/upstream_request.cc) hands to the downstream filter manager
// (parent_.callbacks()->sendLocalReply) without running the upstream chain's encoders.
// ForwardLocalReply takes the reply (true) or lets the stream send it itself (false); a
// forwarded reply ends the stream's filter chain in both directions.
type LocalReplyForwarder interface {
	ForwardLocalReply(lr *filtermanager.LocalReply, details string) bool
}

// Config is the filter manager's options for a VM's streams.
type Config struct {
	// AllowHeadersStopIteration is allow_on_headers_stop_iteration (Envoy ≥ 1.35): a
	// headers StopIteration is a true StopIteration.
	AllowHeadersStopIteration bool
	// FailOpen is FAIL_OPEN: a stream whose callback trapped bypasses the filter;
	// otherwise (FAIL_CLOSED, FAIL_RELOAD) it is answered 503 wasm_fail_stream.
	FailOpen bool
	// BufferLimit is the connection's buffer limit; RouteBufferLimit the stream's once the
	// route's request_body_buffer_limit applies (at least BufferLimit).
	BufferLimit, RouteBufferLimit int
	// RouteBufferLimitAtRouter applies the route's limit once the request headers reach the
	// router (Envoy before envoyproxy/envoy#42607) instead of from the request headers on.
	RouteBufferLimitAtRouter bool
}

// Stream is one HTTP stream's filter context in a VM. Its fields are what the VM's getters
// and the driver read; the driver also sets Flags, ResetDetails and the directions' Halted
// and forwarded parts as Envoy's router and connection manager change them.
type Stream struct {
	guest  Guest
	driver Driver // nil: none
	thread *Thread

	// ID is the stream's context id.
	ID uint32
	// Created reports that proxy_on_context_create ran; Skip that FAIL_OPEN bypasses the
	// filter.
	Created, Skip bool
	// NoHeadersStopIteration: the stream's filter lacks allow_on_headers_stop_iteration
	// whatever Config says (the option is per Wasm filter config, PluginConfig; one VM can
	// host a filter with it and one without).
	NoHeadersStopIteration bool
	deleted                bool
	inLog                  bool

	// Req and Resp are the request's decoding and the response's encoding.
	Req, Resp filtermanager.Direction

	// Action is the effective action of the last headers, body or trailers callback.
	Action types.Action
	// Local is the first local reply the plugin sent; Final a reply that replaced the
	// response (response phase, failure, limits).
	Local, Final *filtermanager.LocalReply
	// ResetDetails is set once the stream is reset (e.g. "wasm_close_stream").
	ResetDetails string
	// Flags and Details are StreamInfo's response flags and response code details (CEL
	// response.flags and response.code_details); HasDetails reports that something set them.
	Flags      streaminfo.ResponseFlags
	Details    string
	HasDetails bool
	// FilterState is what the plugin stored with proxy_set_property.
	FilterState map[string][]byte
	// EnvoyFilterState is the objects set_envoy_filter_state made with Envoy's filter-state
	// factories, by key: what each holds (Context::setEnvoyFilterState).
	EnvoyFilterState map[string][]byte
	// RouteCacheClears counts the clears of the route cache: clear_route_cache foreign calls
	// and, on a downstream stream, request-header writes (Context::onHeadersModified).
	RouteCacheClears int

	deferred []deferredOp
}

type opKind int

const (
	opContinue opKind = iota
	opClose
	opLocalReply
)

// deferredOp is an action the guest asked for that Envoy runs only once the callback
// returned.
type deferredOp struct {
	kind  opKind
	dir   abi.StreamType
	local *filtermanager.LocalReply
}

// Init makes s stream id of thread t, calling the guest g and moved by d (nil: none). It
// clears a recycled stream, keeping the capacity of its buffers.
func (s *Stream) Init(t *Thread, id uint32, g Guest, d Driver) {
	req, resp := s.Req.Recycle(), s.Resp.Recycle()
	deferred := s.deferred[:0]
	*s = Stream{thread: t, ID: id, guest: g, driver: d, Req: req, Resp: resp, deferred: deferred}
}

// SetDriver sets (or, with nil, drops) the stream's driver.
func (s *Stream) SetDriver(d Driver) { s.driver = d }

// Deleted reports that the stream ended (its context was deleted, or it was forgotten).
func (s *Stream) Deleted() bool { return s.deleted }

// SetDetails is StreamInfo::setResponseCodeDetails: the last writer wins.
func (s *Stream) SetDetails(d string) { s.Details, s.HasDetails = d, true }

// touch records that the stream has deferred work or changed state.
func (s *Stream) touch() { s.thread.Touch(s) }

func (s *Stream) activity() {
	if s.driver != nil {
		s.driver.Activity()
	}
}

// ensureCreated runs proxy_on_context_create lazily, as Envoy does at decodeHeaders (or log).
func (s *Stream) ensureCreated() error {
	if s.Created {
		return nil
	}
	s.Created = true
	_, _, err := s.guest.Call(OnContextCreate, 0, 0)
	return err
}

// uncreated reports that d is the response and the context was never created: Envoy's
// encodeHeaders, encodeData and encodeTrailers return Continue without calling the VM
// (Context::encodeHeaders: "if (!in_vm_context_created_ || failure_local_reply_sent_) return
// Continue;", source/extensions/common/wasm/context.cc), so a response that comes without
// request headers having reached the filter passes it untouched. Only the end of the stream
// creates the context then (Context::log calls onCreate before onLog).
func (s *Stream) uncreated(d *filtermanager.Direction) bool { return d == &s.Resp && !s.Created }

// ---------------------------------------------------------------------------------------
// Callbacks

// callbacks returns d's callbacks: headers, body, trailers.
func (s *Stream) callbacks(d *filtermanager.Direction) (headers, body, trailers Callback) {
	if d == &s.Req {
		return OnRequestHeaders, OnRequestBody, OnRequestTrailers
	}
	return OnResponseHeaders, OnResponseBody, OnResponseTrailers
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// filter is the stream as its directions' transitions see it (filtermanager.Filter): the
// filter's body and trailers callbacks, and a completed direction marks the stream changed.
type filter Stream

func (f *filter) Body(d *filtermanager.Direction, chunk []byte, eos bool) error {
	_, err := (*Stream)(f).OnBody(d, chunk, eos)
	return err
}

func (f *filter) Trailers(d *filtermanager.Direction, trailers [][2]string) error {
	_, err := (*Stream)(f).OnTrailers(d, trailers)
	return err
}

func (f *filter) Completed(*filtermanager.Direction) { (*Stream)(f).touch() }

func (s *Stream) filter() *filter { return (*filter)(s) }

// paused is the action a direction's transition leaves the stream with.
func paused(p bool) types.Action {
	if p {
		return types.ActionPause
	}
	return types.ActionContinue
}

// OnHeaders delivers headers to the filter (decodeHeaders / encodeHeaders) and returns the
// effective action; the error is a trap (the failure policy then applies) or headers
// delivered twice.
func (s *Stream) OnHeaders(d *filtermanager.Direction, headers [][2]string, eos bool) (types.Action, error) {
	if d.Halted || d.GotHeaders {
		if d.GotHeaders && !d.Halted {
			return types.ActionPause, fmt.Errorf("hostsim: stream %d: headers delivered twice", s.ID)
		}
		return types.ActionPause, nil
	}
	d.Headers, d.GotHeaders, d.EndStream = abi.AppendLower(d.Headers[:0], headers), true, eos
	if s.Skip || s.uncreated(d) {
		d.ForwardHeaders(s.filter())
		return types.ActionContinue, nil
	}
	if s.vmFailed() {
		return paused(!s.Skip), nil
	}
	if err := s.ensureCreated(); err != nil {
		return types.ActionPause, s.Failed(err)
	}
	d.HeadersAvail = true
	cb, _, _ := s.callbacks(d)
	raw, forceStop, err := s.guest.Call(cb, uint64(len(headers)), b2u(eos))
	if err != nil {
		return types.ActionPause, s.Failed(err)
	}
	v := filtermanager.Headers(raw, forceStop, s.thread.cfg.AllowHeadersStopIteration && !s.NoHeadersStopIteration)
	s.Action = paused(d.AfterHeaders(v, s.filter()))
	a := s.Action
	s.touch()
	s.thread.Settle()
	return a, nil
}

// OnBody delivers a data chunk (decodeData / encodeData). While the direction is stopped
// at headers without allow_on_headers_stop_iteration the chunk is held without a callback;
// a buffered body past the buffer limit is Envoy's overflow (overLimit).
func (s *Stream) OnBody(d *filtermanager.Direction, chunk []byte, eos bool) (types.Action, error) {
	if d.Halted || d.Complete {
		return types.ActionPause, nil
	}
	if !d.GotHeaders {
		return types.ActionPause, fmt.Errorf("hostsim: stream %d: body before headers", s.ID)
	}
	if d.StoppedAll {
		// Stopped at headers: held without calling the filter and without a buffer limit
		// (Direction.Hold); the driver models the watermark.
		d.Hold(chunk, eos)
		return types.ActionPause, nil
	}
	d.EndStream = eos
	if s.Skip || s.uncreated(d) {
		d.ForwardBody(chunk, eos, s.filter())
		return types.ActionContinue, nil
	}
	d.Receive(chunk)
	if s.guest.Failed() {
		s.passUnanswered(d)
	}
	if s.vmFailed() {
		return paused(!s.Skip), nil
	}
	if d.Buffering && len(d.Body) > s.BufferLimit() {
		s.overLimit(d)
		s.thread.Settle()
		return types.ActionPause, nil
	}
	d.BodyAvail = true
	_, cb, _ := s.callbacks(d)
	raw, forceStop, err := s.guest.Call(cb, uint64(len(d.Body)), b2u(eos))
	if err != nil {
		s.passUnanswered(d)
		return types.ActionPause, s.Failed(err)
	}
	s.Action = paused(d.AfterData(filtermanager.Data(raw, forceStop), eos, s.filter()))
	a := s.Action
	s.touch()
	s.thread.Settle()
	return a, nil
}

// OnTrailers delivers trailers (decodeTrailers / encodeTrailers).
func (s *Stream) OnTrailers(d *filtermanager.Direction, trailers [][2]string) (types.Action, error) {
	if d.Halted || d.Complete {
		return types.ActionPause, nil
	}
	if !d.GotHeaders {
		return types.ActionPause, fmt.Errorf("hostsim: stream %d: trailers before headers", s.ID)
	}
	if d.StoppedAll {
		d.HoldTrailers(abi.LowerKeys(trailers))
		return types.ActionPause, nil
	}
	d.Trailers, d.HasTrailers = abi.AppendLower(d.Trailers[:0], trailers), true
	if s.Skip || s.uncreated(d) {
		d.ForwardTrailers(s.filter())
		return types.ActionContinue, nil
	}
	if s.vmFailed() {
		return paused(!s.Skip), nil
	}
	d.TrailersAvail = true
	_, _, cb := s.callbacks(d)
	raw, forceStop, err := s.guest.Call(cb, uint64(len(trailers)), 0)
	if err != nil {
		return types.ActionPause, s.Failed(err)
	}
	s.Action = paused(d.AfterTrailers(filtermanager.Trailers(raw, forceStop), s.filter()))
	a := s.Action
	s.touch()
	s.thread.Settle()
	return a, nil
}

// resume is proxy_continue_stream's continueDecoding/continueEncoding (Direction.Resume).
func (s *Stream) resume(d *filtermanager.Direction) error {
	d.Unavailable() // Context::continueStream clears the header, body and trailer pointers
	if !d.Resumable() {
		return nil
	}
	if d == &s.Resp || d.Buffering || d.HasHeldBody {
		// commonContinue encodes what the response side held (FilterManager::encodeHeaders/
		// encodeData/encodeTrailers) or decodes the request data it held (decodeData): both
		// re-arm the stream idle timer.
		s.activity()
	}
	return d.Resume(s.filter())
}

// passUnanswered keeps the chunk d received for a body callback that gave no verdict — its
// VM had failed before the call, or the call trapped — so that FAIL_OPEN's bypass (Failed)
// lets it go on with what the filter manager buffered before it: cpp-host's
// ContextBase::onRequestBody/onResponseBody check CHECK_FAIL_HTTP before and after the call
// and answer Continue under FAIL_OPEN (Bypass forwards a buffering direction's body). Under
// the other policies the stream fails and the chunk goes nowhere.
func (s *Stream) passUnanswered(d *filtermanager.Direction) {
	if s.thread.cfg.FailOpen {
		d.Buffering = true
	}
}

// vmFailed is cpp-host's CHECK_FAIL_HTTP at the top of every HTTP callback
// (ContextBase::onRequestHeaders, onRequestBody, ...): a stream whose VM failed since it
// started — another stream's callback trapped, e.g. the upstream filter's on the same VM —
// gets no callback; FAIL_OPEN lets it through (Continue), otherwise it fails once
// (failStream for both directions: 503 wasm_fail_stream) and stops. It reports whether the
// VM had failed.
func (s *Stream) vmFailed() bool {
	if !s.guest.Failed() {
		return false
	}
	if s.Final == nil || s.thread.cfg.FailOpen {
		_ = s.Failed(nil)
	}
	return true
}

// Failed applies the failure policy to a stream whose callback trapped and returns err:
// FAIL_OPEN bypasses the filter in both directions, otherwise the stream is answered 503
// wasm_fail_stream (Context::failStream).
func (s *Stream) Failed(err error) error {
	s.touch()
	if s.thread.cfg.FailOpen {
		s.Skip = true
		s.Req.Bypass(s.filter())
		s.Resp.Bypass(s.filter())
	} else {
		s.SetDetails(filtermanager.DetailsWasmFailStream)
		s.ReplaceResponse(filtermanager.FailStream())
	}
	s.thread.Settle()
	return err
}

// ReplaceResponse ends the stream with a reply that bypasses this filter: Envoy's
// sendDirectLocalReply, or a reset when response headers already went downstream.
func (s *Stream) ReplaceResponse(lr *filtermanager.LocalReply) {
	s.Req.Halted = true
	if s.Resp.ForwardedHeaders {
		s.ResetDetails = "response headers already sent: " + lr.StatusCodeDetail
	} else if s.Final == nil {
		s.Final = lr
	}
	s.Resp.Halted = true
	s.Resp.Complete = true
	s.touch()
}

// BufferLimit is the stream's buffer limit, one for both directions (FilterManager::
// setBufferLimit): the connection's, raised by the route's request_body_buffer_limit once
// Envoy applies it (Config.RouteBufferLimit, Config.RouteBufferLimitAtRouter).
func (s *Stream) BufferLimit() int {
	c := &s.thread.cfg
	if c.RouteBufferLimitAtRouter && !s.Req.ForwardedHeaders {
		return c.BufferLimit // the router has not seen the request headers yet
	}
	return c.RouteBufferLimit
}

// overLimit is Envoy's buffer overflow: 413 for a request (ActiveStreamDecoderFilter::
// requestDataTooLarge), 500 for a response (ActiveStreamEncoderFilter::responseDataTooLarge,
// through sendLocalReply: a direct reply, or a reset once headers went downstream).
func (s *Stream) overLimit(d *filtermanager.Direction) {
	if d == &s.Req {
		s.SendLocalReply(filtermanager.RequestTooLarge(), filtermanager.DetailsRequestPayloadTooLarge)
		return
	}
	s.SetDetails(filtermanager.DetailsResponsePayloadTooLarge)
	s.ReplaceResponse(filtermanager.ResponseTooLarge())
}

// SendLocalReply is DownstreamFilterManager::sendLocalReply: it sets the response code
// details first, then sends the reply through the encoder filters (no response yet),
// directly to the client (response headers exist but did not go downstream), or resets the
// stream (headers already went downstream: "Prior headers have already been sent").
func (s *Stream) SendLocalReply(lr *filtermanager.LocalReply, details string) {
	s.SetDetails(details)
	switch {
	case s.Resp.ForwardedHeaders:
		s.Req.Halted, s.Resp.Halted = true, true
		s.ResetDetails = details
		s.Resp.Complete = true
		s.touch()
	case s.Resp.GotHeaders:
		// Response headers exist but have not gone downstream: the reply replaces the
		// response and bypasses the remaining encoder filters, this one included.
		s.ReplaceResponse(lr)
	default:
		// Request phase: stop decoding and encode the reply through the filter chain, so
		// this plugin's own response callbacks see it.
		s.Req.Halted = true
		s.Req.StoppedAll, s.Req.Buffering = false, false
		s.activity() // the reply's FilterManager::encodeHeaders
		hdrs := filtermanager.ReplyHeaders(lr)
		eos := len(lr.Data) == 0
		if _, err := s.OnHeaders(&s.Resp, hdrs, eos); err != nil {
			return
		}
		if !eos {
			_, _ = s.OnBody(&s.Resp, lr.Data, true)
		}
	}
}

// runDeferred runs what the guest deferred on the stream, in the order it asked: continue,
// close and local replies. On a failed VM only a close still runs.
func (s *Stream) runDeferred() {
	for len(s.deferred) > 0 {
		op := s.deferred[0]
		copy(s.deferred, s.deferred[1:])
		s.deferred = s.deferred[:len(s.deferred)-1]
		if op.kind != opClose && s.guest.Failed() {
			continue
		}
		switch op.kind {
		case opContinue:
			d := &s.Req
			if op.dir == abi.StreamResponse {
				d = &s.Resp
			}
			_ = s.resume(d)
		case opClose:
			// Context::closeStream (source/extensions/common/wasm/context.cc): the details
			// become wasm_close_stream only when nothing set them yet (an upstream response
			// keeps via_upstream), then the stream is reset — here, after the callback,
			// before what it let through goes on (cpp-host runs the deferred reset in
			// DeferAfterCallActions at the end of the callback, inside Envoy's encodeData);
			// what earlier callbacks let through has reached the client already.
			s.Req.Halted, s.Resp.Halted = true, true
			s.ResetDetails = DetailsWasmCloseStream
			if !s.HasDetails {
				s.SetDetails(s.ResetDetails)
			}
			s.Resp.Complete = true
		case opLocalReply:
			if s.Local == nil {
				s.Local = op.local
			}
			// Context::sendLocalResponse passes the plugin's details through
			// StringUtil::replaceAllEmptySpace.
			details := streaminfo.ReplaceAllEmptySpace(op.local.StatusCodeDetail)
			if f, ok := s.driver.(LocalReplyForwarder); ok && f.ForwardLocalReply(op.local, details) {
				s.Req.Halted, s.Resp.Halted = true, true
				s.Resp.Complete = true
				continue
			}
			s.SendLocalReply(op.local, details)
		}
	}
}

// Complete runs Envoy's end of stream: on_log (maps readable), on_done (result ignored),
// on_delete. A stream the guest can no longer run (Guest.Gone: a failed VM, or an instance
// FAIL_RELOAD replaced, where its context never existed) or that bypasses the filter ends
// without callbacks.
func (s *Stream) Complete() error {
	if s.deleted {
		return nil
	}
	defer s.forget()
	if s.Skip || s.guest.Gone() {
		return nil
	}
	if err := s.ensureCreated(); err != nil {
		return err
	}
	s.inLog = true
	_, _, err := s.guest.Call(OnLog, 0, 0)
	s.inLog = false
	if err != nil {
		return err
	}
	if _, _, err := s.guest.Call(OnDone, 0, 0); err != nil {
		return err
	}
	_, _, err = s.guest.Call(OnDelete, 0, 0)
	return err
}

// Destroy is the end of an upstream HTTP filter's stream, one try's (UpstreamRequest::
// cleanUp → FilterManager::destroyFilters → Context::onDestroy): on_done (result ignored)
// and on_delete, never on_log — nothing in UpstreamRequest calls the upstream filter
// manager's log(). A context that was never created gets no callbacks (onDestroy returns
// early without in_vm_context_created_); neither does a stream the guest can no longer run.
// Deferred actions still pending are dropped.
func (s *Stream) Destroy() error {
	if s.deleted {
		return nil
	}
	defer s.forget()
	s.deferred = s.deferred[:0]
	s.Req.Halted, s.Resp.Halted = true, true
	s.Req.Unavailable()
	s.Resp.Unavailable()
	if s.Skip || !s.Created || s.guest.Gone() {
		return nil
	}
	if _, _, err := s.guest.Call(OnDone, 0, 0); err != nil {
		return err
	}
	_, _, err := s.guest.Call(OnDelete, 0, 0)
	return err
}

// forget ends the stream for its VM (its getters still see it for a while).
func (s *Stream) forget() {
	s.deleted = true
	s.guest.Ended()
}

// ResetDownstream ends the stream the way Envoy's connection manager does when the
// downstream resets it. ActiveStream::onResetStream ends in doDeferredStreamDestroy, which
// runs completeRequest(); onStreamComplete(); log(); destroyFilters(): completeRequest sets
// requestComplete(), so Context::log does run proxy_on_log for a reset stream (creating the
// context first if it never was), and onDestroy then runs proxy_on_done and
// proxy_on_delete. The stream therefore keeps log → done → delete for resets too, with the
// request maps readable, the missing response NotFound in on_log, and the reset's flag and
// details in response.flags and response.code_details. Before any request headers Envoy has
// built no filter chain, so such a stream ends without callbacks. Deferred continue/close/
// local replies are dropped, and the stream is gone: continue or a local reply from a later
// tick, queue notification or callout answer finds no stream. A driven stream is ended by
// its driver (Driver.ClientReset).
func (s *Stream) ResetDownstream(r filtermanager.DownstreamReset) error {
	s.deferred = s.deferred[:0]
	s.Req.Halted, s.Resp.Halted = true, true
	s.Req.Unavailable()
	s.Resp.Unavailable()
	s.Flags |= r.Flags
	if r.Details != "" {
		s.SetDetails(r.Details)
	}
	if s.ResetDetails == "" {
		s.ResetDetails = filtermanager.ResetLabel(r)
	}
	if s.driver != nil {
		return s.driver.ClientReset()
	}
	if !s.Created && !s.Req.GotHeaders {
		s.forget()
		return nil
	}
	return s.Complete()
}

// ---------------------------------------------------------------------------------------
// What the guest's host calls see and ask for on the stream.

// HeaderMap returns the stream's map of type t (request or response headers or trailers)
// as the guest may see it now. Outside its phase: BadArgument; in on_log the maps are
// read-only and a missing one is NotFound. Any other map type is BadArgument.
func (s *Stream) HeaderMap(t abi.MapType, mutable bool) (*[][2]string, abi.Status) {
	d := &s.Req
	switch t {
	case abi.MapRequestHeaders, abi.MapRequestTrailers:
	case abi.MapResponseHeaders, abi.MapResponseTrailers:
		d = &s.Resp
	default:
		return nil, abi.StatusBadArgument
	}
	trailers := t == abi.MapRequestTrailers || t == abi.MapResponseTrailers
	if s.inLog {
		if mutable {
			return nil, abi.StatusBadArgument
		}
		if trailers {
			if !d.HasTrailers {
				return nil, abi.StatusNotFound
			}
			return &d.Trailers, abi.StatusOK
		}
		if !d.GotHeaders {
			return nil, abi.StatusNotFound
		}
		return &d.Headers, abi.StatusOK
	}
	if trailers {
		if d.TrailersAvail {
			return &d.Trailers, abi.StatusOK
		}
		// Trailers can be added from the last body callback (addDecodedTrailers).
		if mutable && d.BodyAvail && d.EndStream && !d.HasTrailers {
			d.HasTrailers = true
			d.Trailers = [][2]string{}
			return &d.Trailers, abi.StatusOK
		}
		return nil, abi.StatusBadArgument
	}
	if !d.HeadersAvail {
		return nil, abi.StatusBadArgument
	}
	return &d.Headers, abi.StatusOK
}

// Body returns the request or response body the guest may see now (a mutable buffer);
// false outside a body callback or for another buffer type.
func (s *Stream) Body(t abi.BufferType) (*[]byte, bool) {
	d := &s.Req
	switch t {
	case abi.BufferRequestBody:
	case abi.BufferResponseBody:
		d = &s.Resp
	default:
		return nil, false
	}
	if !d.BodyAvail {
		return nil, false
	}
	return &d.Body, true
}

// ContinueStream is proxy_continue_stream on s, nil for a root context: a continue of the
// request or the response deferred until the callback returns; a no-op in a root context
// or for the downstream connection, Unimplemented for the upstream one.
func ContinueStream(s *Stream, t abi.StreamType) abi.Status {
	switch {
	case t == abi.StreamUpstream:
		return abi.StatusUnimplemented
	case t > abi.StreamUpstream:
		return abi.StatusBadArgument
	case t == abi.StreamDownstream:
		return abi.StatusOK
	}
	s.deferOp(deferredOp{kind: opContinue, dir: t})
	return abi.StatusOK
}

// CloseStream is proxy_close_stream on s, nil for a root context: a reset
// ("wasm_close_stream") deferred until the callback returns; a no-op in a root context.
func CloseStream(s *Stream, t abi.StreamType) abi.Status {
	if t > abi.StreamUpstream {
		return abi.StatusBadArgument
	}
	s.deferOp(deferredOp{kind: opClose, dir: t})
	return abi.StatusOK
}

// SendLocalResponse is proxy_send_local_response on s, nil for a root context: the reply
// is deferred until the callback returns. Without a stream it is a silent no-op
// (envoy#39797). It reports whether it recorded the reply, in which case cpp-host overrides
// the callback's result to stop.
func SendLocalResponse(s *Stream, lr *filtermanager.LocalReply) bool {
	return s.deferOp(deferredOp{kind: opLocalReply, local: lr})
}

// deferOp records an operation Envoy runs only after the current callback returns. From a
// root context (s nil) it is a silent no-op, as in Envoy; it reports whether it recorded.
func (s *Stream) deferOp(op deferredOp) bool {
	if s == nil {
		return false
	}
	s.deferred = append(s.deferred, op)
	s.touch()
	return true
}

// ---------------------------------------------------------------------------------------

// Thread is a VM's thread as its streams see it: the filter manager's options, and the
// streams with deferred actions or state changes to settle once the running callback
// returns. Callbacks never nest (the host defers everything until a callback returns).
type Thread struct {
	cfg      Config
	touched  []*Stream // streams to settle
	pos      int       // next one to settle
	settling bool
}

// NewThread returns a thread whose streams follow cfg.
func NewThread(cfg Config) *Thread { return &Thread{cfg: cfg} }

// Touch records that s has deferred work or changed state.
func (t *Thread) Touch(s *Stream) {
	for _, u := range t.touched[t.pos:] {
		if u == s {
			return
		}
	}
	t.touched = append(t.touched, s)
}

// Settle runs what Envoy defers until the VM call returns (cpp-host's
// DeferAfterCallActions): each touched stream's continue, close and local replies, in the
// order the guest asked for them; then its driver moves on (Driver.Settled). Callbacks run
// from here settle again; the outermost call does the work, so everything happens in order
// and nothing nests.
func (t *Thread) Settle() {
	if t.settling {
		return
	}
	t.settling = true
	for t.pos < len(t.touched) {
		s := t.touched[t.pos]
		t.pos++
		s.runDeferred()
		if s.driver != nil {
			s.driver.Settled()
		}
	}
	clear(t.touched)
	t.touched, t.pos = t.touched[:0], 0
	t.settling = false
}
