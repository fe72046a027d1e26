package envoy_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// demoUpstreams are the URLs the example bootstrap gives the demo policy's clusters.
var demoUpstreams = map[string]string{
	"fake-openai":     "https://api.openai.com",
	"fake-anthropic":  "https://api.anthropic.com",
	"fake-openrouter": "http://127.0.0.1:4000",
}

func loadDemo(t *testing.T) *envoy.Policy {
	t.Helper()
	p, err := envoy.LoadPolicy(examples.Demo(), envoy.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func load(t *testing.T, yaml string, opts envoy.LoadOptions) *envoy.Policy {
	t.Helper()
	p, err := envoy.LoadPolicy([]byte(yaml), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func bootstrap(t *testing.T, p *envoy.Policy, opts envoy.Options) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := envoy.Bootstrap(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parts digs the generated pieces out of a bootstrap.
type parts struct {
	listener *listenerv3.Listener
	hcm      *hcmv3.HttpConnectionManager
	wasm     *wasmfilterv3.Wasm // nil when the filter comes by ECDS
	filter   *hcmv3.HttpFilter
	routes   []*routev3.Route
	vhost    *routev3.VirtualHost
	clusters map[string]*clusterv3.Cluster
}

func dig(t *testing.T, b *bootstrapv3.Bootstrap) parts {
	t.Helper()
	var ps parts
	ls := b.GetStaticResources().GetListeners()
	if len(ls) != 1 {
		t.Fatalf("%d listeners, want 1", len(ls))
	}
	ps.listener = ls[0]
	ps.hcm = unpack[*hcmv3.HttpConnectionManager](t, ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	filters := ps.hcm.GetHttpFilters()
	if len(filters) != 2 || filters[1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("http filters: %v, want Spillway then the router", filters)
	}
	ps.filter = filters[0]
	if tc := filters[0].GetTypedConfig(); tc != nil {
		ps.wasm = unpack[*wasmfilterv3.Wasm](t, tc)
	}
	ps.vhost = ps.hcm.GetRouteConfig().GetVirtualHosts()[0]
	ps.routes = ps.vhost.GetRoutes()
	ps.clusters = make(map[string]*clusterv3.Cluster)
	for _, c := range b.GetStaticResources().GetClusters() {
		ps.clusters[c.GetName()] = c
	}
	return ps
}

func unpack[M proto.Message](t *testing.T, a *anypb.Any) M {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	typed, ok := any(m).(M)
	if !ok {
		t.Fatalf("Any holds %T", m)
	}
	return typed
}

func TestWasmFilterCarriesThePolicyAndTheOptionsSpillwayNeeds(t *testing.T) {
	p := loadDemo(t)
	ps := dig(t, bootstrap(t, p, envoy.Options{Upstreams: demoUpstreams}))
	if ps.wasm == nil {
		t.Fatal("no inline Wasm filter")
	}
	pc := ps.wasm.GetConfig()
	if !pc.GetAllowOnHeadersStopIteration().GetValue() {
		t.Error("allow_on_headers_stop_iteration is not true: a held request would never get its body")
	}
	if pc.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_RELOAD {
		t.Errorf("failure_policy %v, want FAIL_RELOAD (explicit)", pc.GetFailurePolicy())
	}
	vm := pc.GetVmConfig()
	if vm.GetRuntime() != "envoy.wasm.runtime.v8" || vm.GetVmId() != envoy.VMID {
		t.Errorf("vm runtime %q id %q", vm.GetRuntime(), vm.GetVmId())
	}
	if got := vm.GetCode().GetLocal().GetFilename(); got != envoy.DefaultModulePath {
		t.Errorf("module %q, want %q", got, envoy.DefaultModulePath)
	}
	// Every ${NAME} in demo.yaml, and the queue defaults the filter always reads.
	want := []string{"ANTHROPIC_KEY", "OPENAI_KEY_A", "OPENAI_KEY_B", "OPENROUTER_KEY",
		"RATE_LIMIT_EXECUTION_MAX_WAIT_MS", "RATE_LIMIT_MAX_QUEUE_DEPTH", "RATE_LIMIT_MAX_WAIT_MS", "SPILLWAY_ADMIN_TOKEN"}
	if got := vm.GetEnvironmentVariables().GetHostEnvKeys(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("host_env_keys %v, want %v", got, want)
	}
	if len(vm.GetEnvironmentVariables().GetKeyValues()) != 0 {
		t.Error("key_values set: values would sit in the configuration")
	}
	var cfg wrapperspb.StringValue
	if err := pc.GetConfiguration().UnmarshalTo(&cfg); err != nil {
		t.Fatalf("configuration is not a StringValue: %v", err)
	}
	// The configuration is the policy, ${NAME} kept, and the filter's parser accepts it.
	if !strings.Contains(cfg.GetValue(), "${OPENAI_KEY_A:-demo-key-a}") {
		t.Error("configuration lost the ${NAME} references the filter expands from its VM environment")
	}
	env := map[string]string{"OPENAI_KEY_A": "sk-a"}
	parsed, err := policies.Parse([]byte(cfg.GetValue()), policies.ParseOptions{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("the filter would refuse its configuration: %v", err)
	}
	if got := parsed.Providers[0].Connections[0].Credential.Value.Reveal(); got != "Bearer sk-a" {
		t.Errorf("credential expands to %q in the filter, want the VM environment's", got)
	}
}

func TestSecretsNeverReachTheConfiguration(t *testing.T) {
	const secret = "sk-live-very-secret-value"
	policy := `
providers:
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - id: a
        credential: {header: authorization, value: "Bearer ${OPENAI_KEY}"}
routes:
  - model: gpt-4o
    targets: [{provider: openai}]
admin: {token: "${ADMIN_TOKEN}"}
`
	// LookupEnv as lint -env uses it: the secrets are set, and checked, but never copied.
	p := load(t, policy, envoy.LoadOptions{LookupEnv: func(string) (string, bool) { return secret, true }})
	for _, opts := range []envoy.Options{{}, {XDS: "127.0.0.1:18000"}} {
		out, err := envoy.MarshalYAML(bootstrap(t, p, opts))
		if err != nil {
			t.Fatal(err)
		}
		ext, err := envoy.ExtensionConfig(p, opts)
		if err != nil {
			t.Fatal(err)
		}
		extYAML, err := envoy.MarshalYAML(ext)
		if err != nil {
			t.Fatal(err)
		}
		for name, doc := range map[string][]byte{"bootstrap": out, "ECDS resource": extYAML} {
			if strings.Contains(string(doc), secret) {
				t.Errorf("xds=%q: the %s contains a secret", opts.XDS, name)
			}
		}
		if !strings.Contains(string(extYAML), "OPENAI_KEY") || !strings.Contains(string(extYAML), "ADMIN_TOKEN") {
			t.Errorf("the ECDS resource does not pass OPENAI_KEY and ADMIN_TOKEN to the VM")
		}
	}
}

// TestRouteReadsNoClientHeader: the one route takes its cluster from the filter state the
// filter writes (the matcher cluster specifier on wasm.spillway_target, the key Envoy's
// Wasm filter stores proxy_set_property(["spillway_target"]) under), maps every provider
// cluster to itself and anything else to the default cluster, and reads no request header
// anywhere: a request the filter never saw (failure_policy FAIL_OPEN after a VM failure)
// cannot name its cluster. The client's x-spillway-cluster is removed. The bootstrap
// validates with go-control-plane (bootstrap() checks every Any).
func TestRouteReadsNoClientHeader(t *testing.T) {
	policy := `
providers:
  - {id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}]}
  - {id: local, cluster: ollama, connections: [{id: b}]}
routes:
  - {model: "*", targets: [{provider: local}, {provider: openai}]}
maxRequestBodyBytes: 33554432
`
	p := load(t, policy, envoy.LoadOptions{})
	ps := dig(t, bootstrap(t, p, envoy.Options{Upstreams: map[string]string{"ollama": "http://10.0.0.7:11434"}}))
	if len(ps.routes) != 1 {
		t.Fatalf("%d routes, want one", len(ps.routes))
	}
	r := ps.routes[0]
	if m := r.GetMatch(); m.GetPrefix() != "/" || len(m.GetHeaders()) != 0 || len(m.GetQueryParameters()) != 0 {
		t.Errorf("route match %v, want every request by prefix / alone", m)
	}
	if h := r.GetRoute().GetClusterHeader(); h != "" {
		t.Errorf("cluster_header %q: a client could name its cluster", h)
	}
	key, clusters, absent, unknown := routeMatcher(t, r)
	if key != "wasm.spillway_target" {
		t.Errorf("matcher input: filter state %q, want wasm.spillway_target", key)
	}
	if want := map[string]string{"openai": "openai", "ollama": "ollama"}; !maps.Equal(clusters, want) {
		t.Errorf("matcher map %v, want %v", clusters, want)
	}
	if absent != "openai" {
		t.Errorf("without the filter state: %q, want the first provider's cluster", absent)
	}
	// A filter state the map lacks (a policy this bootstrap was not rendered for) must not
	// take a connection's credential to the default cluster: a cluster no one has (NC).
	if _, defined := ps.clusters[unknown]; defined || unknown == "" || unknown == absent {
		t.Errorf("an unknown filter state goes to %q: want a cluster the bootstrap does not define", unknown)
	}
	if got := r.GetRequestHeadersToRemove(); !slices.Equal(got, []string{"x-spillway-cluster"}) {
		t.Errorf("request_headers_to_remove %v, want [x-spillway-cluster]", got)
	}
	// The same holds in Envoy's own reading of the configuration: no request-header input,
	// no header match, no cluster_header anywhere in the route configuration.
	text := prototext.Format(ps.hcm.GetRouteConfig())
	for _, bad := range []string{"HttpRequestHeaderMatchInput", "cluster_header"} {
		if strings.Contains(text, bad) {
			t.Errorf("the route configuration has %s:\n%s", bad, text)
		}
	}
	// Defaults: body wait 10 s; queue 30 s + combo wait budget 90 s + attempts min(10 min,
	// 3 × 10 min) = 12 min, plus 30 s of slack.
	wantIdle := 12*time.Minute + 30*time.Second
	for _, r := range ps.routes {
		ra := r.GetRoute()
		if ra.GetTimeout() == nil || ra.GetTimeout().AsDuration() != 0 {
			t.Errorf("%s: route timeout %v, want 0 (off: the 15 s default would cut a long stream)", r.GetName(), ra.GetTimeout())
		}
		if got := ra.GetIdleTimeout().AsDuration(); got != wantIdle {
			t.Errorf("%s: idle timeout %v, want %v", r.GetName(), got, wantIdle)
		}
		if !ra.GetAutoHostRewrite().GetValue() {
			t.Errorf("%s: no auto_host_rewrite", r.GetName())
		}
	}
	if got := ps.hcm.GetStreamIdleTimeout().AsDuration(); got != wantIdle {
		t.Errorf("stream_idle_timeout %v, want %v", got, wantIdle)
	}
	if got, want := ps.vhost.GetRequestBodyBufferLimit().GetValue(), uint64(32<<20+1<<20); got != want {
		t.Errorf("request_body_buffer_limit %d, want %d (maxRequestBodyBytes + 1 MiB)", got, want)
	}
	// Envoy before 1.37 buffers a request Spillway holds at its headers under the
	// connection's limit: the listener carries the request limit too.
	if got, want := ps.listener.GetPerConnectionBufferLimitBytes().GetValue(), uint32(32<<20+1<<20); got != want {
		t.Errorf("per_connection_buffer_limit_bytes %d, want %d (the request limit)", got, want)
	}
}

func TestIdleTimeoutFollowsThePolicysBounds(t *testing.T) {
	base := `
providers:
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - {id: a, rateLimitOverrides: {maxWaitMs: 60000, executionMaxWaitMs: 120000}}
      - {id: b}
routes: [{model: gpt-4o, targets: [{provider: openai}]}]
`
	tests := []struct {
		name       string
		resilience string        // appended to the policy
		want       time.Duration // the generated idle timeout
	}{
		// queue: the longest connection wait (a's 60 s); attempts: min(failover budget 10 min,
		// 3 × the longest execution cap, b's default 10 min); combo budget 90 s; + 30 s.
		{"defaults", "", 60*time.Second + 90*time.Second + 10*time.Minute + 30*time.Second},
		// Without combo waits the budget drops out.
		{"no combo wait", "resilience: {comboCooldownWait: {enabled: false}}", 60*time.Second + 10*time.Minute + 30*time.Second},
		// One attempt of at most 10 min (b's default execution cap).
		{"one attempt", "resilience: {failover: {maxAttempts: 1}}", 60*time.Second + 90*time.Second + 10*time.Minute + 30*time.Second},
		// A small failover budget caps the attempts.
		{"small budget", "resilience: {failover: {budgetMs: 120000}}", 60*time.Second + 90*time.Second + 2*time.Minute + 30*time.Second},
		// Shorter execution caps: b's drops to 20 s, a's override (2 min) is now the longest:
		// 3 attempts × 2 min.
		{"short attempts", "resilience: {requestQueue: {executionMaxWaitMs: 20000}}",
			60*time.Second + 90*time.Second + 3*2*time.Minute + 30*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, base+tt.resilience, envoy.LoadOptions{})
			ps := dig(t, bootstrap(t, p, envoy.Options{}))
			if got := ps.hcm.GetStreamIdleTimeout().AsDuration(); got != tt.want {
				t.Errorf("idle timeout %v, want %v", got, tt.want)
			}
		})
	}
}

func TestProviderClusters(t *testing.T) {
	policy := `
providers:
  - {id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}]}
  - {id: azure, cluster: azure, authority: my.openai.azure.com, connections: [{id: b}]}
  - {id: gw, cluster: gw, connections: [{id: c}]}
  - {id: v6, cluster: v6, connections: [{id: d}]}
  - {id: again, cluster: openai, authority: api.openai.com, connections: [{id: e}]}
routes: [{model: "*", targets: [{provider: openai}, {provider: azure}, {provider: gw}, {provider: v6}, {provider: again}]}]
`
	p := load(t, policy, envoy.LoadOptions{})
	ps := dig(t, bootstrap(t, p, envoy.Options{Upstreams: map[string]string{
		"azure": "https://10.1.2.3:8443", // a private endpoint: Host stays the authority
		"gw":    "http://gateway.internal:8080",
		"v6":    "https://[2001:db8::1]",
	}}))
	tests := []struct {
		cluster  string
		tls      bool   // a TLS transport socket and ALPN-chosen protocol
		sni      string // the TLS SNI ("" for an IP endpoint)
		san      string // the SAN the certificate must carry
		address  string // the endpoint's socket address
		port     uint32
		hostname string // the endpoint hostname, which auto_host_rewrite sends as Host
		dns      bool   // resolved by DNS (else a static IP)
	}{
		{"openai", true, "api.openai.com", "api.openai.com", "api.openai.com", 443, "api.openai.com", true},
		{"azure", true, "", "10.1.2.3", "10.1.2.3", 8443, "my.openai.azure.com", false},
		{"gw", false, "", "", "gateway.internal", 8080, "gateway.internal:8080", true},
		{"v6", true, "", "2001:db8::1", "2001:db8::1", 443, "2001:db8::1", false},
	}
	if len(ps.clusters) != len(tests) {
		t.Errorf("%d clusters, want %d (one per provider cluster, shared ones once)", len(ps.clusters), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.cluster, func(t *testing.T) {
			c := ps.clusters[tt.cluster]
			if c == nil {
				t.Fatal("missing")
			}
			ep := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint()
			sa := ep.GetAddress().GetSocketAddress()
			if sa.GetAddress() != tt.address || sa.GetPortValue() != tt.port || ep.GetHostname() != tt.hostname {
				t.Errorf("endpoint %s:%d hostname %q, want %s:%d %q", sa.GetAddress(), sa.GetPortValue(), ep.GetHostname(), tt.address, tt.port, tt.hostname)
			}
			if dns := c.GetClusterType().GetName() == "envoy.clusters.dns"; dns != tt.dns || !tt.dns && c.GetType() != clusterv3.Cluster_STATIC {
				t.Errorf("discovery: cluster_type %q type %v, want dns=%v", c.GetClusterType().GetName(), c.GetType(), tt.dns)
			}
			protocol := unpack[*httpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
			if !tt.tls {
				if c.GetTransportSocket() != nil || protocol.GetExplicitHttpConfig().GetHttpProtocolOptions() == nil {
					t.Errorf("plain cluster: transport %v protocol %v, want plain HTTP/1.1", c.GetTransportSocket(), protocol)
				}
				return
			}
			if protocol.GetAutoConfig() == nil {
				t.Errorf("TLS cluster protocol %v, want auto_config (ALPN)", protocol)
			}
			tls := unpack[*tlsv3.UpstreamTlsContext](t, c.GetTransportSocket().GetTypedConfig())
			if tls.GetSni() != tt.sni {
				t.Errorf("SNI %q, want %q", tls.GetSni(), tt.sni)
			}
			vc := tls.GetCommonTlsContext().GetValidationContext()
			if vc.GetTrustedCa().GetFilename() != envoy.DefaultCAFile {
				t.Errorf("trusted CA %v: without one Envoy does not verify the provider", vc.GetTrustedCa())
			}
			sans := vc.GetMatchTypedSubjectAltNames()
			if len(sans) != 1 || sans[0].GetMatcher().GetExact() != tt.san {
				t.Errorf("SAN matchers %v, want exactly %q", sans, tt.san)
			}
		})
	}
}

func TestBootstrapRefusesWhatEnvoyCouldNotServe(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		opts   envoy.Options
		want   string // in the error
		path   string // the field path of the policies.FieldError, "" for none
	}{
		{"cluster without URL or authority",
			"providers: [{id: p, cluster: local, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{}, "has no upstream URL", "providers[0].cluster"},
		{"URL with a path",
			"providers: [{id: p, cluster: or, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{Upstreams: map[string]string{"or": "https://openrouter.ai/api"}}, "scheme, host and port only", "providers[0].cluster"},
		{"URL for an unknown cluster",
			"providers: [{id: p, cluster: c, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{Upstreams: map[string]string{"typo": "https://x.example"}}, `"typo", which no provider names`, ""},
		{"reserved cluster name",
			"providers: [{id: p, cluster: spillway_xds, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{}, "reserved", "providers[0].cluster"},
		{"the route's unknown-cluster name",
			"providers: [{id: p, cluster: spillway_unknown_cluster, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{}, "reserved", "providers[0].cluster"},
		{"remote module without sha256",
			"providers: [{id: p, cluster: c, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{Module: envoy.Module{URL: "https://example.com/spillway.wasm"}}, "sha256", ""},
		{"stats tag without a capture group",
			"providers: [{id: p, cluster: c, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{StatsTags: []envoy.StatsTag{{Name: "provider", Regex: `^wasmcustom\.spillway`}}}, "no capture group", ""},
		{"default cluster no provider names",
			"providers: [{id: p, cluster: c, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]",
			envoy.Options{DefaultCluster: "nope"}, "not a provider's cluster", ""},
		// A policy routing by header would write no filter state, and the route reads
		// nothing else.
		{"routing by header",
			"providers: [{id: p, cluster: c, authority: h.example, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]\nrouting: {clusterHeader: x-spillway-cluster}",
			envoy.Options{}, "wasm.spillway_target, which a client cannot write", "routing.clusterHeader"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, tt.policy, envoy.LoadOptions{})
			_, err := envoy.Bootstrap(p, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one saying %q", err, tt.want)
			}
			if tt.path == "" {
				return
			}
			fe, ok := envoy.AsFieldErrors(err)
			if !ok || len(fe) != 1 || fe[0].Path != tt.path {
				t.Errorf("field errors %v, want one at %s", fe, tt.path)
			}
		})
	}
}

func TestLoadPolicyWantsLiteralClusterNames(t *testing.T) {
	policy := "providers: [{id: p, cluster: \"${CLUSTER}\", authority: \"${HOST}\", connections: [{id: a}]}]\n" +
		"routes: [{model: m, targets: [{provider: p}]}]\nrouting: {clusterHeader: \"${HDR}\"}"
	_, err := envoy.LoadPolicy([]byte(policy), envoy.LoadOptions{})
	fe, ok := envoy.AsFieldErrors(err)
	if !ok {
		t.Fatalf("err %v, want field errors", err)
	}
	var paths []string
	for _, e := range fe {
		paths = append(paths, e.Path)
	}
	if got := strings.Join(paths, " "); got != "providers[0].cluster providers[0].authority routing.clusterHeader" {
		t.Errorf("paths %q", got)
	}
}

func TestLoadPolicyReportsEveryProblemWithItsPath(t *testing.T) {
	_, err := envoy.LoadPolicy([]byte("providers: [{id: p, cluster: c, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: q}]}]\nbogus: 1"), envoy.LoadOptions{})
	fe, ok := envoy.AsFieldErrors(err)
	if !ok || len(fe) != 2 {
		t.Fatalf("err %v, want two field errors", err)
	}
	if fe[0].Path != "bogus" || fe[1].Path != "routes[0].targets[0].provider" {
		t.Errorf("paths %q, %q", fe[0].Path, fe[1].Path)
	}
}

func TestRemoteModuleAndECDSBootstrap(t *testing.T) {
	p := loadDemo(t)
	sum := strings.Repeat("ab", 32)
	b := bootstrap(t, p, envoy.Options{Upstreams: demoUpstreams, XDS: "xds.internal:18000",
		Module: envoy.Module{URL: "https://artifacts.example.com/spillway/v1/spillway.wasm", SHA256: sum}})
	ps := dig(t, b)
	if ps.wasm != nil {
		t.Error("the ECDS bootstrap still carries the filter inline")
	}
	cd := ps.filter.GetConfigDiscovery()
	if ps.filter.GetName() != envoy.ExtensionConfigName || cd == nil {
		t.Fatalf("filter %v, want config_discovery under the resource name %q", ps.filter, envoy.ExtensionConfigName)
	}
	if got := cd.GetTypeUrls(); len(got) != 1 || got[0] != "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm" {
		t.Errorf("type_urls %v", got)
	}
	grpc := cd.GetConfigSource().GetApiConfigSource().GetGrpcServices()
	if len(grpc) != 1 || grpc[0].GetEnvoyGrpc().GetClusterName() != envoy.XDSCluster {
		t.Errorf("config source %v", cd.GetConfigSource())
	}
	xds := ps.clusters[envoy.XDSCluster]
	if xds == nil {
		t.Fatal("no control plane cluster")
	}
	h2 := unpack[*httpv3.HttpProtocolOptions](t, xds.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
	if h2.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("xDS cluster protocol %v: gRPC needs HTTP/2", h2)
	}
	if ps.clusters[envoy.ModuleFetchCluster] == nil {
		t.Error("no cluster to fetch the remote module through")
	}

	ext, err := envoy.ExtensionConfig(p, envoy.Options{Module: envoy.Module{URL: "https://artifacts.example.com/spillway/v1/spillway.wasm", SHA256: sum}})
	if err != nil {
		t.Fatal(err)
	}
	if ext.GetName() != envoy.ExtensionConfigName {
		t.Errorf("ECDS resource %q", ext.GetName())
	}
	w := unpack[*wasmfilterv3.Wasm](t, ext.GetTypedConfig())
	remote := w.GetConfig().GetVmConfig().GetCode().GetRemote()
	if remote.GetSha256() != sum || remote.GetHttpUri().GetCluster() != envoy.ModuleFetchCluster {
		t.Errorf("remote code %v", remote)
	}
	if !w.GetConfig().GetAllowOnHeadersStopIteration().GetValue() {
		t.Error("ECDS resource without allow_on_headers_stop_iteration")
	}
}

func TestValidateOpensEveryAny(t *testing.T) {
	p := loadDemo(t)
	good := bootstrap(t, p, envoy.Options{Upstreams: demoUpstreams})
	if err := envoy.Validate(good); err != nil {
		t.Fatalf("generated bootstrap: %v", err)
	}

	// A rule broken two Anys deep (HCM → Wasm): the bootstrap's own ValidateAll cannot see it.
	bad := dig(t, good)
	bad.wasm.Config.Vm.(*wasmv3.PluginConfig_VmConfig).VmConfig.Code.GetLocal().Specifier = &corev3.DataSource_Filename{Filename: ""}
	wasmAny, err := anypb.New(bad.wasm)
	if err != nil {
		t.Fatal(err)
	}
	bad.filter.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: wasmAny}
	hcmAny, err := anypb.New(bad.hcm)
	if err != nil {
		t.Fatal(err)
	}
	good.StaticResources.Listeners[0].FilterChains[0].Filters[0].ConfigType.(*listenerv3.Filter_TypedConfig).TypedConfig = hcmAny
	if err := good.ValidateAll(); err != nil {
		t.Fatalf("the bootstrap's own ValidateAll already fails (%v): the test would prove nothing", err)
	}
	err = envoy.Validate(good)
	if err == nil || !strings.Contains(err.Error(), "Filename") || !strings.Contains(err.Error(), "typed_config(Wasm)") {
		t.Errorf("Validate: %v, want the empty module filename inside the Wasm Any, with its path", err)
	}

	// An Any whose type this binary does not know cannot be checked.
	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/example.Unknown", Value: []byte{}}
	good.StaticResources.Listeners[0].FilterChains[0].Filters[0].ConfigType.(*listenerv3.Filter_TypedConfig).TypedConfig = unknown
	if err := envoy.Validate(good); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Validate: %v, want an unregistered type reported", err)
	}
}

func TestFailurePolicyOption(t *testing.T) {
	p := loadDemo(t)
	for _, fp := range []wasmv3.FailurePolicy{wasmv3.FailurePolicy_FAIL_CLOSED, wasmv3.FailurePolicy_FAIL_OPEN} {
		w, err := envoy.WasmFilter(p, envoy.Options{FailurePolicy: fp})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.GetConfig().GetFailurePolicy(); got != fp {
			t.Errorf("failure policy %v, want %v", got, fp)
		}
	}
	if _, err := envoy.WasmFilter(p, envoy.Options{FailurePolicy: 42}); err == nil {
		t.Error("unknown failure policy accepted")
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	b := bootstrap(t, loadDemo(t), envoy.Options{Upstreams: demoUpstreams,
		StatsTags: []envoy.StatsTag{{Name: "spillway_provider", Regex: `^wasmcustom\.spillway_[a-z_]+\.(provider\.(\w+)\.)`}}})
	out, err := envoy.MarshalYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	var back bootstrapv3.Bootstrap
	if err := envoy.UnmarshalYAML(out, &back); err != nil {
		t.Fatalf("reading back: %v", err)
	}
	again, err := envoy.MarshalYAML(&back)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Error("YAML does not round-trip")
	}
	if !strings.Contains(string(out), "value: |-\n") {
		t.Error("the policy JSON is not a literal block")
	}
	if err := envoy.UnmarshalYAML([]byte("node: {id: x}\nbogus: 1\n"), &back); err == nil {
		t.Error("unknown field accepted")
	}
}

// TestShippedExamplesAreValid reads the generated envoy.yaml and envoy-ecds.yaml as Envoy
// would and checks them with every validator, Anys included (their freshness is
// envoy/cmd/spillway's golden test).
func TestShippedExamplesAreValid(t *testing.T) {
	for _, file := range []string{"envoy.yaml", "envoy-ecds.yaml"} {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var b bootstrapv3.Bootstrap
			if err := envoy.UnmarshalYAML(data, &b); err != nil {
				t.Fatal(err)
			}
			if err := envoy.Validate(&b); err != nil {
				t.Fatal(err)
			}
			ps := dig(t, &b)
			if key, _, _, _ := routeMatcher(t, ps.routes[0]); key != envoy.FilterStateTargetKey || ps.routes[0].GetRoute().GetTimeout().AsDuration() != 0 {
				t.Errorf("route %v", ps.routes[0])
			}
			// Every supported Envoy buffers the demo's bodies: the route's limit (1.37+,
			// applied when the route is matched) and the connection's (1.36, which a
			// request held at its headers buffers under) are the same.
			conn, route := ps.listener.GetPerConnectionBufferLimitBytes().GetValue(), ps.vhost.GetRequestBodyBufferLimit().GetValue()
			if conn == 0 || uint64(conn) != route || route <= 1<<20 {
				t.Errorf("per_connection_buffer_limit_bytes %d, request_body_buffer_limit %d: want both the request limit, above 1 MiB", conn, route)
			}
			if file == "envoy-ecds.yaml" {
				if ps.wasm != nil || ps.filter.GetConfigDiscovery() == nil {
					t.Error("the ECDS example carries the filter inline")
				}
				return
			}
			pc := ps.wasm.GetConfig()
			if !pc.GetAllowOnHeadersStopIteration().GetValue() || pc.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_RELOAD {
				t.Errorf("plugin config %v", pc)
			}
		})
	}
}

func TestFits(t *testing.T) {
	base := load(t, `
providers: [{id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}]}]
routes: [{model: m, targets: [{provider: openai}]}]
`, envoy.LoadOptions{})
	tests := []struct {
		name    string
		next    string // appended to base's document
		path    string // the conflict's field path; "" when it fits
		warning string // in the warnings
	}{
		{"retuned", "resilience: {requestQueue: {maxWaitMs: 1000}}", "", ""},
		{"new cluster", "", "providers[1].cluster", ""},
		{"larger body limit", "maxRequestBodyBytes: 16777216", "maxRequestBodyBytes", ""},
		{"smaller body limit", "maxRequestBodyBytes: 1048576", "", ""},
		{"longer waits", "resilience: {requestQueue: {maxWaitMs: 600000}}", "", "more than Envoy's idle timeout"},
		// The bootstrap has no upstream filter and no retry policy for the router path.
		{"to the router", "resilience: {failover: {via: router}}", "resilience.failover.via", ""},
		// Naming the default path changes nothing.
		{"callout named", "resilience: {failover: {via: callout, maxAttempts: 5}}", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "providers: [{id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: openai}]}]\n" + tt.next
			if tt.name == "new cluster" {
				doc = "providers: [{id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}]}, {id: eu, cluster: eu, authority: eu.example, connections: [{id: b}]}]\nroutes: [{model: m, targets: [{provider: openai}, {provider: eu}]}]\n"
			}
			warnings, err := envoy.Fits(base, load(t, doc, envoy.LoadOptions{}))
			fe, _ := envoy.AsFieldErrors(err)
			switch {
			case tt.path == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.path != "" && (len(fe) != 1 || fe[0].Path != tt.path):
				t.Errorf("err %v, want one conflict at %s", err, tt.path)
			}
			if got := strings.Join(warnings, "\n"); tt.warning == "" && got != "" || !strings.Contains(got, tt.warning) {
				t.Errorf("warnings %q, want %q", got, tt.warning)
			}
		})
	}
}

// TestFitsRouter: a bootstrap rendered for the router path fixes num_retries, so
// failover.maxAttempts may not change under it, and the path may not go back to callout.
func TestFitsRouter(t *testing.T) {
	doc := "providers: [{id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: openai}]}]\n"
	base := load(t, doc+"resilience: {failover: {via: router}}", envoy.LoadOptions{})
	tests := []struct {
		name string
		next string // appended to doc
		path string // the conflict's field path; "" when it fits
	}{
		// Another setting: fits.
		{"retuned", "resilience: {failover: {via: router}, requestQueue: {maxWaitMs: 1000}}", ""},
		// The route's num_retries is maxAttempts − 1 of the base.
		{"more attempts", "resilience: {failover: {via: router, maxAttempts: 5}}", "resilience.failover.maxAttempts"},
		// Back to callout: the router would still retry on the marker.
		{"to callout", "", "resilience.failover.via"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := envoy.Fits(base, load(t, doc+tt.next, envoy.LoadOptions{}))
			fe, _ := envoy.AsFieldErrors(err)
			switch {
			case tt.path == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.path != "" && (len(fe) != 1 || fe[0].Path != tt.path):
				t.Errorf("err %v, want one conflict at %s", err, tt.path)
			}
		})
	}
}

func TestLiteralCredentialsAreWarnedAbout(t *testing.T) {
	p := load(t, `
providers:
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - {id: a, credential: {header: authorization, value: "Bearer sk-literal"}}
      - {id: b, credential: {header: authorization, value: "Bearer ${KEY_B}"}}
      - {id: c}
routes: [{model: m, targets: [{provider: openai}]}]
admin: {token: "a-literal-admin-token-long-enough"}
`, envoy.LoadOptions{})
	var paths []string
	for _, w := range p.Parsed.Warnings {
		if strings.Contains(w.Message, "written literally") {
			paths = append(paths, w.Path)
		}
		if strings.Contains(w.Error(), "sk-literal") {
			t.Errorf("a warning repeats the secret: %v", w)
		}
	}
	if got := strings.Join(paths, " "); got != "providers[0].connections[0].credential.value admin.token" {
		t.Errorf("literal-secret warnings at %q", got)
	}
}

// TestECDSRefusesRoutingByHeader: a control plane cannot push a policy that routes by
// header into a bootstrap whose route reads filter state.
func TestECDSRefusesRoutingByHeader(t *testing.T) {
	p := load(t, "providers: [{id: p, cluster: c, authority: h.example, connections: [{id: a}]}]\n"+
		"routes: [{model: m, targets: [{provider: p}]}]\nrouting: {clusterHeader: x-route}", envoy.LoadOptions{})
	_, err := envoy.ExtensionConfig(p, envoy.Options{})
	fe, ok := envoy.AsFieldErrors(err)
	if !ok || len(fe) != 1 || fe[0] != envoy.ErrClusterHeader {
		t.Fatalf("err %v, want envoy.ErrClusterHeader", err)
	}
}

// TestConnectionManagerNormalisesPaths: the connection manager canonicalises every path
// before any filter runs (normalize_path, merge_slashes) and rejects an escaped slash with
// 400 (path_with_escaped_slashes_action REJECT_REQUEST: an SDK that POSTs does not follow
// UNESCAPE_AND_REDIRECT's 307).
func TestConnectionManagerNormalisesPaths(t *testing.T) {
	hcm := dig(t, bootstrap(t, loadDemo(t), envoy.Options{Upstreams: demoUpstreams})).hcm
	if !hcm.GetNormalizePath().GetValue() || !hcm.GetMergeSlashes() {
		t.Errorf("normalize_path %v, merge_slashes %v: want both", hcm.GetNormalizePath(), hcm.GetMergeSlashes())
	}
	if got := hcm.GetPathWithEscapedSlashesAction(); got != hcmv3.HttpConnectionManager_REJECT_REQUEST {
		t.Errorf("path_with_escaped_slashes_action %v, want REJECT_REQUEST", got)
	}
}
