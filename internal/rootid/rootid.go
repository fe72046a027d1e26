// Package rootid names the root ids Spillway's module is configured under, shared by the
// filter (which reads its own, property plugin_root_id, to know its role) and the
// configuration generators (which set them); it imports nothing of the module.
//
// One module serves two plugins that share each VM (proxy-wasm-cpp-host keys VMs by
// vm_config, not by root id): the HTTP connection manager's filter, which routes, admits
// and fails over, and the provider clusters' upstream HTTP filter, which sees each of the
// router's tries.
package rootid

const (
	// Downstream is the root id of the HTTP connection manager's filter.
	Downstream = "spillway"
	// Upstream is the root id of the upstream HTTP filter on each provider cluster
	// (HttpProtocolOptions.http_filters, Envoy ≥ 1.31).
	Upstream = "spillway.upstream"
)
