package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Properties is the model's side of proxy_get_property and proxy_set_property. A path is
// serialized (abi.PropertyPath: segments joined by NUL).
type Properties interface {
	// GetProperty resolves a path the way Envoy does (context.cc, Context::getProperty).
	GetProperty(path []byte) ([]byte, abi.Status)
	// SetProperty sets filter state (Context::setProperty).
	SetProperty(path, value []byte) abi.Status
}

func properties() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_get_property", Params: sig(4, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			path, ok := read(g, u32(s[0]), u32(s[1]))
			if !ok {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			v, result := g.GetProperty(path)
			if result != abi.StatusOK {
				st(s, result)
				return
			}
			st(s, wasm.CopyOut(g, v, u32(s[2]), u32(s[3])))
		}},
		{Name: "proxy_set_property", Params: sig(4, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			path, ok1 := read(g, u32(s[0]), u32(s[1]))
			val, ok2 := read(g, u32(s[2]), u32(s[3]))
			if !ok1 || !ok2 {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, g.SetProperty(path, val))
		}},
	}
}
