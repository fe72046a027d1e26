// Package textscan is bounded, allocation-free text matching over upstream error bodies:
// the scan cap, ASCII case-insensitive search, and JSON unescaping for \u-escaped text.
//
// Upstream bodies are arbitrary input. Every caller scans at most MaxScanBytes of a body,
// and every function here runs in time linear in its input times the needle length, so
// classification, restatement and error rules stay bounded whatever the upstream sends.
package textscan

import (
	"unicode/utf16"
	"unicode/utf8"
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
// case-insensitively and every other byte exactly, or -1. An empty sub matches at 0.
func IndexFold[T string | []byte](s T, sub string) int {
	n := len(sub)
	switch {
	case n == 0:
		return 0
	case n > len(s):
		return -1
	}
	first := lower(sub[0])
	for i := 0; i+n <= len(s); i++ {
		if lower(s[i]) != first {
			continue
		}
		j := 1
		for j < n && lower(s[i+j]) == lower(sub[j]) {
			j++
		}
		if j == n {
			return i
		}
	}
	return -1
}

// ContainsFold reports whether sub is within s (see IndexFold).
func ContainsFold[T string | []byte](s T, sub string) bool {
	return IndexFold(s, sub) >= 0
}

// ContainsAnyFold reports whether any non-empty needle is within s (see IndexFold).
func ContainsAnyFold[T string | []byte](s T, needles []string) bool {
	for _, n := range needles {
		if n != "" && IndexFold(s, n) >= 0 {
			return true
		}
	}
	return false
}

// EqualFold reports whether a and b are equal under ASCII case folding.
func EqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// HasUnicodeEscape reports whether b contains a JSON \u escape, the only case in which a
// non-ASCII marker can hide from a byte search of the raw body.
func HasUnicodeEscape(b []byte) bool {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\\' {
			if b[i+1] == 'u' {
				return true
			}
			i++ // skip the escaped byte, so `\\u` is not an escape
		}
	}
	return false
}

// UnescapeJSON appends src to dst with JSON string escapes decoded: \uXXXX (surrogate pairs
// joined, lone surrogates replaced by U+FFFD) and the one-letter escapes. Everything else,
// quotes and structure included, is copied as is, so the result is searchable text rather
// than JSON. Malformed escapes are copied verbatim.
func UnescapeJSON(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != '\\' || i+1 >= len(src) {
			dst = append(dst, c)
			continue
		}
		e := src[i+1]
		switch e {
		case '"', '\\', '/':
			dst = append(dst, e)
			i++
		case 'n':
			dst = append(dst, '\n')
			i++
		case 't':
			dst = append(dst, '\t')
			i++
		case 'r':
			dst = append(dst, '\r')
			i++
		case 'b', 'f':
			dst = append(dst, ' ')
			i++
		case 'u':
			r, ok := hex4(src, i+2)
			if !ok {
				dst = append(dst, c)
				continue
			}
			i += 5
			if utf16.IsSurrogate(r) && i+6 < len(src) && src[i+1] == '\\' && src[i+2] == 'u' {
				if lo, ok := hex4(src, i+3); ok {
					if joined := utf16.DecodeRune(r, lo); joined != utf8.RuneError {
						r = joined
						i += 6
					}
				}
			}
			dst = utf8.AppendRune(dst, r) // a lone surrogate becomes U+FFFD
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// hex4 decodes four hex digits at src[at:].
func hex4(src []byte, at int) (rune, bool) {
	if at+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, c := range src[at : at+4] {
		switch {
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

// Searchable returns the text to match markers against: the capped body itself, or, when
// it holds \u escapes, a decoded copy (the only case that allocates).
func Searchable(body []byte) []byte {
	capped := Cap(body)
	if !HasUnicodeEscape(capped) {
		return capped
	}
	return UnescapeJSON(make([]byte, 0, len(capped)), capped)
}
