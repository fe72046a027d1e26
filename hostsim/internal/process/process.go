// Package process is what an Envoy process shares between all its VMs, keyed by vm_id:
// shared data with one process-global CAS counter and shared queues with process-global
// tokens, after cpp-host's src/shared_data.cc and src/shared_queue.cc. It knows nothing of
// VMs: a queue's registrant is an opaque T the caller notifies.
package process

import (
	"sort"
	"sync"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// State is one process's shared data and queues; T is whatever the caller notifies when a
// queue gets an item (its VM). It is safe for concurrent use.
type State[T any] struct {
	mu        sync.Mutex
	cas       uint32
	data      map[string]map[string]*sharedEntry // vm_id -> key -> entry
	queues    map[queueKey]*queue[T]
	byToken   map[uint32]*queue[T]
	nextToken uint32
	users     map[string]int // live users (Hosts) per vm_id
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

type queueKey struct{ vmID, name string }

type queue[T any] struct {
	key    queueKey
	token  uint32
	items  [][]byte
	target Registrant[T] // the last registrant
}

// Registrant is who registered a queue last, and so is notified of its items: the target,
// its generation (a VM replaced after a failure is a new generation) and its root context.
type Registrant[T any] struct {
	Target T
	Gen    uint64
	Root   uint32
}

// New returns an empty State.
func New[T any]() *State[T] {
	return &State[T]{data: map[string]map[string]*sharedEntry{}, queues: map[queueKey]*queue[T]{},
		byToken: map[uint32]*queue[T]{}, users: map[string]int{}}
}

// nextCAS is cpp-host's nextCas: one counter for the process, never 0.
func (p *State[T]) nextCAS() uint32 {
	p.cas++
	if p.cas == 0 {
		p.cas = 1
	}
	return p.cas
}

// Get returns a copy of the value under key in vmID's namespace and its CAS.
func (p *State[T]) Get(vmID, key string) ([]byte, uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.data[vmID][key]
	if e == nil {
		return nil, 0, false
	}
	return append([]byte(nil), e.value...), e.cas, true
}

// Set applies Envoy's rules: cas 0 is unconditional; a non-zero cas must match an existing
// entry's; a non-zero cas on a missing key succeeds. The value is copied.
func (p *State[T]) Set(vmID string, key string, value []byte, cas uint32) abi.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.data[vmID]
	if m == nil {
		m = map[string]*sharedEntry{}
		p.data[vmID] = m
	}
	e := m[key]
	if e != nil && cas != 0 && cas != e.cas {
		return abi.StatusCasMismatch
	}
	v := append([]byte(nil), value...)
	if e == nil {
		m[key] = &sharedEntry{value: v, cas: p.nextCAS()}
		return abi.StatusOK
	}
	e.value, e.cas = v, p.nextCAS()
	return abi.StatusOK
}

// Keys lists the keys in vmID's namespace, sorted.
func (p *State[T]) Keys(vmID string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.data[vmID]))
	for k := range p.data[vmID] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Register is registerQueue: the first registration allocates the token; later ones keep
// the items and move the notification target to the caller.
func (p *State[T]) Register(vmID, name string, r Registrant[T]) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := queueKey{vmID, name}
	q := p.queues[k]
	if q == nil {
		p.nextToken++
		if p.nextToken == 0 {
			p.nextToken = 1
		}
		q = &queue[T]{key: k, token: p.nextToken}
		p.queues[k] = q
		p.byToken[q.token] = q
	}
	q.target = r
	return q.token
}

// Resolve finds a queue by vm_id and name, with its registrant: the caller decides whether
// a registrant that has gone (a failed VM) still counts.
func (p *State[T]) Resolve(vmID, name string) (token uint32, r Registrant[T], found bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queues[queueKey{vmID, name}]
	if q == nil {
		return 0, r, false
	}
	return q.token, q.target, true
}

// Enqueue appends a copy of value and returns whom to notify.
func (p *State[T]) Enqueue(token uint32, value []byte) (Registrant[T], abi.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.byToken[token]
	if q == nil {
		return Registrant[T]{}, abi.StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), value...))
	return q.target, abi.StatusOK
}

// Dequeue takes the oldest item: NotFound for an unknown token, Empty for an empty queue.
func (p *State[T]) Dequeue(token uint32) ([]byte, abi.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.byToken[token]
	if q == nil {
		return nil, abi.StatusNotFound
	}
	if len(q.items) == 0 {
		return nil, abi.StatusEmpty
	}
	v := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return v, abi.StatusOK
}

// QueueSize returns the number of items in the queue with the given token.
func (p *State[T]) QueueSize(token uint32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.byToken[token]; q != nil {
		return len(q.items)
	}
	return 0
}

// Acquire counts a user of vmID's namespace.
func (p *State[T]) Acquire(vmID string) {
	p.mu.Lock()
	p.users[vmID]++
	p.mu.Unlock()
}

// Release drops vmID's data and queues when its last user goes, as cpp-host's VmIdHandle
// does (src/vm_id_handle.cc).
func (p *State[T]) Release(vmID string) {
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

// QueueCount returns the number of registered queues.
func (p *State[T]) QueueCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queues)
}
