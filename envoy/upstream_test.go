package envoy_test

import (
	"errors"
	"maps"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	matcherspecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/router/cluster_specifiers/matcher/v3"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

const protocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// twoClusters is a policy with two providers on two clusters: one over TLS, one plain.
const twoClusters = `
providers:
  - {id: openai, cluster: openai, authority: api.openai.com, connections: [{id: a}, {id: b}]}
  - {id: local, cluster: ollama, connections: [{id: c}]}
routes: [{model: "*", targets: [{provider: openai}, {provider: local}]}]
`

// viaRouter is appended to a policy to fail over through the router.
const viaRouter = "\nresilience: {failover: {via: router}}\n"

// TestDemoIsTheShippedBootstrap: the demo policy, which leaves failover.via unset and so
// fails over through the router (design.md §4: failover that streams is the default), gets
// the bootstrap envoy.yaml ships (whose bytes envoy/cmd/spillway's golden test pins),
// message for message: the upstream filter and the retry policy included.
func TestDemoIsTheShippedBootstrap(t *testing.T) {
	data, err := os.ReadFile("envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var golden bootstrapv3.Bootstrap
	if err := envoy.UnmarshalYAML(data, &golden); err != nil {
		t.Fatal(err)
	}
	// The CLI adds Spillway's metric tags (plugin/stats), which this package does not know.
	var tags []envoy.StatsTag
	for _, st := range golden.GetStatsConfig().GetStatsTags() {
		tags = append(tags, envoy.StatsTag{Name: st.GetTagName(), Regex: st.GetRegex()})
	}
	if len(tags) == 0 {
		t.Fatal("envoy.yaml has no stats_tags: the comparison below would not be the CLI's")
	}
	demo := loadDemo(t)
	if demo.Parsed.Resilience.Failover.Via != "" {
		t.Fatal("the demo policy sets failover.via: this test is about the default")
	}
	got := bootstrap(t, demo, envoy.Options{Upstreams: demoUpstreams, StatsTags: tags})
	if diff := cmp.Diff(&golden, got, protocmp.Transform()); diff != "" {
		t.Errorf("the default bootstrap differs from envoy.yaml (-golden +got):\n%s", diff)
	}
	if !bootstrapHasRetries(t, got) {
		t.Error("the demo's bootstrap has no router retries: an unset via must fail over through the router")
	}
	// The default is the router path exactly: the bootstrap of the same policy with
	// via: router written out is the same, plugin configuration included (Policy.For writes
	// the unset switches into it).
	explicit, err := sjson.SetBytes(demoJSON(t), "resilience.failover.via", "router")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, bootstrap(t, load(t, string(explicit), envoy.LoadOptions{}), envoy.Options{Upstreams: demoUpstreams, StatsTags: tags}),
		protocmp.Transform()); diff != "" {
		t.Errorf("the default differs from via: router (-default +router):\n%s", diff)
	}
}

// demoJSON is the demo policy as JSON.
func demoJSON(t *testing.T) []byte {
	t.Helper()
	doc, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestRouterAddsOnlyItsFields: failover.via router adds the upstream chain, the circuit
// breaker, the retry policy and the route's buffer limit, and changes nothing else — the
// plugin configuration aside, which is the policy itself and says via: router — against
// via: callout.
func TestRouterAddsOnlyItsFields(t *testing.T) {
	opts := envoy.Options{Upstreams: map[string]string{"ollama": "http://10.0.0.7:11434"}}
	off := bootstrap(t, load(t, twoClusters+"\nresilience: {failover: {via: callout}}\n", envoy.LoadOptions{}), opts)
	onPolicy := load(t, twoClusters+viaRouter, envoy.LoadOptions{})
	on := bootstrap(t, onPolicy, opts)
	if bootstrapHasRetries(t, off) {
		t.Fatal("a callout policy got the router's retries")
	}

	// Strip what the option adds from the on-bootstrap: what is left must be the default.
	stripped := proto.Clone(on).(*bootstrapv3.Bootstrap)
	ps := dig(t, stripped)
	if len(ps.clusters) != 2 {
		t.Fatalf("%d clusters, want 2", len(ps.clusters))
	}
	for _, c := range stripped.GetStaticResources().GetClusters() {
		c.CircuitBreakers = nil
		protocol := unpack[*httpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()[protocolOptionsKey])
		protocol.HttpFilters = nil
		c.TypedExtensionProtocolOptions[protocolOptionsKey] = mustAny(t, protocol)
	}
	// The plugin configuration is the policy JSON: put the callout policy's back.
	ps.wasm.Config.Configuration = dig(t, off).wasm.GetConfig().GetConfiguration()
	ps.filter.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ps.wasm)}
	routed := ps.routes[0]
	routed.GetRoute().RetryPolicy = nil
	routed.RequestBodyBufferLimit = nil
	routed.ResponseHeadersToRemove = nil
	stripped.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().Value = mustAny(t, ps.hcm).Value
	if diff := cmp.Diff(off, stripped, protocmp.Transform()); diff != "" {
		t.Errorf("the option changes more than its own fields (-off +on without them):\n%s", diff)
	}
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// bootstrapHasRetries reports whether any part of the router's failover is in a bootstrap.
func bootstrapHasRetries(t *testing.T, b *bootstrapv3.Bootstrap) bool {
	t.Helper()
	ps := dig(t, b)
	for _, r := range ps.routes {
		if r.GetRoute().GetRetryPolicy() != nil || r.GetRequestBodyBufferLimit() != nil || len(r.GetResponseHeadersToRemove()) > 0 {
			return true
		}
	}
	for _, c := range ps.clusters {
		protocol := unpack[*httpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()[protocolOptionsKey])
		if len(protocol.GetHttpFilters()) > 0 || c.GetCircuitBreakers() != nil {
			return true
		}
	}
	return false
}

func TestRouterPreparesRouterRetries(t *testing.T) {
	tests := []struct {
		name        string
		resilience  string // appended to twoClusters
		failure     wasmv3.FailurePolicy
		numRetries  uint32 // the routed route's num_retries: maxAttempts − 1
		maxBodySize uint64 // the policy's maxRequestBodyBytes
	}{
		// Defaults: 3 attempts, 8 MiB bodies, FAIL_RELOAD.
		{"defaults", "resilience: {failover: {via: router}}", 0, 2, 8 << 20},
		// One attempt: no retry at all, the retry policy stays (the marker is never honoured).
		{"one attempt", "resilience: {failover: {via: router, maxAttempts: 1}}", 0, 0, 8 << 20},
		// The most attempts the policy allows.
		{"twenty attempts", "resilience: {failover: {via: router, maxAttempts: 20}}", 0, 19, 8 << 20},
		// A larger body limit raises the retry buffer with it; another failure policy is
		// carried to the upstream instance too.
		{"large bodies, fail closed", "maxRequestBodyBytes: 33554432" + viaRouter, wasmv3.FailurePolicy_FAIL_CLOSED, 2, 32 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, twoClusters+tt.resilience, envoy.LoadOptions{})
			ps := dig(t, bootstrap(t, p, envoy.Options{
				Upstreams:     map[string]string{"ollama": "http://10.0.0.7:11434"},
				FailurePolicy: tt.failure,
			}))
			checkRoutes(t, ps, tt.numRetries, tt.maxBodySize)
			for _, name := range []string{"openai", "ollama"} {
				t.Run(name, func(t *testing.T) { checkCluster(t, ps, ps.clusters[name], name == "openai") })
			}
		})
	}
}

