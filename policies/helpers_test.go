package policies

import (
	"errors"
	"strings"
	"testing"
)

// minimal is the smallest valid policy; tests splice fields into it.
const minimal = `{"providers":[{"id":"openai","cluster":"openai","connections":[{"id":"openai-a"}]}],` +
	`"routes":[{"model":"gpt-4o","targets":[{"provider":"openai"}]}]}`

// withResilience returns the minimal policy with a resilience object.
func withResilience(resilience string) string {
	return strings.TrimSuffix(minimal, "}") + `,"resilience":` + resilience + `}`
}

// envMap is a LookupEnv over a map.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// mustParse parses a policy that must be valid.
func mustParse(t *testing.T, doc string, opts ParseOptions) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc), opts)
	if err != nil {
		t.Fatalf("Parse: %v\ndocument: %s", err, doc)
	}
	return p
}

// parseErrors parses a policy that must be invalid and returns its problems.
func parseErrors(t *testing.T, doc string, opts ParseOptions) Errors {
	t.Helper()
	p, err := Parse([]byte(doc), opts)
	if err == nil {
		t.Fatalf("Parse succeeded, want an error\ndocument: %s", doc)
	}
	if p != nil {
		t.Errorf("Parse returned a policy with an error")
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %T is not Errors: %v", err, err)
	}
	if len(errs) == 0 {
		t.Fatal("empty Errors")
	}
	return errs
}

// hasProblem reports whether errs holds a problem at path whose message contains substr.
func hasProblem(errs Errors, path, substr string) bool {
	for _, e := range errs {
		if e.Path == path && strings.Contains(e.Message, substr) {
			return true
		}
	}
	return false
}
