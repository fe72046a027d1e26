package envoylimits_test

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// resolve parses a YAML policy the way the filter does.
func resolve(t *testing.T, yaml string) *policies.Resolved {
	t.Helper()
	doc, err := policyfile.ToJSON([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policies.Parse(doc, policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Resolved()
}

const base = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: a, rateLimitOverrides: {maxWaitMs: 60000, executionMaxWaitMs: 120000}}
      - {id: b}
routes: [{model: gpt-4o, targets: [{provider: openai}]}]
`

func TestRequestBodyBufferLimit(t *testing.T) {
	tests := []struct {
		name   string
		policy string // appended to base
		want   uint64 // the request body buffer limit
	}{
		// The default maxRequestBodyBytes (8 MiB) plus the 1 MiB headroom.
		{"default", "", 8<<20 + 1<<20},
		// The smallest limit a policy may set still gets the whole headroom.
		{"smallest", "maxRequestBodyBytes: 1024", 1024 + 1<<20},
		// The largest (256 MiB) too.
		{"largest", "maxRequestBodyBytes: 268435456", 256<<20 + 1<<20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envoylimits.RequestBodyBufferLimit(resolve(t, base+tt.policy)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestConnectionBufferLimit(t *testing.T) {
	tests := []struct {
		name   string
		policy string // appended to base
		want   uint32 // the listener's per_connection_buffer_limit_bytes
	}{
		// The request limit (8 MiB + 1 MiB): a request held at its headers fits the
		// connection's limit on an Envoy that raises it only in the router.
		{"default", "", 8<<20 + 1<<20},
		// The smallest policy limit is still above Envoy's 1 MiB default, by the headroom.
		{"smallest", "maxRequestBodyBytes: 1024", 1024 + 1<<20},
		// The largest fits the field's 32 bits.
		{"largest", "maxRequestBodyBytes: 268435456", 256<<20 + 1<<20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := resolve(t, base+tt.policy)
			got := envoylimits.ConnectionBufferLimit(res)
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
			if uint64(got) != envoylimits.RequestBodyBufferLimit(res) || got <= envoylimits.DefaultConnectionBufferLimit {
				t.Errorf("%d: want the request limit, above Envoy's default", got)
			}
		})
	}
}

// oneConnection is a policy whose only connection keeps every default.
const oneConnection = `
providers: [{id: openai, cluster: openai, connections: [{id: b}]}]
routes: [{model: gpt-4o, targets: [{provider: openai}]}]
`

func TestIdleTimeout(t *testing.T) {
	tests := []struct {
		name   string
		policy string        // the whole policy
		want   time.Duration // the idle timeout
	}{
		// queue: the longest connection wait (a's 60 s); attempts: min(failover budget 10 min,
		// 3 × the longest execution cap, b's default 10 min); combo budget 90 s; + 30 s slack.
		{"defaults", base, 60*time.Second + 90*time.Second + 10*time.Minute + 30*time.Second},
		// Without combo waits their budget drops out.
		{"no combo wait", base + "resilience: {comboCooldownWait: {enabled: false}}",
			60*time.Second + 10*time.Minute + 30*time.Second},
		// A small failover budget caps the attempts.
		{"small budget", base + "resilience: {failover: {budgetMs: 120000}}",
			60*time.Second + 90*time.Second + 2*time.Minute + 30*time.Second},
		// Shorter execution caps: b's drops to 20 s and a's override (2 min) is the longest:
		// 3 attempts × 2 min.
		{"short attempts", base + "resilience: {requestQueue: {executionMaxWaitMs: 20000}}",
			60*time.Second + 90*time.Second + 3*2*time.Minute + 30*time.Second},
		// Every wait short: the body wait (routing.bodyWaitMs) is the longest silence, not
		// the sum of the rest (1 s queue + 1 s of attempts).
		{"body wait dominates", oneConnection +
			"resilience: {comboCooldownWait: {enabled: false}, failover: {budgetMs: 1000}, " +
			"requestQueue: {maxWaitMs: 1000, executionMaxWaitMs: 1000}}\nrouting: {bodyWaitMs: 120000}",
			2*time.Minute + 30*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := envoylimits.IdleTimeout(resolve(t, tt.policy)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
