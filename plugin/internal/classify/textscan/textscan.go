// Package textscan is bounded, allocation-free text matching over upstream error bodies:
// the scan cap, ASCII case-insensitive search, and JSON unescaping for \u-escaped text.
//
// Upstream bodies are arbitrary input. Every caller scans at most MaxScanBytes of a body,
// and every function here runs in time linear in its input times the needle length, so
// classification, restatement and error rules stay bounded whatever the upstream sends.
package textscan

import (
	"bytes"
	"slices"
	"strings"
	"unsafe"
)

// MaxScanBytes is how much of an upstream body any matcher looks at. Error bodies are small;
// a body larger than this is cut, never rejected.
const MaxScanBytes = 64 << 10

// Cap returns the first MaxScanBytes of b.
func Cap(b []byte) []byte {
	if len(b) > MaxScanBytes {
		return b[:MaxScanBytes]
	}
	return b
}

// String views b as a string without copying. The caller must not mutate b while the string
// is in use, and must not keep the string (or any substring of it) past the call that
// received b.
func String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// lower folds an ASCII upper-case letter to lower case and leaves every other byte alone,
// so multi-byte UTF-8 sequences (Chinese markers) compare exactly.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// IndexFold returns the index of the first occurrence of sub in s, comparing ASCII letters
// case-insensitively and every other byte exactly, or -1. An empty sub matches at 0. Use
// String to search a []byte.
func IndexFold(s, sub string) int {
	n := len(sub)
	switch {
	case n == 0:
		return 0
	case n > len(s):
		return -1
	}
	first := lower(sub[0])
	if first < 'a' || first > 'z' {
		// Not a letter: only this exact byte can start a match.
		for i := 0; i+n <= len(s); {
			j := strings.IndexByte(s[i:len(s)-n+1], first)
			if j < 0 {
				return -1
			}
			i += j
			if equalFoldTail(s[i+1:i+n], sub[1:]) {
				return i
			}
			i++
		}
		return -1
	}
	for i := 0; i+n <= len(s); i++ {
		// For a lower-case letter, b|0x20 == first holds exactly for its two cases.
		if s[i]|0x20 == first && equalFoldTail(s[i+1:i+n], sub[1:]) {
			return i
		}
	}
	return -1
}

// equalFoldTail compares equal-length a and b under ASCII case folding.
func equalFoldTail(a, b string) bool {
	for i := 0; i < len(b); i++ {
		if a[i] != b[i] && lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// ContainsFold reports whether sub is within s (see IndexFold).
func ContainsFold(s, sub string) bool {
	return IndexFold(s, sub) >= 0
}

// ContainsAnyFold reports whether any non-empty needle is within s (see IndexFold).
func ContainsAnyFold(s string, needles []string) bool {
	for _, n := range needles {
		if n != "" && IndexFold(s, n) >= 0 {
			return true
		}
	}
	return false
}

// EqualFold reports whether a and b are equal under ASCII case folding.
func EqualFold(a, b string) bool {
	return len(a) == len(b) && equalFoldTail(a, b)
}

// HasUnicodeEscape reports whether b contains a JSON \u escape, the only case in which a
// non-ASCII marker can hide from a byte search of the raw body.
func HasUnicodeEscape(b []byte) bool {
	for i := 0; i+1 < len(b); {
		j := bytes.IndexByte(b[i:len(b)-1], '\\')
		if j < 0 {
			return false
		}
		i += j
		if b[i+1] == 'u' {
			return true
		}
		i += 2 // skip the escaped byte, so `\\u` is not an escape
	}
	return false
}

// UnescapeJSON appends src to dst with JSON string escapes decoded: \uXXXX (surrogate pairs
// joined, lone surrogates replaced by U+FFFD) and the one-letter escapes. Everything else,
// quotes and structure included, is copied as is, so the result is searchable text rather
// than JSON. Malformed escapes are copied verbatim.
func UnescapeJSON(dst, src []byte) []byte {
	return appendUnescaped(dst, src)
}

// hex4 decodes four hex digits at src[at:].
func hex4[T string | []byte](src T, at int) (rune, bool) {
	if at+4 > len(src) {
		return 0, false
	}
	var r rune
	for i := at; i < at+4; i++ {
		switch c := src[i]; {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// AppendLower appends src to dst with ASCII letters folded to lower case.
func AppendLower(dst, src []byte) []byte {
	start := len(dst)
	dst = append(dst, src...)
	for i := start; i < len(dst); i++ {
		dst[i] = lower(dst[i])
	}
	return dst
}

// AppendFolded appends the text to match lower-case fragments against: the capped body,
// \u-decoded when it holds escapes, with ASCII letters folded to lower case. With a dst
// of enough capacity it does not allocate.
func AppendFolded(dst, body []byte) []byte {
	capped := Cap(body)
	start := len(dst)
	dst = slices.Grow(dst, len(capped)) // decoding never grows text: one allocation at most
	if HasUnicodeEscape(capped) {
		dst = UnescapeJSON(dst, capped)
		for i := start; i < len(dst); i++ {
			dst[i] = lower(dst[i])
		}
		return dst
	}
	return AppendLower(dst, capped)
}

// Searchable returns the text to match markers against: the capped body itself, or, when
// it holds \u escapes, a decoded copy (the only case that allocates).
func Searchable(body []byte) []byte {
	capped := Cap(body)
	if !HasUnicodeEscape(capped) {
		return capped
	}
	return UnescapeJSON(make([]byte, 0, len(capped)), capped)
}
