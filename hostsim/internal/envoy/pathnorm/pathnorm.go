// Package pathnorm is the HTTP connection manager's request path normalisation, which runs
// on the request headers before any filter (source/common/http/conn_manager_impl.cc,
// ActiveStream::decodeHeaders → ConnectionManagerUtility::maybeNormalizePath). It knows no
// stream: it maps a :path and the connection manager's settings to the path the filters
// and the route see, or to the reply the connection manager makes instead.
//
// Sources read (envoyproxy/envoy): source/common/http/conn_manager_utility.cc,
// maybeNormalizePath (a fragment is rejected, envoy.reloadable_features.
// http_reject_path_with_fragment, on by default; then path_with_escaped_slashes_action;
// then normalize_path; then merge_slashes, "after path normalization to catch potential
// edge cases with percent encoding"); source/common/http/path_utility.cc, PathUtil::
// unescapeSlashes, canonicalPath and mergeSlashes, each on the part before the first '?';
// and the URL library canonicalPath calls, googleurl's url/url_canon_path.cc (DoPath,
// DoPartialPath, ClassifyAfterDot, BackUpToPreviousSlash, the kPathCharLookup table with
// NUL invalid: the version Envoy's tests pin, path_utility_test.cc InvalidPaths rejects
// "/xyz/.%00../abc"). maybeNormalizeHost (strip_matching_host_port, strip_any_host_port,
// strip_trailing_host_dot) changes nothing under the settings Spillway's bootstrap uses,
// which set none of them.
//
// Not modelled: the runtime-guarded removal of path parameters from dot segments
// (PathUtil::stripParametersFromDotSegments, strip_dotdot_segments_with_parameters; in
// which release it arrived was not checked), and googleurl's handling of non-8-bit input
// (a Go string is bytes, as Envoy's header value is).
package pathnorm

import "strings"

// Action is what the connection manager does with the request.
type Action uint8

// The actions (ConnectionManagerUtility::NormalizePathAction).
const (
	// Continue: the request goes on with the normalised path.
	Continue Action = iota
	// Reject: 400, details path_normalization_failed, before any filter.
	Reject
	// Redirect: 307 to the normalised path (UNESCAPE_AND_REDIRECT found an escaped slash).
	Redirect
)

// EscapedSlashes is the connection manager's path_with_escaped_slashes_action.
type EscapedSlashes uint8

// The escaped-slash actions (HttpConnectionManager.PathWithEscapedSlashesAction; Envoy's
// IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED).
const (
	KeepUnchanged EscapedSlashes = iota
	RejectRequest
	UnescapeAndRedirect
	UnescapeAndForward
)

// Config is the connection manager's path settings.
type Config struct {
	NormalizePath  bool           // normalize_path
	MergeSlashes   bool           // merge_slashes
	EscapedSlashes EscapedSlashes // path_with_escaped_slashes_action
}

// Normalize returns the path the filters see and what the connection manager does
// (ConnectionManagerUtility::maybeNormalizePath). A path it rejects comes back as far as
// it was normalised.
func Normalize(path string, c Config) (string, Action) {
	if strings.IndexByte(path, '#') >= 0 {
		return path, Reject
	}
	action := Continue
	if c.EscapedSlashes != KeepUnchanged {
		var found bool
		if path, found = UnescapeSlashes(path); found {
			switch c.EscapedSlashes {
			case RejectRequest:
				return path, Reject
			case UnescapeAndRedirect:
				action = Redirect
			}
		}
	}
	if c.NormalizePath {
		var ok bool
		if path, ok = CanonicalPath(path); !ok {
			return path, Reject
		}
	}
	if c.MergeSlashes {
		path = MergeSlashes(path)
	}
	return path, action
}

// splitQuery splits a path at its first '?' (the query keeps the '?').
func splitQuery(path string) (p, query string) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		return path[:i], path[i:]
	}
	return path, ""
}

