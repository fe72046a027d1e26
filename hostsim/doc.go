// Package hostsim runs proxy-wasm modules in wazero the way Envoy ≥ 1.33 hosts them: worker,
// main-thread and canary VMs, the HTTP stream lifecycle, shared data and queues, ticks, HTTP
// callouts, properties, metrics, logs, Envoy's WASI surface and its failure policies.
//
// Fidelity. The host follows research/envoy-host-semantics.md ("Simulator checklist"): the
// ABI marker is found by scanning exports; `_initialize` (then `main`/`__main_void`) runs
// under Envoy's start-up allow-list and `proxy_on_memory_allocate` under the malloc
// allow-list, so anything else traps with "restricted_callback"; WASI is Envoy 1.33's set by
// default (poll_oneoff and fd_fdstat_set_flags answer ENOSYS, an import outside the set fails
// instantiation); contexts are created lazily at request headers and torn down log → done →
// delete; header Pause stops all iteration, body Pause buffers with a cumulative size;
// continue/close/local reply are deferred until the callback returns; shared data has one
// CAS counter per process and cas 0 is unconditional; queue notifications are asynchronous;
// callouts are owned by the root context.
//
// Differences from the SDK's proxytest, where proxytest is not Envoy-faithful: shared-data
// CAS values come from one process-global counter (proxytest counts per key and rejects cas 0
// on an existing key); maps and buffers outside their phase answer BadArgument (proxytest
// answers from whatever it holds); body callbacks are held back while the headers are
// paused; a request-phase local reply runs the plugin's own response callbacks; metric ids
// carry the metric type in their low bits, as in Envoy.
//
// Driving. A Host is one simulated Envoy process. Tests call the proxytest-shaped methods
// (StartPlugin, InitializeHttpContext, CallOnRequestHeaders, ..., CompleteHttpContext) on a
// worker VM, or drive whole requests with RunHTTP. Time is virtual by default (Advance moves
// it, firing ticks, callout deliveries and timeouts in order); WithRealClock makes the host
// run its own timers for the serve CLI. A Host is safe for concurrent use: each VM is a
// "thread" whose calls are serialized, and process-wide state is locked.
package hostsim
