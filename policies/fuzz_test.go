package policies

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const fuzzSecret = "FUZZ-SECRET-7731"

// FuzzParse: Parse never panics, always returns either a policy or Errors, never echoes an
// environment value in an error, and a policy it accepts resolves and survives a
// marshal/parse round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{minimal, richBase, withResilience(`{"requestQueue":{"maxWaitMs":0}}`),
		`{"providers":[{"id":"${X}","cluster":"$${X}","connections":[{"id":"a","credential":{"header":"h","value":"${X:-d}"}}]}],"routes":[{"model":"[a-z]*","targets":[{"provider":"${X}"}]}]}`,
		mutateSeed(richBase, `,"routing":{"clusterHeader":"X-C","paths":{"openai":["/v1/a"],"anthropic":[]},"bodyWaitMs":2000}`),
		`{}`, `[]`, `{"a":`, `{"providers":null}`, `{"providers":[{"id":1}]}`} {
		f.Add([]byte(seed))
	}
	env := func(name string) (string, bool) {
		if strings.HasPrefix(name, "U") || strings.HasPrefix(name, "RATE_LIMIT_") {
			return "", false
		}
		return fuzzSecret, true
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, ParseOptions{LookupEnv: env})
		if err != nil {
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			errs, ok := err.(Errors)
			if !ok || len(errs) == 0 {
				t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
			}
			if strings.Contains(err.Error(), fuzzSecret) {
				t.Fatalf("error echoes an environment value: %v", err)
			}
			return
		}
		for _, w := range p.Warnings {
			if strings.Contains(w.Error(), fuzzSecret) {
				t.Fatalf("warning echoes an environment value: %v", w)
			}
		}
		r := p.Resolved()
		for i := range p.Routes {
			if _, ok := r.Route(p.Routes[i].Model); !ok && !IsGlob(p.Routes[i].Model) {
				t.Fatalf("route %q does not find itself", p.Routes[i].Model)
			}
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte("${")) {
			return // an escaped "$${" was expanded to a literal "${"; not re-parseable as is
		}
		q, err := Parse(out, ParseOptions{})
		if err != nil {
			t.Fatalf("re-parse of an accepted policy failed: %v\n%s", err, out)
		}
		restoreSecrets(t, p, q)
		if len(q.Warnings) != 0 {
			t.Fatalf("clamped values are clamped again: %v", q.Warnings)
		}
		p.Warnings = nil
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip changed the policy:\n%s", out)
		}
	})
}

// restoreSecrets checks that every secret of p came back from its JSON as [redacted] in q,
// then puts p's values back into q (with the warning a 10-character "[redacted]" admin
// token earns), so the rest of the round trip can be compared.
func restoreSecrets(t *testing.T, p, q *Policy) {
	t.Helper()
	for i := range p.Providers {
		for j := range p.Providers[i].Connections {
			pc, qc := p.Providers[i].Connections[j].Credential, q.Providers[i].Connections[j].Credential
			if pc == nil || qc == nil {
				continue
			}
			if got := qc.Value.Reveal(); got != "[redacted]" {
				t.Fatalf("credential marshalled as %q, want [redacted]", got)
			}
			qc.Value = pc.Value
		}
	}
	if !p.Admin.Token.IsZero() {
		if got := q.Admin.Token.Reveal(); got != "[redacted]" {
			t.Fatalf("admin token marshalled as %q, want [redacted]", got)
		}
		q.Admin.Token = p.Admin.Token
		var kept Errors
		for _, w := range q.Warnings {
			if w.Path != "admin.token" {
				kept = append(kept, w)
			}
		}
		q.Warnings = kept
	}
}

// mutateSeed appends top-level members to a policy document.
func mutateSeed(doc, members string) string {
	return strings.TrimSuffix(strings.TrimSpace(doc), "}") + members + "}"
}

// FuzzGlob: compiling never panics and a valid literal pattern matches itself.
func FuzzGlob(f *testing.F) {
	for _, s := range []string{"claude-*", "a[b-c]?", `x\*`, "[", "**", "é?"} {
		f.Add(s, "claude-3")
	}
	f.Fuzz(func(t *testing.T, pattern, model string) {
		g, err := CompileGlob(pattern)
		if err != nil {
			return
		}
		g.Match(model)
		if !IsGlob(pattern) && !g.Match(pattern) {
			t.Fatalf("literal %q does not match itself", pattern)
		}
	})
}
