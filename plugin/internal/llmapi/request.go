// Package llmapi knows the shape of the LLM APIs Spillway routes — OpenAI (Chat Completions,
// Completions, Embeddings, Responses) and Anthropic Messages: which fields of a request body
// it reads and rewrites, which request headers carry a client's credentials, and how their
// server-sent event streams start, fail and end. It is pure: no proxy-wasm, no shared state.
package llmapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf8"
	"unsafe"

	"github.com/spillwayproxy/spillway/plugin/internal/jsonscan"
)

// MaxModelLength bounds the model name Spillway accepts from a client (the policy's own
// limit on model names).
const MaxModelLength = 256

// routingKeys are the top-level keys of a request body Spillway reads or rewrites: one list,
// so the keys ParseRequest reads, the keys it refuses to see twice and the keys the filter
// rewrites are the same. A key added here (issue 22's translation) is refused twice from
// then on. Each is lowercase ASCII; there are at most 64.
var routingKeys = [...]string{keyModel: "model", keyStream: "stream"}

// Indexes of routingKeys.
const (
	keyModel = iota
	keyStream
)

// duplicateErrs are ErrDuplicateKey for each of routingKeys, made once (a refusal allocates
// nothing).
var duplicateErrs = func() (errs [len(routingKeys)]error) {
	for i, k := range routingKeys {
		errs[i] = fmt.Errorf("%w: %q", ErrDuplicateKey, k)
	}
	return errs
}()

// Request is what Spillway reads of a request body.
type Request struct {
	// Model is the requested model. It aliases the body it was read from or, when the body
	// escapes it, the Parser's text buffer: copy it (or intern it) before either changes.
	Model string
	// Stream is the body's "stream": true (a server-sent event stream is asked for); any
	// other value is no stream.
	Stream bool
	// ModelAt is where the model's value is in the body, its quotes included: what
	// RewriteModel replaces.
	ModelAt Span
}

// Span is the bytes [Start, End) of a body.
type Span struct{ Start, End int }

// Errors of ParseRequest. Each is a client error, answered 400 invalid_request with the
// error's text (which never quotes the body).
var (
	ErrNotJSON       = errors.New("request body is not a JSON object (RFC 8259)")
	ErrTrailingData  = errors.New("request body has data after its JSON object")
	ErrTooDeep       = fmt.Errorf("request body nests arrays and objects deeper than %d levels", jsonscan.MaxDepth)
	ErrDuplicateKey  = errors.New("request body gives a top-level key Spillway reads more than once (in some spelling)")
	ErrInvalidText   = errors.New(`request body has a top-level key or a "model" that is not valid UTF-8 or holds an unpaired surrogate escape`)
	ErrNoModel       = errors.New(`request body has no "model"`)
	ErrModelNotText  = errors.New(`request body's "model" is not a string`)
	ErrModelTooLong  = fmt.Errorf(`request body's "model" is longer than %d bytes`, MaxModelLength)
	ErrModelNotPrint = errors.New(`request body's "model" is empty or holds control characters`)
)

// Parser reads request bodies. Its text buffer holds the model of a body that escapes it,
// and is reused by the next Parse. The zero Parser is ready.
type Parser struct {
	text    []byte
	stopped int
}

// ParseRequest is Parse with a Parser of its own.
func ParseRequest(body []byte) (Request, error) {
	var p Parser
	return p.Parse(body)
}

