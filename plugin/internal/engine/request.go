package engine

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/classify"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/internal/providercooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/selection"
)

// Target is one candidate of a plan: a connection of a provider serving a model.
type Target struct {
	Provider   int    // index in Resolved.Providers
	Connection int    // index in the provider's Connections
	Model      string // upstream model
}

// Plan is the routing decision for one request: the eligible targets in the order to try
// them, and every target skipped with the reason.
type Plan struct {
	Model    string            // requested model
	Route    int               // index in Resolved.Routes
	Targets  []Target          // eligible, in order: [0] first, the rest for failover
	Excluded []combo.Exclusion // skipped before dispatch
	Pinned   bool              // the session's pin leads the order
	Session  affinity.Key      // the session key (zero when affinity is off or absent)
	pin      affinity.Pin      // the pin read, passed back when recording
	Degraded error             // state could not be read or written; the plan is still usable
}

// Buffers are a request's reusable scratch space; the filter keeps one per stream so a
// plan allocates nothing once they have grown.
type Buffers struct {
	candidates []selection.Candidate
	targets    []Target
	excluded   []combo.Exclusion
}

// Plan decides which targets may serve a request for model and in what order. session may
// be the zero Key. It returns ErrNoRoute when no route serves the model. A store error in
// one layer fails that layer open (the target stays eligible) and is reported in
// Plan.Degraded.
func (e *Engine) Plan(model string, session affinity.Key, buf *Buffers) (Plan, error) {
	rr, ok := e.res.Route(model)
	if !ok {
		return Plan{Model: model}, ErrNoRoute
	}
	ri := e.routeOf[rr]
	rt := &e.routes[ri]
	plan := Plan{Model: model, Route: ri, Session: session}
	cands := buf.candidates[:0]
	excl := buf.excluded[:0]
	for i, c := range rt.candidates {
		model := c.model
		if model == "" {
			model = plan.Model
		}
		pv := &e.providers[c.provider]
		cn := &pv.conns[c.connection]
		if x, excluded := e.exclusion(pv, cn, model, &plan); excluded {
			excl = append(excl, x)
			continue
		}
		cand := selection.Candidate{Provider: pv.res.ID, Connection: cn.res.ID, Model: model, Index: i,
			Weight: c.weight, MaxConcurrent: cn.res.MaxConcurrent}
		if rt.needsLoad {
			if u, err := e.admitter.Inspect(cn.admit, model); err == nil {
				cand.InFlight = u.InFlight
			} else {
				plan.Degraded = errors.Join(plan.Degraded, err)
			}
		}
		cands = append(cands, cand)
	}
	buf.candidates, buf.excluded = cands, excl
	plan.Excluded = excl
	if len(cands) == 0 {
		return plan, nil
	}
	if e.affinity.Enabled() && session != (affinity.Key{}) {
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
		targets = append(targets, Target{Provider: ref.provider, Connection: ref.connection, Model: c.Model})
	}
	buf.targets = targets
	plan.Targets = targets
	return plan, nil
}

// exclusion checks every layer that can keep a target out, cheapest and widest first.
func (e *Engine) exclusion(pv *provider, cn *connection, model string, plan *Plan) (combo.Exclusion, bool) {
	x := combo.Exclusion{Provider: pv.res.ID, Connection: cn.res.ID, Model: model}
	// Provider circuit breaker. Planning must not claim the HALF_OPEN probe (it may not
	// dispatch this target at all), so it reads the status; Dispatch claims.
	st, err := e.breakers.Status(pv.breaker)
	if err != nil {
		plan.Degraded = errors.Join(plan.Degraded, err)
	} else if st.State == breaker.Open || st.State == breaker.HalfOpen && st.ProbeInFlight {
		x.Reason, x.RetryAfter, x.Transient = combo.ReasonCircuitOpen, st.RetryAfter, true
		return x, true
	}
	if e.gateOn {
		for _, entry := range [...]*providercooldown.Entry{&pv.gate, &cn.gate} {
			gs, err := e.gate.Check(*entry)
			if err != nil {
				plan.Degraded = errors.Join(plan.Degraded, err)
				continue
			}
			if gs.Cooling {
				x.Reason, x.RetryAfter, x.Transient = combo.ReasonProviderCooldown, gs.RetryAfter, true
				return x, true
			}
		}
	}
	av, err := pv.cooldown.Check(cn.cooldown)
	if err != nil {
		plan.Degraded = errors.Join(plan.Degraded, err)
	} else if !av.Available() {
		if av.Status.Terminal() {
			x.Reason = combo.ReasonTerminal
		} else {
			x.Reason, x.RetryAfter, x.Transient = combo.ReasonUnavailable, av.RetryAfter, av.Transient()
		}
		return x, true
	}
	lock, locked, err := pv.lockout.Locked(cn.lockout, model)
	if err != nil {
		plan.Degraded = errors.Join(plan.Degraded, err)
	} else if locked {
		x.Reason, x.RetryAfter, x.Transient = combo.ReasonModelLockout, lock.Until.Sub(e.now()), lock.Transient()
		return x, true
	}
	return x, false
}

