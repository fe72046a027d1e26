package replies

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spillwayproxy/spillway/plugin/internal/jsonscan"
)

// The bodies are small and their shape is fixed, so they are written with an appender
// rather than encoding/json: the field order is the code's order, and nothing is reflected.
// A string is the one part that must be careful: jsonscan.AppendString, whose tests compare
// it with encoding/json on arbitrary input.

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
	return jsonscan.AppendString(appendKey(b, key), value)
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
