package hostsim

import (
	"errors"
	"fmt"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/stream"
)

// The HTTP stream's model is hostsim/internal/envoy/stream: its state, the callbacks and how
// their verdicts apply, the buffer limit, local replies, resets and deferred actions. This
// file is the VM's side of it: a stream's place in the VM (its instance, its callouts, the
// exchange driving it), the guest that runs its callbacks (stream.Guest), and the maps,
// buffers and stream calls the host functions reach through the callback's frame.

// LocalResponse is a reply the plugin sent with proxy_send_local_response, or one of
// Envoy's own (field names as in proxytest's LocalHttpResponse).
type LocalResponse = filtermanager.LocalReply

// httpStream is one HTTP stream's filter context in a VM: the model's stream and what the
// VM keeps with it.
type httpStream struct {
	stream.Stream
	vm       *VM
	gen      uint64     // the VM instance (vm.gen) the stream lives in
	callouts []*Callout // the callouts the stream made
	ex       *Exchange  // the exchange driving it (nil: the proxytest-shaped calls)
	root     uint32     // the root context of the stream's plugin
	// try is the router's try whose upstream HTTP filter this stream is (nil: a downstream
	// stream); its stream info is the downstream stream's (UpstreamFilterManager::streamInfo
	// returns the router's callbacks()->streamInfo()).
	try *upTry
}

func (vm *VM) newStream() *httpStream {
	id := vm.nextID
	vm.nextID++
	var s *httpStream
	if n := len(vm.free); n > 0 {
		s = vm.free[n-1]
		vm.free = vm.free[:n-1]
	} else {
		s = &httpStream{}
	}
	s.Init(vm.thread, id, (*streamGuest)(s), nil)
	s.vm, s.gen, s.callouts, s.ex, s.root, s.try = vm, vm.gen, s.callouts[:0], nil, vm.rootID, nil
	vm.streams[id] = s
	return s
}

