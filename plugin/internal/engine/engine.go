// Package engine composes Spillway's resilience mechanisms into the decisions of one request
// — which targets are eligible, in what order, whether a target may be dispatched now — and
// records each attempt's outcome in every layer it concerns. It reads a resolved policy and
// depends only on a state.Store and a state.Clock, so it runs natively in tests and inside
// the filter unchanged.
package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/classify"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/latency"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/internal/providercooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/selection"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// Options are the engine's environment beyond the policy. (The request queue's environment
// layer, RATE_LIMIT_*, is already folded into the resolved policy by policies.Parse.)
type Options struct {
	// Random drives random strategies; nil seeds one from crypto/rand.
	Random rand.Source
}

// Engine holds one worker's view of a policy: per-provider and per-connection handles into
// the shared state, prepared once so the request path allocates as little as possible. An
// Engine is used by one worker at a time (Envoy runs a VM's callbacks one after another).
type Engine struct {
	res        *policies.Resolved
	store      state.Store
	clock      state.Clock
	breakers   *breaker.Breaker
	gate       *providercooldown.Gate
	admitter   *admission.Admitter
	selector   *selection.Selector
	affinity   *affinity.Table
	latency    *latency.Tracker
	classifier *classify.Classifier
	comboWait  combo.Config
	gateOn     bool // the opt-in provider cooldown gate

	providers []provider
	routes    []route
	routeOf   map[*policies.ResolvedRoute]int
}

// provider is one provider's prepared handles.
type provider struct {
	res      *policies.ResolvedProvider
	breaker  breaker.Provider
	gate     providercooldown.Entry
	cooldown *conncooldown.Tracker
	lockout  *lockout.Tracker
	conns    []connection
}

// connection is one connection's prepared handles.
type connection struct {
	res      *policies.ResolvedConnection
	cooldown conncooldown.Conn
	lockout  lockout.Conn
	gate     providercooldown.Entry
	admit    *admission.Gate
}

// route is one route's expanded candidate list (a target naming no connection stands for
// each of its provider's connections) and its selection state.
type route struct {
	res        *policies.ResolvedRoute
	combo      *selection.Combo
	candidates []candidateRef
	needsLoad  bool // the strategy reads in-flight counts
}

// candidateRef is one configured candidate of a route.
type candidateRef struct {
	provider   int
	connection int
	model      string // upstream model; "" = the requested model
	weight     int
}

