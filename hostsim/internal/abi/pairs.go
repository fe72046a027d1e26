package abi

import (
	"encoding/binary"
	"strings"
)

// Limits of cpp-host's pairs parser (include/proxy-wasm/limits.h): a larger buffer or more
// pairs silently parse as an empty map.
const (
	maxPairsBytes = 1 << 20
	maxPairsCount = 1024
)

// AppendPairs appends the proxy-wasm map serialization of pairs to dst: a u32 count, then
// (u32 key length, u32 value length) per pair, then each key and value followed by a NUL.
func AppendPairs(dst []byte, pairs [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(pairs)))
	for _, kv := range pairs {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[1])))
	}
	for _, kv := range pairs {
		dst = append(dst, kv[0]...)
		dst = append(dst, 0)
		dst = append(dst, kv[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// EncodePairs returns the proxy-wasm map serialization of pairs.
func EncodePairs(pairs [][2]string) []byte { return AppendPairs(nil, pairs) }

// DecodePairs parses a proxy-wasm map serialization the way cpp-host does: an empty input,
// a single NUL, a malformed buffer, more than 1 MiB or more than 1024 pairs all give an
// empty map (ok reports whether the buffer was well formed and within the limits).
func DecodePairs(b []byte) (pairs [][2]string, ok bool) {
	if len(b) == 0 || (len(b) == 1 && b[0] == 0) {
		return nil, true
	}
	if len(b) > maxPairsBytes || len(b) < 4 {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	if n > maxPairsCount || uint64(len(b)) < 4+8*uint64(n) {
		return nil, false
	}
	sizes := b[4 : 4+8*n]
	data := b[4+8*n:]
	pairs = make([][2]string, 0, n)
	for i := uint32(0); i < n; i++ {
		kl := uint64(binary.LittleEndian.Uint32(sizes[8*i:]))
		vl := uint64(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		if uint64(len(data)) < kl+1+vl+1 || data[kl] != 0 || data[kl+1+vl] != 0 {
			return nil, false
		}
		pairs = append(pairs, [2]string{string(data[:kl]), string(data[kl+1 : kl+1+vl])})
		data = data[kl+1+vl+1:]
	}
	return pairs, true
}

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
