package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func TestValid(t *testing.T) {
	const lim = testfixture.JSONDepthLimit
	cases := []struct {
		name string // what the text shows
		text string // the JSON text
		err  error  // expected error
		at   int    // where Value stops on an error (-1: not checked)
	}{
		{"object", `{"a":[1,-2.5e+3,"x",true,false,null,{}],"b":{}}`, nil, 0},
		{"scalar", ` "x" `, nil, 0},
		{"every escape", `"\" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00"`, nil, 0},
		{"a lone surrogate is grammar (RFC 8259 §8.2)", `"\ud800"`, nil, 0},
		{"invalid UTF-8 is not the grammar's", "\"\xff\"", nil, 0},
		{"empty", ``, ErrSyntax, 0},
		{"byte order mark", "\xef\xbb\xbf{}", ErrSyntax, 0},
		{"comment", `{} // c`, ErrTrailing, -1},
		{"comment inside", `{/* c */}`, ErrSyntax, 1},
		{"two values", `{}{}`, ErrTrailing, -1},
		{"trailing comma", `[1,]`, ErrSyntax, 3},
		{"trailing comma in an object", `{"a":1,}`, ErrSyntax, 7},
		{"missing colon", `{"a" 1}`, ErrSyntax, 5},
		{"unquoted key", `{a:1}`, ErrSyntax, 1},
		{"mismatched bracket", `[1}`, ErrSyntax, 2},
		{"leading zero", `01`, ErrTrailing, -1},
		{"leading zero inside", `[01]`, ErrSyntax, 2},
		{"bare minus", `[-]`, ErrSyntax, 2},
		{"dot without digits", `[1.]`, ErrSyntax, 3},
		{"exponent without digits", `[1e+]`, ErrSyntax, 4},
		{"plus sign", `[+1]`, ErrSyntax, 1},
		{"NaN", `[NaN]`, ErrSyntax, 1},
		{"short literal", `[tru]`, ErrSyntax, 1},
		{"literal in capitals", `[True]`, ErrSyntax, 1},
		{"literal run on", `[truex]`, ErrSyntax, 5},
		{"raw control character", "[\"a\tb\"]", ErrSyntax, 3},
		{"raw DEL is allowed", "[\"a\x7fb\"]", nil, 0},
		{"unknown escape", `["\x"]`, ErrSyntax, 2},
		{"short \\u", `["\u12"]`, ErrSyntax, 2},
		{"unterminated string", `["abc`, ErrSyntax, 5},
		{"unclosed", `[[1]`, ErrSyntax, 4},
		{"single quotes", `['a']`, ErrSyntax, 1},
		{"at the limit", strings.Repeat("[", lim) + strings.Repeat("]", lim), nil, 0},
		{"one past the limit", strings.Repeat("[", lim+1) + strings.Repeat("]", lim+1), ErrTooDeep, lim},
		{"objects at the limit", strings.Repeat(`{"a":`, lim-1) + "{}" + strings.Repeat("}", lim-1), nil, 0},
		{"objects past the limit", strings.Repeat(`{"a":`, lim) + "{}" + strings.Repeat("}", lim), ErrTooDeep, lim * 5},
		{"8 MiB of [ stops after limit+1 bytes", strings.Repeat("[", 8<<20), ErrTooDeep, lim},
		{`8 MiB of {"a": stops at the level too many`, strings.Repeat(`{"a":`, 8<<20/5), ErrTooDeep, lim * 5},
		{"wide is not deep", "[" + strings.Repeat("[],", 10_000) + "[]]", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(c.text)
			if err := Valid(b); !errors.Is(err, c.err) {
				t.Fatalf("Valid: %v, want %v", err, c.err)
			}
			if c.err != nil && c.at >= 0 {
				if at, err := Value(b, SkipSpace(b, 0), 0); at != c.at || !errors.Is(err, c.err) {
					t.Fatalf("Value stops at %d with %v, want %d with %v", at, err, c.at, c.err)
				}
			}
			if want := json.Valid(b) && testfixture.JSONDepth(b) <= lim; want != (c.err == nil) {
				t.Fatalf("the case disagrees with encoding/json (valid %v)", want)
			}
		})
	}
}

