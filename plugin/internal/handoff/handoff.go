// Package handoff is what one request's Spillway instances tell each other through Envoy's
// filter state when the router's own retries fail over a request: the downstream instance's
// plan for the tries (Plan), and the record of the tries the upstream instances made so far
// (Tries). It encodes, decodes and checks them; it knows nothing of the ABI.
//
// An upstream HTTP filter reads and writes the downstream stream's filter state: properties
// resolve against the router's stream info (upstream_request.cc
// UpstreamFilterManager::streamInfo returns the router's callbacks()->streamInfo()), and
// proxy_set_property stores "wasm.<path>" there as a mutable value for the filter chain's
// life (source/extensions/common/wasm/context.cc Context::setProperty). So the downstream
// instance's plan is visible to every try, and each try's record to the next try and to
// the downstream instance's response and log callbacks. Both instances run the same policy
// (the same plugin configuration); a plan carries the policy's hash so that an instance on
// another policy refuses it instead of misreading its indices.
package handoff

import (
	"errors"
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// The filter-state names (proxy_set_property / proxy_get_property paths).
const (
	PlanProperty  = "spillway.plan"
	TriesProperty = "spillway.tries"
)

// Limits of what a record holds.
const (
	// MaxTargets bounds a plan's targets: the router is never asked for more tries.
	MaxTargets = 16
	// MaxTries bounds the tries recorded for one request.
	MaxTries = 32
	// MaxModelBytes bounds a model name (the requested one and each target's).
	MaxModelBytes = 256
)

// version is the records' encoding version (both kinds).
const version = 1

// ErrMalformed reports a record that cannot be decoded, or one that does not fit the
// policy the instance runs.
var ErrMalformed = errors.New("handoff: malformed record")

// ErrTooLarge reports a record over the limits above: it is not encoded.
var ErrTooLarge = errors.New("handoff: record over its limits")

// Target is one planned target: indices into the policy's providers and their
// connections, and the model to ask it for.
type Target struct {
	Provider   int    // index in policies.Resolved.Providers
	Connection int    // index in the provider's Connections
	Model      string // the upstream model
}

// Plan is what the downstream instance planned for the router's tries: the targets to try
// in order, one per try at most (a target the upstream instance cannot dispatch when its try
// comes is skipped for the next).
type Plan struct {
	PolicyHash uint64 // the policy the plan was made on
	Route      int    // index in policies.Resolved.Routes
	Model      string // the model the client asked for
	Stream     bool   // the request asked for a stream
	Targets    []Target
}

// Encode encodes the plan's record in buf's memory (which it reuses) and returns it.
func (p *Plan) Encode(buf []byte) ([]byte, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	e := state.NewEncoder(buf, state.KindHandoffPlan, version).
		Uint(p.PolicyHash).Uint(uint64(p.Route)).String(p.Model).Uint(b2u(p.Stream)).Uint(uint64(len(p.Targets)))
	for _, t := range p.Targets {
		e.Uint(uint64(t.Provider)).Uint(uint64(t.Connection)).String(t.Model)
	}
	return e.Bytes(), nil
}

// check says whether the plan can be encoded: within the limits, no negative index.
func (p *Plan) check() error {
	switch {
	case len(p.Targets) == 0 || len(p.Targets) > MaxTargets:
		return fmt.Errorf("%w: %d targets (1 to %d)", ErrTooLarge, len(p.Targets), MaxTargets)
	case len(p.Model) > MaxModelBytes:
		return fmt.Errorf("%w: a model of %d bytes (at most %d)", ErrTooLarge, len(p.Model), MaxModelBytes)
	case p.Route < 0 || p.Route > maxIndex:
		return fmt.Errorf("%w: route %d", ErrMalformed, p.Route)
	}
	for i, t := range p.Targets {
		switch {
		case t.Provider < 0 || t.Connection < 0 || t.Provider > maxIndex || t.Connection > maxIndex:
			return fmt.Errorf("%w: target %d is provider %d connection %d", ErrMalformed, i, t.Provider, t.Connection)
		case len(t.Model) > MaxModelBytes:
			return fmt.Errorf("%w: target %d's model of %d bytes (at most %d)", ErrTooLarge, i, len(t.Model), MaxModelBytes)
		}
	}
	return nil
}

// Decode reads a plan's record into p, reusing p.Targets' memory; on an error p is left
// empty.
func (p *Plan) Decode(b []byte) error {
	err := p.decode(b)
	if err != nil {
		*p = Plan{Targets: p.Targets[:0]}
	}
	return err
}

func (p *Plan) decode(b []byte) error {
	d := state.NewDecoder(b, state.KindHandoffPlan, version)
	hash, route, model, stream, n := d.Uint(), d.Uint(), d.String(), d.Uint(), d.Uint()
	if n > MaxTargets || route > maxIndex || stream > 1 || len(model) > MaxModelBytes {
		return fmt.Errorf("%w: plan: %d targets, route %d, stream %d, a model of %d bytes", ErrMalformed, n, route, stream, len(model))
	}
	targets := p.Targets[:0]
	for range n {
		t := Target{Provider: index(d.Uint()), Connection: index(d.Uint()), Model: d.String()}
		if t.Provider < 0 || t.Connection < 0 || len(t.Model) > MaxModelBytes {
			return fmt.Errorf("%w: plan: a target out of bounds", ErrMalformed)
		}
		targets = append(targets, t)
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: plan: %w", ErrMalformed, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: plan: no target", ErrMalformed)
	}
	*p = Plan{PolicyHash: hash, Route: int(route), Model: model, Stream: stream == 1, Targets: targets}
	return nil
}

