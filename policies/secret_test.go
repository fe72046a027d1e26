package policies

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Distinctive values: a leak anywhere shows up as one of these substrings.
const (
	leakCredential = "sk-LEAK-credential-4b1d"
	leakToken      = "LEAK-admin-token-93c7f0e2"
)

// secretPolicy has a credential and an admin token from the environment and one credential
// written into the document.
const secretPolicy = `{"providers":[{"id":"openai","cluster":"openai","connections":[
  {"id":"a","credential":{"header":"authorization","value":"Bearer ${KEY}"}},
  {"id":"b","credential":{"header":"x-api-key","value":"sk-LEAK-inline-77aa"}}]}],
 "routes":[{"model":"gpt-4o","targets":[{"provider":"openai"}]}],
 "admin":{"token":"${TOKEN}"}}`

var leaks = []string{leakCredential, leakToken, "sk-LEAK-inline-77aa"}

func parseSecretPolicy(t *testing.T) *Policy {
	t.Helper()
	return mustParse(t, secretPolicy, ParseOptions{LookupEnv: envMap(map[string]string{
		"KEY": leakCredential, "TOKEN": leakToken})})
}

func assertNoLeak(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range leaks {
		if strings.Contains(out, l) {
			t.Errorf("%s contains the secret %q:\n%s", what, l, out)
		}
	}
}

func TestSecretsNeverPrintInAPolicy(t *testing.T) {
	p := parseSecretPolicy(t)
	r := p.Resolved()
	_, conn, _ := r.Connection("a")
	values := []struct {
		name  string // what is printed
		value any    // the value
	}{
		{"raw policy", p},
		{"raw policy value", *p},
		{"raw connection", p.Providers[0].Connections[0]},
		{"raw credential", p.Providers[0].Connections[0].Credential},
		{"raw admin", p.Admin},
		{"resolved policy", r},
		{"resolved providers", r.Providers},
		{"resolved connection", conn},
		{"resolved admin", r.Admin},
		{"credential secret", conn.CredentialValue},
		{"token secret", r.Admin.Token},
		{"pointer to secret", &r.Admin.Token},
	}
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%20s", "%-8v"} {
			assertNoLeak(t, v.name+" formatted with "+verb, fmt.Sprintf(verb, v.value))
		}
		assertNoLeak(t, v.name+" through Sprint", fmt.Sprint(v.value))
		out, err := json.Marshal(v.value)
		if err != nil {
			t.Fatalf("json.Marshal(%s): %v", v.name, err)
		}
		assertNoLeak(t, v.name+" as JSON", string(out))
	}
	// The secrets are still there for the code that sends them.
	if conn.CredentialValue.Reveal() != "Bearer "+leakCredential || r.Admin.Token.Reveal() != leakToken {
		t.Errorf("Reveal lost the values")
	}
	if got := p.Providers[0].Connections[1].Credential.Value.Reveal(); got != "sk-LEAK-inline-77aa" {
		t.Errorf("inline credential = %q", got)
	}
}

