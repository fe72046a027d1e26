// Package admission caps requests in flight per connection and per model across Envoy
// workers with expiring leases in shared data, and keeps the request queue's pure part
// (depth, FIFO tickets, wait budget, execution limit) — guide §4 and §5.
//
// A request takes its slots through a compound gate, global → provider → connection →
// model, all or nothing; the stricter applicable cap wins. The connection and model caps
// live in one shared-data record per connection, so both are taken in one CAS. The optional
// global and provider caps live in their own records, taken first and handed back if a later
// gate refuses. Every slot is a lease with a deadline (acquire time + executionMaxWait), so
// a worker VM that dies holding slots cannot leak them: expired leases are pruned on every
// write.
//
// A request that cannot get a slot gets a ticket in the connection's FIFO. The filter glue
// pauses it and calls TryAdmit when woken (a shared-queue message sent because Release
// reported waiters, or a tick): the slot goes to the oldest ticket that fits, across
// workers. What a request whose wait ends gets depends on the cap that keeps it waiting:
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
// A store error (contention beyond the bounded CAS loop, a host failure) is returned wrapped;
// the caller fails open for that request, as the guide's quota-share serialisation does (§4
// "Serialisatie van quota-share-requests").
package admission

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// releaseRounds bounds how many full CAS loops a release makes before giving up: a lost
// release would hold a slot until its lease expires, so it tries harder than an acquire.
const releaseRounds = 4

