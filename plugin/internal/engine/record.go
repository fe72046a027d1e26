package engine

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/classify"
	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
)

// Outcome is what came back from one attempt.
type Outcome struct {
	Status   int           // upstream HTTP status; 0 = no response (transport failure)
	TimedOut bool          // with Status 0: the attempt ran out of time
	Headers  [][2]string   // upstream response headers
	Body     []byte        // upstream error body (small; only failures are read)
	TTFB     time.Duration // time to the response headers
	Message  string        // short operator-facing summary for the connection's lastError
	// Sent is what the client sent on the request (a read-only view, zero: unknown):
	// classification takes a marker phrase it holds for an echo of the client's input, no
	// evidence (classify's package doc, "Echoes"). Read only when a failure's marker matched.
	Sent textscan.Sent
}

// Result is what the engine made of an attempt's outcome.
type Result struct {
	Verdict     failure.Verdict // the classification (zero Reason on success)
	Restatement restate.Result  // the status restatement, if a rule matched
	// RequestOnly: the failure named a model the connection does not serve (not found, or a
	// bad request about the model) and model lockout did not take it, so no layer recorded
	// it; only the request that saw it skips the connection (see the package doc). The
	// filter may log or count it.
	RequestOnly bool
	Waiters     admission.Wake // whom the freed concurrency slots may let in
	Errors      error          // state writes that failed (the outcome is still accounted where possible)
	// Effects is what a failure left in the layers it reached (zero on success).
	Effects Effects
}

// Effects is what recording a failure left in the layers it reached, for the filter's
// decision log: the provider's circuit, the connection's cooldown or terminal state, the
// model's lockout.
type Effects struct {
	// BreakerCounted: the failure counted for the provider's circuit, which is now Breaker.
	BreakerCounted bool
	Breaker        breaker.State
	// ConnectionRecorded: the failure reached the connection layer, which is now
	// Connection (cooling until Connection.Until, or terminal, or still available).
	ConnectionRecorded bool
	Connection         conncooldown.Availability
	// Locked: a lockout of the model is in force after the failure.
	Locked  bool
	Lockout lockout.Lock
}

// Finish records an attempt's outcome in every layer it concerns and releases its slots:
// Record then Release. plan is the request's plan (for the session pin); it may be nil.
func (e *Engine) Finish(d Dispatch, o Outcome, plan *Plan) Result {
	r := e.Record(d, o, plan)
	wake, err := e.Release(d)
	r.Waiters = wake
	if err != nil {
		r.Errors = errors.Join(r.Errors, err)
	}
	return r
}

// Record records an attempt's outcome in every layer it concerns — breaker (and its
// HALF_OPEN probe), connection cooldown, model lockout, provider cooldown gate, latency,
// session pin — without releasing its concurrency slots: a streamed response keeps its slots
// until it ends (Release), while its outcome is known from the headers or the first event.
// A failure also marks what it blamed as exhausted for the rest of the request (the
// connection, or the provider for a provider-scoped failure; nothing beyond the failed
// target when only the model failed), so failover skips it. plan is
// the request's plan (for the session pin); it may be nil. A success on a target Plan saw
// clean, with the cache's epoch unchanged since, asks no mechanism (see cleanMemo).
func (e *Engine) Record(d Dispatch, o Outcome, plan *Plan) Result {
	pv := &e.providers[d.Target.Provider]
	cn := &pv.conns[d.Target.Connection]
	var r Result
	note := func(err error) {
		if err != nil {
			r.Errors = errors.Join(r.Errors, err)
		}
	}
	if o.Status > 0 && o.Status < 400 {
		if d.Target.invented {
			cn.served.Note(d.Target.Model) // in memory: the evidence a later lockout of it carries
		}
		// A target its clean memo vouches for has nothing stored that a success could clear.
		if !e.stillClean(d.Target.clean) {
			_, err := e.breakers.RecordSuccess(pv.breaker, d.attempt())
			note(err)
			note(pv.cooldown.RecordSuccess(cn.cooldown, d.Started))
			note(pv.lockout.RecordSuccess(cn.lockout, d.Target.Model, d.Started))
			if e.gateOn {
				note(e.gate.RecordSuccess(pv.gate))
				note(e.gate.RecordSuccess(cn.gate))
			}
		}
		if d.recovery.Held() {
			e.recovered(pv, &d, note)
		}
		if e.sampleLatency {
			e.sample(pv, cn, d.Target.Model, o.TTFB, true)
		}
		if plan != nil && e.affinity.Enabled() && !plan.Session.IsZero() {
			_, err := e.affinity.Record(plan.Session, pv.res.ID, cn.res.ID, plan.pin)
			note(err)
		}
		return r
	}
	r.Verdict, r.Restatement = e.classifier.Classify(classify.Input{Provider: pv.res.ID, Profile: pv.res.Profile,
		Status: o.Status, TimedOut: o.TimedOut, Headers: o.Headers, Body: o.Body, Now: e.now(), Sent: o.Sent})
	r.RequestOnly = e.recordFailure(pv, cn, d, o, r.Verdict, note, &r.Effects)
	note(e.endRecovery(pv, cn, &d))
	return r
}

