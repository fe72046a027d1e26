package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Cross-worker wake-ups. A shared queue notifies only its last registrant
// (proxy-wasm-cpp-host shared_queue.cc, registerQueue), so every VM registers a queue of
// its own, named after a random id, and keeps that id in a directory in shared data. A VM
// that frees a slot others wait for enqueues one byte on every live VM's queue; each wakes
// in proxy_on_queue_ready and retries its queued streams. Ticks are the safety net: a lost
// wake-up only delays a queued request until the next tick.
const (
	wakeQueuePrefix = state.KeyPrefix + "wake:"
	vmDirectoryKey  = state.KeyPrefix + "vms"
	// heartbeatEvery is how often a VM refreshes its directory entry; an entry older than
	// peerTTL is dropped (a VM that stopped: the canary, a reloaded or destroyed VM), so
	// nothing is enqueued on a queue nobody drains for long.
	heartbeatEvery = 2 * time.Second
	peerTTL        = 3 * heartbeatEvery
	// maxPeers bounds the directory: Envoy runs one worker VM per core, plus the main VM.
	maxPeers = 256
)

const directoryVersion = 1

// peers is one VM's view of the directory and the queue tokens it resolved.
type peers struct {
	lastBeat time.Time
	buf      []byte
	// The wake queues of the live VMs as of the directory with CAS cas.
	known   bool
	cas     uint32
	targets []uint32
	// lowest: this VM had the lowest id of the live VMs at its last heartbeat, which makes
	// it the one that publishes the gauges (publishesGauges).
	lowest bool
}

// publishesGauges reports whether this VM publishes the gauges: the live VM with the lowest
// id does (a directory entry outlives a stopped VM by up to peerTTL, so after a start or a
// VM's end the gauges may pause that long), and a VM without a directory entry publishes
// its own.
func (ps *peers) publishesGauges(p *pluginContext) bool { return p.vmID == "" || ps.lowest }

type peerEntry struct {
	id     string
	seenMs int64
}

func decodeDirectory(b []byte, found bool) []peerEntry {
	if !found {
		return nil
	}
	d := state.NewDecoder(b, state.KindVMDirectory, directoryVersion)
	n := d.Uint()
	if n > maxPeers {
		return nil
	}
	out := make([]peerEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		out = append(out, peerEntry{id: d.String(), seenMs: d.Int()})
	}
	if d.Err() != nil {
		return nil // a corrupt directory reads as empty; every VM re-enters within a heartbeat
	}
	return out
}

func (ps *peers) encode(entries []peerEntry) []byte {
	e := state.NewEncoder(ps.buf, state.KindVMDirectory, directoryVersion).Uint(uint64(len(entries)))
	for _, p := range entries {
		e.String(p.id).Int(p.seenMs)
	}
	ps.buf = e.Bytes()
	return ps.buf
}

// heartbeat enters (or refreshes) this VM in the directory at most every heartbeatEvery,
// dropping entries past peerTTL.
func (ps *peers) heartbeat(p *pluginContext) {
	if p.vmID == "" || (!ps.lastBeat.IsZero() && p.clock().Sub(ps.lastBeat) < heartbeatEvery) {
		return
	}
	ps.lastBeat = p.clock()
	nowMs := p.clock().UnixMilli()
	lowest := false
	_, err := state.Update(&p.store, vmDirectoryKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		entries := decodeDirectory(cur, found)
		kept := entries[:0]
		for _, e := range entries {
			if e.id != p.vmID && nowMs-e.seenMs <= peerTTL.Milliseconds() {
				kept = append(kept, e)
			}
		}
		if len(kept) >= maxPeers {
			kept = kept[len(kept)-maxPeers+1:]
		}
		kept = append(kept, peerEntry{id: p.vmID, seenMs: nowMs})
		lowest = true
		for _, e := range kept {
			lowest = lowest && e.id >= p.vmID
		}
		return ps.encode(kept), state.Write, nil
	})
	if err != nil {
		proxywasm.LogWarnf("spillway: VM directory: %v", err)
		return
	}
	ps.lowest = lowest
}

// wakeAll enqueues a wake-up on every live VM's queue, this one's included (the stream
// that freed the slot is in a callback; the queued ones resume in proxy_on_queue_ready).
// The directory is decoded, and its queues resolved, only when it changed since the last
// wake-up (its CAS says so): a busy queue wakes at the cost of one read and the enqueues.
func (ps *peers) wakeAll(p *pluginContext) {
	v, cas, found, err := p.store.Get(vmDirectoryKey)
	if err != nil {
		proxywasm.LogWarnf("spillway: VM directory: %v", err)
		return
	}
	if !ps.known || cas != ps.cas {
		ps.known, ps.cas = true, cas
		ps.targets = ps.targets[:0]
		nowMs := p.clock().UnixMilli()
		for _, e := range decodeDirectory(v, found) {
			if nowMs-e.seenMs > peerTTL.Milliseconds() {
				continue
			}
			token := p.wakeQID
			if e.id != p.vmID {
				if token, err = proxywasm.ResolveSharedQueue("", wakeQueuePrefix+e.id); err != nil {
					continue // gone meanwhile
				}
			}
			ps.targets = append(ps.targets, token)
		}
	}
	for _, token := range ps.targets {
		if err := proxywasm.EnqueueSharedQueue(token, wakeMessage[:]); err != nil {
			ps.known = false // a queue went away: resolve again next time
		}
	}
	p.metrics.wakeups.Increment(1)
}

var wakeMessage = [1]byte{1}
