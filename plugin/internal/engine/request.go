package engine

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/providercooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/plugin/internal/selection"
	"github.com/spillwayproxy/spillway/policies"
)

// Target is one candidate of a plan: a connection of a provider serving a model.
type Target struct {
	Provider   int    // index in Resolved.Providers
	Connection int    // index in the provider's Connections
	Model      string // upstream model
	// req is the request whose plan listed the target (nil for a Target built by hand):
	// Dispatch reads what the request's own attempts exhausted there, and notes the
	// exclusions it finds.
	req *Buffers
	// clean is the cache epoch at which Plan saw every layer hold nothing for the target
	// (0: not seen clean, or a Target built by hand): while the epoch stands, Dispatch and
	// Record need not read the target's layers (see cleanMemo).
	clean uint64
	// invented: Model is the client's, passed on by a glob route (candidateRef.invented).
	invented bool
	// probe: the target is cooling for a server error and Plan lists it as the provider's
	// recovery probe (see recoveryProbe): Dispatch lets it through only with the claim.
	probe bool
}

// Plan is the routing decision for one request: the eligible targets in the order to try
// them, and every target skipped with the reason. A recovery probe (see Engine.Plan) is the
// one target of its plan and stays listed in Excluded too: every request but the one that
// claims it is answered as before.
type Plan struct {
	Model    string            // requested model
	Route    int               // index in Resolved.Routes
	Targets  []Target          // eligible, in order: [0] first, the rest for failover
	Excluded []combo.Exclusion // skipped before dispatch (AllExcluded adds those skipped at dispatch)
	Pinned   bool              // the session's pin leads the order
	Session  affinity.Key      // the session key (zero when affinity is off or absent)
	pin      affinity.Pin      // the pin read, passed back when recording
	req      *Buffers          // the request's memory (see Buffers)
	Degraded error             // state could not be read or written; the plan is still usable
}

// Buffers are a request's reusable scratch space and its memory. The filter keeps one per
// stream (one request), so a plan allocates nothing once they have grown, and what the
// request's own failed attempts exhausted is remembered until the request is planned again:
// same-request failover never goes back to a connection that just failed, under any model,
// unless only the model failed (see Record).
type Buffers struct {
	candidates []selection.Candidate
	targets    []Target
	excluded   []combo.Exclusion // the plan's exclusions, then those found at dispatch
	spent      []spent
}

// spent is what one of the request's failed attempts exhausted for the rest of the
// request: a connection (under every model), or every connection of a provider when the
// failure blamed the provider.
type spent struct {
	provider   int
	connection int // anyConnection: the whole provider
}

const anyConnection = -1

// spend remembers that the request exhausted a connection (or, with anyConnection, a
// provider).
func (b *Buffers) spend(provider, connection int) {
	if b == nil {
		return
	}
	for _, s := range b.spent {
		if s.provider == provider && (s.connection == connection || s.connection == anyConnection) {
			return
		}
	}
	b.spent = append(b.spent, spent{provider: provider, connection: connection})
}

// spentOn reports whether the request exhausted the connection or its provider.
func (b *Buffers) spentOn(provider, connection int) bool {
	for _, s := range b.spent {
		if s.provider == provider && (s.connection == connection || s.connection == anyConnection) {
			return true
		}
	}
	return false
}

// noteExcluded adds an exclusion found at dispatch to the request's list, replacing an
// earlier one for the same target.
func (b *Buffers) noteExcluded(x combo.Exclusion) {
	if b == nil {
		return
	}
	for i := range b.excluded {
		if y := &b.excluded[i]; y.Provider == x.Provider && y.Connection == x.Connection && y.Model == x.Model {
			*y = x
			return
		}
	}
	b.excluded = append(b.excluded, x)
}

