// Package e2etest runs Spillway behind a real HTTP front end for end-to-end tests: a
// Target is the built filter in `hostsim serve` (in-process) or in a real Envoy (when
// ENVOY_BIN names one), on one policy, with fake providers on loopback that record what
// each credential sent.
package e2etest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/hostsim/serve"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// AdminToken is the admin API token every Target gives the filter's VM environment as
// SPILLWAY_ADMIN_TOKEN: a policy that sets admin.token: "${SPILLWAY_ADMIN_TOKEN}" serves
// the admin API under it.
const AdminToken = "e2e-admin-token"

// EnvAdminToken is the VM environment variable AdminToken is given as.
const EnvAdminToken = "SPILLWAY_ADMIN_TOKEN"

// Target is a running proxy with the Spillway filter in front of fake providers.
type Target struct {
	// Kind says what runs the filter: "hostsim" or "envoy".
	Kind string
	// URL is the proxy's base URL (http://127.0.0.1:PORT).
	URL string
	// AdminURL is the proxy's admin listener (Envoy's, or serve's Envoy-like one):
	// /stats/prometheus, /ready.
	AdminURL string
	// Fakes are the fake providers by cluster name: one per cluster of the policy.
	Fakes map[string]*fakeprovider.Server
	// Logs receive the filter's log lines (serve's guest log, Envoy's standard error).
	Logs *hostsimtest.Lines
	// Access receives serve's access lines; nil under Envoy, whose access log (in the
	// bootstrap's own format) goes to Logs with the rest of its output.
	Access *hostsimtest.Lines
	// Serve is the serve instance; nil under Envoy.
	Serve *serve.Instance
	// Policy is the policy the filter runs (Resolved: every setting at its effective
	// value; JSON: the plugin configuration, ${NAME} references kept).
	Policy *envoy.Policy
}

// Starter starts a Target on a policy (YAML or JSON; "" is the embedded demo policy).
// Each call is a fresh proxy with fresh fakes: no state carries over from another.
type Starter func(t testing.TB, policy string) *Target

// Fake returns the fake provider of a cluster, failing the test if there is none.
func (tg *Target) Fake(t testing.TB, cluster string) *fakeprovider.Server {
	t.Helper()
	f, ok := tg.Fakes[cluster]
	if !ok {
		t.Fatalf("e2etest: no fake for cluster %s (have %v)", cluster, sortedKeys(tg.Fakes))
	}
	return f
}

// AdminAPI is the base URL of the filter's admin API (the policy's admin.pathPrefix).
func (tg *Target) AdminAPI() string {
	return tg.URL + tg.Policy.Resolved.Admin.PathPrefix
}

// SetPacing sets every fake's stream pacing.
func (tg *Target) SetPacing(p fakeprovider.Pacing) {
	for _, f := range tg.Fakes {
		f.SetPacing(p)
	}
}

// WasmPath returns the path of build/spillway.wasm; a missing or stale module fails the
// test with "run make build".
func WasmPath(t testing.TB) string {
	t.Helper()
	return modulePath(t, "build/spillway.wasm")
}

// modulePath returns the absolute path of module (a path under build/); a missing or
// stale module fails the test with "run make build".
func modulePath(t testing.TB, module string) string {
	t.Helper()
	hostsimtest.ReadModule(t, module)
	return filepath.Join(hostsimtest.ModuleRoot(t), filepath.FromSlash(module))
}

// loadPolicy validates the policy as the filter will ("" is the embedded demo policy,
// policies/examples/demo.yaml) with AdminToken in the environment, and writes it to a file
// for serve, which reads files ("" for the demo: serve embeds it too).
func loadPolicy(t testing.TB, policy string) (path string, p *envoy.Policy) {
	t.Helper()
	data := []byte(policy)
	if policy == "" {
		data = examples.Demo()
	} else {
		path = filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatalf("e2etest: %v", err)
		}
	}
	p, err := envoy.LoadPolicy(data, envoy.LoadOptions{LookupEnv: func(name string) (string, bool) {
		if name == EnvAdminToken {
			return AdminToken, true
		}
		return "", false
	}})
	if err != nil {
		t.Fatalf("e2etest: the test's policy: %v", err)
	}
	return path, p
}

// clusters lists the clusters the policy's providers use, in provider order, once each.
func clusters(p *envoy.Policy) []string {
	var out []string
	seen := map[string]bool{}
	for _, pr := range p.Resolved.Providers {
		if !seen[pr.Cluster] {
			seen[pr.Cluster] = true
			out = append(out, pr.Cluster)
		}
	}
	return out
}

// startFakes starts one fake provider per cluster of the policy, speaking the API of the
// first provider that uses it (what the filter sends there), as serve's built-in fakes
// do, with no pacing: streams go as fast as they can unless a test sets a pace. Each
// fake is named after its cluster, which its canned replies mention.
func startFakes(t testing.TB, p *envoy.Policy) map[string]*fakeprovider.Server {
	t.Helper()
	fakes := map[string]*fakeprovider.Server{}
	for _, cluster := range clusters(p) {
		kind := fakeprovider.OpenAI
		for _, pr := range p.Resolved.Providers {
			if pr.Cluster == cluster {
				if pr.API == policies.APIAnthropic {
					kind = fakeprovider.Anthropic
				}
				break
			}
		}
		prov, err := fakeprovider.New(kind, cluster)
		if err != nil {
			t.Fatalf("e2etest: %v", err)
		}
		prov.SetPacing(fakeprovider.Pacing{})
		s, err := fakeprovider.Start(prov, "127.0.0.1:0")
		if err != nil {
			t.Fatalf("e2etest: start the fake for %s: %v", cluster, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		fakes[cluster] = s
	}
	return fakes
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// String names the target in failure messages.
func (tg *Target) String() string {
	return fmt.Sprintf("%s at %s (fakes %s)", tg.Kind, tg.URL, strings.Join(sortedKeys(tg.Fakes), ", "))
}
