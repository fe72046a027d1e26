package abi

import (
	"strings"

	"github.com/spillwayproxy/spillway/internal/pairs"
)

// Limits of cpp-host's pairs parser (include/proxy-wasm/limits.h): a larger buffer or more
// pairs silently parse as an empty map.
const (
	maxPairsBytes = 1 << 20
	maxPairsCount = 1024
)

// AppendPairs appends the proxy-wasm map serialization of pairs to dst (internal/pairs).
func AppendPairs(dst []byte, kv [][2]string) []byte { return pairs.Append(dst, kv) }

// EncodePairs returns the proxy-wasm map serialization of pairs.
func EncodePairs(kv [][2]string) []byte { return pairs.Append(nil, kv) }

// DecodePairs parses a proxy-wasm map serialization the way cpp-host does: an empty input,
// a single NUL, a malformed buffer, more than 1 MiB or more than 1024 pairs all give an
// empty map (ok reports whether the buffer was well formed and within the limits).
func DecodePairs(b []byte) (kv [][2]string, ok bool) {
	if len(b) == 0 || (len(b) == 1 && b[0] == 0) {
		return nil, true
	}
	if len(b) > maxPairsBytes {
		return nil, false
	}
	n, ok := pairs.Count(b)
	if !ok || n > maxPairsCount {
		return nil, false
	}
	kv, ok = pairs.Decode(make([][2]string, 0, n), b, copyString)
	if !ok {
		return nil, false
	}
	return kv, true
}

func copyString(b []byte) string { return string(b) }

// PairsByteSize is what proxy_get_header_map_size reports, Envoy's HeaderMap::byteSize:
// the sum of key and value lengths.
func PairsByteSize(pairs [][2]string) int {
	n := 0
	for _, kv := range pairs {
		n += len(kv[0]) + len(kv[1])
	}
	return n
}

// LowerASCII lower-cases a header key (Envoy's header maps keep keys in lower case)
// without allocating when it is already lower case.
func LowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// EqualLower reports whether key, lower-cased, equals the lower-case k.
func EqualLower(k string, key []byte) bool {
	if len(k) != len(key) {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if k[i] != c {
			return false
		}
	}
	return true
}
