package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/tidwall/sjson"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

var update = flag.Bool("update", false, "rewrite istio/examples from the demo policy")

// exampleDigest stands in for the manifest digest `make oci` prints for a release.
const exampleDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// demoUpstreams are where the demo policy's fake clusters go in a mesh: OpenAI and
// Anthropic, and for the OpenAI-compatible fallback an in-mesh gateway (its models are
// named vendor/model, as the demo's openai/gpt-4o target asks).
var demoUpstreams = map[string]string{
	"fake-openai":     "https://api.openai.com",
	"fake-anthropic":  "https://api.anthropic.com",
	"fake-openrouter": "http://litellm.llm.svc.cluster.local:80",
}

// examples are the generated manifests under istio/examples, each from the demo policy.
var exampleManifests = []struct {
	file string  // under istio/examples
	opts Options // Image, ImageDigest and Upstreams are filled in
}{
	{"gateway.yaml", Options{Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}},
	{"sidecar.yaml", Options{Attach: AttachSidecar, Namespace: "agents", Selector: map[string]string{"app": "agent"}}},
	{"gateway-wasmplugin.yaml", Options{Mode: ModeWasmPlugin, Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}},
	{"gateway-trafficextension.yaml", Options{Mode: ModeTrafficExtension, Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}},
}

func exampleOptions(o Options) Options {
	o.Image = "oci://ghcr.io/spillwayproxy/spillway:0.1.0"
	o.ImageDigest = exampleDigest
	o.Upstreams = demoUpstreams
	return o
}

