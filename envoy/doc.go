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
//   - Routes that read the filter's choice: requests carrying the policy's cluster header
//     (routing.clusterHeader) go to the cluster it names (route action cluster_header) with
//     the header removed before the request leaves (request_headers_to_remove); every other
//     request goes to a default cluster, as hostsim serve's router does.
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
// ECDS (Envoy's extension config discovery): with Options.XDS set the bootstrap's HTTP
// filter has no inline configuration but a config_discovery source naming the control plane
// (package envoy/xds), which serves ExtensionConfig's resource and pushes a new policy
// without an Envoy restart.
package envoy
