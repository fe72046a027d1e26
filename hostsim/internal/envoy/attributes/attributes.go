// Package attributes is what proxy_get_property answers in Envoy ≥ 1.33 (Context::getProperty
// in source/extensions/common/wasm/context.cc): the plugin_* names, the request.* and
// response.* attributes Envoy derives from the stream (docs/root/intro/arch_overview/
// advanced/attributes.rst; ResponseLookupValues in source/extensions/filters/common/expr/
// context.cc), filter state, and the host's configured properties. It reads a snapshot of
// the stream and knows no VM.
package attributes

import (
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// Plugin is the plugin's identity, the plugin_* attributes.
type Plugin struct {
	Name, RootID, VMID string
}

// Stream is what the attributes read of a stream: its header maps, whether the response
// headers arrived, its stream info, and the filter state the plugin set.
type Stream struct {
	RequestHeaders, RequestTrailers   [][2]string
	ResponseHeaders, ResponseTrailers [][2]string
	ResponseStarted                   bool // the response headers arrived
	Flags                             streaminfo.ResponseFlags
	Details                           string
	HasDetails                        bool // something set the details
	FilterState                       map[string][]byte
	// AttemptCount is StreamInfo::attemptCount, set by the router before each try
	// (Filter::decodeHeaders, doRetry): upstream.request_attempt_count; 0: not set yet.
	AttemptCount uint32
}

// Get resolves a property path (segments joined by NUL) the way Envoy ≥ 1.33 does. s is nil
// in a root context, which has no stream info; host looks up the host's configured
// properties (xds.*, metadata, ...). A path nothing answers is NotFound.
//
// One trailing NUL ends the path without adding a segment: Context::getProperty splits the
// path on NUL and stops once the next segment would start at the path's end, so the C++
// SDK's form, which terminates every segment ("xds\0node\0metadata\0"), reads as the Go
// SDK's ("xds\0node\0metadata"). A second NUL makes an empty segment, which names nothing.
func Get(path string, p Plugin, s *Stream, host func(string) ([]byte, bool)) ([]byte, abi.Status) {
	path = strings.TrimSuffix(path, "\x00")
	top, rest, _ := abi.CutPath(path)
	switch top {
	case "plugin_name":
		return []byte(p.Name), abi.StatusOK
	case "plugin_root_id":
		return []byte(p.RootID), abi.StatusOK
	case "plugin_vm_id":
		return []byte(p.VMID), abi.StatusOK
	case "node", "cluster_name", "cluster_metadata", "route_name", "route_metadata", "listener_direction",
		"listener_metadata", "upstream_host_metadata":
		// Removed from get_property in Envoy 1.33 (use xds.*), unless set as filter state.
		if s != nil {
			if v, ok := s.FilterState[path]; ok {
				return v, abi.StatusOK
			}
		}
		return nil, abi.StatusNotFound
	case "request", "response", "connection", "upstream", "source", "destination", "filter_state", "upstream_filter_state":
		if s == nil {
			return nil, abi.StatusNotFound // no stream info in a root context
		}
		if top == "upstream" && rest == "request_attempt_count" && s.AttemptCount > 0 {
			// CEL's upstream.request_attempt_count (expr/context.h UpstreamRequestAttemptCount),
			// an unsigned integer: 8 bytes little-endian as the other integer attributes.
			return abi.PropertyUint64(uint64(s.AttemptCount)), abi.StatusOK
		}
		if v, ok := s.attribute(top, rest); ok {
			return v, abi.StatusOK
		}
		if v, ok := host(path); ok {
			return v, abi.StatusOK
		}
		return nil, abi.StatusNotFound
	case "xds", "metadata":
		if v, ok := host(path); ok {
			return v, abi.StatusOK
		}
		return nil, abi.StatusNotFound
	}
	if s != nil {
		if v, ok := s.FilterState[path]; ok {
			return v, abi.StatusOK
		}
	}
	if v, ok := host(path); ok {
		return v, abi.StatusOK
	}
	return nil, abi.StatusNotFound
}

// attribute computes the request.* and response.* attributes Envoy derives from the
// stream. response.flags is the legacy bitmask as an 8-byte little-endian integer and
// response.code_details the details string.
func (s *Stream) attribute(top, rest string) ([]byte, bool) {
	name, sub, _ := abi.CutPath(rest)
	switch top {
	case "request":
		h := s.RequestHeaders
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
			return mapAttribute(h, sub)
		case "trailers":
			return mapAttribute(s.RequestTrailers, sub)
		}
	case "response":
		// StreamInfo-backed attributes exist whatever the phase (ResponseLookupValues):
		// flags is always an int (legacyResponseFlags, 0 when none), code_details only once
		// something set it.
		switch name {
		case "flags":
			return abi.PropertyUint64(uint64(s.Flags)), true
		case "code_details":
			if !s.HasDetails {
				return nil, false
			}
			return []byte(s.Details), true
		}
		if !s.ResponseStarted {
			return nil, false
		}
		h := s.ResponseHeaders
		switch name {
		case "code":
			v, ok := abi.HeaderValue(h, ":status")
			code, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil {
				return nil, false
			}
			return abi.PropertyUint64(code), true
		case "headers":
			return mapAttribute(h, sub)
		case "trailers":
			return mapAttribute(s.ResponseTrailers, sub)
		}
	}
	return nil, false
}

// mapAttribute serializes a header map, or one header's value when a key follows.
func mapAttribute(h [][2]string, key string) ([]byte, bool) {
	if key == "" {
		return abi.EncodePairs(h), true
	}
	v, ok := abi.HeaderValue(h, abi.LowerASCII(key))
	return []byte(v), ok
}
