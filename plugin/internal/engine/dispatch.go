package engine

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
)

// Dispatch is one attempt on its way to a target.
type Dispatch struct {
	Target  Target
	Started time.Time
	probe   breaker.Decision // the breaker's decision (holds the HALF_OPEN probe if any)
	Lease   admission.Lease  // concurrency slots held (released by Finish or Abandon)
	Ticket  admission.Ticket // set when the attempt must wait for a slot
	Waiting bool             // the attempt waits in the queue (TryDispatch again later)
	// Wake says slots were handed back on the way (an all-or-nothing acquire rolled back, a
	// slot returned because the provider refused the attempt, a ticket that left the queue):
	// wake the other workers' waiters as after a release.
	Wake admission.Wake
	// FailedOpen: resilience.quotaShareConcurrencyLimit is on and the attempt's wait for a
	// slot on its connection ended (the queue was full, or the wait budget ran out), so it
	// goes without a slot instead of being refused (guide §4 "Serialisatie van
	// quota-share-requests": fail-open). Its Lease holds nothing; the filter counts these.
	FailedOpen bool
	// unleased: the attempt is counted in its connection's in-memory in-flight count (it
	// holds no lease that shared data would count).
	unleased bool
	// recovery is the provider's recovery probe claim, held when the target was planned as
	// the probe (Target.probe) and won it; ended when the attempt's outcome is recorded or
	// the attempt is abandoned.
	recovery conncooldown.Claim
}

// ErrTargetUnavailable reports that a planned target cannot take the attempt now: try the
// next target. Every refusal Dispatch and TryDispatch return for it is an *ExcludedError,
// which says why.
var ErrTargetUnavailable = errors.New("engine: target no longer available")

// ExcludedError is a target excluded at dispatch, with the exclusion as the plan would have
// listed it: a layer's state changed since the plan (another worker's failure, an OPEN or
// HALF_OPEN breaker whose probe another request holds, a cooldown, lockout or terminal state
// reached while the request waited in the queue), or the request itself exhausted the
// target's connection (a failed attempt earlier in the same request). The caller moves on to
// the next target; AllExcluded counts the exclusion with the plan's.
// errors.Is(err, ErrTargetUnavailable) holds for it.
type ExcludedError struct {
	Exclusion combo.Exclusion
}

// Error implements error.
func (e *ExcludedError) Error() string {
	x := &e.Exclusion
	return "engine: " + x.Provider + "/" + x.Connection + " for " + x.Model + " excluded at dispatch: " + string(x.Reason)
}

// Is makes errors.Is(err, ErrTargetUnavailable) hold.
func (e *ExcludedError) Is(target error) bool { return target == ErrTargetUnavailable }

// Dispatch claims what sending an attempt to t needs, after checking t once more against
// every layer: state may have changed since the plan (another worker's failure), and
// same-request failover must not return to a connection the request just saw fail, under
// any model. Then it takes the concurrency slots, then the breaker's probe when the provider
// is HALF_OPEN; the probe is claimed only once the slots are granted, so a request waiting in
// the queue never holds it.
//
// A typed *admission.Error (queue full) means the request should be answered with it (with
// quotaShareConcurrencyLimit on, a full queue on the connection's cap grants the attempt
// without a slot instead: Dispatch.FailedOpen); Dispatch.Waiting means it must wait in the
// queue (TryDispatch); an *ExcludedError
// (errors.Is ErrTargetUnavailable) means try the next target. Another error is a store
// failure: the attempt may go, failing open. The re-check reads the records the plan read,
// which the filter's per-VM cache already holds: it costs no shared-data read. A target Plan
// saw clean, with the cache's epoch unchanged since, is not re-read at all (see cleanMemo).
func (e *Engine) Dispatch(t Target) (Dispatch, error) {
	pv := &e.providers[t.Provider]
	cn := &pv.conns[t.Connection]
	d := Dispatch{Target: t, Started: e.now()}
	clean := e.stillClean(t.clean) && (t.req == nil || len(t.req.spent) == 0)
	if !clean {
		if err := e.recheck(pv, cn, t, false); err != nil {
			return d, err
		}
	}
	res, err := e.admitter.Admit(cn.admit, t.Model)
	d.Wake = res.Wake
	if err != nil {
		return d, err
	}
	if !res.Granted {
		d.Ticket, d.Waiting = res.Ticket, true
		return d, nil
	}
	d.Lease, d.FailedOpen = res.Lease, res.FailedOpen
	if clean {
		// No breaker record: Allow would allow, CLOSED, and write nothing.
		d.probe = breaker.Decision{Allowed: true, State: breaker.Closed}
		e.launched(cn, &d)
		return d, nil
	}
	return d, e.claimProbe(pv, cn, &d)
}