// Fits checks the plan against the policy this instance runs: the same policy (hash), and
// every index within it.
func (p *Plan) Fits(hash uint64, res *policies.Resolved) error {
	if p.PolicyHash != hash {
		return fmt.Errorf("%w: the plan was made on another policy (hash %x, this one %x)", ErrMalformed, p.PolicyHash, hash)
	}
	if p.Route >= len(res.Routes) {
		return fmt.Errorf("%w: route %d of %d", ErrMalformed, p.Route, len(res.Routes))
	}
	for i, t := range p.Targets {
		if t.Provider >= len(res.Providers) || t.Connection >= len(res.Providers[t.Provider].Connections) {
			return fmt.Errorf("%w: target %d is provider %d connection %d, not in the policy", ErrMalformed, i, t.Provider, t.Connection)
		}
	}
	return nil
}

// Outcome is how a try ended, as far as its upstream instance knows.
type Outcome uint8

// The outcomes.
const (
	// Started: the try went upstream; its answer has not been seen (a try reset, timed out
	// or abandoned by the router ends here).
	Started Outcome = iota + 1
	// Retried: its answer failed and was marked retriable; the router tries again.
	Retried
	// Passed: its answer went downstream (a success, or a failure nothing is left for).
	Passed
	// Answered: the upstream instance answered the try itself (a local reply: final).
	Answered
)

var outcomeNames = [...]string{"", "started", "retried", "passed", "answered"}

func (o Outcome) String() string {
	if int(o) >= len(outcomeNames) || o == 0 {
		return fmt.Sprintf("Outcome(%d)", uint8(o))
	}
	return outcomeNames[o]
}

// Try is one try's record.
type Try struct {
	Attempt int     // the router's attempt number (upstream.request_attempt_count), from 1
	Target  int     // index in the plan's Targets (-1: no target could take the try)
	Outcome Outcome // how it ended
	Status  int     // the provider's status (0 before its headers or for a reset)
	// Leased: the try holds a concurrency lease that its on_done gives back; the downstream
	// instance gives back what an upstream on_done never ran for.
	Leased bool
}

// Tries are a request's tries so far, oldest first.
type Tries struct {
	List []Try
}

// Encode encodes the tries' record in buf's memory (which it reuses) and returns it.
func (t *Tries) Encode(buf []byte) ([]byte, error) {
	if len(t.List) > MaxTries {
		return nil, fmt.Errorf("%w: %d tries (at most %d)", ErrTooLarge, len(t.List), MaxTries)
	}
	for i, tr := range t.List {
		if tr.Attempt < 1 || tr.Attempt > maxIndex || tr.Target < -1 || tr.Target >= MaxTargets || tr.Outcome == 0 ||
			tr.Outcome > Answered || tr.Status < 0 || tr.Status > 999 {
			return nil, fmt.Errorf("%w: try %d: %+v", ErrMalformed, i, tr)
		}
	}
	e := state.NewEncoder(buf, state.KindHandoffTries, version).Uint(uint64(len(t.List)))
	for _, tr := range t.List {
		e.Uint(uint64(tr.Attempt)).Int(int64(tr.Target)).Uint(uint64(tr.Outcome)).Uint(uint64(tr.Status)).Uint(b2u(tr.Leased))
	}
	return e.Bytes(), nil
}

// Decode reads a tries record into t, reusing t.List's memory; on an error t is left
// empty.
func (t *Tries) Decode(b []byte) error {
	err := t.decode(b)
	if err != nil {
		t.List = t.List[:0]
	}
	return err
}

func (t *Tries) decode(b []byte) error {
	d := state.NewDecoder(b, state.KindHandoffTries, version)
	n := d.Uint()
	if n > MaxTries {
		return fmt.Errorf("%w: tries: %d (at most %d)", ErrMalformed, n, MaxTries)
	}
	list := t.List[:0]
	for range n {
		attempt, target, outcome, status, leased := d.Uint(), d.Int(), d.Uint(), d.Uint(), d.Uint()
		if attempt < 1 || attempt > maxIndex || target < -1 || target >= MaxTargets || outcome == 0 ||
			outcome > uint64(Answered) || status > 999 || leased > 1 {
			return fmt.Errorf("%w: tries: a try out of bounds", ErrMalformed)
		}
		list = append(list, Try{Attempt: int(attempt), Target: int(target), Outcome: Outcome(outcome), Status: int(status), Leased: leased == 1})
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: tries: %w", ErrMalformed, err)
	}
	t.List = list
	return nil
}

// Last returns the newest try, if any.
func (t *Tries) Last() (Try, bool) {
	if len(t.List) == 0 {
		return Try{}, false
	}
	return t.List[len(t.List)-1], true
}

// maxIndex bounds a decoded index (routes, providers, connections, attempts): far above any
// policy, and small enough for an int on every platform.
const maxIndex = 1 << 20

// index converts a decoded index, -1 when out of bounds.
func index(v uint64) int {
	if v > maxIndex {
		return -1
	}
	return int(v)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
