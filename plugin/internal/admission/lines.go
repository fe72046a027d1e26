package admission

import "time"

// line is one Admitter's FIFO of waiting requests for one gate and one model (the package
// doc, "Queues"). Tickets join at the back in enqueue order; within a line the wait
// deadlines are in order too (one gate, one maxWait), so the first live waiter is the one
// whose wait ends first. A waiter that leaves from the middle (its client went away) is
// marked gone and skipped; the front is compacted as it advances.
type line struct {
	owner    *Admitter
	gate     *Gate
	model    uint64
	modelCap int
	win      int // how many of its first waiters the line publishes (Gate.window)
	// others: at the head's last poll other lanes waited too, so the next poll reads the
	// ticket record first (a hint: a wrong one costs a Get, or a second read of the
	// lease record).
	others bool
	q      []waiter
	head   int // q[:head] are gone
	live   int
}

// maxKeptLine bounds the waiters' memory an emptied line keeps for reuse.
const maxKeptLine = 1024

type waiter struct {
	seq        uint64 // the Admitter's own sequence (lines are sorted by it)
	order      uint64 // its place in the FIFO order across workers (record.go)
	enqMs      int64
	deadlineMs int64
	user       any
	modelBound bool // when last polled, only the model's cap held it back
	gone       bool
}

// lineFor returns the Admitter's line for model on g, making it (or reusing an empty one)
// if there is none.
func (a *Admitter) lineFor(g *Gate, model uint64, modelCap int) *line {
	var empty *line
	for _, ln := range a.lines {
		if ln.gate == g && ln.model == model {
			ln.modelCap = modelCap
			return ln
		}
		if empty == nil && ln.live == 0 {
			empty = ln
		}
	}
	if empty == nil {
		empty = &line{owner: a}
		a.lines = append(a.lines, empty)
	}
	empty.gate, empty.model, empty.modelCap, empty.win = g, model, modelCap, g.window(modelCap)
	empty.q, empty.head, empty.live = empty.q[:0], 0, 0
	return empty
}

// push adds w at the back.
func (l *line) push(w waiter) {
	l.q = append(l.q, w)
	l.live++
}

// front returns the first live waiter, or nil.
func (l *line) front() *waiter {
	for i := l.head; i < len(l.q); i++ {
		if !l.q[i].gone {
			return &l.q[i]
		}
	}
	return nil
}

// find returns the index of the live waiter seq, or -1. Sequence numbers grow along the
// line, so it is a binary search.
func (l *line) find(seq uint64) int {
	lo, hi := l.head, len(l.q)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.q[m].seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(l.q) && l.q[lo].seq == seq && !l.q[lo].gone {
		return lo
	}
	return -1
}

// inWindow reports whether the live waiter at index i is among the first win.
func (l *line) inWindow(i int) bool {
	n := 0
	for j := l.head; j < i; j++ {
		if !l.q[j].gone {
			if n++; n >= l.win {
				return false
			}
		}
	}
	return l.win > 0
}

// remove takes the live waiter at index i out and reports whether it was published.
func (l *line) remove(i int) (published bool) {
	published = l.inWindow(i)
	l.q[i].gone, l.q[i].user = true, nil
	l.live--
	for l.head < len(l.q) && l.q[l.head].gone {
		l.head++
	}
	if l.head == len(l.q) {
		l.q, l.head = l.q[:0], 0
		if cap(l.q) > maxKeptLine {
			l.q = nil // a burst's memory does not stay with the line
		}
	} else if l.head >= 64 && l.head*2 >= len(l.q) {
		n := copy(l.q, l.q[l.head:])
		clear(l.q[n:])
		l.q, l.head = l.q[:n], 0
	}
	return published
}

// published appends the line's first win live waiters whose wait has not ended at nowMs
// to out.
func (l *line) published(out []waiting, lane, owner uint64, nowMs int64) []waiting {
	n := 0
	for i := l.head; i < len(l.q) && n < l.win; i++ {
		w := &l.q[i]
		if w.gone || w.deadlineMs <= nowMs {
			continue
		}
		out = append(out, waiting{order: w.order, lane: lane, model: l.model, modelCap: l.modelCap,
			deadlineMs: w.deadlineMs, owner: owner})
		n++
	}
	return out
}