// Plan decides which targets may serve a request for model, written in api, and in what
// order. A target whose provider speaks another API is excluded (api_mismatch): it is never
// sent a body it cannot read. session may be the zero Key. It returns ErrNoRoute when no
// route serves the model. A store error in one layer fails that layer open (the target stays
// eligible) and is reported in Plan.Degraded.
//
// Plan starts the request's memory in buf afresh: a request planned again after a combo
// cooldown wait may try what the wait sat out (guide §4).
//
// When every target is excluded and each one that may serve again cools for a server error
// (the rest terminal or of another API), the one whose cooldown ends soonest becomes the
// plan's single target when its provider's recovery probe is ready (recoveryProbe;
// conncooldown.ProbeReady): Dispatch claims the probe, or excludes the target as the plan
// did. This is Spillway's deviation from the guide (README, "The resilience engine").
func (e *Engine) Plan(model string, api policies.API, session affinity.Key, buf *Buffers) (Plan, error) {
	ri, ok := e.lastRoute, e.lastRoute >= 0 && model == e.lastModel
	if !ok {
		if ri, ok = e.route(model); !ok {
			return Plan{Model: model}, ErrNoRoute
		}
	}
	rt := &e.routes[ri]
	plan := Plan{Model: model, Route: ri, Session: session, req: buf}
	buf.spent = buf.spent[:0]
	cands := buf.candidates[:0]
	excl := buf.excluded[:0]
	// One comparison for a route whose providers all speak one API (the usual case).
	routeAPI := rt.api != "" && rt.api == api
	epoch := e.epoch()
	if routeAPI && rt.inOrder && (session.IsZero() || !e.affinity.Enabled()) && e.planInOrder(rt, &plan, epoch) {
		return plan, nil
	}
	probe := recoveryPick{index: -1}
	for i, c := range rt.candidates {
		model := c.model
		if model == "" {
			model = plan.Model
		}
		pv := &e.providers[c.provider]
		cn := &pv.conns[c.connection]
		if !routeAPI && pv.res.API != api {
			excl = append(excl, combo.Exclusion{Provider: pv.res.ID, Connection: cn.res.ID, Model: model,
				Reason: combo.ReasonAPIMismatch})
			continue
		}
		if memo := &rt.clean[i]; !memo.vouches(epoch, c.model != "", model) {
			w := e.watch()
			x, excluded := e.exclusion(pv, cn, model, &plan.Degraded)
			if excluded {
				memo.forget()
				excl = append(excl, x)
				probe.note(i, &x)
				continue
			}
			memo.note(e.cleanSince(w), model)
		}
		cand := selection.Candidate{Provider: pv.res.ID, Connection: cn.res.ID, Model: model, Index: i,
			Weight: c.weight, MaxConcurrent: cn.res.MaxConcurrent}
		if rt.needsLoad {
			cand.InFlight = e.inFlight(cn, model, &plan.Degraded)
		}
		cands = append(cands, cand)
	}
	buf.candidates, buf.excluded = cands, excl
	plan.Excluded = excl
	if len(cands) == 0 {
		if probe.found() {
			e.recoveryProbe(rt, &plan, probe)
		}
		return plan, nil
	}
	if e.affinity.Enabled() && !session.IsZero() {
		pin, err := e.affinity.Lookup(session)
		if err != nil {
			plan.Degraded = errors.Join(plan.Degraded, err)
		}
		plan.pin = pin
	}
	dec, err := e.selector.Order(selection.Request{Combo: rt.combo, Candidates: cands,
		Pin: selection.Pin{Provider: plan.pin.Provider, Connection: plan.pin.Connection}})
	if err != nil {
		return plan, err
	}
	plan.Pinned = dec.Pinned
	if dec.Degraded != nil {
		plan.Degraded = errors.Join(plan.Degraded, dec.Degraded)
	}
	targets := buf.targets[:0]
	for _, c := range cands {
		ref := rt.candidates[c.Index]
		targets = append(targets, Target{Provider: ref.provider, Connection: ref.connection, Model: c.Model, req: buf,
			clean: rt.clean[c.Index].at, invented: ref.invented})
	}
	buf.targets = targets
	plan.Targets = targets
	return plan, nil
}

// planInOrder is Plan for a route whose order is the configured one (priority, no session
// pin) when every candidate's clean memo vouches for it at epoch: every candidate is
// eligible, in the configured order, and the plan is that list with nothing excluded — what
// the full path would find, without asking the selector or building its candidates. It
// reports false, and plans nothing, when a memo does not vouch.
func (e *Engine) planInOrder(rt *route, plan *Plan, epoch uint64) bool {
	for i, c := range rt.candidates {
		model := c.model
		if model == "" {
			model = plan.Model
		}
		if !rt.clean[i].vouches(epoch, c.model != "", model) {
			return false
		}
	}
	buf := plan.req
	targets := buf.targets[:0]
	for i, c := range rt.candidates {
		model := c.model
		if model == "" {
			model = plan.Model
		}
		targets = append(targets, Target{Provider: c.provider, Connection: c.connection, Model: model, req: buf,
			clean: rt.clean[i].at, invented: c.invented})
	}
	buf.targets, buf.excluded = targets, buf.excluded[:0]
	plan.Targets, plan.Excluded = targets, buf.excluded
	return true
}

