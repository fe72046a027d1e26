// Package admission caps requests in flight per connection and per model across Envoy
// workers with expiring leases in shared data, and runs the request queue: depth, FIFO
// order across workers, wait budget, execution limit (guide §4 and §5).
//
// # Gates and refusals
//
// A request takes its slots through a compound gate, global → provider → connection →
// model, all or nothing; the stricter applicable cap wins. The connection and model caps
// live in one lease record per upstream account (GateConfig.Account), so both are taken in
// one CAS. Every policy on the account shares that record: a gate grants a slot only while
// the leases in it, whichever policy holds them, are fewer than its own cap (and the
// model's leases fewer than its own model cap); waiting counts carry their policy's
// namespace, so each policy's queue depth and FIFO order count its own waiters only. The optional
// global and provider caps live in pool records of their own, taken first and handed back
// if a later gate refuses. Every slot is a lease with a deadline (acquire time +
// executionMaxWait, renewed while its stream runs) and an owner (the VM that took it).
//
// A request that cannot get a slot waits with a Ticket. What a request whose wait ends gets
// depends on the cap that keeps it waiting:
//
//   - the connection's cap (maxConcurrent), the request queue of guide §5: 429
//     RATE_LIMIT_QUEUE_FULL when maxQueueDepth requests already wait, 429
//     RATE_LIMIT_QUEUE_TIMEOUT once it has waited maxWaitMs;
//   - only its model's cap (modelConcurrency: the connection has room), the per-model gate
//     of guide §4: 429 SEMAPHORE_QUEUE_FULL and 429 SEMAPHORE_TIMEOUT in the same places;
//   - the connection's cap with GateConfig.QuotaShareFailOpen
//     (resilience.quotaShareConcurrencyLimit.enabled, guide §4 "Serialisatie van
//     quota-share-requests"): fail-open, the request is granted without a slot
//     (Result.FailedOpen, an empty Lease) instead of either RATE_LIMIT_QUEUE_* code. The
//     per-model gate never fails open.
//
// A lease past executionMaxWaitMs is answered 504 RATE_LIMIT_EXECUTION_TIMEOUT.
//
// # Queues: only the head of a line polls
//
// A waiting request lives in its VM's memory, in the line of its Admitter for its gate and
// upstream model (lines.go): a FIFO in enqueue order, whose first waiter is its head. The
// slot goes to the oldest waiting ticket that fits, across workers (the guide's FIFO
// admission), and within one line that is always the head: every waiter behind it is
// younger and wants the same caps. So only heads poll (Heads): a VM with 10,000 waiters
// on one connection and model asks shared data once per tick, and when its head is granted
// the next waiter becomes the head and is asked at once. Across lines and VMs the order is
// a total one: the number the lease record handed a ticket in the CAS that queued it, then
// its lane (record.go); a ticket blocked only by its own model's cap does not hold back
// younger tickets for other models.
//
// To judge a head's turn a VM must know the tickets ahead of it on other VMs. Each lane
// (Admitter) publishes, per line, its first waiters in the connection's ticket record, as
// many as the line's cap (the connection's, or the model's if stricter: Gate.window), since
// no more of a line's tickets can be granted before any later ticket; a lane whose last
// waiter left has no waiting count, and readers skip its lines. The record's size is bounded by
// lanes × lines × caps, whatever the queue depth, and a poll reads it and the lease record
// (two Gets) and decodes only what changed since its last read. The lease record keeps,
// per lane, how many requests wait and until when, updated in the same CAS that grants or
// queues: a newcomer on a connection nobody waits for reads the lease record alone, so the
// success path (admit and release) costs one Get and one Set each, as when the queue lived
// in the lease record; a release does not touch the tickets. The depth check counts those
// waiting counts, across workers, in the CAS that queues. A ticket published a moment after
// its waiting count (two records, no transaction) may be passed by a newcomer on another VM
// in that moment; caps are never exceeded, since every grant is a CAS on the lease record.
//
// A release reports a Wake naming its gate (every gate, for a global or provider slot):
// the filter sends it to every VM, and a VM without a line for that gate does nothing.
//
// The depth a policy gets by default is bounded, where the guide's is not
// (policies.DefaultMaxQueueDepth says why); QueueConfig.MaxQueueDepth 0 is unbounded.
//
// # A VM that dies
//
// A VM that traps under FAIL_RELOAD gets no on_done: its streams' slots are never
// released. Renewing every lease every tick would cost a write per stream per tick;
// instead each VM's Node writes one heartbeat, its directory entry, every HeartbeatEvery
// (node.go), and a lease, waiting count or published line whose owner's heartbeat is older
// than OwnerTTL (6 s) is free. The directory is read only where it matters: when a request
// finds its cap full and the record holds entries of owners the node's view does not vouch
// for — never on an admission that finds room. A stalled VM's slots thus come back within
// OwnerTTL of its last heartbeat plus one poll; executionMaxWait stays the separate 504
// deadline of a request that runs too long.
//
// # When shared data fails
//
// A store error (contention past state.MaxCASAttempts, a host failure) is returned wrapped
// by Admit and TryAdmit; the glue keeps the request paused and retries on a later tick
// (StoreRetry, retry.go), and fails open — the request goes without a slot — once the error
// persisted MaxStoreRetries times: the design's rule that a failure of Spillway's own state
// never becomes the client's error. Releases, cancellations and ticket publications that
// fail are retried by Retry on later ticks, and given up after MaxStoreRetries (the slot
// then comes back when its lease expires); StoreStats counts both.
package admission

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// maxQueued bounds a decoded waiting count.
const maxQueued = 1 << 30

