package schema_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"

	"github.com/spillwayproxy/spillway/policies"
)

// rangeBase has one element in every list, so every field has a concrete path.
const rangeBase = `{
 "providers":[{"id":"p","cluster":"c","connections":[{"id":"c1","credential":{"header":"authorization","value":"v"}}]}],
 "routes":[{"model":"m","targets":[{"provider":"p"}]}],
 "resilience":{
  "statusRestatement":[{"id":"r","provider":"p","fromStatuses":[403],"toStatus":429}],
  "providerErrorRules":[{"id":"e","provider":"p","reason":"rate_limit"}]}
}`

// TestSchemaBoundsMatchValidation walks every integer field that the schema bounds and
// checks the parser rejects one past each bound, at that field's path, and accepts the
// bound itself without a range complaint: editors and the filter agree on what is valid.
func TestSchemaBoundsMatchValidation(t *testing.T) {
	root := reflectForTest(t)
	checked := 0
	var walk func(s *jsonschema.Schema, path []string)
	walk = func(s *jsonschema.Schema, path []string) {
		if s.Ref != "" {
			walk(root.Definitions[strings.TrimPrefix(s.Ref, "#/$defs/")], path)
			return
		}
		if s.Properties != nil {
			for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
				walk(pair.Value, append(append([]string(nil), path...), pair.Key))
			}
			return
		}
		if s.Type == "array" && s.Items != nil && (s.Items.Ref != "") {
			walk(s.Items, append(append([]string(nil), path...), "0"))
			return
		}
		if s.Type != "integer" || (s.Minimum == "" && s.Maximum == "") {
			return
		}
		checked++
		field := fieldPath(path)
		if s.Minimum != "" {
			lo, _ := strconv.ParseInt(string(s.Minimum), 10, 64)
			expectRejected(t, path, field, lo-1)
			expectNoRangeError(t, path, field, lo)
		}
		if s.Maximum != "" {
			hi, _ := strconv.ParseInt(string(s.Maximum), 10, 64)
			expectRejected(t, path, field, hi+1)
			expectNoRangeError(t, path, field, hi)
		}
	}
	walk(root, nil)
	if checked < 30 {
		t.Errorf("only %d bounded fields checked; the walk is broken", checked)
	}
}

func reflectForTest(t *testing.T) *jsonschema.Schema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(policiesDir, "spillway.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// fieldPath renders a walk path as a policies field path: providers[0].connections[0].weight.
func fieldPath(path []string) string {
	var b strings.Builder
	for _, p := range path {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteString(".")
		}
		b.WriteString(p)
	}
	return b.String()
}

// withValue returns rangeBase with the field at path set to n.
func withValue(t *testing.T, path []string, n int64) []byte {
	t.Helper()
	var root any
	if err := json.Unmarshal([]byte(rangeBase), &root); err != nil {
		t.Fatal(err)
	}
	cur := root
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[p] = n
				break
			}
			if _, ok := c[p]; !ok {
				c[p] = map[string]any{}
			}
			cur = c[p]
		case []any:
			idx, _ := strconv.Atoi(p)
			cur = c[idx]
		}
	}
	out, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func problems(t *testing.T, doc []byte) policies.Errors {
	t.Helper()
	_, err := policies.Parse(doc, policies.ParseOptions{})
	if err == nil {
		return nil
	}
	var errs policies.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is not policies.Errors: %v", err)
	}
	return errs
}

func expectRejected(t *testing.T, path []string, field string, n int64) {
	t.Helper()
	for _, e := range problems(t, withValue(t, path, n)) {
		if e.Path == field {
			return
		}
	}
	t.Errorf("%s = %d is outside the schema's bounds but the parser does not reject it", field, n)
}

func expectNoRangeError(t *testing.T, path []string, field string, n int64) {
	t.Helper()
	for _, e := range problems(t, withValue(t, path, n)) {
		if e.Path == field && strings.Contains(e.Message, "between") {
			t.Errorf("%s = %d is within the schema's bounds but the parser says: %s", field, n, e.Message)
		}
	}
}
