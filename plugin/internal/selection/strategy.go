// Package selection orders a route's eligible targets by strategy (priority, weighted,
// round-robin, fill-first, random, strict-random, least-used, p2c), honouring a session pin.
package selection

import (
	"fmt"
	"strings"
)

// Strategy is how a route chooses among its eligible candidates.
type Strategy uint8

// The strategies. The zero value is Priority.
const (
	// Priority takes the first eligible candidate in configured order.
	Priority Strategy = iota
	// Weighted spreads requests in proportion to Candidate.Weight with smooth weighted
	// round-robin (each worker interleaves evenly, never bursts one target).
	Weighted
	// RoundRobin rotates through the eligible candidates with a counter shared by every
	// worker in shared data.
	RoundRobin
	// FillFirst sticks to the first eligible candidate until it is at capacity.
	FillFirst
	// Random picks uniformly at random.
	Random
	// StrictRandom draws from a shuffled deck shared by every worker: each target once per
	// cycle, and no immediate repeat across cycles.
	StrictRandom
	// LeastUsed takes the candidate with the fewest in-flight requests.
	LeastUsed
	// P2C compares two random candidates on in-flight load, soft penalties and, when
	// enabled, the latency/error term, and takes the lighter.
	P2C
)

var strategyNames = [...]string{
	Priority:     "priority",
	Weighted:     "weighted",
	RoundRobin:   "round-robin",
	FillFirst:    "fill-first",
	Random:       "random",
	StrictRandom: "strict-random",
	LeastUsed:    "least-used",
	P2C:          "p2c",
}

// Strategies lists every strategy, in declaration order.
var Strategies = []Strategy{Priority, Weighted, RoundRobin, FillFirst, Random, StrictRandom, LeastUsed, P2C}

// String returns the policy name of the strategy.
func (s Strategy) String() string {
	if int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// ParseStrategy reads a policy strategy name (exact, lower case, e.g. "round-robin").
func ParseStrategy(name string) (Strategy, error) {
	for i, n := range strategyNames {
		if n == name {
			return Strategy(i), nil
		}
	}
	return 0, fmt.Errorf("selection: unknown strategy %q (want one of %s)", name, strings.Join(strategyNames[:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (s Strategy) MarshalText() ([]byte, error) {
	if int(s) >= len(strategyNames) {
		return nil, fmt.Errorf("selection: unknown strategy %d", uint8(s))
	}
	return []byte(strategyNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Strategy) UnmarshalText(text []byte) error {
	v, err := ParseStrategy(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