func checkRoutes(t *testing.T, ps parts, numRetries uint32, maxBody uint64) {
	t.Helper()
	routed := ps.routes[0]
	// Exactly these fields: the marker header alone, no retriable status codes, no other
	// retry_on condition (the router must never retry a provider's 429/5xx on its own).
	want := &routev3.RetryPolicy{
		RetryOn: "retriable-headers",
		RetriableHeaders: []*routev3.HeaderMatcher{{
			Name:                 "x-spillway-retry",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
		}},
		NumRetries: wrapperspb.UInt32(numRetries),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(time.Millisecond),
			MaxInterval:  durationpb.New(10 * time.Millisecond),
		},
	}
	if diff := cmp.Diff(want, routed.GetRoute().GetRetryPolicy(), protocmp.Transform()); diff != "" {
		t.Errorf("routed route's retry policy (-want +got):\n%s", diff)
	}
	if got := routed.GetRoute().GetRetryPolicy().GetRetriableStatusCodes(); len(got) != 0 {
		t.Errorf("retriable_status_codes %v: the router would retry a provider's status by itself", got)
	}
	// Twice the request limit: the router counts a body a filter resumed twice
	// (envoyproxy/envoy#30613), and must still hold a body of maxRequestBodyBytes.
	if got, min := routed.GetRequestBodyBufferLimit().GetValue(), 2*(maxBody+1<<20); got < min {
		t.Errorf("routed request_body_buffer_limit %d, want at least %d (2 × (maxRequestBodyBytes + 1 MiB))", got, min)
	}
	// (By field name: the deprecated getter is what staticcheck refuses.)
	if m := routed.ProtoReflect(); m.Has(m.Descriptor().Fields().ByName("per_request_buffer_limit_bytes")) {
		t.Error("per_request_buffer_limit_bytes set: deprecated, and Envoy refuses it next to request_body_buffer_limit")
	}
	// The marker never reaches a client.
	if got := routed.GetResponseHeadersToRemove(); len(got) != 1 || got[0] != "x-spillway-retry" {
		t.Errorf("routed response_headers_to_remove %v, want [x-spillway-retry]", got)
	}
}

