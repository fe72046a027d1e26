package istio

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// Failover through the router (resilience.failover.via: router) in the Full mode: what the
// Envoy bootstrap (package envoy) writes, as EnvoyFilter patches, since Istio's APIs have
// none of it. A router policy is always body-routed (policies refuses router with
// routing.mode: headers), so the WasmPlugin and TrafficExtension modes, which need the
// header-routed mode, never carry it.
//
//   - The upstream instance is a second EXTENSION_CONFIG ADD (upstreamFilterName): the
//     downstream filter's Wasm configuration field for field, root_id rootid.Upstream. Its
//     vm_config is the downstream's, including the oci:// module: istio-agent rewrites the
//     module of every ECDS Wasm resource to the file it fetched, keyed by URL and sha256
//     (pkg/wasm/convert.go, convert; cache.go, getOrFetch), so both resources reach Envoy
//     with one vm_config and Envoy runs both plugins in one VM per worker, as it keys a VM
//     by vm_id, VM configuration and code (source/extensions/common/wasm/wasm.cc,
//     createWasm: makeVmKey). A Wasm filter written inline into CDS instead would keep its
//     oci:// URL, which istio-agent never converts outside ECDS, and Envoy could not load it.
//   - CLUSTER MERGE on every provider cluster (matched by its name, outbound|port||host) of
//     typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
//     with http_filters [that filter by config_discovery over ADS, upstream_codec]. Envoy
//     runs upstream HTTP filters from ECDS (source/common/filter/config_discovery_impl.h,
//     UpstreamHttpFilterConfigProviderManagerImpl). istiod's MERGE replaces a map entry
//     whole rather than merging into it (pkg/proto/merge/merge.go, mergeMap: "Merge
//     semantics replaces, rather than merges into existing entries"), so the patch restates
//     what Istio itself would put there for these clusters: explicit HTTP/1.1, which is what
//     istiod builds for an HTTP ServiceEntry port without h2 upgrade (cluster_builder.go,
//     clusterWrapper.build fills an unset upstream protocol with HTTP/1.1). What else istiod
//     may set there — a DestinationRule's connectionPool.http (idleTimeout,
//     maxRequestsPerConnection, h2UpgradePolicy, useClientProtocol), a mesh-wide h2 upgrade,
//     protocol sniffing on an unnamed in-mesh port — is lost on these clusters.
//   - HTTP_ROUTE MERGE on each provider route (Istio names the Envoy route after the
//     VirtualService HTTPRoute: route.go, translateRoute) of the bootstrap's retry policy
//     (envoy.RouterRetryPolicy), request_body_buffer_limit (envoylimits.RetryBufferLimit)
//     and response_headers_to_remove [the marker]. A VirtualService cannot say it: HTTPRetry
//     (istio.io/api networking/v1alpha3 virtual_service.proto) has attempts, perTryTimeout,
//     retryOn, retryRemoteLocalities, retryIgnorePreviousHosts and backoff, no
//     retriable_headers. The provider route sets retries.attempts 0 instead, for which
//     istiod writes no retry policy (route/retry/retry.go, ConvertPolicy: "If in.Attempts
//     == 0, returns nil"), so the merged policy is the bootstrap's exactly, not Istio's
//     default (retry_on connect-failure,refused-stream,unavailable,cancelled,
//     retriable-status-codes with 503, two retries) with ours on top.
//   - No max_retries patch: istiod already sets every outbound cluster's max_retries to
//     2^32−1 (cluster_traffic_policy.go, getDefaultCircuitBreakerThresholds), above
//     envoylimits.ClusterMaxRetries, unless a DestinationRule's connectionPool.http.maxRetries
//     lowers it. A CLUSTER MERGE of circuit_breakers would append a second DEFAULT threshold
//     (MERGE appends lists) instead of replacing Istio's.

// upstreamFilterName is the upstream instance's HTTP filter name and ECDS resource name.
func (b *builder) upstreamFilterName() string { return b.filterName() + "/upstream" }

