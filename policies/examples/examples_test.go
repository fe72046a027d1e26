package examples_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// anyEnv sets every variable the examples reference to a recognisable fake value; the
// RATE_LIMIT_* queue defaults stay unset.
func anyEnv(name string) (string, bool) {
	if strings.HasPrefix(name, "RATE_LIMIT_") {
		return "", false
	}
	return "fake-" + strings.ToLower(name), true
}

func TestEveryExampleParses(t *testing.T) {
	names := examples.Names()
	if len(names) < 3 {
		t.Fatalf("Names() = %v, want at least demo, multi-provider and agentrouter", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			data, err := examples.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			p, err := policyfile.Parse(data, policies.ParseOptions{LookupEnv: anyEnv})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if len(p.Warnings) > 0 {
				t.Errorf("an example should not need clamping: %v", p.Warnings)
			}
			if !bytes.Contains(data, []byte("$schema=../spillway.schema.json")) {
				t.Errorf("%s lacks the yaml-language-server schema modeline", name)
			}
		})
	}
}

func TestDemoWorksWithoutEnvironment(t *testing.T) {
	p, err := policyfile.Parse(examples.Demo(), policies.ParseOptions{})
	if err != nil {
		t.Fatalf("demo must work offline with no environment: %v", err)
	}
	r := p.Resolved()
	clusters := map[string]bool{}
	for _, pr := range r.Providers {
		clusters[pr.Cluster] = true
	}
	if !clusters["fake-openai"] || !clusters["fake-openrouter"] || !clusters["fake-anthropic"] {
		t.Errorf("demo clusters = %v, want the built-in fake-openai, fake-openrouter and fake-anthropic", clusters)
	}
	openai, ok := r.Provider("openai")
	if !ok || len(openai.Connections) < 2 {
		t.Fatalf("demo needs a provider with at least two connections")
	}
	route, ok := r.Route("gpt-4o")
	if !ok || len(route.Targets) < 2 || route.Targets[0].ProviderID == route.Targets[1].ProviderID {
		t.Fatalf("demo needs a combo that falls back to another provider, got %+v", route)
	}
	// The fallback must be able to read the request: same API as the first target.
	first, fallback := r.Providers[route.Targets[0].Provider], r.Providers[route.Targets[1].Provider]
	if first.API != policies.APIOpenAI || fallback.API != policies.APIOpenAI || fallback.ID != "openrouter" ||
		route.Targets[1].UpstreamModel("gpt-4o") != "openai/gpt-4o" {
		t.Errorf("gpt-4o falls back to %s (%s) asking for %q; want OpenRouter (openai) asking for openai/gpt-4o",
			fallback.ID, fallback.API, route.Targets[1].UpstreamModel("gpt-4o"))
	}
	if claude, ok := r.Route("claude-sonnet-4"); !ok || r.Providers[claude.Targets[0].Provider].API != policies.APIAnthropic {
		t.Errorf("claude-* must go to a provider speaking the Anthropic API")
	}
	if _, conn, _ := r.Connection("openrouter-a"); conn.CredentialValue.Reveal() != "Bearer demo-key-openrouter" {
		t.Errorf("openrouter credential default = %q", conn.CredentialValue.Reveal())
	}
	if r.RequestQueue.MaxQueueDepth == 0 {
		t.Error("demo should cap the queue depth")
	}
	if !r.Admin.Enabled {
		t.Error("demo should enable the admin API with its demo token")
	}
	if got := openai.Connections[0].CredentialValue.Reveal(); got != "Bearer demo-key-a" {
		t.Errorf("demo credential default = %q, want Bearer demo-key-a", got)
	}
}

