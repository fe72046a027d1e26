package schema_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
	"github.com/spillwayproxy/spillway/policies/schema"
)

const policiesDir = ".."

func TestCommittedSchemaIsUpToDate(t *testing.T) {
	want, err := schema.Generate(policiesDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(policiesDir, schema.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("policies/%s is stale: run `go generate ./policies` and commit it", schema.FileName)
	}
}

func TestCommittedReferenceIsUpToDate(t *testing.T) {
	want, err := schema.Reference(policiesDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(policiesDir, schema.ReferenceFileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("policies/%s is stale: run `go generate ./policies` and commit it", schema.ReferenceFileName)
	}
}

func TestReferenceCoversEveryObject(t *testing.T) {
	ref, err := schema.Reference(policiesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Policy (top level)", "## Provider", "## Connection", "## Route", "## Target",
		"## Resilience", "## BreakerProfile", "## ModelLockout", "## RequestQueue",
		"## RestatementRule", "## ProviderErrorRule", "## ThroughputWatchdog", "## FirstEvent",
		"## Routing", "## RoutingPaths", "## Admin",
		"| `api` | string: `openai`, `anthropic` |",
		"| `maxWaitMs` | integer | maxWaitMs is the queue budget",
		"string: `priority`, `weighted`",
		"map (`server_error`, `timeout`, `transport_error` → integer)",
	} {
		if !bytes.Contains(ref, []byte(want)) {
			t.Errorf("reference lacks %q", want)
		}
	}
}

// compile compiles the committed schema.
func compile(t *testing.T) *jsonschema.Schema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(policiesDir, schema.FileName))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schema.ID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(schema.ID)
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	return s
}

// validate checks a YAML or JSON policy document against the schema.
func validate(t *testing.T, s *jsonschema.Schema, doc []byte) error {
	t.Helper()
	j, err := policyfile.ToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

func TestEveryExampleValidatesAgainstSchema(t *testing.T) {
	s := compile(t)
	for _, name := range examples.Names() {
		data, err := examples.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(t, s, data); err != nil {
			t.Errorf("%s does not match the schema: %v", name, err)
		}
	}
}

func TestSchemaAgreesWithParser(t *testing.T) {
	s := compile(t)
	const base = `{"providers":[{"id":"p",%p"cluster":"c","connections":[{"id":"c1"}]}],` +
		`"routes":[{"model":"m","targets":[{"provider":"p"}]}]%s}`
	tests := []struct {
		name     string // what the case shows
		extra    string // text added to the base document's top-level object
		valid    bool   // both the parser and the schema accept it
		provider string // text added to the provider object (with a trailing comma)
	}{
		{"minimal policy", ``, true, ``},
		{"every resilience block", `,"resilience":{"providerBreaker":{"oauth":{"failureThreshold":3,"cooldownByKind":{"timeout":5000}}},` +
			`"modelLockout":{"enabled":true,"errorCodes":[429]},"requestQueue":{"maxQueueDepth":5},` +
			`"providerErrorRules":[{"id":"r","provider":"p","reason":"quota_exhausted","scope":"connection"}],` +
			`"statusRestatement":[{"id":"s","provider":"p","fromStatuses":[403],"toStatus":429}],` +
			`"streamRecovery":{"throughputWatchdog":{"enabled":true}},"p2cLatency":{"weight":5},"sessionAffinityTtlMs":0}`, true, ``},
		{"unknown top-level field", `,"extra":1`, false, ``},
		{"misspelt nested field", `,"resilience":{"modelLockout":{"baseCoolDownMs":5}}`, false, ``},
		{"unknown failure kind", `,"resilience":{"providerBreaker":{"local":{"cooldownByKind":{"rate_limit":5000}}}}`, false, ``},
		{"unknown rule scope", `,"resilience":{"providerErrorRules":[{"id":"r","provider":"p","reason":"auth_error","scope":"global"}]}`, false, ``},
		{"status out of range", `,"resilience":{"modelLockout":{"errorCodes":[99]}}`, false, ``},
		{"reset timeout below 1 s", `,"resilience":{"providerBreaker":{"apikey":{"resetTimeoutMs":10}}}`, false, ``},
		{"session TTL above 7 days", `,"resilience":{"sessionAffinityTtlMs":604800001}`, false, ``},
		{"routing block", `,"routing":{"clusterHeader":"x-upstream","paths":{"openai":["/v1/chat/completions"],"anthropic":[]},"bodyWaitMs":5000}`, true, ``},
		{"routed path with a query", `,"routing":{"paths":{"openai":["/v1/chat/completions?x=1"]}}`, false, ``},
		{"routed path twice", `,"routing":{"paths":{"openai":["/v1/a","/v1/a"]}}`, false, ``},
		{"provider API and stream accounting", ``, true, `"api":"anthropic","countTruncatedStreams":false,`},
		{"unknown provider API", ``, false, `"api":"gemini",`},
		{"first event bounds", `,"resilience":{"streamRecovery":{"firstEvent":{"maxBytes":2048,"timeoutMs":500}}}`, true, ``},
		{"fixed-offset quota zone", `,"resilience":{"quotaResetTimeZone":"+08:00"}`, true, ``},
		{"IANA quota zone", `,"resilience":{"quotaResetTimeZone":"Asia/Shanghai"}`, false, ``},
		{"empty lockout codes", `,"resilience":{"modelLockout":{"errorCodes":[]}}`, false, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := []byte(strings.NewReplacer("%s", tt.extra, "%p", tt.provider).Replace(base))
			schemaErr := validate(t, s, doc)
			_, parseErr := policies.Parse(doc, policies.ParseOptions{})
			if (schemaErr == nil) != tt.valid {
				t.Errorf("schema valid = %v, want %v (%v)", schemaErr == nil, tt.valid, schemaErr)
			}
			if (parseErr == nil) != tt.valid {
				t.Errorf("parser valid = %v, want %v (%v)", parseErr == nil, tt.valid, parseErr)
			}
		})
	}
}

func TestDescriptionsUseJSONNames(t *testing.T) {
	data, err := schema.Generate(policiesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"maxWaitMs is the queue budget`,
		`"description": "Policy is Spillway's whole configuration`,
	} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("schema lacks %s", want)
		}
	}
	if bytes.Contains(data, []byte(`"MaxWaitMs is`)) {
		t.Error("a description still starts with the Go field name")
	}
}

func TestGenerateNeedsTheSource(t *testing.T) {
	if _, err := schema.Generate(t.TempDir()); err == nil {
		t.Error("Generate on a directory without the policies source succeeded")
	}
}