// maxPending bounds the operations kept for a later Retry.
const maxPending = 1024

// Lease is a held set of slots. The zero Lease (and the lease of a request no cap applies
// to) holds nothing; releasing it is a no-op.
type Lease struct {
	gate       *Gate
	id         uint64 // lease id in the lease record (0 = holds nothing)
	providerID uint64 // lease id in the provider record (0 = none)
	globalID   uint64 // lease id in the global record (0 = none)
	model      uint64 // the model's hash, to put a pruned lease back on renewal
	// Acquired is when the slots were granted.
	Acquired time.Time
	// Deadline is Acquired + executionMaxWait: past it the lease is pruned and the request
	// should be answered with RATE_LIMIT_EXECUTION_TIMEOUT.
	Deadline time.Time
}

// Held reports whether the lease holds slots.
func (l Lease) Held() bool { return l.id != 0 }

// Ticket is a queued request's place in its Admitter's line.
type Ticket struct {
	gate     *Gate
	line     *line
	seq      uint64
	model    uint64
	modelCap int
	// Enqueued is when the request joined the queue.
	Enqueued time.Time
	// Deadline is Enqueued + maxWait: the end of the request's queue wait budget.
	Deadline time.Time
	// ModelBound: when last checked, only the model's cap kept the request waiting (the
	// connection had room): its refusals are the per-model gate's SEMAPHORE_* codes, not
	// the request queue's RATE_LIMIT_* ones.
	ModelBound bool
}

// Remaining is the ticket's queue wait budget left at now (0 once spent).
func (t Ticket) Remaining(now time.Time) time.Duration { return max(t.Deadline.Sub(now), 0) }

// Wake says whom a freed slot may let in: nobody (the zero Wake), the waiters of one gate,
// or every waiter (a global or provider slot, which any gate's waiters may want).
type Wake struct {
	gate uint64
	all  bool
}

// Any reports whether someone may be waiting.
func (w Wake) Any() bool { return w.all || w.gate != 0 }

// Gate is the ID of the gate to wake, or 0 for every gate.
func (w Wake) Gate() uint64 {
	if w.all {
		return 0
	}
	return w.gate
}

// Or is both wakes: one gate when both name the same, else every gate.
func (w Wake) Or(o Wake) Wake {
	switch {
	case !o.Any():
		return w
	case !w.Any():
		return o
	case w.all || o.all || w.gate != o.gate:
		return Wake{all: true}
	}
	return w
}

// WakeAll wakes every gate's waiters.
func WakeAll() Wake { return Wake{all: true} }

func wakeGate(g *Gate) Wake { return Wake{gate: g.id} }

// Result is the outcome of Admit or TryAdmit.
type Result struct {
	// Granted: the request holds Lease and may be dispatched. Otherwise it holds Ticket
	// and waits.
	Granted bool
	Lease   Lease
	Ticket  Ticket
	// Wake: slots were handed back on the way (an all-or-nothing acquire rolled back), so
	// the glue should wake waiters as after Release.
	Wake Wake
	// FailedOpen: granted without a slot, because the gate fails open
	// (GateConfig.QuotaShareFailOpen) and the request's wait for a connection slot ended.
	// Lease holds nothing.
	FailedOpen bool
}

// Usage is a gate's current load, for the admin API and stats.
type Usage struct {
	InFlight      int // live leases on the connection
	ModelInFlight int // of which for the model asked about
	Queued        int // requests waiting, across workers
}

// Admitter runs admission against a store for one engine (one plugin) on one VM. It keeps
// its lines and scratch memory, so it is not safe for concurrent use: Envoy runs one
// callback at a time per worker.
type Admitter struct {
	store state.Store
	clock state.Clock
	node  *Node
	lane  uint64
	seq   uint64
	lines []*line

	lr     leaseRecord
	lRaw   []byte // the bytes lr was decoded from (or written as)
	lValid bool   // lr is still what lRaw decodes to
	tr     ticketRecord
	tRaw   []byte // the bytes tr was decoded from
	tValid bool
	pub    ticketRecord // publishing: the record as read
	out    ticketRecord // publishing: the record to write
	pool   poolRecord
	use    []modelUse
	ahead  []waiting
	buf    []byte
	tbuf   []byte
	op     operation

	corrupt uint64
	stats   StoreStats
	pending []pendingOp

	// Bound once, so passing them to state.Update does not allocate a closure per call.
	leaseFn, publishFn, poolAcquireFn, poolReleaseFn, poolRenewFn state.UpdateFunc
}

type opKind uint8

const (
	opAdmit opKind = iota
	opPoll
	opRelease
	opSync // set this lane's waiting count to its lines (after a cancel or a timeout)
	opRenew
)

type outcome uint8

const (
	outNone outcome = iota
	outGranted
	outQueued
	outFull
)

// need is what an update found it must read before it can decide.
type need uint8

const (
	needNothing  need = iota
	needTickets       // other lanes wait: their published tickets decide the turn
	needLiveness      // the cap is full and owners the view does not vouch for hold entries
)

// operation carries one update's inputs and results: state.Update may run the update
// function several times, and each run overwrites the results.
type operation struct {
	kind        opKind
	gate        *Gate
	nowMs       int64
	model       uint64
	modelCap    int
	upperHeld   bool    // the global and provider slots are held (or none apply)
	peek        bool    // opAdmit/opPoll: decide only, write nothing
	head        waiting // opPoll: the polling ticket
	haveTickets bool    // a.tr holds the gate's ticket record
	fresh       bool    // the node's view was read during this operation
	id          uint64  // release/renew: lease id; pool ops: lease id to release
	capacity    int     // pool ops: the pool's cap
	contendTill int64   // pool acquire: mark the pool contended until then on refusal
	// results
	need       need
	out        outcome
	gotID      uint64
	waiters    bool
	modelBound bool // not granted: only the model's cap refused
	queued     int  // refused as full: the requests waiting
	others     int  // opAdmit/opPoll: requests other lanes hold waiting
}

