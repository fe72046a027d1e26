// Command sdknoop is a do-nothing SDK filter that, unlike types.DefaultVMContext alone,
// creates an HTTP context per stream (the SDK panics on a stream whose plugin context
// returns no HttpContext). Built with plugin/wasmbuild; a baseline for hostsim's benchmarks.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }
