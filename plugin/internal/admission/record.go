package admission

import (
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Shared-data records. Times are Unix milliseconds. Ids are unique within one record: each
// record hands them out from its own counter under CAS, and a fresh record seeds the counter
// from the clock so handles from a lost record never collide with new ids.
//
// Connection record (state.KindAdmissionConn 'Q', v1), one per provider connection, holds the connection's live
// leases (each tagged with its model's hash, so the per-model caps are counted in the same
// atomic write as the connection cap) and the FIFO of waiting tickets:
//
//	nextID, nLeases, {id, deadlineMs, model}*, nTickets, {id, enqueuedMs, deadlineMs, model, modelCap}*
//
// Pool record (state.KindAdmissionPool 'P', v1), one for the global gate and one per provider, holds leases and the
// time until which some ticket may be waiting for the pool:
//
//	nextID, contendedUntilMs, nLeases, {id, deadlineMs}*
const (
	connKind    = state.KindAdmissionConn
	poolKind    = state.KindAdmissionPool
	codecV1     = 1
	idSeedShift = 20 // a fresh record's first id is nowMs << 20
)

// lease is one held slot.
type lease struct {
	id         uint64
	deadlineMs int64  // acquire time + executionMaxWait
	model      uint64 // model hash (connection records only)
}

// ticket is one waiting request.
type ticket struct {
	id         uint64
	enqueuedMs int64
	deadlineMs int64 // enqueue time + maxWait
	model      uint64
	modelCap   int // the model's cap when it was enqueued (0 = none)
}

// connRecord is a decoded connection record.
type connRecord struct {
	nextID  uint64
	leases  []lease
	tickets []ticket
}

// poolRecord is a decoded global or provider record.
type poolRecord struct {
	nextID           uint64
	contendedUntilMs int64
	leases           []lease
}

// modelUse counts slots per model while judging whose turn it is.
type modelUse struct {
	model uint64
	used  int
}

func seedID(nowMs int64) uint64 { return uint64(max(nowMs, 1)) << idSeedShift }

// reset empties r, keeping its slices' memory.
func (r *connRecord) reset(nowMs int64) {
	r.nextID = seedID(nowMs)
	r.leases = r.leases[:0]
	r.tickets = r.tickets[:0]
}

// decode reads b into r (reusing r's memory).
func (r *connRecord) decode(b []byte) error {
	d := state.NewDecoder(b, connKind, codecV1)
	r.nextID = d.Uint()
	n := d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d leases in %d bytes", state.ErrCorrupt, n, len(b))
	}
	r.leases = r.leases[:0]
	for i := uint64(0); i < n; i++ {
		r.leases = append(r.leases, lease{id: d.Uint(), deadlineMs: d.Int(), model: d.Uint()})
	}
	n = d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d tickets in %d bytes", state.ErrCorrupt, n, len(b))
	}
	r.tickets = r.tickets[:0]
	for i := uint64(0); i < n; i++ {
		r.tickets = append(r.tickets, ticket{
			id: d.Uint(), enqueuedMs: d.Int(), deadlineMs: d.Int(), model: d.Uint(), modelCap: int(min(d.Uint(), MaxCap)),
		})
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("admission: connection record: %w", err)
	}
	return nil
}

// encode appends r to buf[:0].
func (r *connRecord) encode(buf []byte) []byte {
	e := state.NewEncoder(buf, connKind, codecV1)
	e.Uint(r.nextID).Uint(uint64(len(r.leases)))
	for i := range r.leases {
		l := &r.leases[i]
		e.Uint(l.id).Int(l.deadlineMs).Uint(l.model)
	}
	e.Uint(uint64(len(r.tickets)))
	for i := range r.tickets {
		t := &r.tickets[i]
		e.Uint(t.id).Int(t.enqueuedMs).Int(t.deadlineMs).Uint(t.model).Uint(uint64(t.modelCap))
	}
	return e.Bytes()
}

// prune drops leases and tickets whose deadline has passed and reports whether any went.
func (r *connRecord) prune(nowMs int64) bool {
	if !r.anyExpired(nowMs) {
		return false // the usual case: nothing to rewrite
	}
	nl, nt := len(r.leases), len(r.tickets)
	r.leases = pruneLeases(r.leases, nowMs)
	kept := r.tickets[:0]
	for _, t := range r.tickets {
		if t.deadlineMs > nowMs {
			kept = append(kept, t)
		}
	}
	r.tickets = kept
	return len(r.leases) != nl || len(r.tickets) != nt
}