// recovered is the success of the provider's recovery probe: the claim ends, and the
// provider's other connections cooling for a server error recorded before the probe was sent
// are cleared as its own connection was (conncooldown.RecoverServerError): a server error is
// the provider's service failing, which the probe found serving again (as the breaker's
// HALF_OPEN probe's success closes the circuit for every connection, guide §1).
func (e *Engine) recovered(pv *provider, d *Dispatch, note func(error)) {
	note(e.endRecovery(pv, &pv.conns[d.Target.Connection], d))
	for j := range pv.conns {
		if j != d.Target.Connection {
			note(pv.cooldown.RecoverServerError(pv.conns[j].cooldown, d.Started))
		}
	}
}

// recordFailure applies a failure verdict to the layers whose scope it blames, and marks
// what it blamed as exhausted for the rest of the request. It reports a failure that only
// the request keeps (RequestOnly), and notes in fx what each layer was left in.
func (e *Engine) recordFailure(pv *provider, cn *connection, d Dispatch, o Outcome, v failure.Verdict, note func(error), fx *Effects) (requestOnly bool) {
	providerScoped := v.Scope == failure.ScopeProvider
	switch {
	case v.CountBreaker && d.recovery.Held() && !d.probe.Probe:
		// A recovery probe's server error counts for neither the breaker nor the provider
		// cooldown gate: the probe is the traffic the connection cooldowns held back, sent
		// once per base cooldown to find the recovery, and counting it would open the
		// breaker whose OPEN period (30 s for an API key, then doubled) it is there to
		// shorten. Its connection escalates (below). A probe that also holds the breaker's
		// HALF_OPEN probe is the breaker's and counts.
	case v.CountBreaker:
		st, err := e.breakers.RecordFailure(pv.breaker, v, d.attempt())
		note(err)
		fx.BreakerCounted, fx.Breaker = err == nil, st
		e.gateProviderFailure(pv, v, note)
	case providerScoped:
		// A rule that declares scope: provider blames the provider, as declared (guide §7:
		// an operator rule's scope is honoured, #11104), even for a status the breaker's
		// trip list leaves out; its kind picks the OPEN period (server_error unless the
		// verdict says timeout or transport).
		kind := pv.breaker.Config().KindOf(v)
		if kind == breaker.KindNone {
			kind = breaker.KindServerError
		}
		st, err := e.breakers.RecordKind(pv.breaker, kind, d.attempt())
		note(err)
		fx.BreakerCounted, fx.Breaker = err == nil, st
		e.gateProviderFailure(pv, v, note)
	case d.probe.Probe:
		note(e.breakers.ReleaseProbe(pv.breaker, d.probe))
	}
	// A model-level failure goes to the model lockout first; when the model ends up locked
	// the connection stays usable for its other models. A model that does not exist there
	// (not found, or a bad request about the model) that the lockout does not take is
	// recorded nowhere (see the package doc). Everything else that blames something below
	// the provider (connection scope, terminal states, other model-level failures the
	// lockout does not take because it is off or does not count the status) cools the
	// connection.
	modelLevel := v.Scope == failure.ScopeQuotaFamily || v.Scope == failure.ScopeModel || v.Scope == failure.ScopeExact
	terminal := v.Terminal != failure.TerminalNone
	locked := false
	if modelLevel && !terminal {
		out, err := pv.lockout.RecordFailure(cn.lockout, lockout.Failure{Model: d.Target.Model, Verdict: v,
			Started: d.Started, QueueMaxWait: cn.admit.Queue().MaxWait, Served: cn.served.Has(d.Target.Model)})
		note(err)
		locked = out.Locked
		fx.Locked, fx.Lockout = out.Locked, out.Lock
	}
	switch {
	case v.Reason == failure.ReasonNone || v.Scope == failure.ScopeNone || v.Scope == failure.ScopeRequest,
		locked, providerScoped && !terminal:
	case modelLevel && !terminal && missingModel(v.Reason):
		requestOnly = true
	default:
		out, err := pv.cooldown.RecordFailure(cn.cooldown, conncooldown.Failure{Verdict: v, Started: d.Started, Message: o.Message,
			Probe: d.recovery.Held()})
		note(err)
		fx.ConnectionRecorded, fx.Connection = err == nil, out.Availability
		if e.gateOn {
			_, err := e.gate.RecordFailure(cn.gate, v)
			note(err)
		}
	}
	// Same-request failover skips what the failure blamed, under any model (a locked model
	// spares the connection's other models for other requests, not for this one): the
	// provider for a provider-scoped failure, else the connection (for a request-scoped
	// failure, which no layer recorded, too), unless the failure blamed only the request
	// itself or only the model (a missing or retired model, one this account may not use:
	// guide "Foutopsporing", §3 and §7 — the connection serves its other models, the route's
	// next model on it included; the failed target itself is not planned twice).
	switch {
	case v.Scope == failure.ScopeNone: // the request's own fault: another target may take it
	case v.ModelOnly && !providerScoped:
	case providerScoped:
		d.Target.req.spend(d.Target.Provider, anyConnection)
	default:
		d.Target.req.spend(d.Target.Provider, d.Target.Connection)
	}
	if e.sampleLatency {
		e.sample(pv, cn, d.Target.Model, o.TTFB, false)
	}
	return requestOnly
}

