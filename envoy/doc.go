// Package envoy turns a Spillway policy into Envoy configuration — a static bootstrap, the
// Wasm HTTP filter and its ECDS resource — built with go-control-plane's protos and checked
// with their validators, so a configuration this package returns is one Envoy's own schema
// accepts.
//
// What it generates, and why (Envoy ≥ 1.36):
//
//   - One listener with an HTTP connection manager whose filter chain is the Spillway Wasm
//     filter and the router. The filter's PluginConfig sets allow_on_headers_stop_iteration
//     (Spillway holds the request headers while it reads the body's model: without the option
//     proxy-wasm-cpp-host's convertVmCallResultToFilterHeadersStatus turns that pause into
//     StopAllIterationAndWatermark and no body callback arrives), an explicit failure_policy
//     (the proto's UNSPECIFIED has meant different things across releases), the policy JSON as
//     its configuration (a StringValue, handed to the plugin verbatim) and the VM's
//     environment: every ${NAME} the policy references is listed in
//     vm_config.environment_variables.host_env_keys, so credentials come from Envoy's own
//     environment and never sit in the configuration.
//   - One route that reads the filter's choice and no client's: the matcher cluster
//     specifier on the filter state the filter writes (FilterStateTargetKey), each provider
//     cluster to itself and every other request to a default cluster, as hostsim serve's
//     router does (see routeFor). A client cannot write filter state, so with the filter
//     skipped (FAIL_OPEN after a VM failure) no request goes where a client says. A policy
//     that routes by header (routing.clusterHeader, Istio's) is refused (ErrClusterHeader).
//   - The connection manager normalises paths before any filter (normalize_path,
//     merge_slashes, path_with_escaped_slashes_action EscapedSlashesAction).
//   - Buffer limits and timeouts for LLM traffic: the virtual host's request_body_buffer_limit
//     sits above the policy's maxRequestBodyBytes (Envoy's 1 MiB default would answer its own
//     untyped 413 first), and so does the listener's per_connection_buffer_limit_bytes, the
//     limit a request held at its headers buffers under on Envoy before 1.37, which applies
//     the route's limit only in the router (envoyproxy/envoy#42607); the route timeout is off
//     (its 15 s default covers the whole response, which a long stream outlives) and an idle
//     timeout derived from the policy's own bounds takes its place.
//   - One cluster per provider cluster: DNS-resolved, TLS with SNI and SAN verification
//     against the provider host, HTTP/2 or HTTP/1.1 by ALPN.
//   - stats_tags that turn Spillway's metric names into tagged Envoy stats.
//
// Failover through the router: exactly when the policy fails over through the router
// (policies.ViaRouter: resilience.failover.via router, or unset in body-routed mode, the
// default; via: callout, header-routed mode and Options.XDS leave the bootstrap as above),
// failover goes through Envoy's own router retries, so that a streamed request can move to
// another connection before its first byte reaches the client. The bootstrap is for one
// release, Options.EnvoyMinor (default SupportedEnvoyMinor): Policy.For writes the failover
// path into the plugin configuration, the switches the policy leaves unset chosen for that
// release (policies/envoyrelease), and Bootstrap renders the settled policy:
//
//   - Every provider cluster's HttpProtocolOptions (the protocol it already chose kept) get
//     http_filters [the Wasm filter with root_id UpstreamRootID, envoy.filters.http.upstream_codec].
//     The Wasm filter's vm_config is the connection manager's, so Envoy runs both instances
//     in one VM and they share its shared data; same plugin configuration, failure policy and
//     allow_on_headers_stop_iteration. The upstream instance fails over on a try's status and
//     headers: on a try that should fail over it adds the response header routerretry.MarkerHeader
//     (what it does per try is described in the plugin's docs). The codec must be last: Envoy
//     refuses any other terminal upstream filter.
//   - The routed route gets a retry policy that retries on that header alone (retry_on
//     retriable-headers, retriable_headers [x-spillway-retry present]) and on no status code:
//     Spillway decides, the router must never retry a provider's 429 or 5xx by itself.
//     num_retries is failover.maxAttempts − 1 and the back-off 1 ms/10 ms (Spillway has
//     already picked a connection that is not cooling down); the route's
//     request_body_buffer_limit is twice the request limit (Envoy counts a body a filter
//     resumed twice), so every body the policy accepts can be replayed; the route removes the
//     marker from the response it sends downstream. The numbers come from
//     policies/envoylimits (RetryNumRetries, RetryBackOffBase/Max, RetryBufferLimit), which
//     hostsim serve and the Istio manifests read too.
//   - Each provider cluster's max_retries circuit breaker is envoylimits.ClusterMaxRetries
//     (1024, the cluster's default max_requests; Envoy's default of 3 would end most failovers
//     of a provider outage with the failed try's response).
//
// It needs Envoy 1.31 (Wasm upstream) and 1.36 (request_body_buffer_limit), see
// RequiredEnvoy; an explicit via: router is refused with Options.XDS (ErrRouterNeedsInline,
// at the policy field), where an unset via is callout.
//
// ECDS (Envoy's extension config discovery): with Options.XDS set the bootstrap's HTTP
// filter has no inline configuration but a config_discovery source naming the control plane
// (package envoy/xds), which serves ExtensionConfig's resource and pushes a new policy
// without an Envoy restart.
package envoy