// UnescapeSlashes decodes %2F, %2f, %5C and %5c in the path part and reports whether it
// found any (PathUtil::unescapeSlashes).
func UnescapeSlashes(path string) (string, bool) {
	p, query := splitQuery(path)
	if strings.IndexByte(p, '%') < 0 {
		return path, false
	}
	out := strings.NewReplacer("%2F", "/", "%2f", "/", "%5C", `\`, "%5c", `\`).Replace(p) + query
	return out, len(out) != len(path)
}

// MergeSlashes collapses runs of '/' in the path part, keeping a leading and a trailing
// one (PathUtil::mergeSlashes).
func MergeSlashes(path string) string {
	p, query := splitQuery(path)
	if !strings.Contains(p, "//") {
		return path
	}
	var b strings.Builder
	if strings.HasPrefix(p, "/") {
		b.WriteByte('/')
	}
	first := true
	for _, seg := range strings.Split(p, "/") {
		if seg == "" {
			continue
		}
		if !first {
			b.WriteByte('/')
		}
		first = false
		b.WriteString(seg)
	}
	if strings.HasSuffix(p, "/") {
		b.WriteByte('/')
	}
	return b.String() + query
}

// CanonicalPath is PathUtil::canonicalPath: googleurl's canonical form of the path part
// (dot segments resolved, a backslash read as a slash, percent escapes of unreserved
// characters decoded, characters a path may not hold escaped), the query kept as it is;
// ok is false for a path googleurl calls invalid (a NUL, raw or escaped).
func CanonicalPath(path string) (string, bool) {
	p, query := splitQuery(path)
	out, ok := canonicalize(p)
	return out + query, ok
}

// The kPathCharLookup flags (url_canon_path.cc).
const (
	pass       = 0
	special    = 1 // needs handling of some sort
	escapeBit  = 2
	escape     = escapeBit | special // escaped in canonical output
	unescape   = 4                   // an escaped one is decoded
	invalidBit = 8
	invalid    = invalidBit | special // not allowed in a path
)

// pathChar is googleurl's kPathCharLookup (the table with NUL invalid): every byte from
// 0x80 up, the control characters, space, '"', '#', '%', '<', '>', '\\', '^', '`', '{',
// '|', '}' and DEL are escaped; letters, digits, '-', '.', '_' and '~' are decoded from an
// escape; '.' is special (a dot segment); the rest passes.
var pathChar = func() (t [256]byte) {
	for i := range t {
		t[i] = escape
	}
	t[0] = invalid
	for _, c := range "!$&'()*+,/:;=@[]" {
		t[c] = pass
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = unescape
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c], t[c+'a'-'A'] = unescape, unescape
	}
	t['-'], t['_'], t['~'] = unescape, unescape, unescape
	t['.'] = special
	return t
}()

// isURLSlash is googleurl's IsURLSlash: a slash or a backslash.
func isURLSlash(c byte) bool { return c == '/' || c == '\\' }

// isDot is googleurl's IsDot: the length of a dot at p[i] ('.' or "%2e"/"%2E"), 0 for none.
func isDot(p string, i int) int {
	switch {
	case p[i] == '.':
		return 1
	case p[i] == '%' && i+3 <= len(p) && p[i+1] == '2' && (p[i+2] == 'e' || p[i+2] == 'E'):
		return 3
	}
	return 0
}

// dotKind is googleurl's DotDisposition.
type dotKind uint8

const (
	notADirectory dotKind = iota
	directoryCur
	directoryUp
)

// classifyAfterDot is googleurl's ClassifyAfterDot: what the dot before afterDot is, and how
// many more input bytes it takes.
func classifyAfterDot(p string, afterDot int) (dotKind, int) {
	if afterDot == len(p) {
		return directoryCur, 0
	}
	if isURLSlash(p[afterDot]) {
		return directoryCur, 1
	}
	if n := isDot(p, afterDot); n > 0 {
		after := afterDot + n
		if after == len(p) {
			return directoryUp, n
		}
		if isURLSlash(p[after]) {
			return directoryUp, n + 1
		}
	}
	return notADirectory, 0
}

// backUpToPreviousSlash is googleurl's BackUpToPreviousSlash: out ends with '/'; drop the
// last segment before it, never above the first slash.
func backUpToPreviousSlash(out []byte) []byte {
	i := len(out) - 1
	if i == 0 {
		return out
	}
	i--
	for out[i] != '/' && i > 0 {
		i--
	}
	return out[:i+1]
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendEscaped is googleurl's AppendEscapedChar: '%' and two upper-case hex digits.
func appendEscaped(out []byte, c byte) []byte {
	const hex = "0123456789ABCDEF"
	return append(out, '%', hex[c>>4], hex[c&15])
}

// canonicalize is googleurl's DoPath over 8-bit input (DoPartialPath with the output's path
// starting at 0). It does not recurse, and its output grows at most threefold.
func canonicalize(p string) (string, bool) {
	if p == "" {
		return "/", true
	}
	out := make([]byte, 0, len(p)+1)
	if !isURLSlash(p[0]) {
		out = append(out, '/')
	}
	ok := true
	for i := 0; i < len(p); i++ {
		c := p[i]
		flags := pathChar[c]
		if flags&special == 0 {
			out = append(out, c)
			continue
		}
		if n := isDot(p, i); n > 0 {
			if len(out) > 0 && out[len(out)-1] == '/' {
				kind, consumed := classifyAfterDot(p, i+n)
				switch kind {
				case notADirectory:
					out = append(out, '.')
					i += n - 1
				case directoryCur:
					i += n + consumed - 1
				case directoryUp:
					out = backUpToPreviousSlash(out)
					i += n + consumed - 1
				}
			} else {
				out = append(out, '.') // part of a name
				i += n - 1
			}
			continue
		}
		switch {
		case c == '\\':
			out = append(out, '/')
		case c == '%':
			hi, okHi := byte(0), false
			lo, okLo := byte(0), false
			if i+2 < len(p) {
				hi, okHi = unhex(p[i+1])
				lo, okLo = unhex(p[i+2])
			}
			if !okHi || !okLo {
				out = append(out, '%') // an invalid escape passes as it is
				continue
			}
			v := hi<<4 | lo
			uf := pathChar[v]
			switch {
			case uf&unescape != 0:
				out = append(out, v)
			case uf&invalidBit != 0:
				out = append(out, '%', p[i+1], p[i+2])
				ok = false
			default:
				out = append(out, '%', p[i+1], p[i+2]) // kept escaped, its hex case too
			}
			i += 2
		case flags&invalidBit != 0:
			out = appendEscaped(out, c)
			ok = false
		case flags&escapeBit != 0:
			out = appendEscaped(out, c)
		}
	}
	return string(out), ok
}
