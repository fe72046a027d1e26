// Command gcstress is an SDK filter for hostsim's GC-stress test, built with
// plugin/wasmbuild (with and without the poll_oneoff runtime fix). Each request allocates
// garbage in proportion to its x-alloc header, counts requests in a Go global, answers
// with x-seen on the response, and forces a GC when the request carries x-gc. Its export
// gcstress_alloc(n) makes exactly n heap allocations, for the test of the bridge's
// spillway_heap_allocs counter.
package main

import (
	"runtime"
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

type httpContext struct{ types.DefaultHttpContext }

var (
	seen int
	sink [][]byte
)

func (*httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	seen++
	if v, err := proxywasm.GetHttpRequestHeader("x-alloc"); err == nil {
		n, _ := strconv.Atoi(v)
		sink = append(sink[:0], make([]byte, n))
	}
	if _, err := proxywasm.GetHttpRequestHeader("x-gc"); err == nil {
		runtime.GC()
	}
	return types.ActionContinue
}

func (*httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	_ = proxywasm.AddHttpResponseHeader("x-seen", strconv.Itoa(seen))
	return types.ActionContinue
}

// allocSink keeps gcstress_alloc's objects escaping to the heap.
var allocSink *[4]*int

// gcstressAlloc makes exactly n heap allocations of 32 bytes each (pointerful, so none is
// merged by the tiny allocator) and nothing else.
//
//go:wasmexport gcstress_alloc
func gcstressAlloc(n uint32) {
	for i := uint32(0); i < n; i++ {
		allocSink = new([4]*int)
	}
}
