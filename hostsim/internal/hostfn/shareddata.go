package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// SharedData is the model's side of proxy_get_shared_data and proxy_set_shared_data: the
// caller's vm_id's key-value store with compare-and-swap.
type SharedData interface {
	// GetSharedData returns a key's value (a copy, or a view valid until the guest runs
	// again) and its CAS.
	GetSharedData(key []byte) (value []byte, cas uint32, found bool)
	// SetSharedData writes value (a view of guest memory) if cas is 0 or current.
	SetSharedData(key, value []byte, cas uint32) abi.Status
}

func sharedData() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_get_shared_data", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			key, ok := read(g, u32(s[0]), u32(s[1]))
			if !ok {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			v, cas, found := g.GetSharedData(key)
			if !found {
				st(s, abi.StatusNotFound)
				return
			}
			if result := wasm.CopyOut(g, v, u32(s[2]), u32(s[3])); result != abi.StatusOK {
				st(s, result)
				return
			}
			if !writeU32(g, u32(s[4]), cas) {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, abi.StatusOK)
		}},
		{Name: "proxy_set_shared_data", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			key, ok1 := read(g, u32(s[0]), u32(s[1]))
			val, ok2 := read(g, u32(s[2]), u32(s[3]))
			if !ok1 || !ok2 {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, g.SetSharedData(key, val, u32(s[4])))
		}},
	}
}
