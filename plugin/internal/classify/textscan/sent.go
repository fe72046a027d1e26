package textscan

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Providers echo client input back in their errors (OpenAI: "The model `X` does not exist",
// "'X' is not one of ['system', …]", "Invalid URL (POST /v1/X)"), so a marker phrase an error
// body holds may be the client's own words rather than the provider's. Sent is what the
// client sent, and Echo decides, for one classification, whether a phrase that matched in an
// error body occurs there too (the classify package doc, "Echoes", says what follows).

// MaxNeedleBytes bounds a phrase Sent.Contains looks for: the longest marker a restatement or
// error rule may declare (restate.MaxMarkerBytes and errorrules.MaxMarkerBytes are this), and
// longer than every built-in signal fragment (a test checks).
const MaxNeedleBytes = 256

// MaxEchoScanBytes bounds what the look-ups of one Echo read: each reads the whole of what
// the client sent (Sent.Size bytes; BenchmarkSentContains8MiB says how long that takes), and
// once they have read this much a further phrase is taken as sent without a look, so a
// marker counts as evidence only if it was checked: the bound errs as the check does, toward
// the milder verdict. The first look-up always runs. A request of the default
// maxRequestBodyBytes (8 MiB) gets four; a genuine error body brings one or two phrases to
// the check (the first that counts decides), so only a large request whose error echoes many
// markers back reaches the bound.
const MaxEchoScanBytes = 32 << 20

// echoMemo is how many looked-up phrases an Echo remembers (a phrase past them is read again,
// within MaxEchoScanBytes).
const echoMemo = 8

// Sent is a read-only view of what the client sent on the request an error answers: nothing
// is copied, and a Sent must not be kept past the classification it was made for.
type Sent struct {
	// Body is the request body as the filter holds it: JSON, whose string escapes are decoded
	// for the search (a client may spell a marker \u-escaped; the provider echoes it decoded).
	Body []byte
	// Model is the requested model. In body-routed mode it is in Body too; in header-routed
	// mode it comes from a header, and an error can arrive before the body.
	Model string
	// Headers are the request headers as the client sent them, pseudo-headers included (a
	// provider echoes a path or an organization header back as readily as a body value).
	Headers [][2]string
}

// IsZero reports whether nothing was sent (no request is known): every phrase then counts.
func (s *Sent) IsZero() bool {
	return len(s.Body) == 0 && s.Model == "" && len(s.Headers) == 0
}

// Size is how many bytes a look-up (Contains) reads at most.
func (s *Sent) Size() int {
	n := len(s.Body) + len(s.Model)
	for _, h := range s.Headers {
		n += len(h[0]) + len(h[1])
	}
	return n
}

// Contains reports whether phrase occurs in what the client sent, compared as markers are
// compared with error text: ASCII letters case-insensitively, other bytes exactly, with the
// body's JSON escapes decoded as UnescapeJSON decodes them (the model and headers are plain
// text). Each part is read in one pass (Knuth–Morris–Pratt over the decoded bytes, with a
// skip to the next possible start), without allocating. An empty phrase is contained; a
// phrase over MaxNeedleBytes, which no marker is, is taken as contained.
func (s *Sent) Contains(phrase string) bool {
	if len(phrase) > MaxNeedleBytes {
		return true
	}
	if ContainsFold(s.Model, phrase) {
		return true
	}
	for _, h := range s.Headers {
		if indexKMP(h[0], phrase, false) || indexKMP(h[1], phrase, false) {
			return true
		}
	}
	return indexKMP(String(s.Body), phrase, true)
}

// Echo looks phrases up in what the client sent, for one classification: each distinct
// phrase is read once (of the first echoMemo), within MaxEchoScanBytes. Its zero value (and
// a nil *Echo) knows no request: nothing is echoed. It is a value to keep on the caller's
// stack.
type Echo struct {
	sent    Sent
	size    int // sent.Size(), once known (-1: not yet)
	scanned int // bytes the look-ups have read
	n       int
	phrase  [echoMemo]string
	found   [echoMemo]bool
}

// NewEcho returns an Echo over what the client sent.
func NewEcho(sent Sent) Echo { return Echo{sent: sent, size: -1} }

// Echoed reports whether phrase, found in an error body, may be an echo of the client's
// input: it occurs in what the client sent (Sent.Contains), or the look-ups' bound is spent.
// Nothing is read before a phrase has matched, so an error no marker matched costs nothing.
func (e *Echo) Echoed(phrase string) bool {
	if e == nil || e.sent.IsZero() {
		return false
	}
	for i := range e.n {
		if e.phrase[i] == phrase {
			return e.found[i]
		}
	}
	if e.size < 0 {
		e.size = e.sent.Size()
	}
	if e.scanned > 0 && e.scanned+e.size > MaxEchoScanBytes {
		return true
	}
	e.scanned += e.size
	found := e.sent.Contains(phrase)
	if e.n < echoMemo {
		e.phrase[e.n], e.found[e.n] = phrase, found
		e.n++
	}
	return found
}

// indexKMP reports whether needle (at most MaxNeedleBytes) occurs in s under ASCII case
// folding, with s's JSON escapes decoded first when decode is set. It is one pass over s:
// Knuth–Morris–Pratt on the (decoded, folded) bytes, and, while no prefix of the needle is
// matched, a jump to the next byte that can start one (the needle's first byte in either
// case, or a backslash that may decode to it), whose look-ups move forward only.
func indexKMP(s, needle string, decode bool) bool {
	m := len(needle)
	switch {
	case m == 0:
		return true
	case m > len(s): // decoding never lengthens text
		return false
	}
	var pat [MaxNeedleBytes]byte
	var fail [MaxNeedleBytes]uint16 // fail[i]: the longest proper border of pat[:i+1]
	for i := range m {
		pat[i] = lower(needle[i])
	}
	for i, k := 1, 0; i < m; i++ {
		for k > 0 && pat[i] != pat[k] {
			k = int(fail[k-1])
		}
		if pat[i] == pat[k] {
			k++
		}
		fail[i] = uint16(k)
	}
	first, alt := pat[0], pat[0]
	if 'a' <= first && first <= 'z' {
		alt = first - ('a' - 'A')
	}
	n := len(s)
	nextFirst, nextAlt, nextEsc := -1, -1, -1 // cached next positions (n: none left)
	if !decode {
		nextEsc = n
	}
	if alt == first {
		nextAlt = n
	}
	q := 0 // bytes of pat matched
	for i := 0; i < n; {
		if q == 0 {
			nextFirst = nextByte(s, i, first, nextFirst)
			if alt != first {
				nextAlt = nextByte(s, i, alt, nextAlt)
			}
			if decode {
				nextEsc = nextByte(s, i, '\\', nextEsc)
			}
			if i = min(nextFirst, nextAlt, nextEsc); i == n {
				return false
			}
		}
		if c := s[i]; c != '\\' || !decode {
			c = lower(c)
			for q > 0 && c != pat[q] {
				q = int(fail[q-1])
			}
			if c == pat[q] {
				if q++; q == m {
					return true
				}
			}
			i++
			continue
		}
		out, k, next := unescapeAt(s, i)
		for _, c := range out[:k] {
			c = lower(c)
			for q > 0 && c != pat[q] {
				q = int(fail[q-1])
			}
			if c == pat[q] {
				if q++; q == m {
					return true
				}
			}
		}
		i = next
	}
	return false
}

// nextByte returns the first index at or after i where s holds c (len(s) if none), reusing
// cached when it is still ahead of i: each byte of s is looked at once per c.
func nextByte(s string, i int, c byte, cached int) int {
	if cached >= i {
		return cached
	}
	if j := strings.IndexByte(s[i:], c); j >= 0 {
		return i + j
	}
	return len(s)
}

// unescapeAt decodes what starts at s[i]: a JSON string escape (\uXXXX with a surrogate pair
// joined and a lone surrogate replaced by U+FFFD, or a one-letter escape) or, for anything
// else — a plain byte, a malformed or unknown escape, a backslash at the end — that one byte
// as it is. It returns the decoded bytes, out[:n], and the index after what it consumed.
// UnescapeJSON and indexKMP both decode with it.
func unescapeAt[T string | []byte](s T, i int) (out [utf8.UTFMax]byte, n, next int) {
	c := s[i]
	out[0] = c
	if c != '\\' || i+1 >= len(s) {
		return out, 1, i + 1
	}
	switch e := s[i+1]; e {
	case '"', '\\', '/':
		out[0] = e
	case 'n':
		out[0] = '\n'
	case 't':
		out[0] = '\t'
	case 'r':
		out[0] = '\r'
	case 'b', 'f':
		out[0] = ' '
	case 'u':
		r, ok := hex4(s, i+2)
		if !ok {
			return out, 1, i + 1
		}
		next = i + 6
		if utf16.IsSurrogate(r) && next+6 <= len(s) && s[next] == '\\' && s[next+1] == 'u' {
			if lo, ok := hex4(s, next+2); ok {
				if joined := utf16.DecodeRune(r, lo); joined != utf8.RuneError {
					r, next = joined, next+6
				}
			}
		}
		return out, utf8.EncodeRune(out[:], r), next // a lone surrogate encodes as U+FFFD
	default:
		return out, 1, i + 1
	}
	return out, 1, i + 2
}

// appendUnescaped appends src with its escapes decoded (unescapeAt), copying the runs between
// backslashes whole.
func appendUnescaped(dst, src []byte) []byte {
	for i := 0; i < len(src); {
		j := bytes.IndexByte(src[i:], '\\')
		if j < 0 {
			return append(dst, src[i:]...)
		}
		dst = append(dst, src[i:i+j]...)
		out, n, next := unescapeAt(src, i+j)
		dst = append(dst, out[:n]...)
		i = next
	}
	return dst
}
