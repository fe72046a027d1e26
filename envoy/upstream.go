package envoy

import (
	"fmt"
	"math"
	"time"

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

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// What Options.UpstreamFilter generates besides the filter itself.
const (
	// UpstreamMaxRetries is each provider cluster's max_retries circuit breaker: how many
	// retries may be outstanding on the cluster at once. Envoy's default of 3 (cluster
	// circuit_breaker.proto) is far too low for failover: when a provider fails, every
	// stream in flight on it fails over at the same moment, and a retry the breaker refuses
	// still consumes one of the request's retries and ends it with the failed try's
	// response, flag UO (source/common/router/retry_state_impl.cc,
	// RetryStateImpl::shouldRetry decrements retries_remaining_ before it checks
	// resourceManager().retries().canCreate()). 1024 is the cluster's default max_requests:
	// a request that may be sent may always be retried, and the request breaker, not the
	// retry breaker, stays the cluster's bound. Spillway bounds retries per request itself
	// (failover.maxAttempts and budgetMs), so the breaker only has to never get in its way.
	UpstreamMaxRetries = 1024
	// RetryBackOffBase and RetryBackOffMax are the routed route's retry back-off. Envoy
	// always waits before a retry: a random time below an interval that starts at the base
	// and doubles up to the max (source/common/common/backoff_strategy.cc,
	// JitteredExponentialBackOffStrategy::nextBackOffMs, random() % next_interval_), 25 ms
	// and 250 ms by default. Spillway has chosen the next connection before it sets the
	// marker — one that is not cooling down — so waiting only delays the client's first
	// byte: 1 ms is the smallest base Envoy keeps (RetryPolicyImpl rounds a smaller
	// base_interval up to 1 ms, source/common/router/retry_policy_impl.cc, config_impl.cc
	// before), the first retry then waits 0 ms (random() % 1), and the max of 10 ms caps
	// later ones at under 10 ms.
	RetryBackOffBase = time.Millisecond
	RetryBackOffMax  = 10 * time.Millisecond
)

// upstreamCodecFilter is the upstream chain's terminal filter. A cluster's http_filters
// must end with it: Envoy refuses any other last filter at load time
// (source/common/upstream/upstream_impl.cc, ClusterInfoImpl's constructor: "The codec filter
// is the only valid terminal upstream HTTP filter").
const upstreamCodecFilter = "envoy.filters.http.upstream_codec"

// RetryNumRetries is the routed route's num_retries for a policy: failover.maxAttempts
// counts the first try, Envoy's num_retries does not (attempts = 1 + num_retries,
// route_components.proto RetryPolicy.num_retries). Never below 0.
func RetryNumRetries(res *policies.Resolved) uint32 {
	return uint32(max(res.Failover.MaxAttempts-1, 0))
}

// RetryBufferLimit is the routed route's request_body_buffer_limit with the upstream
// filter: twice RequestBodyBufferLimit, so that every body the policy accepts stays
// replayable on a retry.
//
// Which field: request_body_buffer_limit, from Envoy 1.36 (envoyproxy/envoy#40254). The
// route's buffer limit wins over every other (route_components.proto,
// Route.request_body_buffer_limit, "Buffer limit precedence": this field if set, else
// min(per_request_buffer_limit_bytes, per_connection_buffer_limit_bytes), else the
// connection's), and the router takes it for its retry decisions
// (envoyproxy/envoy#42610's description of 1.36's Filter::decodeData; the 1.36 source
// itself was not read). per_request_buffer_limit_bytes, "the maximum bytes which will be
// buffered for retries and shadowing" before 1.36, is deprecated, may not be set next to
// request_body_buffer_limit, and is capped at the connection's limit. Set on the route, it
// overrides the virtual host's limit for routed requests only.
//
// Why twice: the router gives up retrying, silently (stat retry_or_shadow_abandoned), once
// the buffered body plus the incoming chunk passes the limit (source/common/router/
// router.cc, Filter::decodeData: getLength(decodingBuffer()) + data.length()). When an
// earlier filter buffered the whole body and resumes — the downstream Spillway instance
// does exactly that — the incoming data is that same buffer and is counted twice
// (envoyproxy/envoy#30613), so retries stop at half the limit. The fix
// (envoyproxy/envoy#44346) is not in 1.36 and the release that carries it was not pinned,
// so the double is kept for every release. It costs nothing for a body within the
// policy's limit: Spillway answers 413 itself past maxRequestBodyBytes, so Envoy never
// buffers much more than RequestBodyBufferLimit of one request.
func RetryBufferLimit(res *policies.Resolved) uint64 {
	limit := envoylimits.RequestBodyBufferLimit(res)
	if limit > math.MaxUint64/2 {
		return math.MaxUint64
	}
	return 2 * limit
}

// routedRetryPolicy is the routed route's retry policy: retry on the marker header and on
// nothing else. No retriable_status_codes and no 5xx, gateway-error, reset or
// connect-failure: a provider's 429 or 5xx reaches Spillway's upstream instance, which
// decides whether the request fails over (and to which connection), so the router must
// never retry on its own.
func routedRetryPolicy(res *policies.Resolved) *routev3.RetryPolicy {
	return &routev3.RetryPolicy{
		RetryOn: "retriable-headers",
		RetriableHeaders: []*routev3.HeaderMatcher{{
			Name:                 RetryMarkerHeader,
			HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true},
		}},
		NumRetries: wrapperspb.UInt32(RetryNumRetries(res)),
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(RetryBackOffBase),
			MaxInterval:  durationpb.New(RetryBackOffMax),
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
	routed.GetRoute().RetryPolicy = routedRetryPolicy(res)
	routed.RequestBodyBufferLimit = wrapperspb.UInt64(RetryBufferLimit(res))
	routed.ResponseHeadersToRemove = append(routed.ResponseHeadersToRemove, RetryMarkerHeader)
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
		{Name: upstreamCodecFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: codec}},
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
		MaxRetries: wrapperspb.UInt32(UpstreamMaxRetries),
	}}}
	return nil
}