func checkCluster(t *testing.T, ps parts, c *clusterv3.Cluster, tls bool) {
	t.Helper()
	if c == nil {
		t.Fatal("missing")
	}
	protocol := unpack[*httpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()[protocolOptionsKey])
	// The protocol the cluster chose stays: ALPN for TLS, HTTP/1.1 for plain HTTP.
	if tls && protocol.GetAutoConfig() == nil || !tls && protocol.GetExplicitHttpConfig().GetHttpProtocolOptions() == nil {
		t.Errorf("protocol options lost their protocol: %v", protocol)
	}
	filters := protocol.GetHttpFilters()
	if len(filters) != 2 {
		t.Fatalf("%d upstream http filters, want Spillway's upstream instance then the codec", len(filters))
	}
	if filters[0].GetName() != envoy.UpstreamRootID {
		t.Errorf("first upstream filter %q, want %q", filters[0].GetName(), envoy.UpstreamRootID)
	}
	up := unpack[*wasmfilterv3.Wasm](t, filters[0].GetTypedConfig()).GetConfig()
	down := ps.wasm.GetConfig()
	if up.GetRootId() != "spillway.upstream" || envoy.UpstreamRootID != "spillway.upstream" {
		t.Errorf("upstream root_id %q", up.GetRootId())
	}
	// The same VM: every field of vm_config equal, so Envoy shares the VM and its shared data.
	if diff := cmp.Diff(down.GetVmConfig(), up.GetVmConfig(), protocmp.Transform()); diff != "" {
		t.Errorf("upstream vm_config differs from the HCM filter's (-hcm +upstream):\n%s", diff)
	}
	if !proto.Equal(down.GetConfiguration(), up.GetConfiguration()) {
		t.Error("upstream plugin configuration is not the HCM filter's policy")
	}
	if up.GetFailurePolicy() != down.GetFailurePolicy() {
		t.Errorf("upstream failure_policy %v, HCM filter's %v", up.GetFailurePolicy(), down.GetFailurePolicy())
	}
	if !up.GetAllowOnHeadersStopIteration().GetValue() {
		t.Error("upstream instance without allow_on_headers_stop_iteration")
	}
	if down.GetRootId() != envoy.RootID {
		t.Errorf("the HCM filter's root_id changed to %q", down.GetRootId())
	}
	// The codec last: Envoy refuses any other terminal upstream filter.
	if filters[1].GetName() != "envoy.filters.http.upstream_codec" {
		t.Errorf("last upstream filter %q, want envoy.filters.http.upstream_codec", filters[1].GetName())
	}
	_ = unpack[*upstreamcodecv3.UpstreamCodec](t, filters[1].GetTypedConfig())
	// The retry breaker raised, the others left at Envoy's defaults.
	th := c.GetCircuitBreakers().GetThresholds()
	if len(th) != 1 || th[0].GetPriority() != corev3.RoutingPriority_DEFAULT || th[0].GetMaxRetries().GetValue() != envoylimits.ClusterMaxRetries ||
		th[0].GetMaxRequests() != nil || th[0].GetMaxConnections() != nil || th[0].GetMaxPendingRequests() != nil || th[0].GetRetryBudget() != nil {
		t.Errorf("circuit breaker thresholds %v, want only max_retries %d at DEFAULT", th, envoylimits.ClusterMaxRetries)
	}
}

