package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Foreign is the model's side of proxy_call_foreign_function.
type Foreign interface {
	// CallForeign runs the function registered as name on args (name and args are views of guest memory).
	// With reply the result (Ok) is handed to the guest; without, the results' slots are
	// left alone (a built-in such as clear_route_cache answers nothing).
	CallForeign(name, args []byte) (out []byte, reply bool, result abi.Status)
}

func foreign() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_call_foreign_function", Params: sig(6, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			name, ok1 := read(g, u32(s[0]), u32(s[1]))
			args, ok2 := read(g, u32(s[2]), u32(s[3]))
			if !ok1 || !ok2 {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			out, reply, result := g.CallForeign(name, args)
			if result != abi.StatusOK || !reply {
				st(s, result)
				return
			}
			st(s, wasm.CopyOut(g, out, u32(s[4]), u32(s[5])))
		}},
	}
}

// stubs are what cpp-host links without a model behind them.
func stubs() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "envoy_resolve_dns", Params: sig(3, i32), Results: status, Fn: func(_ Guest, _ api.Module, s []uint64) {
			st(s, abi.StatusUnimplemented)
		}},
		{Name: "proxy_done", Results: status, Fn: func(_ Guest, _ api.Module, s []uint64) { st(s, abi.StatusNotFound) }},
		{Name: "pthread_equal", Params: sig(2, i32), Results: status, Fn: func(_ Guest, _ api.Module, s []uint64) {
			if u32(s[0]) == u32(s[1]) {
				s[0] = 1
			} else {
				s[0] = 0
			}
		}},
		{Name: "emscripten_notify_memory_growth", Params: sig(1, i32), Allow: wasm.AllowStartup, Fn: func(Guest, api.Module, []uint64) {}},
	}
}
