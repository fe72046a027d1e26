package hostsim

import (
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spillwayproxy/spillway/hostsim/internal/wasi"

	"github.com/spillwayproxy/spillway/hostsim/internal/hostfn"
)

// Host-call accounting: every host function hostsim links (the env module's proxy-wasm ABI
// and hostsim's WASI, under both wasi_snapshot_preview1 and wasi_unstable) has a fixed
// index, and each VM keeps one atomic counter per index, bumped on entry to the function
// (before the restricted-phase check, so a refused call counts too). Counting costs one
// uncontended atomic add per call; a snapshot (HostCalls) is built only when read.
//
// In the WASIWazero mode the WASI functions are wazero's own and are not counted: only env
// calls are.

// hostCallNames lists the counted host functions as "module.name", by index;
// hostCallIndex maps a name back to its index.
var hostCallNames, hostCallIndex = hostCallTable()

func hostCallTable() ([]string, map[string]int) {
	var names []string
	for _, f := range hostfn.Funcs() {
		names = append(names, hostfn.Module+"."+f.Name)
	}
	for _, mod := range wasi.ModuleNames {
		for _, f := range wasi.Funcs() {
			names = append(names, mod+"."+f.Name)
		}
	}
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	return names, index
}

// hostCallCounters are one VM's counters, indexed like hostCallNames.
type hostCallCounters []atomic.Uint64

func newHostCallCounters() hostCallCounters { return make(hostCallCounters, len(hostCallNames)) }

func (c hostCallCounters) addTo(out HostCallCounts) {
	for i := range c {
		if n := c[i].Load(); n > 0 {
			out[hostCallNames[i]] += n
		}
	}
}

func (c hostCallCounters) reset() {
	for i := range c {
		c[i].Store(0)
	}
}

// sharedDataFunctions are the host functions HostCallCounts.SharedData adds up: the
// proxy-wasm shared-data reads and writes.
var sharedDataFunctions = []string{"env.proxy_get_shared_data", "env.proxy_set_shared_data"}

// HostCallCounts is how many times each host function was called, keyed by its import
// name ("env.proxy_get_shared_data", "wasi_snapshot_preview1.clock_time_get"). Functions
// that were not called are absent.
type HostCallCounts map[string]uint64

// Total is the number of host calls of every kind.
func (c HostCallCounts) Total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// Proxy is the number of calls into the env module: the proxy-wasm ABI (and cpp-host's
// emscripten stubs, which Go guests never import).
func (c HostCallCounts) Proxy() uint64 { return c.prefixed("env.") }

// WASI is the number of WASI calls (wasi_snapshot_preview1 and wasi_unstable).
func (c HostCallCounts) WASI() uint64 { return c.Total() - c.Proxy() }

// SharedData is the number of shared-data operations: proxy_get_shared_data plus
// proxy_set_shared_data (a CAS write that fails counts as one operation, as it is one
// host call).
func (c HostCallCounts) SharedData() uint64 {
	var n uint64
	for _, name := range sharedDataFunctions {
		n += c[name]
	}
	return n
}

func (c HostCallCounts) prefixed(prefix string) uint64 {
	var n uint64
	for k, v := range c {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// Sub returns the calls made since before was taken (c minus before, per function;
// functions that did not change are absent). Both must come from the same VM or Host with
// no reset in between.
func (c HostCallCounts) Sub(before HostCallCounts) HostCallCounts {
	out := HostCallCounts{}
	for k, v := range c {
		if b := before[k]; v > b {
			out[k] = v - b
		}
	}
	return out
}

// String lists the counts as "name=n", sorted by name.
func (c HostCallCounts) String() string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(c[k], 10))
	}
	return b.String()
}

// HostCalls returns how many times the guest running in this VM called each host
// function since the VM was created (or since ResetHostCalls). A VM replaced after a
// failure (FAIL_RELOAD) keeps counting.
func (vm *VM) HostCalls() HostCallCounts {
	out := HostCallCounts{}
	vm.hostCalls.addTo(out)
	return out
}

// ResetHostCalls sets the VM's host-call counters to zero.
func (vm *VM) ResetHostCalls() { vm.hostCalls.reset() }

// HostCalls returns the host calls of every VM the Host created (base, canary, main thread
// and workers), added up.
func (h *Host) HostCalls() HostCallCounts {
	out := HostCallCounts{}
	for _, c := range h.allCallCounters() {
		c.addTo(out)
	}
	return out
}

// ResetHostCalls sets the host-call counters of every VM of the Host to zero.
func (h *Host) ResetHostCalls() {
	for _, c := range h.allCallCounters() {
		c.reset()
	}
}

// allCallCounters returns the counters of every VM the Host made. Only the counters are
// kept, not the VMs: a closed base VM's memory is not held on to.
func (h *Host) allCallCounters() []hostCallCounters {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hostCallCounters(nil), h.callCount...)
}