// demoPolicy is the demo policy as a mode needs it: a WasmPlugin or TrafficExtension
// cannot set allow_on_headers_stop_iteration, so those run it header-routed.
func demoPolicy(t *testing.T, mode Mode) []byte {
	t.Helper()
	if mode != ModeWasmPlugin && mode != ModeTrafficExtension {
		return examples.Demo()
	}
	doc, err := policyfile.ToJSON(examples.Demo())
	if err == nil {
		doc, err = sjson.SetBytes(doc, "routing.mode", "headers")
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func renderDemo(t *testing.T, o Options) *Manifests {
	t.Helper()
	m, err := Render(demoPolicy(t, o.Mode), exampleOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestExamples(t *testing.T) {
	for _, ex := range exampleManifests {
		t.Run(ex.file, func(t *testing.T) {
			m := renderDemo(t, ex.opts)
			y, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			from := "policies/examples/demo.yaml"
			if ex.opts.Mode == ModeWasmPlugin || ex.opts.Mode == ModeTrafficExtension {
				from += " with routing.mode: headers"
			}
			got := append([]byte("# Generated from "+from+" by istio.Render; do not edit.\n"+
				"# Regenerate: go test ./istio -run TestExamples -update\n"), y...)
			path := filepath.Join("examples", ex.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./istio -run TestExamples -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s is stale: go test ./istio -run TestExamples -update", path)
			}
			// What sits on disk is what a user applies: it validates as read from there.
			if err := Validate(want); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMeshRouting follows a request through the generated routes as istiod builds them:
// the filter sets the chosen provider's :authority and cluster header, the route cache is
// cleared, and the router matches the request again in that host's virtual host (a
// VirtualService host bound to the filter's gateway or to the mesh). Every provider must
// land on its own Istio cluster with the header removed, the one the failover callouts
// name too; what the filter did not route gets the not-routed answer.
func TestMeshRouting(t *testing.T) {
	for _, ex := range exampleManifests {
		t.Run(ex.file, func(t *testing.T) {
			m := renderDemo(t, ex.opts)
			s, err := checkOptions(exampleOptions(ex.opts))
			if err != nil {
				t.Fatal(err)
			}
			p, err := policies.Parse(m.PluginConfig, policies.ParseOptions{LookupEnv: func(string) (string, bool) { return "", false }})
			if err != nil {
				t.Fatal(err)
			}
			res := p.Resolved()
			header := res.Routing.ClusterHeader
			for _, pv := range res.Providers {
				r := routeRequest(t, m.Objects, s.gatewayRef, pv.Authority, map[string]string{header: pv.Cluster})
				if r == nil || len(r.Route) != 1 {
					t.Fatalf("provider %s: authority %q, %s: %q: no route to a destination", pv.ID, pv.Authority, header, pv.Cluster)
				}
				d := r.Route[0].Destination
				if got := clusterName(d.GetPort().GetNumber(), d.Host); got != pv.Cluster {
					t.Errorf("provider %s: routed to %s, the filter named %s", pv.ID, got, pv.Cluster)
				}
				if !slices.Contains(r.GetHeaders().GetRequest().GetRemove(), header) {
					t.Errorf("provider %s: the route forwards the cluster header %s upstream", pv.ID, header)
				}
				if pv.Cluster != m.Clusters[clusterOfProvider(t, examples.Demo(), pv.ID)] {
					t.Errorf("provider %s: plugin config cluster %s, Manifests.Clusters says %v", pv.ID, pv.Cluster, m.Clusters)
				}
				// Without the header (a request the filter did not route) the provider's
				// host answers not-routed on a gateway; another provider's cluster never
				// reaches this host.
				other := "outbound|80||elsewhere.example.com"
				for _, hdrs := range []map[string]string{nil, {header: other}} {
					r := routeRequest(t, m.Objects, s.gatewayRef, pv.Authority, hdrs)
					if r == nil {
						t.Fatalf("provider %s: headers %v: no route at all", pv.ID, hdrs)
					}
					if s.Attach == AttachGateway && r.DirectResponse.GetStatus() != 404 {
						t.Errorf("provider %s: headers %v: route %s, want the not-routed 404", pv.ID, hdrs, r.Name)
					}
				}
			}
			for _, h := range s.Hosts {
				if r := routeRequest(t, m.Objects, s.gatewayRef, h, map[string]string{header: res.Providers[0].Cluster}); r.GetDirectResponse().GetStatus() != 404 {
					t.Errorf("frontend %s: route %v, want the not-routed 404 (the filter moves every routed request to its provider's host)", h, r)
				}
			}
			checkBufferPatches(t, m.Objects, s, res)
		})
	}
}

func clusterOfProvider(t *testing.T, doc []byte, id string) string {
	t.Helper()
	p, err := policies.Parse(mustJSON(t, doc), policies.ParseOptions{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range p.Providers {
		if pr.ID == id {
			return pr.Cluster
		}
	}
	t.Fatalf("no provider %s", id)
	return ""
}

// routeRequest picks the route istiod's configuration would: the VirtualService bound to
// gateway whose hosts hold authority, its first HTTP route whose header matches all hold.
func routeRequest(t *testing.T, objs []Object, gateway, authority string, headers map[string]string) *networking.HTTPRoute {
	t.Helper()
	var found *networking.VirtualService
	for i := range objs {
		vs, ok := objs[i].Spec.(*networking.VirtualService)
		if ok && slices.Contains(vs.Hosts, authority) && slices.Contains(vs.Gateways, gateway) {
			if found != nil {
				t.Fatalf("two VirtualServices hold host %s", authority)
			}
			found = vs
		}
	}
	if found == nil {
		t.Fatalf("no VirtualService on %s holds host %s: the re-routed request finds no virtual host", gateway, authority)
	}
	for _, r := range found.Http {
		if len(r.Match) == 0 {
			return r
		}
		for _, m := range r.Match {
			ok := true
			for name, sm := range m.Headers {
				if headers[name] != sm.GetExact() {
					ok = false
				}
			}
			if ok {
				return r
			}
		}
	}
	return nil
}

// checkBufferPatches: every virtual host a Spillway request starts or ends in gets the
// body buffer limit above the policy's, and the listener they are served on the same
// connection buffer limit (Envoy 1.36 buffers a request held at its headers under it); in
// the Full mode the filter (disabled by default) is enabled there and nowhere else.
func checkBufferPatches(t *testing.T, objs []Object, s *settings, res *policies.Resolved) {
	t.Helper()
	var hosts []string
	for i := range objs {
		if vs, ok := objs[i].Spec.(*networking.VirtualService); ok {
			hosts = append(hosts, vs.Hosts...)
		}
	}
	port := s.Port
	if s.Attach == AttachGateway {
		port = s.GatewayPort
	}
	listenerPort := s.Port
	if s.Attach == AttachGateway {
		listenerPort = s.GatewayListenerPort
	}
	patched := map[string]*routev3.VirtualHost{}
	var listeners []*listenerv3.Listener
	disabled := false
	for i := range objs {
		ef, ok := objs[i].Spec.(*networking.EnvoyFilter)
		if !ok {
			continue
		}
		for _, cp := range ef.ConfigPatches {
			js, err := cp.Patch.Value.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			switch cp.ApplyTo {
			case networking.EnvoyFilter_VIRTUAL_HOST:
				vh := new(routev3.VirtualHost)
				if err := strictProto.Unmarshal(js, vh); err != nil {
					t.Fatal(err)
				}
				rc := cp.Match.GetRouteConfiguration()
				if rc.PortNumber != port {
					t.Errorf("virtual host patch on port %d, the filter's requests use %d", rc.PortNumber, port)
				}
				patched[rc.GetVhost().GetName()] = vh
			case networking.EnvoyFilter_LISTENER:
				l := new(listenerv3.Listener)
				if err := strictProto.Unmarshal(js, l); err != nil {
					t.Fatal(err)
				}
				if m := cp.Match.GetListener(); cp.Patch.Operation != networking.EnvoyFilter_Patch_MERGE ||
					cp.Match.GetContext() != (&builder{s: s}).patchContext() || m.GetPortNumber() != listenerPort {
					t.Errorf("listener patch %v %v on port %d, want a MERGE into the listener on %d", cp.Patch.Operation, cp.Match.GetContext(), m.GetPortNumber(), listenerPort)
				}
				listeners = append(listeners, l)
			case networking.EnvoyFilter_HTTP_FILTER:
				hf := new(hcmv3.HttpFilter)
				if err := strictProto.Unmarshal(js, hf); err != nil {
					t.Fatal(err)
				}
				disabled = hf.Disabled
			}
		}
	}
	full := s.Mode == ModeFull
	if full && !disabled {
		t.Error("the HTTP filter is enabled by default: it would run on every host of the listener")
	}
	// Only the Full mode's filter holds a request at its headers while it buffers the body;
	// the header-routed one lets the router apply the virtual hosts' limit first.
	if want := map[bool]int{true: 1, false: 0}[s.Mode == ModeFull]; len(listeners) != want {
		t.Errorf("%d listener patches, want %d raising per_connection_buffer_limit_bytes", len(listeners), want)
	}
	if len(patched) != len(hosts) {
		t.Errorf("%d virtual hosts patched, %d Spillway hosts", len(patched), len(hosts))
	}
	b := &builder{s: s}
	for _, h := range hosts {
		name := h + ":" + itoa(port)
		vh, ok := patched[name]
		if !ok {
			t.Errorf("virtual host %s: not patched", name)
			continue
		}
		if got := vh.GetRequestBodyBufferLimit().GetValue(); got <= uint64(res.MaxRequestBodyBytes) {
			t.Errorf("virtual host %s: body buffer limit %d, not above maxRequestBodyBytes %d: Envoy would answer its own 413 first", name, got, res.MaxRequestBodyBytes)
		}
		if len(listeners) == 1 && uint64(listeners[0].GetPerConnectionBufferLimitBytes().GetValue()) != vh.GetRequestBodyBufferLimit().GetValue() {
			t.Errorf("virtual host %s: body buffer limit %d, the listener's %d: Envoy 1.36 would buffer a held request under the smaller",
				name, vh.GetRequestBodyBufferLimit().GetValue(), listeners[0].GetPerConnectionBufferLimitBytes().GetValue())
		}
		_, enabled := vh.TypedPerFilterConfig[b.filterName()]
		if enabled != full {
			t.Errorf("virtual host %s: filter enabled %v, want %v", name, enabled, full)
		}
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func mustJSON(t *testing.T, doc []byte) []byte {
	t.Helper()
	js, err := policyfile.ToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestPluginConfig: the policy the filter receives keeps ${ENV} references, names Istio's
// clusters, and reaches each attachment unchanged.
func TestPluginConfig(t *testing.T) {
	full := renderDemo(t, exampleManifests[0].opts)
	if !bytes.Contains(full.PluginConfig, []byte(`"Bearer ${OPENAI_KEY_A:-demo-key-a}"`)) {
		t.Error("the plugin config lost its ${OPENAI_KEY_A} reference: the key would be fixed at render time")
	}
	for _, want := range []string{"outbound|80||api.openai.com", "outbound|80||api.anthropic.com", "outbound|80||litellm.llm.svc.cluster.local"} {
		if !bytes.Contains(full.PluginConfig, []byte(want)) {
			t.Errorf("plugin config lacks cluster %s", want)
		}
	}
	wantEnv := []string{"ANTHROPIC_KEY", "OPENAI_KEY_A", "OPENAI_KEY_B", "OPENROUTER_KEY", "SPILLWAY_ADMIN_TOKEN"}
	if !slices.Equal(full.HostEnv, wantEnv) {
		t.Errorf("host env %v, want %v", full.HostEnv, wantEnv)
	}
	wp := renderDemo(t, exampleManifests[2].opts)
	var plugin *extensionsapi.WasmPlugin
	for i := range wp.Objects {
		if p, ok := wp.Objects[i].Spec.(*extensionsapi.WasmPlugin); ok {
			plugin = p
		}
	}
	if plugin == nil {
		t.Fatal("no WasmPlugin rendered")
	}
	js, err := plugin.PluginConfig.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	a, b := canonicalJSON(t, js), canonicalJSON(t, wp.PluginConfig)
	if a != b {
		t.Errorf("the WasmPlugin's pluginConfig reads back as\n%s\nnot the rendered policy\n%s", a, b)
	}
	var hostEnv []string
	for _, e := range plugin.VmConfig.GetEnv() {
		if e.ValueFrom == extensionsapi.EnvValueSource_HOST {
			hostEnv = append(hostEnv, e.Name)
		}
	}
	if !slices.Equal(hostEnv, wantEnv) {
		t.Errorf("WasmPlugin env from the host %v, want %v", hostEnv, wantEnv)
	}
}

func canonicalJSON(t *testing.T, js []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v) // sorted keys, one spelling of every number
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestRenderRefusesFailOpen: in every mode and attachment, fail-open is refused as an
// OptionError on FailurePolicy (the CLI's -failure-policy) that says why: istiod's routes
// match headers a client can send, so with the filter skipped the client would pick the
// provider. fail-closed renders.
func TestRenderRefusesFailOpen(t *testing.T) {
	for _, ex := range exampleManifests {
		t.Run(ex.file, func(t *testing.T) {
			o := exampleOptions(ex.opts)
			o.FailurePolicy = FailOpen
			_, err := Render(demoPolicy(t, o.Mode), o)
			var oe OptionError
			if !errors.As(err, &oe) || oe.Option != "FailurePolicy" || !strings.Contains(oe.Message, "a client can send") {
				t.Fatalf("err %v, want an OptionError on FailurePolicy saying a client could pick the provider", err)
			}
			o.FailurePolicy = FailClosed
			if _, err := Render(demoPolicy(t, o.Mode), o); err != nil {
				t.Fatalf("fail-closed: %v", err)
			}
		})
	}
}

// TestMeshPolicyRoutesByHeader: the policy the filter gets in a mesh names the cluster header
// istiod's VirtualServices match, so the filter writes it (policies.RoutingSettings.
// ClusterByHeader); the routes match the same name.
func TestMeshPolicyRoutesByHeader(t *testing.T) {
	m := renderDemo(t, exampleManifests[0].opts)
	p, err := policies.Parse(m.PluginConfig, policies.ParseOptions{LookupEnv: func(string) (string, bool) { return "x", true }})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Resolved().Routing; !r.ClusterByHeader || r.ClusterHeader != "x-spillway-cluster" {
		t.Fatalf("mesh policy routing %+v: want it to route by x-spillway-cluster", r)
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "x-spillway-cluster:") {
		t.Error("no VirtualService matches x-spillway-cluster")
	}
}
