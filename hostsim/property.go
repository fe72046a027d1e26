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
			v, ok := headerValue(h, k)
			return []byte(v), ok
		}
		switch name {
		case "path":
			return get(":path")
		case "url_path":
			p, ok := headerValue(h, ":path")
			if i := strings.IndexByte(p, '?'); i >= 0 {
				p = p[:i]
			}
			return []byte(p), ok
		case "query":
			p, ok := headerValue(h, ":path")
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
			v, ok := headerValue(h, ":status")
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
	v, ok := headerValue(h, abi.LowerASCII(key))
	return []byte(v), ok
}
