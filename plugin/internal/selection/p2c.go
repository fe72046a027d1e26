package selection

import (
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/latency"
)

// orderP2C fills each position with a power-of-two-choices draw among the candidates not
// yet placed: two distinct random candidates, the lower score wins, the first drawn on a
// tie. A score is (InFlight + Penalty) points plus, when the latency weight is above 0,
// the pair's latency/error term (latency.PairTerm, at most weight points).
func (s *Selector) orderP2C(cands []Candidate) {
	if len(cands) < 2 {
		return
	}
	var now time.Time
	if s.latencyWeight > 0 && s.tracker != nil {
		now = s.clock.Now()
	}
	for k := 0; k < len(cands)-1; k++ {
		rest := cands[k:]
		i := s.rng.IntN(len(rest))
		j := s.rng.IntN(len(rest) - 1)
		if j >= i {
			j++
		}
		a, b := s.pairScores(&rest[i], &rest[j], now)
		winner := i
		if b < a {
			winner = j
		}
		rest[0], rest[winner] = rest[winner], rest[0]
	}
}

// pairScores returns both candidates' scores in milli-points.
func (s *Selector) pairScores(a, b *Candidate, now time.Time) (int64, int64) {
	scoreA := int64(clampLoad(a.InFlight)+clampLoad(a.Penalty)) * latency.MilliPoint
	scoreB := int64(clampLoad(b.InFlight)+clampLoad(b.Penalty)) * latency.MilliPoint
	if s.latencyWeight == 0 || s.tracker == nil {
		return scoreA, scoreB
	}
	// Prefer the connection + model windows; fall back to the connection windows when
	// either candidate has too few samples for its model.
	sa := s.tracker.Model(a.Provider, a.Connection, a.Model, now)
	sb := s.tracker.Model(b.Provider, b.Connection, b.Model, now)
	minSamples := s.tracker.MinSamples()
	if a.Model == "" || b.Model == "" || sa.Samples < minSamples || sb.Samples < minSamples {
		sa = s.tracker.Connection(a.Provider, a.Connection, now)
		sb = s.tracker.Connection(b.Provider, b.Connection, now)
	}
	ta, tb, _ := latency.PairTerm(s.latencyWeight, minSamples, sa, sb)
	return scoreA + ta, scoreB + tb
}
