package admission

import (
	"cmp"
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Shared-data records (keys.go names their keys). Times are Unix milliseconds. Lease ids
// are unique within one record: each record hands them out from its own counter under CAS,
// and a fresh record seeds the counter from the clock so handles from a lost record never
// collide with new ids. An owner is a VM's node id (0: an anonymous node, whose entries
// only expire by time); a lane is one Admitter's id, unique across the process.
//
// Lease record (state.KindAdmissionConn 'Q', v3), one per upstream account (state.KeyLease:
// every policy on the credential shares it): its live leases, each tagged with its model's
// hash (so the per-model caps are counted in the same atomic write as the connection cap)
// and its owner, and one waiting count per lane with waiters (how many requests that
// Admitter holds in its lines for the connection, until when the newest may wait, and the
// hash of the lane's policy namespace, so a policy's queue depth and FIFO count its own
// waiters only):
//
//	nextID, nLeases, {id, deadlineMs, model, owner}*, nWaiting, {lane, owner, ns, count, untilMs}*
//
// A ticket's place in the FIFO order is the id the lease record handed it in the CAS that
// queued it (the record's counter, so the order is the order of those CASes, across
// workers), then its lane.
//
// Ticket record (state.KindAdmissionTickets 'T', v1), one per policy namespace and lease
// record (state.KeyTickets: policies never mix their queues): the tickets each
// lane publishes, per line (one model on the connection), the first Window of its waiters
// in FIFO order — all that can be granted before a later ticket of any lane:
//
//	nLines, {lane, owner, model, modelCap, nTickets, {order, deadlineMs}*}*
//
// Pool record (state.KindAdmissionPool 'P', v2), one for the global cap and one per
// provider, each a policy's own (state.KeyGlobalPool, state.KeyProviderPool): leases and the time until which some ticket may be waiting for the pool:
//
//	nextID, contendedUntilMs, nLeases, {id, deadlineMs, owner}*
//
// The directory (state.KindVMDirectory 'V', v2, node.go): the live VMs and their last
// heartbeat:
//
//	nPeers, {id, seenMs}*
//
// A record of an earlier version reads as corrupt (counted, and treated as absent): v1
// lease records held the tickets themselves, v2 ones no namespace per lane, v1 directories
// named VMs by strings.
const (
	leaseKind   = state.KindAdmissionConn
	ticketKind  = state.KindAdmissionTickets
	poolKind    = state.KindAdmissionPool
	dirKind     = state.KindVMDirectory
	leaseV      = 3
	ticketV     = 1
	poolV       = 2
	dirV        = 2
	idSeedShift = 20 // a fresh record's first id is nowMs << 20
)

// lease is one held slot.
type lease struct {
	id         uint64
	deadlineMs int64  // acquire (or renewal) time + executionMaxWait
	model      uint64 // model hash (lease records only)
	owner      uint64 // the holder's node id (0: anonymous)
}

// waitCount is how many requests one lane holds waiting for a connection.
type waitCount struct {
	lane, owner uint64
	ns          uint64 // the lane's policy namespace (Gate.ns)
	count       int
	untilMs     int64 // the latest wait deadline among them
}

// leaseRecord is a decoded lease record.
type leaseRecord struct {
	nextID  uint64
	leases  []lease
	waiting []waitCount
}

// pubLine is one lane's published line: tickets[start:start+n] of its record.
type pubLine struct {
	lane, owner, model uint64
	modelCap           int
	start, n           int
}

// pubTicket is one published ticket.
type pubTicket struct {
	order      uint64
	deadlineMs int64
}

// ticketRecord is a decoded ticket record, its tickets in one slice (no allocation per line).
type ticketRecord struct {
	lines   []pubLine
	tickets []pubTicket
}

// poolRecord is a decoded global or provider record.
type poolRecord struct {
	nextID           uint64
	contendedUntilMs int64
	leases           []lease
}

// waiting is a ticket as the FIFO order sees it, from any lane.
type waiting struct {
	order, lane uint64
	model       uint64
	modelCap    int
	deadlineMs  int64
	owner       uint64
}

// fifo orders tickets: by the order the lease record gave them, then by lane (two tickets
// share an order only across a lost record), the same total order on every VM.
func fifo(a, b waiting) int {
	if c := cmp.Compare(a.order, b.order); c != 0 {
		return c
	}
	return cmp.Compare(a.lane, b.lane)
}

// modelUse counts slots per model while judging whose turn it is.
type modelUse struct {
	model uint64
	used  int
}

func seedID(nowMs int64) uint64 { return uint64(max(nowMs, 1)) << idSeedShift }

// reset empties r, keeping its slices' memory.
func (r *leaseRecord) reset(nowMs int64) {
	r.nextID = seedID(nowMs)
	r.leases = r.leases[:0]
	r.waiting = r.waiting[:0]
}

// decode reads b into r (reusing r's memory).
func (r *leaseRecord) decode(b []byte) error {
	d := state.NewDecoder(b, leaseKind, leaseV)
	r.nextID = d.Uint()
	n := d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d leases in %d bytes", state.ErrCorrupt, n, len(b))
	}
	r.leases = r.leases[:0]
	for i := uint64(0); i < n && !d.Failed(); i++ {
		r.leases = append(r.leases, lease{id: d.Uint(), deadlineMs: d.Int(), model: d.Uint(), owner: d.Uint()})
	}
	n = d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d waiting counts in %d bytes", state.ErrCorrupt, n, len(b))
	}
	r.waiting = r.waiting[:0]
	for i := uint64(0); i < n && !d.Failed(); i++ {
		r.waiting = append(r.waiting, waitCount{lane: d.Uint(), owner: d.Uint(), ns: d.Uint(), count: int(min(d.Uint(), maxQueued)), untilMs: d.Int()})
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("admission: lease record: %w", err)
	}
	return nil
}