// pendingOp is a release, a waiting-count sync or a publication to retry.
type pendingOp struct {
	kind     opKind // opRelease, opSync (which also republishes)
	lease    Lease
	gate     *Gate
	failures int
	atMs     int64
}

// New returns an Admitter over store and clock on an anonymous node (its leases expire by
// time only; see NewNode).
func New(store state.Store, clock state.Clock) *Admitter {
	return NewOn(NewNode(store, 0), store, clock)
}

// NewOn returns an Admitter over store and clock on the VM's node.
func NewOn(node *Node, store state.Store, clock state.Clock) *Admitter {
	a := &Admitter{store: store, clock: clock, node: node, lane: node.newLane()}
	a.leaseFn = a.leaseUpdate
	a.publishFn = a.publishUpdate
	a.poolAcquireFn = a.poolAcquire
	a.poolReleaseFn = a.poolRelease
	a.poolRenewFn = a.poolRenew
	return a
}

// CorruptRecords counts records that failed to decode and were treated as absent.
func (a *Admitter) CorruptRecords() uint64 { return a.corrupt }

// StoreStats returns the store errors the Admitter handled on its own so far.
func (a *Admitter) StoreStats() StoreStats { return a.stats }

// Admit asks for a slot for a new request for model on g. It returns a granted Lease, or a
// Ticket when the request must wait (in the Admitter's line for g and model), or an *Error
// matching ErrQueueFull (naming the limit, the model and the real queue length) when
// maxQueueDepth requests already wait. A request no cap applies to gets an empty lease
// without touching shared data. A newcomer never overtakes an older waiting ticket that
// fits.
func (a *Admitter) Admit(g *Gate, model string) (Result, error) {
	hash, modelCap := g.modelLimit(model)
	if !g.limited(modelCap) {
		return Result{Granted: true, Lease: Lease{gate: g}}, nil
	}
	now := a.clock.Now()
	nowMs := now.UnixMilli()
	a.op = operation{kind: opAdmit, gate: g, nowMs: nowMs, model: hash, modelCap: modelCap}
	upper := upperSlots{held: true}
	if g.hasUpper() {
		a.op.peek = true
		if err := a.updateLease(g); err != nil {
			return Result{}, fmt.Errorf("admission: admit on %s: %w", g, err)
		}
		upper.held = false
		if a.op.out == outGranted {
			keep := a.op
			var err error
			if upper, err = a.acquireUpper(g, nowMs, nowMs+g.maxWaitMs); err != nil {
				return Result{}, err
			}
			a.op = keep
		}
		a.op.peek, a.op.upperHeld = false, upper.held
	} else {
		a.op.upperHeld = true
	}
	if err := a.updateLease(g); err != nil {
		a.releaseUpper(g, nowMs, upper)
		return Result{}, fmt.Errorf("admission: admit on %s: %w", g, err)
	}
	out, id, modelBound, queued := a.op.out, a.op.gotID, a.op.modelBound, a.op.queued // releaseUpper reuses a.op
	res := Result{Wake: upper.wake}
	if out == outGranted {
		res.Granted = true
		res.Lease = a.lease(g, now, id, hash, upper)
		return res, nil
	}
	res.Wake = res.Wake.Or(a.releaseUpper(g, nowMs, upper))
	if out == outFull {
		switch {
		case modelBound:
			return res, semaphoreQueueFull(g, model, queued)
		case g.failOpen:
			res.Granted, res.Lease, res.FailedOpen = true, Lease{gate: g}, true
			return res, nil
		}
		return res, queueFull(g, model, queued)
	}
	// Queued: the lease record counts the request already; it joins its line, and the
	// ticket record if it is among the line's first Window.
	ln := a.lineFor(g, hash, modelCap)
	a.seq++
	w := waiter{seq: a.seq, order: id, enqMs: nowMs, deadlineMs: nowMs + g.maxWaitMs, modelBound: modelBound}
	ln.push(w)
	if ln.inWindow(len(ln.q) - 1) {
		a.publishOrDefer(g, nowMs)
	}
	res.Ticket = ln.ticket(&ln.q[len(ln.q)-1])
	res.Ticket.Enqueued = now
	return res, nil
}

