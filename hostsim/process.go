package hostsim

import (
	"sort"
	"sync"
)

// Process is the state an Envoy process shares between all its VMs, keyed by vm_id: shared
// data (with one process-global CAS counter) and shared queues (with process-global
// tokens). Every Host has one; pass the same Process to several Hosts (WithProcess) to model
// several plugins in one proxy.
type Process struct {
	mu        sync.Mutex
	cas       uint32
	data      map[string]map[string]*sharedEntry // vm_id -> key -> entry
	queues    map[queueKey]*sharedQueue
	byToken   map[uint32]*sharedQueue
	nextToken uint32
	users     map[string]int // live Hosts per vm_id
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

type queueKey struct{ vmID, name string }

type sharedQueue struct {
	key    queueKey
	token  uint32
	items  [][]byte
	target *VM // last registrant's VM ...
	gen    uint64
	root   uint32 // ... and root context
}

// NewProcess returns an empty Process.
func NewProcess() *Process {
	return &Process{data: map[string]map[string]*sharedEntry{}, queues: map[queueKey]*sharedQueue{},
		byToken: map[uint32]*sharedQueue{}, users: map[string]int{}}
}

// nextCAS is cpp-host's nextCas: one counter for the process, never 0.
func (p *Process) nextCAS() uint32 {
	p.cas++
	if p.cas == 0 {
		p.cas = 1
	}
	return p.cas
}

// get returns a copy of the value and its CAS.
func (p *Process) get(vmID, key string) ([]byte, uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.data[vmID][key]
	if e == nil {
		return nil, 0, false
	}
	return append([]byte(nil), e.value...), e.cas, true
}

// set applies Envoy's rules: cas 0 is unconditional; a non-zero cas must match an existing
// entry's; a non-zero cas on a missing key succeeds.
func (p *Process) set(vmID string, key string, value []byte, cas uint32) Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.data[vmID]
	if m == nil {
		m = map[string]*sharedEntry{}
		p.data[vmID] = m
	}
	e := m[key]
	if e != nil && cas != 0 && cas != e.cas {
		return StatusCasMismatch
	}
	v := append([]byte(nil), value...)
	if e == nil {
		m[key] = &sharedEntry{value: v, cas: p.nextCAS()}
		return StatusOK
	}
	e.value, e.cas = v, p.nextCAS()
	return StatusOK
}

// GetSharedData returns a copy of the value under key in vmID's namespace and its CAS.
func (p *Process) GetSharedData(vmID, key string) (value []byte, cas uint32, found bool) {
	return p.get(vmID, key)
}

// SetSharedData writes as a guest would (same CAS rules); it returns the status the guest
// would get.
func (p *Process) SetSharedData(vmID, key string, value []byte, cas uint32) Status {
	return p.set(vmID, key, value, cas)
}

// SharedDataKeys lists the keys in vmID's namespace, sorted.
func (p *Process) SharedDataKeys(vmID string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.data[vmID]))
	for k := range p.data[vmID] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// register is registerQueue: the first registration allocates the token; later ones keep
// the items and move the notification target to the caller.
func (p *Process) register(vmID, name string, vm *VM, root uint32) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := queueKey{vmID, name}
	q := p.queues[k]
	if q == nil {
		p.nextToken++
		if p.nextToken == 0 {
			p.nextToken = 1
		}
		q = &sharedQueue{key: k, token: p.nextToken}
		p.queues[k] = q
		p.byToken[q.token] = q
	}
	q.target, q.gen, q.root = vm, vm.gen, root
	return q.token
}

func (p *Process) resolve(vmID, name string) (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queues[queueKey{vmID, name}]
	if q == nil || q.target == nil || q.target.isFailed() {
		return 0, false
	}
	return q.token, true
}

// enqueue appends and returns the notification target.
func (p *Process) enqueue(token uint32, value []byte) (target *VM, gen uint64, root uint32, st Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.byToken[token]
	if q == nil {
		return nil, 0, 0, StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), value...))
	return q.target, q.gen, q.root, StatusOK
}

func (p *Process) dequeue(token uint32) ([]byte, Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.byToken[token]
	if q == nil {
		return nil, StatusNotFound
	}
	if len(q.items) == 0 {
		return nil, StatusEmpty
	}
	v := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return v, StatusOK
}

// QueueSize returns the number of items in the queue with the given token.
func (p *Process) QueueSize(token uint32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.byToken[token]; q != nil {
		return len(q.items)
	}
	return 0
}

func (p *Process) acquire(vmID string) {
	p.mu.Lock()
	p.users[vmID]++
	p.mu.Unlock()
}

// release drops vmID's data and queues when its last Host goes, as VmIdHandle does.
func (p *Process) release(vmID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users[vmID]--
	if p.users[vmID] > 0 {
		return
	}
	delete(p.users, vmID)
	delete(p.data, vmID)
	for k, q := range p.queues {
		if k.vmID == vmID {
			delete(p.queues, k)
			delete(p.byToken, q.token)
		}
	}
}