// providerRouteName is the name of a provider host's routed HTTPRoute, which istiod gives
// the Envoy route.
func providerRouteName(host string) string { return "spillway-" + host }

// routerPatches are the Full mode's patches for failover through the router, nil for a
// callout policy.
func (b *builder) routerPatches(providerHosts []string) ([]*networking.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	if !b.res.Failover.ViaRouter {
		return nil, nil
	}
	up := b.wasmFilterConfig()
	up.Config.Name = rootid.Upstream
	up.Config.RootId = rootid.Upstream
	extValue, err := toStruct(&corev3.TypedExtensionConfig{Name: b.upstreamFilterName(), TypedConfig: mustAny(up)})
	if err != nil {
		return nil, err
	}
	patches := []*networking.EnvoyFilter_EnvoyConfigObjectPatch{{
		ApplyTo: networking.EnvoyFilter_EXTENSION_CONFIG,
		Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_ADD, Value: extValue},
	}}
	clusterValue, err := toStruct(b.upstreamCluster())
	if err != nil {
		return nil, err
	}
	routeValue, err := toStruct(&routev3.Route{
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{RetryPolicy: envoy.RouterRetryPolicy(b.res)}},
		// Twice the request limit, so every body the policy accepts stays replayable (see
		// envoylimits.RetryBufferLimit: Envoy counts a body a filter resumed twice).
		RequestBodyBufferLimit: wrapperspb.UInt64(envoylimits.RetryBufferLimit(b.res)),
		// The router decides on a try before it applies the route's response headers, so
		// the marker never reaches a client (router.cc, Filter::onUpstreamHeaders).
		ResponseHeadersToRemove: []string{routerretry.MarkerHeader},
	})
	if err != nil {
		return nil, err
	}
	port, _ := b.spillwayVirtualHosts(nil)
	for _, h := range providerHosts {
		u := b.upstreamOf(h)
		patches = append(patches,
			&networking.EnvoyFilter_EnvoyConfigObjectPatch{
				ApplyTo: networking.EnvoyFilter_CLUSTER,
				Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{
					Context: b.patchContext(),
					ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Cluster{
						Cluster: &networking.EnvoyFilter_ClusterMatch{Name: clusterName(b.s.servicePort(u), h)},
					},
				},
				Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE, Value: proto.CloneOf(clusterValue)},
			},
			&networking.EnvoyFilter_EnvoyConfigObjectPatch{
				ApplyTo: networking.EnvoyFilter_HTTP_ROUTE,
				Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{
					Context: b.patchContext(),
					ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_RouteConfiguration{
						RouteConfiguration: &networking.EnvoyFilter_RouteConfigurationMatch{
							PortNumber: port,
							Vhost: &networking.EnvoyFilter_RouteConfigurationMatch_VirtualHostMatch{
								Name:  fmt.Sprintf("%s:%d", h, port),
								Route: &networking.EnvoyFilter_RouteConfigurationMatch_RouteMatch{Name: providerRouteName(h)},
							},
						},
					},
				},
				Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE, Value: proto.CloneOf(routeValue)},
			})
	}
	return patches, nil
}

// upstreamCluster is the CLUSTER MERGE value: the provider cluster's HttpProtocolOptions,
// HTTP/1.1 as Istio has it, with the upstream chain [Spillway's upstream instance by ECDS,
// the codec].
func (b *builder) upstreamCluster() *clusterv3.Cluster {
	protocol := &httpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}}},
		HttpFilters: []*hcmv3.HttpFilter{
			ecdsFilter(b.upstreamFilterName()),
			{Name: envoy.UpstreamCodecFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&upstreamcodecv3.UpstreamCodec{})}},
		},
	}
	return &clusterv3.Cluster{TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsKey: mustAny(protocol)}}
}

// httpProtocolOptionsKey is where a cluster's HttpProtocolOptions sit in its
// typed_extension_protocol_options.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
