package testfixture

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"unicode/utf8"
)

// The JSON oracle: what encoding/json says of a text, by rules restated here from their
// sources rather than read from the code under test (jsonscan, llmapi).

// JSONDepthLimit is the nesting a request body may have: serde_json's default recursion
// limit (serde-rs/json src/de.rs), the limit the README states.
const JSONDepthLimit = 128

// ModelLimit is the longest model name a body may give, in bytes (the policy's limit on
// model names, the README's request rules).
const ModelLimit = 256

// routingKeys are the top-level keys Spillway reads or rewrites in a request body (design.md:
// "A body whose routing keys (model, stream) appear more than once, in any spelling, is a 400").
var routingKeys = [...]string{"model", "stream"}

// JSONDepth returns how deeply the JSON text b nests arrays and objects (0 for a scalar), by
// encoding/json's tokens; b must be json.Valid.
func JSONDepth(b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

// CleanText reports whether the JSON string literal raw (its quotes included) is text: its
// bytes are valid UTF-8 and encoding/json decodes it without replacing anything (an unpaired
// surrogate escape decodes to U+FFFD), so every U+FFFD it decodes to is one it spells.
func CleanText(raw []byte) bool {
	var s string
	if !utf8.Valid(raw) || json.Unmarshal(raw, &s) != nil {
		return false
	}
	return strings.Count(s, "\uFFFD") == spelledReplacements(raw)
}

// spelledReplacements counts the U+FFFD a JSON string literal spells, raw or as \ufffd.
func spelledReplacements(raw []byte) int {
	n := 0
	for i := 0; i < len(raw); i++ {
		switch {
		case raw[i] == '\\' && i+1 < len(raw):
			if raw[i+1] == 'u' && i+6 <= len(raw) && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
				n++
			}
			i++ // the escaped byte; a \u escape's hex digits skip themselves
		case bytes.HasPrefix(raw[i:], []byte("\uFFFD")):
			n++
			i += len("\uFFFD") - 1
		}
	}
	return n
}

// OracleRequest is encoding/json's reading of a request body by the README's rules.
type OracleRequest struct {
	OK     bool   // the body is accepted
	Why    string // why not
	Model  string // the top-level "model" (decoded)
	Stream bool   // the top-level "stream" is true
}

// ReadRequest reads body as the README says a request body is read: exactly one JSON object
// (json.Valid, an object first), nested at most JSONDepthLimit deep, whose top-level keys
// are text (CleanText) and name no routing key twice in any spelling (equal after decoding,
// ignoring case as strings.EqualFold does: Go's encoding/json and other case-insensitive
// decoders read "MODEL" as "model"), with a "model" that is text of 1 to ModelLimit bytes
// without control characters. "stream" is true only as the literal true; a null model is no
// model.
func ReadRequest(body []byte) OracleRequest {
	refuse := func(why string) OracleRequest { return OracleRequest{Why: why} }
	if !json.Valid(body) {
		return refuse("not json.Valid")
	}
	if JSONDepth(body) > JSONDepthLimit {
		return refuse("too deep")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return refuse("not an object")
	}
	var r OracleRequest
	var seen [len(routingKeys)]int
	var model json.RawMessage
	for dec.More() {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return refuse("key: " + err.Error())
		}
		key := tok.(string)
		raw := bytes.TrimLeft(body[before:dec.InputOffset()], " \t\r\n,")
		if !CleanText(raw) {
			return refuse("a key that is not text")
		}
		for i, k := range routingKeys {
			if strings.EqualFold(key, k) {
				if seen[i]++; seen[i] > 1 {
					return refuse("a routing key twice")
				}
			}
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return refuse("value: " + err.Error())
		}
		switch key {
		case "model":
			model = value
		case "stream":
			r.Stream = string(value) == "true"
		}
	}
	if tok, err := dec.Token(); tok != json.Delim('}') || err != nil {
		return refuse("object not closed")
	}
	if _, err := dec.Token(); err != io.EOF {
		return refuse("data after the object")
	}
	switch {
	case model == nil || string(model) == "null":
		return refuse("no model")
	case model[0] != '"':
		return refuse("model not a string")
	case !CleanText(model):
		return refuse("model not text")
	}
	if err := json.Unmarshal(model, &r.Model); err != nil {
		return refuse("model: " + err.Error())
	}
	if r.Model == "" || len(r.Model) > ModelLimit || strings.ContainsFunc(r.Model, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return refuse("model empty, too long or with a control character")
	}
	r.OK = true
	return r
}

// Hostile bodies (issue 18): nesting far past any limit, and routing keys given twice.

// Repeat returns prefix, n times unit, then suffix.
func Repeat(prefix, unit string, n int, suffix string) []byte {
	b := make([]byte, 0, len(prefix)+n*len(unit)+len(suffix))
	b = append(b, prefix...)
	for range n {
		b = append(b, unit...)
	}
	return append(b, suffix...)
}