// sample records an attempt in the latency tracker. Callers sample only when a route's
// strategy reads the samples (Engine.sampleLatency: p2c with a latency weight); they live in
// this worker's memory, and nothing else reads them.
func (e *Engine) sample(pv *provider, cn *connection, model string, ttfb time.Duration, ok bool) {
	e.latency.Record(pv.res.ID, cn.res.ID, model, e.now(), ttfb, ok)
}

// gateProviderFailure counts a provider-level failure in the opt-in provider cooldown gate.
func (e *Engine) gateProviderFailure(pv *provider, v failure.Verdict, note func(error)) {
	if e.gateOn {
		_, err := e.gate.RecordFailure(pv.gate, v)
		note(err)
	}
}

// attempt is what the breaker needs to know of an attempt: when it started and whether it
// holds the HALF_OPEN probe (only the probe's outcome decides a recovery).
func (d Dispatch) attempt() breaker.Attempt {
	return breaker.Attempt{Started: d.Started, Decision: d.probe}
}

// missingModel reports the reasons that say the model does not exist on the connection
// (guide §3: "lokale providers die 404 teruggeven voor één ontbrekend model").
func missingModel(r failure.Reason) bool {
	return r == failure.ReasonNotFound || r == failure.ReasonBadRequest
}

// TruncatedStatus is the status a truncated stream is recorded with: Spillway's own verdict
// on a bad stream, as OmniRoute's quality validation synthesises a 502 (guide §3).
const TruncatedStatus = 502

// RecordTruncation records that a stream already going to the client ended without its
// terminal event (the response cannot be replayed, so there is no failover). It is recorded
// as a synthesised 502 at the exact model's scope, like any other model-level failure: the
// model lockout takes it when it is on and counts 502 (guide §3: "OmniRoute's eigen
// gesynthetiseerde 502 uit kwaliteitsvalidatie — vergrendelt alleen de exacte
// provider/connection/model-tuple"; a bad stream on one model says nothing about the
// connection's other models), and otherwise the connection cools as after a transport
// failure. It never counts for the breaker or the provider cooldown gate: the provider
// answered.
func (e *Engine) RecordTruncation(d Dispatch) Result {
	pv := &e.providers[d.Target.Provider]
	cn := &pv.conns[d.Target.Connection]
	var r Result
	v := failure.Verdict{Status: TruncatedStatus, Reason: failure.ReasonStreamTruncated, Scope: failure.ScopeExact}
	out, err := pv.lockout.RecordFailure(cn.lockout, lockout.Failure{Model: d.Target.Model, Verdict: v,
		Started: d.Started, QueueMaxWait: cn.admit.Queue().MaxWait, Served: cn.served.Has(d.Target.Model)})
	r.Verdict, r.Errors = v, err
	r.Effects.Locked, r.Effects.Lockout = out.Locked, out.Lock
	if !out.Locked {
		cout, err := pv.cooldown.RecordFailure(cn.cooldown, conncooldown.Failure{Verdict: v, Started: d.Started,
			Message: "stream ended without its terminal event"})
		if err != nil {
			r.Errors = errors.Join(r.Errors, err)
		}
		r.Effects.ConnectionRecorded, r.Effects.Connection = err == nil, cout.Availability
	}
	if err := e.endRecovery(pv, cn, &d); err != nil {
		r.Errors = errors.Join(r.Errors, err)
	}
	if e.sampleLatency {
		e.sample(pv, cn, d.Target.Model, 0, false)
	}
	return r
}

// RecordStall records that an attempt's stream stalled: the content or throughput
// watchdog gave up on it before it produced model output in time. Guide §2 ("Stilstanden in
// stream-content koelen het account niet af"): the stall belongs to that request (usually a
// long reasoning turn), so the error is recorded on the connection (lastError, for
// operators) without a cooldown unless resilience.connectionCooldown.streamStallCooldown is
// on, and it never counts for the provider breaker or the provider cooldown gate; a HALF_OPEN
// probe the attempt holds is handed back undecided. The connection is not marked exhausted
// for the request: the guide's early recovery (§6) may reopen the same connection before
// anything reached the client. Like Record it keeps the attempt's slots (Release).
func (e *Engine) RecordStall(d Dispatch) Result {
	pv := &e.providers[d.Target.Provider]
	cn := &pv.conns[d.Target.Connection]
	v := failure.Verdict{Reason: failure.ReasonStreamStall, Fallback: true, Scope: failure.ScopeConnection}
	out, err := pv.cooldown.RecordFailure(cn.cooldown, conncooldown.Failure{Verdict: v, Started: d.Started,
		Message: "stream stalled: no model output in time"})
	r := Result{Verdict: v, Errors: err}
	r.Effects.ConnectionRecorded, r.Effects.Connection = err == nil, out.Availability
	if d.probe.Probe {
		if err := e.breakers.ReleaseProbe(pv.breaker, d.probe); err != nil {
			r.Errors = errors.Join(r.Errors, err)
		}
	}
	if err := e.endRecovery(pv, cn, &d); err != nil {
		r.Errors = errors.Join(r.Errors, err)
	}
	if e.sampleLatency {
		e.sample(pv, cn, d.Target.Model, 0, false)
	}
	return r
}
