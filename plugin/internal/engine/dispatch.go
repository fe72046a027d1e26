package engine

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
)

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

// Release hands back an attempt's concurrency slots and reports whether requests wait for
// them (the glue then wakes the other workers).
func (e *Engine) Release(d Dispatch) (waiters bool, err error) {
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
func (e *Engine) Abandon(d Dispatch) (waiters bool, err error) {
	e.releaseProbe(&e.providers[d.Target.Provider], d)
	if d.Waiting {
		return e.admitter.Cancel(d.Ticket)
	}
	return e.admitter.Release(d.Lease)
}