func TestValueCountsTheLevelsAlreadyOpen(t *testing.T) {
	b := []byte(strings.Repeat("[", testfixture.JSONDepthLimit-1) + strings.Repeat("]", testfixture.JSONDepthLimit-1))
	if _, err := Value(b, 0, 1); err != nil {
		t.Fatalf("inside one open level: %v", err)
	}
	if at, err := Value(b, 0, 2); !errors.Is(err, ErrTooDeep) || at != testfixture.JSONDepthLimit-2 {
		t.Fatalf("inside two open levels: %v at %d, want ErrTooDeep at %d", err, at, testfixture.JSONDepthLimit-2)
	}
}

func TestValidDoesNotAllocate(t *testing.T) {
	b := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"h\u00e9llo \"you\""}],"n":-1.5e3,"s":true}`)
	if n := testing.AllocsPerRun(100, func() { _ = Valid(b) }); n != 0 {
		t.Fatalf("Valid allocates %.0f times", n)
	}
}

// FuzzValidAgreesWithEncodingJSON: Valid accepts exactly what json.Valid accepts nested at
// most the limit deep, and String finds the string's end where encoding/json does.
func FuzzValidAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[1,2]`, `"\ud83d\ude00"`, `-0.5E-7`, `{"a":[true,false,null]}`, ` 1 `,
		"\"\x00\"", `[1,]`, `01`, `{"a" 1}`, `"\u00zz"`, "\xef\xbb\xbf1", `[] //`} {
		f.Add([]byte(s))
	}
	for _, b := range testfixture.HostileBodies() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Valid(b)
		want := json.Valid(b) && testfixture.JSONDepth(b) <= testfixture.JSONDepthLimit
		if (err == nil) != want {
			t.Fatalf("Valid(%q) = %v; encoding/json: valid and not too deep %v", b, err, want)
		}
		if err != nil && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrTooDeep) && !errors.Is(err, ErrTrailing) {
			t.Fatalf("Valid(%q) = %v: not one of the package's errors", b, err)
		}
	})
}

// FuzzTextAgreesWithEncodingJSON: for a string String accepts, AppendText refuses exactly
// what encoding/json decodes with a replacement (invalid UTF-8, an unpaired surrogate) and
// otherwise decodes what encoding/json decodes.
func FuzzTextAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{`"plain"`, `"\u00e9\n\t\"\\\/"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00\ud800"`,
		`"\ud800\u0041"`, `"\uD83D\uDE00"`, "\"\xed\xa0\x80\"", "\"\xc1\xa5\"", "\"\xff\"", `"\ufffd"`,
		"\"\uFFFD\"", `"\\ud800"`, `"\ud83d\ude00\ud800"`, `"a\ud83d"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < 2 || raw[0] != '"' {
			return
		}
		end, _, err := String(raw, 1)
		if err != nil || end != len(raw)-1 {
			return // not one string literal
		}
		got, err := AppendText(nil, raw[1:end])
		clean := testfixture.CleanText(raw)
		if (err == nil) != clean {
			t.Fatalf("AppendText(%q): %v; encoding/json decodes it cleanly: %v", raw, err, clean)
		}
		if err != nil {
			if !errors.Is(err, ErrText) {
				t.Fatalf("AppendText(%q): %v, want ErrText", raw, err)
			}
			return
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil || string(got) != want {
			t.Fatalf("AppendText(%q) = %q; encoding/json %q, %v", raw, got, want, err)
		}
	})
}

// AppendString must decode to exactly what encoding/json's own encoding decodes to.
func FuzzAppendStringMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uote\back`, "\x00\x1f\x7f", "tab\tnl\ncr\r",
		"\u2028\u2029", "\xff\xfe", "é\xc3", "日本語", "<script>&amp;", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mine := AppendString(nil, s)
		var gotMine string
		if err := json.Unmarshal(mine, &gotMine); err != nil {
			t.Fatalf("AppendString(%q) = %s: not JSON: %v", s, mine, err)
		}
		ref, _ := json.Marshal(s)
		var gotRef string
		if err := json.Unmarshal(ref, &gotRef); err != nil {
			t.Fatal(err)
		}
		if gotMine != gotRef {
			t.Fatalf("AppendString(%q) decodes to %q, encoding/json to %q", s, gotMine, gotRef)
		}
	})
}

// BenchmarkValid checks an 8 MiB chat body (one large messages array), against
// bytes.IndexByte over the same bytes: the floor any pass over them costs.
func BenchmarkValid(b *testing.B) {
	body := testfixture.LargeChatBody(8 << 20)
	b.Run("valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if err := Valid(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("indexbyte", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if bytes.IndexByte(body, 0) >= 0 {
				b.Fatal("NUL")
			}
		}
	})
}
