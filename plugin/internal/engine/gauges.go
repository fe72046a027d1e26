package engine

import (
	"errors"

	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
)

// ProviderGauges is what the metrics show of a provider's shared state.
type ProviderGauges struct {
	Breaker breaker.State // the circuit with lazy recovery applied
	// Cooling: the opt-in provider cooldown gate holds the provider back (false with the
	// gate off).
	Cooling bool
}

// ConnectionGauges is what the metrics show of a connection's shared state, across
// workers.
type ConnectionGauges struct {
	Status   conncooldown.Status // available, unavailable (cooling) or a terminal state
	Lockouts int                 // model lockouts in force
	// Capped: the connection has a concurrency cap, so shared data counts its slots and
	// queue (SlotsInUse and Queued are 0 otherwise).
	Capped     bool
	SlotsInUse int // live leases
	Queued     int // live queue tickets
}

// GateEnabled reports whether the opt-in provider cooldown gate is on.
func (e *Engine) GateEnabled() bool { return e.gateOn }

// ProviderGauges reads provider i's state without writing anything. A layer that cannot be
// read reports its zero state and the error.
func (e *Engine) ProviderGauges(i int) (ProviderGauges, error) {
	pv := &e.providers[i]
	st, err := e.breakers.Status(pv.breaker)
	g := ProviderGauges{Breaker: st.State}
	if e.gateOn {
		s, gerr := e.gate.Check(pv.gate)
		g.Cooling, err = s.Cooling, errors.Join(err, gerr)
	}
	return g, err
}

// ConnectionGauges reads connection j of provider i without writing anything: its cooldown
// or terminal state, its model lockouts in force and, for a capped connection, the slots
// and queue tickets every worker holds. A layer that cannot be read reports its zero state
// and the error.
func (e *Engine) ConnectionGauges(i, j int) (ConnectionGauges, error) {
	pv := &e.providers[i]
	cn := &pv.conns[j]
	a, err := pv.cooldown.Check(cn.cooldown)
	g := ConnectionGauges{Status: a.Status, Capped: cn.capped}
	n, lerr := pv.lockout.Active(cn.lockout)
	g.Lockouts, err = n, errors.Join(err, lerr)
	if cn.capped {
		u, aerr := e.admitter.Inspect(cn.admit, "")
		g.SlotsInUse, g.Queued, err = u.InFlight, u.Queued, errors.Join(err, aerr)
	}
	return g, err
}
