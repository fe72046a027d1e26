package policies

import (
	"path"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern string // model glob
		model   string // requested model
		want    bool   // matches
	}{
		{"gpt-4o", "gpt-4o", true},
		{"gpt-4o", "gpt-4o-mini", false},
		{"claude-*", "claude-3-5-sonnet", true},
		{"claude-*", "claude-", true},
		{"claude-*", "claude", false},
		{"*", "", true},
		{"*-mini", "gpt-4o-mini", true},
		{"*-mini", "gpt-4o-mini-x", false},
		{"openai/*", "openai/gpt-4o", true},
		{"*/gpt-4o", "azure/openai/gpt-4o", true}, // '*' crosses '/'
		{"gpt-?o", "gpt-4o", true},
		{"gpt-?o", "gpt-o", false},
		{"gpt-?", "gpt-é", true}, // '?' is one character, not one byte
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "abcabc", true},
		{"a*b*c", "acb", false},
		{"a**b", "ab", true},
		{"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"o[134]-mini", "o3-mini", true},
		{"o[134]-mini", "o2-mini", false},
		{"o[1-3]", "o2", true},
		{"o[!1-3]", "o2", false},
		{"o[^1-3]", "o4", true},
		{"[]a]", "]", false}, // ']' first closes an empty class: invalid, see TestGlobCompileErrors
		{`gpt\*`, "gpt*", true},
		{`gpt\*`, "gpt-4", false},
		{`[\]]`, "]", true},
		{"模型-*", "模型-大", true},
	}
	for _, tt := range tests {
		g, err := CompileGlob(tt.pattern)
		if err != nil {
			if tt.pattern == "[]a]" {
				continue
			}
			t.Fatalf("CompileGlob(%q): %v", tt.pattern, err)
		}
		if got := g.Match(tt.model); got != tt.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tt.pattern, tt.model, got, tt.want)
		}
		if g.String() != tt.pattern {
			t.Errorf("String() = %q", g.String())
		}
	}
}

func TestGlobCompileErrors(t *testing.T) {
	tests := []struct {
		pattern string // invalid glob
		want    error  // error
	}{
		{"", errGlobEmpty},
		{`gpt\`, errGlobTrailingEsc},
		{"gpt-[4", errGlobUnclosed},
		{"gpt-[", errGlobUnclosed},
		{"gpt-[]", errGlobEmptyClass},
		{"[!]", errGlobEmptyClass},
		{"[z-a]", errGlobBadRange},
		{`[a\`, errGlobUnclosed},
		{"gpt\x00", errGlobControlChars},
		{"gpt\xff", errGlobInvalidUTF8},
	}
	for _, tt := range tests {
		if _, err := CompileGlob(tt.pattern); err != tt.want {
			t.Errorf("CompileGlob(%q) = %v, want %v", tt.pattern, err, tt.want)
		}
	}
}

// TestGlobAgreesWithPathMatch compares with path.Match on names without '/', where the
// two syntaxes agree.
func TestGlobAgreesWithPathMatch(t *testing.T) {
	patterns := []string{"a*", "*b", "a?c", "[ab]*", "[^a]?", "*x*y*", "a[b-d]e"}
	names := []string{"", "a", "ab", "abc", "aXc", "bxy", "xbyz", "ace", "ade", "aee", "ba"}
	for _, p := range patterns {
		g := MustCompileGlob(p)
		for _, n := range names {
			want, _ := path.Match(p, n)
			if got := g.Match(n); got != want {
				t.Errorf("%q.Match(%q) = %v, path.Match says %v", p, n, got, want)
			}
		}
	}
}

func TestIsGlob(t *testing.T) {
	for s, want := range map[string]bool{"gpt-4o": false, "claude-*": true, "a?": true, "[ab]": true, `a\b`: true, "": false} {
		if IsGlob(s) != want {
			t.Errorf("IsGlob(%q) = %v", s, !want)
		}
	}
}

func TestMustCompileGlobPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustCompileGlob of an invalid pattern did not panic")
		}
	}()
	MustCompileGlob("[")
}