// demoViaRouter is the demo policy failing over through the router.
func demoViaRouter(t *testing.T) *envoy.Policy {
	t.Helper()
	doc, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = sjson.SetBytes(doc, "resilience.failover.via", "router"); err != nil {
		t.Fatal(err)
	}
	return load(t, string(doc), envoy.LoadOptions{})
}

// TestRouterBootstrapRoundTrips: the rendered YAML loads back through the parser Envoy's
// files go through here, validates, and is the same configuration.
func TestRouterBootstrapRoundTrips(t *testing.T) {
	b := bootstrap(t, demoViaRouter(t), envoy.Options{Upstreams: demoUpstreams})
	out, err := envoy.MarshalYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	var back bootstrapv3.Bootstrap
	if err := envoy.UnmarshalYAML(out, &back); err != nil {
		t.Fatalf("reading back: %v", err)
	}
	if err := envoy.Validate(&back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, &back, protocmp.Transform()); diff != "" {
		t.Errorf("YAML round trip changed the bootstrap:\n%s", diff)
	}
	for _, want := range []string{"root_id: spillway.upstream", "envoy.filters.http.upstream_codec", "retry_on: retriable-headers", "x-spillway-retry", "max_retries: 1024"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered YAML lacks %q", want)
		}
	}
	// Every provider cluster of the demo carries the chain; Spillway's own clusters never.
	for _, c := range back.GetStaticResources().GetClusters() {
		protocol := unpack[*httpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()[protocolOptionsKey])
		if len(protocol.GetHttpFilters()) != 2 {
			t.Errorf("cluster %s: %d upstream filters", c.GetName(), len(protocol.GetHttpFilters()))
		}
	}
}

func TestRouterKeepsSpillwaysOwnClustersPlain(t *testing.T) {
	b := bootstrap(t, demoViaRouter(t), envoy.Options{Upstreams: demoUpstreams,
		Module: envoy.Module{URL: "https://artifacts.example.com/spillway.wasm", SHA256: strings.Repeat("ab", 32)}})
	ps := dig(t, b)
	fetch := ps.clusters[envoy.ModuleFetchCluster]
	if fetch == nil {
		t.Fatal("no module fetch cluster")
	}
	protocol := unpack[*httpv3.HttpProtocolOptions](t, fetch.GetTypedExtensionProtocolOptions()[protocolOptionsKey])
	if len(protocol.GetHttpFilters()) != 0 || fetch.GetCircuitBreakers() != nil {
		t.Errorf("the module fetch cluster got the upstream filter: %v", protocol.GetHttpFilters())
	}
	// The remote module is the upstream instance's code too.
	w := unpack[*wasmfilterv3.Wasm](t, unpack[*httpv3.HttpProtocolOptions](t,
		ps.clusters["fake-openai"].GetTypedExtensionProtocolOptions()[protocolOptionsKey]).GetHttpFilters()[0].GetTypedConfig())
	if got := w.GetConfig().GetVmConfig().GetCode().GetRemote().GetHttpUri().GetUri(); got != "https://artifacts.example.com/spillway.wasm" {
		t.Errorf("upstream instance's code from %q", got)
	}
}

