package policies

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseMinimal(t *testing.T) {
	p := mustParse(t, minimal, ParseOptions{})
	if len(p.Providers) != 1 || p.Providers[0].ID != "openai" || p.Providers[0].Connections[0].ID != "openai-a" {
		t.Errorf("providers = %+v", p.Providers)
	}
	if len(p.Routes) != 1 || p.Routes[0].Targets[0].Provider != "openai" {
		t.Errorf("routes = %+v", p.Routes)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings = %v", p.Warnings)
	}
}

func TestStrictDecoding(t *testing.T) {
	tests := []struct {
		name    string // what the case shows
		doc     string // the policy document
		path    string // expected problem path
		message string // substring of the expected message
	}{
		{"unknown nested field with suggestion", withResilience(`{"modelLockout":{"baseCoolDownMs":5}}`),
			"resilience.modelLockout.baseCoolDownMs", `unknown field (did you mean "baseCooldownMs"?)`},
		{"unknown top-level field", strings.TrimSuffix(minimal, "}") + `,"provider":[]}`, "provider", "unknown field"},
		{"unknown field in a list element", strings.Replace(minimal, `"id":"openai-a"`, `"id":"openai-a","key":"x"`, 1),
			"providers[0].connections[0].key", "unknown field"},
		{"unknown resilience block", withResilience(`{"circuitBreaker":{}}`), "resilience.circuitBreaker", "unknown field"},
		{"unknown profile block", withResilience(`{"providerBreaker":{"api_key":{}}}`), "resilience.providerBreaker.api_key", "unknown field"},
		{"Go field name is not a key", strings.TrimSuffix(minimal, "}") + `,"Warnings":[]}`, "Warnings", "unknown field"},
		{"string for integer", withResilience(`{"requestQueue":{"maxWaitMs":"30s"}}`),
			"resilience.requestQueue.maxWaitMs", "expected a whole number, got a string"},
		{"fraction for integer", withResilience(`{"requestQueue":{"maxQueueDepth":1.5}}`),
			"resilience.requestQueue.maxQueueDepth", "expected a whole number"},
		{"integer overflow", strings.Replace(minimal, `"id":"openai-a"`, `"id":"openai-a","maxConcurrent":99999999999999999999`, 1),
			"providers[0].connections[0].maxConcurrent", "out of range"},
		{"number for string", strings.Replace(minimal, `"cluster":"openai"`, `"cluster":7`, 1),
			"providers[0].cluster", "expected a string, got a number"},
		{"string for boolean", withResilience(`{"modelLockout":{"enabled":"yes"}}`),
			"resilience.modelLockout.enabled", "expected true or false, got a string"},
		{"quota-share switch is a boolean", withResilience(`{"quotaShareConcurrencyLimit":{"enabled":1}}`),
			"resilience.quotaShareConcurrencyLimit.enabled", "expected true or false, got a number"},
		{"quota-share block has only the switch", withResilience(`{"quotaShareConcurrencyLimit":{"maxConcurrent":1}}`),
			"resilience.quotaShareConcurrencyLimit.maxConcurrent", "unknown field"},
		{"object for list", `{"providers":{"id":"x"},"routes":[]}`, "providers", "expected a list, got an object"},
		{"list for object", withResilience(`[]`), "resilience", "expected an object, got a list"},
		{"string for map", strings.Replace(minimal, `"id":"openai-a"`, `"id":"openai-a","modelConcurrency":"gpt-4o=1"`, 1),
			"providers[0].connections[0].modelConcurrency", "expected an object, got a string"},
		{"wrong map value type", strings.Replace(minimal, `"id":"openai-a"`, `"id":"openai-a","modelConcurrency":{"gpt-4o":"one"}`, 1),
			`providers[0].connections[0].modelConcurrency["gpt-4o"]`, "expected a whole number"},
		{"null list element", withResilience(`{"modelLockout":{"errorCodes":[429,null]}}`),
			"resilience.modelLockout.errorCodes[1]", "must not be null"},
		{"null required string", strings.Replace(minimal, `"cluster":"openai"`, `"cluster":null`, 1),
			"providers[0].cluster", "must not be null"},
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

func TestDocumentErrors(t *testing.T) {
	tests := []struct {
		name    string // what the case shows
		doc     string // the input
		message string // substring of the single root-level problem
	}{
		{"empty input", ``, "unexpected end of input"},
		{"not an object", `[1,2]`, "expected an object, got a list"},
		{"null document", `null`, "expected an object, got null"},
		{"syntax error with position", "{\n  \"providers\": [\n    {\"id\": }\n]}", "line 3, column"},
		{"truncated", `{"providers":[`, "unexpected end of input"},
		{"trailing data", minimal + `{}`, "unexpected data after the policy"},
		{"duplicate key", `{"providers":[],"providers":[]}`, `duplicate key "providers"`},
		{"duplicate nested key", strings.Replace(minimal, `"cluster":"openai"`, `"cluster":"a","cluster":"b"`, 1), `duplicate key "cluster"`},
		{"too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), "too deep"},
		{"too large", `{"x":"` + strings.Repeat("a", MaxPolicyBytes) + `"}`, "larger than 4 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, tt.doc, ParseOptions{})
			if len(errs) != 1 || errs[0].Path != "" || !strings.Contains(errs[0].Message, tt.message) {
				t.Errorf("want one root problem containing %q, got:\n%v", tt.message, errs)
			}
		})
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	doc := `{"providers":[{"id":"openai","cluster":"","connections":[{"id":"a"}]},{"id":"openai","cluster":"x","connections":[]}],` +
		`"routes":[{"model":"gpt-4o","strategy":"fastest","targets":[{"provider":"azur"}]}],` +
		`"resilience":{"modelLockout":{"baseCoolDownMs":5},"requestQueue":{"maxWaitMs":"x"}}}`
	errs := parseErrors(t, doc, ParseOptions{})
	want := []FieldError{
		{"resilience.modelLockout.baseCoolDownMs", "unknown field"},
		{"resilience.requestQueue.maxWaitMs", "expected a whole number"},
		{"providers[0].cluster", "required"},
		{"providers[1].id", `duplicate provider id "openai"`},
		{"providers[1].connections", "at least one connection"},
		{"routes[0].strategy", `unknown strategy "fastest"`},
		{"routes[0].targets[0].provider", `unknown provider "azur"`},
	}
	for _, w := range want {
		if !hasProblem(errs, w.Path, w.Message) {
			t.Errorf("missing %s: %s", w.Path, w.Message)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(errs), len(want), errs)
	}
}

func TestDecodeFailureIsNotReportedTwice(t *testing.T) {
	// A provider that is not an object fails to decode; validation must not add
	// "id: required", "cluster: required" and so on beneath it.
	doc := `{"providers":["openai"],"routes":[{"model":"m","targets":[{"provider":"x"}]}]}`
	errs := parseErrors(t, doc, ParseOptions{})
	for _, e := range errs {
		if strings.HasPrefix(e.Path, "providers[0].") {
			t.Errorf("noise under a failed element: %v", e)
		}
	}
	if !hasProblem(errs, "providers[0]", "expected an object, got a string") {
		t.Errorf("missing the decode error: %v", errs)
	}
}

func TestNullMeansUnset(t *testing.T) {
	// YAML "key:" with no value arrives as null: optional blocks, lists, maps and
	// pointers stay unset rather than failing.
	doc := withResilience(`{"modelLockout":null,"requestQueue":{"maxWaitMs":null},"statusRestatement":null}`)
	p := mustParse(t, doc, ParseOptions{})
	if p.Resilience.RequestQueue.MaxWaitMs != nil || p.Resilience.StatusRestatement != nil {
		t.Errorf("null did not leave fields unset: %+v", p.Resilience)
	}
}

func TestExplicitZeroIsNotUnset(t *testing.T) {
	doc := withResilience(`{"requestQueue":{"maxQueueDepth":0},"comboCooldownWait":{"maxAttempts":0},"providerBreaker":{"tripStatuses":[]}}`)
	p := mustParse(t, doc, ParseOptions{})
	rq := p.Resilience.RequestQueue
	if rq.MaxQueueDepth == nil || *rq.MaxQueueDepth != 0 {
		t.Errorf("maxQueueDepth 0 = %v, want an explicit 0", rq.MaxQueueDepth)
	}
	if rq.MaxWaitMs != nil {
		t.Errorf("unset maxWaitMs = %v, want nil", *rq.MaxWaitMs)
	}
	if got := p.Resolved().ComboCooldownWait.MaxAttempts; got != 0 {
		t.Errorf("explicit maxAttempts 0 resolved to %d", got)
	}
	if trips := p.Resolved().Providers[0].Breaker.TripStatuses; len(trips) != 0 {
		t.Errorf("explicit empty tripStatuses resolved to %v, want none (transport failures only)", trips)
	}
}

func TestWholeNumbers(t *testing.T) {
	tests := []struct {
		text string // JSON number literal
		want int64  // parsed value
		ok   bool   // accepted as a whole number
	}{
		{"30000", 30000, true},
		{"-1", -1, true},
		{"3e4", 30000, true},
		{"30000.0", 30000, true},
		{"1.5", 0, false},
		{"1e300", 0, false},
		{"1e400", 0, false},
		{"0.1e1", 1, true},
		{"9223372036854775807", 9223372036854775807, true},
	}
	for _, tt := range tests {
		got, ok := parseWholeNumber(tt.text)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseWholeNumber(%s) = %d, %v; want %d, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}

func TestErrorsFormat(t *testing.T) {
	one := Errors{{Path: "routes[2].targets[0].provider", Message: `unknown provider "azur"`}}
	if got, want := one.Error(), `policies: routes[2].targets[0].provider: unknown provider "azur"`; got != want {
		t.Errorf("one: %q, want %q", got, want)
	}
	two := Errors{{Path: "a", Message: "x"}, {Path: "", Message: "y"}}
	if got, want := two.Error(), "policies: 2 problems:\na: x\n(root): y"; got != want {
		t.Errorf("two: %q, want %q", got, want)
	}
	var err error = two
	var target Errors
	if !errors.As(err, &target) || len(target) != 2 {
		t.Error("errors.As does not find Errors")
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	// Marshalling a parsed policy and parsing it again gives the same policy: the json
	// tags' omitempty/omitzero keep explicit values and drop unset ones.
	doc := withResilience(`{"providerBreaker":{"oauth":{"failureThreshold":4}},"requestQueue":{"maxQueueDepth":0},` +
		`"statusRestatement":[{"id":"r","provider":"openai","fromStatuses":[403],"toStatus":429,"textMarkers":["quota"]}],` +
		`"comboCooldownWait":{"enabled":false}}`)
	p := mustParse(t, doc, ParseOptions{})
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q := mustParse(t, string(out), ParseOptions{})
	if !reflect.DeepEqual(p, q) {
		t.Errorf("round trip changed the policy:\n%s", out)
	}
}

func TestValidateGoBuiltPolicy(t *testing.T) {
	depth := 500000
	p := &Policy{
		Providers:  []Provider{{ID: "p", Cluster: "c", Connections: []Connection{{ID: "c1"}}}},
		Routes:     []Route{{Model: "m", Targets: []Target{{Provider: "p"}}}},
		Resilience: Resilience{RequestQueue: RequestQueue{MaxQueueDepth: &depth}},
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if depth != RequestQueueMaxDepthCap || len(p.Warnings) != 1 {
		t.Errorf("depth = %d, warnings = %v; want clamped to %d with a warning", depth, p.Warnings, RequestQueueMaxDepthCap)
	}
	p.Routes[0].Targets[0].Provider = "q"
	var errs Errors
	if err := p.Validate(); !errors.As(err, &errs) || !hasProblem(errs, "routes[0].targets[0].provider", `unknown provider "q"`) {
		t.Errorf("Validate did not report the unknown provider: %v", err)
	}
}
