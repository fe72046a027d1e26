// Package pairs is the proxy-wasm map serialization (the spec's "Map serialization"), one
// implementation for both sides of the ABI: the filter's host calls (plugin/hostabi, in the
// guest, where it must not allocate) and hostsim's host functions. It imports nothing of
// the module and nothing wasm-specific.
package pairs

import "encoding/binary"

// Append appends the serialization of kv to dst: a u32 count, then (u32 key length, u32
// value length) per pair, then each key and value followed by a NUL, all little endian.
func Append(dst []byte, kv [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv)))
	for _, p := range kv {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p[1])))
	}
	for _, p := range kv {
		dst = append(dst, p[0]...)
		dst = append(dst, 0)
		dst = append(dst, p[1]...)
		dst = append(dst, 0)
	}
	return dst
}

// Count reads the pair count of a serialization and checks that the count's size table
// fits in b; ok is false for a buffer too short for either. It does not read the data.
func Count(b []byte) (n int, ok bool) {
	if len(b) < 4 {
		return 0, false
	}
	c := uint64(binary.LittleEndian.Uint32(b))
	if c > uint64(len(b)-4)/8 {
		return 0, false
	}
	return int(c), true
}

// Decode appends the pairs of the serialization b to dst, each key and value made a string
// by str (a copy, or an alias of b for a caller that owns b and reuses it). An empty b and a
// single NUL, which hosts send for an empty map, are an empty map. A malformed b — a count
// or size past its end, a key or value not followed by its NUL — appends nothing and
// reports false. Decode allocates only when dst must grow.
func Decode(dst [][2]string, b []byte, str func([]byte) string) ([][2]string, bool) {
	if len(b) == 0 || (len(b) == 1 && b[0] == 0) {
		return dst, true
	}
	n, ok := Count(b)
	if !ok {
		return dst, false
	}
	sizes, data := b[4:4+8*n], b[4+8*n:]
	// The pairs are written in place after growing dst once: one slice header update per
	// map instead of one per pair (each costs a Go wasm module a write barrier check).
	orig, start := dst, len(dst)
	if cap(dst)-start < n {
		grown := make([][2]string, start, start+n)
		copy(grown, dst)
		dst = grown
	}
	kv := dst[start : start+n]
	for i := range kv {
		kl := uint64(binary.LittleEndian.Uint32(sizes[8*i:]))
		vl := uint64(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		if uint64(len(data)) < kl+1+vl+1 || data[kl] != 0 || data[kl+1+vl] != 0 {
			clear(kv[:i])
			return orig, false
		}
		kv[i] = [2]string{str(data[:kl]), str(data[kl+1 : kl+1+vl])}
		data = data[kl+1+vl+1:]
	}
	return dst[:start+n], true
}
