// Command sdkexamples is an SDK filter for hostsim's suite against the proxy-wasm Go SDK's
// end-to-end expectations (hostsim/sdkexamples_test.go), built with plugin/wasmbuild. It
// does what each of the SDK's examples (tetratelabs/proxy-wasm-go-sdk v0.24.0, examples/*)
// does, written anew: the plugin's root_id names the example, so one module (compiled once)
// serves the whole suite, as root_id selects a module's handlers in Envoy.
//
// Every VM start logs "vm config: <the VM configuration>" (vm_plugin_configuration) and
// sets the shared_data example's key to empty (shared_data's OnVMStart).
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

// examples are the plugins by root_id: each makes the plugin context of one example.
var examples = map[string]func(contextID uint32) types.PluginContext{
	"dispatch_call_on_tick":   newDispatchOnTick,
	"foreign_call_on_tick":    newForeignOnTick,
	"helloworld":              newHelloWorld,
	"http_auth_random":        newAuthRandom,
	"http_body":               newHTTPBody,
	"http_body_chunk":         newBodyChunk,
	"http_headers":            newHTTPHeaders,
	"http_routing":            newHTTPRouting,
	"json_validation":         newJSONValidation,
	"metrics":                 newMetrics,
	"multiple_dispatches":     newMultipleDispatches,
	"postpone_requests":       newPostpone,
	"properties":              newProperties,
	"shared_data":             newSharedData,
	"shared_queue_receiver":   newQueueReceiver,
	"shared_queue_sender":     newQueueSender,
	"vm_plugin_configuration": newPluginConfigLogger,
}

type vmContext struct{}

func (*vmContext) OnVMStart(int) types.OnVMStartStatus {
	cfg, err := proxywasm.GetVMConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogCriticalf("vm configuration: %v", err)
	}
	proxywasm.LogInfof("vm config: %s", cfg)
	initSharedData()
	return types.OnVMStartStatusOK
}

// NewPluginContext answers a root context whose example is known once the plugin starts.
func (*vmContext) NewPluginContext(contextID uint32) types.PluginContext {
	return &selector{contextID: contextID}
}

// selector is a root context: at its start it reads plugin_root_id and hands every later
// callback to that example's plugin context (an unknown root_id refuses to start).
type selector struct {
	contextID uint32
	types.PluginContext
}

func (s *selector) OnPluginStart(size int) types.OnPluginStartStatus {
	id, err := proxywasm.GetProperty([]string{"plugin_root_id"})
	if err != nil {
		proxywasm.LogCriticalf("plugin_root_id: %v", err)
		return types.OnPluginStartStatusFailed
	}
	mk, ok := examples[string(id)]
	if !ok {
		proxywasm.LogCriticalf("no example %q", id)
		return types.OnPluginStartStatusFailed
	}
	s.PluginContext = mk(s.contextID)
	return s.PluginContext.OnPluginStart(size)
}

func (s *selector) OnPluginDone() bool {
	return s.PluginContext == nil || s.PluginContext.OnPluginDone()
}

func (s *selector) OnQueueReady(id uint32) {
	if s.PluginContext != nil {
		s.PluginContext.OnQueueReady(id)
	}
}

func (s *selector) OnTick() {
	if s.PluginContext != nil {
		s.PluginContext.OnTick()
	}
}

func (s *selector) NewHttpContext(id uint32) types.HttpContext {
	if s.PluginContext == nil {
		return nil
	}
	return s.PluginContext.NewHttpContext(id)
}

func (s *selector) NewTcpContext(id uint32) types.TcpContext {
	if s.PluginContext == nil {
		return nil
	}
	return s.PluginContext.NewTcpContext(id)
}

// pluginConfig reads the plugin configuration; a missing one is empty.
func pluginConfig() []byte {
	b, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogCriticalf("plugin configuration: %v", err)
	}
	return b
}