// Parse reads a request body's top-level model and stream flag in one pass over the whole
// body, before anything else parses it, and accepts only a body that is exactly one JSON
// object (RFC 8259: no byte order mark, no comment, nothing after it but whitespace; the
// grammar checked everywhere by jsonscan, which bounds the nesting at jsonscan.MaxDepth)
// whose top-level keys are valid UTF-8 without an unpaired surrogate escape and give none of
// routingKeys twice: keys are compared decoded and ignoring case as strings.EqualFold does
// (Go's encoding/json, and other decoders that match fields case-insensitively, read "MODEL"
// or "mod\u0065l" as "model"), so no two parsers can disagree on which model a body names.
// The other strings' text is the upstream's to judge (it gets the body as sent). The model
// must be a string of 1 to MaxModelLength bytes of text without control characters; it
// aliases body unless the body escapes it. Parse allocates only to grow the text buffer.
func (p *Parser) Parse(body []byte) (Request, error) {
	var req Request
	escaped, err := p.pass(body, &req)
	if err != nil {
		return Request{}, err
	}
	if req.ModelAt.End == 0 {
		return Request{}, ErrNoModel
	}
	v := body[req.ModelAt.Start:req.ModelAt.End]
	switch {
	case v[0] == 'n': // null is no model
		return Request{}, ErrNoModel
	case v[0] != '"':
		return Request{}, ErrModelNotText
	}
	text := v[1 : len(v)-1]
	switch {
	case escaped:
		if text, err = p.decode(text); err != nil {
			return Request{}, err
		}
	case len(text) <= 8 && printableASCII(word(body, req.ModelAt.Start+1, len(text)), len(text)):
		req.Model = unsafeString(text) // the usual model: short printable ASCII, read in one word
		return req, nil
	case len(text) <= MaxModelLength && !utf8.Valid(text):
		return Request{}, ErrInvalidText
	}
	switch m := unsafeString(text); {
	case len(m) > MaxModelLength:
		return Request{}, ErrModelTooLong
	case !printable(m):
		return Request{}, ErrModelNotPrint
	default:
		req.Model = m
	}
	return req, nil
}

// Stopped is where the last Parse stopped reading its body: the byte it refused the body at,
// or the body's length when it read it whole.
func (p *Parser) Stopped() int { return p.stopped }

// pass reads the top-level object: the model's span (End 0 when it has none) and whether
// its value holds an escape, and the stream flag. It stops at the first refusal, leaving
// p.stopped there.
func (p *Parser) pass(body []byte, req *Request) (modelEscaped bool, err error) {
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		p.stopped = i
		return false, ErrNotJSON
	}
	var seen uint64 // bit k: routingKeys[k] was given
	if i = jsonscan.SkipSpace(body, i+1); i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			if i >= len(body) || body[i] != '"' {
				err = ErrNotJSON
				break
			}
			keyEnd, escaped, e := jsonscan.String(body, i+1)
			if e != nil {
				i, err = keyEnd, bodyError(e)
				break
			}
			key, spelled, matched := -1, uint64(0), false
			if n := keyEnd - i - 1; !escaped && n <= 8 && i+9 <= len(body) {
				// The usual key, up to eight bytes of ASCII: compared as one word, here (a
				// call to matchKey would cost more than the comparison).
				if x := binary.LittleEndian.Uint64(body[i+1:]) & (uint64(1)<<(8*n) - 1); x&highs == 0 {
					for k := range routingWords {
						if w := &routingWords[k]; w.n == n && x|w.fold == w.word {
							spelled |= 1 << k
							if x == w.word {
								key = k
							}
						}
					}
					matched = true
				}
			}
			if !matched {
				if key, spelled, e = matchKey(body[i+1:keyEnd], escaped); e != nil {
					i, err = keyEnd, bodyError(e)
					break
				}
			}
			if again := spelled & seen; again != 0 {
				i, err = keyEnd, duplicateErrs[bits.TrailingZeros64(again)]
				break
			}
			seen |= spelled
			if i = jsonscan.SkipSpace(body, keyEnd+1); i >= len(body) || body[i] != ':' {
				err = ErrNotJSON
				break
			}
			start := jsonscan.SkipSpace(body, i+1)
			if start < len(body) && body[start] == '"' {
				// A string (the model's included, as it should be): read here, noting whether
				// the model escapes.
				if i, escaped, e = jsonscan.String(body, start+1); e != nil {
					err = bodyError(e)
					break
				}
				i++
				if key == keyModel {
					modelEscaped = escaped
				}
			} else if start+5 <= len(body) && string(body[start:start+4]) == "true" {
				i = start + 4 // what follows is checked next, as after any value
			} else if start+6 <= len(body) && string(body[start:start+5]) == "false" {
				i = start + 5
			} else if i, e = jsonscan.Value(body, start, 1); e != nil {
				err = bodyError(e)
				break
			}
			switch key {
			case keyModel:
				req.ModelAt = Span{start, i}
			case keyStream:
				req.Stream = i-start == 4 && body[start] == 't'
			}
			if i = jsonscan.SkipSpace(body, i); i < len(body) && body[i] == ',' {
				i = jsonscan.SkipSpace(body, i+1)
				continue
			}
			if i >= len(body) || body[i] != '}' {
				err = ErrNotJSON
				break
			}
			i++
			break
		}
	}
	if err == nil {
		if i = jsonscan.SkipSpace(body, i); i != len(body) {
			err = ErrTrailingData
		}
	}
	p.stopped = i
	return modelEscaped, err
}

