package engine

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/recheck"
)

// The opt-in re-check of expired connections (resilience.terminalRecheck, issue 19; the
// recheck package doc has the rules). The engine finds the expired connections (conncooldown),
// asks the scheduler which are due and claims them process-wide; the filter sends each
// check (GET /v1/models with the connection's credential) and reports its status here, which
// restores the connection on a 2xx. Only the expired state is ever re-checked: banned and
// credits_exhausted are the provider's word on the account, which no listing of models can
// overturn.

// Recheck is one claimed re-check of an expired connection.
type Recheck struct {
	// Provider and Connection are the connection's indexes in the resolved policy.
	Provider, Connection int
	ticket               recheck.Ticket
}

// RecheckOutcome is what a re-check's answer did to its connection.
type RecheckOutcome int

// Outcomes.
const (
	// RecheckInconclusive: nothing changed (not a 2xx, 401 or 403, no answer; or a 2xx for an
	// expiry that had ended meanwhile — reset, or expired again with a later failure).
	RecheckInconclusive RecheckOutcome = iota
	// RecheckRestored: a 2xx cleared the expired state.
	RecheckRestored
	// RecheckRefused: a 401 or 403; the connection stays expired and its next check backs off.
	RecheckRefused
)

// RecheckEnabled reports whether the policy turns the re-check on. When it is off the engine
// holds no scheduler, and DueRechecks touches no shared data.
func (e *Engine) RecheckEnabled() bool { return e.rechecks != nil }

// RecheckTimeout is how long a check's request may take.
func (e *Engine) RecheckTimeout() time.Duration {
	if e.rechecks == nil {
		return 0
	}
	return e.rechecks.Config().Timeout
}

// RecheckLook reports whether this worker looks for due re-checks in this callback: at most
// once per tick (no shared data). A caller with a cache to refresh first asks this.
func (e *Engine) RecheckLook() bool { return e.rechecks != nil && e.rechecks.Look() }

// DueRechecks claims the re-checks this worker starts now, after a RecheckLook that said so,
// and appends them to buf: the expired connections whose check is due, at most MaxPerTick,
// once this worker has won the tick process-wide. It writes shared data only when some
// connection is due. A connection whose state cannot be read is skipped (the error joined in).
func (e *Engine) DueRechecks(buf []Recheck) ([]Recheck, error) {
	s := e.rechecks
	if s == nil {
		return buf, nil
	}
	limit := s.Config().MaxPerTick
	start := len(buf)
	var errs []error
	type due struct {
		provider, connection int
		since                time.Time
	}
	var found [10]due // policies bound maxPerTick to 10
	candidates := found[:0]
scan:
	for i := range e.providers {
		pv := &e.providers[i]
		for j := range pv.conns {
			if len(candidates) == limit {
				break scan
			}
			c := &pv.conns[j]
			since, expired, err := pv.cooldown.ExpiredSince(c.cooldown)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !expired {
				continue
			}
			ok, err := s.Due(c.recheck, since)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				candidates = append(candidates, due{i, j, since})
			}
		}
	}
	if len(candidates) == 0 {
		return buf, errors.Join(errs...)
	}
	won, err := s.ClaimTick()
	if err != nil || !won {
		return buf, errors.Join(append(errs, err)...)
	}
	for _, d := range candidates {
		t, ok, err := s.Claim(e.providers[d.provider].conns[d.connection].recheck, d.since)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok && len(buf)-start < limit {
			buf = append(buf, Recheck{Provider: d.provider, Connection: d.connection, ticket: t})
		}
	}
	return buf, errors.Join(errs...)
}

// RecordRecheck applies the answer of a re-check (status 0: no response, a timeout or a
// reset): a 2xx restores the connection if it is still in the expiry the check was about; a
// 401 or 403 keeps it expired and backs its next check off; anything else changes nothing.
func (e *Engine) RecordRecheck(r Recheck, status int) (RecheckOutcome, error) {
	if e.rechecks == nil || r.Provider < 0 || r.Provider >= len(e.providers) ||
		r.Connection < 0 || r.Connection >= len(e.providers[r.Provider].conns) {
		return RecheckInconclusive, nil
	}
	pv := &e.providers[r.Provider]
	c := &pv.conns[r.Connection]
	switch recheck.AnswerOf(status) {
	case recheck.Passed:
		cleared, err := pv.cooldown.RestoreExpired(c.cooldown, r.ticket.Since())
		if err != nil {
			return RecheckInconclusive, err
		}
		if err := e.rechecks.Passed(r.ticket); err != nil {
			return outcomeIf(cleared, RecheckRestored), err
		}
		return outcomeIf(cleared, RecheckRestored), nil
	case recheck.Refused:
		return RecheckRefused, e.rechecks.Refused(r.ticket)
	}
	return RecheckInconclusive, nil
}

func outcomeIf(ok bool, o RecheckOutcome) RecheckOutcome {
	if ok {
		return o
	}
	return RecheckInconclusive
}
