// Package filter is Spillway's proxy-wasm glue: the only package that talks to the SDK. It
// turns VM, plugin and HTTP stream callbacks into calls on the pure engine packages and
// turns their decisions back into host calls.
package filter

import (
	"fmt"
	"os"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/policies"
)

// Response headers Spillway adds to every proxied response (design.md §5).
const (
	HeaderProvider   = "x-spillway-provider"
	HeaderConnection = "x-spillway-connection"
	HeaderModel      = "x-spillway-model"
	HeaderAttempts   = "x-spillway-attempts"
)

// unrouted is the value of the provider and connection headers while Spillway passes a
// request through without choosing a target for it.
const unrouted = "-"

// modelPeekLimit bounds how much of a request body is kept to read its model.
const modelPeekLimit = 64 << 10

// maxModelLength bounds a model name Spillway accepts from a client (the policy's limit).
const maxModelLength = 256

// headerSafeModel reports whether a client-supplied model name may be echoed in a response
// header: non-empty, bounded, and visible ASCII or UTF-8 only (no control bytes, so no CR/LF
// can reach a header value).
func headerSafeModel(m string) bool {
	if m == "" || len(m) > maxModelLength {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// NewVMContext returns the root of Spillway's context tree; the wasm entry point registers
// it with proxywasm.SetVMContext from init.
func NewVMContext() types.VMContext { return &vmContext{} }

type vmContext struct {
	types.DefaultVMContext
	beforeCallback func(callback string) // tests only: see pluginContext
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{beforeCallback: v.beforeCallback}
}

// metrics are the plugin's Envoy stats (they appear under wasmcustom.* in Envoy).
type metrics struct {
	requests proxywasm.MetricCounter // HTTP streams seen
	panics   proxywasm.MetricCounter // callbacks that panicked and failed open
}

type pluginContext struct {
	types.DefaultPluginContext
	policy  *policies.Policy
	metrics metrics
	store   sharedStore
	// beforeCallback, when set (tests only), runs at the start of every stream callback.
	beforeCallback func(callback string)
}

// OnPluginStart implements types.PluginContext: it parses the policy and refuses to start,
// with every problem and its field path in a critical log, when the policy is invalid.
func (p *pluginContext) OnPluginStart(configSize int) (status types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			proxywasm.LogCriticalf("spillway: refusing to start: panic while loading the policy: %v", r)
			status = types.OnPluginStartStatusFailed
		}
	}()
	policy, err := loadPolicy(configSize)
	if err != nil {
		proxywasm.LogCriticalf("spillway: refusing to start: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.policy = policy
	p.metrics = metrics{
		requests: proxywasm.DefineCounterMetric("spillway_requests_total"),
		panics:   proxywasm.DefineCounterMetric("spillway_panics_total"),
	}
	// Reserve the creation CAS now (a shared-data write, not allowed during _initialize) so
	// the first request that records state does not pay for it.
	if _, err := p.store.CreateCAS(); err != nil {
		proxywasm.LogWarnf("spillway: %v", err)
	}
	proxywasm.LogInfof("spillway: policy loaded: %d providers, %d routes", len(policy.Providers), len(policy.Routes))
	return types.OnPluginStartStatusOK
}

// loadPolicy reads and parses the plugin configuration. ${ENV} references expand from the
// VM environment (Envoy's vm_config.environment_variables, Istio's vmConfig.env).
func loadPolicy(configSize int) (*policies.Policy, error) {
	if configSize == 0 {
		return nil, fmt.Errorf("no policy configured: set the plugin configuration to a Spillway policy (JSON)")
	}
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		return nil, fmt.Errorf("read plugin configuration: %w", err)
	}
	policy, err := policies.Parse(data, policies.ParseOptions{LookupEnv: os.LookupEnv})
	if err != nil {
		return nil, fmt.Errorf("invalid policy:\n%w", err)
	}
	return policy, nil
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	p.metrics.requests.Increment(1)
	return &httpContext{plugin: p}
}

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	body   []byte // request body prefix kept to read the model
	model  string // requested model, once known
}

// failOpen recovers a panic in a stream callback: it logs it, counts it and lets the
// request through untouched (design.md §4).
func (h *httpContext) failOpen(callback string, action *types.Action) {
	if r := recover(); r != nil {
		h.plugin.metrics.panics.Increment(1)
		proxywasm.LogErrorf("spillway: panic in %s, passing the request through: %v", callback, r)
		*action = types.ActionContinue
	}
}

// enter runs at the start of every stream callback.
func (h *httpContext) enter(callback string) {
	if h.plugin.beforeCallback != nil {
		h.plugin.beforeCallback(callback)
	}
}

// OnHttpRequestHeaders implements types.HttpContext. Session-affinity headers are internal
// correlation ids and are never forwarded upstream.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	defer h.failOpen("request headers", &action)
	h.enter("request headers")
	for _, name := range policies.SessionAffinityHeaders {
		if err := proxywasm.RemoveHttpRequestHeader(name); err != nil {
			proxywasm.LogDebugf("spillway: remove %s: %v", name, err)
		}
	}
	return types.ActionContinue
}

// OnHttpRequestBody implements types.HttpContext: the body streams through untouched while
// a bounded prefix is kept to read the requested model.
func (h *httpContext) OnHttpRequestBody(bodySize int, endOfStream bool) (action types.Action) {
	defer h.failOpen("request body", &action)
	h.enter("request body")
	if h.model == "" && len(h.body) < modelPeekLimit && bodySize > 0 {
		chunk, err := proxywasm.GetHttpRequestBody(0, min(bodySize, modelPeekLimit-len(h.body)))
		if err == nil {
			h.body = append(h.body, chunk...)
		}
	}
	if endOfStream && h.model == "" {
		if m := gjson.GetBytes(h.body, "model"); m.Type == gjson.String && headerSafeModel(m.Str) {
			h.model = m.Str
		}
		h.body = nil
	}
	return types.ActionContinue
}

// OnHttpResponseHeaders implements types.HttpContext.
func (h *httpContext) OnHttpResponseHeaders(int, bool) (action types.Action) {
	defer h.failOpen("response headers", &action)
	h.enter("response headers")
	model := h.model
	if model == "" {
		model = unrouted
	}
	for _, kv := range [...][2]string{
		{HeaderProvider, unrouted},
		{HeaderConnection, unrouted},
		{HeaderModel, model},
		{HeaderAttempts, strconv.Itoa(1)},
	} {
		if err := proxywasm.ReplaceHttpResponseHeader(kv[0], kv[1]); err != nil {
			proxywasm.LogWarnf("spillway: set %s: %v", kv[0], err)
		}
	}
	return types.ActionContinue
}
