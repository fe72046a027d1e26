package hostsim

import "github.com/spillwayproxy/spillway/hostsim/internal/process"

// Process is the state an Envoy process shares between all its VMs, keyed by vm_id: shared
// data (with one process-global CAS counter) and shared queues (with process-global
// tokens), modelled in hostsim/internal/process. Every Host has one; pass the same Process
// to several Hosts (WithProcess) to model several plugins in one proxy.
type Process struct {
	state *process.State[*VM] // a queue's registrant is the VM notified of its items
}

// NewProcess returns an empty Process.
func NewProcess() *Process { return &Process{state: process.New[*VM]()} }

// GetSharedData returns a copy of the value under key in vmID's namespace and its CAS.
func (p *Process) GetSharedData(vmID, key string) (value []byte, cas uint32, found bool) {
	return p.state.Get(vmID, key)
}

// SetSharedData writes as a guest would (same CAS rules); it returns the status the guest
// would get.
func (p *Process) SetSharedData(vmID, key string, value []byte, cas uint32) Status {
	return p.state.Set(vmID, key, value, cas)
}

// SharedDataKeys lists the keys in vmID's namespace, sorted.
func (p *Process) SharedDataKeys(vmID string) []string { return p.state.Keys(vmID) }

// QueueSize returns the number of items in the queue with the given token.
func (p *Process) QueueSize(token uint32) int { return p.state.QueueSize(token) }

// registerQueue makes vm's root the registrant of vmID's queue name.
func (p *Process) registerQueue(vmID, name string, vm *VM) uint32 {
	return p.state.Register(vmID, name, process.Registrant[*VM]{Target: vm, Gen: vm.gen, Root: vm.callerRoot()})
}

// resolveQueue finds a queue; one whose registrant's VM has failed or gone does not resolve.
func (p *Process) resolveQueue(vmID, name string) (uint32, bool) {
	token, r, found := p.state.Resolve(vmID, name)
	if !found || r.Target == nil || r.Target.isFailed() {
		return 0, false
	}
	return token, true
}

// enqueue appends value and notifies the registrant, asynchronously, through h.
func (p *Process) enqueue(h *Host, token uint32, value []byte) Status {
	r, result := p.state.Enqueue(token, value)
	if result == StatusOK && r.Target != nil {
		h.post(event{kind: evQueueReady, vm: r.Target, gen: r.Gen, root: r.Root, token: token})
	}
	return result
}
