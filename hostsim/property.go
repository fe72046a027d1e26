package hostsim

import "github.com/spillwayproxy/spillway/hostsim/internal/envoy/attributes"

// getProperty resolves a property path the way Envoy ≥ 1.33 does (attributes.Get), over a
// snapshot of the effective stream. An upstream filter's stream reads its own header maps
// but the downstream stream's stream info — response flags and details, filter state —
// because UpstreamFilterManager::streamInfo (source/common/router/upstream_request.cc)
// returns the router's callbacks()->streamInfo(); upstream.request_attempt_count is the
// attempt count the router set on it before the current try (Filter::doRetry).
func (vm *VM) getProperty(path string) ([]byte, Status) {
	h := vm.host
	p := attributes.Plugin{Name: h.cfg.pluginName, RootID: h.cfg.rootID, VMID: h.cfg.vmID}
	if r := vm.pluginRoot(vm.callerRoot()); r != nil {
		p.Name, p.RootID = r.spec.name, r.spec.rootID // a further plugin's own identity
	}
	var sp *attributes.Stream
	if fr := vm.frame; fr != nil && fr.stream != nil {
		s := fr.stream
		info := s.info()
		sp = &attributes.Stream{RequestHeaders: s.Req.Headers, RequestTrailers: s.Req.Trailers,
			ResponseHeaders: s.Resp.Headers, ResponseTrailers: s.Resp.Trailers, ResponseStarted: s.Resp.GotHeaders,
			Flags: info.Flags, Details: info.Details, HasDetails: info.HasDetails, FilterState: info.FilterState,
			AttemptCount: s.attemptCount()}
	}
	return attributes.Get(path, p, sp, h.property)
}

// info is the stream whose stream info s's properties read and write: its own, or for an
// upstream filter's stream the downstream stream's.
func (s *httpStream) info() *httpStream {
	if s.try != nil && s.ex != nil && s.ex.s != nil {
		return s.ex.s
	}
	return s
}

// attemptCount is StreamInfo::attemptCount for s: the try's number for an upstream filter's
// stream, the current try's for a downstream stream once the router has its request (0:
// none yet).
func (s *httpStream) attemptCount() uint32 {
	if s.try != nil {
		return s.try.n
	}
	if ex := s.ex; ex != nil && ex.routed && ex.upTry != nil {
		return ex.upTry.n
	}
	return 0
}

// setProperty sets filter state; a root context has no stream info (NotFound).
func (vm *VM) setProperty(path string, val []byte) Status {
	fr := vm.frame
	if fr == nil || fr.stream == nil {
		return StatusNotFound // no stream info
	}
	info := fr.stream.info()
	if info.FilterState == nil {
		info.FilterState = map[string][]byte{}
	}
	info.FilterState[path] = append([]byte(nil), val...)
	return StatusOK
}
