package selection

import (
	"errors"
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Soft penalties, in points (one point weighs as much as one in-flight request), that a
// caller may put in Candidate.Penalty to make p2c avoid a candidate it has not excluded.
// They stay above the largest latency/error term (P2CLatencyWeightMax = 20 points), as
// the guide requires (§2): latency never outweighs a quota problem. The values are Spillway's.
const (
	// PenaltyQuotaLocked marks a connection at its quota-share limit or quota-locked.
	PenaltyQuotaLocked = 50
	// PenaltyQuotaExhausted marks a connection whose quota is used up (but not excluded).
	PenaltyQuotaExhausted = 100
)

// Bounds on inputs. Values past them are clamped (weights, loads, penalties) or rejected
// (route shape).
const (
	// MaxTargets bounds ComboConfig.Targets.
	MaxTargets = 1 << 16
	// MaxComboNameLength bounds ComboConfig.Name in bytes.
	MaxComboNameLength = 256
	// MaxWeight clamps Candidate.Weight.
	MaxWeight = 1_000_000
	// maxLoad clamps Candidate.InFlight and Candidate.Penalty so scores cannot overflow.
	maxLoad = 1 << 30
)

// Errors for invalid input. Order wraps them with detail.
var (
	// ErrNoCandidates reports an empty eligible list: the caller answers with its own
	// "nothing eligible" reply before asking for an order.
	ErrNoCandidates = errors.New("selection: no eligible candidates")
	// ErrBadCandidate reports a candidate whose Index is outside the combo's targets, or
	// an Index given twice where the strategy keeps per-target state.
	ErrBadCandidate = errors.New("selection: bad candidate")
	// ErrBadCombo reports an invalid combo configuration.
	ErrBadCombo = errors.New("selection: bad combo")
)

// Candidate is one eligible target: a connection of a provider serving a model. The caller
// has already removed everything excluded (breaker, cooldowns, lockouts, terminal states).
type Candidate struct {
	// Provider is the provider id.
	Provider string
	// Connection is the connection (account/key) id.
	Connection string
	// Model is the upstream model the candidate would be sent.
	Model string
	// Index is the candidate's position in the combo's configured candidate list
	// (0 <= Index < ComboConfig.Targets). It identifies the target across requests and
	// workers for weighted and strict-random state.
	Index int
	// Weight is the Weighted share (clamped to 0..MaxWeight). Weight 0 is a standby: it
	// follows every positive weight and leads only when all weights are 0.
	Weight int
	// InFlight is the number of requests in flight on the candidate (LeastUsed, P2C,
	// FillFirst).
	InFlight int
	// MaxConcurrent is the candidate's concurrency cap for FillFirst (0 = no cap).
	MaxConcurrent int
	// Penalty is soft penalty points P2C adds to the candidate's load (PenaltyQuotaLocked,
	// PenaltyQuotaExhausted, or the caller's own).
	Penalty int

	score int64 // ordering scratch
}

// Pin names the connection a session is pinned to (see package affinity). The zero Pin
// pins nothing.
type Pin struct {
	// Provider is the pinned connection's provider id.
	Provider string
	// Connection is the pinned connection id.
	Connection string
}

// IsZero reports whether the pin pins nothing.
func (p Pin) IsZero() bool { return p.Connection == "" }

// ComboConfig describes one route (combo) for selection.
type ComboConfig struct {
	// Name identifies the route across workers; it keys the shared round-robin counter and
	// strict-random deck, so it must be stable and unique per route.
	Name string
	// Strategy is how the route chooses.
	Strategy Strategy
	// Targets is the number of configured candidates of the route (Candidate.Index range).
	Targets int
	// Namespace is the policy's state.NamespaceID: turns and decks are the policy's own
	// (state.KeyTurn, state.KeyDeck), never mixed with another policy's route of that name.
	Namespace string
}

// Combo is one worker's selection state for a route: its shared-data keys and the smooth
// weighted round-robin weights. Build one per configured route when the policy loads; it
// is not safe for concurrent use (each worker VM has its own).
type Combo struct {
	cfg        ComboConfig
	counterKey string  // shared round-robin turn counter
	deckKey    string  // shared strict-random deck
	smooth     []int64 // Weighted: current weight per Index
	localTurn  uint64  // RoundRobin fallback when shared data fails
}

// NewCombo validates cfg and prepares the route's selection state.
func NewCombo(cfg ComboConfig) (*Combo, error) {
	if cfg.Name == "" || len(cfg.Name) > MaxComboNameLength {
		return nil, fmt.Errorf("%w: name must be 1..%d bytes, got %d", ErrBadCombo, MaxComboNameLength, len(cfg.Name))
	}
	for i := 0; i < len(cfg.Name); i++ {
		if b := cfg.Name[i]; b < 0x20 || b == 0x7f {
			return nil, fmt.Errorf("%w: name %q has a control character", ErrBadCombo, cfg.Name)
		}
	}
	if int(cfg.Strategy) >= len(strategyNames) {
		return nil, fmt.Errorf("%w: %v", ErrBadCombo, cfg.Strategy)
	}
	if cfg.Targets < 1 || cfg.Targets > MaxTargets {
		return nil, fmt.Errorf("%w: targets must be 1..%d, got %d", ErrBadCombo, MaxTargets, cfg.Targets)
	}
	c := &Combo{
		cfg:        cfg,
		counterKey: state.KeyTurn.Key(cfg.Namespace, cfg.Name),
		deckKey:    state.KeyDeck.Key(cfg.Namespace, cfg.Name),
	}
	if cfg.Strategy == Weighted {
		c.smooth = make([]int64, cfg.Targets)
	}
	return c, nil
}

// Config returns the combo's configuration.
func (c *Combo) Config() ComboConfig { return c.cfg }
