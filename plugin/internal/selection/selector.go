package selection

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/spillwayproxy/spillway/plugin/internal/latency"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Config wires a Selector to its worker's environment.
type Config struct {
	// Store is shared data; RoundRobin and StrictRandom keep their cross-worker state in
	// it. Required.
	Store state.Store
	// Clock dates the latency windows P2C reads. Required when Latency is set.
	Clock state.Clock
	// Random drives Random, StrictRandom shuffles, LeastUsed ties and P2C draws. Use
	// NewSeededSource in the filter and a fixed seed in tests. Required.
	Random rand.Source
	// Latency holds the worker's TTFB/outcome windows (nil: P2C uses load only).
	Latency *latency.Tracker
	// LatencyWeight is guide §2's p2cLatency.weight, clamped to 0..20; 0 turns the term off.
	LatencyWeight int
}

// Selector orders eligible candidates. One per worker VM; not safe for concurrent use.
type Selector struct {
	store         state.Store
	clock         state.Clock
	rng           *rand.Rand
	tracker       *latency.Tracker
	latencyWeight int

	drawn     []int32  // strict-random scratch: Indexes drawn this cycle
	drawnBits []uint64 // strict-random scratch: the same as a bitmap, all zero between calls
	listed    []uint64 // strict-random scratch: duplicate check, all zero between calls
	buf       []byte   // record encoding scratch

	// CAS steps bound once (see updateTurn, updateDraw) and their inputs and results.
	turnUpdate, drawUpdate state.UpdateFunc
	turn                   uint64
	drawCombo              *Combo
	drawCands              []Candidate
	picked                 int
}

// New returns a Selector for cfg.
func New(cfg Config) (*Selector, error) {
	if cfg.Store == nil {
		return nil, errors.New("selection: config needs a Store")
	}
	if cfg.Random == nil {
		return nil, errors.New("selection: config needs a Random source")
	}
	if cfg.Latency != nil && cfg.Clock == nil {
		return nil, errors.New("selection: config with Latency needs a Clock")
	}
	s := &Selector{
		store:         cfg.Store,
		clock:         cfg.Clock,
		rng:           rand.New(cfg.Random),
		tracker:       cfg.Latency,
		latencyWeight: latency.ClampWeight(cfg.LatencyWeight),
	}
	s.turnUpdate, s.drawUpdate = s.updateTurn, s.updateDraw
	return s, nil
}

// Request asks for an order of one route's eligible candidates.
type Request struct {
	// Combo is the route's prepared state (NewCombo).
	Combo *Combo
	// Candidates are the eligible candidates; Order reorders them in place, so the caller
	// passes a scratch slice it owns and reuses.
	Candidates []Candidate
	// Pin is the session's pinned connection, if any (package affinity).
	Pin Pin
}

// Decision reports how an order came about.
type Decision struct {
	// Pinned says the session pin matched an eligible candidate and leads the order.
	Pinned bool
	// Degraded is set when shared data could not be read or written: the order then comes
	// from the worker's own state (local rotation, or a shuffle) and is still usable. For
	// logs and counters; it is not a reason to fail the request.
	Degraded error
}

// Order reorders req.Candidates in place: the first is the pick, the rest are the order
// for same-request failover, in the strategy's order. A matching session pin leads, and the
// rest follow in strategy order without advancing the route's shared rotation or deck.
// The error reports invalid input (no candidates, an Index out of range); the order is
// then unspecified.
func (s *Selector) Order(req Request) (Decision, error) {
	c, cands := req.Combo, req.Candidates
	if c == nil {
		return Decision{}, fmt.Errorf("%w: nil combo", ErrBadCombo)
	}
	if len(cands) == 0 {
		return Decision{}, fmt.Errorf("%w: route %q", ErrNoCandidates, c.cfg.Name)
	}
	for i := range cands {
		if idx := cands[i].Index; idx < 0 || idx >= c.cfg.Targets {
			return Decision{}, fmt.Errorf("%w: route %q candidate %s/%s index %d outside 0..%d",
				ErrBadCandidate, c.cfg.Name, cands[i].Provider, cands[i].Connection, idx, c.cfg.Targets-1)
		}
	}
	if i := findPin(cands, req.Pin); i >= 0 {
		if c.cfg.Strategy == RoundRobin {
			// The rest keep the rotation's order over the whole list, read, not taken.
			degraded := s.orderRoundRobin(c, cands, false)
			moveToFront(cands, findPin(cands, req.Pin))
			return Decision{Pinned: true, Degraded: degraded}, nil
		}
		moveToFront(cands, i)
		degraded, err := s.orderRest(c, cands[1:])
		return Decision{Pinned: true, Degraded: degraded}, err
	}
	var degraded, err error
	switch c.cfg.Strategy {
	case Weighted:
		s.orderWeighted(c, cands)
	case RoundRobin:
		degraded = s.orderRoundRobin(c, cands, true)
	case StrictRandom:
		degraded, err = s.orderStrictRandom(c, cands, true)
	default:
		degraded, err = s.orderRest(c, cands)
	}
	return Decision{Degraded: degraded}, err
}

