package istio

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
)

var renderDir = flag.String("render-dir", "", "TestRenderEveryPolicy also writes each rendering to this directory (make istio-check reads them with istioctl)")

// meshUpstreams are the upstreams of the example policies' clusters that name no authority:
// the demo's, and multi-provider's local Ollama as a Service in the mesh (on port 80: a
// sidecar reaches in-mesh providers only on the port its filter runs on).
var meshUpstreams = func() map[string]string {
	u := map[string]string{"ollama": "http://ollama.llm.svc.cluster.local:80"}
	for c, url := range demoUpstreams {
		u[c] = url
	}
	return u
}()

// everyPolicy is how each policy under policies/examples is rendered for a mesh.
var everyPolicy = map[string]struct {
	// forIstio is what Render needs changed, and why; nil for nothing.
	forIstio func(t *testing.T, doc []byte) []byte
	// headerModes: the WasmPlugin and TrafficExtension modes render it, header-routed
	// (routing.mode: headers set where the policy routes by body, as istio/examples does).
	headerModes bool
	// istioMinor is the Istio release it is rendered for (0: Render's default, the oldest
	// supported), for a policy whose switches need a newer Envoy than that release's.
	istioMinor int
}{
	"agentrouter.yaml":    {headerModes: true},
	"demo.yaml":           {headerModes: true},
	"header-routed.yaml":  {headerModes: true},
	"multi-provider.yaml": {headerModes: true},
	// Render refuses crossCluster for a mesh (each provider has a virtual host of its own),
	// and a router failover routes by body, so no header-routed mode; its held tries need
	// Envoy 1.37, Istio 1.29.
	"router.yaml": {forIstio: func(t *testing.T, doc []byte) []byte {
		return setJSON(t, mustJSON(t, doc), "resilience.failover.crossCluster", false)
	}, istioMinor: 29},
}

func setJSON(t *testing.T, doc []byte, path string, value any) []byte {
	t.Helper()
	out, err := sjson.SetBytes(doc, path, value)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRenderEveryPolicy renders every example policy for every attachment and every mode
// that takes it, and validates each rendering; with -render-dir it writes them there as
// <policy>-<attach>-<mode>.yaml for make istio-check, which runs istioctl over them.
func TestRenderEveryPolicy(t *testing.T) {
	if *renderDir != "" {
		if err := os.MkdirAll(*renderDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range examples.Names() {
		how, ok := everyPolicy[name]
		if !ok {
			t.Errorf("policies/examples/%s: not in everyPolicy: say how it renders for Istio", name)
			continue
		}
		doc, err := examples.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if how.forIstio != nil {
			doc = how.forIstio(t, doc)
		}
		for _, mode := range Modes {
			if mode != ModeFull && !how.headerModes {
				continue
			}
			policy := doc
			if mode != ModeFull {
				policy = setJSON(t, mustJSON(t, doc), "routing.mode", "headers")
			}
			for _, attach := range Attachments {
				file := strings.TrimSuffix(name, ".yaml") + "-" + string(attach) + "-" + string(mode) + ".yaml"
				t.Run(file, func(t *testing.T) {
					o := Options{Mode: mode, Attach: attach, Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}
					if attach == AttachSidecar {
						o = Options{Mode: mode, Attach: attach, Namespace: "agents", Selector: map[string]string{"app": "agent"}}
					}
					o = exampleOptions(o)
					o.Upstreams = upstreamsOf(t, policy)
					o.IstioMinor = how.istioMinor
					m, err := Render(policy, o)
					if err != nil {
						t.Fatal(err)
					}
					y, err := m.YAML()
					if err != nil {
						t.Fatal(err)
					}
					if err := Validate(y); err != nil {
						t.Fatal(err)
					}
					if *renderDir != "" {
						if err := os.WriteFile(filepath.Join(*renderDir, file), y, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// upstreamsOf picks from meshUpstreams the upstreams of the policy's clusters that name no
// authority (Render refuses an upstream for a cluster the policy lacks).
func upstreamsOf(t *testing.T, doc []byte) map[string]string {
	t.Helper()
	// Only the clusters matter: every ${NAME} reads as set.
	p, err := policies.Parse(mustJSON(t, doc), policies.ParseOptions{LookupEnv: func(string) (string, bool) { return "x", true }})
	if err != nil {
		t.Fatal(err)
	}
	u := map[string]string{}
	for _, pr := range p.Providers {
		if url, ok := meshUpstreams[pr.Cluster]; ok && pr.Authority == "" {
			u[pr.Cluster] = url
		}
	}
	return u
}
