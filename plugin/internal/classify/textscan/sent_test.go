package textscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSentContains(t *testing.T) {
	cases := []struct {
		name   string // what the row shows
		sent   Sent   // what the client sent
		phrase string // the marker looked for
		want   bool   // whether it counts as sent
	}{
		{"plain, ASCII case folded", Sent{Body: []byte(`{"model":"GPT-5-Insufficient_Quota"}`)}, "insufficient_quota", true},
		{"absent", Sent{Body: []byte(`{"model":"gpt-5","messages":[]}`)}, "insufficient_quota", false},
		{"\\u-escaped letter, as a JSON decoder reads it", Sent{Body: []byte(`{"model":"gpt-5-\u0069nsufficient_quota"}`)}, "insufficient_quota", true},
		{"the phrase runs across escapes", Sent{Body: []byte(`"payment\u0020required"`)}, "payment required", true},
		{"an escaped quote inside the phrase", Sent{Body: []byte(`"say \"hi\" now"`)}, `say "hi"`, true},
		{"an escaped backslash is not an escape", Sent{Body: []byte(`"\\u0069nsufficient_quota"`)}, "insufficient_quota", false},
		{"Chinese raw", Sent{Body: []byte(`{"messages":[{"content":"用户额度不足"}]}`)}, "额度不足", true},
		{"Chinese \\u-escaped", Sent{Body: []byte(`"\u989d\u5ea6\u4e0d\u8db3"`)}, "额度不足", true},
		{"non-ASCII letters are not folded", Sent{Body: []byte(`"Ä"`)}, "ä", false},
		{"KMP: a failed partial match restarts inside it", Sent{Body: []byte(`"aaaab"`)}, "aaab", true},
		{"KMP: overlapping borders", Sent{Body: []byte(`"abababca"`)}, "ababca", true},
		{"at the very end", Sent{Body: []byte(`xx payment required`)}, "payment required", true},
		{"one byte short at the end", Sent{Body: []byte(`xx payment require`)}, "payment required", false},
		{"the model alone (header-routed, before the body)", Sent{Model: "gpt-5 Payment Required"}, "payment required", true},
		{"a header value", Sent{Headers: [][2]string{{"openai-organization", "org-insufficient_quota"}}}, "insufficient_quota", true},
		{"the path's query", Sent{Headers: [][2]string{{":path", "/v1/chat/completions?x=account_deactivated"}}}, "account_deactivated", true},
		{"a path is not percent-decoded (nor is its echo)", Sent{Headers: [][2]string{{":path", "/v1?x=account%20suspended"}}}, "account suspended", false},
		{"header values are plain text, not JSON", Sent{Headers: [][2]string{{"x-note", `\u0069nsufficient_quota`}}}, "insufficient_quota", false},
		{"nothing sent", Sent{}, "insufficient_quota", false},
		{"longer than any marker: taken as sent", Sent{Body: []byte(`{}`)}, strings.Repeat("x", MaxNeedleBytes+1), true},
		{"the longest marker fits", Sent{Body: []byte(strings.Repeat("y", MaxNeedleBytes))}, strings.Repeat("Y", MaxNeedleBytes), true},
	}
	for _, c := range cases {
		if got := c.sent.Contains(c.phrase); got != c.want {
			t.Errorf("%s: Contains(%q) = %v, want %v", c.name, c.phrase, got, c.want)
		}
	}
}

func TestEchoReadsEachPhraseOnceWithinItsBound(t *testing.T) {
	var nilEcho *Echo
	if nilEcho.Echoed("anything") {
		t.Fatal("a nil Echo knows no request: nothing is echoed")
	}
	body := []byte(`{"model":"gpt-5-payment required"}`)
	e := NewEcho(Sent{Body: body})
	if !e.Echoed("payment required") || e.Echoed("account suspended") || !e.Echoed("payment required") {
		t.Fatal("Echoed disagrees with the body")
	}
	if e.scanned != 2*len(body) {
		t.Fatalf("read %d bytes, want %d: a phrase already read is not read again", e.scanned, 2*len(body))
	}
	// A body of a third of the bound: the first look-up, and two more within it.
	third := MaxEchoScanBytes / 3
	e = NewEcho(Sent{Body: append(bytes.Repeat([]byte(" "), third-len(body)), body...)})
	for i, phrase := range []string{"payment required", "account suspended", "insufficient_quota"} {
		if got, want := e.Echoed(phrase), i == 0; got != want {
			t.Fatalf("look-up %d (%q) within the bound: %v, want %v", i, phrase, got, want)
		}
	}
	if !e.Echoed("absent past the bound") {
		t.Fatal("past MaxEchoScanBytes a phrase is taken as sent, unread")
	}
	if e.Echoed("account suspended") {
		t.Fatal("a phrase read before the bound keeps its answer")
	}
	// A body over the whole bound still gets its first look-up.
	e = NewEcho(Sent{Body: append(bytes.Repeat([]byte(" "), MaxEchoScanBytes), body...)})
	if e.Echoed("account suspended") || !e.Echoed("payment required") {
		t.Fatal("the first look-up must read even a body over the bound; the second is taken as sent")
	}
}