// findPin returns the position of the pinned candidate, or -1.
func findPin(cands []Candidate, pin Pin) int {
	if pin.IsZero() {
		return -1
	}
	for i := range cands {
		if cands[i].Connection == pin.Connection && cands[i].Provider == pin.Provider {
			return i
		}
	}
	return -1
}

// orderRest orders candidates by strategy without advancing any shared or smooth state.
func (s *Selector) orderRest(c *Combo, cands []Candidate) (degraded, err error) {
	if len(cands) < 2 {
		return nil, nil
	}
	switch c.cfg.Strategy {
	case Priority:
	case Weighted:
		sortByWeight(cands)
	case RoundRobin: // not reached: Order rotates the whole list for a pinned request
		degraded = s.orderRoundRobin(c, cands, false)
	case FillFirst:
		orderFillFirst(cands)
	case Random:
		s.shuffle(cands)
	case StrictRandom:
		return s.orderStrictRandom(c, cands, false)
	case LeastUsed:
		s.orderLeastUsed(cands)
	case P2C:
		s.orderP2C(cands)
	}
	return degraded, nil
}

// orderFillFirst keeps configured order but moves candidates at capacity behind the rest.
func orderFillFirst(cands []Candidate) {
	for i := range cands {
		cands[i].score = 0
		if limit := cands[i].MaxConcurrent; limit > 0 && cands[i].InFlight >= limit {
			cands[i].score = 1
		}
	}
	sortByScore(cands)
}

// orderWeighted picks with smooth weighted round-robin (each eligible candidate gains its
// weight, the highest current weight wins and pays the eligible total), then orders the
// rest by weight, heaviest first.
func (s *Selector) orderWeighted(c *Combo, cands []Candidate) {
	var total int64
	best := -1
	for i := range cands {
		w := weightOf(cands[i])
		if w == 0 {
			continue
		}
		cur := &c.smooth[cands[i].Index]
		*cur += w
		total += w
		if best < 0 || *cur > c.smooth[cands[best].Index] {
			best = i
		}
	}
	if best < 0 { // every weight is 0: configured order
		return
	}
	c.smooth[cands[best].Index] -= total
	moveToFront(cands, best)
	sortByWeight(cands[1:])
}

func weightOf(c Candidate) int64 { return int64(min(max(c.Weight, 0), MaxWeight)) }

func sortByWeight(cands []Candidate) {
	for i := range cands {
		cands[i].score = -weightOf(cands[i])
	}
	sortByScore(cands)
}

// orderLeastUsed orders by in-flight count, random among equals.
func (s *Selector) orderLeastUsed(cands []Candidate) {
	s.shuffle(cands)
	for i := range cands {
		cands[i].score = int64(clampLoad(cands[i].InFlight))
	}
	sortByScore(cands)
}

func clampLoad(v int) int { return min(max(v, 0), maxLoad) }

func sortByScore(cands []Candidate) {
	slices.SortStableFunc(cands, func(a, b Candidate) int { return cmp.Compare(a.score, b.score) })
}

func (s *Selector) shuffle(cands []Candidate) {
	for i := len(cands) - 1; i > 0; i-- {
		j := s.rng.IntN(i + 1)
		cands[i], cands[j] = cands[j], cands[i]
	}
}

// moveToFront moves cands[i] to the front, keeping the others in order.
func moveToFront(cands []Candidate, i int) {
	if i == 0 {
		return
	}
	picked := cands[i]
	copy(cands[1:i+1], cands[:i])
	cands[0] = picked
}

// rotateLeft makes cands[k] the first, wrapping the ones before it to the end.
func rotateLeft(cands []Candidate, k int) {
	if k == 0 {
		return
	}
	slices.Reverse(cands[:k])
	slices.Reverse(cands[k:])
	slices.Reverse(cands)
}
