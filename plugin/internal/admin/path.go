package admin

import (
	"bytes"
	"strings"
)

// The admin check reads the path as an upstream might. A proxy may forward a path that
// spells the admin prefix otherwise — /SPILLWAY/api/, /spillway%2Fapi/, //spillway/api/,
// /x/../spillway/api/ — and the server behind it may decode, merge, resolve or case-fold it
// into the admin path, carrying the admin token there. Envoy can normalise the path first
// (the connection manager's normalize_path, merge_slashes and
// path_with_escaped_slashes_action: source/common/http/path_utility.cc,
// PathUtil::canonicalPath), but a mesh may not (Istio's is meshConfig.pathNormalization,
// which a WasmPlugin cannot set), so the filter canonicalises for its check itself and
// answers a lookalike 404 rather than forwarding it.

// CanonicalPath appends to dst the canonical form of a request path for the admin check and
// returns the extended slice:
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
// "/a/"). It is at most one byte longer than path; the work is one pass over path, without
// recursion or allocation when dst has room.
func CanonicalPath(dst []byte, path string) []byte {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	out := append(dst[:0], '/')
	seg := len(out) // where the current segment starts in out
	for i := 0; i <= len(path); i++ {
		var c byte
		sep := i == len(path)
		if !sep {
			c = path[i]
			if c == '%' && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
				c = unhex(path[i+1])<<4 | unhex(path[i+2])
				i += 2
			}
			sep = c == '/' || c == '\\'
		}
		if !sep {
			switch n := len(out) - seg; {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case c == 0xbf && n >= 1 && out[len(out)-1] == 0xc5: // U+017F ſ folds to s
				out, c = out[:len(out)-1], 's'
			case c == 0xaa && n >= 2 && out[len(out)-2] == 0xe2 && out[len(out)-1] == 0x84: // U+212A K folds to k
				out, c = out[:len(out)-2], 'k'
			}
			out = append(out, c)
			continue
		}
		// A segment ended at a separator or at the end: resolve it.
		switch string(out[seg:]) {
		case "": // an empty segment: a run of '/' (or the leading one)
		case ".":
			out = out[:seg]
		case "..":
			out = out[:seg]
			if seg > 1 { // drop the segment before it, keeping its leading '/'
				out = out[:bytes.LastIndexByte(out[:seg-1], '/')+1]
			}
		default:
			if i < len(path) {
				out = append(out, '/')
			}
		}
		seg = len(out)
	}
	return out
}

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