// recoveryPick follows a plan's exclusions for its recovery probe: the candidate whose
// server-error cooldown ends soonest (the first in the route's order on a tie), and whether
// an exclusion of another kind rules a probe out.
type recoveryPick struct {
	index      int           // candidate index; -1 = none
	retryAfter time.Duration // its cooldown's time left
	model      string        // its upstream model
	blocked    bool          // a target is excluded by something a probe must not skip
}

// note follows one exclusion of candidate i. A connection cooling for a server error may be
// probed; a terminal state or another API never serves by waiting, so it neither counts nor
// blocks; anything else — a 429, quota or auth cooldown, a lockout, an open breaker or a
// probe in flight, the provider cooldown gate — blocks the probe: that request is answered
// as the guide answers it.
func (p *recoveryPick) note(i int, x *combo.Exclusion) {
	switch {
	case x.Reason == combo.ReasonUnavailable && x.Cause.ServerError():
		if p.index < 0 || x.RetryAfter < p.retryAfter {
			p.index, p.retryAfter, p.model = i, x.RetryAfter, x.Model
		}
	case x.Reason == combo.ReasonTerminal, x.Reason == combo.ReasonAPIMismatch:
	default:
		p.blocked = true
	}
}

// found reports a candidate a probe may go to.
func (p *recoveryPick) found() bool { return p.index >= 0 && !p.blocked }

// recoveryProbe makes the picked candidate the plan's one target, marked as the recovery
// probe, when its provider's probe is ready (conncooldown.ProbeReady: the connection has
// cooled for one base cooldown, the provider holds no probe claim in flight and has made none
// within one base cooldown). It only reads; Dispatch claims. A store error leaves the plan
// without a probe (and is reported in Plan.Degraded).
func (e *Engine) recoveryProbe(rt *route, plan *Plan, pick recoveryPick) {
	ref := rt.candidates[pick.index]
	pv := &e.providers[ref.provider]
	ready, err := pv.cooldown.ProbeReady(pv.conns[ref.connection].cooldown)
	if err != nil {
		plan.Degraded = errors.Join(plan.Degraded, err)
	}
	if !ready {
		return
	}
	buf := plan.req
	buf.targets = append(buf.targets[:0], Target{Provider: ref.provider, Connection: ref.connection, Model: pick.model,
		req: buf, invented: ref.invented, probe: true})
	plan.Targets = buf.targets
}

// Route returns the route serving model, as policies.Resolved.Route does, remembering the
// last answer: a model equal to the last one asked about (the same interned string, usually)
// costs one comparison instead of a map lookup, and Plan for it then needs no lookup either.
func (e *Engine) Route(model string) (*policies.ResolvedRoute, bool) {
	rr, _, ok := e.RouteIndex(model)
	return rr, ok
}

// RouteIndex is Route that also returns the route's index in Resolved().Routes.
func (e *Engine) RouteIndex(model string) (*policies.ResolvedRoute, int, bool) {
	if e.lastRoute >= 0 && model == e.lastModel {
		return e.routes[e.lastRoute].res, e.lastRoute, true
	}
	ri, ok := e.route(model)
	if !ok {
		return nil, 0, false
	}
	return e.routes[ri].res, ri, true
}

// route finds the route serving model and keeps the answer in lastModel and lastRoute: the
// filter asks for the same few models over and over, and Plan compares a model with the last
// one before it looks the route up.
func (e *Engine) route(model string) (int, bool) {
	rr, ok := e.res.Route(model)
	if !ok {
		return 0, false
	}
	ri := e.routeOf[rr]
	e.lastModel, e.lastRoute = model, ri
	return ri, true
}

// inFlight is the load the load-aware strategies (least-used, p2c, fill-first) compare: the
// attempts this worker has in flight on the connection without a concurrency lease, kept in
// memory by Dispatch and Release at no shared-data cost, plus, where the connection has a
// cap, the leases every worker holds on it (one live shared-data read). Without a cap a
// worker sees only its own attempts: Envoy spreads requests over workers, so each balances
// its share.
func (e *Engine) inFlight(cn *connection, model string, degraded *error) int {
	n := cn.unleased
	if !cn.capped {
		return n
	}
	u, err := e.admitter.Inspect(cn.admit, model)
	if err != nil {
		*degraded = errors.Join(*degraded, err)
		return n
	}
	return n + u.InFlight
}

