package admission

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Heartbeats (the package doc, "A VM that dies"). Every worker VM has a Node: its id in
// shared data, written into the leases it takes, and its entry in the VM directory, which
// it refreshes every HeartbeatEvery. A lease, a waiting count or a published line whose
// owner's entry is older than OwnerTTL (or gone: the directory drops such entries) belongs
// to a VM that died without its on_done — a trap under FAIL_RELOAD — and is free.
const (
	// HeartbeatEvery is how often a VM refreshes its directory entry. The filter writes it
	// from its tick (idle tick 1 s), so a live VM's entry is at most about 3 s old, 4 s
	// after a lost CAS retried at the next tick.
	HeartbeatEvery = 2 * time.Second
	// OwnerTTL is how old an owner's heartbeat may be before its slots are free: three
	// heartbeat periods, well above the 4 s a live VM can lag.
	OwnerTTL = 3 * HeartbeatEvery
	// maxPeers bounds the directory: Envoy runs one worker VM per core, plus the main VM.
	maxPeers = 256
)

// Peer is one VM in the directory.
type Peer struct {
	ID     uint64
	SeenMs int64 // its last heartbeat (Unix ms)
}

// Node is one VM's identity and its view of the directory. It is shared by the Admitters of
// the VM's plugins (an ECDS update starts a new plugin on the same VM) and, like them, used
// by one callback at a time.
type Node struct {
	store      state.Store
	id         uint64
	registered bool   // the directory has held this node: its leases carry its id
	lanes      uint64 // Admitters made on it
	laneSeed   uint64
	lastBeatMs int64 // 0: never

	// view is the directory as of viewCAS (the last read or write).
	view    []Peer
	viewCAS uint32
	viewOK  bool
	nowMs   int64 // the time alive and dead judge by
	buf     []byte
	next    []Peer

	// Bound once, so passing them allocates nothing.
	aliveFn, deadFn func(owner uint64) bool
	beatFn          state.UpdateFunc
}

// NewNode returns the node of a VM with the given id (random, never reused: the filter's VM
// id, which also names its wake queue). An id of 0 makes an anonymous node: it never
// heartbeats and the leases it takes only expire by time, as a test's Admitter needs.
func NewNode(store state.Store, id uint64) *Node {
	n := &Node{store: store, id: id, laneSeed: id}
	if id == 0 {
		n.laneSeed = randomID()
	}
	n.aliveFn, n.deadFn, n.beatFn = n.alive, n.dead, n.beat
	return n
}

// randomID returns a random non-zero id.
func randomID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("admission: random id: %v", err)) // crypto/rand does not fail (Go 1.24+)
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// ID returns the node's id.
func (n *Node) ID() uint64 { return n.id }

// Jitter is the node's random offset for spreading retries across VMs.
func (n *Node) Jitter() uint64 { return n.laneSeed }

// newLane returns a lane id for a new Admitter on the node.
func (n *Node) newLane() uint64 {
	n.lanes++
	return n.laneSeed + n.lanes
}

// owner is the id a new lease carries: the node's once the directory holds it, else 0 (so
// a VM whose first heartbeat failed is never taken for dead).
func (n *Node) owner() uint64 {
	if n.registered {
		return n.id
	}
	return 0
}

// HeartbeatDue reports whether the node's entry needs refreshing at nowMs.
func (n *Node) HeartbeatDue(nowMs int64) bool {
	return n.id != 0 && (n.lastBeatMs == 0 || nowMs-n.lastBeatMs >= HeartbeatEvery.Milliseconds())
}

// Heartbeat enters (or refreshes) the node in the directory, dropping entries older than
// OwnerTTL, and keeps the result as its view. A lost CAS is the caller's to retry at its
// next tick (HeartbeatDue stays true).
func (n *Node) Heartbeat(nowMs int64) error {
	if n.id == 0 {
		return nil
	}
	n.nowMs = nowMs
	if _, err := state.Update(n.store, DirectoryKey, n.beatFn); err != nil {
		return fmt.Errorf("admission: VM directory: %w", err)
	}
	n.lastBeatMs, n.registered = nowMs, true
	n.view = append(n.view[:0], n.next...)
	n.viewOK, n.viewCAS = true, 0 // the write's CAS is unknown: the next Refresh reads
	return nil
}

func (n *Node) beat(cur []byte, found bool) ([]byte, state.Mutation, error) {
	n.next = decodeDirectory(cur, found, n.next[:0])
	kept := n.next[:0]
	for _, p := range n.next {
		if p.ID != n.id && n.nowMs-p.SeenMs <= OwnerTTL.Milliseconds() {
			kept = append(kept, p)
		}
	}
	if len(kept) >= maxPeers {
		kept = append(kept[:0], kept[len(kept)-maxPeers+1:]...)
	}
	n.next = append(kept, Peer{ID: n.id, SeenMs: n.nowMs})
	e := state.NewEncoder(n.buf, dirKind, dirV).Uint(uint64(len(n.next)))
	for _, p := range n.next {
		e.Uint(p.ID).Int(p.SeenMs)
	}
	n.buf = e.Bytes()
	return n.buf, state.Write, nil
}

// Refresh reads the directory into the node's view (decoding it only when its CAS moved)
// and reports whether the view changed.
func (n *Node) Refresh() (changed bool, err error) {
	v, cas, found, err := n.store.Get(DirectoryKey)
	if err != nil {
		return false, fmt.Errorf("admission: VM directory: %w", err)
	}
	if n.viewOK && cas == n.viewCAS && cas != 0 {
		return false, nil
	}
	n.view = decodeDirectory(v, found, n.view[:0])
	n.viewOK, n.viewCAS = true, cas
	return true, nil
}

// Peers returns the directory as of the last Refresh or Heartbeat, stale entries included
// (LivePeer says which are live). The slice is the node's; it changes with the next call.
func (n *Node) Peers() []Peer { return n.view }

// LivePeer reports whether p's heartbeat is recent at nowMs.
func LivePeer(p Peer, nowMs int64) bool { return nowMs-p.SeenMs <= OwnerTTL.Milliseconds() }

// alive reports whether the view vouches for owner at n.nowMs: the anonymous owner 0, this
// node, and every VM whose heartbeat is within OwnerTTL.
func (n *Node) alive(owner uint64) bool {
	if owner == 0 || owner == n.id {
		return true
	}
	for _, p := range n.view {
		if p.ID == owner {
			return LivePeer(p, n.nowMs)
		}
	}
	return false
}

// dead is !alive, for the prune helpers.
func (n *Node) dead(owner uint64) bool { return !n.alive(owner) }

// decodeDirectory appends the directory's entries to out; a corrupt directory reads as empty
// (every live VM re-enters it within a heartbeat).
func decodeDirectory(b []byte, found bool, out []Peer) []Peer {
	if !found {
		return out
	}
	d := state.NewDecoder(b, dirKind, dirV)
	k := d.Uint()
	if k > maxPeers {
		return out
	}
	start := len(out)
	for i := uint64(0); i < k && !d.Failed(); i++ {
		out = append(out, Peer{ID: d.Uint(), SeenMs: d.Int()})
	}
	if d.Err() != nil {
		return out[:start]
	}
	return out
}
