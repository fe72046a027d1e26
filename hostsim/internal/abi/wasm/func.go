// Package wasm is the proxy-wasm ABI's side in wazero: the shape of a host function (its
// signature, the restricted phases it may run in) and the guest memory it reads and
// answers in (cpp-host's copyToPointerSize). The ABI's vocabulary, which needs no VM, is
// hostsim/internal/abi.
package wasm

import "github.com/tetratelabs/wazero/api"

// Func is one host function: its import name and signature, the restricted phases it may
// run in, and its implementation, called with the calling guest G, the module and the
// wazero stack (arguments in, results out).
type Func[G any] struct {
	Name    string
	Params  []api.ValueType
	Results []api.ValueType
	Allow   Allow
	Fn      func(g G, m api.Module, stack []uint64)
}

// Allow says in which restricted phases a host function may run. Outside them it traps
// with cpp-host's "restricted_callback".
type Allow uint8

// Restricted phases a function may be allowed in.
const (
	AllowStartup     Allow = 1 << iota // during _initialize / main (cpp-host startVm allow-list)
	AllowMalloc                        // during host-initiated proxy_on_memory_allocate
	AllowStartupHead                   // during start-up, post-#533 hosts only
	AllowMallocHead                    // during malloc, post-#533 hosts only
)

// The value types of the ABI's signatures.
var (
	I32 = api.ValueTypeI32
	I64 = api.ValueTypeI64
)

// Sig is a signature of n values of type t.
func Sig(n int, t api.ValueType) []api.ValueType {
	s := make([]api.ValueType, n)
	for i := range s {
		s[i] = t
	}
	return s
}

// U32 is an i32 argument from the stack.
func U32(v uint64) uint32 { return uint32(v) }

// NameSet is a set of function names.
func NameSet(names ...string) map[string]bool {
	s := make(map[string]bool, len(names))
	for _, n := range names {
		s[n] = true
	}
	return s
}
