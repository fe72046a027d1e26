package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Callouts is the model's side of proxy_http_call and proxy_get_status.
type Callouts interface {
	// NewCalloutToken allocates the next callout token (never 0).
	NewCalloutToken() uint32
	// HTTPCall validates and sends the callout token; upstream and body are views of guest
	// memory, and timeoutMs 0 means no timeout.
	HTTPCall(token uint32, upstream []byte, headers, trailers [][2]string, body []byte, timeoutMs int32) abi.Status
	// CalloutStatus is the last callout's result, what proxy_get_status answers in
	// on_http_call_response.
	CalloutStatus() (code abi.Status, message string)
}

func callouts() []wasm.Func[Guest] {
	unimplemented := func(_ Guest, _ api.Module, s []uint64) { st(s, abi.StatusUnimplemented) }
	return []wasm.Func[Guest]{
		{Name: "proxy_http_call", Params: sig(10, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, httpCall(g, s))
		}},
		{Name: "proxy_get_status", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			code, msg := g.CalloutStatus()
			if !writeU32(g, u32(s[0]), uint32(code)) {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, wasm.CopyOut(g, []byte(msg), u32(s[1]), u32(s[2])))
		}},
		// gRPC calls are not modelled.
		{Name: "proxy_grpc_call", Params: sig(12, i32), Results: status, Fn: unimplemented},
		{Name: "proxy_grpc_stream", Params: sig(9, i32), Results: status, Fn: unimplemented},
		{Name: "proxy_grpc_close", Params: sig(1, i32), Results: status, Fn: unimplemented},
		{Name: "proxy_grpc_cancel", Params: sig(1, i32), Results: status, Fn: unimplemented},
		{Name: "proxy_grpc_send", Params: sig(4, i32), Results: status, Fn: unimplemented},
	}
}

// httpCall decodes proxy_http_call's arguments. The token is allocated and written before
// the model validates the call, so a refused call still consumes one and leaves it in the
// slot (cpp-host's http_call, src/exports.cc, writes 0 there first to check the memory and
// then whatever token Context::httpCall gave).
func httpCall(g Guest, s []uint64) abi.Status {
	up, ok1 := read(g, u32(s[0]), u32(s[1]))
	hb, ok2 := read(g, u32(s[2]), u32(s[3]))
	body, ok3 := read(g, u32(s[4]), u32(s[5]))
	tb, ok4 := read(g, u32(s[6]), u32(s[7]))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return abi.StatusInvalidMemoryAccess
	}
	timeout := int32(u32(s[8]))
	headers, _ := abi.DecodePairs(hb)
	trailers, _ := abi.DecodePairs(tb)
	token := g.NewCalloutToken()
	if !writeU32(g, u32(s[9]), token) {
		return abi.StatusInvalidMemoryAccess
	}
	return g.HTTPCall(token, up, headers, trailers, body, timeout)
}
