package hostfn

import (
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Queues is the model's side of the shared-queue functions.
type Queues interface {
	// RegisterQueue registers (or takes over) the caller's vm_id's queue name for the
	// calling root context and returns its token.
	RegisterQueue(name []byte) uint32
	// ResolveQueue finds a queue by vm_id ("" for the caller's) and name.
	ResolveQueue(vmID, name []byte) (token uint32, found bool)
	// Enqueue adds value (a view of guest memory) to the queue and notifies its registrant.
	Enqueue(token uint32, value []byte) abi.Status
	// Dequeue takes the queue's oldest value.
	Dequeue(token uint32) ([]byte, abi.Status)
}

func queues() []wasm.Func[Guest] {
	return []wasm.Func[Guest]{
		{Name: "proxy_register_shared_queue", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			name, ok := read(g, u32(s[0]), u32(s[1]))
			if !ok {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			token := g.RegisterQueue(name)
			if !writeU32(g, u32(s[2]), token) {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, abi.StatusOK)
		}},
		{Name: "proxy_resolve_shared_queue", Params: sig(5, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			vmID, ok1 := read(g, u32(s[0]), u32(s[1]))
			name, ok2 := read(g, u32(s[2]), u32(s[3]))
			if !ok1 || !ok2 {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			token, found := g.ResolveQueue(vmID, name)
			if !found {
				st(s, abi.StatusNotFound)
				return
			}
			if !writeU32(g, u32(s[4]), token) {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, abi.StatusOK)
		}},
		{Name: "proxy_enqueue_shared_queue", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			val, ok := read(g, u32(s[1]), u32(s[2]))
			if !ok {
				st(s, abi.StatusInvalidMemoryAccess)
				return
			}
			st(s, g.Enqueue(u32(s[0]), val))
		}},
		{Name: "proxy_dequeue_shared_queue", Params: sig(3, i32), Results: status, Fn: func(g Guest, _ api.Module, s []uint64) {
			v, result := g.Dequeue(u32(s[0]))
			if result != abi.StatusOK {
				st(s, result)
				return
			}
			st(s, wasm.CopyOut(g, v, u32(s[1]), u32(s[2])))
		}},
	}
}
