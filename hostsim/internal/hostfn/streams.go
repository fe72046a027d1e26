package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Streams is the model's side of the stream-control functions: continue, close and local
// replies (deferred until the callback returns) and the effective context.
type Streams interface {
	// ContinueStream resumes a direction (proxy_continue_stream).
	ContinueStream(t abi.StreamType) abi.Status
	// CloseStream resets a direction (proxy_close_stream).
	CloseStream(t abi.StreamType) abi.Status
	// SendLocalResponse records a local reply; body is a view of guest memory.
	SendLocalResponse(code uint32, details string, body []byte, headers [][2]string, grpcStatus int32)
	// SetEffectiveContext makes another context current (proxy_set_effective_context).
	SetEffectiveContext(id uint32) abi.Status
}

func streams() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_continue_stream", Params: sig(1, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.ContinueStream(abi.StreamType(u32(s[0]))))
		}},
		{Name: "proxy_close_stream", Params: sig(1, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.CloseStream(abi.StreamType(u32(s[0]))))
		}},
		// ABI 0.1.0's forms.
		{Name: "proxy_continue_request", Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.ContinueStream(abi.StreamRequest))
		}},
		{Name: "proxy_continue_response", Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.ContinueStream(abi.StreamResponse))
		}},
		{Name: "proxy_clear_route_cache", Results: status, Fn: func(_ Guest, _ api.Module, s []uint64) { st(s, abi.StatusOK) }},
		// Always Ok: a local reply without a stream is a silent no-op (envoy#39797).
		{Name: "proxy_send_local_response", Params: sig(8, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			details, ok1 := read(g, u32(s[1]), u32(s[2]))
			body, ok2 := read(g, u32(s[3]), u32(s[4]))
			hdrs, ok3 := read(g, u32(s[5]), u32(s[6]))
			if !ok1 || !ok2 || !ok3 {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			pairs, _ := abi.DecodePairs(hdrs)
			g.SendLocalResponse(u32(s[0]), string(details), body, pairs, int32(u32(s[7])))
			st(s, abi.StatusOK)
		}},
		{Name: "proxy_set_effective_context", Params: sig(1, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			st(s, g.SetEffectiveContext(u32(s[0])))
		}},
	}
}
