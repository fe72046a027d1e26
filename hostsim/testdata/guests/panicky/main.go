// Command panicky is an SDK filter for hostsim's tests of the ABI bridge's defences, built
// with plugin/wasmbuild. Its plugin configuration lists, space separated, where it panics:
// new_http_context, request_headers, tick, plugin_start. On request headers it reads the
// request's :path through the SDK and through plugin/hostabi and logs what each read
// ("panicky: sdk read: ...", "panicky: hostabi read: ..."); every stream it serves gets
// x-panicky: seen on its response, so a test sees whether its callbacks ran. A
// configuration it cannot read is logged and leaves it panicking nowhere.
package main

import (
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
)

func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

// panicsIn is the configuration: the places to panic in, and "read".
var panicsIn = map[string]bool{}

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	cfg, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogWarnf("panicky: configuration: %v", err)
	}
	for _, w := range strings.Fields(string(cfg)) {
		panicsIn[w] = true
	}
	if panicsIn["plugin_start"] {
		panic("panicky: OnPluginStart")
	}
	if panicsIn["tick"] {
		if err := proxywasm.SetTickPeriodMilliSeconds(1000); err != nil {
			proxywasm.LogCriticalf("panicky: tick period: %v", err)
		}
	}
	return types.OnPluginStartStatusOK
}

func (*pluginContext) OnTick() {
	if panicsIn["tick"] {
		panic("panicky: OnTick")
	}
}

func (*pluginContext) NewHttpContext(uint32) types.HttpContext {
	if panicsIn["new_http_context"] {
		panic("panicky: NewHttpContext")
	}
	return &httpContext{}
}

type httpContext struct{ types.DefaultHttpContext }

var pairs hostabi.Pairs

func (*httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	if v, err := proxywasm.GetHttpRequestHeader(":path"); err != nil {
		proxywasm.LogInfof("panicky: sdk read: error: %v", err)
	} else {
		proxywasm.LogInfof("panicky: sdk read: %s", v)
	}
	if err := hostabi.ReadPairs(hostabi.RequestHeaders, &pairs); err != nil {
		proxywasm.LogInfof("panicky: hostabi read: error: %v", err)
	} else {
		v, _ := pairs.Get(":path")
		proxywasm.LogInfof("panicky: hostabi read: %s", v)
	}
	if panicsIn["request_headers"] {
		panic("panicky: OnHttpRequestHeaders")
	}
	return types.ActionContinue
}

func (*httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if err := proxywasm.AddHttpResponseHeader("x-panicky", "seen"); err != nil {
		proxywasm.LogCriticalf("panicky: add header: %v", err)
	}
	return types.ActionContinue
}