// TryAdmit checks whether it is t's turn and a slot is free, and if so moves t from the
// queue to a lease. Otherwise the request keeps waiting (Granted false, same Ticket), or,
// once its wait budget is spent, gets ErrQueueTimeout (ErrSemaphoreTimeout when only its
// model's cap held it back; granted without a slot with QuotaShareFailOpen) and leaves the
// queue. A ticket behind a live head of its line waits without a shared-data read.
func (a *Admitter) TryAdmit(t Ticket) (Result, error) {
	g, ln := t.gate, t.line
	if !a.holds(t) {
		return Result{}, ErrNotWaiting
	}
	i := ln.find(t.seq)
	if i < 0 {
		return Result{Ticket: t}, ErrNotWaiting
	}
	now := a.clock.Now()
	nowMs := now.UnixMilli()
	w := &ln.q[i]
	if nowMs >= w.deadlineMs {
		a.leave(ln, i, nowMs)
		switch {
		case t.ModelBound:
			return Result{Ticket: t}, ErrSemaphoreTimeout
		case g.failOpen:
			return Result{Granted: true, Lease: Lease{gate: g}, FailedOpen: true}, nil
		}
		return Result{Ticket: t}, ErrQueueTimeout
	}
	if ln.front() != w {
		return Result{Ticket: t}, nil // an older waiter of the same line goes first
	}
	a.op = operation{kind: opPoll, gate: g, nowMs: nowMs, model: ln.model, modelCap: ln.modelCap,
		head: waiting{order: w.order, lane: a.lane}}
	if ln.others {
		if err := a.readTickets(g); err != nil {
			return Result{Ticket: t}, fmt.Errorf("admission: try-admit on %s: %w", g, err)
		}
		a.op.haveTickets = true
	}
	upper := upperSlots{held: true}
	if g.hasUpper() {
		a.op.peek = true
		if err := a.updateLease(g); err != nil {
			return Result{Ticket: t}, fmt.Errorf("admission: try-admit on %s: %w", g, err)
		}
		if a.op.out != outGranted {
			t.ModelBound = a.op.modelBound
			w.modelBound = t.ModelBound
			return Result{Ticket: t}, nil
		}
		keep := a.op
		var err error
		if upper, err = a.acquireUpper(g, nowMs, w.deadlineMs); err != nil {
			return Result{Ticket: t}, err
		}
		a.op = keep
		a.op.peek = false
		if !upper.held {
			return Result{Ticket: t, Wake: upper.wake}, nil
		}
	}
	a.op.upperHeld = upper.held
	if err := a.updateLease(g); err != nil {
		a.releaseUpper(g, nowMs, upper)
		return Result{Ticket: t}, fmt.Errorf("admission: try-admit on %s: %w", g, err)
	}
	res := Result{Ticket: t, Wake: upper.wake}
	res.Ticket.ModelBound = a.op.modelBound
	w.modelBound = a.op.modelBound
	ln.others = a.op.others > 0
	if out, id := a.op.out, a.op.gotID; out == outGranted {
		res.Granted = true
		res.Lease = a.lease(g, now, id, ln.model, upper)
		if ln.remove(i) && a.stillWaiting(g, nowMs) {
			a.publishOrDefer(g, nowMs)
		}
		return res, nil
	}
	res.Wake = res.Wake.Or(a.releaseUpper(g, nowMs, upper))
	if a.op.haveTickets && !a.ownPublished(g) {
		a.publishOrDefer(g, nowMs) // the ticket record lost this lane's lines: put them back
	}
	return res, nil
}

// ErrNotWaiting: TryAdmit was given a ticket that is not in its Admitter's lines (granted,
// cancelled or timed out already, another Admitter's, or a zero Ticket).
var ErrNotWaiting = errors.New("admission: the ticket is not waiting")

// Release hands back a lease's slots and reports whom to wake (the glue then wakes other
// workers). For the global and provider slots the answer may be a spare wake (a pool only
// knows until when someone waited), never a missing one. Releasing twice, or releasing a
// lease that already expired, frees nothing the second time. A release that fails is
// retried by Retry, and the error returned for the log.
func (a *Admitter) Release(l Lease) (Wake, error) {
	if !l.Held() {
		return Wake{}, nil
	}
	g := l.gate
	nowMs := a.clock.Now().UnixMilli()
	wake, err := a.release(l, nowMs)
	if err != nil {
		a.deferOp(pendingOp{kind: opRelease, lease: l, gate: g}, nowMs)
		return wake, fmt.Errorf("admission: release on %s (retried later): %w", g, err)
	}
	return wake, nil
}

func (a *Admitter) release(l Lease, nowMs int64) (Wake, error) {
	g := l.gate
	a.op = operation{kind: opRelease, gate: g, nowMs: nowMs, id: l.id}
	if _, err := state.Update(a.store, g.leaseKey, a.leaseFn); err != nil {
		return Wake{}, err
	}
	var wake Wake
	if a.op.waiters {
		wake = wakeGate(g)
	}
	if l.providerID == 0 && l.globalID == 0 {
		return wake, nil // no global or provider slot: nothing more to hand back
	}
	return wake.Or(a.releaseUpper(g, nowMs, upperSlots{held: true, providerID: l.providerID, globalID: l.globalID})), nil
}

// Cancel takes a waiting request out of the queue (its client went away, or it goes to
// another target) and reports whom to wake: the others still waiting for the gate.
func (a *Admitter) Cancel(t Ticket) (Wake, error) {
	ln := t.line
	if !a.holds(t) {
		return Wake{}, nil
	}
	i := ln.find(t.seq)
	if i < 0 {
		return Wake{}, nil
	}
	nowMs := a.clock.Now().UnixMilli()
	return a.leave(ln, i, nowMs)
}

// leave takes the waiter at i out of ln and brings the records up to date: the lane's
// waiting count, and its published tickets when the waiter was among them. A failure is
// retried by Retry.
func (a *Admitter) leave(ln *line, i int, nowMs int64) (Wake, error) {
	g := ln.gate
	published := ln.remove(i) && a.stillWaiting(g, nowMs)
	err := a.syncWaiting(g, nowMs)
	waiters := a.op.waiters
	if err == nil && published {
		err = a.publish(g, nowMs)
	}
	if err != nil {
		a.deferOp(pendingOp{kind: opSync, gate: g}, nowMs)
		return wakeGate(g), fmt.Errorf("admission: cancel on %s (retried later): %w", g, err)
	}
	if waiters {
		return wakeGate(g), nil
	}
	return Wake{}, nil
}

// stillWaiting reports whether the lane still has requests waiting for g's connection. When
// it has none, its lease-record waiting count is gone with the write that just took the
// last one out, and readers ignore its lines in the ticket record (Admitter.others): they
// need not be rewritten, and the next publication replaces them.
func (a *Admitter) stillWaiting(g *Gate, nowMs int64) bool {
	n, _ := a.localWaiting(g, nowMs)
	return n > 0
}

// syncWaiting writes the lane's waiting count for g as its lines have it.
func (a *Admitter) syncWaiting(g *Gate, nowMs int64) error {
	a.op = operation{kind: opSync, gate: g, nowMs: nowMs}
	_, err := state.Update(a.store, g.leaseKey, a.leaseFn)
	return err
}

// Renew extends a held lease to executionMaxWait from now, for a request whose stream is
// still alive: leases expire so that slots held by a worker that died come back, and a
// stream longer than executionMaxWait must not silently give its slot up (letting the cap
// be exceeded). A lease already pruned is put back: its request still runs. The global and
// provider slots are renewed too.
func (a *Admitter) Renew(l Lease) (Lease, error) {
	if !l.Held() {
		return l, nil
	}
	g := l.gate
	now := a.clock.Now()
	nowMs := now.UnixMilli()
	a.op = operation{kind: opRenew, gate: g, nowMs: nowMs, id: l.id, model: l.model}
	if _, err := state.Update(a.store, g.leaseKey, a.leaseFn); err != nil {
		return l, fmt.Errorf("admission: renew on %s: %w", g, err)
	}
	for _, s := range [...]struct {
		key string
		id  uint64
	}{{g.providerKey, l.providerID}, {g.globalKey, l.globalID}} {
		if s.id == 0 {
			continue
		}
		a.op = operation{gate: g, nowMs: nowMs, id: s.id}
		if _, err := state.Update(a.store, s.key, a.poolRenewFn); err != nil {
			return l, fmt.Errorf("admission: renew %s: %w", s.key, err)
		}
	}
	l.Deadline = time.UnixMilli(nowMs + g.executionMaxWaitMs)
	return l, nil
}

// CheckExecution returns ErrExecutionTimeout once a held lease is past its deadline
// (executionMaxWait after dispatch); the glue then answers 504 if nothing reached the client
// yet, and releases the lease either way.
func (a *Admitter) CheckExecution(l Lease) error {
	if l.Held() && !a.clock.Now().Before(l.Deadline) {
		return ErrExecutionTimeout
	}
	return nil
}

// Inspect reports g's live load and the load of model on it.
func (a *Admitter) Inspect(g *Gate, model string) (Usage, error) {
	nowMs := a.clock.Now().UnixMilli()
	cur, _, found, err := a.store.Get(g.leaseKey)
	if err != nil {
		return Usage{}, fmt.Errorf("admission: read %s: %w", g, err)
	}
	a.loadLease(cur, found, nowMs)
	hash, _ := g.modelLimit(model)
	u := Usage{InFlight: len(a.lr.leases)}
	for i := range a.lr.leases {
		if a.lr.leases[i].model == hash {
			u.ModelInFlight++
		}
	}
	for i := range a.lr.waiting {
		if a.lr.waiting[i].ns == g.ns {
			u.Queued += a.lr.waiting[i].count
		}
	}
	return u, nil
}

// Retry runs again the releases, waiting-count syncs and publications that failed, as far
// as their retry is due (the filter calls it from every tick; tick is its period, which
// spreads the retries). It gives up on one that failed MaxStoreRetries times.
func (a *Admitter) Retry(tick time.Duration) {
	if len(a.pending) == 0 {
		return
	}
	nowMs := a.clock.Now().UnixMilli()
	kept := a.pending[:0]
	for _, p := range a.pending {
		if nowMs < p.atMs {
			kept = append(kept, p)
			continue
		}
		var err error
		switch p.kind {
		case opRelease:
			_, err = a.release(p.lease, nowMs)
		case opSync:
			if err = a.syncWaiting(p.gate, nowMs); err == nil {
				err = a.publish(p.gate, nowMs)
			}
		}
		if err == nil {
			continue
		}
		if p.failures++; p.failures >= MaxStoreRetries {
			a.stats.Abandoned++
			continue
		}
		a.stats.Retried++
		p.atMs = nowMs + RetryDelay(tick, a.node.Jitter(), p.failures).Milliseconds()
		kept = append(kept, p)
	}
	clear(a.pending[len(kept):])
	a.pending = kept
}

// deferOp keeps a failed operation for Retry (a sync for a gate already pending is merged).
func (a *Admitter) deferOp(p pendingOp, nowMs int64) {
	if p.kind == opSync {
		for _, q := range a.pending {
			if q.kind == opSync && q.gate == p.gate {
				a.stats.Retried++ // the pending sync carries this one too
				return
			}
		}
	}
	if len(a.pending) >= maxPending {
		a.stats.Abandoned++
		return
	}
	a.stats.Retried++
	p.failures = 1
	p.atMs = nowMs // the next Retry: a tick later
	a.pending = append(a.pending, p)
}

// publishOrDefer publishes the lane's lines for g, leaving a failure to Retry.
func (a *Admitter) publishOrDefer(g *Gate, nowMs int64) {
	if err := a.publish(g, nowMs); err != nil {
		a.deferOp(pendingOp{kind: opSync, gate: g}, nowMs)
	}
}