func TestDemoTakesKeysFromEnvironment(t *testing.T) {
	env := map[string]string{"OPENAI_KEY_A": "sk-real"}
	p, err := policyfile.Parse(examples.Demo(), policies.ParseOptions{LookupEnv: func(n string) (string, bool) {
		v, ok := env[n]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, conn, ok := p.Resolved().Connection("openai-a")
	if !ok || conn.CredentialValue.Reveal() != "Bearer sk-real" {
		t.Errorf("openai-a credential not taken from the environment")
	}
}

func TestAgentrouterRulesMatchTheGuide(t *testing.T) {
	p, err := policyfile.Parse(examples.Agentrouter(), policies.ParseOptions{LookupEnv: anyEnv})
	if err != nil {
		t.Fatal(err)
	}
	ar, ok := p.Resolved().Provider("agentrouter")
	if !ok || len(ar.StatusRestatement) != 1 || len(ar.ErrorRules) != 2 {
		t.Fatalf("agentrouter rules missing: %+v", ar)
	}
	rule := &ar.StatusRestatement[0]
	if rule.ID != "agentrouter-quota-misstatus" {
		t.Errorf("restatement id = %q, want the built-in rule's id so the example replaces it", rule.ID)
	}
	if !reflect.DeepEqual(rule.FromStatuses, []int{400, 403}) || rule.ToStatus != 429 ||
		!reflect.DeepEqual(rule.TextMarkers, []string{"用户额度不足", "额度不足"}) ||
		!reflect.DeepEqual(rule.ExcludeMarkers, []string{"无权访问模型"}) {
		t.Errorf("restatement = %+v, want 400/403 with 额度不足 to 429 unless 无权访问模型", rule)
	}
	if rule.DefaultRetryAfter != 60*time.Second {
		t.Errorf("restatement Retry-After %v, want 60s", rule.DefaultRetryAfter)
	}
	denied := &ar.ErrorRules[0]
	if denied.Scope != "model" || denied.Reason != "auth_error" || denied.Cooldown != policies.AgentrouterModelAccessDeniedCooldown {
		t.Errorf("model access denied rule = %+v", denied)
	}
	quota := &ar.ErrorRules[1]
	if quota.Scope != "connection" || quota.Reason != "quota_exhausted" || quota.HasCooldown {
		t.Errorf("quota rule = %+v", quota)
	}
}

// TestNoExampleRouteMixesAPIs: every target of a route speaks one API, so no fallback in
// the examples is a target that a request can never use.
func TestNoExampleRouteMixesAPIs(t *testing.T) {
	for _, name := range examples.Names() {
		data, _ := examples.Get(name)
		p, err := policyfile.Parse(data, policies.ParseOptions{LookupEnv: anyEnv})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := p.Resolved()
		for _, route := range r.Routes {
			apis := map[policies.API]bool{}
			for _, target := range route.Targets {
				apis[r.Providers[target.Provider].API] = true
			}
			if len(apis) != 1 {
				t.Errorf("%s: route %s mixes APIs %v", name, route.Model, apis)
			}
		}
	}
}

func TestGetUnknown(t *testing.T) {
	if _, err := examples.Get("missing.yaml"); err == nil {
		t.Error("Get(missing.yaml) succeeded")
	}
}

// TestDemoCoversEveryDefaultPath: `hostsim serve` on the demo answers a request on every
// path Spillway routes by default, so each one needs a demo route whose targets speak the
// path's API.
func TestDemoCoversEveryDefaultPath(t *testing.T) {
	p, err := policyfile.Parse(examples.Demo(), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Resolved()
	tests := []struct {
		path  string       // a default routed path
		api   policies.API // the API its requests speak
		model string       // a model a client sends there
	}{
		{"/v1/chat/completions", policies.APIOpenAI, "gpt-4o"},
		{"/v1/completions", policies.APIOpenAI, "gpt-4o-mini"},
		{"/v1/embeddings", policies.APIOpenAI, "text-embedding-3-small"},
		{"/v1/responses", policies.APIOpenAI, "gpt-4o"},
		{"/v1/messages", policies.APIAnthropic, "claude-sonnet-4"},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.path] = true
		if api, ok := r.Routing.APIOf(tt.path); !ok || api != tt.api {
			t.Errorf("%s: routed %v as %q, want %q", tt.path, ok, api, tt.api)
		}
		route, ok := r.Route(tt.model)
		if !ok {
			t.Errorf("%s: no demo route for %s", tt.path, tt.model)
			continue
		}
		speaks := false
		for _, target := range route.Targets {
			speaks = speaks || r.Providers[target.Provider].API == tt.api
		}
		if !speaks {
			t.Errorf("%s: the route for %s (%s) has no target speaking %s", tt.path, tt.model, route.Model, tt.api)
		}
	}
	for path := range r.Routing.Paths {
		if !covered[path] {
			t.Errorf("default path %s is not covered by this test: add it with a model the demo serves there", path)
		}
	}
}
