package replies

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// The bodies are small and their shape is fixed, so they are written with an appender
// rather than encoding/json: the field order is the code's order, and nothing is reflected.
// appendString is the one place that must be careful; its tests compare it with
// encoding/json on arbitrary input.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string literal. Invalid UTF-8 bytes become U+FFFD one
// byte at a time (as encoding/json does); control characters, quote and backslash are
// escaped, and so are U+2028 and U+2029 so the body is also safe inside JavaScript.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendKey appends `,"key":` (or `"key":` right after an opening brace).
func appendKey(b []byte, key string) []byte {
	if n := len(b); n > 0 && b[n-1] != '{' && b[n-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...) // keys are this package's constants: plain ASCII, nothing to escape
	return append(b, '"', ':')
}

// appendStringField appends `"key":"value"`.
func appendStringField(b []byte, key, value string) []byte {
	return appendString(appendKey(b, key), value)
}

// appendIntField appends `"key":n`.
func appendIntField(b []byte, key string, n int64) []byte {
	return strconv.AppendInt(appendKey(b, key), n, 10)
}

// appendTimeField appends `"key":"<RFC 3339 UTC>"`.
func appendTimeField(b []byte, key string, t time.Time) []byte {
	b = append(appendKey(b, key), '"')
	b = t.UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"')
}

// clip shortens s to at most max bytes without splitting a UTF-8 sequence, marking the cut
// with an ellipsis. Client-supplied values (a model name) go through it so a hostile
// request cannot make a large error body.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
