package filter

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Cross-worker wake-ups and heartbeats. A shared queue notifies only its last registrant
// (proxy-wasm-cpp-host src/shared_queue.cc, SharedQueue::registerQueue: a second
// registration of a name keeps the queue and its items and moves the notification to the
// caller's context), and ABI 0.2 has no call to unregister one. So each VM registers ONE
// queue, named after its random id, and registers the same name again from every plugin
// start (an ECDS update starts a new plugin context on the same VM): the queue count stays
// one per VM and its wake-ups reach the newest plugin, which serves every plugin of the VM.
//
// The VM's admission.Node keeps it in the VM directory (its heartbeat, written from the
// tick every admission.HeartbeatEvery), which is also where a VM that frees a slot finds
// the others' queues. A wake-up names the gate (admission.Wake, 8 bytes: the gate's id, 0
// for every gate); a VM polls the heads of its lines for that gate only, and a VM without
// waiters for it does nothing. Ticks are the safety net: a lost wake-up delays a waiting
// request to the next busy tick.
var wakeQueuePrefix = state.KeyWakeQueue.Prefix()

// peers is one VM's wake-up targets: the queues of the live VMs as of the directory's last
// read.
type peers struct {
	known   bool
	targets []uint32
	// lowest: this VM had the lowest id of the live VMs at its last heartbeat, which makes
	// it the one that publishes the gauges (publishesGauges).
	lowest bool
	msg    [8]byte
}

// startNode gives the VM its id and node on its first plugin start (later starts keep them:
// the VM's leases and queue outlive its plugins).
func (v *vmContext) startNode() error {
	if v.node != nil {
		return nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("VM id: %w", err)
	}
	id := binary.BigEndian.Uint64(b[:]) | 1 // never the anonymous 0
	v.vmID = fmt.Sprintf("%016x", id)
	v.node = admission.NewNode(&v.store, id)
	return nil
}

// registerWakeQueue (re)registers the VM's one wake queue, so its notifications reach the
// plugin starting now, and enters the VM in the directory.
func (v *vmContext) registerWakeQueue(p *pluginContext) error {
	if v.node == nil {
		return fmt.Errorf("wake queue: the VM has no id")
	}
	qid, err := proxywasm.RegisterSharedQueue(wakeQueuePrefix + v.vmID)
	if err != nil {
		return fmt.Errorf("wake queue: register: %w", err)
	}
	v.wakeQID, v.queueRoot = qid, p
	v.heartbeat(p)
	return nil
}

// publishesGauges reports whether this VM publishes the gauges: the live VM with the lowest
// id does (a directory entry outlives a stopped VM by up to admission.OwnerTTL, so after a
// start or a VM's end the gauges may pause that long), and a VM without a directory entry
// publishes its own.
func (v *vmContext) publishesGauges() bool { return v.wakeQID == 0 || v.peers.lowest }

// heartbeat refreshes the VM's directory entry when it is due; a lost CAS is retried at the
// next tick.
func (v *vmContext) heartbeat(p *pluginContext) {
	nowMs := p.clock().UnixMilli()
	if v.node == nil || v.wakeQID == 0 || !v.node.HeartbeatDue(nowMs) {
		return
	}
	if err := v.node.Heartbeat(nowMs); err != nil {
		proxywasm.LogWarnf("spillway: %v", err)
		return
	}
	lowest := true
	for _, e := range v.node.Peers() {
		lowest = lowest && (e.ID >= v.node.ID() || !admission.LivePeer(e, nowMs))
	}
	v.peers.lowest = lowest
}

// wake enqueues w's gate on every live VM's queue, this one's included (the stream that
// freed the slot is in a callback; the waiting ones resume in proxy_on_queue_ready). The
// directory is decoded, and its queues resolved, only when it changed since the last
// wake-up: a busy queue wakes at the cost of one read and the enqueues.
func (v *vmContext) wake(p *pluginContext, w admission.Wake) {
	if !w.Any() || v.node == nil {
		return
	}
	changed, err := v.node.Refresh()
	if err != nil {
		proxywasm.LogWarnf("spillway: %v", err)
		return
	}
	ps := &v.peers
	if changed || !ps.known {
		ps.known = true
		ps.targets = ps.targets[:0]
		nowMs := p.clock().UnixMilli()
		for _, e := range v.node.Peers() {
			if !admission.LivePeer(e, nowMs) {
				continue
			}
			token := v.wakeQID
			if e.ID != v.node.ID() {
				if token, err = proxywasm.ResolveSharedQueue("", fmt.Sprintf("%s%016x", wakeQueuePrefix, e.ID)); err != nil {
					continue // gone meanwhile
				}
			}
			if token != 0 {
				ps.targets = append(ps.targets, token)
			}
		}
	}
	binary.LittleEndian.PutUint64(ps.msg[:], w.Gate())
	for _, token := range ps.targets {
		if err := proxywasm.EnqueueSharedQueue(token, ps.msg[:]); err != nil {
			ps.known = false // a queue went away: resolve again next time
		}
	}
	p.metrics.wakeups.Increment(1)
}

// maxWakeGates is how many distinct gates one drain of the wake queue polls one by one;
// more wake every gate.
const maxWakeGates = 8

// wakeGates drains the VM's wake queue and returns the gates it named (all: every gate).
func wakeGates(queueID uint32, gates *[maxWakeGates]uint64) (n int, all bool) {
	for range 1 << 16 { // bounded: a queue others fill while this drains cannot hold the VM
		msg, err := proxywasm.DequeueSharedQueue(queueID)
		if err != nil {
			break // Empty (or gone): drained
		}
		if len(msg) != 8 {
			all = true // not a gate id (an older VM's one-byte wake-up): wake every gate
			continue
		}
		g := binary.LittleEndian.Uint64(msg)
		if g == 0 {
			all = true
			continue
		}
		seen := false
		for _, x := range gates[:n] {
			seen = seen || x == g
		}
		switch {
		case seen:
		case n < maxWakeGates:
			gates[n] = g
			n++
		default:
			all = true
		}
	}
	return n, all
}