// TryDispatch checks a waiting attempt's turn in the queue. It returns the attempt granted
// (Waiting false), still waiting, or an error: the typed queue timeout, or an *ExcludedError
// when a layer excludes the target now (the ticket then leaves the queue, so the request
// fails over at once instead of waiting for a slot on a call bound to fail) or when the slot
// came but the provider's probe is taken. With quotaShareConcurrencyLimit on, a wait that
// times out on the connection's cap is granted without a slot (Dispatch.FailedOpen).
func (e *Engine) TryDispatch(d Dispatch) (Dispatch, error) {
	pv := &e.providers[d.Target.Provider]
	cn := &pv.conns[d.Target.Connection]
	if err := e.recheck(pv, cn, d.Target, true); err != nil {
		wake, cerr := e.admitter.Cancel(d.Ticket)
		d.Ticket, d.Waiting, d.Wake = admission.Ticket{}, false, wake
		if cerr != nil {
			err = errors.Join(err, cerr) // the ticket expires on its own
		}
		return d, err
	}
	res, err := e.admitter.TryAdmit(d.Ticket)
	d.Wake = res.Wake
	if err != nil || !res.Granted {
		return d, err
	}
	d.Lease, d.Waiting, d.Started, d.FailedOpen = res.Lease, false, e.now(), res.FailedOpen
	return d, e.claimProbe(pv, cn, &d)
}

// recheck excludes a target the request itself exhausted, or one a layer excludes now. The
// breaker is read too for a request waiting in the queue (withBreaker), which leaves at once
// when the circuit opens; a dispatch asks it right after, in claimProbe. A layer that cannot
// be read fails open, as in Plan.
func (e *Engine) recheck(pv *provider, cn *connection, t Target, withBreaker bool) error {
	if t.req != nil && t.req.spentOn(t.Provider, t.Connection) {
		return e.excluded(t, combo.Exclusion{Provider: pv.res.ID, Connection: cn.res.ID, Model: t.Model,
			Reason: combo.ReasonUnavailable})
	}
	if e.stillClean(t.clean) {
		return nil
	}
	var degraded error
	var x combo.Exclusion
	var excluded bool
	if withBreaker {
		x, excluded = e.exclusion(pv, cn, t.Model, &degraded)
	} else {
		x, excluded = e.connectionExclusion(pv, cn, t.Model, &degraded)
	}
	if excluded && !(t.probe && probeable(&x)) {
		return e.excluded(t, x)
	}
	return nil
}

// probeable reports an exclusion a recovery probe target passes at the re-check: its
// connection still cools for a server error (claimProbe then claims the probe).
func probeable(x *combo.Exclusion) bool {
	return x.Reason == combo.ReasonUnavailable && x.Cause.ServerError()
}

// excluded notes x in t's request and returns it as an *ExcludedError.
func (e *Engine) excluded(t Target, x combo.Exclusion) error {
	t.req.noteExcluded(x)
	return &ExcludedError{Exclusion: x}
}

// claimProbe asks for the probes an attempt that holds its slots needs: the provider's
// recovery probe for a target planned as one (claimRecovery), then the breaker's decision.
// When the breaker refuses (OPEN again, or another worker holds the HALF_OPEN probe) the
// target is excluded as circuit_open: for the rest of the OPEN period, or about a second
// when another request holds the probe; a recovery probe another request claimed first
// leaves it excluded as cooling, as the plan did. Either way the slots go back at once (and
// a recovery claim already won ends). A breaker that cannot be read fails open.
func (e *Engine) claimProbe(pv *provider, cn *connection, d *Dispatch) error {
	x, refused := e.claimRecovery(pv, cn, d)
	if !refused {
		dec, err := e.breakers.Allow(pv.breaker)
		if err != nil || dec.Allowed {
			d.probe = dec
			e.launched(cn, d)
			return nil
		}
		_ = e.endRecovery(pv, cn, d)
		x = combo.Exclusion{Provider: pv.res.ID, Connection: cn.res.ID, Model: d.Target.Model,
			Reason: combo.ReasonCircuitOpen, RetryAfter: dec.RetryAfter}
		if dec.State == breaker.HalfOpen {
			x.RetryAfter = probeRetryAfter
		}
	}
	wake, _ := e.admitter.Release(d.Lease) // a failure is retried by the admitter
	d.Lease, d.Wake, d.FailedOpen = admission.Lease{}, d.Wake.Or(wake), false
	return e.excluded(d.Target, x)
}