// Dispatch is one attempt on its way to a target.
type Dispatch struct {
	Target  Target
	Started time.Time
	probe   breaker.Decision // the breaker's decision (holds the HALF_OPEN probe if any)
	Lease   admission.Lease  // concurrency slots held (released by Finish or Abandon)
	Ticket  admission.Ticket // set when the attempt must wait for a slot
	Waiting bool             // the attempt waits in the queue (TryDispatch again later)
	// Wake says slots were handed back on the way (an all-or-nothing acquire rolled back, or
	// a slot returned because the provider refused the attempt): wake the other workers'
	// waiters as after a release.
	Wake bool
}

// ErrTargetUnavailable reports that a planned target was taken by another worker between
// planning and dispatch (the breaker's single probe, usually): try the next target.
var ErrTargetUnavailable = errors.New("engine: target no longer available")

// Dispatch claims what sending an attempt to t needs: concurrency slots, then the breaker's
// probe when the provider is HALF_OPEN. The probe is claimed only once the slots are granted,
// so a request waiting in the queue never holds it. A typed *admission.Error (queue full)
// means the request should be answered with it; Dispatch.Waiting means it must wait in the
// queue (TryDispatch); ErrTargetUnavailable means try the next target.
func (e *Engine) Dispatch(t Target) (Dispatch, error) {
	cn := &e.providers[t.Provider].conns[t.Connection]
	d := Dispatch{Target: t, Started: e.now()}
	res, err := e.admitter.Admit(cn.admit, t.Model)
	d.Wake = res.Wake
	if err != nil {
		return d, err
	}
	if !res.Granted {
		d.Ticket, d.Waiting = res.Ticket, true
		return d, nil
	}
	d.Lease = res.Lease
	return e.claimProbe(d)
}

// TryDispatch checks a waiting attempt's turn in the queue. It returns the attempt granted
// (Waiting false), still waiting, or an error: the typed queue timeout, or
// ErrTargetUnavailable when the slot came but the provider's probe is taken.
func (e *Engine) TryDispatch(d Dispatch) (Dispatch, error) {
	res, err := e.admitter.TryAdmit(d.Ticket)
	d.Wake = res.Wake
	if err != nil || !res.Granted {
		return d, err
	}
	d.Lease, d.Waiting, d.Started = res.Lease, false, e.now()
	return e.claimProbe(d)
}

// claimProbe asks the breaker for an attempt that holds its slots. When the provider refuses
// (OPEN again, or another worker holds the HALF_OPEN probe) the slots go back at once. A
// breaker that cannot be read fails open.
func (e *Engine) claimProbe(d Dispatch) (Dispatch, error) {
	pv := &e.providers[d.Target.Provider]
	dec, err := e.breakers.Allow(pv.breaker)
	if err != nil || dec.Allowed {
		d.probe = dec
		return d, nil
	}
	waiters, _ := e.admitter.Release(d.Lease)
	d.Lease, d.Wake = admission.Lease{}, d.Wake || waiters
	return d, ErrTargetUnavailable
}

func (e *Engine) releaseProbe(pv *provider, d Dispatch) {
	if d.probe.Probe {
		_ = e.breakers.ReleaseProbe(pv.breaker, d.probe)
	}
}

// Outcome is what came back from one attempt.
type Outcome struct {
	Status   int           // upstream HTTP status; 0 = no response (transport failure)
	TimedOut bool          // with Status 0: the attempt ran out of time
	Headers  [][2]string   // upstream response headers
	Body     []byte        // upstream error body (small; only failures are read)
	TTFB     time.Duration // time to the response headers
	Message  string        // short operator-facing summary for the connection's lastError
}

// Result is what the engine made of an attempt's outcome.
type Result struct {
	Verdict     failure.Verdict // the classification (zero Reason on success)
	Restatement restate.Result  // the status restatement, if a rule matched
	Waiters     bool            // a concurrency slot was freed that others wait for
	Errors      error           // state writes that failed (the outcome is still accounted where possible)
}

