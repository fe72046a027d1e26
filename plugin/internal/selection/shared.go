package selection

import (
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Shared-data records (state codec kinds, version 1):
//
//	round-robin counter  'R' 1: next turn (uint)
//	strict-random deck   'K' 1: targets (uint), last drawn Index + 1 (uint, 0 = none),
//	                            remaining count (uint), remaining Indexes (uint each)
const (
	kindCounter   = 'R'
	kindDeck      = 'K'
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
	var turn uint64
	_, err := state.Update(s.store, c.counterKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		turn = decodeTurn(cur, found)
		s.buf = state.NewEncoder(s.buf, kindCounter, recordVersion).Uint(turn + 1).Bytes()
		return s.buf, state.Write, nil
	})
	if err != nil {
		return 0, fmt.Errorf("selection: round-robin turn of %q: %w", c.cfg.Name, err)
	}
	return turn, nil
}

func (s *Selector) peekTurn(c *Combo) (uint64, error) {
	b, _, found, err := s.store.Get(c.counterKey)
	if err != nil {
		return 0, fmt.Errorf("selection: round-robin turn of %q: %w", c.cfg.Name, err)
	}
	return decodeTurn(b, found), nil
}

// orderStrictRandom orders by the route's shared deck. With draw, the first remaining
// eligible target of the deck is drawn (removed) and leads; when no remaining target is
// eligible a new cycle starts with a fresh shuffle of every target whose first eligible
// entry is not the last one drawn. The rest follow in deck order, then the eligible
// targets already drawn this cycle, in random order. Without draw the deck is only read.
func (s *Selector) orderStrictRandom(c *Combo, cands []Candidate, draw bool) (degraded, err error) {
	s.shuffle(cands) // targets outside the deck's order end up in random order
	if err := s.markEligible(c, cands); err != nil {
		return nil, err
	}
	defer s.unmarkEligible(cands)

	drawn := int32(-1)
	if draw {
		_, err = state.Update(s.store, c.deckKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
			last := s.loadDeck(c, cur, found)
			pos := s.firstEligible(0)
			if pos < 0 {
				s.newCycle(c, last)
				pos = s.firstEligible(0)
			}
			drawn = s.deck[pos]
			s.deck = append(s.deck[:pos], s.deck[pos+1:]...)
			e := state.NewEncoder(s.buf, kindDeck, recordVersion).
				Uint(uint64(c.cfg.Targets)).Uint(uint64(drawn) + 1).Uint(uint64(len(s.deck)))
			for _, idx := range s.deck {
				e.Uint(uint64(idx))
			}
			s.buf = e.Bytes()
			return s.buf, state.Write, nil
		})
	} else {
		var b []byte
		var found bool
		if b, _, found, err = s.store.Get(c.deckKey); err == nil {
			s.loadDeck(c, b, found)
		}
	}
	if err != nil {
		// Shared data failed: the shuffle above is the order.
		return fmt.Errorf("selection: strict-random deck of %q: %w", c.cfg.Name, err), nil
	}

	unranked := int64(len(s.deck)) + 1
	for i := range cands {
		cands[i].score = unranked
	}
	for rank, idx := range s.deck {
		if p := s.mark[idx]; p != 0 {
			cands[p-1].score = int64(rank) + 1
		}
	}
	if drawn >= 0 {
		cands[s.mark[drawn]-1].score = 0
	}
	sortByScore(cands)
	return nil, nil
}

// markEligible records each candidate's position by Index, rejecting duplicates.
func (s *Selector) markEligible(c *Combo, cands []Candidate) error {
	if len(s.mark) < c.cfg.Targets {
		s.mark = make([]int32, c.cfg.Targets)
	}
	for i := range cands {
		idx := cands[i].Index
		if s.mark[idx] != 0 {
			s.unmarkEligible(cands[:i])
			return fmt.Errorf("%w: route %q lists index %d twice", ErrBadCandidate, c.cfg.Name, idx)
		}
		s.mark[idx] = int32(i + 1)
	}
	return nil
}

func (s *Selector) unmarkEligible(cands []Candidate) {
	for i := range cands {
		s.mark[cands[i].Index] = 0
	}
}

// firstEligible returns the position of the first eligible deck entry from start, or -1.
func (s *Selector) firstEligible(start int) int {
	for i := start; i < len(s.deck); i++ {
		if s.mark[s.deck[i]] != 0 {
			return i
		}
	}
	return -1
}

// loadDeck decodes a stored deck into s.deck and returns the last drawn Index (-1 for
// none). A missing, corrupt or stale (other target count) deck reads as empty.
func (s *Selector) loadDeck(c *Combo, b []byte, found bool) (last int32) {
	s.deck = s.deck[:0]
	if !found {
		return -1
	}
	words := (c.cfg.Targets + 63) / 64
	if cap(s.seen) < words {
		s.seen = make([]uint64, words)
	}
	s.seen = s.seen[:words]
	clear(s.seen)
	targets := uint64(c.cfg.Targets)
	// Decoder.Err also reports unread bytes, so it is checked once, after the last field;
	// a failed read returns 0, which the range checks below cannot tell from a real 0, but
	// the final check catches it.
	d := state.NewDecoder(b, kindDeck, recordVersion)
	stored, lastPlusOne, n := d.Uint(), d.Uint(), d.Uint()
	if stored != targets || lastPlusOne > targets || n > targets {
		return -1
	}
	for i := uint64(0); i < n; i++ {
		idx := d.Uint()
		if idx >= targets || s.seen[idx/64]&(1<<(idx%64)) != 0 {
			s.deck = s.deck[:0]
			return -1
		}
		s.seen[idx/64] |= 1 << (idx % 64)
		s.deck = append(s.deck, int32(idx))
	}
	if d.Err() != nil {
		s.deck = s.deck[:0]
		return -1
	}
	return int32(lastPlusOne) - 1
}

// newCycle deals a fresh shuffled deck of every target, then, if its first eligible entry
// is the last target drawn and another eligible entry exists, swaps the two so no target
// is drawn twice in a row.
func (s *Selector) newCycle(c *Combo, last int32) {
	s.deck = s.deck[:0]
	for i := 0; i < c.cfg.Targets; i++ {
		s.deck = append(s.deck, int32(i))
	}
	for i := len(s.deck) - 1; i > 0; i-- {
		j := s.rng.IntN(i + 1)
		s.deck[i], s.deck[j] = s.deck[j], s.deck[i]
	}
	first := s.firstEligible(0)
	if first < 0 || s.deck[first] != last {
		return
	}
	if next := s.firstEligible(first + 1); next >= 0 {
		s.deck[first], s.deck[next] = s.deck[next], s.deck[first]
	}
}
