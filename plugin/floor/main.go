// Command floor is the success path's host-call floor: a filter built exactly like
// spillway.wasm (same SDK, bridge, runtime fix and plugin/hostabi) that makes, per request,
// the host calls spillway's success path makes — the same functions, on the same header
// maps, body and shared-data keys, with the same verdicts — and does nothing else. Run
// beside spillway.wasm and noop.wasm in the success-path benchmarks (plugin/bench_test.go),
// it measures what those host calls cost in hostsim whatever a filter decides with them:
// the part of spillway's time that no work in the guest can take away.
//
// Its plugin configuration is "capped" (the demo's openai-a, which takes and frees a
// concurrency lease: 15 calls per request) or anything else (uncapped: 11).
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// main is never called in a c-shared wasip1 module; the VM context is set in init.
func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct {
	types.DefaultPluginContext
	stream httpContext // every stream's: a floor keeps no per-stream state
}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		return types.OnPluginStartStatusFailed
	}
	p.stream.capped = string(cfg) == "capped"
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext: one context serves every stream, so the
// floor allocates nothing per request (spillway recycles its contexts, for the same count).
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext { return &p.stream }

// The shared-data keys spillway's success path reads and writes on the demo policy: the
// per-VM cache's generation key, and a lease record's key of the same shape and length as
// openai-a's (state.KeyLease of its account id, a hash of its credential the floor does not
// know; the host calls are what it mirrors).
var (
	generationKey = state.GenerationKey
	leaseKey      = state.KeyLease.Key("0123456789abcdef")
)

// targetPath is the filter state property spillway names the cluster in
// (routerretry.TargetProperty), as a proxy_set_property path.
var targetPath = hostabi.JoinPath(nil, routerretry.TargetProperty)

// httpContext makes spillway's host calls at the callbacks spillway makes them in.
type httpContext struct {
	types.DefaultHttpContext
	capped  bool
	headers hostabi.Pairs
	buf     []byte
	lease   [16]byte
}

// OnHttpRequestHeaders: read the request headers, read the clock (the request's start),
// hold the headers for the body.
func (c *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	_ = hostabi.ReadPairs(hostabi.RequestHeaders, &c.headers)
	_ = hostabi.Now()
	return types.ActionPause
}

// OnHttpRequestBody: read the body at its end, validate the cache, take the lease (capped),
// name the cluster in filter state and set the credential, continue.
func (c *httpContext) OnHttpRequestBody(size int, eos bool) types.Action {
	if !eos {
		return types.ActionPause
	}
	c.buf, _ = hostabi.ReadBuffer(hostabi.RequestBody, 0, size, c.buf[:0])
	c.buf, _, _ = hostabi.GetSharedData(generationKey, c.buf[:0])
	if c.capped {
		c.swapLease(1)
	}
	_ = hostabi.SetProperty(targetPath, "fake-openai")
	_ = hostabi.ReplaceHeader(hostabi.RequestHeaders, "authorization", "Bearer demo-key-a")
	return types.ActionContinue
}

// OnHttpResponseHeaders: read the response headers, write the four x-spillway-* headers.
func (c *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	_ = hostabi.ReadPairs(hostabi.ResponseHeaders, &c.headers)
	_ = hostabi.ReplaceHeader(hostabi.ResponseHeaders, "x-spillway-provider", "openai")
	_ = hostabi.ReplaceHeader(hostabi.ResponseHeaders, "x-spillway-connection", "openai-a")
	_ = hostabi.ReplaceHeader(hostabi.ResponseHeaders, "x-spillway-model", "gpt-4o")
	_ = hostabi.ReplaceHeader(hostabi.ResponseHeaders, "x-spillway-attempts", "1")
	return types.ActionContinue
}

// OnHttpStreamDone: give the lease back (capped).
func (c *httpContext) OnHttpStreamDone() {
	if c.capped {
		c.swapLease(0)
	}
}

// swapLease is the lease's compare-and-swap read-modify-write: one read for the CAS, one
// write with it.
func (c *httpContext) swapLease(inUse byte) {
	var cas uint32
	c.buf, cas, _ = hostabi.GetSharedData(leaseKey, c.buf[:0])
	c.lease[0] = inUse
	_ = hostabi.SetSharedData(leaseKey, c.lease[:], cas)
}
