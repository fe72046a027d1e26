package serve

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	matcherspecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/router/cluster_specifiers/matcher/v3"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// routerDemo writes the demo policy with failover.via (unless "": the default), maxAttempts
// (when > 0) and crossCluster (when given true) set, and returns its path and document.
func routerDemo(t *testing.T, via string, maxAttempts int, crossCluster ...bool) (string, []byte) {
	t.Helper()
	doc, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	if len(crossCluster) > 0 && crossCluster[0] {
		if doc, err = sjson.SetBytes(doc, "resilience.failover.crossCluster", true); err != nil {
			t.Fatal(err)
		}
	}
	if via != "" {
		if doc, err = sjson.SetBytes(doc, "resilience.failover.via", via); err != nil {
			t.Fatal(err)
		}
	}
	if maxAttempts > 0 {
		if doc, err = sjson.SetBytes(doc, "resilience.failover.maxAttempts", maxAttempts); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, doc
}

// TestRouterFailoverIsTheGeneratedBootstrap: for a router policy serve retries exactly as
// the bootstrap `spillway render envoy` writes for it (package envoy, validated with
// go-control-plane): the routed route's retry_on, marker matcher, num_retries, back-off and
// request_body_buffer_limit, the clusters' max_retries. A callout policy gets none of it.
func TestRouterFailoverIsTheGeneratedBootstrap(t *testing.T) {
	tests := []struct {
		name        string
		via         string // resilience.failover.via
		maxAttempts int    // resilience.failover.maxAttempts (0: the default, 3)
		router      bool   // serve runs the router failover
		cross       bool   // resilience.failover.crossCluster
	}{
		// The default path: no upstream filter, no retry policy, as the shipped envoy.yaml.
		{"callout", "callout", 0, false, false},
		// The router with the default three attempts: two retries.
		{"router", "router", 0, true, false},
		// More attempts change num_retries in both.
		{"router, seven attempts", "router", 7, true, false},
		// Retries to any cluster: the matcher on the filter's filter state, refreshed.
		{"router, cross cluster", "router", 0, true, true},
		// The default: an unset via is router.
		{"unset (the default)", "", 0, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, doc := routerDemo(t, tt.via, tt.maxAttempts, tt.cross)
			release := 0 // the default, 1.36
			if tt.cross {
				release = 39 // refresh_cluster_on_retry
			}
			p, err := LoadPolicy(path, nil)
			if err == nil {
				p, err = p.For(release)
			}
			if err != nil {
				t.Fatal(err)
			}
			o := DefaultOptions()
			o.EnvoyMinor = release
			got := limitsFor(o, p).Router
			if (got != nil) != tt.router {
				t.Fatalf("router failover %+v, want it: %v", got, tt.router)
			}
			ep, err := envoy.LoadPolicy(doc, envoy.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := envoy.Bootstrap(ep, envoy.Options{Upstreams: map[string]string{
				"fake-openai": "http://127.0.0.1:4001", "fake-openrouter": "http://127.0.0.1:4002", "fake-anthropic": "http://127.0.0.1:4003"},
				EnvoyMinor: release})
			if err != nil {
				t.Fatal(err)
			}
			var hcm hcmv3.HttpConnectionManager
			if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
				t.Fatal(err)
			}
			routed := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
			rp := routed.GetRoute().GetRetryPolicy()
			if !tt.router {
				if rp != nil {
					t.Fatalf("the bootstrap of a callout policy has a retry policy %v", rp)
				}
				return
			}
			want := RouterFailover{
				Retry: hostsim.RetryPolicy{
					RetryOn:          rp.GetRetryOn(),
					NumRetries:       hostsim.RetryCount(rp.GetNumRetries().GetValue()),
					RetriableHeaders: retryMatchers(t, rp.GetRetriableHeaders()),
					BaseInterval:     rp.GetRetryBackOff().GetBaseInterval().AsDuration(),
					MaxInterval:      rp.GetRetryBackOff().GetMaxInterval().AsDuration(),
				},
			}
			limit := routed.GetRequestBodyBufferLimit().GetValue()
			want.Retry.BufferLimit = &limit
			want.Retry.RefreshClusterOnRetry = rp.GetRefreshClusterOnRetry()
			if want.Retry.RefreshClusterOnRetry != tt.cross {
				t.Fatalf("bootstrap refresh_cluster_on_retry %v, want %v", want.Retry.RefreshClusterOnRetry, tt.cross)
			}
			for _, c := range b.GetStaticResources().GetClusters() {
				th := c.GetCircuitBreakers().GetThresholds()
				if len(th) != 1 {
					t.Fatalf("cluster %s: thresholds %v", c.GetName(), th)
				}
				want.MaxRetries = th[0].GetMaxRetries().GetValue()
			}
			if diff := cmp.Diff(want, *got); diff != "" {
				t.Errorf("serve's router failover differs from the bootstrap's (-bootstrap +serve):\n%s", diff)
			}
			if n := *got.Retry.NumRetries; tt.maxAttempts > 0 && n != uint32(tt.maxAttempts-1) {
				t.Errorf("num_retries %d for %d attempts", n, tt.maxAttempts)
			}
		})
	}
}

