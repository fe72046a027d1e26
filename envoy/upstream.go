package envoy

import (
	"fmt"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	matcherspecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/router/cluster_specifiers/matcher/v3"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// ErrRouterNeedsInline refuses a policy that fails over through the router in a bootstrap
// that takes the filter from a control plane (Options.XDS): the upstream filter's
// configuration is inline, so its instance would keep the bootstrap's policy while ECDS
// pushes new ones to the downstream instance, and the two would disagree on the plan they
// share. Bootstrap returns it inside policies.Errors, at the field to change.
var ErrRouterNeedsInline = policies.FieldError{
	Path: "resilience.failover.via",
	Message: "router needs the upstream HTTP filter, which the bootstrap writes inline: with -xds (ECDS) its instance " +
		"would keep the bootstrap's policy while the control plane pushes new ones; use callout with -xds, or render without -xds",
}

// UpstreamCodecFilter is the upstream chain's terminal filter. A cluster's http_filters
// must end with it: Envoy refuses any other last filter at load time
// (source/common/upstream/upstream_impl.cc, ClusterInfoImpl's constructor: "The codec filter
// is the only valid terminal upstream HTTP filter"). Package istio's cluster patch ends
// with it too.
const UpstreamCodecFilter = "envoy.filters.http.upstream_codec"

// RouterRetryPolicy is the routed route's retry policy when the policy fails over through
// the router: retry on the marker header and on nothing else. No retriable_status_codes
// and no 5xx, gateway-error, reset or connect-failure: a provider's 429 or 5xx reaches
// Spillway's upstream instance, which decides whether the request fails over (and to which
// connection), so the router must never retry on its own. Package istio merges the same
// policy into its provider routes.
func RouterRetryPolicy(res *policies.Resolved) *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn: "retriable-headers",
		RetriableHeaders: []*routev3.HeaderMatcher{{
			Name:                 routerretry.MarkerHeader,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
		}},
		NumRetries: wrapperspb.UInt32(envoylimits.RetryNumRetries(res)),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(envoylimits.RetryBackOffBase),
			MaxInterval:  durationpb.New(envoylimits.RetryBackOffMax),
		},
	}
}

// addRetries gives the routed route its retry policy and body buffer limit, and keeps the
// marker from the client: the router decides on a try's response headers before it applies
// the route's response_headers_to_remove to the response it sends downstream
// (source/common/router/router.cc, Filter::onUpstreamHeaders: shouldRetryHeaders, then
// finalizeResponseHeaders), so a marker on a try whose retries are exhausted is dropped
// and a retried try's response never goes downstream at all.
func addRetries(routed *routev3.Route, res *policies.Resolved) {
	routed.GetRoute().RetryPolicy = RouterRetryPolicy(res)
	routed.RequestBodyBufferLimit = wrapperspb.UInt64(envoylimits.RetryBufferLimit(res))
	routed.ResponseHeadersToRemove = append(routed.ResponseHeadersToRemove, routerretry.MarkerHeader)
}

// upstreamFilters is a provider cluster's upstream HTTP filter chain: Spillway's upstream
// instance, then the codec. The Wasm filter runs upstream from Envoy 1.31
// (source/extensions/filters/http/wasm/config.cc registers UpstreamWasmFilterConfig).
// Its vm_config is the HCM filter's, field for field: Envoy keys a VM by vm_id, the VM's
// configuration and the code (source/extensions/common/wasm/wasm.cc, createWasm:
// proxy_wasm::makeVmKey), so both instances run in one VM per worker and share its shared
// data (keyed by vm_id, proxy-wasm-cpp-host shared_data.cc). It carries the same plugin
// configuration and failure policy; allow_on_headers_stop_iteration lets it hold a try's
// headers as the downstream instance holds the request's.
func upstreamFilters(hcmFilter *wasmfilterv3.Wasm) ([]*hcmv3.HttpFilter, error) {
	w := proto.Clone(hcmFilter).(*wasmfilterv3.Wasm)
	w.Config.Name = UpstreamRootID
	w.Config.RootId = UpstreamRootID
	wasmAny, err := anypb.New(w)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	codec, err := anypb.New(&upstreamcodecv3.UpstreamCodec{})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	return []*hcmv3.HttpFilter{
		{Name: UpstreamRootID, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: wasmAny}},
		{Name: UpstreamCodecFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: codec}},
	}, nil
}