// TestRouterIsInlineOnly: with a control plane the router path is refused at its field,
// as a policies.Errors the CLI prints field by field.
func TestRouterIsInlineOnly(t *testing.T) {
	_, err := envoy.Bootstrap(demoViaRouter(t), envoy.Options{Upstreams: demoUpstreams, XDS: "127.0.0.1:18000"})
	var fes policies.Errors
	if !errors.As(err, &fes) || len(fes) != 1 || fes[0] != envoy.ErrRouterNeedsInline || fes[0].Path != "resilience.failover.via" {
		t.Fatalf("err %v, want envoy.ErrRouterNeedsInline at resilience.failover.via", err)
	}
	if !strings.HasPrefix(err.Error(), "envoy: ") {
		t.Errorf("%q: want the package prefix", err)
	}
	// The demo, which leaves via unset, fails over by callout with a control plane: the
	// bootstrap has no upstream filter, and the ECDS resource says callout to the filter.
	b, err := envoy.Bootstrap(loadDemo(t), envoy.Options{Upstreams: demoUpstreams, XDS: "127.0.0.1:18000"})
	if err != nil {
		t.Fatalf("the default with xds: %v", err)
	}
	if bootstrapHasRetries(t, b) {
		t.Error("an xds bootstrap got the router's retries")
	}
	ext, err := envoy.ExtensionConfig(loadDemo(t), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var w wasmfilterv3.Wasm
	if err := ext.GetTypedConfig().UnmarshalTo(&w); err != nil {
		t.Fatal(err)
	}
	var config wrapperspb.StringValue
	if err := w.GetConfig().GetConfiguration().UnmarshalTo(&config); err != nil {
		t.Fatal(err)
	}
	if via := gjson.Get(config.GetValue(), "resilience.failover.via").String(); via != "callout" {
		t.Errorf("the ECDS resource's policy says via %q, want callout written out", via)
	}
	if _, err := envoy.ExtensionConfig(demoViaRouter(t), envoy.Options{}); !errors.As(err, &fes) || fes[0] != envoy.ErrRouterNeedsInline {
		t.Errorf("ExtensionConfig of a router policy: %v, want ErrRouterNeedsInline", err)
	}
	if _, err := envoy.Bootstrap(loadDemo(t), envoy.Options{Upstreams: demoUpstreams, EnvoyMinor: 35}); err == nil ||
		!strings.Contains(err.Error(), "envoy release 1.35 is not supported") {
		t.Errorf("Envoy 1.35: %v", err)
	}
}

func TestRequiredEnvoy(t *testing.T) {
	tests := []struct {
		name   string
		policy *envoy.Policy
		has    string // a feature the list must name
		want   int    // the minor version it needs
	}{
		// A callout bootstrap needs the supported floor, 1.36, for request_body_buffer_limit.
		{"callout", load(t, twoClusters+"\nresilience: {failover: {via: callout}}\n", envoy.LoadOptions{}), "VirtualHost.request_body_buffer_limit", 36},
		// So does the default (router, unset via) on the default release.
		{"default", settled(t, loadDemo(t), envoy.Options{}), "upstream HTTP filter", 36},
		// The default rendered for 1.39 switches held tries and cross-cluster retries on.
		{"default for 1.39", settled(t, loadDemo(t), envoy.Options{EnvoyMinor: 39}), "refresh_cluster_on_retry", 39},
		// The upstream filter needs 1.31 for the Wasm filter upstream and 1.36 for the
		// route's buffer limit: nothing beyond the supported floor.
		{"router", demoViaRouter(t), "upstream HTTP filter", 36},
		// Held tries need the 1.37 fix, retries to another cluster 1.39.
		{"held tries", load(t, twoClusters+"\nresilience: {failover: {via: router, holdTries: true}}\n", envoy.LoadOptions{}), "holdTries", 37},
		{"cross cluster", load(t, twoClusters+"\nresilience: {failover: {via: router, holdTries: true, crossCluster: true}}\n", envoy.LoadOptions{}), "refresh_cluster_on_retry", 39},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			minor, features := envoy.RequiredEnvoy(tt.policy)
			if minor != tt.want || minor < envoy.SupportedEnvoyMinor {
				t.Errorf("needs Envoy 1.%d, want 1.%d (supported from 1.%d)", minor, tt.want, envoy.SupportedEnvoyMinor)
			}
			var names []string
			for _, f := range features {
				names = append(names, f.What)
				if tt.has != "" && strings.Contains(f.What, tt.has) && strings.Contains(f.What, "wasm") && f.Since != 31 {
					t.Errorf("%s since 1.%d, want 1.31", f.What, f.Since)
				}
			}
			if !strings.Contains(strings.Join(names, "\n"), tt.has) {
				t.Errorf("features %q do not name %q", names, tt.has)
			}
		})
	}
}

