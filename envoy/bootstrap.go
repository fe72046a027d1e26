package envoy

import (
	"fmt"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	dnsclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/common/dns/v3"
	dnsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dns/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// Names of the generated resources (they show in Envoy's stats and admin pages).
const (
	listenerName    = "spillway"
	routeConfigName = "spillway"
	virtualHostName = "llm"
	routeName       = "spillway"
	statPrefix      = "spillway"
)

// EscapedSlashesAction is the connection manager's path_with_escaped_slashes_action: a
// request whose path holds %2F, %2f, %5C or %5c is answered 400 before any filter runs
// (source/common/http/conn_manager_utility.cc, ConnectionManagerUtility::maybeNormalizePath:
// PathUtil::unescapeSlashes, then NormalizePathAction::Reject). An escaped slash has no use in
// the LLM APIs Spillway fronts, and the other choices are worse: UNESCAPE_AND_REDIRECT answers
// 307, which SDKs that POST do not follow, and UNESCAPE_AND_FORWARD would turn
// /spillway%2Fapi/ into a path the admin API matches only after the fact. hostsim serve
// models the same settings (serve.PathNormalization; a serve test compares them).
const EscapedSlashesAction = hcmv3.HttpConnectionManager_REJECT_REQUEST

// ClientClusterHeader is the request header the route removes from every request: the
// header Spillway names the cluster in when a policy routes by header (Istio), so that a
// client's value never reaches a provider, the filter run or skipped.
const ClientClusterHeader = policies.RoutingClusterHeader

// ErrClusterHeader refuses a policy that routes by header (routing.clusterHeader): the
// bootstrap's route reads the cluster from filter state, which the filter would then not
// write. Bootstrap and ExtensionConfig return it inside policies.Errors.
var ErrClusterHeader = policies.FieldError{
	Path: "routing.clusterHeader",
	Message: "names the header Istio's routes match the cluster on; Envoy's route reads the cluster from the filter state " +
		FilterStateTargetKey + ", which a client cannot write (a header route would let a client pick the cluster " +
		"whenever the filter is skipped, as under failure_policy FAIL_OPEN): remove it",
}

// checkRouting refuses a policy the generated route cannot route.
func checkRouting(p *Policy) error {
	if p.Resolved.Routing.ClusterByHeader {
		return fmt.Errorf("envoy: %w", policies.Errors{ErrClusterHeader})
	}
	return nil
}

// wasmTypeURL is the type of the filter's configuration; an ECDS resource must carry it.
const wasmTypeURL = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"

// accessLogFormat is one line per request, as hostsim serve prints it: the response flags
// and code details say whether Envoy or the provider answered, the x-spillway-* response
// headers what Spillway chose. No request header is logged (a client's key is in one).
const accessLogFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ` +
	`%RESPONSE_CODE% %DURATION%ms cluster=%UPSTREAM_CLUSTER% provider=%RESP(X-SPILLWAY-PROVIDER)% ` +
	`connection=%RESP(X-SPILLWAY-CONNECTION)% model=%RESP(X-SPILLWAY-MODEL)% attempts=%RESP(X-SPILLWAY-ATTEMPTS)% ` +
	`flags=%RESPONSE_FLAGS% details=%RESPONSE_CODE_DETAILS%` + "\n"

// Bootstrap returns a validated static Envoy bootstrap that runs Spillway on a policy (see
// the package doc for what it holds and why).
func Bootstrap(p *Policy, opts Options) (*bootstrapv3.Bootstrap, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkRouting(p); err != nil {
		return nil, err
	}
	ups, err := upstreams(p, o)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	defaultCluster := o.DefaultCluster
	if defaultCluster == "" {
		defaultCluster = p.Resolved.Providers[0].Cluster
	} else if !hasCluster(ups, defaultCluster) {
		return nil, fmt.Errorf("envoy: default cluster %q is not a provider's cluster", defaultCluster)
	}
	if p, err = p.For(o); err != nil {
		return nil, err
	}
	if err := errIfRouterWithoutFilter(p, o); err != nil {
		return nil, err
	}
	viaRouter := p.Resolved.Failover.ViaRouter
	filter, err := spillwayFilter(p, o)
	if err != nil {
		return nil, err
	}
	clusters := make([]string, 0, len(ups)) // the route's matcher's
	for _, u := range ups {
		clusters = append(clusters, u.cluster)
	}
	hcm, err := connectionManager(p, filter, defaultCluster, viaRouter, clusters)
	if err != nil {
		return nil, err
	}
	var upstreamChain []*hcmv3.HttpFilter
	if viaRouter {
		w, err := wasmFilter(p, o)
		if err != nil {
			return nil, err
		}
		if upstreamChain, err = upstreamFilters(w); err != nil {
			return nil, err
		}
	}
	listenHost, listenPort, _ := splitHostPort(o.Listen) // checked by withDefaults
	adminHost, adminPort, _ := splitHostPort(o.Admin)

	var cds []*clusterv3.Cluster
	for _, u := range ups {
		c, err := providerCluster(u, p, o)
		if err != nil {
			return nil, err
		}
		if upstreamChain != nil {
			if err := addUpstreamFilter(c, upstreamChain); err != nil {
				return nil, err
			}
		}
		cds = append(cds, c)
	}
	if o.Module.URL != "" {
		u, _ := parseURL(o.Module.URL, true) // checked by withDefaults
		u.cluster = ModuleFetchCluster
		c, err := plainCluster(u, o, u.hostHeader())
		if err != nil {
			return nil, err
		}
		cds = append(cds, c)
	}
	if o.XDS != "" {
		c, err := xdsCluster(o)
		if err != nil {
			return nil, err
		}
		cds = append(cds, c)
	}

	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: o.NodeID, Cluster: o.NodeID},
		Admin: &bootstrapv3.Admin{
			Address: socketAddress(adminHost, adminPort),
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: []*listenerv3.Listener{{
				Name:    listenerName,
				Address: socketAddress(listenHost, listenPort),
				// The request limit for the connection too: Envoy before 1.37 raises a
				// stream's limit to the route's request_body_buffer_limit only in the
				// router, after Spillway has buffered the body of a request it holds at
				// its headers (see envoylimits.ConnectionBufferLimit).
				PerConnectionBufferLimitBytes: wrapperspb.UInt32(envoylimits.ConnectionBufferLimit(p.Resolved)),
				FilterChains: []*listenerv3.FilterChain{{
					Filters: []*listenerv3.Filter{{
						Name:       "envoy.filters.network.http_connection_manager",
						ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
					}},
				}},
			}},
			Clusters: cds,
		},
		StatsConfig: statsConfig(o.StatsTags),
	}
	if err := Validate(b); err != nil {
		return nil, err
	}
	return b, nil
}

// spillwayFilter is the HTTP filter entry: the Wasm filter inline, or by ECDS.
func spillwayFilter(p *Policy, o Options) (*hcmv3.HttpFilter, error) {
	if o.XDS != "" {
		return &hcmv3.HttpFilter{
			// The filter's name is the ECDS resource Envoy subscribes to.
			Name: ExtensionConfigName,
			ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{ConfigDiscovery: &corev3.ExtensionConfigSource{
				ConfigSource: &corev3.ConfigSource{
					ResourceApiVersion: corev3.ApiVersion_V3,
					ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
						ApiType:             corev3.ApiConfigSource_GRPC,
						TransportApiVersion: corev3.ApiVersion_V3,
						GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
							EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: XDSCluster}}}},
						SetNodeOnFirstMessageOnly: true,
					}},
				},
				// No default config: the listener warms until the control plane's first
				// answer (or the config source's initial fetch timeout); until a policy
				// arrives a request gets Envoy's 500 with flag NFCF (source/common/http/
				// filter_chain_helper.cc, MissingConfigFilter), never a pass without Spillway.
				TypeUrls: []string{wasmTypeURL},
			}},
		}, nil
	}
	w, err := wasmFilter(p, o)
	if err != nil {
		return nil, err
	}
	typed, err := anypb.New(w)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	return &hcmv3.HttpFilter{Name: ExtensionConfigName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed}}, nil
}

// connectionManager is the listener's HTTP connection manager with Spillway's route (see
// routeFor); retries gives it the retry policy of failover through the router
// (resilience.failover.via: router).
func connectionManager(p *Policy, filter *hcmv3.HttpFilter, defaultCluster string, retries bool, clusters []string) (*anypb.Any, error) {
	res := p.Resolved
	idle := durationpb.New(envoylimits.IdleTimeout(res))
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	stdout, err := anypb.New(&streamv3.StdoutAccessLog{AccessLogFormat: &streamv3.StdoutAccessLog_LogFormat{
		LogFormat: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormatSource{
			TextFormatSource: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: accessLogFormat}},
		}},
	}})
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	route, err := routeFor(clusters, defaultCluster, idle)
	if err != nil {
		return nil, err
	}
	if retries {
		addRetries(route, res)
		// Under crossCluster each retry goes where the failed try's upstream instance said:
		// refresh_cluster_on_retry (Envoy 1.39, envoyproxy/envoy#44719) has Filter::doRetry
		// re-run the route's matcher (routeFor) before each retry.
		route.GetRoute().GetRetryPolicy().RefreshClusterOnRetry = res.Failover.CrossCluster
	}
	routes := []*routev3.Route{route}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: routeConfigName,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    virtualHostName,
				Domains: []string{"*"},
				Routes:  routes,
				// Above the policy's maxRequestBodyBytes, for every route: see
				// envoylimits.RequestBodyBufferLimit. Envoy ≥ 1.37 applies it when the
				// route is matched (envoyproxy/envoy#42607); the listener's
				// per_connection_buffer_limit_bytes covers the releases before.
				RequestBodyBufferLimit: wrapperspb.UInt64(envoylimits.RequestBodyBufferLimit(res)),
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{filter, {
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
		// The connection manager's own idle timer (5 min by default) would end a request
		// that waits longer under the policy's bounds; the route's idle_timeout replaces
		// it once a route is chosen, this covers the time before.
		StreamIdleTimeout: idle,
		// An edge proxy: the client's address is the connection's, not a header's.
		UseRemoteAddress: wrapperspb.Bool(true),
		// Spillway matches request paths exactly (routing.paths) and its admin API by
		// prefix: /v1//chat/completions, /v1/./chat/completions and /v1/%2E/chat/completions
		// are the same request, and a lookalike of the admin prefix must not reach a
		// provider as another path. The connection manager normalises before any filter
		// runs (ConnectionManagerUtility::maybeNormalizePath): escaped slashes first
		// (EscapedSlashesAction), then RFC 3986 dot segments with a backslash read as a
		// slash (PathUtil::canonicalPath), then merged slashes. The filter canonicalises
		// its admin check itself as well: this is defence in depth.
		NormalizePath:                wrapperspb.Bool(true),
		MergeSlashes:                 true,
		PathWithEscapedSlashesAction: EscapedSlashesAction,
		AccessLog: []*accesslogv3.AccessLog{{
			Name:       "envoy.access_loggers.stdout",
			ConfigType: &accesslogv3.AccessLog_TypedConfig{TypedConfig: stdout},
		}},
	}
	typed, err := anypb.New(hcm)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	return typed, nil
}

// providerCluster is one provider cluster: DNS-resolved (or a static IP), TLS with SNI and
// SAN verification for https, HTTP/2 or HTTP/1.1 by ALPN. The endpoint's hostname is the
// provider's authority when it has one, so the route's auto_host_rewrite sets the Host the
// filter sets itself.
func providerCluster(u upstream, p *Policy, o Options) (*clusterv3.Cluster, error) {
	hostname := u.hostHeader()
	for i := range p.Resolved.Providers {
		if pr := &p.Resolved.Providers[i]; pr.Cluster == u.cluster && pr.Authority != "" {
			hostname = pr.Authority
			break
		}
	}
	return plainCluster(u, o, hostname)
}

// plainCluster builds a cluster for one endpoint.
func plainCluster(u upstream, o Options, hostname string) (*clusterv3.Cluster, error) {
	c := &clusterv3.Cluster{
		Name:           u.cluster,
		ConnectTimeout: durationpb.New(o.ConnectTimeout),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: u.cluster,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address:  socketAddress(u.host, u.port),
					Hostname: hostname,
				}},
			}}}},
		},
	}
	if u.ip {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
	} else {
		// Logical DNS: one connection pool to whichever address the name resolves to,
		// what Envoy recommends for large web services behind DNS. IPv4 first: a host
		// without IPv6 connectivity (many container networks) would otherwise try the
		// AAAA records first and fail (Envoy source/extensions/clusters/dns/dns_cluster.cc).
		dns, err := anypb.New(&dnsv3.DnsCluster{
			DnsLookupFamily:              dnsclusterv3.DnsLookupFamily_V4_PREFERRED,
			AllAddressesInSingleEndpoint: true,
		})
		if err != nil {
			return nil, fmt.Errorf("envoy: %w", err)
		}
		c.ClusterDiscoveryType = &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name: "envoy.clusters.dns", TypedConfig: dns}}
	}
	protocol := &httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{
				HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}}}}
	if u.tls {
		sni := u.host
		san := &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_DNS,
			Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: u.host}}}
		if u.ip {
			sni = "" // SNI carries a host name, never an address (RFC 6066 §3)
			san.SanType = tlsv3.SubjectAltNameMatcher_IP_ADDRESS
		}
		tls, err := anypb.New(&tlsv3.UpstreamTlsContext{
			Sni: sni,
			CommonTlsContext: &tlsv3.CommonTlsContext{
				TlsParams: &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
				ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
					TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: o.CAFile}},
					MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{san},
				}},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("envoy: %w", err)
		}
		c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tls}}
		// HTTP/2 where the provider offers it by ALPN, else HTTP/1.1 (Envoy's default ALPN
		// for auto_config is "h2,http/1.1").
		protocol.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_AutoConfig{AutoConfig: &httpv3.HttpProtocolOptions_AutoHttpConfig{}}
	}
	if err := setProtocolOptions(c, protocol); err != nil {
		return nil, err
	}
	return c, nil
}

// xdsCluster is the control plane's cluster: gRPC needs HTTP/2.
func xdsCluster(o Options) (*clusterv3.Cluster, error) {
	host, port, _ := splitHostPort(o.XDS) // checked by withDefaults
	u := upstream{cluster: XDSCluster, host: host, port: port}
	if ip, err := parseURL("http://"+o.XDS, false); err == nil {
		u.ip = ip.ip
	}
	c, err := plainCluster(u, o, u.hostHeader())
	if err != nil {
		return nil, err
	}
	h2 := &httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}}
	if err := setProtocolOptions(c, h2); err != nil {
		return nil, err
	}
	return c, nil
}

// httpProtocolOptionsKey is where a cluster's HttpProtocolOptions sit in its
// typed_extension_protocol_options.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

func setProtocolOptions(c *clusterv3.Cluster, opts *httpv3.HttpProtocolOptions) error {
	typed, err := anypb.New(opts)
	if err != nil {
		return fmt.Errorf("envoy: %w", err)
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: typed}
	return nil
}

// statsConfig keeps Envoy's default tags and adds Spillway's.
func statsConfig(tags []StatsTag) *metricsv3.StatsConfig {
	sc := &metricsv3.StatsConfig{UseAllDefaultTags: wrapperspb.Bool(true)}
	for _, t := range tags {
		sc.StatsTags = append(sc.StatsTags, &metricsv3.TagSpecifier{TagName: t.Name,
			TagValue: &metricsv3.TagSpecifier_Regex{Regex: t.Regex}})
	}
	return sc
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

func hasCluster(ups []upstream, name string) bool {
	for _, u := range ups {
		if u.cluster == name {
			return true
		}
	}
	return false
}
