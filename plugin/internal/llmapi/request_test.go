package llmapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func TestParseRequest(t *testing.T) {
	const lim = testfixture.JSONDepthLimit
	long := strings.Repeat("m", testfixture.ModelLimit)
	cases := []struct {
		name   string // what the body shows
		body   string // request body
		model  string // expected model ("" when an error is expected)
		stream bool   // expected stream flag
		err    error  // expected error
	}{
		{"chat completion", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "gpt-4o", false, nil},
		{"stream after messages", `{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}],"model":"gpt-4o","stream":true}`, "gpt-4o", true, nil},
		{"whitespace everywhere", " \r\n\t{ \"model\" : \"m\" , \"stream\" : true } \n", "m", true, nil},
		{"stream false", `{"model":"m","stream":false}`, "m", false, nil},
		{"stream not a bool is not a stream", `{"model":"m","stream":"yes"}`, "m", false, nil},
		{"escaped model", `{"model":"claude-\u0033-opus"}`, "claude-\u0033-opus", false, nil},
		{"escaped slash", `{"model":"openai\/gpt-4o"}`, "openai/gpt-4o", false, nil},
		{"unicode model", `{"model":"模型-1"}`, "模型-1", false, nil},
		{"a surrogate pair in the model", `{"model":"m-\ud83d\ude00"}`, "m-😀", false, nil},
		{"empty object", `{}`, "", false, ErrNoModel},

		// A routing key twice, in any spelling, whatever comes between.
		{"model twice", `{"model":"a","model":"b"}`, "", false, ErrDuplicateKey},
		{"model twice, the same", `{"model":"a","model":"a"}`, "", false, ErrDuplicateKey},
		{"the second escaped", `{"model":"a","mod\u0065l":"b"}`, "", false, ErrDuplicateKey},
		{"the first escaped", `{"\u006dodel":"a","model":"b"}`, "", false, ErrDuplicateKey},
		{"the second in capitals", `{"model":"a","MODEL":"b"}`, "", false, ErrDuplicateKey},
		{"escaped capitals", `{"model":"a","\u004dodel":"b"}`, "", false, ErrDuplicateKey},
		{"the second a null", `{"model":"a","model":null}`, "", false, ErrDuplicateKey},
		{"stream twice", `{"model":"m","stream":false,"stream":true}`, "", false, ErrDuplicateKey},
		{"stream with a long s", `{"model":"m","stream":false,"ſtream":true}`, "", false, ErrDuplicateKey},
		{"stream escaped", `{"model":"m","\u0073tream":true,"stream":false}`, "", false, ErrDuplicateKey},
		{"model in capitals alone is no model", `{"Model":"a"}`, "", false, ErrNoModel},
		{"a near miss is another key", `{"model":"a","models":"b","mode":"c","modeł":"d"}`, "a", false, nil},
		{"nested duplicates are not routing keys", `{"model":"a","metadata":{"model":"x","model":"y"}}`, "a", false, nil},
		{"another key twice is the upstream's", `{"model":"a","n":1,"n":2}`, "a", false, nil},

		// Exactly one JSON object.
		{"nested model is not the model", `{"metadata":{"model":"x"}}`, "", false, ErrNoModel},
		{"not JSON", `{"model":`, "", false, ErrNotJSON},
		{"the rest malformed", `{"model":"m","messages":[}`, "", false, ErrNotJSON},
		{"truncated before the model", `{"messages":[],"mod`, "", false, ErrNotJSON},
		{"trailing comma", `{"model":"m",}`, "", false, ErrNotJSON},
		{"array", `[{"model":"m"}]`, "", false, ErrNotJSON},
		{"empty body", ``, "", false, ErrNotJSON},
		{"only whitespace", " \n", "", false, ErrNotJSON},
		{"byte order mark", "\xef\xbb\xbf{\"model\":\"m\"}", "", false, ErrNotJSON},
		{"a comment inside", `{"model":"m",/* c */"stream":true}`, "", false, ErrNotJSON},
		{"a comment after", `{"model":"m"} // c`, "", false, ErrTrailingData},
		{"a second object", `{"model":"m"}{"model":"o1-pro"}`, "", false, ErrTrailingData},
		{"a raw control character", "{\"model\":\"m\",\"x\":\"a\x01b\"}", "", false, ErrNotJSON},
		{"a bad escape", `{"model":"m","x":"\q"}`, "", false, ErrNotJSON},
		{"a bad number", `{"model":"m","x":1.}`, "", false, ErrNotJSON},
		{"a bad literal", `{"model":"m","x":nul}`, "", false, ErrNotJSON},
		{"nested at the limit", `{"model":"m","x":` + strings.Repeat("[", lim-1) + strings.Repeat("]", lim-1) + `}`, "m", false, nil},
		{"nested past the limit", `{"model":"m","x":` + strings.Repeat("[", lim) + strings.Repeat("]", lim) + `}`, "", false, ErrTooDeep},

		// Keys and the model are text; other strings are the upstream's.
		{"an unpaired surrogate in a key", `{"model":"m","a\ud800":1}`, "", false, ErrInvalidText},
		{"a low surrogate first in a key", `{"\udc00\ud800":1,"model":"m"}`, "", false, ErrInvalidText},
		{"invalid UTF-8 in a key", "{\"model\":\"m\",\"a\xff\":1}", "", false, ErrInvalidText},
		{"an overlong e in a key", "{\"model\":\"m\",\"mod\xc1\xa5l\":\"o1-pro\"}", "", false, ErrInvalidText},
		{"an encoded surrogate in a key", "{\"model\":\"m\",\"\xed\xa0\x80\":1}", "", false, ErrInvalidText},
		{"an unpaired surrogate in the model", `{"model":"m\ud800"}`, "", false, ErrInvalidText},
		{"invalid UTF-8 in the model", "{\"model\":\"m\xc3\"}", "", false, ErrInvalidText},
		{"an unpaired surrogate in content", `{"model":"m","messages":[{"content":"\ud83d"}]}`, "m", false, nil},
		{"invalid UTF-8 in content", "{\"model\":\"m\",\"messages\":[{\"content\":\"\xff\"}]}", "m", false, nil},

		// The model's own rules.
		{"null model", `{"model":null}`, "", false, ErrNoModel},
		{"number model", `{"model":4}`, "", false, ErrModelNotText},
		{"object model", `{"model":{"a":1}}`, "", false, ErrModelNotText},
		{"empty model", `{"model":""}`, "", false, ErrModelNotPrint},
		{"CRLF injection", `{"model":"gpt-4o\r\nset-cookie: x=1"}`, "", false, ErrModelNotPrint},
		{"NUL", `{"model":"a\u0000b"}`, "", false, ErrModelNotPrint},
		{"DEL", "{\"model\":\"a\x7fb\"}", "", false, ErrModelNotPrint},
		{"too long", `{"model":"` + long + `m"}`, "", false, ErrModelTooLong},
		{"too long once decoded", `{"model":"` + strings.Repeat(`\u006d`, testfixture.ModelLimit+1) + `"}`, "", false, ErrModelTooLong},
		{"longest allowed", `{"model":"` + long + `"}`, long, false, nil},
		{"longest allowed, escaped", `{"model":"` + strings.Repeat(`\u006d`, testfixture.ModelLimit) + `"}`, long, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(c.body))
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			if req.Model != c.model || req.Stream != c.stream {
				t.Fatalf("got model %q stream %v, want %q %v", req.Model, req.Stream, c.model, c.stream)
			}
			// The oracle agrees with the case: it is a case of the rules, not of this code.
			if o := testfixture.ReadRequest([]byte(c.body)); o.OK != (c.err == nil) || o.OK && (o.Model != c.model || o.Stream != c.stream) {
				t.Fatalf("encoding/json's reading disagrees: %+v", o)
			}
		})
	}
}

