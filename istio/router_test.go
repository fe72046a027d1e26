package istio

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// routerDemoPolicy is the demo policy failing over through the router.
func routerDemoPolicy(t *testing.T) []byte { return demoWithVia(t, "router") }

// demoWithVia is the demo policy with resilience.failover.via set.
func demoWithVia(t *testing.T, via string) []byte {
	t.Helper()
	doc, err := policyfile.ToJSON(examples.Demo())
	if err == nil {
		doc, err = sjson.SetBytes(doc, "resilience.failover.via", via)
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// decodePatch decodes an EnvoyFilter patch value strictly, as istiod does.
func decodePatch[M proto.Message](t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, m M) M {
	t.Helper()
	js, err := cp.Patch.Value.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := strictProto.Unmarshal(js, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRouterPatches: a router policy's Full-mode EnvoyFilter carries, per provider, the
// upstream filter chain on its cluster and the bootstrap's retry policy on its route, and
// the upstream instance's extension config has the downstream's vm_config; the provider
// routes turn Istio's own retries off. The callout examples (golden-tested) carry none of it.
func TestRouterPatches(t *testing.T) {
	for _, attach := range []Attach{AttachGateway, AttachSidecar} {
		t.Run(string(attach), func(t *testing.T) {
			o := Options{Attach: attach, Namespace: "llm", Hosts: []string{"llm.example.com"}}
			if attach == AttachSidecar {
				o.Hosts, o.Selector = nil, map[string]string{"app": "agent"}
			}
			m, err := Render(routerDemoPolicy(t), exampleOptions(o))
			if err != nil {
				t.Fatal(err)
			}
			ef := spec[*networking.EnvoyFilter](t, m.Objects, "spillway")
			res := resolvedOf(t, m.PluginConfig)
			var down, up *wasmfilterv3.Wasm
			clusters, routes := map[string]*clusterv3.Cluster{}, map[string]*routev3.Route{}
			for _, cp := range ef.ConfigPatches {
				switch cp.ApplyTo {
				case networking.EnvoyFilter_EXTENSION_CONFIG:
					ec := decodePatch(t, cp, new(corev3.TypedExtensionConfig))
					w := new(wasmfilterv3.Wasm)
					if err := ec.TypedConfig.UnmarshalTo(w); err != nil {
						t.Fatal(err)
					}
					if strings.HasSuffix(ec.Name, "/upstream") {
						up = w
					} else {
						down = w
					}
				case networking.EnvoyFilter_CLUSTER:
					if cp.Patch.Operation != networking.EnvoyFilter_Patch_MERGE || cp.Match.GetContext() != ef.ConfigPatches[1].Match.GetContext() {
						t.Errorf("cluster patch %v", cp)
					}
					clusters[cp.Match.GetCluster().GetName()] = decodePatch(t, cp, new(clusterv3.Cluster))
				case networking.EnvoyFilter_HTTP_ROUTE:
					vh := cp.Match.GetRouteConfiguration().GetVhost()
					routes[vh.GetName()+"/"+vh.GetRoute().GetName()] = decodePatch(t, cp, new(routev3.Route))
				}
			}
			if down == nil || up == nil {
				t.Fatalf("extension configs: downstream %v, upstream %v", down != nil, up != nil)
			}
			// One VM: istio-agent rewrites both oci:// modules to the same file.
			if diff := cmp.Diff(down.GetConfig().GetVmConfig(), up.GetConfig().GetVmConfig(), protocmp.Transform()); diff != "" {
				t.Errorf("upstream vm_config differs (-downstream +upstream):\n%s", diff)
			}
			if up.GetConfig().GetRootId() != "spillway.upstream" || !proto.Equal(up.GetConfig().GetConfiguration(), down.GetConfig().GetConfiguration()) ||
				up.GetConfig().GetFailurePolicy() != down.GetConfig().GetFailurePolicy() || !up.GetConfig().GetAllowOnHeadersStopIteration().GetValue() {
				t.Errorf("upstream plugin config %v", up.GetConfig())
			}
			// Spillway's virtual hosts are on port 80 both ways: the default GatewayPort and,
			// for a sidecar, the default Port.
			const port = 80
			for cluster, cn := range m.Clusters {
				c := clusters[cn]
				if c == nil {
					t.Errorf("cluster %s (%s): no CLUSTER patch", cluster, cn)
					continue
				}
				protocol := new(httpv3.HttpProtocolOptions)
				if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(protocol); err != nil {
					t.Fatal(err)
				}
				// MERGE replaces the map entry: the protocol Istio sets (HTTP/1.1) is restated.
				if protocol.GetExplicitHttpConfig().GetHttpProtocolOptions() == nil {
					t.Errorf("%s: protocol %v, want explicit HTTP/1.1", cn, protocol.GetUpstreamProtocolOptions())
				}
				f := protocol.GetHttpFilters()
				if len(f) != 2 || f[0].GetConfigDiscovery() == nil || f[0].GetName() != "spillway/llm/spillway/upstream" || f[1].GetName() != envoy.UpstreamCodecFilter {
					t.Errorf("%s: upstream filters %v", cn, f)
				}
				_, host, err := parseClusterName(cn)
				if err != nil {
					t.Fatal(err)
				}
				r := routes[host+":"+itoa(uint32(port))+"/spillway-"+host]
				if r == nil {
					t.Errorf("no HTTP_ROUTE patch for %s (have %v)", host, keys(routes))
					continue
				}
				if diff := cmp.Diff(envoy.RouterRetryPolicy(res), r.GetRoute().GetRetryPolicy(), protocmp.Transform()); diff != "" {
					t.Errorf("%s: retry policy differs from the bootstrap's (-bootstrap +istio):\n%s", host, diff)
				}
				if r.GetRequestBodyBufferLimit().GetValue() != envoylimits.RetryBufferLimit(res) ||
					len(r.GetResponseHeadersToRemove()) != 1 || r.GetResponseHeadersToRemove()[0] != "x-spillway-retry" {
					t.Errorf("%s: buffer %v, removes %v", host, r.GetRequestBodyBufferLimit(), r.GetResponseHeadersToRemove())
				}
			}
			for _, h := range providerHostsOf(m) {
				vs := spec[*networking.VirtualService](t, m.Objects, "spillway-"+h)
				if rt := vs.Http[0].GetRetries(); rt == nil || rt.Attempts != 0 {
					t.Errorf("%s: route retries %v, want attempts 0 (no retry policy of Istio's own)", h, rt)
				}
			}
		})
	}
}

// TestCalloutHasNoRouterPatches: the demo's EnvoyFilter with failover.via: callout has one
// extension config, no cluster or route patch, and its provider routes turn Istio's
// retries off (attempts 0), as every provider route does: Spillway fails over itself.
func TestCalloutHasNoRouterPatches(t *testing.T) {
	m, err := Render(demoWithVia(t, "callout"), exampleOptions(Options{Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}))
	if err != nil {
		t.Fatal(err)
	}
	ef := spec[*networking.EnvoyFilter](t, m.Objects, "spillway")
	exts := 0
	for _, cp := range ef.ConfigPatches {
		switch cp.ApplyTo {
		case networking.EnvoyFilter_EXTENSION_CONFIG:
			exts++
		case networking.EnvoyFilter_CLUSTER, networking.EnvoyFilter_HTTP_ROUTE:
			t.Errorf("callout policy got a %s patch", cp.ApplyTo)
		}
	}
	if exts != 1 {
		t.Errorf("%d extension configs", exts)
	}
	providers := 0
	for i := range m.Objects {
		if vs, ok := m.Objects[i].Spec.(*networking.VirtualService); ok && strings.HasPrefix(m.Objects[i].Name, "spillway-") {
			providers++
			if r := vs.Http[0].GetRetries(); r == nil || r.GetAttempts() != 0 {
				t.Errorf("%s: retries %v, want attempts 0", m.Objects[i].ID(), r)
			}
		}
	}
	if providers == 0 {
		t.Error("no provider VirtualService rendered")
	}
}

// TestFailoverDefaultPerMode: what a policy that leaves failover unset runs as in each mode
// and Istio release (design.md §4: failover that streams is the default where the
// deployment has the upstream filter, the Full mode; header-routed mode, which WasmPlugin
// and TrafficExtension need, stays on callout), written into the plugin configuration.
// Istio 1.28 ships Envoy 1.36, 1.29 ships 1.37, the first with held tries
// (envoyproxy/envoy#41879); no release gets cross-cluster retries (a mesh routes each
// provider on a virtual host of its own).
func TestFailoverDefaultPerMode(t *testing.T) {
	tests := []struct {
		name        string
		mode        Mode
		istio       int // Options.IstioMinor (0: the default)
		wantRouter  bool
		wantHold    bool
		wantPatches bool // the upstream filter's CLUSTER and HTTP_ROUTE patches
	}{
		{"full on the default release (1.28)", ModeFull, 0, true, false, true},
		{"full on Istio 1.28", ModeFull, 28, true, false, true},
		{"full on Istio 1.29", ModeFull, 29, true, true, true},
		{"full on Istio 1.31", ModeFull, 31, true, true, true},
		{"wasmplugin (header-routed)", ModeWasmPlugin, 31, false, false, false},
		{"trafficextension (header-routed)", ModeTrafficExtension, 31, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Render(demoPolicy(t, tt.mode), exampleOptions(Options{Mode: tt.mode, IstioMinor: tt.istio,
				Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}))
			if err != nil {
				t.Fatal(err)
			}
			var f struct {
				Via          string `json:"via"`
				HoldTries    *bool  `json:"holdTries"`
				CrossCluster *bool  `json:"crossCluster"`
			}
			if err := json.Unmarshal([]byte(gjson.GetBytes(m.PluginConfig, "resilience.failover").Raw), &f); err != nil {
				t.Fatalf("plugin configuration's failover: %v\n%s", err, m.PluginConfig)
			}
			wantVia := "callout"
			if tt.wantRouter {
				wantVia = "router"
			}
			if f.Via != wantVia {
				t.Errorf("via %q, want %q written into the plugin configuration", f.Via, wantVia)
			}
			if tt.wantRouter && (f.HoldTries == nil || *f.HoldTries != tt.wantHold || f.CrossCluster == nil || *f.CrossCluster) {
				t.Errorf("holdTries %v, crossCluster %v; want %v and false", f.HoldTries, f.CrossCluster, tt.wantHold)
			}
			if m.Failover.ViaRouter != tt.wantRouter || m.Failover.HoldTries != tt.wantHold || m.Failover.CrossCluster {
				t.Errorf("Manifests.Failover %+v", m.Failover)
			}
			patches := false
			for i := range m.Objects {
				if ef, ok := m.Objects[i].Spec.(*networking.EnvoyFilter); ok {
					for _, cp := range ef.ConfigPatches {
						patches = patches || cp.ApplyTo == networking.EnvoyFilter_CLUSTER || cp.ApplyTo == networking.EnvoyFilter_HTTP_ROUTE
					}
				}
			}
			if patches != tt.wantPatches {
				t.Errorf("router patches %v, want %v", patches, tt.wantPatches)
			}
		})
	}
	// An explicit holdTries is checked against the release: refused on Istio 1.28, whose
	// Envoy (1.36) runs a released held try as undefined behaviour.
	doc, err := policyfile.ToJSON(examples.Demo())
	if err == nil {
		doc, err = sjson.SetBytes(doc, "resilience.failover.holdTries", true)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(doc, exampleOptions(Options{Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}})); err == nil ||
		!strings.Contains(err.Error(), "resilience.failover.holdTries: needs Envoy ≥ 1.37") || !strings.Contains(err.Error(), "Istio 1.28 (Envoy 1.36)") {
		t.Errorf("holdTries on Istio 1.28: err %v", err)
	}
	if _, err := Render(doc, exampleOptions(Options{IstioMinor: 29, Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}})); err != nil {
		t.Errorf("holdTries on Istio 1.29: %v", err)
	}
}

// TestValidateRouterPatches: Validate refuses a cluster patch whose chain does not end with
// the codec, names no protocol, or reads an extension config nobody adds.
func TestValidateRouterPatches(t *testing.T) {
	tests := []struct {
		name string
		edit func(*httpv3.HttpProtocolOptions) // applied to the first cluster patch's options
		want string                            // in Validate's error
	}{
		// The codec must be last.
		{"codec not last", func(p *httpv3.HttpProtocolOptions) { p.HttpFilters = p.HttpFilters[:1] }, "Envoy accepts only envoy.filters.http.upstream_codec"},
		// MERGE replaces Istio's options: an unset protocol would be Envoy's error.
		{"no protocol", func(p *httpv3.HttpProtocolOptions) { p.UpstreamProtocolOptions = nil }, "no upstream protocol"},
		// The ECDS name must be an added extension config.
		{"unknown extension", func(p *httpv3.HttpProtocolOptions) { p.HttpFilters[0].Name = "nobody" }, `config_discovery names "nobody"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Render(routerDemoPolicy(t), exampleOptions(Options{Namespace: "llm", Hosts: []string{"llm.example.com"}}))
			if err != nil {
				t.Fatal(err)
			}
			ef := spec[*networking.EnvoyFilter](t, m.Objects, "spillway")
			i := 0
			for ef.ConfigPatches[i].ApplyTo != networking.EnvoyFilter_CLUSTER {
				i++
			}
			patchValue(t, ef, i, new(clusterv3.Cluster), func(c *clusterv3.Cluster) {
				p := new(httpv3.HttpProtocolOptions)
				a := c.TypedExtensionProtocolOptions[httpProtocolOptionsKey]
				if err := a.UnmarshalTo(p); err != nil {
					t.Fatal(err)
				}
				tt.edit(p)
				c.TypedExtensionProtocolOptions[httpProtocolOptionsKey] = mustAny(p)
			})
			err = ValidateObjects(m.Objects)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
}

func resolvedOf(t *testing.T, pluginConfig []byte) *policies.Resolved {
	t.Helper()
	p, err := policies.Parse(pluginConfig, policies.ParseOptions{LookupEnv: func(string) (string, bool) { return envPlaceholder, true }})
	if err != nil {
		t.Fatal(err)
	}
	return p.Resolved()
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// providerHostsOf lists the provider hosts of rendered manifests, from their clusters.
func providerHostsOf(m *Manifests) []string {
	var hosts []string
	for _, cn := range m.Clusters {
		if _, h, err := parseClusterName(cn); err == nil && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}
