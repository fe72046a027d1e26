package hostsim

import (
	"errors"
	"fmt"
	"strings"
)

// Calling a guest's own exports: instrumentation a module adds besides the proxy-wasm ABI,
// which Envoy never calls (it looks up only the ABI's names).

// ErrNoExport is wrapped by the error of CallExport (and GuestHeapAllocs) when the module
// does not export the function: the figure is not available, which is not the same as 0.
var ErrNoExport = errors.New("hostsim: the module does not export the function")

// HeapAllocsExport is the export Spillway's ABI bridge (plugin/_bridge) adds to every
// module it builds: the guest Go heap's cumulative allocation count (see GuestHeapAllocs).
const HeapAllocsExport = "spillway_heap_allocs"

// CallExport calls a function the guest exports that is not one of the proxy-wasm ABI's
// callbacks, with the given arguments, and returns its results. It runs like a root
// callback: serialized with the VM's other callbacks, in the root context, outside any
// restricted phase; what it defers settles afterwards and the events it causes are drained.
// The proxy_* callbacks, the allocator (malloc) and the start-up functions (_initialize,
// _start, main, __main_void) are refused: they have their own API. A trap fails the VM, as
// in any callback. An export the module lacks is an error wrapping ErrNoExport.
func (vm *VM) CallExport(name string, args ...uint64) ([]uint64, error) {
	if reservedExport(name) {
		return nil, fmt.Errorf("hostsim: %s: CallExport refuses %s: it is part of the proxy-wasm ABI or the module's start-up", vm.name, name)
	}
	vm.mu.Lock()
	if vm.isFailed() {
		vm.mu.Unlock()
		return nil, vm.failedErr()
	}
	if vm.mod == nil {
		vm.mu.Unlock()
		return nil, fmt.Errorf("hostsim: %s: not instantiated", vm.name)
	}
	f := vm.mod.ExportedFunction(name)
	if f == nil {
		vm.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %s", ErrNoExport, vm.name, name)
	}
	def := f.Definition()
	np, nr := len(def.ParamTypes()), len(def.ResultTypes())
	if len(args) != np {
		vm.mu.Unlock()
		return nil, fmt.Errorf("hostsim: %s: %s takes %d arguments, got %d", vm.name, name, np, len(args))
	}
	stack := make([]uint64, max(np, nr))
	copy(stack, args)
	vm.frame = vm.rootFrame()
	err := f.CallWithStack(vm.ctx, stack)
	vm.frame = nil
	if err == nil && vm.exited {
		err = fmt.Errorf("guest called proc_exit(%d)", vm.exitCode)
	}
	if err != nil {
		err = vm.trap(name, err)
	} else {
		vm.afterCallback()
	}
	vm.mu.Unlock()
	if err != nil {
		return nil, joinErr(err, vm.host.drain())
	}
	return stack[:nr], vm.host.drain()
}

// reservedExport reports the exports CallExport refuses.
func reservedExport(name string) bool {
	switch name {
	case "_initialize", "_start", "main", "__main_void", "malloc":
		return true
	}
	return strings.HasPrefix(name, "proxy_")
}

// GuestHeapAllocs returns the guest Go heap's cumulative count of allocated objects, read
// from the module's spillway_heap_allocs export (HeapAllocsExport). The difference of two
// readings is the number of heap allocations the guest made in between; reading it
// allocates nothing in the guest and makes no proxy-wasm host call (it makes WASI
// clock_time_get calls, which HostCalls counts). A module without the export (hostsim's raw
// test guests, any module not built by plugin/wasmbuild) gives an error wrapping
// ErrNoExport.
func (vm *VM) GuestHeapAllocs() (uint64, error) {
	r, err := vm.CallExport(HeapAllocsExport)
	if err != nil {
		return 0, err
	}
	if len(r) != 1 {
		return 0, fmt.Errorf("hostsim: %s: %s returned %d results, want 1", vm.name, HeapAllocsExport, len(r))
	}
	return r[0], nil
}

// GuestHeapAllocs adds up GuestHeapAllocs over the main-thread VM and the workers (the
// canary and the base VM are gone once the plugin runs). It fails, wrapping ErrNoExport,
// if the module lacks the export.
func (h *Host) GuestHeapAllocs() (uint64, error) {
	vms := h.VMs()
	if len(vms) == 0 {
		return 0, errNotStarted
	}
	var n uint64
	for _, vm := range vms {
		v, err := vm.GuestHeapAllocs()
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}
