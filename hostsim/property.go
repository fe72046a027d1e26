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
		sp = &attributes.Stream{RequestHeaders: s.req.Headers, RequestTrailers: s.req.Trailers,
			ResponseHeaders: s.resp.Headers, ResponseTrailers: s.resp.Trailers, ResponseStarted: s.resp.GotHeaders,
			Flags: s.flags, Details: s.details, HasDetails: s.hasDetails, FilterState: s.filterState}
	}
	return attributes.Get(path, p, sp, h.property)
}

// setProperty sets filter state; a root context has no stream info (NotFound).
func (vm *VM) setProperty(path string, val []byte) Status {
	fr := vm.frame
	if fr == nil || fr.stream == nil {
		return StatusNotFound // no stream info
	}
	if fr.stream.filterState == nil {
		fr.stream.filterState = map[string][]byte{}
	}
	fr.stream.filterState[path] = append([]byte(nil), val...)
	return StatusOK
}