// encode appends r to buf[:0].
func (r *leaseRecord) encode(buf []byte) []byte {
	e := state.NewEncoder(buf, leaseKind, leaseV)
	e.Uint(r.nextID).Uint(uint64(len(r.leases)))
	for i := range r.leases {
		l := &r.leases[i]
		e.Uint(l.id).Int(l.deadlineMs).Uint(l.model).Uint(l.owner)
	}
	e.Uint(uint64(len(r.waiting)))
	for i := range r.waiting {
		w := &r.waiting[i]
		e.Uint(w.lane).Uint(w.owner).Uint(w.ns).Uint(uint64(w.count)).Int(w.untilMs)
	}
	return e.Bytes()
}

// prune drops leases past their deadline and waiting counts past theirs (or empty), and
// reports whether any went.
func (r *leaseRecord) prune(nowMs int64) bool {
	changed := false
	if anyExpired(r.leases, nowMs) {
		r.leases, changed = pruneLeases(r.leases, nowMs), true
	}
	kept := r.waiting[:0]
	for _, w := range r.waiting {
		if w.count > 0 && w.untilMs > nowMs {
			kept = append(kept, w)
		}
	}
	changed = changed || len(kept) != len(r.waiting)
	r.waiting = kept
	return changed
}

// pruneOwners drops the leases and waiting counts of owners dead reports dead.
func (r *leaseRecord) pruneOwners(dead func(owner uint64) bool) bool {
	n, w := len(r.leases), len(r.waiting)
	r.leases = dropOwners(r.leases, dead)
	kept := r.waiting[:0]
	for _, c := range r.waiting {
		if !dead(c.owner) {
			kept = append(kept, c)
		}
	}
	r.waiting = kept
	return len(r.leases) != n || len(r.waiting) != w
}

// waitingOf returns the waiting count of lane (0 if none), and the total of every other lane
// of namespace ns: another policy's waiters are not in this policy's queue.
func (r *leaseRecord) waitingOf(lane, ns uint64) (own, others int) {
	for i := range r.waiting {
		switch w := &r.waiting[i]; {
		case w.lane == lane:
			own = w.count
		case w.ns == ns:
			others += w.count
		}
	}
	return own, others
}

// laneWaits reports whether lane has a waiting count.
func (r *leaseRecord) laneWaits(lane uint64) bool {
	for i := range r.waiting {
		if r.waiting[i].lane == lane {
			return true
		}
	}
	return false
}

// setWaiting sets lane's waiting count (removing it at 0) and reports whether it changed.
func (r *leaseRecord) setWaiting(lane, owner, ns uint64, count int, untilMs int64) bool {
	for i := range r.waiting {
		w := &r.waiting[i]
		if w.lane != lane {
			continue
		}
		if count <= 0 {
			r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
			return true
		}
		if w.count == count && w.untilMs == untilMs && w.owner == owner && w.ns == ns {
			return false
		}
		w.count, w.untilMs, w.owner, w.ns = count, untilMs, owner, ns
		return true
	}
	if count <= 0 {
		return false
	}
	r.waiting = append(r.waiting, waitCount{lane: lane, owner: owner, ns: ns, count: count, untilMs: untilMs})
	return true
}

// removeLease deletes lease id and reports whether it was there.
func (r *leaseRecord) removeLease(id uint64) bool {
	var found bool
	r.leases, found = dropLease(r.leases, id)
	return found
}

// suspects reports whether a lease or waiting count belongs to an owner alive does not
// vouch for.
func (r *leaseRecord) suspects(alive func(owner uint64) bool) bool {
	for i := range r.leases {
		if !alive(r.leases[i].owner) {
			return true
		}
	}
	for i := range r.waiting {
		if !alive(r.waiting[i].owner) {
			return true
		}
	}
	return false
}