// TestCrossClusterRefreshesTheClusterBeforeEachRetry: with failover.crossCluster the route
// keeps its matcher on the filter's filter state, one exact entry per provider cluster, and
// refreshes it before each retry; everything validates with go-control-plane.
func TestCrossClusterRefreshesTheClusterBeforeEachRetry(t *testing.T) {
	p := load(t, twoClusters+"\nresilience: {failover: {via: router, crossCluster: true}}\n", envoy.LoadOptions{})
	b := bootstrap(t, p, envoy.Options{Upstreams: map[string]string{"ollama": "http://10.0.0.7:11434"}, EnvoyMinor: 39})
	if err := b.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	ps := dig(t, b)
	routed := ps.routes[0]
	if !routed.GetRoute().GetRetryPolicy().GetRefreshClusterOnRetry() {
		t.Error("refresh_cluster_on_retry is off: a retry would stay on the first cluster")
	}
	key, got, _, _ := routeMatcher(t, routed)
	if key != "wasm.spillway_target" {
		t.Errorf("matcher on filter state %q", key)
	}
	if want := map[string]string{"openai": "openai", "ollama": "ollama"}; !maps.Equal(got, want) {
		t.Errorf("matcher map %v, want %v", got, want)
	}
	minor, _ := envoy.RequiredEnvoy(p)
	if minor != 39 {
		t.Errorf("needs Envoy 1.%d, want 1.39", minor)
	}
	// Without crossCluster a retry stays on the first try's cluster.
	plain := dig(t, bootstrap(t, load(t, twoClusters+viaRouter, envoy.LoadOptions{}), envoy.Options{Upstreams: map[string]string{"ollama": "http://10.0.0.7:11434"}}))
	if plain.routes[0].GetRoute().GetRetryPolicy().GetRefreshClusterOnRetry() {
		t.Error("refresh_cluster_on_retry without crossCluster (Envoy 1.39)")
	}
}