// bodyError is jsonscan's error as ParseRequest's.
func bodyError(err error) error {
	switch {
	case errors.Is(err, jsonscan.ErrTooDeep):
		return ErrTooDeep
	case errors.Is(err, jsonscan.ErrText):
		return ErrInvalidText
	}
	return ErrNotJSON
}

// matchKey reads a top-level key's contents (between its quotes, as jsonscan.String
// accepted them; escaped if they hold an escape) without decoding them anywhere: key is the
// index in routingKeys of the key it is exactly (-1 for none), spelled has bit k set when it
// is routingKeys[k] in any spelling (decoded, ignoring case). A key that is not text (invalid
// UTF-8, an unpaired surrogate escape) is jsonscan.ErrText. (pass compares the usual short
// ASCII key itself, as one word.)
func matchKey(raw []byte, escaped bool) (key int, spelled uint64, err error) {
	key = -1
	if !escaped && ascii(raw) {
		for k, name := range routingKeys {
			if len(raw) != len(name) {
				continue
			}
			if string(raw) == name {
				key, spelled = k, spelled|1<<k
			} else if asciiFoldEqual(raw, name) {
				spelled |= 1 << k
			}
		}
		return key, spelled, nil
	}
	// One character at a time: each routing key still in the running is compared as the
	// characters come.
	const all = 1<<len(routingKeys) - 1
	exact, folded := uint64(all), uint64(all)
	n := 0 // characters so far
	for j := 0; j < len(raw); n++ {
		r := rune(raw[j])
		if r < utf8.RuneSelf && r != '\\' {
			j++ // ASCII: no call
		} else {
			var err error
			if r, j, err = jsonscan.NextRune(raw, j); err != nil {
				return -1, 0, err
			}
		}
		if folded == 0 {
			continue // no match left: only the text is checked
		}
		f := foldASCII(r)
		for k, name := range routingKeys {
			if n >= len(name) || f != rune(name[n]) {
				folded &^= 1 << k
			}
			if n >= len(name) || r != rune(name[n]) {
				exact &^= 1 << k
			}
		}
	}
	for k, name := range routingKeys {
		if n != len(name) {
			continue
		}
		if folded&(1<<k) != 0 {
			spelled |= 1 << k
		}
		if exact&(1<<k) != 0 {
			key = k
		}
	}
	return key, spelled, nil
}

// routingWords are routingKeys of at most eight bytes as words (word's layout): fold has 0x20
// in each letter's byte, so a key's word x is the name in any case when x|fold == word.
var routingWords = func() (ws [len(routingKeys)]struct {
	word, fold uint64
	n          int // the name's length; 0 for a name longer than eight bytes
}) {
	for k, name := range routingKeys {
		if len(name) > 8 {
			continue
		}
		ws[k].n = len(name)
		for i := len(name) - 1; i >= 0; i-- {
			ws[k].word = ws[k].word<<8 | uint64(name[i])
			ws[k].fold <<= 8
			if name[i] >= 'a' && name[i] <= 'z' {
				ws[k].fold |= 0x20
			}
		}
	}
	return ws
}()