// HostileBodies are request bodies of both families, for seeding fuzz corpora: the depth
// family at and past JSONDepthLimit, closed and not, and the duplicate family (a routing key
// twice in several spellings, and bodies that are not exactly one JSON object).
func HostileBodies() [][]byte {
	const lim = JSONDepthLimit
	// closed nests n levels deep, the body's object the first and an empty container the
	// last: unit opens a level, empty is the innermost, close closes a level.
	closed := func(unit, empty, close string, n int) []byte {
		return append(Repeat(`{"model":"gpt-4o","x":`, unit, n-2, empty), Repeat("", close, n-2, "}")...)
	}
	bodies := [][]byte{
		Repeat("", "[", 4096, ""),
		Repeat(`{"x":`, "[", 4096, ""),
		Repeat(`{"x":`, `{"a":`, 4096, ""),
		closed("[", "[]", "]", lim),   // exactly the limit: the body's object and 127 arrays
		closed("[", "[]", "]", lim+1), // one too many
		closed(`{"a":`, "{}", "}", lim),
		closed(`{"a":`, "{}", "}", lim+1),
		Repeat(`{"model":"gpt-4o","x":`, "[", lim-1, ""), // unclosed at the limit
		Repeat(`{"model":"gpt-4o","x":`, "[", lim, ""),   // unclosed past it
	}
	for _, s := range []string{
		`{"model":"gpt-4o","model":"o1-pro"}`,
		`{"model":"gpt-4o","mod\u0065l":"o1-pro"}`,
		`{"\u006dodel":"gpt-4o","model":"o1-pro"}`,
		`{"model":"gpt-4o","MODEL":"o1-pro"}`,
		`{"model":"gpt-4o","stream":false,"stream":true}`,
		`{"model":"gpt-4o","\u0073tream":true,"stream":false}`,
		`{"model":"gpt-4o","ſtream":true,"stream":false}`, // U+017F folds to s
		`{"model":"gpt-4o","metadata":{"model":"a","model":"b"}}`,
		"\xef\xbb\xbf{\"model\":\"gpt-4o\"}",
		`{"model":"gpt-4o"}{"model":"o1-pro"}`,
		`{"model":"gpt-4o"} x`,
		`{"model":"gpt-4o"}/* c */`,
		`{"model":"gpt-4o",/* c */"stream":true}`,
		`{"model":"gpt-4o","mod\ud800el":"o1-pro"}`,
		`{"model\udc00":"gpt-4o"}`,
		`{"model":"gpt-4o","a\ud83d\ude00":1}`,
		"{\"model\":\"gpt-4o\",\"mod\xc1\xa5l\":\"o1-pro\"}", // an overlong 'e'
		`{"model":"gpt\ud800-4o"}`,
		`{"model":"gpt-4o","x":tru}`,
		`{"model":"gpt-4o","x":01}`,
		`{"model":"gpt-4o","x":"\x"}`,
		`{"model":"gpt-4o","x":"\u12"}`,
	} {
		bodies = append(bodies, []byte(s))
	}
	return bodies
}

// Large bodies, for the request pass's benchmarks (issue 18's two 8 MiB shapes).

// LargeChatBody is a chat completion of about size bytes: one messages array of user and
// assistant turns (text with quotes, newlines and non-ASCII, as clients send it), the model
// first and the stream flag last.
func LargeChatBody(size int) []byte {
	const turn = `{"role":"user","content":"Summarise the \"quarterly\" report:\nrevenue rose 4.2% — see §3, Ünïcödé and 日本語 included."},` +
		`{"role":"assistant","content":"The report says revenue rose 4.2 %.\nNothing else changed."},`
	b := append(make([]byte, 0, size+len(turn)), `{"model":"gpt-4o","messages":[`...)
	for len(b) < size-len(turn) {
		b = append(b, turn...)
	}
	b = append(b[:len(b)-1], `],"temperature":0.7,"stream":true}`...)
	return b
}

// EscapedKeysBody is a body of n short top-level keys, each with an escape ("k\u0065y-…"),
// and the model last: about 84 bytes a key, so 100,000 keys make some 8 MiB.
func EscapedKeysBody(n int) []byte {
	b := append(make([]byte, 0, n*84+32), '{')
	for i := range n {
		b = append(b, `"k\u0065y-`...)
		b = append(b, byte('0'+i/100000%10), byte('0'+i/10000%10), byte('0'+i/1000%10), byte('0'+i/100%10),
			byte('0'+i/10%10), byte('0'+i%10))
		b = append(b, `":"a short value of the kind a client sends, forty-odd bytes",`...)
	}
	return append(b, `"model":"gpt-4o"}`...)
}
