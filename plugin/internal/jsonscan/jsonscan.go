// Package jsonscan checks JSON text against RFC 8259 in one pass that never recurses and never
// allocates: the open arrays and objects are a fixed-size bit stack, so nesting deeper than
// MaxDepth is refused at the byte that opens the level too many, whatever follows.
//
// What is checked: one value and nothing but whitespace around it (no byte order mark, no
// comment, no second value); exact literals; the number grammar; in strings, no raw control
// character and only the escapes of RFC 8259 §7 (`\u` with four hex digits). What is not:
// whether a string's bytes are valid UTF-8 and its `\u` escapes pair their surrogates — the
// grammar allows both (RFC 8259 §8.2) and a string's text is for whoever reads it; NextRune
// and AppendText check exactly that for the strings a caller reads.
package jsonscan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects accepted, the outermost counting as
// one: serde_json's default recursion limit (serde-rs/json src/de.rs, remaining_depth 128;
// error.rs, RecursionLimitExceeded: "more than 128 layers deep"), so no upstream built on it
// is sent a body it refuses for its depth, and about five times what an LLM request nests
// (OpenAI's Structured Outputs allows 10 levels of schema, some 25 levels of JSON once
// wrapped in a request). The bit stack makes the pass cost the same whatever the limit.
const MaxDepth = 128

// Errors of the checks. Their texts never quote the input.
var (
	ErrSyntax   = errors.New("is not JSON (RFC 8259)")
	ErrTooDeep  = fmt.Errorf("nests arrays and objects deeper than %d levels", MaxDepth)
	ErrTrailing = errors.New("has data after its JSON value")
	ErrText     = errors.New("holds invalid UTF-8 or an unpaired surrogate escape")
)

// Valid checks that b is exactly one JSON value, nested at most MaxDepth deep.
func Valid(b []byte) error {
	i := SkipSpace(b, 0)
	end, err := Value(b, i, 0)
	if err != nil {
		return err
	}
	if SkipSpace(b, end) != len(b) {
		return ErrTrailing
	}
	return nil
}

// SkipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Value checks the value that starts at b[i] and returns the index just past it. open is
// how many arrays and objects around it are open already: the value may open MaxDepth-open
// more. On an error the index is the byte that broke the grammar (for ErrTooDeep the bracket
// that opens the level too many; the end of b for a value that does not end).
func Value(b []byte, i, open int) (int, error) {
	var objects [MaxDepth / 64]uint64 // bit d: the container at level d (of this value) is an object
	depth, limit := 0, MaxDepth-open
	key := false // the next string is a member's key
	var err error
	for {
		// At the first byte of a value, or of a key.
		if i >= len(b) || key && b[i] != '"' {
			return i, ErrSyntax
		}
		// Tested most frequent first, one comparison each (a switch would be a search).
		if c := b[i]; c == '"' {
			// A call per string would cost a Go wasm module more than reading a short one:
			// the plain run is found here, and whatever ends it if not the quote (an escape,
			// a control character) is String's to read.
			j := i + 1
			if j+8 <= len(b) { // plainEnd, its first word here
				if m := special(binary.LittleEndian.Uint64(b[j:])); m != 0 {
					j += bits.TrailingZeros64(m) >> 3
				} else {
					j = plainRun(b, j+8)
				}
			} else {
				j = plainRun(b, j)
			}
			if j >= len(b) || b[j] != '"' {
				if j, _, err = stringRest(b, j); err != nil {
					return j, err
				}
			}
			i = j + 1
			if key {
				if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
					return i, ErrSyntax
				}
				i, key = SkipSpace(b, i+1), false
				continue // its value
			}
		} else if c == '{' || c == '[' {
			if depth >= limit {
				return i, ErrTooDeep
			}
			if c == '{' {
				objects[depth>>6] |= 1 << (depth & 63)
			} else {
				objects[depth>>6] &^= 1 << (depth & 63)
			}
			depth++
			if i = SkipSpace(b, i+1); i >= len(b) || b[i] != c+2 { // '{'+2 is '}', '['+2 is ']'
				key = c == '{'
				continue // its first key or value
			}
			depth-- // an empty container is a value
			i++
		} else if c == 't' {
			i, err = literal(b, i, "true")
		} else if c == 'f' {
			i, err = literal(b, i, "false")
		} else if c == 'n' {
			i, err = literal(b, i, "null")
		} else {
			i, err = number(b, i)
		}
		if err != nil {
			return i, err
		}
		// Past a value: close what it ends, up to the next key or value.
		for {
			if depth == 0 {
				return i, nil
			}
			if i = SkipSpace(b, i); i >= len(b) {
				return i, ErrSyntax
			}
			inObject := objects[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			c := b[i]
			if c == ',' {
				i, key = SkipSpace(b, i+1), inObject
				break
			}
			if inObject && c != '}' || !inObject && c != ']' {
				return i, ErrSyntax
			}
			depth--
			i++
		}
	}
}