// newUpstreamStream is a new stream context in the upstream filter plugin for try t of ex
// (UpstreamRequest's own filter chain: a new Wasm Context per try). A failed VM's follows
// the failure policy: FAIL_OPEN bypasses the filter; otherwise the try's filter chain is
// answered 503 wasm_fail_stream, which goes to the client like any upstream filter's reply.
func (vm *VM) newUpstreamStream(ex *Exchange, t *upTry) *httpStream {
	s := vm.newStream()
	s.root, s.ex, s.try = vm.upRoot(), ex, t
	s.NoHeadersStopIteration = vm.host.cfg.upstreamNoStopIteration
	s.SetDriver((*tryDriver)(t))
	if vm.failed != nil || vm.dead || s.root == 0 {
		if vm.host.cfg.failurePolicy == FailOpen {
			s.Skip = true
		} else {
			s.ReplaceResponse(filtermanager.FailStream())
		}
	}
	return s
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

// streamGuest is the VM as one of its streams sees it (stream.Guest).
type streamGuest httpStream

// Call runs a stream callback in the stream's frame. Callbacks never nest (the host defers
// everything until a callback returns), so one frame per VM is reused.
func (g *streamGuest) Call(cb stream.Callback, a, b uint64) (uint64, bool, error) {
	s := (*httpStream)(g)
	vm := s.vm
	fr := &vm.fr
	*fr = frame{ctxID: s.ID, effective: s.ID, stream: s}
	id, f := uint64(s.ID), vm.fns
	var r uint64
	var err error
	switch cb {
	case stream.OnContextCreate:
		r, err = vm.call(cb.String(), f.contextCreate, fr, id, uint64(s.root))
	case stream.OnRequestHeaders:
		r, err = vm.call(cb.String(), f.requestHeaders, fr, id, a, b)
	case stream.OnRequestBody:
		r, err = vm.call(cb.String(), f.requestBody, fr, id, a, b)
	case stream.OnRequestTrailers:
		r, err = vm.call(cb.String(), f.requestTrailers, fr, id, a)
	case stream.OnResponseHeaders:
		r, err = vm.call(cb.String(), f.responseHeaders, fr, id, a, b)
	case stream.OnResponseBody:
		r, err = vm.call(cb.String(), f.responseBody, fr, id, a, b)
	case stream.OnResponseTrailers:
		r, err = vm.call(cb.String(), f.responseTrailers, fr, id, a)
	case stream.OnLog:
		r, err = vm.call(cb.String(), f.log, fr, id)
	case stream.OnDone:
		r, err = vm.call(cb.String(), f.done, fr, id)
	case stream.OnDelete:
		r, err = vm.call(cb.String(), f.delete, fr, id)
	default:
		return 0, false, fmt.Errorf("hostsim: %v is not a stream callback", cb)
	}
	return r, fr.forceStop, err
}

func (g *streamGuest) Failed() bool { return g.vm.failed != nil }

func (g *streamGuest) Gone() bool { vm := g.vm; return vm.failed != nil || vm.dead || g.gen != vm.gen }

// Ended removes the ended stream from its VM; the getters still see it for a while.
func (g *streamGuest) Ended() {
	s, vm := (*httpStream)(g), g.vm
	if vm.streams[s.ID] == s { // a reloaded instance may reuse the id
		delete(vm.streams, s.ID)
	}
	vm.remember(s)
}

// recentStreams is how many finished streams a VM keeps for the inspection getters.
const recentStreams = 64

func (vm *VM) remember(s *httpStream) {
	s.ex, s.try = nil, nil
	s.SetDriver(nil)
	if len(vm.recent) < recentStreams {
		vm.recent = append(vm.recent, s)
		return
	}
	vm.free = append(vm.free, vm.recent[vm.recentNext])
	vm.recent[vm.recentNext] = s
	vm.recentNext = (vm.recentNext + 1) % recentStreams
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

// beginStream applies the failure policy to a new stream on a failed VM.
func (vm *VM) beginStream(s *httpStream) error {
	if vm.failed == nil && !vm.dead {
		return nil
	}
	switch vm.host.cfg.failurePolicy {
	case FailOpen:
		s.Skip = true
	case FailReload:
		if err := vm.reload(); err != nil {
			vm.reloadFailures++
			s.Skip = false
			failStream(s)
			return err
		}
		vm.reloads++
		// The stream was allocated on the old instance; keep its id on the new one.
		vm.streams[s.ID] = s
		s.gen = vm.gen
		if vm.nextID <= s.ID {
			vm.nextID = s.ID + 1
		}
	default:
		failStream(s)
	}
	return nil
}

// failStream answers a stream that starts on a failed VM: the context Envoy creates for it
// has no VM (PluginConfig::createContext), so its first callback fails the stream
// (CHECK_FAIL_HTTP, Context::failStream): 503, details wasm_fail_stream.
func failStream(s *httpStream) {
	s.SetDetails(filtermanager.DetailsWasmFailStream)
	s.ReplaceResponse(filtermanager.FailStream())
}

// afterCallback runs what Envoy defers until the VM call returns (stream.Thread.Settle).
func (vm *VM) afterCallback() { vm.thread.Settle() }

// settle is afterCallback for state changes made outside a callback.
func (vm *VM) settle() { vm.thread.Settle() }

// ---------------------------------------------------------------------------------------
// Maps and buffers in their phase: what the env functions (hostsim/internal/hostfn) may
// see and change now.

// effectiveStream is the stream of the running callback's effective context (nil: root,
// or no callback).
func (vm *VM) effectiveStream() *stream.Stream {
	if fr := vm.frame; fr != nil && fr.stream != nil {
		return &fr.stream.Stream
	}
	return nil
}

// headerMap returns the map the guest may see now: a callout's answer in
// on_http_call_response (read-only), or the effective stream's (stream.Stream.HeaderMap).
func (vm *VM) headerMap(t abi.MapType, mutable bool) (*[][2]string, Status) {
	fr := vm.frame
	if fr == nil {
		return nil, abi.StatusBadArgument
	}
	switch t {
	case abi.MapHTTPCallResponseHeaders, abi.MapHTTPCallResponseTrailers:
		if fr.callout == nil || mutable {
			return nil, abi.StatusBadArgument
		}
		if t == abi.MapHTTPCallResponseHeaders {
			return &fr.callout.Headers, StatusOK
		}
		return &fr.callout.Trailers, StatusOK
	}
	if fr.stream == nil {
		return nil, abi.StatusBadArgument
	}
	m, st := fr.stream.HeaderMap(t, mutable)
	if st == StatusOK && mutable && t == abi.MapRequestHeaders && fr.stream.try == nil {
		// A request-header write clears the route cache (Context::onHeadersModified →
		// downstreamCallbacks()->clearRouteCache(); its body in context.h was not re-read
		// for this model). Counted when the map is granted, so a write that then fails on
		// guest memory counts too. An upstream filter's write clears nothing (its
		// callbacks have no downstream callbacks).
		fr.stream.RouteCacheClears++
	}
	return m, st
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
		if fr.stream == nil {
			return nil, false, false
		}
		b, ok := fr.stream.Body(t)
		return b, ok, ok
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
	return stream.ContinueStream(vm.effectiveStream(), t)
}

// closeStream records a deferred reset ("wasm_close_stream"); a no-op in a root context.
func (vm *VM) closeStream(t abi.StreamType) Status {
	return stream.CloseStream(vm.effectiveStream(), t)
}

// sendLocalResponse records a deferred local reply; without a stream it is a silent no-op
// (envoy#39797).
func (vm *VM) sendLocalResponse(lr *LocalResponse) {
	if stream.SendLocalResponse(vm.effectiveStream(), lr) {
		vm.frame.forceStop = true // cpp-host overrides the callback's result to stop
	}
}
