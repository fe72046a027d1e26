package main

import (
	"encoding/hex"
	"math/rand/v2"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// helloworld: a log at start, a tick every second that logs the time and a random number.
type helloWorld struct{ types.DefaultPluginContext }

func newHelloWorld(uint32) types.PluginContext { return &helloWorld{} }

func (*helloWorld) OnPluginStart(int) types.OnPluginStartStatus {
	proxywasm.LogInfo("OnPluginStart from Go!")
	if err := proxywasm.SetTickPeriodMilliSeconds(1000); err != nil {
		proxywasm.LogCriticalf("tick period: %v", err)
	}
	return types.OnPluginStartStatusOK
}

func (*helloWorld) OnTick() {
	proxywasm.LogInfof("It's %d: random value: %d", time.Now().UnixNano(), rand.Uint64())
}

func (*helloWorld) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }

// dispatch_call_on_tick: every 100 ms a callout to web_service, /ok and /fail in turn (the
// example picks at random); its answer's headers and trailers are logged with a count per
// root context. Two plugins of this root_id share a VM, each counting its own.
type dispatchOnTick struct {
	types.DefaultPluginContext
	contextID uint32
	calls     int
	answers   int
}

func newDispatchOnTick(id uint32) types.PluginContext { return &dispatchOnTick{contextID: id} }

func (p *dispatchOnTick) OnPluginStart(int) types.OnPluginStartStatus {
	if err := proxywasm.SetTickPeriodMilliSeconds(100); err != nil {
		proxywasm.LogCriticalf("tick period: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *dispatchOnTick) OnTick() {
	path := "/ok"
	if p.calls%2 == 1 {
		path = "/fail"
	}
	p.calls++
	hs := [][2]string{{":method", "GET"}, {":path", path}, {":authority", "some_authority"}, {"accept", "*/*"}}
	if _, err := proxywasm.DispatchHttpCall("web_service", hs, nil, nil, 5000, p.answered); err != nil {
		proxywasm.LogCriticalf("dispatch httpcall failed: %v", err)
	}
}

func (p *dispatchOnTick) answered(int, int, int) {
	p.answers++
	proxywasm.LogInfof("called %d for contextID=%d", p.answers, p.contextID)
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogCriticalf("callout headers: %v", err)
	}
	for _, h := range hs {
		proxywasm.LogInfof("response header for the dispatched call: %s: %s", h[0], h[1])
	}
	ts, err := proxywasm.GetHttpCallResponseTrailers()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogCriticalf("callout trailers: %v", err)
	}
	for _, h := range ts {
		proxywasm.LogInfof("response trailer for the dispatched call: %s: %s", h[0], h[1])
	}
}

// foreign_call_on_tick: every millisecond compress("hello world!") through Envoy's foreign
// function, logging the call count and the result in hex; then (beyond the example, whose
// log line is the same when compress fails) uncompress of that result, logged as text.
type foreignOnTick struct {
	types.DefaultPluginContext
	calls int
}

func newForeignOnTick(uint32) types.PluginContext { return &foreignOnTick{} }

func (p *foreignOnTick) OnPluginStart(int) types.OnPluginStartStatus {
	if err := proxywasm.SetTickPeriodMilliSeconds(1); err != nil {
		proxywasm.LogCriticalf("tick period: %v", err)
		return types.OnPluginStartStatusFailed
	}
	return types.OnPluginStartStatusOK
}

func (p *foreignOnTick) OnTick() {
	p.calls++
	z, err := proxywasm.CallForeignFunction("compress", []byte("hello world!"))
	if err != nil {
		proxywasm.LogCriticalf("foreign function (compress) failed: %v", err)
	}
	proxywasm.LogInfof("foreign function (compress) called: %d, result: %s", p.calls, hex.EncodeToString(z))
	back, err := proxywasm.CallForeignFunction("uncompress", z)
	if err != nil {
		proxywasm.LogCriticalf("foreign function (uncompress) failed: %v", err)
	}
	proxywasm.LogInfof("foreign function (uncompress) called: %d, result: %s", p.calls, back)
}

// postpone_requests: every request is paused at its headers and resumed at the next
// one-second tick, from the root context through proxy_set_effective_context.
type postpone struct {
	types.DefaultPluginContext
	waiting []uint32
}

func newPostpone(uint32) types.PluginContext { return &postpone{} }

func (p *postpone) OnPluginStart(int) types.OnPluginStartStatus {
	if err := proxywasm.SetTickPeriodMilliSeconds(1000); err != nil {
		proxywasm.LogCriticalf("tick period: %v", err)
	}
	return types.OnPluginStartStatusOK
}

func (p *postpone) OnTick() {
	for _, id := range p.waiting {
		proxywasm.LogInfof("resume request with contextID=%d", id)
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogErrorf("effective context %d: %v", id, err)
			continue
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogErrorf("resume %d: %v", id, err)
		}
	}
	p.waiting = p.waiting[:0]
}

func (p *postpone) NewHttpContext(id uint32) types.HttpContext {
	return &postponed{plugin: p, id: id}
}

type postponed struct {
	types.DefaultHttpContext
	plugin *postpone
	id     uint32
}

func (c *postponed) OnHttpRequestHeaders(int, bool) types.Action {
	proxywasm.LogInfof("postpone request with contextID=%d", c.id)
	c.plugin.waiting = append(c.plugin.waiting, c.id)
	return types.ActionPause
}

// vm_plugin_configuration: the plugin configuration is logged at start (the VM
// configuration at every VM start, by vmContext).
type pluginConfigLogger struct{ types.DefaultPluginContext }

func newPluginConfigLogger(uint32) types.PluginContext { return &pluginConfigLogger{} }

func (*pluginConfigLogger) OnPluginStart(int) types.OnPluginStartStatus {
	proxywasm.LogInfof("plugin config: %s", pluginConfig())
	return types.OnPluginStartStatusOK
}
