// Package failurepolicy names the failure policy Spillway's filter ships with: what Envoy
// does with a worker's streams once that worker's Wasm VM failed (a trap, a panic), the
// PluginConfig's failure_policy. The generated Envoy bootstrap (package envoy) writes it,
// and hostsim models it by default (hostsim.DefaultFailurePolicy, so hostsim serve's
// -failure-policy); it imports nothing of the module, so hostsim need not link the policy
// packages to know it.
package failurepolicy

// Default is the failure_policy by its name in envoy.extensions.wasm.v3.FailurePolicy
// (api/envoy/extensions/wasm/v3/wasm.proto). FAIL_RELOAD: Envoy starts a fresh VM for the
// next request on that worker (source/extensions/common/wasm/wasm.cc,
// PluginConfig::maybeReloadHandleIfNeeded, at most once per reload back-off, 1 s by
// default) instead of answering 503 there until a restart (FAIL_CLOSED, what Envoy does
// when the field is unset: PluginConfig::PluginConfig maps UNSPECIFIED to it) or letting
// requests through unrouted and without credentials (FAIL_OPEN). Shared data, where
// Spillway keeps its state, outlives the VM.
const Default = "FAIL_RELOAD"
