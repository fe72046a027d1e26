// Command noop is a do-nothing proxy-wasm filter built exactly like spillway.wasm (same SDK,
// bridge and runtime fix), the baseline for the per-request cost figures (make bench).
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// main is never called in a c-shared wasip1 module; the VM context is set in init.
func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext. (The SDK's default plugin context creates no
// HTTP context, and the SDK panics on a stream without one.)
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

// NewHttpContext implements types.PluginContext: every callback continues.
func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &types.DefaultHttpContext{} }