// turn decides whether a request for model (whose cap is modelCap, 0 = none) may take a
// slot now, given the live leases and ahead, the tickets before it in FIFO order. The queue
// is granted in FIFO order: each ticket ahead that fits reserves its slot first, and a
// ticket blocked only by its own model's cap does not hold back younger tickets for other
// models. connCap 0 means no connection cap. It also says what refuses a request that may
// not go: modelBound when the connection has room and only the model's cap is full (the
// per-model gate, guide §4), false when the connection's own cap is full (the request
// queue, §5). use is scratch memory.
func turn(leases []lease, ahead []waiting, connCap int, model uint64, modelCap int, use *[]modelUse) (ok, modelBound bool) {
	u := (*use)[:0]
	connUsed := len(leases)
	for i := range leases {
		u = addUse(u, leases[i].model)
	}
	for i := range ahead {
		if connCap > 0 && connUsed >= connCap {
			break
		}
		t := &ahead[i]
		if t.modelCap == 0 || usedBy(u, t.model) < t.modelCap {
			connUsed++
			u = addUse(u, t.model)
		}
	}
	*use = u
	connOK := connCap == 0 || connUsed < connCap
	modelOK := modelCap == 0 || usedBy(u, model) < modelCap
	return connOK && modelOK, connOK && !modelOK
}

func addUse(u []modelUse, model uint64) []modelUse {
	for i := range u {
		if u[i].model == model {
			u[i].used++
			return u
		}
	}
	return append(u, modelUse{model: model, used: 1})
}

func usedBy(u []modelUse, model uint64) int {
	for i := range u {
		if u[i].model == model {
			return u[i].used
		}
	}
	return 0
}

// decode reads b into r (reusing r's memory).
func (r *ticketRecord) decode(b []byte) error {
	d := state.NewDecoder(b, ticketKind, ticketV)
	n := d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d lines in %d bytes", state.ErrCorrupt, n, len(b))
	}
	r.lines, r.tickets = r.lines[:0], r.tickets[:0]
	for i := uint64(0); i < n && !d.Failed(); i++ {
		l := pubLine{lane: d.Uint(), owner: d.Uint(), model: d.Uint(), modelCap: int(min(d.Uint(), MaxCap)), start: len(r.tickets)}
		m := d.Uint()
		if m > uint64(len(b)) {
			return fmt.Errorf("admission: %w: %d tickets in %d bytes", state.ErrCorrupt, m, len(b))
		}
		for j := uint64(0); j < m && !d.Failed(); j++ {
			r.tickets = append(r.tickets, pubTicket{order: d.Uint(), deadlineMs: d.Int()})
		}
		l.n = int(m)
		r.lines = append(r.lines, l)
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("admission: ticket record: %w", err)
	}
	return nil
}

// encode appends r to buf[:0].
func (r *ticketRecord) encode(buf []byte) []byte {
	e := state.NewEncoder(buf, ticketKind, ticketV)
	e.Uint(uint64(len(r.lines)))
	for i := range r.lines {
		l := &r.lines[i]
		e.Uint(l.lane).Uint(l.owner).Uint(l.model).Uint(uint64(l.modelCap)).Uint(uint64(l.n))
		for _, t := range r.tickets[l.start : l.start+l.n] {
			e.Uint(t.order).Int(t.deadlineMs)
		}
	}
	return e.Bytes()
}

// reset empties p, keeping its memory.
func (p *poolRecord) reset(nowMs int64) {
	p.nextID = seedID(nowMs)
	p.contendedUntilMs = 0
	p.leases = p.leases[:0]
}

// decode reads b into p (reusing p's memory).
func (p *poolRecord) decode(b []byte) error {
	d := state.NewDecoder(b, poolKind, poolV)
	p.nextID = d.Uint()
	p.contendedUntilMs = d.Int()
	n := d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d leases in %d bytes", state.ErrCorrupt, n, len(b))
	}
	p.leases = p.leases[:0]
	for i := uint64(0); i < n && !d.Failed(); i++ {
		p.leases = append(p.leases, lease{id: d.Uint(), deadlineMs: d.Int(), owner: d.Uint()})
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("admission: pool record: %w", err)
	}
	return nil
}

// encode appends p to buf[:0].
func (p *poolRecord) encode(buf []byte) []byte {
	e := state.NewEncoder(buf, poolKind, poolV)
	e.Uint(p.nextID).Int(p.contendedUntilMs).Uint(uint64(len(p.leases)))
	for i := range p.leases {
		e.Uint(p.leases[i].id).Int(p.leases[i].deadlineMs).Uint(p.leases[i].owner)
	}
	return e.Bytes()
}

func anyExpired(ls []lease, nowMs int64) bool {
	for i := range ls {
		if ls[i].deadlineMs <= nowMs {
			return true
		}
	}
	return false
}

func pruneLeases(ls []lease, nowMs int64) []lease {
	kept := ls[:0]
	for _, l := range ls {
		if l.deadlineMs > nowMs {
			kept = append(kept, l)
		}
	}
	return kept
}

func dropOwners(ls []lease, dead func(owner uint64) bool) []lease {
	kept := ls[:0]
	for _, l := range ls {
		if !dead(l.owner) {
			kept = append(kept, l)
		}
	}
	return kept
}

func dropLease(ls []lease, id uint64) ([]lease, bool) {
	for i := range ls {
		if ls[i].id == id {
			return append(ls[:i], ls[i+1:]...), true
		}
	}
	return ls, false
}

// hashModel is FNV-1a (64 bit) of a name: a compact, allocation-free tag for the per-model
// count inside a lease record, and a gate's id in wake-up messages.
func hashModel(model string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(model); i++ {
		h ^= uint64(model[i])
		h *= 1099511628211
	}
	return h
}
