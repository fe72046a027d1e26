package hostsim

import (
	"errors"
	"fmt"
)

// Retune models an ECDS update of the plugin's configuration: Envoy builds a new filter
// config whose plugin lands on each thread's existing VM (the VM key does not include the
// plugin configuration: proxy-wasm-cpp-host getOrCreateThreadLocalPlugin), so every VM
// starts a new root context for it — proxy_on_context_create, proxy_on_vm_start,
// proxy_on_configure with config — and the old filter config's root context is then done
// and deleted (proxy_on_done, proxy_on_delete). Ticks and queue notifications go to the new
// root from then on; a VM reloaded later (FAIL_RELOAD) starts with config. It reports
// whether every VM accepted config.
func (h *Host) Retune(config []byte) (bool, error) {
	h.lifecycle.Lock()
	defer h.lifecycle.Unlock()
	if !h.started {
		return false, errors.New("hostsim: Retune before StartPlugin")
	}
	h.cfg.pluginConfig = append([]byte(nil), config...)
	all := true
	var refusals []error
	for _, vm := range h.VMs() {
		ok, err := vm.retune(config)
		if err != nil && !errors.Is(err, ErrStartRefused) {
			return false, err
		}
		refusals = append(refusals, err)
		all = all && ok
	}
	return all, joinErr(errors.Join(refusals...), h.drain())
}

func (vm *VM) retune(config []byte) (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.isFailed() {
		return false, nil
	}
	old := vm.rootID
	vm.rootID = vm.nextID // the new root is the VM's root from its start on (its tick, its queue)
	vm.nextID++
	vm.tickGen++ // the old root's ticks stop
	ok, err := vm.startRootContext(vm.rootID, &vm.rootCreated)
	if err == nil && ok {
		ok, err = vm.configureRootContext(vm.rootID, config)
	}
	if err != nil || !ok {
		return ok, err
	}
	fr := &frame{ctxID: old, effective: old}
	r, err := vm.call("proxy_on_done", vm.fns.done, fr, uint64(old))
	if err == nil && (r != 0 || vm.fns.done == nil) {
		_, err = vm.call("proxy_on_delete", vm.fns.delete, fr, uint64(old))
	}
	if err != nil {
		return false, fmt.Errorf("hostsim: %s: the old root after a retune: %w", vm.name, err)
	}
	vm.afterCallback()
	return true, nil
}

// Fail fails the VM the way a trap does (a test's stand-in for a guest that traps on cue):
// no proxy_on_done or proxy_on_log runs, its timers stop, notifications to it are dropped,
// and its streams follow the failure policy (FAIL_RELOAD: the next stream reloads it).
func (vm *VM) Fail(reason string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.fail(fmt.Errorf("hostsim: failed on purpose: %s", reason))
}

// QueueCount returns how many shared queues are registered in the process (a queue lives
// until its vm_id's last VM goes; ABI 0.2 has no call to unregister one).
func (p *Process) QueueCount() int { return p.state.QueueCount() }
