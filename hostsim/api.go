package hostsim

import (
	"errors"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// The proxytest-shaped stream API. Each call runs one filter callback the way Envoy's filter
// manager would (lazy context creation, pause rules, deferred continue/close/local reply),
// then drains the asynchronous events it caused. Errors are guest traps; the VM is then
// failed and the stream follows the failure policy.

// InitializeHttpContext allocates a stream context id. As in Envoy, proxy_on_context_create
// runs lazily with the request headers (proxytest creates it here).
func (vm *VM) InitializeHttpContext() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.streams == nil {
		return 0
	}
	return vm.newStream().ID
}

// withStream runs f on a stream with the VM locked, then drains events.
func (vm *VM) withStream(id uint32, f func(s *httpStream) (types.Action, error)) (types.Action, error) {
	vm.mu.Lock()
	s, err := vm.stream(id)
	var a types.Action
	if err == nil {
		a, err = f(s)
	}
	vm.mu.Unlock()
	return a, joinErr(err, vm.host.drain())
}

// CallOnRequestHeaders delivers request headers and returns the effective action
// (ActionPause when the callback paused or sent a local reply).
func (vm *VM) CallOnRequestHeaders(contextID uint32, headers [][2]string, endOfStream bool) (types.Action, error) {
	return vm.withStream(contextID, func(s *httpStream) (types.Action, error) {
		if err := vm.beginStream(s); err != nil {
			return types.ActionPause, err
		}
		if s.Final != nil && !s.Created {
			s.Req.GotHeaders = true
			return types.ActionPause, nil
		}
		return s.OnHeaders(&s.Req, headers, endOfStream)
	})
}

// CallOnRequestBody delivers a request body chunk. While the headers are paused the chunk
// is held back without a callback (ActionPause) and delivered on continue.
func (vm *VM) CallOnRequestBody(contextID uint32, body []byte, endOfStream bool) (types.Action, error) {
	return vm.withStream(contextID, func(s *httpStream) (types.Action, error) { return s.OnBody(&s.Req, body, endOfStream) })
}

// CallOnRequestTrailers delivers request trailers.
func (vm *VM) CallOnRequestTrailers(contextID uint32, trailers [][2]string) (types.Action, error) {
	return vm.withStream(contextID, func(s *httpStream) (types.Action, error) { return s.OnTrailers(&s.Req, trailers) })
}

// CallOnResponseHeaders delivers upstream response headers.
func (vm *VM) CallOnResponseHeaders(contextID uint32, headers [][2]string, endOfStream bool) (types.Action, error) {
	return vm.withStream(contextID, func(s *httpStream) (types.Action, error) {
		if s.Resp.Halted {
			return types.ActionPause, nil
		}
		// The router records that the response came from the upstream before encodeHeaders.
		s.SetDetails(DetailsViaUpstream)
		return s.OnHeaders(&s.Resp, headers, endOfStream)
	})
}

// CallOnResponseBody delivers an upstream response body chunk.
func (vm *VM) CallOnResponseBody(contextID uint32, body []byte, endOfStream bool) (types.Action, error) {
	return vm.withStream(contextID, func(s *httpStream) (types.Action, error) { return s.OnBody(&s.Resp, body, endOfStream) })
}

// CallOnResponseTrailers delivers upstream response trailers.
func (vm *VM) CallOnResponseTrailers(contextID uint32, trailers [][2]string) (types.Action, error) {
	return vm.withStream(contextID, func(s *httpStream) (types.Action, error) { return s.OnTrailers(&s.Resp, trailers) })
}

// CompleteHttpContext ends the stream: proxy_on_log, proxy_on_done, proxy_on_delete.
func (vm *VM) CompleteHttpContext(contextID uint32) error {
	_, err := vm.withStream(contextID, func(s *httpStream) (types.Action, error) { return 0, s.Complete() })
	return err
}

// ResetStream ends the stream as Envoy does when the downstream resets it: proxy_on_log,
// proxy_on_done, proxy_on_delete (none if the request headers never arrived: Envoy had no
// filter chain yet), pending continue and local replies dropped, callouts left to complete
// on the root context. A stream driven by an Exchange ends like Exchange.Reset. details
// (ResetDownstreamRemoteDisconnect if empty) is what StreamState reports as Reset; the
// disconnect also sets flag DC and becomes response.code_details, as in Envoy (any other
// details string is recorded without a flag). Later calls on the id fail with ErrNoStream,
// as does resetting a stream that already ended.
func (vm *VM) ResetStream(contextID uint32, details string) error {
	if details == "" {
		details = ResetDownstreamRemoteDisconnect
	}
	r := filtermanager.DownstreamResetFor(details)
	_, err := vm.withStream(contextID, func(s *httpStream) (types.Action, error) { return 0, s.ResetDownstream(r) })
	return err
}

// LiveStreams returns how many streams the VM holds: allocated and not yet ended
// (completed or reset), the upstream filter's streams of tries in flight included
// (WithUpstreamFilter). A server that ends every stream it starts sees it fall back to 0.
func (vm *VM) LiveStreams() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return len(vm.streams)
}

