package llmapi

import "bytes"

// scanRequest is ParseRequest's fast path: one pass over the top level of a well-formed
// body that stops once the model and the stream flag are known, with none of gjson's
// per-value results (a Go wasm module pays dearly for those: about four times this scan on
// a typical chat completion). It reports ok only for a body whose top level, as far as it
// read, is plain JSON — no escape in a key or in the model, exact literals and numbers,
// balanced nesting — holding a model ParseRequest accepts; on every other body it gives up
// (ok false) and ParseRequest reads it with gjson, which also words every error. Where it
// reports ok its answer is gjson's (FuzzScanRequestAgreesWithGJSON): the first "model" and
// the first "stream" at the top level, the model aliasing body.
func scanRequest(body []byte) (req Request, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return Request{}, false
	}
	i++
	seenModel, seenStream := false, false
	for {
		i = skipSpace(body, i)
		if i >= len(body) {
			return Request{}, false
		}
		if body[i] == '}' {
			return req, seenModel && objectEnds(body, i) // no stream flag: stream false
		}
		if body[i] != '"' {
			return Request{}, false
		}
		keyStart := i + 1
		keyEnd := plainStringEnd(body, keyStart)
		if keyEnd < 0 {
			return Request{}, false
		}
		key := body[keyStart:keyEnd]
		i = skipSpace(body, keyEnd+1)
		if i >= len(body) || body[i] != ':' {
			return Request{}, false
		}
		i = skipSpace(body, i+1)
		if i >= len(body) {
			return Request{}, false
		}
		valueStart := i
		if i = skipValue(body, i); i < 0 {
			return Request{}, false
		}
		value := body[valueStart:i]
		switch string(key) { // compiled without a conversion
		case "model":
			if seenModel {
				break
			}
			seenModel = true
			// A plain string the model checks accept; anything else is gjson's to read (and
			// to refuse with the right error).
			if len(value) < 2 || value[0] != '"' || plainStringEnd(value, 1) != len(value)-1 {
				return Request{}, false
			}
			m := unsafeString(value[1 : len(value)-1])
			if len(m) > MaxModelLength || !printable(m) {
				return Request{}, false
			}
			req.Model = m
		case "stream":
			if !seenStream {
				seenStream = true
				req.Stream = string(value) == "true"
			}
		}
		if seenModel && seenStream {
			return req, true
		}
		i = skipSpace(body, i)
		if i >= len(body) {
			return Request{}, false
		}
		switch body[i] {
		case ',':
			i++
		case '}':
			return req, seenModel && objectEnds(body, i)
		default:
			return Request{}, false
		}
	}
}

// objectEnds reports whether the top-level object's closing brace at i ends the body, but
// for whitespace. gjson reads on past the brace for more keys, so a body with anything after
// it is gjson's to read.
func objectEnds(b []byte, i int) bool { return skipSpace(b, i+1) == len(b) }

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plainStringEnd returns the index of the closing quote of a string whose contents start at
// i, or -1 if the string holds an escape or does not end. (bytes.IndexByte is a word-at-a-time
// loop in assembly on wasm, far cheaper there than a loop over the bytes in Go.)
func plainStringEnd(b []byte, i int) int {
	q := bytes.IndexByte(b[i:], '"')
	if q < 0 || bytes.IndexByte(b[i:i+q], '\\') >= 0 {
		return -1
	}
	return i + q
}

// stringEnd returns the index of the closing quote of a string whose contents start at i
// (escapes skipped), or -1 if it does not end.
func stringEnd(b []byte, i int) int {
	for i <= len(b) {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		e := bytes.IndexByte(b[i:i+q], '\\')
		if e < 0 {
			return i + q
		}
		i += e + 2 // past the backslash and the byte it escapes
	}
	return -1
}

// skipValue returns the index just past the value that starts at i (a string, an object or
// array with balanced brackets outside its strings, an exact literal, or a number), or -1
// for anything else or a value that does not end.
func skipValue(b []byte, i int) int {
	switch c := b[i]; {
	case c == '"':
		end := stringEnd(b, i+1)
		if end < 0 {
			return -1
		}
		return end + 1
	case c == '{' || c == '[':
		return skipNested(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		j := i + 1
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' ||
			b[j] == '+' || b[j] == '-') {
			j++
		}
		return delimited(b, j)
	}
	return -1
}

// skipNested skips an object or array, matching each bracket with its own kind.
func skipNested(b []byte, i int) int {
	var stack [32]byte // the open brackets; deeper nesting is gjson's to read
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			if i = stringEnd(b, i+1); i < 0 {
				return -1
			}
		case '{', '[':
			if depth == len(stack) {
				return -1
			}
			stack[depth] = c
			depth++
		case '}', ']':
			if depth == 0 || stack[depth-1] != c-2 { // '{'+2 == '}', '['+2 == ']'
				return -1
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case '(', ')':
			return -1 // gjson counts these as brackets too: leave such a body to it
		}
	}
	return -1
}

// skipLiteral skips lit at i, which a delimiter must follow.
func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return delimited(b, i+len(lit))
}

// delimited returns j if a value may end there: at whitespace, a comma or the object's end
// (the end of the body is not: a truncated body is gjson's to judge).
func delimited(b []byte, j int) int {
	if j >= len(b) {
		return -1
	}
	switch b[j] {
	case ' ', '\t', '\n', '\r', ',', '}':
		return j
	}
	return -1
}