// addUpstreamFilter puts the upstream chain into a provider cluster's HttpProtocolOptions,
// keeping the protocol it already chose, and raises its retry circuit breaker.
func addUpstreamFilter(c *clusterv3.Cluster, filters []*hcmv3.HttpFilter) error {
	var protocol httpv3.HttpProtocolOptions
	if err := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey].UnmarshalTo(&protocol); err != nil {
		return fmt.Errorf("envoy: cluster %s: %w", c.GetName(), err)
	}
	protocol.HttpFilters = filters
	if err := setProtocolOptions(c, &protocol); err != nil {
		return err
	}
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		// Spillway's routes use the default priority; the others stay at Envoy's defaults.
		Priority:   corev3.RoutingPriority_DEFAULT,
		MaxRetries: wrapperspb.UInt32(envoylimits.ClusterMaxRetries),
	}}}
	return nil
}

// ClusterSpecifier is the cluster specifier plugin of the route, and FilterStateTargetKey
// the filter state it reads: what the filter's proxy_set_property(["spillway_target"])
// stores (source/extensions/common/wasm/context.cc, Context::setProperty, under the "wasm."
// prefix). UnknownCluster is where the route sends a request whose filter state names a
// cluster the bootstrap lacks: no cluster has the name (it is reserved), so the router
// answers 503 NC (cluster_not_found), and a connection's credential never goes to the
// default cluster.
const (
	ClusterSpecifier     = "envoy.router.cluster_specifier_plugin.matcher"
	FilterStateTargetKey = routerretry.TargetFilterStateKey
	UnknownCluster       = "spillway_unknown_cluster"
)