func (vm *VM) streamView(id uint32, f func(s *httpStream)) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if s := vm.streams[id]; s != nil {
		f(s)
		return
	}
	for _, s := range vm.recent {
		if s.ID == id {
			f(s)
			return
		}
	}
}

// GetCurrentHttpStreamAction returns the action of the stream's last callback.
func (vm *VM) GetCurrentHttpStreamAction(contextID uint32) (a types.Action) {
	vm.streamView(contextID, func(s *httpStream) { a = s.Action })
	return a
}

// GetCurrentRequestHeaders returns the request headers as the plugin left them.
func (vm *VM) GetCurrentRequestHeaders(contextID uint32) (h [][2]string) {
	vm.streamView(contextID, func(s *httpStream) { h = abi.ClonePairs(s.Req.Headers) })
	return h
}

// GetCurrentResponseHeaders returns the response headers as the plugin left them.
func (vm *VM) GetCurrentResponseHeaders(contextID uint32) (h [][2]string) {
	vm.streamView(contextID, func(s *httpStream) { h = abi.ClonePairs(s.Resp.Headers) })
	return h
}

// GetCurrentRequestTrailers returns the request trailers as the plugin left them.
func (vm *VM) GetCurrentRequestTrailers(contextID uint32) (h [][2]string) {
	vm.streamView(contextID, func(s *httpStream) { h = abi.ClonePairs(s.Req.Trailers) })
	return h
}

// GetCurrentResponseTrailers returns the response trailers as the plugin left them.
func (vm *VM) GetCurrentResponseTrailers(contextID uint32) (h [][2]string) {
	vm.streamView(contextID, func(s *httpStream) { h = abi.ClonePairs(s.Resp.Trailers) })
	return h
}

// GetCurrentRequestBody returns the request body the plugin last saw (the whole buffered
// body while it buffers).
func (vm *VM) GetCurrentRequestBody(contextID uint32) (b []byte) {
	vm.streamView(contextID, func(s *httpStream) { b = append([]byte(nil), s.Req.Body...) })
	return b
}

// GetCurrentResponseBody returns the response body the plugin last saw.
func (vm *VM) GetCurrentResponseBody(contextID uint32) (b []byte) {
	vm.streamView(contextID, func(s *httpStream) { b = append([]byte(nil), s.Resp.Body...) })
	return b
}

// GetSentLocalResponse returns the local reply the plugin sent on the stream (nil if none).
// A reply from the failure policy (503 wasm_fail_stream) is reported here too.
func (vm *VM) GetSentLocalResponse(contextID uint32) (lr *LocalResponse) {
	vm.streamView(contextID, func(s *httpStream) {
		lr = s.Local
		if lr == nil {
			lr = s.Final
		}
	})
	return lr
}

// StreamState is a snapshot of where a stream is, for assertions on pause semantics. For a
// StartStream exchange the forwarded bodies hold only what has not been handed on yet (the
// exchange passes each part on and forgets it).
type StreamState struct {
	Created                                     bool   // proxy_on_context_create ran
	RequestHeadersForwarded, RequestComplete    bool   // what passed the filter upstream
	ResponseHeadersForwarded, ResponseComplete  bool   // what passed the filter downstream
	ForwardedRequestBody, ForwardedResponseBody []byte // bodies that passed the filter
	HeldRequestBody, HeldResponseBody           int    // bytes held back while headers are paused
	Reset                                       string // reset details ("wasm_close_stream", ...)
	Replaced                                    *LocalResponse
	FilterSkipped                               bool // FAIL_OPEN bypass
}

// StreamState returns a snapshot of the stream (false if it does not exist).
func (vm *VM) StreamState(contextID uint32) (st StreamState, ok bool) {
	vm.streamView(contextID, func(s *httpStream) {
		ok = true
		st = StreamState{Created: s.Created, RequestHeadersForwarded: s.Req.ForwardedHeaders, RequestComplete: s.Req.Complete,
			ResponseHeadersForwarded: s.Resp.ForwardedHeaders, ResponseComplete: s.Resp.Complete,
			ForwardedRequestBody: append([]byte(nil), s.Req.ForwardedBody...), ForwardedResponseBody: append([]byte(nil), s.Resp.ForwardedBody...),
			HeldRequestBody: len(s.Req.HeldBody), HeldResponseBody: len(s.Resp.HeldBody),
			Reset: s.ResetDetails, Replaced: s.Final, FilterSkipped: s.Skip}
	})
	return st, ok
}

// GetFilterState returns what the plugin stored with proxy_set_property on the stream.
func (vm *VM) GetFilterState(contextID uint32, path []string) (v []byte, ok bool) {
	vm.streamView(contextID, func(s *httpStream) { v, ok = s.FilterState[joinPath(path)] })
	return v, ok
}

// ---------------------------------------------------------------------------------------
// Host conveniences: the proxytest API on worker 0.

var errNotStarted = errors.New("hostsim: plugin not started (call StartPlugin)")

func (h *Host) w0() *VM { return h.Worker(0) }