// FuzzSentContains checks the one-pass search against the plain one over the decoded text.
func FuzzSentContains(f *testing.F) {
	for _, s := range [][2]string{
		{`{"model":"gpt-5-\u0069nsufficient_quota"}`, "insufficient_quota"},
		{`"\ud83d\ude00 \ud83d x\u12 \\u0041 \q"`, "😀"},
		{`aaaaab`, "aab"}, {`abababca`, "ababca"}, {`\u00e9t\u00e9`, "été"}, {"", "x"},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	f.Fuzz(func(t *testing.T, body []byte, phrase string) {
		if len(phrase) > MaxNeedleBytes {
			phrase = phrase[:MaxNeedleBytes]
		}
		want := ContainsFold(String(UnescapeJSON(nil, body)), phrase)
		s := Sent{Body: body}
		if got := s.Contains(phrase); got != want {
			t.Fatalf("Contains(%q, %q) = %v, the decoded text says %v", body, phrase, got, want)
		}
		if got, want := indexKMP(String(body), phrase, false), ContainsFold(String(body), phrase); got != want {
			t.Fatalf("plain indexKMP(%q, %q) = %v, IndexFold says %v", body, phrase, got, want)
		}
	})
}

// FuzzUnescapeJSONAgainstEncodingJSON checks the decoding against encoding/json on every valid JSON string
// without \b or \f (which UnescapeJSON turns into spaces) and of valid UTF-8 (encoding/json
// replaces invalid bytes, UnescapeJSON keeps them).
func FuzzUnescapeJSONAgainstEncodingJSON(f *testing.F) {
	for _, s := range []string{`a\nb\tc\"d\\e\/f`, `\u7528\u6237`, `\ud83d\ude00`, `\ud83d`, `\ude00x`, `\u00E9`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want string
		if !utf8.ValidString(s) || strings.Contains(s, `\b`) || strings.Contains(s, `\f`) ||
			json.Unmarshal([]byte(`"`+s+`"`), &want) != nil {
			return
		}
		if got := UnescapeJSON(nil, []byte(s)); !bytes.Equal(got, []byte(want)) {
			t.Fatalf("UnescapeJSON(%q) = %q, encoding/json says %q", s, got, want)
		}
	})
}

// sentBody is a chat request of about size bytes: prose with JSON escapes in every message,
// none of the phrases the benchmarks look for.
func sentBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-5","messages":[`)
	msg := `{"role":"user","content":"Summarise the quarterly report, line by line.\nKeep the tables.\t\"Totals\" go last; caf\u00e9 receipts in EUR."},`
	for b.Len() < size {
		b.WriteString(msg)
	}
	b.WriteString(`{"role":"user","content":"end"}]}`)
	return b.Bytes()
}

// BenchmarkSentContains8MiB is the cost of one look-up on the largest request body the
// default maxRequestBodyBytes admits: a phrase that is not there, read to the end. An error
// body pays it once per distinct matched phrase, within MaxEchoScanBytes (four times here).
func BenchmarkSentContains8MiB(b *testing.B) {
	s := Sent{Body: sentBody(8 << 20)}
	b.SetBytes(int64(len(s.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if s.Contains("insufficient_quota") {
			b.Fatal("found")
		}
	}
}

// BenchmarkSentContains8MiBAdversarial is the same look-up on a body built against it: the
// phrase's first byte and near-miss prefixes everywhere, and escapes that must be decoded.
func BenchmarkSentContains8MiBAdversarial(b *testing.B) {
	unit := `insufficient_quot \u0069nsufficient_quot iiiiiiiii \\u0069 `
	s := Sent{Body: []byte(strings.Repeat(unit, (8<<20)/len(unit)))}
	b.SetBytes(int64(len(s.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if s.Contains("insufficient_quota") {
			b.Fatal("found")
		}
	}
}
