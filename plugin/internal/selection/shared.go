package selection

import (
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Shared-data records (state codec kinds state.KindSelectionCounter and
// state.KindSelectionDeck, version 1):
//
//	round-robin counter  'R' 1: next turn (uint)
//	strict-random deck   'K' 1: targets (uint), last drawn Index + 1 (uint, 0 = none),
//	                            count (uint), Indexes drawn this cycle (uint each)
const (
	kindCounter   = state.KindSelectionCounter
	kindDeck      = state.KindSelectionDeck
	recordVersion = 1
)

// orderRoundRobin rotates the candidates so that turn mod n leads. With advance, the turn
// comes from the route's shared counter, incremented with CAS so that every worker's
// requests together take consecutive turns; without, the counter is only read. When
// shared data fails, the worker's own counter stands in.
func (s *Selector) orderRoundRobin(c *Combo, cands []Candidate, advance bool) (degraded error) {
	var turn uint64
	var err error
	if advance {
		turn, err = s.takeTurn(c)
	} else {
		turn, err = s.peekTurn(c)
	}
	if err != nil {
		turn = c.localTurn
		if advance {
			c.localTurn++
		}
		degraded = err
	}
	rotateLeft(cands, int(turn%uint64(len(cands))))
	return degraded
}

func decodeTurn(b []byte, found bool) uint64 {
	if !found {
		return 0
	}
	d := state.NewDecoder(b, kindCounter, recordVersion)
	turn := d.Uint()
	if d.Err() != nil {
		return 0 // corrupt: start over
	}
	return turn
}

func (s *Selector) takeTurn(c *Combo) (uint64, error) {
	if _, err := state.Update(s.store, c.counterKey, s.turnUpdate); err != nil {
		return 0, fmt.Errorf("selection: round-robin turn of %q: %w", c.cfg.Name, err)
	}
	return s.turn, nil
}

// updateTurn is the CAS step of takeTurn: it takes the stored turn and stores the next.
// (Bound once as s.turnUpdate, with its result in s.turn, so a decision does not allocate
// a closure.)
func (s *Selector) updateTurn(cur []byte, found bool) ([]byte, state.Mutation, error) {
	s.turn = decodeTurn(cur, found)
	s.buf = state.NewEncoder(s.buf, kindCounter, recordVersion).Uint(s.turn + 1).Bytes()
	return s.buf, state.Write, nil
}

func (s *Selector) peekTurn(c *Combo) (uint64, error) {
	b, _, found, err := s.store.Get(c.counterKey)
	if err != nil {
		return 0, fmt.Errorf("selection: round-robin turn of %q: %w", c.cfg.Name, err)
	}
	return decodeTurn(b, found), nil
}

// orderStrictRandom draws without replacement, the same as dealing from a shuffled deck of
// the route's targets that every worker shares: the shared record lists the targets drawn
// in the current cycle. With draw, a random eligible target not drawn yet leads and joins
// the list; when every eligible target has been drawn, a new cycle starts (the list
// empties) and its first draw avoids the last target drawn whenever another is eligible,
// so no target is drawn twice in a row. The rest follow: targets not drawn yet first, then
// those already drawn this cycle, each group in random order. Without draw the record is
// only read. Cost is proportional to the eligible and drawn targets, not the configured
// ones.
func (s *Selector) orderStrictRandom(c *Combo, cands []Candidate, draw bool) (degraded, err error) {
	if err := s.checkDistinct(c, cands); err != nil {
		return nil, err
	}
	s.shuffle(cands) // "a random undrawn target" is the first undrawn one after this
	picked := -1
	if draw {
		s.drawCombo, s.drawCands = c, cands
		_, err = state.Update(s.store, c.deckKey, s.drawUpdate)
		picked = s.picked
		s.drawCombo, s.drawCands = nil, nil
	} else {
		var b []byte
		var found bool
		if b, _, found, err = s.store.Get(c.deckKey); err == nil {
			s.loadDrawn(c, b, found)
		}
	}
	if err != nil {
		s.clearDrawn()
		// Shared data failed: the shuffle above is the order.
		return fmt.Errorf("selection: strict-random deck of %q: %w", c.cfg.Name, err), nil
	}
	for i := range cands {
		cands[i].score = 1
		if s.isDrawn(int32(cands[i].Index)) {
			cands[i].score = 2
		}
	}
	if picked >= 0 {
		cands[picked].score = 0
	}
	s.clearDrawn()
	sortByScore(cands)
	return nil, nil
}

// updateDraw is the CAS step of a strict-random draw over s.drawCombo and s.drawCands; it
// leaves the drawn position in s.picked. (Bound once as s.drawUpdate so a decision does not
// allocate a closure.)
func (s *Selector) updateDraw(cur []byte, found bool) ([]byte, state.Mutation, error) {
	c, cands := s.drawCombo, s.drawCands
	last := s.loadDrawn(c, cur, found)
	s.picked = s.firstUndrawn(cands, -1)
	if s.picked < 0 { // cycle complete for every eligible target
		s.clearDrawn()
		if s.picked = s.firstUndrawn(cands, last); s.picked < 0 {
			s.picked = 0 // the last target drawn is the only one eligible
		}
	}
	idx := int32(cands[s.picked].Index)
	s.markDrawn(idx)
	e := state.NewEncoder(s.buf, kindDeck, recordVersion).
		Uint(uint64(c.cfg.Targets)).Uint(uint64(idx) + 1).Uint(uint64(len(s.drawn)))
	for _, d := range s.drawn {
		e.Uint(uint64(d))
	}
	s.buf = e.Bytes()
	return s.buf, state.Write, nil
}

// checkDistinct rejects a candidate list that names one Index twice.
func (s *Selector) checkDistinct(c *Combo, cands []Candidate) error {
	s.growBits(c.cfg.Targets)
	dup := -1
	for i := range cands {
		idx := cands[i].Index
		if s.listed[idx/64]&(1<<(idx%64)) != 0 {
			dup = idx
			break
		}
		s.listed[idx/64] |= 1 << (idx % 64)
	}
	for i := range cands {
		idx := cands[i].Index
		s.listed[idx/64] &^= 1 << (idx % 64)
	}
	if dup >= 0 {
		return fmt.Errorf("%w: route %q lists index %d twice", ErrBadCandidate, c.cfg.Name, dup)
	}
	return nil
}

func (s *Selector) growBits(targets int) {
	if words := (targets + 63) / 64; len(s.drawnBits) < words {
		s.drawnBits = make([]uint64, words)
		s.listed = make([]uint64, words)
	}
}

func (s *Selector) isDrawn(idx int32) bool { return s.drawnBits[idx/64]&(1<<(idx%64)) != 0 }

func (s *Selector) markDrawn(idx int32) {
	s.drawnBits[idx/64] |= 1 << (idx % 64)
	s.drawn = append(s.drawn, idx)
}

// clearDrawn empties the drawn list and its bits (kept all zero between decisions).
func (s *Selector) clearDrawn() {
	for _, idx := range s.drawn {
		s.drawnBits[idx/64] &^= 1 << (idx % 64)
	}
	s.drawn = s.drawn[:0]
}

// firstUndrawn returns the position of the first candidate not drawn this cycle whose
// Index is not except, or -1.
func (s *Selector) firstUndrawn(cands []Candidate, except int32) int {
	for i := range cands {
		if idx := int32(cands[i].Index); idx != except && !s.isDrawn(idx) {
			return i
		}
	}
	return -1
}

// loadDrawn decodes the stored cycle into the drawn list and returns the last Index drawn
// (-1 for none). A missing, corrupt or stale (other target count) record reads as a fresh
// cycle.
func (s *Selector) loadDrawn(c *Combo, b []byte, found bool) (last int32) {
	s.clearDrawn()
	if !found {
		return -1
	}
	targets := uint64(c.cfg.Targets)
	// Decoder.Err also reports unread bytes, so it is checked once, after the last field.
	// A failed read returns 0, which the checks below cannot tell from a real 0, but the
	// final check catches it.
	d := state.NewDecoder(b, kindDeck, recordVersion)
	stored, lastPlusOne, n := d.Uint(), d.Uint(), d.Uint()
	if stored != targets || lastPlusOne > targets || n > targets {
		return -1
	}
	for i := uint64(0); i < n; i++ {
		idx := d.Uint()
		if idx >= targets || s.isDrawn(int32(idx)) {
			s.clearDrawn()
			return -1
		}
		s.markDrawn(int32(idx))
	}
	if d.Err() != nil {
		s.clearDrawn()
		return -1
	}
	return int32(lastPlusOne) - 1
}
