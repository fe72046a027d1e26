// Package filter is Spillway's proxy-wasm glue: the only package that talks to the SDK. It
// turns VM, plugin and HTTP stream callbacks into calls on the pure engine packages and
// turns their decisions back into host calls.
//
// # The Envoy contract
//
// Spillway supports Envoy ≥ 1.36 and Istio ≥ 1.28 with allow_on_headers_stop_iteration:
// true in the Wasm filter's PluginConfig. With it, a Pause from on_request_headers is a true
// StopIteration: Envoy holds the request headers while the body callbacks still arrive, and
// headers the filter edits from on_request_body are the ones the router routes on (ABI 0.2.0
// header edits clear the route cache, so the route's cluster_header reads the cluster
// Spillway set). Without the option a headers Pause becomes StopAllIterationAndWatermark
// (proxy-wasm-cpp-host context.cc, convertVmCallResultToFilterHeadersStatus) and no body
// callback arrives until the filter continues: a filter that routes on the body's model
// would hang. The filter detects it: a request held at its headers that sees no body
// callback within routing.bodyWaitMs is answered 500 spillway_misconfigured, logged at
// critical once per VM and counted; the first body callback a VM sees proves the option and
// ends the detection there. Header-routed mode (below) never holds a request for its body
// and needs no option.
//
// Every request, first: a client's request headers in Spillway's x-spillway-* namespace are
// removed (reqheaders.go), and with the admin API on, a lookalike of its path or the admin
// token in a client credential header is answered 404 (admin.go).
//
// Request path, for the policy's LLM API paths (everything else passes through without a
// pause): the headers are held; the body is buffered up to maxRequestBodyBytes (413 past
// it); at end of stream the body is checked and its model and stream flag read in one pass
// (llmapi.Parser: 400 invalid_request with the error's text for a body the request rules
// refuse — every llmapi.Err* —, 404 model_not_found when no route serves the model); the engine plans the targets, selection and session affinity order
// them, admission grants a concurrency slot; then the request gets its target: the cluster
// header (a client-sent one is always removed first), the provider's :authority, the
// connection's credential in place of every client credential header, the target's model
// in the body (with an exact content-length), and no session headers. Held request headers
// are never continued before end of stream has been seen (Envoy < 1.40 can drop body
// chunks that arrive after an asynchronous continue, envoy 1.40.0 changelog
// filter_manager_forward_added_data_on_continue); once it has, continuing from a tick, a
// queue wake-up or a callout is safe.
//
// Admin API (admin.go, plugin/internal/admin): with admin.token set, a request under
// admin.pathPrefix never goes upstream. Its bearer token is checked at the request headers
// (401 without one, 403 with another, before any body is read; the Authorization header is
// removed at once so it cannot reach an upstream even if the stream fails open); a GET is
// answered there, a POST or DELETE is held like an LLM request until its body has arrived.
// The answer is a local reply; every reset is logged at info with the path and what it
// cleared. Without a token those paths are ordinary requests and pass through.
//
// Response path: Envoy's own replies (response.code_details other than via_upstream: no
// healthy upstream, overflow, no route, timeout, a client that went away) are never a
// provider's outcome. A 2xx records success in every layer; a non-2xx is held, its error
// body read (bounded), restated, classified and recorded; a 200 text/event-stream is held
// until its first event that carries content or an error, within a byte and a time bound,
// and an error there is a failed attempt like an HTTP error. A retriable failure before
// anything reached the client is retried on the next candidate with proxy_http_call, and
// the final result replaces the response with a local reply; a failover attempt's response
// is therefore buffered, not streamed — unless the policy fails over through the router's
// retries (router.go), where an attempt a retry can reach streams. A stream that ends
// without its terminal event is a failure of its connection unless the provider is set not
// to count it. The opt-in stream
// watchdogs (guide §6 throughput, §2 content stall; watchdog.go) end a committed stream
// whose model output is too slow or stops: its API's error event, then a reset.
//
// # Header-routed mode
//
// routing.mode: headers is for proxies that cannot set the option (Istio's WasmPlugin and
// TrafficExtension), where any headers Pause is stop-all (headermode.go has the Envoy
// source behind each step). The target is picked at the request headers from the path and
// routing.modelHeader (else routing.defaultModel), and the headers go on at once or, when
// admission makes the request wait, from a tick or a wake-up: Envoy buffers the body of a
// stop-all stream under flow control and hands it to this filter on continue. The body is
// still held to its end, checked and rewritten to the target's model before it goes on (a
// mapping target's content-length is removed at the headers); a body naming a model the
// target does not serve is planned again and answered by callout. A failed response is
// decided from its status and headers: failed over (held while the callout runs) when that
// verdict allows and the body is complete, else let through, restated only by a rule that
// reads no body, its error body recorded as it passes. A 200 event stream is let through and
// watched for its first event, whose error is recorded but not failed over. What the mode
// cannot do is listed in the README, "Header-routed mode": failover and restatement by the
// error body's content, failover from an error event in a 200 stream or from a failure that
// arrives before the request body, and a body for another model costs a buffered callout.
//
// # Two roles
//
// A plugin reads its root id (property plugin_root_id) at start (role.go). Under
// rootid.Upstream it is a provider cluster's upstream HTTP filter: a second plugin, with a
// root context of its own, on the VMs the downstream filter runs in (Envoy shares one VM per
// worker among the plugins of one vm_config; proxy-wasm-cpp-host
// getOrCreateThreadLocalPlugin). It parses and validates the policy as the downstream role
// does and refuses to start on the same errors, but starts nothing a VM has once — no tick,
// wake queue or VM directory entry, admin API, metric definitions or shared-data write. Each
// of its streams is one try of the router. Under a policy that fails over by callout every
// try continues at every callback untouched; under resilience.failover.via: router a try of a
// request the downstream role linked acts on that request's state (router.go: a failed try is
// marked for the router's retry to the next connection of its cluster, and the retry streams).
// Every other root id, "" included, is the downstream role the rest of this comment describes.
package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Response headers Spillway adds to every routed response (README, "HTTP surface").
const (
	HeaderProvider     = "x-spillway-provider"
	HeaderConnection   = "x-spillway-connection"
	HeaderModel        = "x-spillway-model"
	HeaderAttempts     = "x-spillway-attempts"
	HeaderRestatedFrom = "x-spillway-restated-from"
)