// lease builds the handle of a granted lease.
func (a *Admitter) lease(g *Gate, now time.Time, id, model uint64, upper upperSlots) Lease {
	return Lease{
		gate: g, id: id, providerID: upper.providerID, globalID: upper.globalID, model: model,
		Acquired: now, Deadline: time.UnixMilli(now.UnixMilli() + g.executionMaxWaitMs),
	}
}

// updateLease runs the operation in a.op on g's lease record, reading what the record says
// it needs first: the ticket record when other lanes wait, the directory when the cap is
// full and entries of owners the view does not vouch for stand in the way.
func (a *Admitter) updateLease(g *Gate) error {
	for {
		a.op.need = needNothing
		if _, err := state.Update(a.store, g.leaseKey, a.leaseFn); err != nil {
			return err
		}
		switch a.op.need {
		case needTickets:
			if err := a.readTickets(g); err != nil {
				return err
			}
			a.op.haveTickets = true
		case needLiveness:
			if _, err := a.node.Refresh(); err != nil {
				return err
			}
			a.op.fresh = true
		default:
			return nil
		}
	}
}

// loadLease decodes a lease record into a.lr and prunes it; it reports whether the stored
// bytes must be rewritten (corrupt, or something expired). Bytes equal to those a.lr came
// from are not decoded again.
func (a *Admitter) loadLease(cur []byte, found bool, nowMs int64) (dirty bool) {
	r := &a.lr
	switch {
	case !found:
		r.reset(nowMs)
		a.lValid = false
	case a.lValid && bytes.Equal(cur, a.lRaw):
	default:
		a.lRaw = append(a.lRaw[:0], cur...)
		if err := r.decode(cur); err != nil {
			a.corrupt++
			r.reset(nowMs)
			a.lValid = false
			return true
		}
		a.lValid = true
	}
	if r.prune(nowMs) {
		a.lValid = false // r no longer decodes from lRaw
		return true
	}
	return false
}

// readTickets reads g's ticket record into a.tr (decoding it only when it changed).
func (a *Admitter) readTickets(g *Gate) error {
	cur, _, found, err := a.store.Get(g.ticketKey)
	if err != nil {
		return fmt.Errorf("admission: read tickets of %s: %w", g, err)
	}
	switch {
	case !found:
		a.tr.lines, a.tr.tickets = a.tr.lines[:0], a.tr.tickets[:0]
		a.tValid = false
	case a.tValid && bytes.Equal(cur, a.tRaw):
	default:
		a.tRaw = append(a.tRaw[:0], cur...)
		a.tValid = true
		if err := a.tr.decode(cur); err != nil {
			a.corrupt++
			a.tr.lines, a.tr.tickets = a.tr.lines[:0], a.tr.tickets[:0]
		}
	}
	return nil
}

// others appends the tickets other lanes published in a.tr that still count: unexpired, of a
// lane the lease record r has a waiting count for (a lane pruned as dead, or whose count
// went, does not hold anyone back).
func (a *Admitter) others(r *leaseRecord, nowMs int64, out []waiting) []waiting {
	for _, l := range a.tr.lines {
		if l.lane == a.lane || !r.laneWaits(l.lane) {
			continue
		}
		for _, t := range a.tr.tickets[l.start : l.start+l.n] {
			if t.deadlineMs > nowMs {
				out = append(out, waiting{order: t.order, lane: l.lane, model: l.model, modelCap: l.modelCap,
					deadlineMs: t.deadlineMs, owner: l.owner})
			}
		}
	}
	return out
}

// leaseUpdate is the state.UpdateFunc of every lease-record operation.
func (a *Admitter) leaseUpdate(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	op.need, op.out, op.gotID, op.waiters, op.modelBound, op.queued, op.others = needNothing, outNone, 0, false, false, 0, 0
	g := op.gate
	r := &a.lr
	dirty := a.loadLease(cur, found, op.nowMs)
	a.node.nowMs = op.nowMs
	if op.fresh && r.pruneOwners(a.node.deadFn) {
		a.lValid, dirty = false, true
	}
	switch op.kind {
	case opAdmit, opPoll:
		return a.admitOrPoll(dirty)
	case opRelease:
		if r.removeLease(op.id) {
			a.lValid, dirty = false, true
		}
		op.waiters = len(r.waiting) > 0
		return a.keepUnless(dirty)
	case opSync:
		count, until := a.localWaiting(g, op.nowMs)
		if r.setWaiting(a.lane, a.node.owner(), g.ns, count, until) {
			a.lValid, dirty = false, true
		}
		op.waiters = len(r.waiting) > 0
		return a.keepUnless(dirty)
	case opRenew:
		a.lValid = false
		deadline := op.nowMs + g.executionMaxWaitMs
		for i := range r.leases {
			if r.leases[i].id == op.id {
				r.leases[i].deadlineMs = deadline
				return a.writeLease()
			}
		}
		// Pruned meanwhile (its deadline passed before the renewal): the request still runs.
		r.leases = append(r.leases, lease{id: op.id, deadlineMs: deadline, model: op.model, owner: a.node.owner()})
		return a.writeLease()
	}
	return nil, state.Keep, fmt.Errorf("admission: unknown operation %d", op.kind)
}