func TestParseStopsWhereTheBodyIsRefused(t *testing.T) {
	const lim = testfixture.JSONDepthLimit
	chat := testfixture.LargeChatBody(8 << 20)
	lastDup := append(bytes.Clone(chat[:len(chat)-1]), `,"model":"o1-pro"}`...)
	cases := []struct {
		name    string // the body
		body    []byte // 8 MiB of it
		err     error  // the refusal
		stopped int    // where Parse stops reading
	}{
		{`{"x": and 8 MiB of [: at the bracket that opens level limit+1`, testfixture.Repeat(`{"x":`, "[", 8<<20, ""),
			ErrTooDeep, len(`{"x":`) + lim - 1},
		{`8 MiB of {"a":: at the level limit+1`, testfixture.Repeat("", `{"a":`, 8<<20/5, ""), ErrTooDeep, lim * len(`{"a":`)},
		{"8 MiB of [: at the first byte", testfixture.Repeat("", "[", 8<<20, ""), ErrNotJSON, 0},
		{"a string that does not end: at the end", testfixture.Repeat(`{"model":"m","x":"`, "a", 8<<20, ""), ErrNotJSON, 8<<20 + 18},
		{"the model again at the end: read to it", lastDup, ErrDuplicateKey, len(lastDup) - len(`":"o1-pro"}`)},
		{"a whole body: read whole", chat, nil, len(chat)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Parser
			_, err := p.Parse(c.body)
			if !errors.Is(err, c.err) || p.Stopped() != c.stopped {
				t.Fatalf("%v at byte %d, want %v at byte %d", err, p.Stopped(), c.err, c.stopped)
			}
		})
	}
}

