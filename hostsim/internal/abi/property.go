package abi

import (
	"encoding/binary"
	"strings"
)

// PropertyUint64 encodes an integer property the way Envoy serializes it (8 bytes, little
// endian).
func PropertyUint64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// PropertyPath is the serialized form of a property path (proxy_get_property): the
// segments joined by NUL.
func PropertyPath(segments []string) string { return strings.Join(segments, "\x00") }

// CutPath splits a serialized property path at its first NUL.
func CutPath(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
