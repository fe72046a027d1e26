// Package routerretry names what Spillway's upstream filter and the configuration
// generators must agree on for failover through Envoy's router retries: the response
// header that makes the route retry a try, and the filter state that names the cluster of
// the next try. It imports nothing of the module.
package routerretry

// MarkerHeader is set on the response of a try Spillway's upstream instance fails over: the
// routed route's retry policy retries on it (retry_on retriable-headers, retriable_headers
// present-match on it) and on nothing else, and the route removes it from every response
// it sends downstream (response_headers_to_remove), so a client never sees it.
const MarkerHeader = "x-spillway-retry"

// TargetProperty is the filter state property (proxy_set_property path, one segment) the
// filter writes with the cluster of a request's next try under failover.crossCluster, and
// TargetFilterStateKey the filter state key Envoy stores it under ("wasm." + the path:
// source/extensions/common/wasm/context.cc, Context::setProperty), which the route's
// matcher cluster specifier reads (envoy.matching.inputs.filter_state).
const (
	TargetProperty       = "spillway_target"
	TargetFilterStateKey = "wasm." + TargetProperty
)