func TestRewriteModel(t *testing.T) {
	body := []byte(` { "messages":[{"role":"user","content":"the model is gpt-4o"}], "model" : "gpt\u002d4o" ,"metadata":{"model":"keep"}}`)
	orig := string(body)
	req, err := ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"openai/gpt-4o", `a "quoted" \ model`, "模型\u2028"} {
		out := RewriteModel(nil, body, req.ModelAt, target)
		if string(body) != orig {
			t.Fatal("RewriteModel modified its input")
		}
		var got, want map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("rewritten body is not JSON: %v: %s", err, out)
		}
		_ = json.Unmarshal(body, &want)
		want["model"] = target
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("rewritten for %q: %s; want only the top-level model changed", target, out)
		}
		if r, err := ParseRequest(out); err != nil || r.Model != target {
			t.Fatalf("the rewritten body parses to %q, %v", r.Model, err)
		}
	}
}

func TestValidModelAgreesWithParseRequest(t *testing.T) {
	cases := []struct {
		name  string // what the name shows
		model string // the model a client sent in a header
		valid bool   // accepted
	}{
		{"plain", "gpt-4o", true},
		{"with a slash", "openai/gpt-4o", true},
		{"unicode", "模型-1", true},
		{"longest allowed", strings.Repeat("m", MaxModelLength), true},
		{"empty", "", false},
		{"too long", strings.Repeat("m", MaxModelLength+1), false},
		{"tab", "gpt\t4o", false},
		{"DEL", "gpt\x7f", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ValidModel(c.model); got != c.valid {
				t.Fatalf("ValidModel(%q) = %v, want %v", c.model, got, c.valid)
			}
			// The same name in a body: ParseRequest accepts exactly the valid ones.
			quoted, _ := json.Marshal(c.model)
			if _, err := ParseRequest([]byte(`{"model":` + string(quoted) + `}`)); (err == nil) != c.valid {
				t.Fatalf("ParseRequest of a body naming %q: %v, want valid=%v", c.model, err, c.valid)
			}
		})
	}
}

// TestFoldASCIIIsUnicodeSimpleFolding holds foldASCII to the unicode package's folding
// orbits: every character in an ASCII character's orbit folds to it, nothing else does.
func TestFoldASCIIIsUnicodeSimpleFolding(t *testing.T) {
	want := map[rune]rune{}
	for c := rune(0); c < utf8.RuneSelf; c++ {
		lower := unicode.ToLower(c)
		for r := unicode.SimpleFold(c); r != c; r = unicode.SimpleFold(r) {
			want[r] = lower
		}
		want[c] = lower
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		w, ok := want[r]
		if !ok {
			w = -1
		}
		if got := foldASCII(r); got != w {
			t.Fatalf("foldASCII(%U) = %d, want %d", r, got, w)
		}
	}
}

func TestParseAllocatesNothingPerKey(t *testing.T) {
	var p Parser
	for name, body := range map[string][]byte{
		"escaped keys":     testfixture.EscapedKeysBody(1000),
		"an escaped model": []byte(`{"mod\u0065l":"gpt\u002d4o","stream":true}`),
		"a refused body":   []byte(`{"model":"a","MODEL":"b"}`),
	} {
		p.Parse(body) // grows the text buffer once
		if n := testing.AllocsPerRun(20, func() { p.Parse(body) }); n != 0 {
			t.Errorf("%s: Parse allocates %.0f times", name, n)
		}
	}
}

// parseErrors are the errors Parse may return.
var parseErrors = []error{ErrNotJSON, ErrTrailingData, ErrTooDeep, ErrDuplicateKey, ErrInvalidText, ErrNoModel,
	ErrModelNotText, ErrModelTooLong, ErrModelNotPrint}

