package pathnorm

import "testing"

// Envoy's own cases are the oracle: test/common/http/path_utility_test.cc
// (NormalizeValidPaths, NormalizeCasePath, InvalidPaths, MergeSlashes, UnescapeSlashes).
func TestCanonicalPathAsEnvoysTests(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/xyz", "/xyz"}, {"/x/y/z", "/x/y/z"}, // AlreadyNormalPaths
		{"/a/b/../c", "/a/c"},          // parent dir
		{"/a/b/./c", "/a/b/c"},         // current dir
		{"a/b/../c", "/a/c"},           // non / start
		{"/a/b/../../../../c", "/c"},   // out number parent
		{`/a/..\c`, "/c"},              // "..\\" canonicalization
		{"/%c0%af", "/%c0%af"},         // 2 bytes unicode reserved characters
		{"/%5c%25", "/%5c%25"},         // reserved characters
		{"/a/b/%2E%2E/c", "/a/c"},      // %2E escape
		{"/a/b/%2E./c", "/a/c"},        //
		{"/a/b/%2E/c", "/a/b/c"},       //
		{"..", "/"},                    //
		{"/../a/b", "/a/b"},            //
		{"/./a/b", "/a/b"},             //
		{"/A/B/C", "/A/B/C"},           // not normalized to lower case
		{"/a/b/%2e%2e/c", "/a/c"},      // %2e can be normalized to .
		{"/a/%2F%2f/c", "/a/%2F%2f/c"}, // %2F is not normalized to %2f
		{"/a/b?x=/../y", "/a/b?x=/../y"},
	} {
		got, ok := CanonicalPath(tc.in)
		if !ok || got != tc.want {
			t.Errorf("CanonicalPath(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	for _, in := range []string{"/xyz/.%00../abc", "/xyz/%00.%00./abc", "/xyz/AAAAA%%0000/abc"} {
		if got, ok := CanonicalPath(in); ok {
			t.Errorf("CanonicalPath(%q) = %q, valid; want invalid", in, got)
		}
	}
}

func TestMergeSlashesAsEnvoysTests(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""}, {"a//b/c", "a/b/c"}, {"/a//b/c/", "/a/b/c/"}, {"a//b/c/", "a/b/c/"}, {"/a", "/a"},
		{"//a/b/c", "/a/b/c"}, {"/a//b/c", "/a/b/c"}, {"/a/b/c//", "/a/b/c/"}, {"/a///b/c", "/a/b/c"},
		{"/a////b/c", "/a/b/c"}, {"/a//b?a=///c", "/a/b?a=///c"}, {"/a//b?", "/a/b?"}, {"//a/?b", "/a/?b"},
	} {
		if got := MergeSlashes(tc.in); got != tc.want {
			t.Errorf("MergeSlashes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestUnescapeSlashesAsEnvoysTests(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		found    bool
	}{
		{"", "", false}, {"%2f%2F", "//", true}, {"/a%2Fb%2fc/", "/a/b/c/", true}, {"%2b", "%2b", false},
		{"/a/b/c", "/a/b/c", false}, {"%2", "%2", false}, {"%", "%", false}, {"/abc%2", "/abc%2", false},
		{"foo%", "foo%", false}, {"/a%2F", "/a/", true}, {"%2fa/", "/a/", true}, {"%%2fa/", "%/a/", true},
		{"%2%2fa/", "%2/a/", true}, {"%5c%5C", `\\`, true}, {"/a%5Cb%5cc/", `/a\b\c/`, true},
		{"/a%5C", `/a\`, true}, {"%5ca/", `\a/`, true},
		{"/x/%2E%2e/z%2f%2Fabc%5C../def", `/x/%2E%2e/z//abc\../def`, true},
		{"%2fa%5Cb%2fc%5c", `/a\b/c\`, true},
		{"%2fa%5Cb%2fc%5c?%2fabcd%5C%%2f%", `/a\b/c\?%2fabcd%5C%%2f%`, true}, // query is untouched
	} {
		got, found := UnescapeSlashes(tc.in)
		if got != tc.want || found != tc.found {
			t.Errorf("UnescapeSlashes(%q) = %q, %v; want %q, %v", tc.in, got, found, tc.want, tc.found)
		}
	}
}

// Normalize runs the steps in maybeNormalizePath's order, with the settings of Spillway's
// bootstrap and others. The admin-lookalike paths of issue 18 are among the inputs.
func TestNormalizeOrderAndActions(t *testing.T) {
	bootstrap := Config{NormalizePath: true, MergeSlashes: true, EscapedSlashes: RejectRequest}
	for _, tc := range []struct {
		name   string // the case
		c      Config
		in     string
		want   string
		action Action
	}{
		// An escaped slash is refused before anything else reads the path.
		{"escaped slash rejected", bootstrap, "/spillway%2Fapi/monitoring/health", "/spillway/api/monitoring/health", Reject},
		{"escaped backslash rejected", bootstrap, "/spillway%5capi/", `/spillway\api/`, Reject},
		// Merged slashes and dot segments reach the filters resolved.
		{"double slash", bootstrap, "//spillway//api/x", "/spillway/api/x", Continue},
		{"dot dot", bootstrap, "/v1/../spillway/api/x", "/spillway/api/x", Continue},
		{"escaped dots", bootstrap, "/v1/%2e%2E/spillway/api/x", "/spillway/api/x", Continue},
		{"backslash", bootstrap, `/v1\..\spillway/api/x`, "/spillway/api/x", Continue},
		// Letters are never case-folded: the filter's own admin check does that.
		{"case kept", bootstrap, "/SPILLWAY/api/x", "/SPILLWAY/api/x", Continue},
		// An escaped letter is decoded (googleurl unescapes unreserved characters).
		{"escaped letter", bootstrap, "/v1/chat%2Dcompletions", "/v1/chat-completions", Continue},
		{"NUL", bootstrap, "/v1/%00", "/v1/%00", Reject},
		{"fragment", bootstrap, "/v1/chat/completions#x", "/v1/chat/completions#x", Reject},
		// Merging runs after canonicalisation: "/a/.//b" keeps its "//" through the first.
		{"merge after canonical", bootstrap, "/a/.//b", "/a/b", Continue},
		// The other escaped-slash actions.
		{"redirect", Config{NormalizePath: true, EscapedSlashes: UnescapeAndRedirect}, "/a%2Fb", "/a/b", Redirect},
		{"forward", Config{NormalizePath: true, MergeSlashes: true, EscapedSlashes: UnescapeAndForward}, "/a%2F%2Fb", "/a/b", Continue},
		{"keep", Config{NormalizePath: true, EscapedSlashes: KeepUnchanged}, "/a%2Fb", "/a%2Fb", Continue},
		// Nothing configured: the path as sent.
		{"off", Config{}, "//a/../b", "//a/../b", Continue},
	} {
		got, action := Normalize(tc.in, tc.c)
		if got != tc.want || action != tc.action {
			t.Errorf("%s: Normalize(%q) = %q, %v; want %q, %v", tc.name, tc.in, got, action, tc.want, tc.action)
		}
	}
}

// A hostile path costs a pass over it: no recursion, output bounded by three bytes per
// input byte. (One pass is not idempotent, in googleurl either: "%%370" becomes "/%70".)
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"/a/../b", "%2e%2e/%2E./..", `\..\\`, "/%00", "%%%", "/\x80\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, _ := CanonicalPath(in)
		if len(got) > 3*len(in)+1 {
			t.Fatalf("CanonicalPath(%q) grew to %d bytes", in, len(got))
		}
		if p, _ := splitQuery(got); p == "" || p[0] != '/' {
			t.Fatalf("CanonicalPath(%q) = %q: no leading slash", in, got)
		}
	})
}

// Istio's path-normalisation integration test, which runs these paths through a real
// Envoy for each meshConfig.pathNormalization (istio/istio tests/integration/security,
// TestNormalization; istiod maps BASE to normalize_path, MERGE_SLASHES adds merge_slashes,
// DECODE_AND_MERGE_SLASHES adds UNESCAPE_AND_FORWARD), is a second oracle. Its cases with a
// fragment are left out: its client drops the fragment before sending.
func TestNormalizeAsIstiosIntegrationTest(t *testing.T) {
	base := Config{NormalizePath: true}
	merge := Config{NormalizePath: true, MergeSlashes: true}
	decode := Config{NormalizePath: true, MergeSlashes: true, EscapedSlashes: UnescapeAndForward}
	common := []struct{ in, base, merge, decode string }{
		{"/", "/", "/", "/"},
		{"/app/", "/app/", "/app/", "/app/"},
		{"/app/../admin", "/admin", "/admin", "/admin"},
		{"/app", "/app", "/app", "/app"},
		{"/app//", "/app//", "/app/", "/app/"},
		{"/app/%2f", "/app/%2f", "/app/%2f", "/app/"},
		{"/app%2f/", "/app%2f/", "/app%2f/", "/app/"},
		{"/xyz%30..//abc", "/xyz0..//abc", "/xyz0../abc", "/xyz0../abc"},
		{"/app/%2E./admin", "/admin", "/admin", "/admin"},
		{`/app\admin`, `/app/admin`, `/app/admin`, `/app/admin`},
		{`/app/\/\/\admin`, `/app//////admin`, `/app/admin`, `/app/admin`},
		{`/%2Fapp%5cadmin%5Cabc`, `/%2Fapp%5cadmin%5Cabc`, `/%2Fapp%5cadmin%5Cabc`, `/app/admin/abc`},
		{`/%5Capp%2f%5c%2F%2e%2e%2fadmin%5c\abc`, `/%5Capp%2f%5c%2F..%2fadmin%5c/abc`, `/%5Capp%2f%5c%2F..%2fadmin%5c/abc`, `/app/admin/abc`},
		{`/app//../admin`, `/app/admin`, `/app/admin`, `/app/admin`},
		{`/app//../../admin`, `/admin`, `/admin`, `/admin`},
	}
	for _, tc := range common {
		for _, c := range []struct {
			name string
			cfg  Config
			want string
		}{{"BASE", base, tc.base}, {"MERGE_SLASHES", merge, tc.merge}, {"DECODE_AND_MERGE_SLASHES", decode, tc.decode}} {
			if got, action := Normalize(tc.in, c.cfg); got != c.want || action != Continue {
				t.Errorf("%s %q = %q, %v; want %q", c.name, tc.in, got, action, c.want)
			}
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`/%c0%2e%c0%2e/admin`, `/%c0.%c0./admin`}, {`/%c0%2fadmin`, `/%c0/admin`},
		// NotNormalized: none of these is a dot segment or a slash to Envoy.
		{`/0x2e0x2e/admin`, `/0x2e0x2e/admin`}, {`/%25c0%25ae%25c1%259cadmin`, `/%25c0%25ae%25c1%259cadmin`},
		{`/%252e%252e%252fadmin`, `/%252e%252e%252fadmin`}, {`/%c0%ae%c0%ae/admin`, `/%c0%ae%c0%ae/admin`},
		{`/.../admin`, `/.../admin`}, {`/..../admin`, `/..../admin`}, {`/..;/admin`, `/..;/admin`},
		{`/;/admin`, `/;/admin`}, {`/admin;a=b/xyz`, `/admin;a=b/xyz`}, {`/admin,a=b/xyz`, `/admin,a=b/xyz`},
		{`/Admin`, `/Admin`}, {`/ADMIN`, `/ADMIN`},
	} {
		if got, action := Normalize(tc.in, decode); got != tc.want || action != Continue {
			t.Errorf("DECODE_AND_MERGE_SLASHES %q = %q, %v; want %q", tc.in, got, action, tc.want)
		}
	}
	// PercentEncoded: /admin%XX for every byte but NUL. The unreserved characters, '.', '/' and
	// '\' (read as '/') are decoded; every other escape stays as it was sent.
	for i := 1; i <= 0xff; i++ {
		in := "/admin%" + string("0123456789abcdef"[i>>4]) + string("0123456789abcdef"[i&15])
		want := in
		switch c := byte(i); {
		case c == '\\' || c == '/':
			want = "/admin/"
		case c == '-' || c == '.' || c == '_' || c == '~' || '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z':
			want = "/admin" + string(c)
		}
		if got, action := Normalize(in, decode); got != want || action != Continue {
			t.Errorf("DECODE_AND_MERGE_SLASHES %q = %q, %v; want %q", in, got, action, want)
		}
	}
	// Invalid: Envoy answers 400.
	if _, action := Normalize("/admin%00", decode); action != Reject {
		t.Errorf("/admin%%00: %v, want Reject", action)
	}
}