// Lease is a held set of slots. The zero Lease (and the lease of a request no cap applies
// to) holds nothing; releasing it is a no-op.
type Lease struct {
	gate       *Gate
	id         uint64 // lease id in the connection record (0 = holds nothing)
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

// Ticket is a queued request's place in its connection's FIFO.
type Ticket struct {
	gate     *Gate
	id       uint64
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

// Result is the outcome of Admit or TryAdmit.
type Result struct {
	// Granted: the request holds Lease and may be dispatched. Otherwise it holds Ticket
	// and waits.
	Granted bool
	Lease   Lease
	Ticket  Ticket
	// Wake: a slot was handed back on the way (an all-or-nothing acquire rolled back), so
	// the glue should wake waiters as after Release.
	Wake bool
	// FailedOpen: granted without a slot, because the gate fails open
	// (GateConfig.QuotaShareFailOpen) and the request's wait for a connection slot ended.
	// Lease holds nothing.
	FailedOpen bool
}

// Usage is a gate's current load, for the admin API and stats.
type Usage struct {
	InFlight      int // live leases on the connection
	ModelInFlight int // of which for the model asked about
	Queued        int // live tickets
}

// Admitter runs admission against a store. It keeps scratch memory so the hot path does not
// allocate, so it is not safe for concurrent use: keep one per worker VM (Envoy runs one
// callback at a time per worker).
type Admitter struct {
	store state.Store
	clock state.Clock

	conn connRecord
	// connBytes is the encoding of conn as the last write() left it, while connFresh says
	// conn has not been touched since: a read that finds those very bytes (the common case:
	// a request's release reads what its admit wrote) needs no decoding.
	connBytes []byte
	connFresh bool
	pool      poolRecord
	use       []modelUse
	buf       []byte
	op        operation
	corrupt   uint64

	// Bound once, so passing them to state.Update does not allocate a closure per call.
	connFn, poolAcquireFn, poolReleaseFn, poolRenewFn state.UpdateFunc
}

type opKind uint8

const (
	opAdmit opKind = iota
	opPoll
	opRelease
	opCancel
	opRenew
)

type outcome uint8

const (
	outNone outcome = iota
	outGranted
	outQueued
	outFull
	outTimeout
)

// operation carries one update's inputs and results: state.Update may run the update
// function several times, and each run overwrites the results.
type operation struct {
	kind         opKind
	gate         *Gate
	nowMs        int64
	model        uint64
	modelCap     int
	upperHeld    bool   // opAdmit/opPoll: the global and provider slots are held (or none apply)
	tk           ticket // opPoll/opCancel
	id           uint64 // opRelease: lease id; pool ops: lease id to release
	capacity     int    // pool ops: the pool's cap
	contendUntil int64  // pool acquire: mark the pool contended until then on refusal
	// results
	out        outcome
	gotID      uint64
	waiters    bool
	modelBound bool // not granted: only the model's cap refused
	queued     int  // opAdmit refused as full: the tickets waiting
}

// New returns an Admitter over store and clock.
func New(store state.Store, clock state.Clock) *Admitter {
	a := &Admitter{store: store, clock: clock}
	a.connFn = a.connUpdate
	a.poolAcquireFn = a.poolAcquire
	a.poolReleaseFn = a.poolRelease
	a.poolRenewFn = a.poolRenew
	return a
}

// CorruptRecords counts records that failed to decode and were treated as absent.
func (a *Admitter) CorruptRecords() uint64 { return a.corrupt }

// Admit asks for a slot for a new request for model on g. It returns a granted Lease, or a
// Ticket when the request must wait, or an *Error matching ErrQueueFull (naming the limit,
// the model and the real queue length) when maxQueueDepth requests already wait. A request no cap applies to gets an empty lease without touching shared data.
// A newcomer never overtakes an older waiting ticket that fits.
func (a *Admitter) Admit(g *Gate, model string) (Result, error) {
	hash, modelCap := g.modelLimit(model)
	if !g.limited(modelCap) {
		return Result{Granted: true, Lease: Lease{gate: g}}, nil
	}
	now := a.clock.Now()
	nowMs := now.UnixMilli()
	upper := upperSlots{held: true}
	if g.hasUpper() {
		fits, _, err := a.peekTurn(g, nowMs, ticket{model: hash, modelCap: modelCap}, false)
		if err != nil {
			return Result{}, err
		}
		upper.held = false
		if fits {
			if upper, err = a.acquireUpper(g, nowMs, nowMs+g.maxWaitMs); err != nil {
				return Result{}, err
			}
		}
	}
	a.op = operation{kind: opAdmit, gate: g, nowMs: nowMs, model: hash, modelCap: modelCap, upperHeld: upper.held}
	if _, err := state.Update(a.store, g.connKey, a.connFn); err != nil {
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
	res.Wake = a.releaseUpper(g, nowMs, upper) || res.Wake
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
	res.Ticket = Ticket{
		gate: g, id: id, model: hash, modelCap: modelCap,
		Enqueued: now, Deadline: time.UnixMilli(nowMs + g.maxWaitMs), ModelBound: modelBound,
	}
	return res, nil
}

// TryAdmit checks whether it is t's turn and a slot is free, and if so moves t from the
// queue to a lease. Otherwise the request keeps waiting (Granted false, same Ticket), or,
// once its wait budget is spent, gets ErrQueueTimeout and leaves the queue.
func (a *Admitter) TryAdmit(t Ticket) (Result, error) {
	g := t.gate
	if g == nil {
		return Result{}, errors.New("admission: try-admit on a zero ticket")
	}
	now := a.clock.Now()
	nowMs := now.UnixMilli()
	tk := ticket{id: t.id, enqueuedMs: t.Enqueued.UnixMilli(), deadlineMs: t.Deadline.UnixMilli(), model: t.model, modelCap: t.modelCap}
	if nowMs >= tk.deadlineMs {
		// Expired tickets are pruned by the next write on the record; nothing to do here.
		switch {
		case t.ModelBound:
			return Result{Ticket: t}, ErrSemaphoreTimeout
		case g.failOpen:
			return Result{Granted: true, Lease: Lease{gate: g}, FailedOpen: true}, nil
		}
		return Result{Ticket: t}, ErrQueueTimeout
	}
	upper := upperSlots{held: true}
	if g.hasUpper() {
		fits, missing, err := a.peekTurn(g, nowMs, tk, true)
		if err != nil {
			return Result{Ticket: t}, err
		}
		if fits {
			if upper, err = a.acquireUpper(g, nowMs, tk.deadlineMs); err != nil {
				return Result{Ticket: t}, err
			}
		} else {
			upper.held = false
		}
		if !upper.held && !missing {
			return Result{Ticket: t, Wake: upper.wake}, nil
		}
		// A missing ticket runs the update below even without the upper slots, which
		// puts it back in its place.
	}
	a.op = operation{kind: opPoll, gate: g, nowMs: nowMs, tk: tk, upperHeld: upper.held}
	if _, err := state.Update(a.store, g.connKey, a.connFn); err != nil {
		a.releaseUpper(g, nowMs, upper)
		return Result{Ticket: t}, fmt.Errorf("admission: try-admit on %s: %w", g, err)
	}
	res := Result{Ticket: t, Wake: upper.wake}
	res.Ticket.ModelBound = a.op.modelBound
	if out, id := a.op.out, a.op.gotID; out == outGranted {
		res.Granted = true
		res.Lease = a.lease(g, now, id, t.model, upper)
		return res, nil
	}
	res.Wake = a.releaseUpper(g, nowMs, upper) || res.Wake
	return res, nil
}

// Release hands back a lease's slots and reports whether requests are waiting for them (the
// glue then wakes other workers). For the global and provider slots the answer may be a
// spare "yes" (a pool only knows until when someone waited), never a wrong "no". Releasing
// twice, or releasing a lease that already expired, frees nothing the second time.
func (a *Admitter) Release(l Lease) (waiters bool, err error) {
	if !l.Held() {
		return false, nil
	}
	g := l.gate
	nowMs := a.clock.Now().UnixMilli()
	a.op = operation{kind: opRelease, gate: g, nowMs: nowMs, id: l.id}
	if err := a.updateHard(g.connKey, a.connFn); err != nil {
		return false, fmt.Errorf("admission: release on %s: %w", g, err)
	}
	waiters = a.op.waiters
	if l.providerID == 0 && l.globalID == 0 {
		return waiters, nil // no global or provider slot: nothing more to hand back
	}
	upperWaiters := a.releaseUpper(g, nowMs, upperSlots{held: true, providerID: l.providerID, globalID: l.globalID})
	return waiters || upperWaiters, nil
}

// Cancel takes a waiting request out of the queue (its client went away) and reports
// whether other requests still wait.
func (a *Admitter) Cancel(t Ticket) (waiters bool, err error) {
	g := t.gate
	if g == nil {
		return false, nil
	}
	a.op = operation{kind: opCancel, gate: g, nowMs: a.clock.Now().UnixMilli(), tk: ticket{id: t.id}}
	if err := a.updateHard(g.connKey, a.connFn); err != nil {
		return false, fmt.Errorf("admission: cancel on %s: %w", g, err)
	}
	return a.op.waiters, nil
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
	if err := a.updateHard(g.connKey, a.connFn); err != nil {
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
		if err := a.updateHard(s.key, a.poolRenewFn); err != nil {
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
	if err := a.readConn(g, nowMs); err != nil {
		return Usage{}, err
	}
	hash, _ := g.modelLimit(model)
	u := Usage{InFlight: len(a.conn.leases), Queued: len(a.conn.tickets)}
	for i := range a.conn.leases {
		if a.conn.leases[i].model == hash {
			u.ModelInFlight++
		}
	}
	return u, nil
}

// lease builds the handle of a granted lease.
func (a *Admitter) lease(g *Gate, now time.Time, id, model uint64, upper upperSlots) Lease {
	return Lease{
		gate: g, id: id, providerID: upper.providerID, globalID: upper.globalID, model: model,
		Acquired: now, Deadline: time.UnixMilli(now.UnixMilli() + g.executionMaxWaitMs),
	}
}

// readConn loads g's connection record into a.conn, pruned as of nowMs, without writing.
// A corrupt record reads as empty.
func (a *Admitter) readConn(g *Gate, nowMs int64) error {
	cur, _, found, err := a.store.Get(g.connKey)
	if err != nil {
		return fmt.Errorf("admission: read %s: %w", g, err)
	}
	a.loadConn(cur, found, nowMs)
	return nil
}

// loadConn decodes a connection record into a.conn and prunes it; it reports whether the
// stored bytes must be rewritten (corrupt, or something expired).
func (a *Admitter) loadConn(cur []byte, found bool, nowMs int64) (dirty bool) {
	r := &a.conn
	fresh := a.connFresh && bytes.Equal(cur, a.connBytes) // decoding cur would give r
	a.connFresh = false                                   // r is the caller's to change from here
	switch {
	case !found:
		r.reset(nowMs)
	case fresh:
	default:
		if err := r.decode(cur); err != nil {
			a.corrupt++
			r.reset(nowMs)
			dirty = true
		}
	}
	return r.prune(nowMs) || dirty
}

// peekTurn reads the connection record and reports whether a request (a newcomer when
// queued is false, else the live ticket tk) would get its connection and model slots now,
// and whether the ticket is missing from the record. It is the cheap check before taking
// the global and provider slots.
func (a *Admitter) peekTurn(g *Gate, nowMs int64, tk ticket, queued bool) (fits, missing bool, err error) {
	if err := a.readConn(g, nowMs); err != nil {
		return false, false, err
	}
	r := &a.conn
	pos := len(r.tickets)
	if queued {
		if pos = r.findTicket(tk.id); pos < 0 {
			pos, missing = r.insertTicket(tk), true
		}
	}
	return r.turn(g.connCap, pos, tk.model, tk.modelCap, &a.use), missing, nil
}

// connUpdate is the state.UpdateFunc of every connection-record operation.
func (a *Admitter) connUpdate(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	op.out, op.gotID, op.waiters, op.modelBound, op.queued = outNone, 0, false, false, 0
	g := op.gate
	r := &a.conn
	dirty := a.loadConn(cur, found, op.nowMs)
	switch op.kind {
	case opAdmit:
		ok, modelBound := r.turnBlocked(g.connCap, len(r.tickets), op.model, op.modelCap, &a.use)
		op.modelBound = modelBound
		if op.upperHeld && ok {
			op.out, op.gotID = outGranted, r.nextID
			r.nextID++
			r.leases = append(r.leases, lease{id: op.gotID, deadlineMs: op.nowMs + g.executionMaxWaitMs, model: op.model})
			return a.write()
		}
		if d := g.queue.MaxQueueDepth; d > 0 && len(r.tickets) >= d {
			op.out, op.queued = outFull, len(r.tickets)
			return a.keepUnless(dirty)
		}
		op.out, op.gotID = outQueued, r.nextID
		r.nextID++
		r.tickets = append(r.tickets, ticket{
			id: op.gotID, enqueuedMs: op.nowMs, deadlineMs: op.nowMs + g.maxWaitMs, model: op.model, modelCap: op.modelCap,
		})
		return a.write()
	case opPoll:
		pos := r.findTicket(op.tk.id)
		if pos < 0 { // the record was lost (reset, corrupt): take the ticket's place back
			pos = r.insertTicket(op.tk)
			dirty = true
		}
		ok, modelBound := r.turnBlocked(g.connCap, pos, op.tk.model, op.tk.modelCap, &a.use)
		op.modelBound = modelBound
		if op.upperHeld && ok {
			r.removeTicket(pos)
			op.out, op.gotID = outGranted, op.tk.id
			r.leases = append(r.leases, lease{id: op.tk.id, deadlineMs: op.nowMs + g.executionMaxWaitMs, model: op.tk.model})
			return a.write()
		}
		op.out = outQueued
		return a.keepUnless(dirty)
	case opRelease:
		dirty = r.removeLease(op.id) || dirty
		op.waiters = len(r.tickets) > 0
		return a.keepUnless(dirty)
	case opRenew:
		deadline := op.nowMs + g.executionMaxWaitMs
		for i := range r.leases {
			if r.leases[i].id == op.id {
				r.leases[i].deadlineMs = deadline
				return a.write()
			}
		}
		// Pruned meanwhile (its deadline passed before the renewal): the request still runs.
		r.leases = append(r.leases, lease{id: op.id, deadlineMs: deadline, model: op.model})
		return a.write()
	case opCancel:
		if pos := r.findTicket(op.tk.id); pos >= 0 {
			r.removeTicket(pos)
			dirty = true
		}
		op.waiters = len(r.tickets) > 0
		return a.keepUnless(dirty)
	}
	return nil, state.Keep, fmt.Errorf("admission: unknown operation %d", op.kind)
}

// write encodes the connection record into the reusable buffer.
func (a *Admitter) write() ([]byte, state.Mutation, error) {
	a.buf = a.conn.encode(a.buf)
	a.connBytes, a.connFresh = append(a.connBytes[:0], a.buf...), true
	return a.buf, state.Write, nil
}

func (a *Admitter) keepUnless(dirty bool) ([]byte, state.Mutation, error) {
	if dirty {
		return a.write()
	}
	return nil, state.Keep, nil
}

// updateHard runs state.Update a few times on contention: used by releases, which must not
// be lost.
func (a *Admitter) updateHard(key string, fn state.UpdateFunc) error {
	var err error
	for range releaseRounds {
		if _, err = state.Update(a.store, key, fn); !errors.Is(err, state.ErrContention) {
			return err
		}
	}
	return err
}

// upperSlots are the global and provider slots a request holds (or attempted).
type upperSlots struct {
	held                 bool   // every configured upper slot is held
	providerID, globalID uint64 // held lease ids (0 = none)
	wake                 bool   // a rollback freed a slot someone may be waiting for
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

// acquirePool takes one slot in a pool record; id 0 means the pool is full.
func (a *Admitter) acquirePool(g *Gate, key string, capacity int, nowMs, contendUntilMs int64) (uint64, error) {
	a.op = operation{gate: g, nowMs: nowMs, capacity: capacity, contendUntil: contendUntilMs}
	if _, err := state.Update(a.store, key, a.poolAcquireFn); err != nil {
		return 0, fmt.Errorf("admission: acquire %s: %w", key, err)
	}
	if a.op.out != outGranted {
		return 0, nil
	}
	return a.op.gotID, nil
}

// releaseUpper hands back the provider slot, then the global one, and reports whether a
// refused request may be waiting for them. Errors are not returned: the leases expire.
func (a *Admitter) releaseUpper(g *Gate, nowMs int64, u upperSlots) (waiters bool) {
	for _, s := range [...]struct {
		key string
		id  uint64
	}{{g.providerKey, u.providerID}, {g.globalKey, u.globalID}} {
		if s.id == 0 {
			continue
		}
		a.op = operation{gate: g, nowMs: nowMs, id: s.id}
		if err := a.updateHard(s.key, a.poolReleaseFn); err == nil && a.op.waiters {
			waiters = true
		}
	}
	return waiters
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
	return dirty || len(p.leases) != n
}

func (a *Admitter) poolAcquire(cur []byte, found bool) ([]byte, state.Mutation, error) {
	op := &a.op
	op.out, op.gotID = outNone, 0
	p := &a.pool
	dirty := a.loadPool(cur, found, op.nowMs)
	switch {
	case len(p.leases) < op.capacity:
		op.out, op.gotID = outGranted, p.nextID
		p.nextID++
		p.leases = append(p.leases, lease{id: op.gotID, deadlineMs: op.nowMs + op.gate.executionMaxWaitMs})
		dirty = true
	case op.contendUntil > p.contendedUntilMs:
		p.contendedUntilMs = op.contendUntil
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
		p.leases = append(p.leases, lease{id: op.id, deadlineMs: deadline})
	}
	a.buf = p.encode(a.buf)
	return a.buf, state.Write, nil
}
