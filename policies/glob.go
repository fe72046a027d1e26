package policies

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Model globs (route models and quota families):
//
//	*       any run of characters, '/' included ("claude-*" matches "claude-3-5-sonnet")
//	?       exactly one character
//	[abc]   one character of the set; [a-z] ranges; [!a-z] or [^a-z] negates
//	\x      the character x itself
//
// Everything else matches itself, case-sensitively. Unlike path.Match, '*' crosses '/',
// because model names such as "openai/gpt-4o" are one name, not a path.

// Glob is a compiled model glob. The zero Glob matches only the empty string.
type Glob struct {
	pattern string
	tokens  []globToken
}

type globKind uint8

const (
	globLiteral globKind = iota
	globAnyOne
	globStar
	globClass
)

type globToken struct {
	kind    globKind
	literal string      // globLiteral
	ranges  []runeRange // globClass
	negate  bool        // globClass
}

type runeRange struct{ lo, hi rune }

// Glob syntax errors.
var (
	errGlobEmpty        = errors.New("empty pattern")
	errGlobTrailingEsc  = errors.New("pattern ends with a lone '\\'")
	errGlobUnclosed     = errors.New("unclosed '[' in pattern")
	errGlobEmptyClass   = errors.New("empty character class '[]' in pattern")
	errGlobBadRange     = errors.New("character range out of order in pattern")
	errGlobInvalidUTF8  = errors.New("pattern is not valid UTF-8")
	errGlobControlChars = errors.New("pattern contains a control character")
)

// IsGlob reports whether s uses any glob syntax; a string without it matches only itself.
func IsGlob(s string) bool {
	return strings.ContainsAny(s, `*?[\`)
}

// CompileGlob compiles a model glob.
func CompileGlob(pattern string) (Glob, error) {
	if pattern == "" {
		return Glob{}, errGlobEmpty
	}
	if !utf8.ValidString(pattern) {
		return Glob{}, errGlobInvalidUTF8
	}
	if hasControl(pattern) {
		return Glob{}, errGlobControlChars
	}
	g := Glob{pattern: pattern}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			g.tokens = append(g.tokens, globToken{kind: globLiteral, literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		c := pattern[i]
		switch c {
		case '*':
			flush()
			if n := len(g.tokens); n == 0 || g.tokens[n-1].kind != globStar {
				g.tokens = append(g.tokens, globToken{kind: globStar})
			}
			i++
		case '?':
			flush()
			g.tokens = append(g.tokens, globToken{kind: globAnyOne})
			i++
		case '\\':
			if i+1 >= len(pattern) {
				return Glob{}, errGlobTrailingEsc
			}
			r, size := utf8.DecodeRuneInString(pattern[i+1:])
			lit.WriteRune(r)
			i += 1 + size
		case '[':
			flush()
			tok, next, err := compileClass(pattern, i+1)
			if err != nil {
				return Glob{}, err
			}
			g.tokens = append(g.tokens, tok)
			i = next
		default:
			r, size := utf8.DecodeRuneInString(pattern[i:])
			lit.WriteRune(r)
			i += size
		}
	}
	flush()
	return g, nil
}

// compileClass compiles a class whose body starts at pattern[i]; it returns the index after
// the closing ']'.
func compileClass(pattern string, i int) (globToken, int, error) {
	tok := globToken{kind: globClass}
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		tok.negate = true
		i++
	}
	for {
		if i >= len(pattern) {
			return tok, 0, errGlobUnclosed
		}
		if pattern[i] == ']' {
			if len(tok.ranges) == 0 {
				return tok, 0, errGlobEmptyClass
			}
			return tok, i + 1, nil
		}
		lo, next, err := classRune(pattern, i)
		if err != nil {
			return tok, 0, err
		}
		hi := lo
		i = next
		if i+1 < len(pattern) && pattern[i] == '-' && pattern[i+1] != ']' {
			hi, next, err = classRune(pattern, i+1)
			if err != nil {
				return tok, 0, err
			}
			if hi < lo {
				return tok, 0, errGlobBadRange
			}
			i = next
		}
		tok.ranges = append(tok.ranges, runeRange{lo: lo, hi: hi})
	}
}

// classRune reads one (possibly escaped) character of a class.
func classRune(pattern string, i int) (rune, int, error) {
	if pattern[i] == '\\' {
		i++
		if i >= len(pattern) {
			return 0, 0, errGlobUnclosed
		}
	}
	r, size := utf8.DecodeRuneInString(pattern[i:])
	return r, i + size, nil
}

// MustCompileGlob compiles a pattern known to be valid; it panics otherwise. For tests and
// constants only.
func MustCompileGlob(pattern string) Glob {
	g, err := CompileGlob(pattern)
	if err != nil {
		panic("policies: " + err.Error())
	}
	return g
}

// String returns the pattern.
func (g Glob) String() string { return g.pattern }

// Match reports whether s matches the whole pattern. It does not allocate.
func (g Glob) Match(s string) bool {
	ti, si := 0, 0
	starTok, starS := -1, 0
	for {
		if ti < len(g.tokens) {
			tok := &g.tokens[ti]
			if tok.kind == globStar {
				starTok, starS = ti, si
				ti++
				continue
			}
			if n, ok := tok.matchAt(s, si); ok {
				ti++
				si += n
				continue
			}
		} else if si == len(s) {
			return true
		}
		// Mismatch: let the last star swallow one more character, or fail.
		if starTok < 0 || starS >= len(s) {
			return false
		}
		_, size := utf8.DecodeRuneInString(s[starS:])
		starS += size
		ti, si = starTok+1, starS
	}
}

// matchAt matches one non-star token at s[i:], returning the bytes consumed.
func (t *globToken) matchAt(s string, i int) (int, bool) {
	switch t.kind {
	case globLiteral:
		if strings.HasPrefix(s[i:], t.literal) {
			return len(t.literal), true
		}
		return 0, false
	case globAnyOne:
		if i >= len(s) {
			return 0, false
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		return size, true
	case globClass:
		if i >= len(s) {
			return 0, false
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		in := false
		for _, rr := range t.ranges {
			if r >= rr.lo && r <= rr.hi {
				in = true
				break
			}
		}
		if in == t.negate {
			return 0, false
		}
		return size, true
	}
	return 0, false
}

// hasControl reports whether s contains an ASCII control character (tab included) or DEL.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}