// TestRouteIsTheGeneratedBootstraps: for every policy serve's route picks the cluster as
// the bootstrap `spillway render envoy` writes it (package envoy, validated with
// go-control-plane): the matcher on the same filter-state key, the same map, the same
// on_no_match, and no request header read; the request header serve removes is the one
// the bootstrap's route removes.
func TestRouteIsTheGeneratedBootstraps(t *testing.T) {
	for _, via := range []string{"callout", "router"} {
		t.Run(via, func(t *testing.T) {
			path, doc := routerDemo(t, via, 0)
			p, err := LoadPolicy(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			ep, err := envoy.LoadPolicy(doc, envoy.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := envoy.Bootstrap(ep, envoy.Options{Upstreams: map[string]string{
				"fake-openai": "http://127.0.0.1:4001", "fake-openrouter": "http://127.0.0.1:4002", "fake-anthropic": "http://127.0.0.1:4003"}})
			if err != nil {
				t.Fatal(err)
			}
			var hcm hcmv3.HttpConnectionManager
			if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
				t.Fatal(err)
			}
			routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
			if len(routes) != 1 || len(routes[0].GetMatch().GetHeaders()) != 0 {
				t.Fatalf("bootstrap routes %v: want one, matching no header", routes)
			}
			want := routeClusterOf(t, routes[0].GetRoute().GetInlineClusterSpecifierPlugin())
			got := routeCluster(p.Clusters(), p.DefaultCluster())
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("serve's route differs from the bootstrap's (-bootstrap +serve):\n%s", diff)
			}
			if rm := routes[0].GetRequestHeadersToRemove(); len(rm) != 1 || rm[0] != HeaderCluster {
				t.Errorf("bootstrap removes %v, serve removes %s", rm, HeaderCluster)
			}
		})
	}
}

// routeClusterOf converts the bootstrap's matcher cluster specifier (a filter-state input,
// an exact map of cluster actions, on_no_match telling an unknown value from none) to
// hostsim's.
func routeClusterOf(t *testing.T, plugin *routev3.ClusterSpecifierPlugin) *hostsim.RouteCluster {
	t.Helper()
	var spec matcherspecv3.MatcherClusterSpecifier
	if err := plugin.GetExtension().GetTypedConfig().UnmarshalTo(&spec); err != nil {
		t.Fatal(err)
	}
	tree := spec.GetClusterMatcher().GetMatcherTree()
	var input networkinputsv3.FilterStateInput
	if err := tree.GetInput().GetTypedConfig().UnmarshalTo(&input); err != nil {
		t.Fatal(err)
	}
	cluster := func(om *xdsmatcherv3.Matcher_OnMatch) string {
		var action matcherspecv3.ClusterAction
		if err := om.GetAction().GetTypedConfig().UnmarshalTo(&action); err != nil {
			t.Fatal(err)
		}
		return action.GetCluster()
	}
	m := &hostsim.ClusterMatcher{FilterState: input.GetKey(), Clusters: map[string]string{}}
	for key, om := range tree.GetExactMatchMap().GetMap() {
		m.Clusters[key] = cluster(om)
	}
	// on_no_match: a matcher list of one predicate on the same input (any value: the
	// unknown cluster), whose own on_no_match is the default cluster.
	nested := spec.GetClusterMatcher().GetOnNoMatch().GetMatcher()
	list := nested.GetMatcherList().GetMatchers()
	var predicateInput networkinputsv3.FilterStateInput
	if len(list) != 1 || list[0].GetPredicate().GetSinglePredicate().GetInput().GetTypedConfig().UnmarshalTo(&predicateInput) != nil ||
		predicateInput.GetKey() != input.GetKey() {
		t.Fatalf("on_no_match %v: want one predicate on %s", spec.GetClusterMatcher().GetOnNoMatch(), input.GetKey())
	}
	m.OnUnknown, m.OnNoMatch = cluster(list[0].GetOnMatch()), cluster(nested.GetOnNoMatch())
	return &hostsim.RouteCluster{Matcher: m}
}

// retryMatchers converts the bootstrap's retriable_headers, which must be present matches.
func retryMatchers(t *testing.T, hs []*routev3.HeaderMatcher) []hostsim.RetryHeaderMatcher {
	t.Helper()
	var out []hostsim.RetryHeaderMatcher
	for _, h := range hs {
		if !h.GetPresentMatch() || h.GetInvertMatch() {
			t.Fatalf("retriable header %v: not a present match", h)
		}
		out = append(out, hostsim.RetryHeaderMatcher{Name: h.GetName(), Kind: hostsim.RetryHeaderPresent})
	}
	return out
}

// TestServeStartsWithARouterPolicy: with a router policy (the demo's default) serve loads
// the module a second time as the upstream filter (a bad hostsim option or a plugin that
// refused the upstream root id would fail Start), says so in its banner, and answers
// through the fakes; the banner of a callout policy says the callout path.
func TestServeStartsWithARouterPolicy(t *testing.T) {
	d := startDemo(t, nil)
	if d.Limits.Router == nil {
		t.Fatal("no router failover for the demo, which leaves via unset")
	}
	if b := d.Banner(); !strings.Contains(b, "failover:  as the generated bootstrap for Envoy 1.36 (-envoy-version), through the router") ||
		!strings.Contains(b, "upstream filter spillway.upstream, retry on x-spillway-retry, num_retries 2, back-off 1ms–10ms, "+
			"retry buffer 18874368 bytes, max_retries 1024") {
		t.Errorf("banner does not describe the router failover:\n%s", b)
	}
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post(d.URL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("x-spillway-provider") == "" {
		t.Errorf("status %d, provider %q: %s", resp.StatusCode, resp.Header.Get("x-spillway-provider"), body)
	}
	if resp.Header.Get("x-spillway-retry") != "" {
		t.Error("the retry marker reached the client")
	}

	path, _ := routerDemo(t, "callout", 0)
	callout := startDemo(t, func(o *Options) { o.PolicyPath = path })
	if callout.Limits.Router != nil || !strings.Contains(callout.Banner(), "failover:  as the generated bootstrap for Envoy 1.36 (-envoy-version), by callout") ||
		strings.Contains(callout.Banner(), "upstream filter") {
		t.Errorf("a callout policy got the router failover: %+v\n%s", callout.Limits.Router, callout.Banner())
	}
}