// unrouted is the value of the provider, connection and model headers before a target was
// chosen.
const unrouted = "-"

// NewVMContext returns the root of Spillway's context tree; the wasm entry point registers
// it with proxywasm.SetVMContext from init.
func NewVMContext() types.VMContext { return &vmContext{} }

type vmContext struct {
	types.DefaultVMContext
	// The VM's identity in shared data (peers.go): its node (heartbeats, the owner of its
	// leases), the id that names its one wake queue, that queue, and the wake-up targets.
	// They outlive the VM's plugins: an ECDS update starts a new plugin on the same VM.
	store   sharedStore
	node    *admission.Node
	vmID    string
	wakeQID uint32
	// queueRoot is the plugin the wake queue notifies (the last to register it).
	queueRoot *pluginContext
	peers     peers
	// plugins are the downstream plugins running on the VM: a wake-up serves them all.
	plugins []*pluginContext
	// links are the VM's router-mode requests, which its upstream-role tries act on
	// (router.go); unlinkedLogged: a request no try was seen of has been logged.
	links               routerLinks
	unlinkedLogged      bool
	holdMisconfigLogged bool                          // a held try that got no body has been logged
	inTry               bool                          // an upstream try's callback is running (router.go)
	beforeCallback      func(callback string)         // tests only: see pluginContext
	timeNow             func() time.Time              // tests only: see pluginContext
	wrapStore           func(state.Store) state.Store // tests only: see pluginContext
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{vm: v, beforeCallback: v.beforeCallback, timeNow: v.timeNow, wrapStore: v.wrapStore}
}