// settled is p as a bootstrap rendered with o runs it.
func settled(t *testing.T, p *envoy.Policy, o envoy.Options) *envoy.Policy {
	t.Helper()
	s, err := p.For(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routeMatcher reads a route's matcher cluster specifier: the filter-state key it reads, its
// exact map (value → cluster), the cluster of a request without the filter state and the
// cluster of one whose filter state the map lacks (on_no_match's nested matcher). It fails
// the test for any other shape.
func routeMatcher(t *testing.T, r *routev3.Route) (key string, clusters map[string]string, absent, unknown string) {
	t.Helper()
	plugin := r.GetRoute().GetInlineClusterSpecifierPlugin().GetExtension()
	if plugin.GetName() != envoy.ClusterSpecifier || envoy.ClusterSpecifier != "envoy.router.cluster_specifier_plugin.matcher" {
		t.Fatalf("cluster specifier %q, want the matcher", plugin.GetName())
	}
	var spec matcherspecv3.MatcherClusterSpecifier
	if err := plugin.GetTypedConfig().UnmarshalTo(&spec); err != nil {
		t.Fatal(err)
	}
	inputKey := func(in *xdscorev3.TypedExtensionConfig) string {
		var input networkinputsv3.FilterStateInput
		if err := in.GetTypedConfig().UnmarshalTo(&input); err != nil {
			t.Fatalf("matcher input %v: %v, want a filter-state input", in, err)
		}
		return input.GetKey()
	}
	action := func(m *xdsmatcherv3.Matcher_OnMatch) string {
		var a matcherspecv3.ClusterAction
		if err := m.GetAction().GetTypedConfig().UnmarshalTo(&a); err != nil {
			t.Fatalf("on_match %v: %v, want a cluster action", m, err)
		}
		return a.GetCluster()
	}
	tree := spec.GetClusterMatcher().GetMatcherTree()
	key = inputKey(tree.GetInput())
	clusters = map[string]string{}
	for k, m := range tree.GetExactMatchMap().GetMap() {
		clusters[k] = action(m)
	}
	nested := spec.GetClusterMatcher().GetOnNoMatch().GetMatcher()
	list := nested.GetMatcherList().GetMatchers()
	if len(list) != 1 {
		t.Fatalf("on_no_match %v: want a matcher list of one predicate", spec.GetClusterMatcher().GetOnNoMatch())
	}
	p := list[0].GetPredicate().GetSinglePredicate()
	if k := inputKey(p.GetInput()); k != key {
		t.Fatalf("the nested predicate reads %q, the tree %q", k, key)
	}
	// Any non-empty value, as RE2 full-matches it (Envoy's safe_regex).
	if re := p.GetValueMatch().GetSafeRegex().GetRegex(); !regexp.MustCompile(`^(?:`+re+`)$`).MatchString("some-cluster") ||
		regexp.MustCompile(`^(?:`+re+`)$`).MatchString("") {
		t.Fatalf("nested predicate regex %q: want one matching any non-empty value", re)
	}
	return key, clusters, action(nested.GetOnNoMatch()), action(list[0].GetOnMatch())
}

// TestVersionMinor reads the release from `envoy --version` as Envoy prints it, and refuses
// output without one.
func TestVersionMinor(t *testing.T) {
	for _, tt := range []struct {
		name   string // the case
		output string // what --version prints
		want   int    // the minor read (-1: an error)
	}{
		// Envoy's format: <sha>/<release>/<status>/<build type>/<ssl>.
		{"1.39", "envoy  version: 2d8a1ee0e0c3dc6dc7b8f8c6b9e3c8c2d8a1ee0e/1.39.1/Clean/RELEASE/BoringSSL\n", 39},
		// The supported floor.
		{"1.36", "envoy  version: 0123456789abcdef0123456789abcdef01234567/1.36.7/Modified/DEBUG/BoringSSL", 36},
		// Not Envoy's format.
		{"no release", "something else", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := envoy.VersionMinor([]byte(tt.output))
			switch {
			case tt.want < 0 && err == nil:
				t.Errorf("read 1.%d from %q, want an error", got, tt.output)
			case tt.want >= 0 && (err != nil || got != tt.want):
				t.Errorf("got 1.%d, %v; want 1.%d", got, err, tt.want)
			}
		})
	}
}