// anyExpired reports whether a lease or ticket's deadline has passed.
func (r *connRecord) anyExpired(nowMs int64) bool {
	for i := range r.leases {
		if r.leases[i].deadlineMs <= nowMs {
			return true
		}
	}
	for i := range r.tickets {
		if r.tickets[i].deadlineMs <= nowMs {
			return true
		}
	}
	return false
}

// findTicket returns the index of ticket id, or -1.
func (r *connRecord) findTicket(id uint64) int {
	for i := range r.tickets {
		if r.tickets[i].id == id {
			return i
		}
	}
	return -1
}

// insertTicket puts t back at its FIFO place (by enqueue time, then id) and returns it. It
// is used only when a live ticket went missing because its record was lost.
func (r *connRecord) insertTicket(t ticket) int {
	at := len(r.tickets)
	for i := range r.tickets {
		o := &r.tickets[i]
		if o.enqueuedMs > t.enqueuedMs || (o.enqueuedMs == t.enqueuedMs && o.id > t.id) {
			at = i
			break
		}
	}
	r.tickets = append(r.tickets, ticket{})
	copy(r.tickets[at+1:], r.tickets[at:])
	r.tickets[at] = t
	return at
}

// removeTicket deletes the ticket at index i, keeping FIFO order.
func (r *connRecord) removeTicket(i int) {
	r.tickets = append(r.tickets[:i], r.tickets[i+1:]...)
}

// removeLease deletes lease id and reports whether it was there.
func (r *connRecord) removeLease(id uint64) bool {
	var found bool
	r.leases, found = dropLease(r.leases, id)
	return found
}

// turn decides whether the request at queue position pos (len(tickets) for a newcomer
// behind everyone) may take a slot now. The queue is granted in FIFO order: each older
// ticket that fits reserves its slot first, and a ticket blocked only by its own model's cap
// does not hold back younger tickets for other models. connCap 0 means no connection cap;
// modelCap 0 means no cap on the request's model. use is scratch memory.
func (r *connRecord) turn(connCap, pos int, model uint64, modelCap int, use *[]modelUse) bool {
	ok, _ := r.turnBlocked(connCap, pos, model, modelCap, use)
	return ok
}

// turnBlocked is turn that also says what refuses a request that may not go now:
// modelBound when the connection has room and only the model's cap is full (the per-model
// gate, guide §4), false when the connection's own cap is full (the request queue, §5).
func (r *connRecord) turnBlocked(connCap, pos int, model uint64, modelCap int, use *[]modelUse) (ok, modelBound bool) {
	u := (*use)[:0]
	connUsed := len(r.leases)
	for i := range r.leases {
		u = addUse(u, r.leases[i].model)
	}
	for i := 0; i < pos && i < len(r.tickets); i++ {
		if connCap > 0 && connUsed >= connCap {
			break
		}
		t := &r.tickets[i]
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

// reset empties p, keeping its memory.
func (p *poolRecord) reset(nowMs int64) {
	p.nextID = seedID(nowMs)
	p.contendedUntilMs = 0
	p.leases = p.leases[:0]
}

// decode reads b into p (reusing p's memory).
func (p *poolRecord) decode(b []byte) error {
	d := state.NewDecoder(b, poolKind, codecV1)
	p.nextID = d.Uint()
	p.contendedUntilMs = d.Int()
	n := d.Uint()
	if n > uint64(len(b)) {
		return fmt.Errorf("admission: %w: %d leases in %d bytes", state.ErrCorrupt, n, len(b))
	}
	p.leases = p.leases[:0]
	for i := uint64(0); i < n; i++ {
		p.leases = append(p.leases, lease{id: d.Uint(), deadlineMs: d.Int()})
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("admission: pool record: %w", err)
	}
	return nil
}

// encode appends p to buf[:0].
func (p *poolRecord) encode(buf []byte) []byte {
	e := state.NewEncoder(buf, poolKind, codecV1)
	e.Uint(p.nextID).Int(p.contendedUntilMs).Uint(uint64(len(p.leases)))
	for i := range p.leases {
		e.Uint(p.leases[i].id).Int(p.leases[i].deadlineMs)
	}
	return e.Bytes()
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

func dropLease(ls []lease, id uint64) ([]lease, bool) {
	for i := range ls {
		if ls[i].id == id {
			return append(ls[:i], ls[i+1:]...), true
		}
	}
	return ls, false
}

// hashModel is FNV-1a (64 bit) of a model name: a compact, allocation-free tag for the
// per-model count inside a connection record.
func hashModel(model string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(model); i++ {
		h ^= uint64(model[i])
		h *= 1099511628211
	}
	return h
}