// Words of bytes: ones has each byte 0x01, highs each byte 0x80.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// word returns the n ≤ 8 bytes of b at i as a little-endian word, the bytes past them zero:
// one load where b has eight bytes there (a Go wasm module pays for every turn of a byte
// loop).
func word(b []byte, i, n int) uint64 {
	if i+8 <= len(b) {
		return binary.LittleEndian.Uint64(b[i:]) & (uint64(1)<<(8*n) - 1)
	}
	return wordAtEnd(b, i, n)
}

// wordAtEnd is word where b has fewer than eight bytes at i.
func wordAtEnd(b []byte, i, n int) uint64 {
	var x uint64
	for k := i + n - 1; k >= i; k-- {
		x = x<<8 | uint64(b[k])
	}
	return x
}

// printableASCII reports whether the n ≤ 8 bytes of the word x (word's layout) are all
// 0x20–0x7e: none has its high bit set, none is below 0x20 ((x - 0x20*ones) &^ x shows a
// byte below it, exactly at the first), none is 0x7f (adding one sets its high bit).
func printableASCII(x uint64, n int) bool {
	if n == 0 {
		return false
	}
	return (x|(x-0x20*ones)&^x|(x+ones))&highs&(uint64(1)<<(8*n)-1) == 0
}

// foldASCII returns the lowercase ASCII letter or the ASCII character r matches as
// strings.EqualFold matches them (Unicode simple folding: besides the ASCII capitals, only
// U+212A KELVIN SIGN folds to 'k' and U+017F LATIN SMALL LETTER LONG S to 's'), or -1.
func foldASCII(r rune) rune {
	switch {
	case r >= 'A' && r <= 'Z':
		return r + 'a' - 'A'
	case r < utf8.RuneSelf:
		return r
	case r == '\u212a':
		return 'k'
	case r == '\u017f':
		return 's'
	}
	return -1
}

// ascii reports whether b is all ASCII.
func ascii(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// asciiFoldEqual reports whether the ASCII b equals the lowercase name but for case.
func asciiFoldEqual(b []byte, name string) bool {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// decode decodes an escaped model's contents into the text buffer, stopping once it is too
// long to be a model.
func (p *Parser) decode(s []byte) ([]byte, error) {
	out := p.text[:0]
	for i := 0; i < len(s) && len(out) <= MaxModelLength; {
		r, next, err := jsonscan.NextRune(s, i)
		if err != nil {
			return nil, bodyError(err)
		}
		out = utf8.AppendRune(out, r)
		i = next
	}
	p.text = out
	return out, nil
}

// ValidModel reports whether a model name a client sent outside the body (header-routed
// mode's model header) is one ParseRequest would accept in a body: non-empty, at most
// MaxModelLength bytes, free of control bytes.
func ValidModel(m string) bool { return len(m) <= MaxModelLength && printable(m) }

// printable reports whether a model name is non-empty and free of control bytes, so it can
// be echoed in a response header (no CR/LF can reach a header value).
func printable(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// RewriteModel appends to dst the body with its model's value — at, the Request.ModelAt that
// parsing body gave — replaced by model as a JSON string (escaped as needed), and returns
// the result, whose length is the exact content-length. Nothing else of the body changes,
// and it is not parsed again.
func RewriteModel(dst, body []byte, at Span, model string) []byte {
	dst = append(dst, body[:at.Start]...)
	dst = jsonscan.AppendString(dst, model)
	return append(dst, body[at.End:]...)
}

// unsafeString views b as a string without copying. The string is valid while b is
// unchanged.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
