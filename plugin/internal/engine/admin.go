package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/internal/providercooldown"
	"github.com/spillwayproxy/spillway/policies"
)

// The admin API's view of the engine: the operator's reads and resets of OmniRoute's status
// and reset APIs (guide §1 "Status-API: GET /api/monitoring/health", "Reset-API: POST
// /api/resilience/reset"; §3 "Model Cooldowns-dashboard" and "Cooldown Manager").
//
// Shared data has no key listing and no delete. Every listing here walks what the policy
// configures — its providers and their connections — and, for model lockouts, each
// connection's bounded lockout index; every reset writes through the engine's store, the
// tombstone (an empty value) standing for a delete. Over the filter's per-VM cache each
// write bumps the shared generation, so every worker VM sees a reset at its next refresh
// (before its next routing decision); each entry point here refreshes this VM's cache first,
// so what it reads and resets is what every worker wrote before it.
//
// Nothing here returns a credential or its fingerprint: snapshots carry ids, states,
// counts, times and the stored operator-facing error summary only.

// UnknownError reports a provider or connection id the policy does not configure, or a
// connection named under a provider it does not belong to.
type UnknownError struct {
	What     string // "provider" or "connection"
	ID       string // the id asked for
	Provider string // for a connection named under a provider: that provider ("" otherwise)
}

// Error implements error.
func (e *UnknownError) Error() string {
	if e.Provider != "" {
		return fmt.Sprintf("engine: %s %q is not a connection of provider %q", e.What, e.ID, e.Provider)
	}
	return fmt.Sprintf("engine: unknown %s %q", e.What, e.ID)
}

// Layer names a mechanism whose state an admin call could not read or write.
type Layer string

// Layers.
const (
	LayerSharedData       Layer = "shared_data" // the per-VM cache's generation read
	LayerBreaker          Layer = "breaker"
	LayerProviderCooldown Layer = "provider_cooldown"
	LayerCooldown         Layer = "connection_cooldown"
	LayerLockout          Layer = "model_lockout"
	LayerConcurrency      Layer = "concurrency"
)

// LayerError is one layer of one provider (and connection) that an admin call could not
// read or write. Err is for the operator's log; the admin reply names only the layer and
// the ids.
type LayerError struct {
	Provider   string
	Connection string // "" for a provider-level layer
	Layer      Layer
	Err        error
}

// Error implements error.
func (e *LayerError) Error() string {
	where := e.Provider
	if e.Connection != "" {
		where += "/" + e.Connection
	}
	if where != "" {
		where += " "
	}
	return "engine: " + where + string(e.Layer) + ": " + e.Err.Error()
}

// Unwrap returns the store's error.
func (e *LayerError) Unwrap() error { return e.Err }

// Health is the state of every layer of every configured provider (GET monitoring/health).
type Health struct {
	At time.Time
	// ProviderCooldownEnabled and ModelLockoutEnabled say whether the opt-in layers run.
	ProviderCooldownEnabled bool
	ModelLockoutEnabled     bool
	Providers               []ProviderHealth
	// Errors are the layers that could not be read; they show as clean.
	Errors []LayerError
}

// ProviderHealth is one provider's state.
type ProviderHealth struct {
	ID      string
	Profile policies.Profile
	API     policies.API
	// Breaker is the provider's circuit, lazy recovery applied (guide §1).
	Breaker breaker.Status
	// Gate is the provider's cooldown window gate (guide §1, opt-in); zero when it is off.
	Gate        providercooldown.Status
	Connections []ConnectionHealth
}

// ConnectionHealth is one connection's state (GET resilience/cooldowns). It never holds
// the credential or its fingerprint.
type ConnectionHealth struct {
	Provider string
	ID       string
	// Cooldown is the connection's cooldown, backoff, last error and terminal state (guide
	// §2).
	Cooldown conncooldown.Snapshot
	// Gate is the connection's provider cooldown backoff entry (guide §1, opt-in); zero when
	// the gate is off.
	Gate providercooldown.Status
	// Lockouts are the connection's active model lockouts (guide §3).
	Lockouts []lockout.Entry
	// Concurrency is the connection's caps and what holds them (guide §4, §5).
	Concurrency Concurrency
}