// FuzzParseRequest holds Parse to encoding/json's reading of the same body by the same rules
// (testfixture.ReadRequest): the same bodies accepted, with the same model and stream flag,
// the model's span holding the model.
func FuzzParseRequest(f *testing.F) {
	for _, b := range testfixture.HostileBodies() {
		f.Add(b)
	}
	for _, s := range []string{`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"a\u0062c","stream":false}`, `{"Model":"x","model":"y"}`, `{"model":"m","x":[1,{"y":null}]}`} {
		f.Add([]byte(s))
	}
	var p Parser
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := p.Parse(body)
		o := testfixture.ReadRequest(body)
		if (err == nil) != o.OK {
			t.Fatalf("Parse(%q): %v; encoding/json: ok %v (%s)", body, err, o.OK, o.Why)
		}
		if err != nil {
			for _, e := range parseErrors {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("Parse(%q): %v is none of its errors", body, err)
		}
		if req.Model != o.Model || req.Stream != o.Stream {
			t.Fatalf("Parse(%q) = %q %v; encoding/json %q %v", body, req.Model, req.Stream, o.Model, o.Stream)
		}
		var m string
		if err := json.Unmarshal(body[req.ModelAt.Start:req.ModelAt.End], &m); err != nil || m != req.Model {
			t.Fatalf("Parse(%q): the model's span %v holds %q, %v", body, req.ModelAt, m, err)
		}
	})
}

// FuzzRewriteModel: a body rewritten for any model decodes (encoding/json) to the client's
// body but for its top-level model, which is the target's as encoding/json encodes it.
func FuzzRewriteModel(f *testing.F) {
	for _, b := range testfixture.HostileBodies() {
		f.Add(b, "openai/gpt-4o")
	}
	f.Add([]byte(`{"model":"gpt-4o","model_x":1,"messages":[{"model":"no"}]}`), "a\"b\\c\u2028\xff")
	f.Add([]byte(` {"stream":true, "model" : "g\u0070t" } `), "")
	f.Fuzz(func(t *testing.T, body []byte, model string) {
		req, err := ParseRequest(body)
		if err != nil {
			return
		}
		out := RewriteModel(nil, body, req.ModelAt, model)
		var got, want map[string]any
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("RewriteModel(%q, %q) = %q: not JSON: %v", body, model, out, err)
		}
		dec = json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		encoded, _ := json.Marshal(model)
		var target string
		_ = json.Unmarshal(encoded, &target)
		want["model"] = target
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("RewriteModel(%q, %q) = %q: decodes to %v, want %v", body, model, out, got, want)
		}
		if r, err := ParseRequest(out); ValidModel(model) && utf8.ValidString(model) && (err != nil || r.Model != model) {
			t.Fatalf("RewriteModel(%q, %q) = %q parses to %q, %v", body, model, out, r.Model, err)
		}
	})
}

// BenchmarkParseRequest reads a chat completion's model and stream flag: a short body (the
// success path benchmark's), one whose stream flag follows 1.2 kB of messages, and issue
// 18's two 8 MiB shapes (one large messages array; 100,000 short escaped top-level keys).
// Each is run beside bytes.IndexByte over the same bytes, in the same run: the floor of any
// pass over them.
func BenchmarkParseRequest(b *testing.B) {
	bodies := []struct {
		name string
		body []byte
	}{
		{"short", []byte(`{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hello"}]}`)},
		{"long", []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 200) + `"}],"stream":true}`)},
		{"messages-8MiB", testfixture.LargeChatBody(8 << 20)},
		{"escaped-keys-100k", testfixture.EscapedKeysBody(100_000)},
	}
	for _, c := range bodies {
		b.Run(c.name+"/pass", func(b *testing.B) {
			var p Parser
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if r, err := p.Parse(c.body); err != nil || r.Model != "gpt-4o" {
					b.Fatal(r, err)
				}
			}
		})
		b.Run(c.name+"/indexbyte", func(b *testing.B) { benchIndexByte(b, c.body) })
	}
}

// BenchmarkRefuse is what refusing an 8 MiB body costs: nested past the limit (refused
// after limit+1 levels), and refused only at its end (a string that never ends; the model
// again as the last key), beside bytes.IndexByte over the same bytes.
func BenchmarkRefuse(b *testing.B) {
	chat := testfixture.LargeChatBody(8 << 20)
	bodies := []struct {
		name string
		body []byte
		err  error
	}{
		{"unclosed-brackets", testfixture.Repeat(`{"x":`, "[", 8<<20, ""), ErrTooDeep},
		{"unterminated-string", testfixture.Repeat(`{"model":"m","x":"`, "a", 8<<20, ""), ErrNotJSON},
		{"duplicate-last", append(chat[:len(chat)-1:len(chat)-1], `,"model":"o1-pro"}`...), ErrDuplicateKey},
	}
	for _, c := range bodies {
		b.Run(c.name+"/pass", func(b *testing.B) {
			var p Parser
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if _, err := p.Parse(c.body); !errors.Is(err, c.err) {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/indexbyte", func(b *testing.B) { benchIndexByte(b, c.body) })
	}
}

func benchIndexByte(b *testing.B, body []byte) {
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if bytes.IndexByte(body, 0) >= 0 {
			b.Fatal("a NUL")
		}
	}
}
