package admin

import (
	"net/url"
	"path"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spillwayproxy/spillway/policies"
)

// oracle is the canonical path by the standard library, independent of CanonicalPath: the
// part before '?' or '#', each '%' that starts no valid escape escaped itself (so
// url.PathUnescape reads it as a literal '%', as CanonicalPath keeps it), unescaped once,
// '\' as '/', then path.Clean of it rooted at '/'. path.Clean drops a trailing '/', which
// CanonicalPath keeps, and it does not fold case: the comparisons use strings.EqualFold.
func oracle(t testing.TB, raw string) string {
	t.Helper()
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && (i+2 >= len(raw) || !strings.ContainsRune("0123456789abcdefABCDEF", rune(raw[i+1])) ||
			!strings.ContainsRune("0123456789abcdefABCDEF", rune(raw[i+2]))) {
			b.WriteString("%25")
			continue
		}
		b.WriteByte(raw[i])
	}
	d, err := url.PathUnescape(b.String())
	if err != nil {
		t.Fatalf("oracle: PathUnescape(%q): %v", b.String(), err)
	}
	return path.Clean("/" + strings.ReplaceAll(d, `\`, "/"))
}

// oracleUnder reports whether the oracle's canonical form of raw is under prefix (or is the
// prefix without its trailing '/'), with case folded by strings.EqualFold.
func oracleUnder(t testing.TB, raw, prefix string) bool {
	c, p := oracle(t, raw), path.Clean(prefix)
	return strings.EqualFold(c, p) || hasPrefixFold(c, p+"/")
}

// hasPrefixFold reports whether s begins with as many runes as prefix has that
// strings.EqualFold equates with it (a fold may change a rune's length: ſ is s).
func hasPrefixFold(s, prefix string) bool {
	n := utf8.RuneCountInString(prefix)
	for i := range s {
		if n == 0 {
			return strings.EqualFold(s[:i], prefix)
		}
		n--
	}
	return n == 0 && strings.EqualFold(s, prefix)
}

func TestCanonicalPath(t *testing.T) {
	for _, tc := range []struct {
		raw  string // the request path as sent
		want string // its canonical form
	}{
		{"/spillway/api/monitoring/health", "/spillway/api/monitoring/health"},
		{"/SPILLWAY/Api/x", "/spillway/api/x"},                                   // ASCII case-fold
		{"/spillway%2Fapi/x", "/spillway/api/x"},                                 // an escaped slash is one
		{"/spillway%2fapi%5Cx", "/spillway/api/x"},                               // lower-case hex; an escaped backslash
		{`/spillway\api\x`, "/spillway/api/x"},                                   // backslash as slash
		{"//spillway///api//x", "/spillway/api/x"},                               // merged slashes
		{"/x/../spillway/api/x", "/spillway/api/x"},                              // a dot-dot segment
		{"/x/%2e%2E/spillway/./api/%2E/x", "/spillway/api/x"},                    // escaped dots, mixed case
		{"/x/.%2e/spillway/api", "/spillway/api"},                                // half escaped
		{"/../../spillway/api/", "/spillway/api/"},                               // never above the root
		{"/spillway/api/.", "/spillway/api/"},                                    // a trailing dot segment
		{"/spillway/api/x/..", "/spillway/api/"},                                 // a trailing dot-dot segment
		{"/spillway/api/", "/spillway/api/"},                                     // the trailing slash is kept
		{"/spillway/api?x=/../y", "/spillway/api"},                               // the query is ignored
		{"/spillway/api#frag", "/spillway/api"},                                  // so is a fragment
		{"/a%3Fb%23c%25", "/a?b#c%"},                                             // decoded '?', '#', '%' are data
		{"/a%252F", "/a%2f"},                                                     // decoded once
		{"/a%zz%4", "/a%zz%4"},                                                   // not an escape: as it is
		{"/a%", "/a%"},                                                           // a lone '%'
		{"", "/"},                                                                // no path: the root
		{"spillway/api/x", "/spillway/api/x"},                                    // rooted
		{"/...", "/..."},                                                         // three dots is a name
		{"/a/..b/.c", "/a/..b/.c"},                                               // so is a name starting with dots
		{"/\u017fpillway/\u212aey", "/spillway/key"},                             // the two Unicode folds onto ASCII
		{"/%C5%BFpillway", "/spillway"},                                          // escaped too
		{"/\u00c4/\u03a3/\xc5/\xbf", "/\u00c4/\u03a3/\xc5/\xbf"},                 // no other fold; lone bytes kept
		{"/%00/a", "/\x00/a"},                                                    // any byte may be escaped
		{"/a/b/c/../../../../../d", "/d"},                                        // deep dot-dots stay at the root
		{"/%2e%2e%2f%2e%2e%2fspillway%2fapi", "/spillway/api"},                   // all escaped
		{"/spillway/api/monitoring/health/", "/spillway/api/monitoring/health/"}, // served as is
	} {
		if got := string(CanonicalPath(nil, tc.raw)); got != tc.want {
			t.Errorf("CanonicalPath(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// CanonicalPath allocates nothing when the buffer has room.
func TestCanonicalPathAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		buf = CanonicalPath(buf, "/x/%2e%2E/SPILLWAY//api/./monitoring/health?x=1")
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func TestClassify(t *testing.T) {
	f := newFixture(t, testPolicy)
	for _, tc := range []struct {
		raw  string   // the request path
		want PathKind // what the check makes of it
	}{
		{"/spillway/api/monitoring/health", PathAdmin},
		{"/spillway/api", PathAdmin},
		{"/spillway/api/../../v1/chat/completions", PathAdmin}, // the API's, answered 404 there
		{"/SPILLWAY/api/monitoring/health", PathLookalike},
		{"/spillway%2Fapi/monitoring/health", PathLookalike},
		{"/spillway%5Capi/monitoring/health", PathLookalike},
		{"//spillway/api/monitoring/health", PathLookalike},
		{"/x/../spillway/api/monitoring/health", PathLookalike},
		{"/x/%2e%2e/spillway/api/monitoring/health", PathLookalike},
		{"/spillway%2fAPI/monitoring/health", PathLookalike}, // mixed case in the escape and the path
		{"/spillway/./api/monitoring/health", PathLookalike},
		{"/spillway/x/../api/.", PathLookalike}, // a trailing dot segment
		{"/Spillway/api", PathLookalike},        // the prefix without its '/'
		{"/Spillway/api?x", PathLookalike},
		{"/spillway/api#x", PathLookalike},
		{"/spillway/apis", PathOther},
		{"/spillway%2Fapis", PathOther},
		{"/v1/chat/completions", PathOther},
		{"/V1/chat/completions", PathOther},
		{"/spillway/api/../x", PathAdmin},
		{"/spillway/ap/../api/x", PathLookalike},
		{"/other/spillway/api/x", PathOther},
	} {
		got, _ := f.s.Classify(tc.raw, nil)
		if got != tc.want {
			t.Errorf("Classify(%q) = %d, want %d", tc.raw, got, tc.want)
		}
	}
	var off *Server
	if k, _ := off.Classify("/SPILLWAY/api/x", nil); k != PathOther {
		t.Fatal("with the API off every path is another's")
	}
}

// FuzzCanonicalPath checks CanonicalPath against the standard library's reading (oracle)
// and the admin check's promises, for the default prefix and one with capitals:
//   - the canonical form is the oracle's, up to the trailing '/' the oracle drops and ASCII
//     case, and holds no ASCII capital;
//   - a path the oracle puts under the prefix is never PathOther (never forwarded as an
//     ordinary request), a PathLookalike is not under the prefix byte for byte, and a
//     PathOther is under it by neither reading;
//   - a path the API serves (Parse finds an endpoint) is its own canonical form: any path
//     whose canonical form differs from it is refused, never served.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{
		"/spillway/api/monitoring/health", "/SPILLWAY/api/x", "/spillway%2Fapi/x", "//spillway/api/x",
		"/x/../spillway/api/x", "/spillway%5capi", "/%2e%2e/spillway/api", "/spillway/api/.", "/a%zz", "%", "?", "#",
		`\spillway\api`, "/spillway/api/resilience/cooldowns?provider=x", "/Admin/Api/monitoring/health/",
		"/\u017fpillway/api/", "/spillway/api/monitoring/health/", "/.%2E/admin/api",
	} {
		f.Add(s)
	}
	servers := []*Server{
		New(policies.AdminSettings{Enabled: true, Token: policies.NewSecret("fuzz-admin-token-0123"), PathPrefix: policies.AdminPathPrefix}, nil),
		New(policies.AdminSettings{Enabled: true, Token: policies.NewSecret("fuzz-admin-token-0123"), PathPrefix: "/Admin/Api/"}, nil),
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c := string(CanonicalPath(nil, raw))
		o := oracle(t, raw)
		trimmed := c
		if len(c) > 1 {
			trimmed = strings.TrimSuffix(c, "/")
		}
		if !strings.EqualFold(trimmed, o) {
			t.Fatalf("CanonicalPath(%q) = %q, oracle %q", raw, c, o)
		}
		if strings.ContainsAny(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("CanonicalPath(%q) = %q keeps a capital", raw, c)
		}
		for _, s := range servers {
			kind, _ := s.Classify(raw, nil)
			under := oracleUnder(t, raw, s.prefix)
			switch {
			case under && kind == PathOther:
				t.Fatalf("prefix %q: %q is under it by the oracle (%q) but would be forwarded", s.prefix, raw, o)
			case kind == PathLookalike && strings.HasPrefix(raw, s.prefix):
				t.Fatalf("prefix %q: %q is under it byte for byte but refused as a lookalike", s.prefix, raw)
			case kind == PathLookalike && !under:
				t.Fatalf("prefix %q: %q refused as a lookalike, but the oracle (%q) puts it elsewhere", s.prefix, raw, o)
			}
			if _, err := Parse(s.prefix, "GET", raw, nil); err == nil {
				where, _, _ := strings.Cut(raw, "?")
				same := c == where // the default prefix: exactly
				if s.prefix != strings.ToLower(s.prefix) {
					same = strings.EqualFold(c, where) // the configured capitals
				}
				if kind != PathAdmin || !same {
					t.Fatalf("prefix %q: %q is served (%d) though its canonical form is %q", s.prefix, raw, kind, c)
				}
			}
		}
	})
}

// BenchmarkRequestCheck is what the admin check costs a routed request that is not the
// admin API's: its path classified, its one Authorization header screened for the token.
func BenchmarkRequestCheck(b *testing.B) {
	s := New(policies.AdminSettings{Enabled: true, Token: policies.NewSecret("bench-admin-token-0123456789"), PathPrefix: policies.AdminPathPrefix}, nil)
	buf := make([]byte, 0, 256)
	b.Run("path", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var k PathKind
			if k, buf = s.Classify("/v1/chat/completions", buf); k != PathOther {
				b.Fatal("the check refused an ordinary path")
			}
		}
	})
	b.Run("credential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s.IsToken("Bearer client-key") {
				b.Fatal("the check refused an ordinary key")
			}
		}
	})
}
