package hostsim

import "github.com/spillwayproxy/spillway/hostsim/internal/envoy/attributes"

// getProperty resolves a property path the way Envoy ≥ 1.33 does (attributes.Get), over a
// snapshot of the effective stream.
func (vm *VM) getProperty(path string) ([]byte, Status) {
	h := vm.host
	p := attributes.Plugin{Name: h.cfg.pluginName, RootID: h.cfg.rootID, VMID: h.cfg.vmID}
	var sp *attributes.Stream
	if fr := vm.frame; fr != nil && fr.stream != nil {
		s := fr.stream
		sp = &attributes.Stream{RequestHeaders: s.Req.Headers, RequestTrailers: s.Req.Trailers,
			ResponseHeaders: s.Resp.Headers, ResponseTrailers: s.Resp.Trailers, ResponseStarted: s.Resp.GotHeaders,
			Flags: s.Flags, Details: s.Details, HasDetails: s.HasDetails, FilterState: s.FilterState}
	}
	return attributes.Get(path, p, sp, h.property)
}

// setProperty sets filter state; a root context has no stream info (NotFound).
func (vm *VM) setProperty(path string, val []byte) Status {
	fr := vm.frame
	if fr == nil || fr.stream == nil {
		return StatusNotFound // no stream info
	}
	if fr.stream.FilterState == nil {
		fr.stream.FilterState = map[string][]byte{}
	}
	fr.stream.FilterState[path] = append([]byte(nil), val...)
	return StatusOK
}
