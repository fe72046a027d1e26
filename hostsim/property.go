package hostsim

import (
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// streamProperty computes the request.* and response.* attributes Envoy derives from the
// stream (docs/root/intro/arch_overview/advanced/attributes.rst). Paths arrive with their
// segments joined by NUL. response.flags is the legacy bitmask as an 8-byte little-endian
// integer and response.code_details the details string (see ResponseFlags and the Details*
// constants for when hostsim sets which, modelled on Envoy's router and filter manager).
func (s *httpStream) streamProperty(top, rest string) ([]byte, bool) {
	name, sub, _ := abi.CutPath(rest)
	switch top {
	case "request":
		h := s.req.headers
		get := func(k string) ([]byte, bool) {
			v, ok := abi.HeaderValue(h, k)
			return []byte(v), ok
		}
		switch name {
		case "path":
			return get(":path")
		case "url_path":
			p, ok := abi.HeaderValue(h, ":path")
			if i := strings.IndexByte(p, '?'); i >= 0 {
				p = p[:i]
			}
			return []byte(p), ok
		case "query":
			p, ok := abi.HeaderValue(h, ":path")
			if i := strings.IndexByte(p, '?'); i >= 0 {
				return []byte(p[i+1:]), ok
			}
			return []byte{}, ok
		case "host":
			return get(":authority")
		case "scheme":
			return get(":scheme")
		case "method":
			return get(":method")
		case "id":
			return get("x-request-id")
		case "referer":
			return get("referer")
		case "useragent":
			return get("user-agent")
		case "protocol":
			return []byte("HTTP/1.1"), true
		case "headers":
			return mapProperty(h, sub)
		case "trailers":
			return mapProperty(s.req.trailers, sub)
		}
	case "response":
		// StreamInfo-backed attributes exist whatever the phase (ResponseLookupValues in
		// source/extensions/filters/common/expr/context.cc): flags is always an int
		// (legacyResponseFlags, 0 when none), code_details only once something set it.
		switch name {
		case "flags":
			return abi.PropertyUint64(uint64(s.flags)), true
		case "code_details":
			if !s.hasDetails {
				return nil, false
			}
			return []byte(s.details), true
		}
		if !s.resp.gotHeaders {
			return nil, false
		}
		h := s.resp.headers
		switch name {
		case "code":
			v, ok := abi.HeaderValue(h, ":status")
			code, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil {
				return nil, false
			}
			return abi.PropertyUint64(code), true
		case "headers":
			return mapProperty(h, sub)
		case "trailers":
			return mapProperty(s.resp.trailers, sub)
		}
	}
	return nil, false
}

// mapProperty serializes a header map, or one header's value when a key follows.
func mapProperty(h [][2]string, key string) ([]byte, bool) {
	if key == "" {
		return abi.EncodePairs(h), true
	}
	v, ok := abi.HeaderValue(h, abi.LowerASCII(key))
	return []byte(v), ok
}

// getProperty resolves a property path the way Envoy ≥ 1.33 does.
func (vm *VM) getProperty(path string) ([]byte, Status) {
	h := vm.host
	var s *httpStream
	if fr := vm.frame; fr != nil {
		s = fr.stream
	}
	top, rest, _ := abi.CutPath(path)
	switch top {
	case "plugin_name":
		return []byte(h.cfg.pluginName), StatusOK
	case "plugin_root_id":
		return []byte(h.cfg.rootID), StatusOK
	case "plugin_vm_id":
		return []byte(h.cfg.vmID), StatusOK
	case "node", "cluster_name", "cluster_metadata", "route_name", "route_metadata", "listener_direction",
		"listener_metadata", "upstream_host_metadata":
		// Removed from get_property in Envoy 1.33 (use xds.*), unless set as filter state.
		if s != nil {
			if v, ok := s.filterState[path]; ok {
				return v, StatusOK
			}
		}
		return nil, StatusNotFound
	case "request", "response", "connection", "upstream", "source", "destination", "filter_state", "upstream_filter_state":
		if s == nil {
			return nil, StatusNotFound // no stream info in a root context
		}
		if v, ok := s.streamProperty(top, rest); ok {
			return v, StatusOK
		}
		if v, ok := h.property(path); ok {
			return v, StatusOK
		}
		return nil, StatusNotFound
	case "xds", "metadata":
		if v, ok := h.property(path); ok {
			return v, StatusOK
		}
		return nil, StatusNotFound
	}
	if s != nil {
		if v, ok := s.filterState[path]; ok {
			return v, StatusOK
		}
	}
	if v, ok := h.property(path); ok {
		return v, StatusOK
	}
	return nil, StatusNotFound
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