// waitingAt counts the line's live waiters whose wait has not ended at nowMs. The deadlines
// are in line order, so the ended ones are at the front (their streams hear of it when
// next polled).
func (l *line) waitingAt(nowMs int64) int {
	n := l.live
	for i := l.head; i < len(l.q) && n > 0; i++ {
		w := &l.q[i]
		if w.gone {
			continue
		}
		if w.deadlineMs > nowMs {
			break
		}
		n--
	}
	return n
}

// lastDeadline is the wait deadline of the line's newest live waiter (0 if none).
func (l *line) lastDeadline() int64 {
	for i := len(l.q) - 1; i >= l.head; i-- {
		if !l.q[i].gone {
			return l.q[i].deadlineMs
		}
	}
	return 0
}

// ticket is the handle of the waiter w of line l.
func (l *line) ticket(w *waiter) Ticket {
	return Ticket{gate: l.gate, line: l, seq: w.seq, model: l.model, modelCap: l.modelCap,
		Enqueued: time.UnixMilli(w.enqMs), Deadline: time.UnixMilli(w.deadlineMs), ModelBound: w.modelBound}
}

// Heads calls visit with the head of each of the Admitter's lines for the gate whose ID is
// gate (0: every gate), then with the line's next head for as long as the visit moves the
// line on (the head was granted, refused, or left), so one call serves every head that can
// go. It is the only polling the queue needs: a waiter behind a live head of its own line
// cannot be granted before it (same gate, same model, older), so it is not asked.
func (a *Admitter) Heads(gate uint64, visit func(t Ticket, user any)) {
	for i := 0; i < len(a.lines); i++ {
		ln := a.lines[i]
		if ln.live == 0 || (gate != 0 && ln.gate.id != gate) {
			continue
		}
		g, model := ln.gate, ln.model
		for budget := ln.live + 1; budget > 0; budget-- {
			w := ln.front()
			if w == nil {
				break
			}
			seq := w.seq
			visit(ln.ticket(w), w.user)
			if f := ln.front(); f == nil || f.seq == seq || ln.gate != g || ln.model != model {
				break // empty, the head still waits, or the line was reused meanwhile
			}
		}
	}
}

// Waiting reports whether any request waits in the Admitter's lines.
func (a *Admitter) Waiting() bool {
	for _, ln := range a.lines {
		if ln.live > 0 {
			return true
		}
	}
	return false
}

// Attach sets the value Heads hands back with t (the filter's stream).
func (a *Admitter) Attach(t Ticket, user any) {
	if l := t.line; a.holds(t) {
		if i := l.find(t.seq); i >= 0 {
			l.q[i].user = user
		}
	}
}

// holds reports whether t is a ticket of one of the Admitter's lines (a ticket belongs to
// the VM whose request waits).
func (a *Admitter) holds(t Ticket) bool {
	return t.line != nil && t.line.owner == a && t.line.gate == t.gate && t.gate != nil
}

// own appends the published tickets of the Admitter's lines for g's connection to out (a
// line belongs to one Gate, but a policy update can make two gates of one connection).
func (a *Admitter) own(g *Gate, out []waiting, nowMs int64) []waiting {
	owner := a.node.owner()
	for _, ln := range a.lines {
		if ln.live > 0 && ln.gate.id == g.id {
			out = ln.published(out, a.lane, owner, nowMs)
		}
	}
	return out
}

// localWaiting returns how many requests wait in the Admitter's lines for g's connection at
// nowMs, and the latest of their wait deadlines.
func (a *Admitter) localWaiting(g *Gate, nowMs int64) (count int, untilMs int64) {
	for _, ln := range a.lines {
		if ln.live > 0 && ln.gate.id == g.id {
			if n := ln.waitingAt(nowMs); n > 0 {
				count += n
				untilMs = max(untilMs, ln.lastDeadline())
			}
		}
	}
	return count, untilMs
}