// probeRetryAfter is what a request that finds a provider's HALF_OPEN probe in flight is
// told: come back in about a second, when the probe has likely decided (not after the
// probe's own timeout).
const probeRetryAfter = time.Second

// exclusion checks every layer that can keep a target out, cheapest and widest first. An
// exclusion is Transient — worth a comboCooldownWait — only for the short, rate-limit-class
// locks the guide waits on (§4: a would-be 429, a rate limit or concurrency limit;
// failure.Reason.Waitable): never for an open breaker or a HALF_OPEN probe in flight, a
// connection cooled or a model locked by a server error, an overloaded model or an auth
// failure, quota, not-found or a terminal state, which answer at once with Retry-After. A
// layer that cannot be read fails open and joins its error to degraded.
func (e *Engine) exclusion(pv *provider, cn *connection, model string, degraded *error) (combo.Exclusion, bool) {
	x := combo.Exclusion{Provider: pv.res.ID, Connection: cn.res.ID, Model: model}
	// Provider circuit breaker. Planning must not claim the HALF_OPEN probe (it may not
	// dispatch this target at all), so it reads the status; Dispatch claims.
	st, err := e.breakers.Status(pv.breaker)
	if err != nil {
		*degraded = errors.Join(*degraded, err)
	} else if st.State == breaker.Open {
		x.Reason, x.RetryAfter = combo.ReasonCircuitOpen, st.RetryAfter
		return x, true
	} else if st.State == breaker.HalfOpen && st.ProbeInFlight {
		x.Reason, x.RetryAfter = combo.ReasonCircuitOpen, probeRetryAfter
		return x, true
	}
	return e.connectionExclusion(pv, cn, model, degraded)
}

// connectionExclusion checks the layers below the breaker: the provider cooldown gate, the
// connection's cooldown or terminal state, the model's lockout on it.
func (e *Engine) connectionExclusion(pv *provider, cn *connection, model string, degraded *error) (combo.Exclusion, bool) {
	x := combo.Exclusion{Provider: pv.res.ID, Connection: cn.res.ID, Model: model}
	if e.gateOn {
		for _, entry := range [...]*providercooldown.Entry{&pv.gate, &cn.gate} {
			gs, err := e.gate.Check(*entry)
			if err != nil {
				*degraded = errors.Join(*degraded, err)
				continue
			}
			if gs.Cooling {
				x.Reason, x.RetryAfter = combo.ReasonProviderCooldown, gs.RetryAfter
				return x, true
			}
		}
	}
	av, err := pv.cooldown.Check(cn.cooldown)
	if err != nil {
		*degraded = errors.Join(*degraded, err)
	} else if !av.Available() {
		if av.Status.Terminal() {
			x.Reason = combo.ReasonTerminal
		} else {
			x.Reason, x.RetryAfter, x.Transient, x.Cause = combo.ReasonUnavailable, av.RetryAfter, av.Transient(), av.Reason
		}
		return x, true
	}
	lock, locked, err := pv.lockout.Locked(cn.lockout, model)
	if err != nil {
		*degraded = errors.Join(*degraded, err)
	} else if locked {
		x.Reason, x.RetryAfter = combo.ReasonModelLockout, lock.Until.Sub(e.now())
		x.Transient = lock.Transient()
		return x, true
	}
	return x, false
}

// AllExcluded decides what a request none of whose targets can go gets: a wait (combo
// cooldown wait), or the reply to send (429 rate_limit_error, 503 all_targets_cooling_down,
// 503 provider_circuit_open, 404 no_executable_targets). plan is the request's current plan;
// the exclusions Dispatch and TryDispatch found since planning join plan.Excluded first, so
// a request that lost a HALF_OPEN probe race to another worker is told the circuit is open
// (503 provider_circuit_open, Retry-After about a second; guide §1) rather than 404.
func (e *Engine) AllExcluded(plan *Plan, progress combo.Progress) combo.Decision {
	if b := plan.req; b != nil && len(b.excluded) > len(plan.Excluded) {
		plan.Excluded = b.excluded
	}
	return combo.DecideExcluded(e.comboWait, plan.Excluded, progress, e.now())
}

// AdmissionReply builds the client reply for an admission refusal on t's connection (ok=false
// for an error that is not a refusal).
func (e *Engine) AdmissionReply(t Target, err error) (replies.Reply, bool) {
	return e.providers[t.Provider].conns[t.Connection].admit.Reply(err)
}
