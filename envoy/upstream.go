package envoy

import (
	"fmt"

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

	"github.com/spillwayproxy/spillway/internal/retrymarker"
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
			Name:                 retrymarker.Header,
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
	routed.ResponseHeadersToRemove = append(routed.ResponseHeadersToRemove, retrymarker.Header)
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
