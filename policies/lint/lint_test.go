package lint_test

import (
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/lint"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

const providers = `
providers:
  - {id: openai, cluster: openai, connections: [{id: a}]}
  - {id: anthropic, api: anthropic, cluster: anthropic, connections: [{id: b}]}
`

func TestUnserved(t *testing.T) {
	tests := []struct {
		name   string
		routes string   // the policy's routes (and anything else after providers)
		want   []string // "path: message fragment" of each finding, in order
	}{
		{"every route reachable",
			"routes:\n- {model: gpt-4o, targets: [{provider: openai}]}\n- {model: 'claude-*', targets: [{provider: anthropic}]}",
			nil},
		{"a catch-all before a glob",
			"routes:\n- {model: '*', targets: [{provider: openai}]}\n- {model: 'claude-*', targets: [{provider: anthropic}]}",
			[]string{`routes[1]: never served: routes[0] ("*")`, "providers[1]: never used"}},
		{"a prefix glob before a narrower one",
			"routes:\n- {model: 'claude-*', targets: [{provider: anthropic}]}\n- {model: 'claude-3-*', targets: [{provider: anthropic}]}\n- {model: x, targets: [{provider: openai}]}",
			[]string{`routes[1]: never served: routes[0] ("claude-*")`}},
		{"a suffix glob before a narrower one",
			"routes:\n- {model: '*-mini', targets: [{provider: openai}]}\n- {model: 'gpt-*-mini', targets: [{provider: openai}]}\n- {model: yy, targets: [{provider: anthropic}]}",
			[]string{`routes[1]: never served: routes[0] ("*-mini")`}},
		// An exact route wins over every glob, wherever it is declared.
		{"an exact route after a catch-all",
			"routes:\n- {model: '*', targets: [{provider: openai}]}\n- {model: claude-x, targets: [{provider: anthropic}]}",
			nil},
		// A narrower glob first is fine: the wider one still serves the rest.
		{"narrow before wide",
			"routes:\n- {model: 'claude-3-*', targets: [{provider: anthropic}]}\n- {model: 'claude-*', targets: [{provider: anthropic}]}\n- {model: z, targets: [{provider: openai}]}",
			nil},
		// Not provably shadowed: "gpt-?" and "gpt-4*" overlap but neither contains the other.
		{"overlapping globs",
			"routes:\n- {model: 'gpt-?', targets: [{provider: openai}]}\n- {model: 'gpt-4*', targets: [{provider: openai}]}\n- {model: c, targets: [{provider: anthropic}]}",
			nil},
		{"an API with no routed paths",
			"routes:\n- {model: gpt-4o, targets: [{provider: openai}]}\n- {model: 'claude-*', targets: [{provider: anthropic}]}\nrouting: {paths: {anthropic: []}}",
			[]string{"routes[1]: never served: its targets speak anthropic, and routing.paths routes no request", "providers[1]: never used"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policyfile.Parse([]byte(providers+tt.routes), policies.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := lint.Unserved(p)
			if len(got) != len(tt.want) {
				t.Fatalf("findings %v, want %d: %v", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].Error(), w) {
					t.Errorf("finding %d: %q, want it to contain %q", i, got[i].Error(), w)
				}
			}
		})
	}
}

func TestExamplesAreFullyServed(t *testing.T) {
	for _, name := range examples.Names() {
		data, err := examples.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policyfile.Parse(data, policies.ParseOptions{LookupEnv: func(string) (string, bool) { return "x", true }})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := lint.Unserved(p); len(got) != 0 {
			t.Errorf("%s: %v", name, got)
		}
	}
}

// TestNotices: a policy that leaves failover.via unset is told which path it gets (design.md
// §4: router in body-routed mode, callout in header-routed mode) and how to keep the
// callout path; a policy that says either gets no notice.
func TestNotices(t *testing.T) {
	route := "routes:\n- {model: gpt-4o, targets: [{provider: openai}]}\n- {model: 'claude-*', targets: [{provider: anthropic}]}\n"
	tests := []struct {
		name  string
		extra string   // after providers and routes
		want  []string // fragments of the one notice, none when empty
	}{
		{"unset, body-routed", "", []string{"goes through Envoy's router", "it was callout before", "Set via: callout to keep the callout path"}},
		{"unset, header-routed", "routing: {mode: headers, defaultModel: gpt-4o}", []string{"header-routed mode", "fails over by callout"}},
		{"callout said", "resilience: {failover: {via: callout}}", nil},
		{"router said", "resilience: {failover: {via: router}}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policyfile.Parse([]byte(providers+route+tt.extra), policies.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := lint.Notices(p)
			if len(tt.want) == 0 {
				if len(got) != 0 {
					t.Errorf("notices %v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Path != "resilience.failover.via" {
				t.Fatalf("notices %v, want one at resilience.failover.via", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got[0].Message, w) {
					t.Errorf("notice %q lacks %q", got[0].Message, w)
				}
			}
		})
	}
}
