package policyfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/policies"
)

const yamlDoc = `
providers:
  - id: openai
    profile: apikey
    cluster: openai
    connections:
      - id: openai-a
        credential: {header: authorization, value: "Bearer ${KEY}"}
        maxConcurrent: 2
        modelConcurrency: {gpt-4o: 1}
routes:
  - model: "claude-*"
    strategy: round-robin
    targets:
      - {provider: openai, model: gpt-4o}
resilience:
  modelLockout: {enabled: true, errorCodes: [429, 503]}
  requestQueue: {maxQueueDepth: 0}
  statusRestatement:
    - id: r
      provider: openai
      fromStatuses: [403]
      toStatus: 429
      textMarkers: ["额度不足"]
admin:
  token: "${TOKEN:-0123456789abcdef}"
`

const jsonDoc = `{"providers":[{"id":"openai","profile":"apikey","cluster":"openai","connections":[{"id":"openai-a",
 "credential":{"header":"authorization","value":"Bearer ${KEY}"},"maxConcurrent":2,"modelConcurrency":{"gpt-4o":1}}]}],
 "routes":[{"model":"claude-*","strategy":"round-robin","targets":[{"provider":"openai","model":"gpt-4o"}]}],
 "resilience":{"modelLockout":{"enabled":true,"errorCodes":[429,503]},"requestQueue":{"maxQueueDepth":0},
 "statusRestatement":[{"id":"r","provider":"openai","fromStatuses":[403],"toStatus":429,"textMarkers":["额度不足"]}]},
 "admin":{"token":"${TOKEN:-0123456789abcdef}"}}`

func env(name string) (string, bool) {
	if name == "KEY" {
		return "sk-1", true
	}
	return "", false
}

func TestYAMLAndJSONAreEquivalent(t *testing.T) {
	fromYAML, err := Parse([]byte(yamlDoc), policies.ParseOptions{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := Parse([]byte(jsonDoc), policies.ParseOptions{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromYAML, fromJSON) {
		t.Errorf("YAML and JSON differ:\n%+v\n%+v", fromYAML, fromJSON)
	}
	direct, err := policies.Parse([]byte(jsonDoc), policies.ParseOptions{LookupEnv: env})
	if err != nil || !reflect.DeepEqual(direct, fromJSON) {
		t.Errorf("policyfile.Parse of JSON differs from policies.Parse: %v", err)
	}
	if got := fromYAML.Providers[0].Connections[0].Credential.Value.Reveal(); got != "Bearer sk-1" {
		t.Errorf("credential = %q", got)
	}
}

func TestToJSONKeepsEnvReferences(t *testing.T) {
	out, err := ToJSON([]byte(yamlDoc))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"Bearer ${KEY}"`) {
		t.Errorf("ToJSON expanded or lost ${KEY}: %s", out)
	}
	// The plugin then parses this JSON with its own VM environment.
	if _, err := policies.Parse(out, policies.ParseOptions{LookupEnv: env}); err != nil {
		t.Errorf("ToJSON output does not parse: %v", err)
	}
}

func TestYAMLErrors(t *testing.T) {
	tests := []struct {
		name    string // what is wrong
		doc     string // YAML input
		path    string // expected problem path
		message string // substring of the message
	}{
		{"syntax", "providers:\n  - id: [unclosed\n", "", "invalid YAML: line"},
		{"tabs", "providers:\n\t- id: x\n", "", "invalid YAML"},
		{"duplicate key", "routes: []\nroutes: []\n", "", `invalid YAML`},
		{"empty document", "# only a comment\n", "", "empty policy document"},
		{"scalar document", "just text\n", "", "expected an object, got a string"},
		{"unknown field has its path", strings.Replace(yamlDoc, "maxQueueDepth", "maxDepth", 1),
			"resilience.requestQueue.maxDepth", "unknown field"},
		{"unquoted yes is a boolean", strings.Replace(yamlDoc, "cluster: openai", "cluster: yes", 1),
			"providers[0].cluster", "expected a string, got a boolean"},
		{"unset variable", strings.Replace(yamlDoc, "${KEY}", "${MISSING}", 1),
			"providers[0].connections[0].credential.value", `"MISSING" is not set`},
		{"float for integer", strings.Replace(yamlDoc, "maxConcurrent: 2", "maxConcurrent: 2.5", 1),
			"providers[0].connections[0].maxConcurrent", "whole number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), policies.ParseOptions{LookupEnv: env})
			var errs policies.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T is not policies.Errors: %v", err, err)
			}
			for _, e := range errs {
				if e.Path == tt.path && strings.Contains(e.Message, tt.message) {
					return
				}
			}
			t.Errorf("want %q: ...%s..., got %v", tt.path, tt.message, errs)
		})
	}
}

func TestJSONWithByteOrderMark(t *testing.T) {
	if _, err := Parse(append([]byte("\xef\xbb\xbf  \n"), jsonDoc...), policies.ParseOptions{LookupEnv: env}); err != nil {
		t.Errorf("JSON with a BOM: %v", err)
	}
}

func TestJSONSyntaxErrorHasPosition(t *testing.T) {
	_, err := Parse([]byte("{\n \"providers\": [,]\n}"), policies.ParseOptions{})
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("err = %v, want a line number", err)
	}
}

func TestTooLarge(t *testing.T) {
	big := "x: \"" + strings.Repeat("a", policies.MaxPolicyBytes) + "\"\n"
	if _, err := ToJSON([]byte(big)); err == nil || !strings.Contains(err.Error(), "larger than 4 MiB") {
		t.Errorf("err = %v", err)
	}
}

func TestAliasBombIsBounded(t *testing.T) {
	// Nested aliases expand exponentially; the YAML reader refuses them or the size
	// limit stops the result, and either way it ends with an error.
	doc := "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
	prev := "a"
	for i := 0; i < 9; i++ {
		name := string(rune('b' + i))
		doc += name + ": &" + name + " [*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + ",*" + prev + "]\n"
		prev = name
	}
	if _, err := Parse([]byte(doc), policies.ParseOptions{}); err == nil {
		t.Error("alias bomb accepted")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(good, []byte(yamlDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good, policies.ParseOptions{LookupEnv: env}); err != nil {
		t.Errorf("Load: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("providers: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad, policies.ParseOptions{})
	var errs policies.Errors
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") || !errors.As(err, &errs) {
		t.Errorf("Load(bad) = %v, want the file name and policies.Errors", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), policies.ParseOptions{}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestOSEnv(t *testing.T) {
	t.Setenv("SPILLWAY_POLICYFILE_TEST_KEY", "from-os")
	doc := strings.Replace(yamlDoc, "${KEY}", "${SPILLWAY_POLICYFILE_TEST_KEY}", 1)
	p, err := Parse([]byte(doc), OSEnv())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Providers[0].Connections[0].Credential.Value.Reveal(); got != "Bearer from-os" {
		t.Errorf("credential = %q", got)
	}
}

func FuzzYAML(f *testing.F) {
	f.Add([]byte(yamlDoc))
	f.Add([]byte("a: &a [1]\nb: *a\n"))
	f.Add([]byte("- x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, policies.ParseOptions{LookupEnv: env})
		if err == nil && p == nil {
			t.Fatal("nil policy without error")
		}
		if err != nil {
			var errs policies.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is not policies.Errors: %T", err)
			}
			if strings.Contains(err.Error(), "sk-1") {
				t.Fatalf("error echoes an environment value: %v", err)
			}
		}
	})
}
