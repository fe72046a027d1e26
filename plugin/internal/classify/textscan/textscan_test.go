package textscan

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestIndexFold(t *testing.T) {
	cases := []struct {
		s, sub string // haystack and needle
		want   int    // expected index, -1 = absent
	}{
		{"Too Many Concurrent Requests", "concurrent", 9}, // ASCII case folding
		{"rate_limit_exceeded", "RATE_LIMIT", 0},          // needle upper case
		{"您当前使用该API的并发数过高", "并发数过高", 24},                  // multi-byte: exact bytes
		{"用户额度不足", "额度不足", 6},                             // marker inside a longer phrase
		{"abc", "", 0},                    // empty needle
		{"ab", "abc", -1},                 // needle longer than haystack
		{"aaaaab", "aab", 3},              // overlapping prefix
		{"CONCURRENCY", "concurrent", -1}, // near miss
		{"Ä", "ä", -1},                    // non-ASCII letters are not folded
		{"[at] end", "END", 5},            // match at the end
	}
	for _, c := range cases {
		if got := IndexFold(c.s, c.sub); got != c.want {
			t.Errorf("IndexFold(%q, %q) = %d, want %d", c.s, c.sub, got, c.want)
		}
		if got := ContainsFold(c.s, c.sub); got != (c.want >= 0) {
			t.Errorf("ContainsFold(%q, %q) = %v", c.s, c.sub, got)
		}
	}
}

func TestContainsAnyFoldAndEqualFold(t *testing.T) {
	if !ContainsAnyFold("Overloaded", []string{"", "busy", "OVERLOAD"}) {
		t.Error("ContainsAnyFold missed a folded needle")
	}
	if ContainsAnyFold("fine", []string{"", "bad"}) {
		t.Error("ContainsAnyFold matched nothing but returned true (empty needles must not match)")
	}
	if !EqualFold("Retry-After", "retry-after") || EqualFold("retry-after", "retry-afte") || EqualFold("a", "b") {
		t.Error("EqualFold")
	}
}

