// Package hostfn is the proxy-wasm ABI's env module (0.1.0 and 0.2.x) as cpp-host links it
// (src/exports.cc): each host function decodes its arguments from guest memory, asks the
// Envoy model through a small interface of its ABI area, and encodes the answer back.
package hostfn

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
)

// Module is the import module the functions are linked under.
const Module = "env"

// Guest is the calling VM as the env functions need it: its memory and allocator, and the
// model's side of every ABI area.
type Guest interface {
	wasm.Guest
	Logger
	Properties
	HeaderMaps
	Buffers
	Streams
	SharedData
	Queues
	Callouts
	Metrics
	Timers
	Foreign
}

// Funcs is every env function, grouped by ABI area.
func Funcs() []wasm.Func[Guest] {
	var fs []wasm.Func[Guest]
	for _, area := range [][]wasm.Func[Guest]{logging(), properties(), headerMaps(), buffers(), streams(),
		sharedData(), queues(), callouts(), metrics(), timers(), foreign(), stubs()} {
		fs = append(fs, area...)
	}
	return fs
}

// Instantiate links the functions into rt as the env module, each wrapped by wrap (which
// finds the calling Guest, counts the call and enforces restricted phases).
func Instantiate(ctx context.Context, rt wazero.Runtime, wrap func(module string, f wasm.Func[Guest]) api.GoModuleFunction) error {
	b := rt.NewHostModuleBuilder(Module)
	for _, f := range Funcs() {
		b.NewFunctionBuilder().WithGoModuleFunction(wrap(Module, f), f.Params, f.Results).Export(f.Name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("hostfn: env: %w", err)
	}
	return nil
}

// The building blocks of the functions.

var (
	u32    = wasm.U32
	sig    = wasm.Sig
	i32    = wasm.I32
	i64    = wasm.I64
	status = wasm.Sig(1, wasm.I32) // every env function answers a Status
)

// st sets the function's result.
func st(s []uint64, v abi.Status) { s[0] = uint64(v) }

// read is a view of guest memory, valid until the guest runs again.
func read(g Guest, p, n uint32) ([]byte, bool) { return wasm.Read(g.Memory(), p, n) }

// writeU32 and writeU64 store an out-parameter.
func writeU32(g Guest, p, v uint32) bool { return g.Memory().WriteUint32Le(p, v) }

func writeU64(g Guest, p uint32, v uint64) bool { return g.Memory().WriteUint64Le(p, v) }
