package hostsim

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// guest is a VM as the host functions see it: the calling guest's memory and allocator
// (wasm.Guest), its WASI environment (wasi.Guest, wasi.go) and the model's answers to the
// proxy-wasm ABI (hostfn.Guest, hostfn.go). A type of its own keeps these methods out of
// VM's public API; converting a *VM to a *guest costs nothing.
type guest VM

func (g *guest) vm() *VM { return (*VM)(g) }

// Memory implements wasm.Guest.
func (g *guest) Memory() api.Memory { return g.mem }

// Place implements wasm.Guest.
func (g *guest) Place(n uint32) uint32 { return g.vm().place(n) }

// wrapHostFunc finds the calling VM in the context, counts the call and enforces the
// restricted phases, then runs f on the VM as a G.
func wrapHostFunc[G any](module string, f wasm.Func[G], as func(*VM) G) api.GoModuleFunction {
	full := module + "." + f.Name
	idx, counted := hostCallTable.Index(full)
	if !counted {
		panic("hostsim: " + full + " missing from the host-call table")
	}
	return api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		vm, _ := ctx.Value(vmKey{}).(*VM)
		if vm == nil {
			panic(fmt.Errorf("hostsim: %s called outside a hostsim VM", full))
		}
		vm.hostCalls[idx].Add(1)
		if r := vm.restrict; r != restrictNone {
			allow := f.Allow&wasm.Allow(r) != 0 ||
				(vm.host.cfg.wasi == WASICppHostHead && f.Allow&(wasm.Allow(r)<<2) != 0)
			if !allow {
				phase := "start-up (_initialize/main)"
				if r == restrictMalloc {
					phase = "proxy_on_memory_allocate"
				}
				panic(&RestrictedCallError{Function: full, Phase: phase})
			}
		}
		f.Fn(as(vm), m, s)
	})
}