func TestUnescapeJSON(t *testing.T) {
	cases := []struct {
		in, want string // escaped input and decoded text
	}{
		{`{"message":"\u7528\u6237\u989d\u5ea6\u4e0d\u8db3"}`, `{"message":"用户额度不足"}`}, // Python-style escaped Chinese
		{`"\ud83d\ude00 ok"`, `"😀 ok"`},         // surrogate pair joined
		{`"\ud83d alone"`, "\"\uFFFD alone\""},  // lone high surrogate
		{`"\ude00"`, "\"\uFFFD\""},              // lone low surrogate
		{`a\nb\tc\"d\\e\/f`, "a\nb\tc\"d\\e/f"}, // one-letter escapes
		{`\u12`, `\u12`},                        // truncated escape kept
		{`\uZZZZ`, `\uZZZZ`},                    // bad hex kept
		{`\q`, `\q`},                            // unknown escape kept
		{`trailing\`, `trailing\`},              // backslash at the end
		{`\u0041\u00e9`, "Aé"},                  // one and two byte runes
	}
	for _, c := range cases {
		if got := string(UnescapeJSON(nil, []byte(c.in))); got != c.want {
			t.Errorf("UnescapeJSON(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestHasUnicodeEscape(t *testing.T) {
	cases := []struct {
		in   string // raw JSON text
		want bool   // whether a \u escape is present
	}{
		{`"\u989d"`, true},      // an escape
		{`"\\u989d"`, false},    // an escaped backslash followed by u
		{`"plain 额度不足"`, false}, // raw UTF-8
		{`\`, false},            // lone backslash
		{`\\\u0041`, true},      // an escaped backslash, then an escape
		{`a\"b\u`, true},        // an escape at the very end
		{`\\`, false},           // only an escaped backslash
	}
	for _, c := range cases {
		if got := HasUnicodeEscape([]byte(c.in)); got != c.want {
			t.Errorf("HasUnicodeEscape(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestAppendFolded(t *testing.T) {
	cases := []struct {
		in, want string // body and the folded text
	}{
		{`{"Error":"Too Many Concurrent"}`, `{"error":"too many concurrent"}`}, // ASCII folded
		{`{"msg":"\u5E76\u53D1 \u0041BC"}`, `{"msg":"并发 abc"}`},                // decoded, then folded
		{`\u00C9t\u00e9 ` + "\xc3\x89", "\u00c9t\u00e9 \u00c9"},                // escaped and raw É: decoded, never folded
	}
	for _, c := range cases {
		if got := string(AppendFolded(nil, []byte(c.in))); got != c.want {
			t.Errorf("AppendFolded(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	var buf [64]byte
	if n := testing.AllocsPerRun(10, func() { _ = AppendFolded(buf[:0], []byte("SHORT Body")) }); n != 0 {
		t.Errorf("AppendFolded into a large enough buffer allocated %v times", n)
	}
	if got := AppendFolded(nil, bytes.Repeat([]byte("A"), MaxScanBytes+5)); len(got) != MaxScanBytes || got[0] != 'a' {
		t.Errorf("AppendFolded did not cap or fold: len %d", len(got))
	}
}

func TestSearchableAndCap(t *testing.T) {
	raw := []byte(`{"error":{"message":"plain"}}`)
	if got := Searchable(raw); &got[0] != &raw[0] {
		t.Error("Searchable copied a body without escapes")
	}
	escaped := []byte(`{"msg":"\u989d\u5ea6\u4e0d\u8db3"}`)
	if got := Searchable(escaped); !bytes.Contains(got, []byte("额度不足")) {
		t.Errorf("Searchable did not decode: %q", got)
	}
	huge := bytes.Repeat([]byte("x"), MaxScanBytes+10)
	if len(Cap(huge)) != MaxScanBytes || len(Searchable(huge)) != MaxScanBytes {
		t.Error("Cap/Searchable did not cut at MaxScanBytes")
	}
	if String(nil) != "" || String([]byte("ab")) != "ab" {
		t.Error("String view")
	}
}

func FuzzUnescapeJSON(f *testing.F) {
	for _, s := range []string{`\u989d`, `\ud83d\ude00`, `\ud83d\u0041`, `\`, `\u`, `"a\"b"`, strings.Repeat(`\u`, 50)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := HasUnicodeEscape(in), hasUnicodeEscapeSlow(in); got != want {
			t.Fatalf("HasUnicodeEscape(%q) = %v, want %v", in, got, want)
		}
		out := UnescapeJSON(nil, in)
		// Decoding never grows text: every escape is at least as long as its UTF-8 form.
		if len(out) > len(in) {
			t.Fatalf("UnescapeJSON grew %d bytes to %d", len(in), len(out))
		}
		if utf8.Valid(in) && !utf8.Valid(out) {
			t.Fatalf("valid UTF-8 in, invalid out: %q -> %q", in, out)
		}
		if !HasUnicodeEscape(in) && !bytes.Contains(in, []byte(`\`)) && !bytes.Equal(in, out) {
			t.Fatalf("text without escapes changed: %q -> %q", in, out)
		}
	})
}

func BenchmarkContainsFoldMiss(b *testing.B) {
	body := strings.Repeat(`{"error":{"message":"Rate limit reached for requests","type":"requests"}}`, 8)
	b.ReportAllocs()
	for b.Loop() {
		if ContainsFold(body, "并发数过高") || ContainsFold(body, "concurrent request") {
			b.Fatal("unexpected match")
		}
	}
}

// hasUnicodeEscapeSlow is the obvious byte loop HasUnicodeEscape must agree with.
func hasUnicodeEscapeSlow(b []byte) bool {
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\\' {
			if b[i+1] == 'u' {
				return true
			}
			i++
		}
	}
	return false
}
