package hostsim

import (
	"errors"
	"fmt"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// LocalResponse is a reply the plugin sent with proxy_send_local_response, or one of
// Envoy's own (field names as in proxytest's LocalHttpResponse).
type LocalResponse = filtermanager.LocalReply

// httpStream is one HTTP stream's filter context in a VM.
type httpStream struct {
	vm      *VM
	id      uint32
	gen     uint64 // the VM instance (vm.gen) the stream lives in
	created bool
	deleted bool
	inLog   bool
	skip    bool // FAIL_OPEN: the filter is bypassed

	req, resp filtermanager.Direction

	action      types.Action
	local       *LocalResponse // first local reply the plugin sent
	final       *LocalResponse // a reply that replaced the response (response phase, failure, limits)
	reset       string         // reset details, e.g. "wasm_close_stream"
	flags       ResponseFlags  // StreamInfo response flags (CEL response.flags)
	details     string         // StreamInfo response code details (CEL response.code_details) ...
	hasDetails  bool           // ... once something set them
	filterState map[string][]byte
	deferred    []deferredOp
	callouts    []*Callout
	ex          *Exchange

	// RouteCacheClears counts clear_route_cache foreign calls.
	RouteCacheClears int
}

type opKind int

const (
	opContinue opKind = iota
	opClose
	opLocalReply
)

type deferredOp struct {
	kind  opKind
	dir   abi.StreamType
	local *LocalResponse
}

func (vm *VM) newStream() *httpStream {
	id := vm.nextID
	vm.nextID++
	var s *httpStream
	if n := len(vm.free); n > 0 {
		s = vm.free[n-1]
		vm.free = vm.free[:n-1]
		s.clear()
	} else {
		s = &httpStream{}
	}
	s.vm, s.id, s.gen = vm, id, vm.gen
	vm.streams[id] = s
	return s
}

// reset clears a recycled stream, keeping the capacity of its buffers.
func (s *httpStream) clear() {
	req, resp := s.req.Recycle(), s.resp.Recycle()
	callouts := s.callouts[:0]
	*s = httpStream{req: req, resp: resp, callouts: callouts}
}

// ErrNoStream is wrapped by the errors of calls on a stream that does not exist: never
// allocated, or already ended (completed, reset, or lost with a reloaded VM instance).
var ErrNoStream = errors.New("hostsim: no live stream")

func (vm *VM) stream(id uint32) (*httpStream, error) {
	s := vm.streams[id]
	if s == nil {
		return nil, fmt.Errorf("%w: %s: context id %d", ErrNoStream, vm.name, id)
	}
	return s, nil
}

// frame returns the VM's callback frame set up for this stream. Callbacks never nest (the
// host defers everything until a callback returns), so one frame per VM is reused.
func (s *httpStream) frame() *frame {
	fr := &s.vm.fr
	*fr = frame{ctxID: s.id, effective: s.id, stream: s}
	return fr
}

// ensureCreated runs proxy_on_context_create lazily, as Envoy does at decodeHeaders (or log).
func (s *httpStream) ensureCreated() error {
	if s.created {
		return nil
	}
	s.created = true
	_, err := s.vm.call("proxy_on_context_create", s.vm.fns.contextCreate, s.frame(), uint64(s.id), uint64(s.vm.rootID))
	return err
}

// ---------------------------------------------------------------------------------------
// Callbacks

// callbacks for one direction.
type dirCallbacks struct {
	headers, body, trailers string
}

var (
	reqCallbacks  = dirCallbacks{"proxy_on_request_headers", "proxy_on_request_body", "proxy_on_request_trailers"}
	respCallbacks = dirCallbacks{"proxy_on_response_headers", "proxy_on_response_body", "proxy_on_response_trailers"}
)

func (s *httpStream) names(d *filtermanager.Direction) dirCallbacks {
	if d == &s.req {
		return reqCallbacks
	}
	return respCallbacks
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// streamFilter is the stream as its directions' transitions see it (filtermanager.Filter):
// the filter's body and trailers callbacks, and a completed direction marks the stream
// changed.
type streamFilter httpStream

func (f *streamFilter) Body(d *filtermanager.Direction, chunk []byte, eos bool) error {
	_, err := (*httpStream)(f).onBody(d, chunk, eos)
	return err
}

func (f *streamFilter) Trailers(d *filtermanager.Direction, trailers [][2]string) error {
	_, err := (*httpStream)(f).onTrailers(d, trailers)
	return err
}

func (f *streamFilter) Completed(*filtermanager.Direction) {
	s := (*httpStream)(f)
	s.vm.touch(s)
}

func (s *httpStream) filter() *streamFilter { return (*streamFilter)(s) }

// paused is the action a direction's transition leaves the stream with.
func paused(p bool) types.Action {
	if p {
		return types.ActionPause
	}
	return types.ActionContinue
}

// onHeaders delivers headers to the filter (decodeHeaders / encodeHeaders).
func (s *httpStream) onHeaders(d *filtermanager.Direction, headers [][2]string, eos bool) (types.Action, error) {
	vm := s.vm
	if d.Halted || d.GotHeaders {
		if d.GotHeaders && !d.Halted {
			return types.ActionPause, fmt.Errorf("hostsim: stream %d: headers delivered twice", s.id)
		}
		return types.ActionPause, nil
	}
	d.Headers, d.GotHeaders, d.EndStream = abi.AppendLower(d.Headers[:0], headers), true, eos
	if s.skip {
		d.ForwardHeaders(s.filter())
		return types.ActionContinue, nil
	}
	if err := s.ensureCreated(); err != nil {
		return types.ActionPause, s.failed(err)
	}
	d.HeadersAvail = true
	fr := s.frame()
	name, fn := s.names(d).headers, vm.fns.requestHeaders
	if d == &s.resp {
		fn = vm.fns.responseHeaders
	}
	raw, err := vm.call(name, fn, fr, uint64(s.id), uint64(len(headers)), b2u(eos))
	if err != nil {
		return types.ActionPause, s.failed(err)
	}
	v := filtermanager.Headers(raw, fr.forceStop, vm.host.cfg.allowHeadersStopIteration)
	s.action = paused(d.AfterHeaders(v, s.filter()))
	a := s.action
	vm.touch(s)
	vm.afterCallback()
	return a, nil
}

// onBody delivers a data chunk (decodeData / encodeData).
func (s *httpStream) onBody(d *filtermanager.Direction, chunk []byte, eos bool) (types.Action, error) {
	vm := s.vm
	if d.Halted || d.Complete {
		return types.ActionPause, nil
	}
	if !d.GotHeaders {
		return types.ActionPause, fmt.Errorf("hostsim: stream %d: body before headers", s.id)
	}
	if d.StoppedAll {
		// Stopped at headers: held without calling the filter and without a buffer limit
		// (Direction.Hold); SendData and UpstreamCall.Data model the watermark.
		d.Hold(chunk, eos)
		return types.ActionPause, nil
	}
	d.EndStream = eos
	if s.skip {
		d.ForwardBody(chunk, eos, s.filter())
		return types.ActionContinue, nil
	}
	d.Receive(chunk)
	if d.Buffering && len(d.Body) > s.bufferLimit() {
		s.overLimit(d)
		vm.afterCallback()
		return types.ActionPause, nil
	}
	d.BodyAvail = true
	fr := s.frame()
	fn := vm.fns.requestBody
	if d == &s.resp {
		fn = vm.fns.responseBody
	}
	raw, err := vm.call(s.names(d).body, fn, fr, uint64(s.id), uint64(len(d.Body)), b2u(eos))
	if err != nil {
		return types.ActionPause, s.failed(err)
	}
	s.action = paused(d.AfterData(filtermanager.Data(raw, fr.forceStop), eos, s.filter()))
	a := s.action
	vm.touch(s)
	vm.afterCallback()
	return a, nil
}

// onTrailers delivers trailers (decodeTrailers / encodeTrailers).
func (s *httpStream) onTrailers(d *filtermanager.Direction, trailers [][2]string) (types.Action, error) {
	vm := s.vm
	if d.Halted || d.Complete {
		return types.ActionPause, nil
	}
	if !d.GotHeaders {
		return types.ActionPause, fmt.Errorf("hostsim: stream %d: trailers before headers", s.id)
	}
	if d.StoppedAll {
		d.HoldTrailers(abi.LowerKeys(trailers))
		return types.ActionPause, nil
	}
	d.Trailers, d.HasTrailers = abi.AppendLower(d.Trailers[:0], trailers), true
	if s.skip {
		d.ForwardTrailers(s.filter())
		return types.ActionContinue, nil
	}
	d.TrailersAvail = true
	fr := s.frame()
	fn := vm.fns.requestTrailers
	if d == &s.resp {
		fn = vm.fns.responseTrailers
	}
	raw, err := vm.call(s.names(d).trailers, fn, fr, uint64(s.id), uint64(len(trailers)))
	if err != nil {
		return types.ActionPause, s.failed(err)
	}
	s.action = paused(d.AfterTrailers(filtermanager.Trailers(raw, fr.forceStop), s.filter()))
	a := s.action
	vm.touch(s)
	vm.afterCallback()
	return a, nil
}

// resume is proxy_continue_stream's continueDecoding/continueEncoding (Direction.Resume).
func (s *httpStream) resume(d *filtermanager.Direction) error {
	d.Unavailable() // Context::continueStream clears the header, body and trailer pointers
	if !d.Resumable() {
		return nil
	}
	if ex := s.ex; ex != nil && (d == &s.resp || d.Buffering || d.HasHeldBody) {
		// commonContinue encodes what the response side held (FilterManager::encodeHeaders/
		// encodeData/encodeTrailers) or decodes the request data it held (decodeData): both
		// re-arm the stream idle timer.
		ex.touchStreamIdle()
	}
	return d.Resume(s.filter())
}

// failed applies the failure policy to a stream whose callback trapped.
func (s *httpStream) failed(err error) error {
	s.vm.touch(s)
	switch s.vm.host.cfg.failurePolicy {
	case FailOpen:
		s.skip = true
		s.req.Bypass(s.filter())
		s.resp.Bypass(s.filter())
	default:
		s.setDetails(DetailsWasmFailStream)
		s.replaceResponse(filtermanager.FailStream())
	}
	s.vm.settle()
	return err
}

// replaceResponse ends the stream with a reply that bypasses this filter: Envoy's
// sendDirectLocalReply, or a reset when response headers already went downstream.
func (s *httpStream) replaceResponse(lr *LocalResponse) {
	s.req.Halted = true
	if s.resp.ForwardedHeaders {
		s.reset = "response headers already sent: " + lr.StatusCodeDetail
	} else if s.final == nil {
		s.final = lr
	}
	s.resp.Halted = true
	s.resp.Complete = true
	s.vm.touch(s)
}

// bufferLimit is the stream's buffer limit, one for both directions (FilterManager::
// setBufferLimit): the connection's, raised by the route's request_body_buffer_limit once
// Envoy applies it (see WithRequestBodyBufferLimit and WithRouteBufferLimitAtRouter).
func (s *httpStream) bufferLimit() int {
	c := &s.vm.host.cfg
	if c.routeBufferLimitAtRouter && !s.req.ForwardedHeaders {
		return c.bufferLimit // the router has not seen the request headers yet
	}
	return c.routeBufferLimit()
}

// overLimit is Envoy's buffer overflow: 413 for a request (ActiveStreamDecoderFilter::
// requestDataTooLarge), 500 for a response (ActiveStreamEncoderFilter::responseDataTooLarge,
// through sendLocalReply: a direct reply, or a reset once headers went downstream).
func (s *httpStream) overLimit(d *filtermanager.Direction) {
	if d == &s.req {
		s.sendLocalReply(filtermanager.RequestTooLarge(), DetailsRequestPayloadTooLarge)
		return
	}
	s.setDetails(DetailsResponsePayloadTooLarge)
	s.replaceResponse(filtermanager.ResponseTooLarge())
}

// sendLocalReply is DownstreamFilterManager::sendLocalReply: it sets the response code
// details first, then sends the reply through the encoder filters (no response yet),
// directly to the client (response headers exist but did not go downstream), or resets the
// stream (headers already went downstream: "Prior headers have already been sent").
func (s *httpStream) sendLocalReply(lr *LocalResponse, details string) {
	s.setDetails(details)
	switch {
	case s.resp.ForwardedHeaders:
		s.req.Halted, s.resp.Halted = true, true
		s.reset = details
		s.resp.Complete = true
		s.vm.touch(s)
	case s.resp.GotHeaders:
		// Response headers exist but have not gone downstream: the reply replaces the
		// response and bypasses the remaining encoder filters, this one included.
		s.replaceResponse(lr)
	default:
		// Request phase: stop decoding and encode the reply through the filter chain, so
		// this plugin's own response callbacks see it.
		s.req.Halted = true
		s.req.StoppedAll, s.req.Buffering = false, false
		if s.ex != nil {
			s.ex.touchStreamIdle() // the reply's FilterManager::encodeHeaders
		}
		hdrs := filtermanager.ReplyHeaders(lr)
		eos := len(lr.Data) == 0
		if _, err := s.onHeaders(&s.resp, hdrs, eos); err != nil {
			return
		}
		if !eos {
			_, _ = s.onBody(&s.resp, lr.Data, true)
		}
	}
}

// touch records that the stream has deferred work or changed state.
func (vm *VM) touch(s *httpStream) {
	for _, t := range vm.touched[vm.touchedPos:] {
		if t == s {
			return
		}
	}
	vm.touched = append(vm.touched, s)
}

// afterCallback runs what Envoy defers until the VM call returns: continue, close and
// local replies, in the order the guest asked for them; then it lets whole-request drivers
// (RunHTTP) move on. Callbacks run from here call it again; the outermost call does the
// work, so everything happens in order and nothing nests.
func (vm *VM) afterCallback() {
	if vm.settling {
		return
	}
	vm.settling = true
	for vm.touchedPos < len(vm.touched) {
		s := vm.touched[vm.touchedPos]
		vm.touchedPos++
		for len(s.deferred) > 0 {
			op := s.deferred[0]
			copy(s.deferred, s.deferred[1:])
			s.deferred = s.deferred[:len(s.deferred)-1]
			if vm.failed != nil && op.kind != opClose {
				continue
			}
			switch op.kind {
			case opContinue:
				d := &s.req
				if op.dir == abi.StreamResponse {
					d = &s.resp
				}
				_ = s.resume(d)
			case opClose:
				// Context::closeStream (source/extensions/common/wasm/context.cc): the
				// details become wasm_close_stream only when nothing set them yet (an
				// upstream response keeps via_upstream), then the stream is reset —
				// here, after the callback, before what it let through goes on (cpp-host
				// runs the deferred reset in DeferAfterCallActions at the end of the
				// callback, inside Envoy's encodeData); what earlier callbacks let
				// through has reached the client already.
				s.req.Halted, s.resp.Halted = true, true
				s.reset = DetailsWasmCloseStream
				if !s.hasDetails {
					s.setDetails(s.reset)
				}
				s.resp.Complete = true
			case opLocalReply:
				if s.local == nil {
					s.local = op.local
				}
				// Context::sendLocalResponse passes the plugin's details through
				// StringUtil::replaceAllEmptySpace.
				s.sendLocalReply(op.local, streaminfo.ReplaceAllEmptySpace(op.local.StatusCodeDetail))
			}
		}
		if s.ex != nil {
			s.ex.step()
		}
	}
	for i := range vm.touched {
		vm.touched[i] = nil
	}
	vm.touched, vm.touchedPos = vm.touched[:0], 0
	vm.settling = false
}

// settle is afterCallback for state changes made outside a callback.
func (vm *VM) settle() { vm.afterCallback() }

// complete runs Envoy's end of stream: on_log (maps readable), on_done (result ignored),
// on_delete. A stream of an instance FAIL_RELOAD replaced ends without callbacks: its
// context never existed in the new instance.
func (s *httpStream) complete() error {
	if s.deleted {
		return nil
	}
	vm := s.vm
	defer s.forget()
	if s.skip || vm.failed != nil || vm.dead || s.gen != vm.gen {
		return nil
	}
	if err := s.ensureCreated(); err != nil {
		return err
	}
	s.inLog = true
	_, err := vm.call("proxy_on_log", vm.fns.log, s.frame(), uint64(s.id))
	s.inLog = false
	if err != nil {
		return err
	}
	if _, err := vm.call("proxy_on_done", vm.fns.done, s.frame(), uint64(s.id)); err != nil {
		return err
	}
	_, err = vm.call("proxy_on_delete", vm.fns.delete, s.frame(), uint64(s.id))
	return err
}

// forget removes the ended stream from its VM (the getters still see it for a while).
func (s *httpStream) forget() {
	vm := s.vm
	s.deleted = true
	if vm.streams[s.id] == s { // a reloaded instance may reuse the id
		delete(vm.streams, s.id)
	}
	vm.remember(s)
}

// ResetDownstreamRemoteDisconnect is the details Envoy records for a client that went
// away; ResetStream and Exchange.Reset use it when given no details.
const ResetDownstreamRemoteDisconnect = filtermanager.ResetDownstreamRemoteDisconnect

// DownstreamReset is how the client side ended a stream early: the response flag and code
// details Envoy's connection manager records for it.
type DownstreamReset = filtermanager.DownstreamReset

var (
	// DownstreamDisconnect is a client that closed its connection (HTTP/1.1):
	// ConnectionManagerImpl::resetAllStreams sets DC (DownstreamConnectionTermination) and
	// the details downstream_remote_disconnect before onResetStream, so on_log sees both.
	DownstreamDisconnect = filtermanager.DownstreamDisconnect
	// DownstreamStreamReset is a client that reset one stream (HTTP/2 RST_STREAM): flag DR
	// (DownstreamRemoteReset). That Envoy keeps the stream's details is inferred, not read
	// in its source.
	DownstreamStreamReset = filtermanager.DownstreamStreamReset
)

// resetDownstream ends the stream the way Envoy's connection manager does when the
// downstream resets it (VM locked). ActiveStream::onResetStream ends in
// doDeferredStreamDestroy, which runs completeRequest(); onStreamComplete(); log();
// destroyFilters(): completeRequest sets requestComplete(), so Context::log does run
// proxy_on_log for a reset stream (creating the context first if it never was), and
// onDestroy then runs proxy_on_done and proxy_on_delete. hostsim therefore keeps
// log → done → delete for resets too, with the request maps readable, the missing
// response NotFound in on_log, and the reset's flag and details in response.flags and
// response.code_details. Before any request headers Envoy has built no filter chain,
// so such a stream ends without callbacks. Deferred continue/close/local replies are
// dropped, and the stream is gone: continue or a local reply from a later tick, queue
// notification or callout answer finds no stream (proxy_set_effective_context answers
// BadArgument), and the stream's callouts still complete on the root context (the SDKs skip
// the callback of a deleted stream).
func (s *httpStream) resetDownstream(r DownstreamReset) error {
	s.deferred = s.deferred[:0]
	s.req.Halted, s.resp.Halted = true, true
	s.req.Unavailable()
	s.resp.Unavailable()
	s.flags |= r.Flags
	if r.Details != "" {
		s.setDetails(r.Details)
	}
	if s.reset == "" {
		s.reset = filtermanager.ResetLabel(r)
	}
	if ex := s.ex; ex != nil {
		n := len(ex.errs)
		ex.clientGone = true
		ex.finish()
		return errors.Join(ex.errs[n:]...)
	}
	if !s.created && !s.req.GotHeaders {
		s.forget()
		return nil
	}
	return s.complete()
}

// recentStreams is how many finished streams a VM keeps for the inspection getters.
const recentStreams = 64

func (vm *VM) remember(s *httpStream) {
	s.ex = nil
	if len(vm.recent) < recentStreams {
		vm.recent = append(vm.recent, s)
		return
	}
	vm.free = append(vm.free, vm.recent[vm.recentNext])
	vm.recent[vm.recentNext] = s
	vm.recentNext = (vm.recentNext + 1) % recentStreams
}

// beginStream applies the failure policy to a new stream on a failed VM. It reports
// whether the filter should run.
func (vm *VM) beginStream(s *httpStream) error {
	if vm.failed == nil && !vm.dead {
		return nil
	}
	switch vm.host.cfg.failurePolicy {
	case FailOpen:
		s.skip = true
	case FailReload:
		if err := vm.reload(); err != nil {
			s.skip = false
			s.replaceResponse(filtermanager.FailStream())
			return err
		}
		// The stream was allocated on the old instance; keep its id on the new one.
		vm.streams[s.id] = s
		s.gen = vm.gen
		if vm.nextID <= s.id {
			vm.nextID = s.id + 1
		}
	default:
		s.replaceResponse(filtermanager.FailStream())
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// Maps and buffers in their phase: what the env functions (hostsim/internal/hostfn) may
// see and change now.

// headerMap returns the map the guest may see now. Outside its phase: BadArgument; in
// on_log the maps are read-only and a missing one is NotFound.
func (vm *VM) headerMap(t abi.MapType, mutable bool) (*[][2]string, Status) {
	fr := vm.frame
	if fr == nil {
		return nil, StatusBadArgument
	}
	switch t {
	case abi.MapHTTPCallResponseHeaders, abi.MapHTTPCallResponseTrailers:
		if fr.callout == nil || mutable {
			return nil, StatusBadArgument
		}
		if t == abi.MapHTTPCallResponseHeaders {
			return &fr.callout.Headers, StatusOK
		}
		return &fr.callout.Trailers, StatusOK
	case abi.MapRequestHeaders, abi.MapRequestTrailers, abi.MapResponseHeaders, abi.MapResponseTrailers:
	default:
		return nil, StatusBadArgument
	}
	s := fr.stream
	if s == nil {
		return nil, StatusBadArgument
	}
	d := &s.req
	if t == abi.MapResponseHeaders || t == abi.MapResponseTrailers {
		d = &s.resp
	}
	trailers := t == abi.MapRequestTrailers || t == abi.MapResponseTrailers
	if s.inLog {
		if mutable {
			return nil, StatusBadArgument
		}
		if trailers {
			if !d.HasTrailers {
				return nil, StatusNotFound
			}
			return &d.Trailers, StatusOK
		}
		if !d.GotHeaders {
			return nil, StatusNotFound
		}
		return &d.Headers, StatusOK
	}
	if trailers {
		if d.TrailersAvail {
			return &d.Trailers, StatusOK
		}
		// Trailers can be added from the last body callback (addDecodedTrailers).
		if mutable && d.BodyAvail && d.EndStream && !d.HasTrailers {
			d.HasTrailers = true
			d.Trailers = [][2]string{}
			return &d.Trailers, StatusOK
		}
		return nil, StatusBadArgument
	}
	if !d.HeadersAvail {
		return nil, StatusBadArgument
	}
	return &d.Headers, StatusOK
}

// bufferRW returns the buffer of type t visible in the running callback; mutable reports
// whether the guest may set it (a body), ok whether there is one.
func (vm *VM) bufferRW(t abi.BufferType) (b *[]byte, mutable, ok bool) {
	fr := vm.frame
	if fr == nil {
		return nil, false, false
	}
	switch t {
	case abi.BufferRequestBody, abi.BufferResponseBody:
		s := fr.stream
		if s == nil {
			return nil, false, false
		}
		d := &s.req
		if t == abi.BufferResponseBody {
			d = &s.resp
		}
		if !d.BodyAvail {
			return nil, false, false
		}
		return &d.Body, true, true
	case abi.BufferHTTPCallResponseBody:
		if fr.callout == nil {
			return nil, false, false
		}
		return &fr.callout.Body, false, true
	case abi.BufferVMConfiguration, abi.BufferPluginConfiguration:
		if fr.hasBuffer && fr.bufType == t {
			return &fr.buffer, false, true
		}
	}
	return nil, false, false
}

// continueStream records a deferred continue; a no-op in a root context.
func (vm *VM) continueStream(t abi.StreamType) Status {
	switch {
	case t == abi.StreamUpstream:
		return StatusUnimplemented
	case t > abi.StreamUpstream:
		return StatusBadArgument
	case t == abi.StreamDownstream:
		return StatusOK
	}
	vm.deferOp(deferredOp{kind: opContinue, dir: t})
	return StatusOK
}

// closeStream records a deferred reset ("wasm_close_stream"); a no-op in a root context.
func (vm *VM) closeStream(t abi.StreamType) Status {
	if t > abi.StreamUpstream {
		return StatusBadArgument
	}
	vm.deferOp(deferredOp{kind: opClose, dir: t})
	return StatusOK
}

// deferOp records an operation Envoy runs only after the current callback returns. From a
// root context (no stream) it is a silent no-op, as in Envoy; it reports whether it recorded.
func (vm *VM) deferOp(op deferredOp) bool {
	fr := vm.frame
	if fr == nil || fr.stream == nil {
		return false
	}
	fr.stream.deferred = append(fr.stream.deferred, op)
	vm.touch(fr.stream)
	return true
}

// sendLocalResponse records a deferred local reply; without a stream it is a silent no-op
// (envoy#39797).
func (vm *VM) sendLocalResponse(lr *LocalResponse) {
	if vm.deferOp(deferredOp{kind: opLocalReply, local: lr}) {
		vm.frame.forceStop = true // cpp-host overrides the callback's result to stop
	}
}