// InitializeHttpContext allocates a stream on worker 0.
func (h *Host) InitializeHttpContext() uint32 {
	if w := h.w0(); w != nil {
		return w.InitializeHttpContext()
	}
	return 0
}

// CallOnRequestHeaders runs on worker 0 (see VM.CallOnRequestHeaders).
func (h *Host) CallOnRequestHeaders(id uint32, headers [][2]string, eos bool) (types.Action, error) {
	if w := h.w0(); w != nil {
		return w.CallOnRequestHeaders(id, headers, eos)
	}
	return 0, errNotStarted
}

// CallOnRequestBody runs on worker 0.
func (h *Host) CallOnRequestBody(id uint32, body []byte, eos bool) (types.Action, error) {
	if w := h.w0(); w != nil {
		return w.CallOnRequestBody(id, body, eos)
	}
	return 0, errNotStarted
}

// CallOnRequestTrailers runs on worker 0.
func (h *Host) CallOnRequestTrailers(id uint32, trailers [][2]string) (types.Action, error) {
	if w := h.w0(); w != nil {
		return w.CallOnRequestTrailers(id, trailers)
	}
	return 0, errNotStarted
}

// CallOnResponseHeaders runs on worker 0.
func (h *Host) CallOnResponseHeaders(id uint32, headers [][2]string, eos bool) (types.Action, error) {
	if w := h.w0(); w != nil {
		return w.CallOnResponseHeaders(id, headers, eos)
	}
	return 0, errNotStarted
}

// CallOnResponseBody runs on worker 0.
func (h *Host) CallOnResponseBody(id uint32, body []byte, eos bool) (types.Action, error) {
	if w := h.w0(); w != nil {
		return w.CallOnResponseBody(id, body, eos)
	}
	return 0, errNotStarted
}

// CallOnResponseTrailers runs on worker 0.
func (h *Host) CallOnResponseTrailers(id uint32, trailers [][2]string) (types.Action, error) {
	if w := h.w0(); w != nil {
		return w.CallOnResponseTrailers(id, trailers)
	}
	return 0, errNotStarted
}

// CompleteHttpContext runs on worker 0.
func (h *Host) CompleteHttpContext(id uint32) error {
	if w := h.w0(); w != nil {
		return w.CompleteHttpContext(id)
	}
	return errNotStarted
}

// ResetStream resets a stream on worker 0 (see VM.ResetStream).
func (h *Host) ResetStream(id uint32, details string) error {
	if w := h.w0(); w != nil {
		return w.ResetStream(id, details)
	}
	return errNotStarted
}

// LiveStreams returns the number of live streams over all VMs (see VM.LiveStreams).
func (h *Host) LiveStreams() int {
	n := 0
	for _, vm := range h.VMs() {
		n += vm.LiveStreams()
	}
	return n
}

// GetSentLocalResponse reads worker 0's stream.
func (h *Host) GetSentLocalResponse(id uint32) *LocalResponse {
	if w := h.w0(); w != nil {
		return w.GetSentLocalResponse(id)
	}
	return nil
}

// GetCurrentRequestHeaders reads worker 0's stream.
func (h *Host) GetCurrentRequestHeaders(id uint32) [][2]string {
	if w := h.w0(); w != nil {
		return w.GetCurrentRequestHeaders(id)
	}
	return nil
}

// GetCurrentResponseHeaders reads worker 0's stream.
func (h *Host) GetCurrentResponseHeaders(id uint32) [][2]string {
	if w := h.w0(); w != nil {
		return w.GetCurrentResponseHeaders(id)
	}
	return nil
}

// GetCurrentRequestBody reads worker 0's stream.
func (h *Host) GetCurrentRequestBody(id uint32) []byte {
	if w := h.w0(); w != nil {
		return w.GetCurrentRequestBody(id)
	}
	return nil
}

// GetCurrentResponseBody reads worker 0's stream.
func (h *Host) GetCurrentResponseBody(id uint32) []byte {
	if w := h.w0(); w != nil {
		return w.GetCurrentResponseBody(id)
	}
	return nil
}

// GetCurrentHttpStreamAction reads worker 0's stream.
func (h *Host) GetCurrentHttpStreamAction(id uint32) types.Action {
	if w := h.w0(); w != nil {
		return w.GetCurrentHttpStreamAction(id)
	}
	return 0
}

// GetCalloutAttributesFromContext reads worker 0's stream.
func (h *Host) GetCalloutAttributesFromContext(id uint32) []HttpCalloutAttribute {
	if w := h.w0(); w != nil {
		return w.GetCalloutAttributesFromContext(id)
	}
	return nil
}

// GetTickPeriod returns worker 0's tick period in milliseconds.
func (h *Host) GetTickPeriod() uint32 {
	if w := h.w0(); w != nil {
		return w.GetTickPeriod()
	}
	return 0
}

// Tick runs proxy_on_tick on worker 0 now (proxytest). Advance fires real ticks on every VM.
func (h *Host) Tick() error {
	if w := h.w0(); w != nil {
		return w.Tick()
	}
	return errNotStarted
}
