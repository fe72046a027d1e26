package affinity

import (
	"errors"
	"strings"
	"testing"
)

func TestHeaders(t *testing.T) {
	h := Headers()
	if strings.Join(h, ",") != "x-session-id,x-codex-session-id,x-omniroute-session" {
		t.Fatalf("Headers() = %v", h)
	}
	h[0] = "changed"
	if Headers()[0] != "x-session-id" {
		t.Fatal("Headers() shares its backing array with callers")
	}
}

func TestNewKeyValidates(t *testing.T) {
	tests := []struct {
		name string // the kind of value
		id   string // header value
		ok   bool   // whether it is a valid session id
	}{
		{name: "uuid", id: "3f1c2a9e-7b2d-4c1e-9f00-0a1b2c3d4e5f", ok: true},
		{name: "printable punctuation and inner space", id: "agent 7/sess:{42}~", ok: true},
		{name: "surrounding blanks trimmed", id: " \tabc\t ", ok: true},
		{name: "exactly the maximum", id: strings.Repeat("s", MaxSessionIDLength), ok: true},
		{name: "one past the maximum", id: strings.Repeat("s", MaxSessionIDLength+1)},
		{name: "empty", id: ""},
		{name: "only blanks", id: " \t "},
		{name: "control character", id: "abc\x01"},
		{name: "newline", id: "abc\ndef"},
		{name: "inner tab", id: "abc\tdef"},
		{name: "DEL", id: "abc\x7f"},
		{name: "non-ASCII", id: "séance"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKey("route", tc.id)
			if (err == nil) != tc.ok {
				t.Fatalf("NewKey(%q) error = %v, want ok=%v", tc.id, err, tc.ok)
			}
			if !tc.ok && (!errors.Is(err, ErrInvalidSessionID) || !k.IsZero()) {
				t.Fatalf("error %v (key zero %v), want ErrInvalidSessionID and a zero key", err, k.IsZero())
			}
			if tc.ok && k.IsZero() {
				t.Fatal("valid id gave a zero key")
			}
		})
	}
	if _, err := NewKey(strings.Repeat("r", MaxScopeLength+1), "abc"); err == nil {
		t.Fatal("overlong scope accepted")
	}
}

func TestKeyIdentity(t *testing.T) {
	must := func(scope, id string) Key {
		k, err := NewKey(scope, id)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if must("r", "abc") != must("r", " abc ") {
		t.Fatal("blanks around the id change the key")
	}
	if must("r", "abc") == must("r", "abd") {
		t.Fatal("different ids share a key")
	}
	if must("r1", "abc") == must("r2", "abc") {
		t.Fatal("different scopes share a key")
	}
	if must("a", "bc") == must("ab", "c") {
		t.Fatal("scope/id boundary is ambiguous")
	}
}

func TestKeyFromHeadersPrecedence(t *testing.T) {
	key := func(id string) Key { k, _ := NewKey("r", id); return k }
	tests := []struct {
		name    string            // the headers present
		headers map[string]string // request headers
		want    Key               // expected key
		err     bool              // whether an invalid id is reported
	}{
		{name: "none", headers: map[string]string{"authorization": "x"}},
		{name: "x-session-id", headers: map[string]string{"x-session-id": "s1"}, want: key("s1")},
		{name: "codex only", headers: map[string]string{"x-codex-session-id": "c1"}, want: key("c1")},
		{name: "omniroute only", headers: map[string]string{"x-omniroute-session": "o1"}, want: key("o1")},
		{name: "x-session-id wins over both", headers: map[string]string{
			"x-session-id": "s1", "x-codex-session-id": "c1", "x-omniroute-session": "o1"}, want: key("s1")},
		{name: "codex wins over omniroute", headers: map[string]string{
			"x-codex-session-id": "c1", "x-omniroute-session": "o1"}, want: key("c1")},
		{name: "empty first header counts as absent", headers: map[string]string{
			"x-session-id": "  ", "x-codex-session-id": "c1"}, want: key("c1")},
		{name: "invalid first header: no affinity, no fallback", headers: map[string]string{
			"x-session-id": "bad\x00id", "x-codex-session-id": "c1"}, err: true},
		{name: "overlong value", headers: map[string]string{
			"x-omniroute-session": strings.Repeat("o", 300)}, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := KeyFromHeaders("r", func(name string) (string, bool) {
				v, ok := tc.headers[name]
				return v, ok
			})
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("KeyFromHeaders = %v, %v; want %v, err=%v", got, err, tc.want, tc.err)
			}
			if tc.err && !errors.Is(err, ErrInvalidSessionID) {
				t.Fatalf("error %v does not wrap ErrInvalidSessionID", err)
			}
		})
	}
}