// admitOrPoll decides a newcomer's or a head's turn on the loaded lease record.
func (a *Admitter) admitOrPoll(dirty bool) ([]byte, state.Mutation, error) {
	op := &a.op
	g := op.gate
	r := &a.lr
	_, others := r.waitingOf(a.lane, g.ns)
	op.others = others
	if others > 0 && !op.haveTickets {
		op.need = needTickets
		return nil, state.Keep, nil
	}
	ahead := a.own(g, a.ahead[:0], op.nowMs)
	if op.haveTickets {
		ahead = a.others(r, op.nowMs, ahead)
	}
	if op.kind == opPoll {
		kept := ahead[:0]
		for _, t := range ahead {
			if fifo(t, op.head) < 0 {
				kept = append(kept, t)
			}
		}
		ahead = kept
	}
	slices.SortFunc(ahead, fifo)
	a.ahead = ahead
	ok, modelBound := turn(r.leases, ahead, g.connCap, op.model, op.modelCap, &a.use)
	op.modelBound = modelBound
	if !ok && !op.fresh && r.suspects(a.node.aliveFn) {
		op.need = needLiveness
		return nil, state.Keep, nil
	}
	if op.peek {
		if ok {
			op.out = outGranted
		}
		return nil, state.Keep, nil
	}
	owner := a.node.owner()
	count, until := a.localWaiting(g, op.nowMs)
	if ok && op.upperHeld {
		op.out, op.gotID = outGranted, r.nextID
		r.nextID++
		r.leases = append(r.leases, lease{id: op.gotID, deadlineMs: op.nowMs + g.executionMaxWaitMs, model: op.model, owner: owner})
		if op.kind == opPoll {
			count-- // the head leaves its line once this write lands
		}
		r.setWaiting(a.lane, owner, g.ns, count, until)
		return a.writeLease()
	}
	if op.kind == opPoll {
		op.out = outQueued
		if r.setWaiting(a.lane, owner, g.ns, count, until) {
			a.lValid, dirty = false, true
		}
		return a.keepUnless(dirty)
	}
	if d := g.queue.MaxQueueDepth; d > 0 && count+others >= d {
		op.out, op.queued = outFull, count+others
		if r.setWaiting(a.lane, owner, g.ns, count, until) {
			a.lValid, dirty = false, true
		}
		return a.keepUnless(dirty)
	}
	op.out, op.gotID = outQueued, r.nextID // the ticket's place in the FIFO order
	r.nextID++
	r.setWaiting(a.lane, owner, g.ns, count+1, max(until, op.nowMs+g.maxWaitMs))
	return a.writeLease()
}

// writeLease encodes the lease record into the reusable buffer.
func (a *Admitter) writeLease() ([]byte, state.Mutation, error) {
	a.buf = a.lr.encode(a.buf)
	a.lRaw, a.lValid = append(a.lRaw[:0], a.buf...), true
	return a.buf, state.Write, nil
}

func (a *Admitter) keepUnless(dirty bool) ([]byte, state.Mutation, error) {
	if dirty {
		return a.writeLease()
	}
	return nil, state.Keep, nil
}

// publish writes the lane's lines for g into g's ticket record.
func (a *Admitter) publish(g *Gate, nowMs int64) error {
	a.op = operation{gate: g, nowMs: nowMs}
	if _, err := state.Update(a.store, g.ticketKey, a.publishFn); err != nil {
		return fmt.Errorf("admission: publish tickets of %s: %w", g, err)
	}
	return nil
}

// publishUpdate rewrites a ticket record with the lane's lines as they are now, and every
// other lane's lines without their expired tickets.
func (a *Admitter) publishUpdate(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	in, out := &a.pub, &a.out
	in.lines, in.tickets = in.lines[:0], in.tickets[:0]
	if found {
		if err := in.decode(cur); err != nil {
			a.corrupt++
			in.lines, in.tickets = in.lines[:0], in.tickets[:0]
		}
	}
	out.lines, out.tickets = out.lines[:0], out.tickets[:0]
	for _, l := range in.lines {
		if l.lane == a.lane {
			continue
		}
		start := len(out.tickets)
		for _, t := range in.tickets[l.start : l.start+l.n] {
			if t.deadlineMs > op.nowMs {
				out.tickets = append(out.tickets, t)
			}
		}
		if n := len(out.tickets) - start; n > 0 {
			l.start, l.n = start, n
			out.lines = append(out.lines, l)
		}
	}
	owner := a.node.owner()
	for _, ln := range a.lines {
		if ln.live == 0 || ln.win == 0 || ln.gate.id != op.gate.id {
			continue
		}
		l := pubLine{lane: a.lane, owner: owner, model: ln.model, modelCap: ln.modelCap, start: len(out.tickets)}
		seen := 0
		for i := ln.head; i < len(ln.q) && seen < ln.win; i++ {
			if w := &ln.q[i]; !w.gone && w.deadlineMs > op.nowMs {
				out.tickets = append(out.tickets, pubTicket{order: w.order, deadlineMs: w.deadlineMs})
				seen++
			}
		}
		if l.n = seen; seen > 0 {
			out.lines = append(out.lines, l)
		}
	}
	if !found && len(out.lines) == 0 {
		return nil, state.Keep, nil
	}
	a.tbuf = out.encode(a.tbuf)
	if found && bytes.Equal(a.tbuf, cur) {
		return nil, state.Keep, nil
	}
	return a.tbuf, state.Write, nil
}

// ownPublished reports whether a.tr (the ticket record as last read) holds exactly the
// lane's published lines for g.
func (a *Admitter) ownPublished(g *Gate) bool {
	mine := a.own(g, a.ahead[:0], a.clock.Now().UnixMilli())
	a.ahead = mine
	k := 0
	for _, l := range a.tr.lines {
		if l.lane != a.lane {
			continue
		}
		for _, t := range a.tr.tickets[l.start : l.start+l.n] {
			if k >= len(mine) || mine[k].order != t.order || mine[k].model != l.model {
				return false
			}
			k++
		}
	}
	return k == len(mine)
}

