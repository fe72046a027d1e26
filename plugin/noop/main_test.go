package main

import (
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func TestNoopPassesEveryCallback(t *testing.T) {
	host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&vmContext{}))
	defer reset()
	if s := host.StartPlugin(); s != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v", s)
	}
	id := host.InitializeHttpContext()
	for name, a := range map[string]types.Action{
		"request headers":  host.CallOnRequestHeaders(id, [][2]string{{":path", "/"}}, false),
		"request body":     host.CallOnRequestBody(id, []byte("x"), true),
		"response headers": host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false),
		"response body":    host.CallOnResponseBody(id, []byte("y"), true),
	} {
		if a != types.ActionContinue {
			t.Errorf("%s: %v, want continue", name, a)
		}
	}
	host.CompleteHttpContext(id)
}