// Finish records an attempt's outcome in every layer it concerns and releases its slots.
// plan is the request's plan (for the session pin); it may be nil.
func (e *Engine) Finish(d Dispatch, o Outcome, plan *Plan) Result {
	pv := &e.providers[d.Target.Provider]
	cn := &pv.conns[d.Target.Connection]
	var r Result
	note := func(err error) {
		if err != nil {
			r.Errors = errors.Join(r.Errors, err)
		}
	}
	if o.Status > 0 && o.Status < 400 {
		_, err := e.breakers.RecordSuccess(pv.breaker, breaker.Attempt{Started: d.Started, Decision: d.probe})
		note(err)
		note(pv.cooldown.RecordSuccess(cn.cooldown, d.Started))
		note(pv.lockout.RecordSuccess(cn.lockout, d.Target.Model, d.Started))
		if e.gateOn {
			note(e.gate.RecordSuccess(pv.gate))
			note(e.gate.RecordSuccess(cn.gate))
		}
		e.latency.Record(pv.res.ID, cn.res.ID, d.Target.Model, e.now(), o.TTFB, true)
		if plan != nil && e.affinity.Enabled() && plan.Session != (affinity.Key{}) {
			_, err := e.affinity.Record(plan.Session, pv.res.ID, cn.res.ID, plan.pin)
			note(err)
		}
	} else {
		r.Verdict, r.Restatement = e.classifier.Classify(classify.Input{Provider: pv.res.ID, Profile: pv.res.Profile,
			Status: o.Status, TimedOut: o.TimedOut, Headers: o.Headers, Body: o.Body, Now: e.now()})
		e.recordFailure(pv, cn, d, o, r.Verdict, note)
	}
	waiters, err := e.admitter.Release(d.Lease)
	note(err)
	r.Waiters = waiters
	return r
}

// recordFailure applies a failure verdict to the layers whose scope it blames.
func (e *Engine) recordFailure(pv *provider, cn *connection, d Dispatch, o Outcome, v failure.Verdict, note func(error)) {
	if v.CountBreaker {
		_, err := e.breakers.RecordFailure(pv.breaker, v, breaker.Attempt{Started: d.Started, Decision: d.probe})
		note(err)
		if e.gateOn {
			_, err := e.gate.RecordFailure(pv.gate, v)
			note(err)
		}
	} else if d.probe.Probe {
		note(e.breakers.ReleaseProbe(pv.breaker, d.probe))
	}
	// A model-level failure goes to the model lockout first; when the model ends up locked
	// the connection stays usable for its other models. Everything else that blames
	// something (connection scope, terminal states, model-level failures the lockout does
	// not take because it is off or does not count the status) cools the connection.
	modelLevel := v.Scope == failure.ScopeQuotaFamily || v.Scope == failure.ScopeModel || v.Scope == failure.ScopeExact
	locked := false
	if modelLevel && v.Terminal == failure.TerminalNone {
		out, err := pv.lockout.RecordFailure(cn.lockout, lockout.Failure{Model: d.Target.Model, Verdict: v,
			Started: d.Started, QueueMaxWait: cn.admit.Queue().MaxWait})
		note(err)
		locked = out.Locked
	}
	if v.Reason != failure.ReasonNone && v.Scope != failure.ScopeNone && !locked {
		_, err := pv.cooldown.RecordFailure(cn.cooldown, conncooldown.Failure{Verdict: v, Started: d.Started, Message: o.Message})
		note(err)
		if e.gateOn {
			_, err := e.gate.RecordFailure(cn.gate, v)
			note(err)
		}
	}
	e.latency.Record(pv.res.ID, cn.res.ID, d.Target.Model, e.now(), o.TTFB, false)
}

// Abandon releases an attempt that never produced an outcome (the client went away while it
// waited or before the upstream answered): its queue ticket or slots, and a held probe.
func (e *Engine) Abandon(d Dispatch) (waiters bool, err error) {
	e.releaseProbe(&e.providers[d.Target.Provider], d)
	if d.Waiting {
		return e.admitter.Cancel(d.Ticket)
	}
	return e.admitter.Release(d.Lease)
}

// AllExcluded decides what a request whose every target was skipped before dispatch gets:
// a wait (combo cooldown wait), or the reply to send (429 rate_limit_error, 503
// all_targets_cooling_down, 404 no_executable_targets).
func (e *Engine) AllExcluded(plan *Plan, progress combo.Progress) combo.Decision {
	return combo.DecideExcluded(e.comboWait, plan.Excluded, progress, e.now())
}