// routeFor is the virtual host's one route: it takes every request and picks its cluster
// with the matcher cluster specifier on the filter state the filter writes
// (FilterStateTargetKey: the cluster of a routed request, and under failover.crossCluster
// of its current try), over an exact map of the provider clusters, and sends a request
// without it (one Spillway does not route, such as GET /v1/models, or any request while the
// filter is skipped after a VM failure under FAIL_OPEN) to defaultCluster. Envoy takes the
// map's on_no_match both when the input has no value and when it matches no key
// (source/common/matcher/map_matcher.h, MapMatcher::match and doNoMatch; the filter-state
// input answers no value for a missing key: source/common/network/matching/inputs.h,
// FilterStateInput::get), so on_no_match is a nested matcher that tells the two apart: a
// filter state that names no provider cluster (a policy the bootstrap was not rendered
// for) goes to UnknownCluster, a request without one to defaultCluster. No request header
// takes part, so no client can choose a cluster: only a filter can write filter state. The
// route removes ClientClusterHeader, so a client's value never reaches a provider either.
//
// The matcher's pick (MatcherClusterSpecifierPlugin::route → MatcherRouteEntry::
// refreshRouteCluster, source/extensions/router/cluster_specifiers/matcher/
// matcher_cluster_specifier.cc) happens when the route is resolved: by the connection
// manager before any filter runs, then again at the router once a filter cleared the route
// cache (the filter's header edits do; see the plugin's setTargetHeaders). The specifier is
// Envoy 1.35's (envoyproxy/envoy#39227, #39816, in go-control-plane's envoy/v1.35.0 API);
// the filter-state input is accepted in a route's matcher from 1.31 (envoyproxy/envoy#33175:
// source/common/router/matcher_visitor.cc, RouteActionValidationVisitor allows the
// request-header and the filter-state inputs). With RetryPolicy.refresh_cluster_on_retry
// (failover.crossCluster, Envoy 1.39) Filter::doRetry re-runs the matcher before each retry,
// so a retry goes where the failed try's upstream instance said (no match keeps the cluster
// it had); its proto names the matcher specifier as one that supports the refresh. Each try
// then gets its cluster's upstream filters, connection pool and TLS context (its own static
// SNI; no cluster here sets auto_sni, whose choice Filter::decodeHeaders makes once for
// every try), and auto_host_rewrite sets each try's Host. Not verified against a 1.39 Envoy:
// the order of the refresh and the attempt count in the merged doRetry, and whether the retry
// breaker is the first cluster's.
//
// The route turns the 15 s route timeout off (it covers the whole response, which a long
// stream outlives) and bounds silence instead (idle). auto_host_rewrite sets Host to the
// endpoint's hostname, which is the provider's authority (see providerCluster).
func routeFor(clusters []string, defaultCluster string, idle *durationpb.Duration) (*routev3.Route, error) {
	onMatch := make(map[string]*xdsmatcherv3.Matcher_OnMatch, len(clusters))
	for _, c := range clusters {
		om, err := clusterAction(c)
		if err != nil {
			return nil, err
		}
		onMatch[c] = om
	}
	toDefault, err := clusterAction(defaultCluster)
	if err != nil {
		return nil, err
	}
	toUnknown, err := clusterAction(UnknownCluster)
	if err != nil {
		return nil, err
	}
	typed, err := anypb.New(&networkinputsv3.FilterStateInput{Key: FilterStateTargetKey})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	input := &xdscorev3.TypedExtensionConfig{Name: "spillway_target", TypedConfig: typed}
	// on_no_match: a filter state of any value (RE2, full match: "(?s).+" is every non-empty
	// string) is one the map lacks; none at all (the single predicate does not match an input
	// without a value) is a request the filter did not route.
	onNoMatch := &xdsmatcherv3.Matcher_OnMatch{OnMatch: &xdsmatcherv3.Matcher_OnMatch_Matcher{Matcher: &xdsmatcherv3.Matcher{
		MatcherType: &xdsmatcherv3.Matcher_MatcherList_{MatcherList: &xdsmatcherv3.Matcher_MatcherList{
			Matchers: []*xdsmatcherv3.Matcher_MatcherList_FieldMatcher{{
				Predicate: &xdsmatcherv3.Matcher_MatcherList_Predicate{MatchType: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate_{
					SinglePredicate: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate{
						Input: input,
						Matcher: &xdsmatcherv3.Matcher_MatcherList_Predicate_SinglePredicate_ValueMatch{ValueMatch: &xdsmatcherv3.StringMatcher{
							MatchPattern: &xdsmatcherv3.StringMatcher_SafeRegex{SafeRegex: &xdsmatcherv3.RegexMatcher{
								EngineType: &xdsmatcherv3.RegexMatcher_GoogleRe2{GoogleRe2: &xdsmatcherv3.RegexMatcher_GoogleRE2{}},
								Regex:      "(?s).+",
							}}}},
					}}},
				OnMatch: toUnknown,
			}},
		}},
		OnNoMatch: toDefault,
	}}}
	spec, err := anypb.New(&matcherspecv3.MatcherClusterSpecifier{ClusterMatcher: &xdsmatcherv3.Matcher{
		MatcherType: &xdsmatcherv3.Matcher_MatcherTree_{MatcherTree: &xdsmatcherv3.Matcher_MatcherTree{
			Input: input,
			TreeType: &xdsmatcherv3.Matcher_MatcherTree_ExactMatchMap{
				ExactMatchMap: &xdsmatcherv3.Matcher_MatcherTree_MatchMap{Map: onMatch}},
		}},
		OnNoMatch: onNoMatch,
	}})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	return &routev3.Route{
		Name:  routeName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_InlineClusterSpecifierPlugin{
				InlineClusterSpecifierPlugin: &routev3.ClusterSpecifierPlugin{
					Extension: &corev3.TypedExtensionConfig{Name: ClusterSpecifier, TypedConfig: spec}}},
			Timeout:              durationpb.New(0),
			IdleTimeout:          idle,
			HostRewriteSpecifier: &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)},
		}},
		RequestHeadersToRemove: []string{ClientClusterHeader},
	}, nil
}

// clusterAction is a matcher's action sending the request to cluster.
func clusterAction(cluster string) (*xdsmatcherv3.Matcher_OnMatch, error) {
	action, err := anypb.New(&matcherspecv3.ClusterAction{Cluster: cluster})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	return &xdsmatcherv3.Matcher_OnMatch{OnMatch: &xdsmatcherv3.Matcher_OnMatch_Action{
		Action: &xdscorev3.TypedExtensionConfig{Name: "cluster", TypedConfig: action}}}, nil
}