// Concurrency is a connection's caps in use and its queue.
type Concurrency struct {
	MaxConcurrent int // the connection's cap (0 = none)
	MaxQueueDepth int // waiting requests allowed (0 = unbounded)
	InFlight      int // leases held on the connection, every worker's
	Queued        int // requests waiting in its queue
	// Models are the per-model caps (modelConcurrency), by model id.
	Models []ModelConcurrency
}

// Capped reports whether the connection has any cap, so shared data counts its leases.
func (c Concurrency) Capped() bool { return c.MaxConcurrent > 0 || len(c.Models) > 0 }

// ModelConcurrency is one per-model cap and its leases.
type ModelConcurrency struct {
	Model    string
	Limit    int
	InFlight int
}

// refresh makes an admin call see every worker's writes: the per-VM cache starts over when
// the shared generation moved. A failed read is noted in errs (the cache then starts over
// anyway, so the call reads shared data directly).
func (e *Engine) refresh(errs *[]LayerError) {
	if e.cache == nil {
		return
	}
	if err := e.cache.Refresh(); err != nil {
		*errs = append(*errs, LayerError{Layer: LayerSharedData, Err: err})
	}
}

// selectProviders returns the indexes of provider id's provider, or of every provider for
// id "".
func (e *Engine) selectProviders(id string) ([]int, error) {
	if id == "" {
		all := make([]int, len(e.providers))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	rp, ok := e.res.Provider(id)
	if !ok {
		return nil, &UnknownError{What: "provider", ID: id}
	}
	return []int{rp.Index}, nil
}

// Health reads every layer of provider's provider, or of every provider for provider "".
// A layer that cannot be read shows as clean and is listed in Health.Errors; an unknown
// provider is an *UnknownError.
func (e *Engine) Health(provider string) (Health, error) {
	idx, err := e.selectProviders(provider)
	if err != nil {
		return Health{}, err
	}
	h := Health{At: e.now(), ProviderCooldownEnabled: e.gateOn, ModelLockoutEnabled: e.res.ModelLockout.Enabled}
	e.refresh(&h.Errors)
	for _, i := range idx {
		h.Providers = append(h.Providers, e.providerHealth(i, &h.Errors))
	}
	return h, nil
}

func (e *Engine) providerHealth(i int, errs *[]LayerError) ProviderHealth {
	pv := &e.providers[i]
	ph := ProviderHealth{ID: pv.res.ID, Profile: pv.res.Profile, API: pv.res.API}
	fail := func(conn string, l Layer, err error) {
		*errs = append(*errs, LayerError{Provider: pv.res.ID, Connection: conn, Layer: l, Err: err})
	}
	var err error
	if ph.Breaker, err = e.breakers.Status(pv.breaker); err != nil {
		fail("", LayerBreaker, err)
		ph.Breaker = breaker.Status{Provider: pv.res.ID, State: breaker.Closed}
	}
	if e.gateOn {
		if ph.Gate, err = e.gate.Check(pv.gate); err != nil {
			fail("", LayerProviderCooldown, err)
		}
	}
	ph.Connections = make([]ConnectionHealth, len(pv.conns))
	for j := range pv.conns {
		cn := &pv.conns[j]
		ch := &ph.Connections[j]
		ch.Provider, ch.ID = pv.res.ID, cn.res.ID
		if ch.Cooldown, err = pv.cooldown.Inspect(cn.cooldown); err != nil {
			fail(cn.res.ID, LayerCooldown, err)
			ch.Cooldown = conncooldown.Snapshot{Provider: pv.res.ID, Connection: cn.res.ID, Status: conncooldown.StatusAvailable}
		}
		if e.gateOn {
			if ch.Gate, err = e.gate.Check(cn.gate); err != nil {
				fail(cn.res.ID, LayerProviderCooldown, err)
			}
		}
		if ch.Lockouts, err = pv.lockout.List(cn.lockout); err != nil {
			fail(cn.res.ID, LayerLockout, err)
		}
		ch.Concurrency = e.concurrency(cn, func(err error) { fail(cn.res.ID, LayerConcurrency, err) })
	}
	return ph
}

// concurrency reads a connection's leases and queue: one live shared-data read per cap.
func (e *Engine) concurrency(cn *connection, fail func(error)) Concurrency {
	c := Concurrency{MaxConcurrent: cn.res.MaxConcurrent, MaxQueueDepth: cn.res.MaxQueueDepth}
	for _, model := range slices.Sorted(maps.Keys(cn.res.ModelConcurrency)) {
		c.Models = append(c.Models, ModelConcurrency{Model: model, Limit: cn.res.ModelConcurrency[model]})
	}
	if !cn.capped {
		return c
	}
	u, err := e.admitter.Inspect(cn.admit, "")
	if err != nil {
		fail(err)
		return c
	}
	c.InFlight, c.Queued = u.InFlight, u.Queued
	for i := range c.Models {
		m := &c.Models[i]
		if u, err = e.admitter.Inspect(cn.admit, m.Model); err != nil {
			fail(err)
			continue
		}
		m.InFlight = u.ModelInFlight
	}
	return c
}

// LockoutList is the active model lockouts of the connections asked about.
type LockoutList struct {
	At       time.Time
	Lockouts []lockout.Entry // in policy order, each connection's in the order they were first recorded
	Errors   []LayerError    // connections whose lockouts could not be read
}

// Lockouts returns the active model lockouts of provider's connections, or of every
// connection for provider "" (GET resilience/model-cooldowns).
func (e *Engine) Lockouts(provider string) (LockoutList, error) {
	idx, err := e.selectProviders(provider)
	if err != nil {
		return LockoutList{}, err
	}
	l := LockoutList{At: e.now()}
	e.refresh(&l.Errors)
	for _, i := range idx {
		pv := &e.providers[i]
		for j := range pv.conns {
			cn := &pv.conns[j]
			list, err := pv.lockout.List(cn.lockout)
			if err != nil {
				l.Errors = append(l.Errors, LayerError{Provider: pv.res.ID, Connection: cn.res.ID, Layer: LayerLockout, Err: err})
				continue
			}
			l.Lockouts = append(l.Lockouts, list...)
		}
	}
	return l, nil
}

// ResetReport says what a provider reset cleared.
type ResetReport struct {
	// Providers are the providers reset, in policy order.
	Providers []string
	// Breakers counts the circuits that held anything (OPEN, HALF_OPEN, DEGRADED or
	// counting failures) and are CLOSED and clean now.
	Breakers int
	// Gates counts provider cooldown gate entries (provider windows and connection backoff
	// entries) that held anything.
	Gates int
	// Connections lists the connections whose cooldown, backoff, error fields or terminal
	// state were removed; Terminal those of them that were terminal.
	Connections []string
	Terminal    []string
	// Lockouts counts the active model lockouts removed.
	Lockouts int
	// Errors are the layers that could not be reset; the rest were.
	Errors []LayerError
}

// Reset is the operator's reset of a provider — of every provider for provider "" (POST
// resilience/reset): its circuit returns to a clean CLOSED, its provider cooldown gate
// entries go, and each of its connections loses its cooldown, backoff, error fields and
// model lockouts, terminal states included: the guide's terminal states stay "totdat de
// credentials wijzigen of een operator ze reset" (§2), and this is that operator reset, while
// the cooldown manager (ClearCooldowns) never clears them (§3). Concurrency leases and
// queues are left alone: they are requests in flight. A layer that cannot be reset is
// reported and the rest are still reset.
func (e *Engine) Reset(provider string) (ResetReport, error) {
	idx, err := e.selectProviders(provider)
	if err != nil {
		return ResetReport{}, err
	}
	var rep ResetReport
	e.refresh(&rep.Errors)
	for _, i := range idx {
		pv := &e.providers[i]
		rep.Providers = append(rep.Providers, pv.res.ID)
		fail := func(conn string, l Layer, err error) {
			rep.Errors = append(rep.Errors, LayerError{Provider: pv.res.ID, Connection: conn, Layer: l, Err: err})
		}
		if st, err := e.breakers.Status(pv.breaker); err != nil || !cleanCircuit(st) {
			if err := e.breakers.Reset(pv.breaker); err != nil {
				fail("", LayerBreaker, err)
			} else {
				rep.Breakers++
			}
		}
		if n, err := e.resetGate(pv.gate); err != nil {
			fail("", LayerProviderCooldown, err)
		} else {
			rep.Gates += n
		}
		for j := range pv.conns {
			cn := &pv.conns[j]
			// Transient state first; a terminal connection is skipped by that and cleared
			// by the second call, so the report knows which were terminal.
			r, err := pv.cooldown.Clear(cn.cooldown, false)
			terminal := r == conncooldown.SkippedTerminal
			if terminal {
				r, err = pv.cooldown.Clear(cn.cooldown, true)
			}
			switch {
			case err != nil:
				fail(cn.res.ID, LayerCooldown, err)
			case r == conncooldown.Cleared:
				rep.Connections = append(rep.Connections, cn.res.ID)
				if terminal {
					rep.Terminal = append(rep.Terminal, cn.res.ID)
				}
			}
			if n, err := e.resetGate(cn.gate); err != nil {
				fail(cn.res.ID, LayerProviderCooldown, err)
			} else {
				rep.Gates += n
			}
			if n, err := pv.lockout.ClearConnection(cn.lockout); err != nil {
				fail(cn.res.ID, LayerLockout, err)
			} else {
				rep.Lockouts += n
			}
		}
	}
	return rep, nil
}

// cleanCircuit reports a circuit with nothing to reset.
func cleanCircuit(st breaker.Status) bool {
	return st.State == breaker.Closed && st.Failures == 0 && st.OpenCycles == 0 && st.LastFailureAt.IsZero()
}

// resetGate removes a provider cooldown gate entry and reports whether it held a cooldown
// or counted failures. The entries exist only while the opt-in gate runs; a policy that
// turned it off leaves stale ones that nothing reads, so they are left too.
func (e *Engine) resetGate(entry providercooldown.Entry) (int, error) {
	if !e.gateOn {
		return 0, nil
	}
	st, err := e.gate.Check(entry)
	if err == nil && !st.Cooling && st.Failures == 0 {
		return 0, nil
	}
	if err := e.gate.Reset(entry); err != nil {
		return 0, err
	}
	return 1, nil
}

// CooldownSelection picks the connections of a cooldown clear (POST resilience/cooldowns):
// the named ones, or every connection (of Provider, when set).
type CooldownSelection struct {
	ConnectionIDs []string
	All           bool
	// Provider limits All to one provider; with ConnectionIDs each must belong to it.
	Provider string
}

// ClearReport says what a cooldown clear did, connection by connection (guide §3, Cooldown
// Manager: {cleared, unchanged, skippedTerminal, lockoutsCleared}).
type ClearReport struct {
	// Cleared lists connections whose cooldown, backoff or error fields (or provider
	// cooldown backoff entry) were removed.
	Cleared []string
	// Unchanged lists connections that held none of those (their lockouts may still have
	// been cleared).
	Unchanged []string
	// SkippedTerminal lists terminal connections, left as they are with their lockouts.
	SkippedTerminal []string
	// LockoutsCleared counts the active model lockouts removed from the other connections.
	LockoutsCleared int
	// Errors are the layers that could not be cleared; the rest were.
	Errors []LayerError
}

// ClearCooldowns lifts what keeps the selected connections out of routing for a transient
// reason — connection cooldown, backoff and error fields, the provider cooldown gate's
// backoff entry, model lockouts — and leaves terminal states (banned, expired,
// credits_exhausted) and their connections alone: "Terminale toestanden ... worden getoond
// maar hier nooit gewist" (guide §3, Cooldown Manager). Every id is checked before anything
// changes: an unknown one is an *UnknownError and nothing is cleared.
func (e *Engine) ClearCooldowns(sel CooldownSelection) (ClearReport, error) {
	targets, err := e.selectConnections(sel)
	if err != nil {
		return ClearReport{}, err
	}
	var rep ClearReport
	e.refresh(&rep.Errors)
	for _, t := range targets {
		pv := &e.providers[t[0]]
		cn := &pv.conns[t[1]]
		fail := func(l Layer, err error) {
			rep.Errors = append(rep.Errors, LayerError{Provider: pv.res.ID, Connection: cn.res.ID, Layer: l, Err: err})
		}
		r, err := pv.cooldown.Clear(cn.cooldown, false)
		if err != nil {
			fail(LayerCooldown, err)
			continue
		}
		if r == conncooldown.SkippedTerminal {
			rep.SkippedTerminal = append(rep.SkippedTerminal, cn.res.ID)
			continue
		}
		n, err := e.resetGate(cn.gate)
		if err != nil {
			fail(LayerProviderCooldown, err)
		}
		if r == conncooldown.Cleared || n > 0 {
			rep.Cleared = append(rep.Cleared, cn.res.ID)
		} else {
			rep.Unchanged = append(rep.Unchanged, cn.res.ID)
		}
		if n, err := pv.lockout.ClearConnection(cn.lockout); err != nil {
			fail(LayerLockout, err)
		} else {
			rep.LockoutsCleared += n
		}
	}
	return rep, nil
}

// selectConnections resolves a selection to (provider, connection) indexes in policy order,
// each once.
func (e *Engine) selectConnections(sel CooldownSelection) ([][2]int, error) {
	var only = -1
	if sel.Provider != "" {
		rp, ok := e.res.Provider(sel.Provider)
		if !ok {
			return nil, &UnknownError{What: "provider", ID: sel.Provider}
		}
		only = rp.Index
	}
	want := map[[2]int]bool{}
	for _, id := range sel.ConnectionIDs {
		rp, rc, ok := e.res.Connection(id)
		switch {
		case !ok:
			return nil, &UnknownError{What: "connection", ID: id}
		case only >= 0 && rp.Index != only:
			return nil, &UnknownError{What: "connection", ID: id, Provider: sel.Provider}
		}
		want[[2]int{rp.Index, rc.Index}] = true
	}
	var out [][2]int
	for i := range e.providers {
		if only >= 0 && i != only {
			continue
		}
		for j := range e.providers[i].conns {
			if sel.All || want[[2]int{i, j}] {
				out = append(out, [2]int{i, j})
			}
		}
	}
	return out, nil
}

// LockoutClear says what a model lockout clear removed.
type LockoutClear struct {
	Removed int          // active lockouts removed
	Errors  []LayerError // connections whose lockouts could not be cleared; the rest were
}

// ClearModelLockout re-enables model on a connection of provider — on each of its
// connections for connection "" — (DELETE resilience/model-cooldowns {provider, connection,
// model}): every lockout key that routing consults for model (exact, bare model, quota
// family) goes.
func (e *Engine) ClearModelLockout(provider, connection, model string) (LockoutClear, error) {
	conns, err := e.lockoutConnections(provider, connection)
	if err != nil {
		return LockoutClear{}, err
	}
	var rep LockoutClear
	e.refresh(&rep.Errors)
	for _, t := range conns {
		pv := &e.providers[t[0]]
		cn := &pv.conns[t[1]]
		n, err := pv.lockout.Delete(cn.lockout, model)
		if err != nil {
			rep.Errors = append(rep.Errors, LayerError{Provider: pv.res.ID, Connection: cn.res.ID, Layer: LayerLockout, Err: err})
			continue
		}
		rep.Removed += n
	}
	return rep, nil
}

// ClearAllModelLockouts removes every model lockout of provider's connections, or of every
// connection for provider "" (DELETE resilience/model-cooldowns {all: true}).
func (e *Engine) ClearAllModelLockouts(provider string) (LockoutClear, error) {
	idx, err := e.selectProviders(provider)
	if err != nil {
		return LockoutClear{}, err
	}
	var rep LockoutClear
	e.refresh(&rep.Errors)
	for _, i := range idx {
		pv := &e.providers[i]
		for j := range pv.conns {
			cn := &pv.conns[j]
			n, err := pv.lockout.ClearConnection(cn.lockout)
			if err != nil {
				rep.Errors = append(rep.Errors, LayerError{Provider: pv.res.ID, Connection: cn.res.ID, Layer: LayerLockout, Err: err})
				continue
			}
			rep.Removed += n
		}
	}
	return rep, nil
}

// lockoutConnections resolves {provider, connection} to (provider, connection) indexes.
func (e *Engine) lockoutConnections(provider, connection string) ([][2]int, error) {
	rp, ok := e.res.Provider(provider)
	if !ok {
		return nil, &UnknownError{What: "provider", ID: provider}
	}
	if connection == "" {
		out := make([][2]int, len(rp.Connections))
		for j := range out {
			out[j] = [2]int{rp.Index, j}
		}
		return out, nil
	}
	cp, rc, ok := e.res.Connection(connection)
	switch {
	case !ok:
		return nil, &UnknownError{What: "connection", ID: connection}
	case cp.Index != rp.Index:
		return nil, &UnknownError{What: "connection", ID: connection, Provider: provider}
	}
	return [][2]int{{rp.Index, rc.Index}}, nil
}

// JoinLayerErrors joins layer errors for a log line (nil when there are none).
func JoinLayerErrors(errs []LayerError) error {
	var out []error
	for i := range errs {
		out = append(out, &errs[i])
	}
	return errors.Join(out...)
}
