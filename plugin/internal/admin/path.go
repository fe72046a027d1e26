package admin

import "bytes"

// The admin check reads the path as an upstream might. A proxy may forward a path that
// spells the admin prefix otherwise — /SPILLWAY/api/, /spillway%2Fapi/, //spillway/api/,
// /x/../spillway/api/ — and the server behind it may decode, merge, resolve or case-fold it
// into the admin path, carrying the admin token there. Envoy can normalise the path first
// (the connection manager's normalize_path, merge_slashes and
// path_with_escaped_slashes_action: source/common/http/path_utility.cc,
// PathUtil::canonicalPath), but a mesh may not (Istio's is meshConfig.pathNormalization,
// which a WasmPlugin cannot set), so the filter canonicalises for its check itself and
// answers a lookalike 404 rather than forwarding it.

// CanonicalPath returns the canonical form of a request path for the admin check, written
// into dst's memory when it has room (else into a new slice):
//
//   - only the part before the first '?' or '#' counts (the query and a fragment are
//     ignored);
//   - every %XX escape is decoded once, %2F and %5C included (a decoded '?', '#' or '%' is
//     data); a '%' not followed by two hex digits stays as it is;
//   - '\' is '/', runs of '/' are one, "." segments are dropped and ".." segments remove the
//     segment before them (never above the root), whether spelled plainly or escaped
//     (%2e%2e), as RFC 3986 §5.2.4 resolves them;
//   - letters are case-folded as strings.EqualFold folds them onto ASCII: A–Z to a–z, and
//     the two non-ASCII letters whose fold is an ASCII one, U+017F (ſ, to s) and U+212A
//     (the Kelvin sign, to k), so a server that compares paths by Unicode case-folding
//     finds no admin path the check does not; every other byte is kept as it is.
//
// The result starts with '/' and keeps a trailing '/' (as RFC 3986 does: "/a/b/.." is
// "/a/"). It is at most one byte longer than path (each byte read writes at most one); the
// work is one pass over path, a table lookup per byte, without recursion.
func CanonicalPath(dst []byte, path string) []byte {
	n := len(path) + 1
	if cap(dst) < n {
		dst = make([]byte, 0, n)
	}
	out := dst[:n]
	out[0] = '/'
	w, seg := 1, 1 // out[:w] is written; the current segment starts at seg
	for i := 0; i < len(path); i++ {
		c := path[i]
		class := rawClass[c]
		if class == classPlain { // most bytes of most paths
			out[w] = c
			w++
			continue
		}
		switch class {
		case classEnd:
			return out[:resolveSegment(out, seg, w, false)]
		case classEscape:
			class = classPlain // a '%' that starts no escape
			if i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
				c = unhex(path[i+1])<<4 | unhex(path[i+2])
				class = decodedClass[c]
				i += 2
			}
		}
		switch class {
		case classPlain:
			out[w] = c
			w++
		case classUpper:
			out[w] = c + ('a' - 'A')
			w++
		case classFold:
			switch {
			case c == 0xbf && w-seg >= 1 && out[w-1] == 0xc5: // U+017F ſ folds to s
				out[w-1] = 's'
			case c == 0xaa && w-seg >= 2 && out[w-2] == 0xe2 && out[w-1] == 0x84: // U+212A K folds to k
				out[w-2] = 'k'
				w--
			default:
				out[w] = c
				w++
			}
		case classSep:
			w = resolveSegment(out, seg, w, true)
			seg = w
		}
	}
	return out[:resolveSegment(out, seg, w, false)]
}

// resolveSegment ends the segment out[seg:w] at a separator (more) or at the path's end and
// returns where writing goes on: an empty segment (a run of '/') adds nothing, "." is
// dropped, ".." drops itself and the segment before it (keeping that one's leading '/'),
// and any other segment is kept, with a '/' after it when more follows.
func resolveSegment(out []byte, seg, w int, more bool) int {
	switch n := w - seg; {
	case n == 0:
		return w
	case n == 1 && out[seg] == '.':
		return seg
	case n == 2 && out[seg] == '.' && out[seg+1] == '.':
		if seg > 1 {
			return bytes.LastIndexByte(out[:seg-1], '/') + 1
		}
		return seg
	}
	if more {
		out[w] = '/'
		w++
	}
	return w
}

// Byte classes of CanonicalPath: how a byte of the path, as sent (rawClass) or decoded from
// an escape (decodedClass), is handled.
const (
	classPlain  uint8 = iota // kept as it is
	classUpper               // A–Z: folded to a–z
	classFold                // 0xBF, 0xAA: the last byte of ſ or K, folded with the bytes before it
	classSep                 // '/' or '\': ends a segment
	classEscape              // '%' (raw only): may start an escape
	classEnd                 // '?' or '#' (raw only): the path ends
)

var rawClass, decodedClass = func() (raw, decoded [256]uint8) {
	for c := 'A'; c <= 'Z'; c++ {
		raw[c], decoded[c] = classUpper, classUpper
	}
	raw[0xbf], decoded[0xbf], raw[0xaa], decoded[0xaa] = classFold, classFold, classFold, classFold
	raw['/'], decoded['/'], raw['\\'], decoded['\\'] = classSep, classSep, classSep, classSep
	raw['%'], raw['?'], raw['#'] = classEscape, classEnd, classEnd
	return raw, decoded
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// PathKind is what the admin check makes of a request path.
type PathKind uint8

const (
	// PathOther is not the admin API's: the request goes on as any other.
	PathOther PathKind = iota
	// PathAdmin is under the admin prefix byte for byte (or is the prefix without its
	// trailing '/'): the admin API answers it (Matches).
	PathAdmin
	// PathLookalike is not PathAdmin, but its canonical form (CanonicalPath) is under the
	// canonical prefix: answered 404, never forwarded.
	PathLookalike
)

// Classify tells the admin API's paths from their lookalikes and every other path. scratch
// is a buffer for the canonical form, returned (possibly grown) for the next call. For a
// nil Server (the API off) every path is PathOther.
func (s *Server) Classify(path string, scratch []byte) (PathKind, []byte) {
	if s == nil {
		return PathOther, scratch
	}
	if s.Matches(path) {
		return PathAdmin, scratch
	}
	c := CanonicalPath(scratch, path)
	p := s.canonPrefix // ends with '/'
	if len(c) >= len(p)-1 && string(c[:len(p)-1]) == p[:len(p)-1] && (len(c) == len(p)-1 || c[len(p)-1] == '/') {
		return PathLookalike, c
	}
	return PathOther, c
}