func TestSecretForms(t *testing.T) {
	s := NewSecret(leakToken)
	tests := []struct {
		name string // form
		got  string // output
		want string // expected output
	}{
		{"String", s.String(), "[redacted]"},
		{"GoString", s.GoString(), `policies.Secret("[redacted]")`},
		{"%v", fmt.Sprintf("%v", s), "[redacted]"},
		{"%s", fmt.Sprintf("%s", s), "[redacted]"},
		{"%q", fmt.Sprintf("%q", s), `"[redacted]"`},
		{"%#v", fmt.Sprintf("%#v", s), `policies.Secret("[redacted]")`},
		{"%x", fmt.Sprintf("%x", s), "[redacted]"},
		{"in a struct %+v", fmt.Sprintf("%+v", struct{ S Secret }{s}), "{S:[redacted]}"},
		{"empty String", Secret{}.String(), ""},
		{"empty %q", fmt.Sprintf("%q", Secret{}), `""`},
		{"NewSecret(\"\") is empty", fmt.Sprint(NewSecret("").IsZero()), "true"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	b, _ := json.Marshal(struct {
		S Secret
		E Secret `json:",omitzero"`
	}{S: s})
	if string(b) != `{"S":"[redacted]"}` {
		t.Errorf("JSON = %s, want the redacted value and the empty secret omitted", b)
	}
	text, _ := s.MarshalText()
	if string(text) != "[redacted]" {
		t.Errorf("MarshalText = %s", text)
	}
}

// TestSecretInUnexportedField: fmt prints an unexported field by reflection without
// calling its methods; the pointer inside Secret keeps the value out even then.
func TestSecretInUnexportedField(t *testing.T) {
	type holder struct {
		name   string
		secret Secret
	}
	h := holder{name: "x", secret: NewSecret(leakCredential)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		assertNoLeak(t, "unexported field with "+verb, fmt.Sprintf(verb, h))
	}
}

func TestSecretUnmarshal(t *testing.T) {
	var c Credential
	if err := json.Unmarshal([]byte(`{"header":"authorization","value":"Bearer x"}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Value.Reveal() != "Bearer x" {
		t.Errorf("unmarshalled value = %q", c.Value.Reveal())
	}
	var a Admin
	if err := json.Unmarshal([]byte(`{"token":null}`), &a); err != nil || !a.Token.IsZero() {
		t.Errorf("null token = %v, %v; want empty", a.Token.IsZero(), err)
	}
	if err := json.Unmarshal([]byte(`{"token":7}`), &a); err == nil {
		t.Error("a number unmarshalled into a secret")
	}
}

func TestSecretDecodingErrors(t *testing.T) {
	tests := []struct {
		name    string // what the case shows
		doc     string // the policy
		path    string // expected problem path
		message string // substring of the message
	}{
		{"credential number", strings.Replace(minimal, `"id":"openai-a"`, `"id":"openai-a","credential":{"header":"h","value":7}`, 1),
			"providers[0].connections[0].credential.value", "expected a string, got a number"},
		{"credential null", strings.Replace(minimal, `"id":"openai-a"`, `"id":"openai-a","credential":{"header":"h","value":null}`, 1),
			"providers[0].connections[0].credential.value", "must not be null"},
		{"token object", strings.TrimSuffix(minimal, "}") + `,"admin":{"token":{}}}`, "admin.token", "expected a string, got an object"},
		{"token unset variable", strings.TrimSuffix(minimal, "}") + `,"admin":{"token":"${NOPE}"}}`, "admin.token", `"NOPE" is not set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, tt.doc, ParseOptions{})
			if !hasProblem(errs, tt.path, tt.message) {
				t.Errorf("want %s: ...%s..., got:\n%v", tt.path, tt.message, errs)
			}
		})
	}
}

// TestSecretProblemsNeverEchoTheValue: the messages about a bad credential or token name
// the field, never its value.
func TestSecretProblemsNeverEchoTheValue(t *testing.T) {
	doc := strings.Replace(secretPolicy, `"sk-LEAK-inline-77aa"`, `"sk-LEAK-inline-77aa "`, 1)
	env := envMap(map[string]string{"KEY": leakCredential + "\n", "TOKEN": "LEAK-short"})
	_, err := Parse([]byte(doc), ParseOptions{LookupEnv: env})
	if err == nil {
		t.Fatal("Parse accepted a credential with a newline")
	}
	assertNoLeak(t, "the error", err.Error())
	p := mustParse(t, secretPolicy, ParseOptions{LookupEnv: envMap(map[string]string{"KEY": "k", "TOKEN": "LEAK-short"})})
	if len(p.Warnings) != 1 || p.Warnings[0].Path != "admin.token" || strings.Contains(p.Warnings.Error(), "LEAK-short") {
		t.Errorf("warnings = %v, want one about the short token without its value", p.Warnings)
	}
}