// claimRecovery claims the provider's recovery probe for a target planned as one
// (conncooldown.ClaimProbe, a compare-and-swap with a deadline, as the breaker's HALF_OPEN
// probe is claimed). Without the claim — another request won it, or it could not be written:
// no claim, no probe — the target is refused with the exclusion the plan gave it (the
// request's answer without a probe); a target whose cooldown ended meanwhile goes as an
// ordinary attempt. Any other target passes.
func (e *Engine) claimRecovery(pv *provider, cn *connection, d *Dispatch) (combo.Exclusion, bool) {
	if !d.Target.probe {
		return combo.Exclusion{}, false
	}
	claim, _ := pv.cooldown.ClaimProbe(cn.cooldown)
	if claim.Held() {
		d.recovery = claim
		return combo.Exclusion{}, false
	}
	var degraded error // a layer that cannot be read fails open: the target goes
	return e.connectionExclusion(pv, cn, d.Target.Model, &degraded)
}

// endRecovery ends the attempt's recovery probe claim, if it holds one.
func (e *Engine) endRecovery(pv *provider, cn *connection, d *Dispatch) error {
	if !d.recovery.Held() {
		return nil
	}
	err := pv.cooldown.EndProbe(cn.cooldown, d.recovery)
	d.recovery = conncooldown.Claim{}
	return err
}

// launched counts an attempt that goes without a lease in its connection's in-memory load.
func (e *Engine) launched(cn *connection, d *Dispatch) {
	if !d.Lease.Held() {
		d.unleased = true
		cn.unleased++
	}
}

func (e *Engine) releaseProbe(pv *provider, d Dispatch) {
	if d.probe.Probe {
		_ = e.breakers.ReleaseProbe(pv.breaker, d.probe)
	}
	_ = e.endRecovery(pv, &pv.conns[d.Target.Connection], &d)
}

// Release hands back an attempt's concurrency slots and reports whom they may let in (the
// glue then wakes the other workers).
func (e *Engine) Release(d Dispatch) (admission.Wake, error) {
	if d.unleased {
		if cn := &e.providers[d.Target.Provider].conns[d.Target.Connection]; cn.unleased > 0 {
			cn.unleased--
		}
	}
	return e.admitter.Release(d.Lease)
}

// Renew keeps a long attempt's slots alive: a lease expires executionMaxWait after it was
// granted (so a worker that died holding it cannot leak it), and a stream that is still
// running renews it before then. It reports the lease's new deadline.
func (e *Engine) Renew(d *Dispatch) error {
	l, err := e.admitter.Renew(d.Lease)
	if err != nil {
		return err
	}
	d.Lease = l
	return nil
}

// Abandon releases an attempt that never produced an outcome (the client went away while it
// waited or before the upstream answered): its queue ticket or slots, and a held probe.
func (e *Engine) Abandon(d Dispatch) (admission.Wake, error) {
	e.releaseProbe(&e.providers[d.Target.Provider], d)
	if d.Waiting {
		return e.admitter.Cancel(d.Ticket)
	}
	return e.Release(d)
}

// Park attaches a waiting attempt to user (the filter's stream), which VisitQueues hands
// back when the attempt's turn may have come.
func (e *Engine) Park(d Dispatch, user any) { e.admitter.Attach(d.Ticket, user) }

// VisitQueues calls visit with the stream of each head of this engine's queue lines for the
// gate gate (0: every gate), and with the next head as long as the visit moved the line on
// (admission.Admitter.Heads): the only waiters worth asking shared data about.
func (e *Engine) VisitQueues(gate uint64, visit func(t admission.Ticket, user any)) {
	e.admitter.Heads(gate, visit)
}

// DropTicket takes a ticket out of its queue (a waiting attempt nobody holds any more).
func (e *Engine) DropTicket(t admission.Ticket) { _, _ = e.admitter.Cancel(t) }

// Queued reports whether attempts of this engine wait in a queue.
func (e *Engine) Queued() bool { return e.admitter.Waiting() }

// RetryAdmission runs again the releases and queue updates that met a store error, as far
// as they are due (every tick; tick is the period).
func (e *Engine) RetryAdmission(tick time.Duration) { e.admitter.Retry(tick) }

// AdmissionStoreErrors is what the admitter did with store errors on its own so far.
func (e *Engine) AdmissionStoreErrors() admission.StoreStats { return e.admitter.StoreStats() }