// New prepares an engine for a validated policy.
func New(p *policies.Policy, store state.Store, clock state.Clock, opts Options) (*Engine, error) {
	res := p.Resolved()
	e := &Engine{
		res:      res,
		store:    store,
		clock:    clock,
		breakers: breaker.New(store, clock),
		gate:     providercooldown.New(store, clock),
		admitter: admission.New(store, clock),
		gateOn:   res.ProviderCooldownEnabled,
		comboWait: combo.Config{Enabled: res.ComboCooldownWait.Enabled, MaxWait: res.ComboCooldownWait.MaxWait,
			MaxAttempts: res.ComboCooldownWait.MaxAttempts, Budget: res.ComboCooldownWait.Budget},
		routeOf: make(map[*policies.ResolvedRoute]int, len(res.Routes)),
	}
	var err error
	lcfg := latency.DefaultConfig()
	lcfg.Samples, lcfg.Window = res.P2CLatency.Samples, res.P2CLatency.Window
	if e.latency, err = latency.NewTracker(lcfg); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	random := opts.Random
	if random == nil {
		random = selection.NewSeededSource()
	}
	if e.selector, err = selection.New(selection.Config{Store: store, Clock: clock, Random: random,
		Latency: e.latency, LatencyWeight: res.P2CLatency.Weight}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.affinity, err = affinity.New(store, clock, affinity.Config{TTL: res.SessionAffinityTTL}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.classifier, err = newClassifier(res); err != nil {
		return nil, err
	}
	e.providers = make([]provider, len(res.Providers))
	for i := range res.Providers {
		if err := e.prepareProvider(i); err != nil {
			return nil, err
		}
	}
	e.routes = make([]route, len(res.Routes))
	for i := range res.Routes {
		if err := e.prepareRoute(i); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Engine) prepareProvider(i int) error {
	rp := &e.res.Providers[i]
	pv := &e.providers[i]
	pv.res = rp
	fail := func(err error) error { return fmt.Errorf("engine: provider %q: %w", rp.ID, err) }

	bcfg, err := breakerConfig(rp)
	if err != nil {
		return fail(err)
	}
	if pv.breaker, err = breaker.NewProvider(rp.ID, bcfg); err != nil {
		return fail(err)
	}
	gcfg := providercooldown.Config{Enabled: e.gateOn, FailureThreshold: rp.ProviderCooldown.FailureThreshold,
		FailureWindow: rp.ProviderCooldown.FailureWindow, Cooldown: rp.ProviderCooldown.Cooldown,
		MinRetryCooldown: rp.ProviderCooldown.MinRetryCooldown, MaxRetryCooldown: rp.ProviderCooldown.MaxRetryCooldown}
	if pv.gate, err = providercooldown.ProviderEntry(rp.ID, gcfg); err != nil {
		return fail(err)
	}
	cc := rp.ConnectionCooldown
	pv.cooldown, err = conncooldown.New(e.store, e.clock, conncooldown.Config{BaseCooldown: cc.BaseCooldown,
		MaxBackoffSteps: cc.MaxBackoffSteps, MaxCooldown: cc.MaxCooldown, PreferRetryHint: cc.UseUpstreamRetryHints,
		ConcurrencyLimitCooldown: cc.ConcurrencyLimitCooldown, ExpiredRetryMax: cc.ExpiredRetryMax,
		RequestRejectedStreak: cc.RequestRejectedStreak, StreamStallCooldown: cc.StreamStallCooldown})
	if err != nil {
		return fail(err)
	}
	ml := e.res.ModelLockout
	lcfg := lockout.DefaultConfig(rp.Profile)
	lcfg.Enabled, lcfg.ErrorCodes = ml.Enabled, ml.ErrorCodes
	lcfg.BaseCooldown, lcfg.MaxCooldown, lcfg.MaxBackoffSteps = ml.BaseCooldown, ml.MaxCooldown, ml.MaxBackoffSteps
	lcfg.UseExponentialBackoff, lcfg.LongRetryCap = ml.UseExponentialBackoff, ml.LongRetryCap
	lcfg.QueueMaxWait = e.res.RequestQueue.MaxWait
	if len(rp.QuotaFamilies) > 0 {
		lcfg.Family = rp.QuotaFamily
	}
	if pv.lockout, err = lockout.New(e.store, e.clock, lcfg); err != nil {
		return fail(err)
	}

	pv.conns = make([]connection, len(rp.Connections))
	for j := range rp.Connections {
		rc := &rp.Connections[j]
		c := &pv.conns[j]
		c.res = rc
		if c.cooldown, err = conncooldown.NewConn(rp.ID, rc.ID, fingerprint(rc)); err != nil {
			return fail(err)
		}
		if c.lockout, err = lockout.NewConn(rp.ID, rc.ID, fingerprint(rc)); err != nil {
			return fail(err)
		}
		if c.gate, err = providercooldown.ConnectionEntry(rp.ID, rc.ID, gcfg); err != nil {
			return fail(err)
		}
		if c.admit, err = admission.NewGate(admission.GateConfig{Provider: rp.ID, Connection: rc.ID,
			MaxConcurrent: rc.MaxConcurrent, ModelConcurrency: rc.ModelConcurrency,
			Queue: admission.QueueConfig{MaxWait: rc.QueueMaxWait, ExecutionMaxWait: rc.ExecutionMaxWait,
				MaxQueueDepth: rc.MaxQueueDepth}}); err != nil {
			return fail(err)
		}
	}
	return nil
}

func (e *Engine) prepareRoute(i int) error {
	rr := &e.res.Routes[i]
	rt := &e.routes[i]
	rt.res = rr
	e.routeOf[rr] = i
	for _, t := range rr.Targets {
		pv := &e.providers[t.Provider]
		if t.Connection >= 0 {
			rt.candidates = append(rt.candidates, candidateRef{provider: t.Provider, connection: t.Connection,
				model: t.Model, weight: weightOf(t, pv.res.Connections[t.Connection].Weight)})
			continue
		}
		for j := range pv.res.Connections {
			rt.candidates = append(rt.candidates, candidateRef{provider: t.Provider, connection: j,
				model: t.Model, weight: weightOf(t, pv.res.Connections[j].Weight)})
		}
	}
	strategy, err := selection.ParseStrategy(string(rr.Strategy))
	if err != nil {
		return fmt.Errorf("engine: route %q: %w", rr.Model, err)
	}
	rt.needsLoad = strategy == selection.LeastUsed || strategy == selection.P2C || strategy == selection.FillFirst
	if rt.combo, err = selection.NewCombo(selection.ComboConfig{Name: rr.Model, Strategy: strategy,
		Targets: len(rt.candidates)}); err != nil {
		return fmt.Errorf("engine: route %q: %w", rr.Model, err)
	}
	return nil
}

// weightOf is a candidate's weighted-strategy share: the target's own weight when the
// route sets one, else the connection's.
func weightOf(t policies.ResolvedTarget, connWeight int) int {
	if t.Weight > 0 {
		return t.Weight
	}
	return connWeight
}

// fingerprint identifies a connection's credential without revealing it, so a changed
// credential clears a terminal state recorded under the old one.
func fingerprint(c *policies.ResolvedConnection) string {
	if c.CredentialHeader == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(c.CredentialHeader + "\x00" + c.CredentialValue.Reveal()))
	return hex.EncodeToString(sum[:8])
}

// breakerConfig maps a provider's resolved breaker settings onto the breaker's config.
func breakerConfig(rp *policies.ResolvedProvider) (breaker.Config, error) {
	cfg, err := breaker.DefaultConfig(rp.Profile)
	if err != nil {
		return cfg, err
	}
	b := rp.Breaker
	cfg.DegradationThreshold, cfg.FailureThreshold, cfg.ResetTimeout = b.DegradationThreshold, b.FailureThreshold, b.ResetTimeout
	cfg.MaxBackoffMultiplier, cfg.RecoverySuccesses, cfg.ProbeTimeout = b.MaxBackoffMultiplier, b.RecoverySuccesses, b.ProbeTimeout
	cfg.TripStatuses = b.TripStatuses
	for name, d := range b.CooldownByKind {
		k, err := breaker.ParseKind(name)
		if err != nil {
			return cfg, err
		}
		cfg.CooldownByKind[k] = d
	}
	return cfg, cfg.Validate()
}

// newClassifier builds the classifier from the built-in rules plus the policy's operator
// rules.
func newClassifier(res *policies.Resolved) (*classify.Classifier, error) {
	var rs []restate.Rule
	var es []errorrules.Rule
	for i := range res.Providers {
		for _, r := range res.Providers[i].StatusRestatement {
			rs = append(rs, restate.Rule{ID: r.ID, Provider: r.Provider, FromStatuses: r.FromStatuses, ToStatus: r.ToStatus,
				TextMarkers: r.TextMarkers, ExcludeMarkers: r.ExcludeMarkers, DefaultRetryAfter: r.DefaultRetryAfter})
		}
		for _, r := range res.Providers[i].ErrorRules {
			es = append(es, errorrules.Rule{ID: r.ID, Provider: r.Provider, Status: r.Status, Markers: r.TextMarkers,
				ExcludeMarkers: r.ExcludeMarkers, Reason: failure.Reason(r.Reason), Scope: failure.Scope(r.Scope),
				Cooldown: r.Cooldown})
		}
	}
	rt, err := restate.New(rs)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	cat, err := errorrules.New(es)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return classify.New(rt, cat), nil
}

// Resolved returns the policy the engine runs.
func (e *Engine) Resolved() *policies.Resolved { return e.res }

// ErrNoRoute reports a requested model that no route serves.
var ErrNoRoute = errors.New("engine: no route serves the model")

// now is the engine's clock.
func (e *Engine) now() time.Time { return e.clock.Now() }
