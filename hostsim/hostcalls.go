package hostsim

import (
	"github.com/spillwayproxy/spillway/hostsim/internal/hostcalls"
	"github.com/spillwayproxy/spillway/hostsim/internal/hostfn"
	"github.com/spillwayproxy/spillway/hostsim/internal/wasi"
)

// Host-call accounting (hostsim/internal/hostcalls): every host function hostsim links (the
// env module's proxy-wasm ABI and hostsim's WASI, under both wasi_snapshot_preview1 and
// wasi_unstable) has a fixed index, and each VM keeps one atomic counter per index, bumped
// on entry to the function (before the restricted-phase check, so a refused call counts
// too).
//
// In the WASIWazero mode the WASI functions are wazero's own and are not counted: only env
// calls are.

// hostCallTable indexes the counted host functions.
var hostCallTable = newHostCallTable()

func newHostCallTable() *hostcalls.Table {
	var names []string
	for _, f := range hostfn.Funcs() {
		names = append(names, hostfn.Module+"."+f.Name)
	}
	for _, mod := range wasi.ModuleNames {
		for _, f := range wasi.Funcs() {
			names = append(names, mod+"."+f.Name)
		}
	}
	return hostcalls.NewTable(names)
}

// HostCallCounts is how many times each host function was called, keyed by its import
// name ("env.proxy_get_shared_data", "wasi_snapshot_preview1.clock_time_get"); functions
// that were not called are absent. Total, Proxy, WASI and SharedData add them up; Sub gives
// a window without a reset.
type HostCallCounts = hostcalls.Counts

// HostCalls returns how many times the guest running in this VM called each host
// function since the VM was created (or since ResetHostCalls). A VM replaced after a
// failure (FAIL_RELOAD) keeps counting.
func (vm *VM) HostCalls() HostCallCounts {
	out := HostCallCounts{}
	hostCallTable.AddTo(vm.hostCalls, out)
	return out
}

// ResetHostCalls sets the VM's host-call counters to zero.
func (vm *VM) ResetHostCalls() { vm.hostCalls.Reset() }

// HostCalls returns the host calls of every VM the Host created (base, canary, main thread
// and workers), added up.
func (h *Host) HostCalls() HostCallCounts {
	out := HostCallCounts{}
	for _, c := range h.allCallCounters() {
		hostCallTable.AddTo(c, out)
	}
	return out
}

// ResetHostCalls sets the host-call counters of every VM of the Host to zero.
func (h *Host) ResetHostCalls() {
	for _, c := range h.allCallCounters() {
		c.Reset()
	}
}

// allCallCounters returns the counters of every VM the Host made. Only the counters are
// kept, not the VMs: a closed base VM's memory is not held on to.
func (h *Host) allCallCounters() []hostcalls.Counters {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hostcalls.Counters(nil), h.callCount...)
}