// String checks the string whose contents start at b[i], just past its opening quote, and
// returns the index of its closing quote and whether the contents hold an escape. A raw
// control character, an escape RFC 8259 §7 does not define and a string that does not end
// are ErrSyntax at the offending byte; the text itself is not checked (NextRune does).
//
// It tests eight bytes at once for the three bytes that end a run of plain contents — a
// byte below n in x shows in (x - n*ones) &^ x & highs, exactly for n ≤ 0x80, and x^(c*ones)
// has a zero byte where x holds c — because a Go wasm module runs byte loops slowly, even
// bytes.IndexByte's (its wasm memchr reads four bytes at a time, and would take three
// passes), and a request body is mostly string contents.
func String(b []byte, i int) (end int, escaped bool, err error) {
	// plainEnd, its first word here: most strings end in it, and a call costs.
	if i+8 <= len(b) {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			if i += bits.TrailingZeros64(m) >> 3; b[i] == '"' {
				return i, false, nil
			}
			return stringRest(b, i)
		}
		i += 8
	}
	if i = plainRun(b, i); i < len(b) && b[i] == '"' {
		return i, false, nil
	}
	return stringRest(b, i)
}

// stringRest is String from b[i], where a run of plain contents ended other than with the
// closing quote (or b did).
func stringRest(b []byte, i int) (end int, escaped bool, err error) {
	for {
		if i >= len(b) {
			return i, escaped, ErrSyntax
		}
		switch b[i] {
		case '"':
			return i, escaped, nil
		case '\\':
			escaped = true
			if i+1 >= len(b) {
				return len(b), escaped, ErrSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(b, i+2); !ok {
					return i, escaped, ErrSyntax
				}
				i += 6
			default:
				return i, escaped, ErrSyntax
			}
		default: // a control character
			return i, escaped, ErrSyntax
		}
		i = plainEnd(b, i)
	}
}

// Eight bytes at a time: ones has each byte 0x01, highs each byte 0x80.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special has the high bit set in the first byte of x (in memory order) that is a quote, a
// backslash or a control character, if any; bits above it mean nothing. (A byte below n
// shows in (x - n*ones) &^ x, and x^(c*ones) has a zero byte where x holds c; a borrow can
// only set bits above the first such byte.)
func special(x uint64) uint64 {
	q, s := x^('"'*ones), x^('\\'*ones)
	return ((q-ones)&^q | (s-ones)&^s | (x-0x20*ones)&^x) & highs
}

// plainEnd returns the index of the first byte at or after i that is a quote, a backslash
// or a control character, or len(b). It reads eight bytes at a time and finds the byte in
// the word without a loop, four words a turn while they are plain: a taken branch is what a
// Go wasm module pays most for. Most strings (keys, roles, models) end in their first word:
// String and Value read it themselves before they call plainRun for the rest, saving a call.
func plainEnd(b []byte, i int) int {
	if i+8 <= len(b) {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	return plainRun(b, i)
}

// plainRun is plainEnd past the first word.
func plainRun(b []byte, i int) int {
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32]
		if special(binary.LittleEndian.Uint64(w))|special(binary.LittleEndian.Uint64(w[8:]))|
			special(binary.LittleEndian.Uint64(w[16:]))|special(binary.LittleEndian.Uint64(w[24:])) != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20; i++ {
	}
	return i
}

// hex4 reads the four hex digits at b[i].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// literal checks lit at b[i]; what follows it is the caller's to check.
func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, ErrSyntax
	}
	return i + len(lit), nil
}

// number checks RFC 8259's number at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, ErrSyntax
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, ErrSyntax
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, ErrSyntax
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, ErrSyntax
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// NextRune decodes the character at s[i] of a string's contents (between its quotes, as
// String accepted them) and returns it and the index past it: a UTF-8 sequence or an
// escape, a surrogate pair's two escapes making one character. Invalid UTF-8 (an overlong
// form, an encoded surrogate, a stray byte) and an unpaired surrogate escape are ErrText; a
// malformed escape, which String refuses first, is ErrSyntax.
func NextRune(s []byte, i int) (rune, int, error) {
	c := s[i]
	if c >= utf8.RuneSelf {
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			return 0, i, ErrText
		}
		return r, i + size, nil
	}
	if c != '\\' {
		return rune(c), i + 1, nil
	}
	if i+1 >= len(s) {
		return 0, i, ErrSyntax
	}
	switch e := s[i+1]; e {
	case '"', '\\', '/':
		return rune(e), i + 2, nil
	case 'b':
		return '\b', i + 2, nil
	case 'f':
		return '\f', i + 2, nil
	case 'n':
		return '\n', i + 2, nil
	case 'r':
		return '\r', i + 2, nil
	case 't':
		return '\t', i + 2, nil
	case 'u':
		r, ok := hex4(s, i+2)
		switch {
		case !ok:
			return 0, i, ErrSyntax
		case !utf16.IsSurrogate(r):
			return r, i + 6, nil
		case r < 0xdc00 && i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u':
			if lo, ok := hex4(s, i+8); ok && lo >= 0xdc00 && lo < 0xe000 {
				return utf16.DecodeRune(r, lo), i + 12, nil
			}
		}
		return 0, i, ErrText
	}
	return 0, i, ErrSyntax
}

// AppendText appends the text of a string's contents s (as String accepted them) to dst,
// refusing, as NextRune does, invalid UTF-8 and unpaired surrogates.
func AppendText(dst, s []byte) ([]byte, error) {
	for i := 0; i < len(s); {
		if c := s[i]; c != '\\' && c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, next, err := NextRune(s, i)
		if err != nil {
			return dst, err
		}
		dst = utf8.AppendRune(dst, r)
		i = next
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 bytes become U+FFFD one byte at a
// time (as encoding/json does); control characters, quote and backslash are escaped, and so
// are U+2028 and U+2029 so the text is also safe inside JavaScript. Its fuzz test holds it to
// encoding/json.
func AppendString(b []byte, s string) []byte {
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
