package policies

import (
	"strings"
	"testing"
)

func TestExpandEnv(t *testing.T) {
	env := envMap(map[string]string{"KEY": "sk-123", "EMPTY": "", "_U9": "u"})
	tests := []struct {
		in       string // string value in the policy
		want     string // expanded value
		expanded bool   // a variable was substituted
		err      string // substring of the error ("" = none)
	}{
		{"plain", "plain", false, ""},
		{"Bearer ${KEY}", "Bearer sk-123", true, ""},
		{"${KEY}${KEY}", "sk-123sk-123", true, ""},
		{"${_U9}", "u", true, ""},
		{"${EMPTY}", "", true, ""},                        // set but empty is set
		{"${MISSING:-fallback}", "fallback", true, ""},    // default when unset
		{"${EMPTY:-fallback}", "fallback", true, ""},      // default when empty
		{"${KEY:-fallback}", "sk-123", true, ""},          // value wins over default
		{"${MISSING:-}", "", true, ""},                    // empty default
		{"$${KEY}", "${KEY}", false, ""},                  // escape
		{"$$${KEY}", "$${KEY}", false, ""},                // '$' then the escape
		{"cost $5", "cost $5", false, ""},                 // lone '$'
		{"$", "$", false, ""},                             // trailing '$'
		{"${MISSING}", "", false, `"MISSING" is not set`}, // unset is an error
		{"${KEY", "", false, "unterminated ${"},           // no closing brace
		{"${}", "", false, "invalid environment variable name"},
		{"${9X}", "", false, "invalid environment variable name"},
		{"${A-B}", "", false, "invalid environment variable name"},
	}
	for _, tt := range tests {
		got, expanded, err := expandEnv(tt.in, env)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("expandEnv(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want || expanded != tt.expanded {
			t.Errorf("expandEnv(%q) = %q, %v, %v; want %q, %v", tt.in, got, expanded, err, tt.want, tt.expanded)
		}
	}
}

func TestExpandEnvWithoutEnvironment(t *testing.T) {
	if _, _, err := expandEnv("${KEY}", nil); err == nil || !strings.Contains(err.Error(), `"KEY" is not set`) {
		t.Errorf("nil LookupEnv: err = %v, want not set", err)
	}
	if got, _, err := expandEnv("${KEY:-d}", nil); err != nil || got != "d" {
		t.Errorf("nil LookupEnv with default = %q, %v", got, err)
	}
}

func TestEnvInPolicy(t *testing.T) {
	doc := `{"providers":[{"id":"openai","cluster":"${CLUSTER}","connections":[{"id":"a",` +
		`"credential":{"header":"authorization","value":"Bearer ${OPENAI_KEY}"},"modelConcurrency":{"${NOT_EXPANDED}":1}}]}],` +
		`"routes":[{"model":"gpt-4o","targets":[{"provider":"openai"}]}],"admin":{"token":"${ADMIN}"}}`
	env := envMap(map[string]string{"CLUSTER": "openai-prod", "OPENAI_KEY": "sk-abc", "ADMIN": "0123456789abcdef0123"})
	p := mustParse(t, doc, ParseOptions{LookupEnv: env})
	if got := p.Providers[0].Cluster; got != "openai-prod" {
		t.Errorf("cluster = %q", got)
	}
	if got := p.Providers[0].Connections[0].Credential.Value.Reveal(); got != "Bearer sk-abc" {
		t.Errorf("credential = %q", got)
	}
	if _, ok := p.Providers[0].Connections[0].ModelConcurrency["${NOT_EXPANDED}"]; !ok {
		t.Error("map keys must not be expanded")
	}
	if got := p.Resolved().Admin.Token.Reveal(); got != "0123456789abcdef0123" {
		t.Errorf("admin token = %q", got)
	}
}

func TestUnsetVariableNamesPathAndVariable(t *testing.T) {
	doc := strings.Replace(minimal, `"id":"openai-a"`,
		`"id":"openai-a","credential":{"header":"authorization","value":"Bearer ${OPENAI_KEY_A}"}`, 1)
	errs := parseErrors(t, doc, ParseOptions{LookupEnv: envMap(nil)})
	if !hasProblem(errs, "providers[0].connections[0].credential.value", `environment variable "OPENAI_KEY_A" is not set`) {
		t.Errorf("got %v", errs)
	}
}

// TestSecretsNeverInErrors feeds secrets through every string field that can produce an
// error echoing its value, and checks no message (or warning) contains them.
func TestSecretsNeverInErrors(t *testing.T) {
	const secret = "sk-SECRET-value-42"
	env := envMap(map[string]string{
		"S":        secret,
		"S_NL":     secret + "\n",
		"S_SPACE":  " " + secret,
		"S_HEADER": "x " + secret,
	})
	doc := `{"providers":[{"id":"${S}","profile":"${S}","cluster":"${S_SPACE}","authority":"${S_HEADER}",` +
		`"connections":[{"id":"${S}","credential":{"header":"${S_HEADER}","value":"${S_NL}"}},` +
		`{"id":"b","credential":{"header":"authorization","value":"${S_SPACE}"}}]}],` +
		`"routes":[{"model":"${S}","strategy":"${S}","targets":[{"provider":"${S}","connection":"${S}"}]}],` +
		`"resilience":{"providerErrorRules":[{"id":"${S}","provider":"${S}","reason":"${S}","scope":"${S}"}],` +
		`"statusRestatement":[{"id":"${S}","provider":"${S}","fromStatuses":[403],"toStatus":429}]},` +
		`"admin":{"pathPrefix":"${S}","token":"${S_NL}"}}`
	errs := parseErrors(t, doc, ParseOptions{LookupEnv: env})
	if len(errs) < 10 {
		t.Errorf("expected many problems, got %d:\n%v", len(errs), errs)
	}
	if strings.Contains(errs.Error(), "SECRET") {
		t.Errorf("an error echoes a secret:\n%v", errs)
	}
	if !strings.Contains(errs.Error(), "(value from the environment)") {
		t.Errorf("expanded values should be named as such:\n%v", errs)
	}
}
