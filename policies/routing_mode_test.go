package policies

import (
	"strings"
	"testing"
)

// headerMode returns richBase in header-routed mode with the routing fields given.
func headerMode(t *testing.T, fields map[string]any) string {
	t.Helper()
	routing := map[string]any{"mode": "headers"}
	for k, v := range fields {
		routing[k] = v
	}
	return mutate(t, "routing", routing)
}

func TestRoutingModeValidation(t *testing.T) {
	tests := []struct {
		name    string         // the rule
		routing map[string]any // the routing block (mode: headers unless it says otherwise)
		path    string         // expected problem path
		message string         // substring of the expected message
	}{
		{"mode known", map[string]any{"mode": "header"}, "routing.mode", `unknown routing mode "header" (want body or headers)`},
		{"mode lower-case", map[string]any{"mode": "Headers"}, "routing.mode", "unknown routing mode"},
		{"model header not pseudo", map[string]any{"modelHeader": ":path"}, "routing.modelHeader",
			"pseudo header \":path\" cannot name the model (want an ordinary header such as x-spillway-request-model)"},
		{"model header a token", map[string]any{"modelHeader": "x model"}, "routing.modelHeader", "invalid header name"},
		{"model header bounded", map[string]any{"modelHeader": "x-" + strings.Repeat("m", 127)}, "routing.modelHeader", "longer than 128"},
		{"model header not framing", map[string]any{"modelHeader": "content-length"}, "routing.modelHeader", "hop-by-hop, framing or routing"},
		{"model header not a credential", map[string]any{"modelHeader": "x-api-key"}, "routing.modelHeader",
			"carries credentials; the model needs a header of its own"},
		{"model header not a connection's credential", map[string]any{"modelHeader": "AUTHORIZATION"}, "routing.modelHeader", "carries credentials"},
		{"model header not a session header", map[string]any{"modelHeader": "x-session-id"}, "routing.modelHeader", "session header"},
		{"model header not a response header", map[string]any{"modelHeader": "x-spillway-model"}, "routing.modelHeader", "Spillway's response headers"},
		{"model header not x-envoy", map[string]any{"modelHeader": "x-envoy-model"}, "routing.modelHeader", "x-envoy- namespace"},
		{"model header not the cluster header", map[string]any{"modelHeader": "X-Spillway-Cluster"}, "routing.modelHeader",
			"must differ from routing.clusterHeader"},
		{"model header not a renamed cluster header", map[string]any{"clusterHeader": "x-route", "modelHeader": "x-route"},
			"routing.modelHeader", "must differ from routing.clusterHeader"},
		{"default model printable", map[string]any{"defaultModel": "gpt\n4o"}, "routing.defaultModel", "model name must be 1 to 256 bytes"},
		{"default model trimmed", map[string]any{"defaultModel": " gpt-4o"}, "routing.defaultModel", "without spaces at the ends"},
		{"default model served", map[string]any{"defaultModel": "llama-3"}, "routing.defaultModel", `no route serves model "llama-3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, headerMode(t, tt.routing), ParseOptions{})
			if !hasProblem(errs, tt.path, tt.message) {
				t.Errorf("want %s: ...%s..., got:\n%v", tt.path, tt.message, errs)
			}
		})
	}
}

func TestRoutingModeCredentialHeaderOfAConnection(t *testing.T) {
	doc := mutate(t, "providers.0.connections.1.credential", map[string]any{"header": "X-Route-Key", "value": "k"})
	doc = mutateDoc(t, doc, "routing", map[string]any{"mode": "headers", "modelHeader": "x-route-key"})
	errs := parseErrors(t, doc, ParseOptions{})
	if !hasProblem(errs, "routing.modelHeader", "credential header of providers[0].connections[1]; the model needs a header of its own") {
		t.Errorf("model header equal to a connection's credential header accepted: %v", errs)
	}
}

func TestRoutingModeResolved(t *testing.T) {
	tests := []struct {
		name         string         // case
		routing      map[string]any // the routing block
		mode         RoutingMode    // resolved mode
		modelHeader  string         // resolved model header
		defaultModel string         // resolved default model
	}{
		{"unset: body mode, nothing read from headers", map[string]any{}, RoutingModeBody, "", ""},
		{"body mode explicitly", map[string]any{"mode": "body"}, RoutingModeBody, "", ""},
		{"body mode ignores the header settings", map[string]any{"mode": "body", "modelHeader": "x-m", "defaultModel": "gpt-4o"},
			RoutingModeBody, "", ""},
		{"header mode with defaults", map[string]any{"mode": "headers"}, RoutingModeHeaders, "x-spillway-request-model", ""},
		{"header mode, own header lower-cased", map[string]any{"mode": "headers", "modelHeader": "X-Model"}, RoutingModeHeaders, "x-model", ""},
		{"header mode, default from an exact route", map[string]any{"mode": "headers", "defaultModel": "gpt-4o"},
			RoutingModeHeaders, "x-spillway-request-model", "gpt-4o"},
		{"header mode, default from a glob route", map[string]any{"mode": "headers", "defaultModel": "claude-sonnet-4"},
			RoutingModeHeaders, "x-spillway-request-model", "claude-sonnet-4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, mutate(t, "routing", tt.routing), ParseOptions{}).Resolved().Routing
			if r.Mode != tt.mode || r.ModelHeader != tt.modelHeader || r.DefaultModel != tt.defaultModel {
				t.Errorf("resolved %q %q %q, want %q %q %q", r.Mode, r.ModelHeader, r.DefaultModel, tt.mode, tt.modelHeader, tt.defaultModel)
			}
			if r.HeaderRouted() != (tt.mode == RoutingModeHeaders) {
				t.Errorf("HeaderRouted() = %v in mode %q", r.HeaderRouted(), r.Mode)
			}
		})
	}
}

func TestRoutingModeWarnings(t *testing.T) {
	tests := []struct {
		name    string         // the situation
		routing map[string]any // the routing block
		path    string         // expected warning path ("" = no warning at all)
		message string         // substring of the warning
	}{
		{"model header in body mode", map[string]any{"modelHeader": "x-model"}, "routing.modelHeader", "only header-routed mode reads it"},
		{"default model in body mode", map[string]any{"mode": "body", "defaultModel": "gpt-4o"}, "routing.defaultModel",
			"only header-routed mode reads it"},
		{"default model on a route that passes models on", map[string]any{"mode": "headers", "defaultModel": "claude-x"},
			"routing.defaultModel", `routes[1] has a target without a model: a request without x-spillway-request-model whose body names another model than "claude-x" is answered through a callout`},
		// gpt-4o's route has a target (azure) without a model too.
		{"default model on a mixed route", map[string]any{"mode": "headers", "modelHeader": "x-model", "defaultModel": "gpt-4o"},
			"routing.defaultModel", "routes[0] has a target without a model: a request without x-model"},
		{"header mode without a default", map[string]any{"mode": "headers"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, mutate(t, "routing", tt.routing), ParseOptions{})
			if tt.path == "" {
				if len(p.Warnings) != 0 {
					t.Errorf("warnings = %v, want none", p.Warnings)
				}
				return
			}
			for _, w := range p.Warnings {
				if w.Path == tt.path && strings.Contains(w.Message, tt.message) {
					return
				}
			}
			t.Errorf("warnings = %v, want %s: ...%s...", p.Warnings, tt.path, tt.message)
		})
	}
}

func TestRoutingModeDefaultOnAFixedModelRouteWarnsNothing(t *testing.T) {
	doc := mutate(t, "routes", []any{
		map[string]any{"model": "*", "targets": []any{
			map[string]any{"provider": "openai", "model": "gpt-4o-mini"},
			map[string]any{"provider": "azure", "model": "gpt-4o-mini-2024-07-18"}}}})
	doc = mutateDoc(t, doc, "routing", map[string]any{"mode": "headers", "defaultModel": "any"})
	p := mustParse(t, doc, ParseOptions{})
	if len(p.Warnings) != 0 {
		t.Errorf("warnings = %v, want none: every target of the catch-all route names its model", p.Warnings)
	}
	if got := p.Resolved().Routing.DefaultModel; got != "any" {
		t.Errorf("default model = %q", got)
	}
}