// upperSlots are the global and provider slots a request holds (or attempted).
type upperSlots struct {
	held                 bool   // every configured upper slot is held
	providerID, globalID uint64 // held lease ids (0 = none)
	wake                 Wake   // a rollback freed a slot someone may be waiting for
}

// acquireUpper takes the global slot, then the provider slot, all or nothing. On refusal
// it marks the refusing pool contended until contendUntilMs, so the release that frees it
// reports waiters.
func (a *Admitter) acquireUpper(g *Gate, nowMs, contendUntilMs int64) (upperSlots, error) {
	var u upperSlots
	if g.globalCap > 0 {
		id, err := a.acquirePool(g, g.globalKey, g.globalCap, nowMs, contendUntilMs)
		if err != nil || id == 0 {
			return u, err
		}
		u.globalID = id
	}
	if g.providerCap > 0 {
		id, err := a.acquirePool(g, g.providerKey, g.providerCap, nowMs, contendUntilMs)
		if err != nil || id == 0 {
			u.wake = a.releaseUpper(g, nowMs, u)
			u.globalID = 0
			return u, err
		}
		u.providerID = id
	}
	u.held = true
	return u, nil
}

// acquirePool takes one slot in a pool record; id 0 means the pool is full. A full pool
// holding leases of owners the view does not vouch for is judged again on a fresh view.
func (a *Admitter) acquirePool(g *Gate, key string, capacity int, nowMs, contendUntilMs int64) (uint64, error) {
	a.op = operation{gate: g, nowMs: nowMs, capacity: capacity, contendTill: contendUntilMs}
	for {
		a.op.need = needNothing
		if _, err := state.Update(a.store, key, a.poolAcquireFn); err != nil {
			return 0, fmt.Errorf("admission: acquire %s: %w", key, err)
		}
		if a.op.need != needLiveness {
			break
		}
		if _, err := a.node.Refresh(); err != nil {
			return 0, fmt.Errorf("admission: acquire %s: %w", key, err)
		}
		a.op.fresh = true
	}
	if a.op.out != outGranted {
		return 0, nil
	}
	return a.op.gotID, nil
}

// releaseUpper hands back the provider slot, then the global one, and reports whether a
// refused request may be waiting for them. Errors are not returned: the leases expire.
func (a *Admitter) releaseUpper(g *Gate, nowMs int64, u upperSlots) (wake Wake) {
	for _, s := range [...]struct {
		key string
		id  uint64
	}{{g.providerKey, u.providerID}, {g.globalKey, u.globalID}} {
		if s.id == 0 {
			continue
		}
		a.op = operation{gate: g, nowMs: nowMs, id: s.id}
		if _, err := state.Update(a.store, s.key, a.poolReleaseFn); err == nil && a.op.waiters {
			wake = WakeAll()
		}
	}
	return wake
}

// loadPool decodes a pool record into a.pool and prunes it; it reports whether the stored
// bytes must be rewritten.
func (a *Admitter) loadPool(cur []byte, found bool, nowMs int64) (dirty bool) {
	p := &a.pool
	switch {
	case !found:
		p.reset(nowMs)
	default:
		if err := p.decode(cur); err != nil {
			a.corrupt++
			p.reset(nowMs)
			dirty = true
		}
	}
	n := len(p.leases)
	p.leases = pruneLeases(p.leases, nowMs)
	if a.op.fresh {
		a.node.nowMs = nowMs
		p.leases = dropOwners(p.leases, a.node.deadFn)
	}
	return dirty || len(p.leases) != n
}

func (a *Admitter) poolAcquire(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	op.out, op.gotID, op.need = outNone, 0, needNothing
	p := &a.pool
	dirty := a.loadPool(cur, found, op.nowMs)
	if len(p.leases) >= op.capacity && !op.fresh {
		a.node.nowMs = op.nowMs
		for i := range p.leases {
			if !a.node.alive(p.leases[i].owner) {
				op.need = needLiveness
				return nil, state.Keep, nil
			}
		}
	}
	switch {
	case len(p.leases) < op.capacity:
		op.out, op.gotID = outGranted, p.nextID
		p.nextID++
		p.leases = append(p.leases, lease{id: op.gotID, deadlineMs: op.nowMs + op.gate.executionMaxWaitMs, owner: a.node.owner()})
		dirty = true
	case op.contendTill > p.contendedUntilMs:
		p.contendedUntilMs = op.contendTill
		dirty = true
	}
	if !dirty {
		return nil, state.Keep, nil
	}
	a.buf = p.encode(a.buf)
	return a.buf, state.Write, nil
}

func (a *Admitter) poolRelease(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	p := &a.pool
	dirty := a.loadPool(cur, found, op.nowMs)
	var removed bool
	p.leases, removed = dropLease(p.leases, op.id)
	op.waiters = p.contendedUntilMs > op.nowMs
	if !dirty && !removed {
		return nil, state.Keep, nil
	}
	a.buf = p.encode(a.buf)
	return a.buf, state.Write, nil
}

func (a *Admitter) poolRenew(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	p := &a.pool
	a.loadPool(cur, found, op.nowMs)
	deadline := op.nowMs + op.gate.executionMaxWaitMs
	renewed := false
	for i := range p.leases {
		if p.leases[i].id == op.id {
			p.leases[i].deadlineMs, renewed = deadline, true
		}
	}
	if !renewed {
		p.leases = append(p.leases, lease{id: op.id, deadlineMs: deadline, owner: a.node.owner()})
	}
	a.buf = p.encode(a.buf)
	return a.buf, state.Write, nil
}
