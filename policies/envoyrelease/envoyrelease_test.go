package envoyrelease_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// base is a body-routed policy with no failover block.
const base = `{"providers":[{"id":"p","cluster":"c","connections":[{"id":"a"},{"id":"b"}]}],` +
	`"routes":[{"model":"m","targets":[{"provider":"p"}]}]}`

// withFailover is base with the given failover block and, with headers, header-routed.
func withFailover(t *testing.T, failover map[string]any, headers bool) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(base), &doc); err != nil {
		t.Fatal(err)
	}
	if failover != nil {
		doc["resilience"] = map[string]any{"failover": failover}
	}
	if headers {
		doc["routing"] = map[string]any{"mode": "headers", "defaultModel": "m"}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// failoverOf reads resilience.failover of a JSON document with encoding/json.
func failoverOf(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var v struct {
		Resilience struct {
			Failover map[string]any `json:"failover"`
		} `json:"resilience"`
	}
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("settled document is not JSON: %v\n%s", err, doc)
	}
	return v.Resilience.Failover
}

// TestSettle: what each deployment writes into a policy for each release. The oracle is the
// release each switch needs, from Envoy's changelogs (held tries: 1.37.0, envoyproxy/envoy#41879;
// refresh_cluster_on_retry: 1.39.0, envoyproxy/envoy#44719), and design.md §4 for the path:
// router where the deployment has the upstream filter, callout in header-routed mode.
func TestSettle(t *testing.T) {
	envoy := func(minor int) envoyrelease.Deployment {
		return envoyrelease.Deployment{Envoy: minor, UpstreamFilter: true, CrossClusterRoute: true, Flag: "-envoy-version"}
	}
	istio := func(minor int) envoyrelease.Deployment { // Full mode: no cross-cluster route
		return envoyrelease.Deployment{Envoy: minor, UpstreamFilter: true, Name: "Istio"}
	}
	tests := []struct {
		name     string
		failover map[string]any // the policy's block (nil: none)
		headers  bool           // header-routed
		d        envoyrelease.Deployment
		want     map[string]any // the settled block, as encoding/json reads it
		problem  string         // or the refused field ("" none)
	}{
		{"unset on the oldest release (0)", nil, false, envoy(0),
			map[string]any{"via": "router", "holdTries": false, "crossCluster": false}, ""},
		{"unset on 1.36", nil, false, envoy(36), map[string]any{"via": "router", "holdTries": false, "crossCluster": false}, ""},
		{"unset on 1.37: held tries", nil, false, envoy(37), map[string]any{"via": "router", "holdTries": true, "crossCluster": false}, ""},
		{"unset on 1.38", nil, false, envoy(38), map[string]any{"via": "router", "holdTries": true, "crossCluster": false}, ""},
		{"unset on 1.39: cross-cluster retries", nil, false, envoy(39), map[string]any{"via": "router", "holdTries": true, "crossCluster": true}, ""},
		{"unset on 1.40", nil, false, envoy(40), map[string]any{"via": "router", "holdTries": true, "crossCluster": true}, ""},
		{"Istio on Envoy 1.39: no cross-cluster route", nil, false, istio(39), map[string]any{"via": "router", "holdTries": true, "crossCluster": false}, ""},
		{"Istio on Envoy 1.36", nil, false, istio(36), map[string]any{"via": "router", "holdTries": false, "crossCluster": false}, ""},
		{"no upstream filter (ECDS): callout", nil, false, envoyrelease.Deployment{Envoy: 40}, map[string]any{"via": "callout"}, ""},
		{"header-routed: callout", nil, true, envoy(40), map[string]any{"via": "callout"}, ""},
		{"explicit callout kept, switches untouched", map[string]any{"via": "callout"}, false, envoy(40), map[string]any{"via": "callout"}, ""},
		{"explicit switches off kept on 1.40", map[string]any{"holdTries": false, "crossCluster": false}, false, envoy(40),
			map[string]any{"via": "router", "holdTries": false, "crossCluster": false}, ""},
		{"explicit holdTries on 1.37", map[string]any{"holdTries": true}, false, envoy(37),
			map[string]any{"via": "router", "holdTries": true, "crossCluster": false}, ""},
		{"explicit holdTries refused on 1.36", map[string]any{"holdTries": true}, false, envoy(36), nil, "resilience.failover.holdTries"},
		{"explicit crossCluster refused on 1.38", map[string]any{"crossCluster": true}, false, envoy(38), nil, "resilience.failover.crossCluster"},
		{"explicit crossCluster left to Istio's own check", map[string]any{"crossCluster": true}, false, istio(36),
			map[string]any{"via": "router", "holdTries": false, "crossCluster": true}, ""},
		{"other fields kept", map[string]any{"maxAttempts": 4.0}, false, envoy(36),
			map[string]any{"maxAttempts": 4.0, "via": "router", "holdTries": false, "crossCluster": false}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := withFailover(t, tt.failover, tt.headers)
			p, err := policies.Parse(doc, policies.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out, settled, err := envoyrelease.Settle(doc, p, tt.d)
			if tt.problem != "" {
				fe, ok := err.(policies.Errors)
				if !ok || len(fe) != 1 || fe[0].Path != tt.problem || !strings.Contains(fe[0].Message, "needs Envoy ≥ 1.") {
					t.Fatalf("err %v, want one problem at %s", err, tt.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := failoverOf(t, out)
			if len(got) != len(tt.want) {
				t.Errorf("settled failover %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("settled %s = %v, want %v (block %v)", k, got[k], v, got)
				}
			}
			// The settled document parses to what the returned policy resolves to, and
			// settling it again for the same deployment changes nothing.
			again, err := policies.Parse(out, policies.ParseOptions{})
			if err != nil {
				t.Fatalf("settled document refused: %v\n%s", err, out)
			}
			if a, b := again.Resolved().Failover, settled.Resolved().Failover; a != b {
				t.Errorf("settled document resolves to %+v, the settled policy to %+v", a, b)
			}
			if p.Resilience.Failover.Via != policies.FailoverVia(strOr(tt.failover, "via")) {
				t.Errorf("Settle changed the policy it was given: via %q", p.Resilience.Failover.Via)
			}
			twice, _, err := envoyrelease.Settle(out, again, tt.d)
			if err != nil || string(twice) != string(out) {
				t.Errorf("settling twice: %v\n%s\nvs\n%s", err, twice, out)
			}
		})
	}
}

func strOr(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// TestIstioEnvoy: the Envoy each Istio release ships (Istio's supported-releases table).
func TestIstioEnvoy(t *testing.T) {
	for istio, envoy := range map[int]int{28: 36, 29: 37, 30: 38, 31: 39} {
		if got := envoyrelease.IstioEnvoy(istio); got != envoy {
			t.Errorf("Istio 1.%d ships Envoy 1.%d, got 1.%d", istio, envoy, got)
		}
	}
}

// TestParseMinor reads releases as envoy --version and istioctl print them.
func TestParseMinor(t *testing.T) {
	tests := []struct {
		in   string // the flag's value
		want int    // the minor (0: refused)
	}{
		{"1.36", 36}, {"1.39.2", 39}, {"v1.40.0", 40}, {" 1.37 ", 37},
		{"1.35", 0}, {"2.1", 0}, {"36", 0}, {"1.x", 0}, {"1.36.1.2", 0}, {"1.036", 0}, {"1.-1", 0}, {"", 0},
	}
	for _, tt := range tests {
		got, err := envoyrelease.ParseMinor(tt.in, 36)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("%q: accepted as 1.%d", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}
