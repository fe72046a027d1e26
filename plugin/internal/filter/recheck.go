package filter

import (
	"strconv"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/recheck"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// The opt-in re-check of expired connections (resilience.terminalRecheck; the rules are in
// plugin/internal/recheck's package doc). Each tick, a VM with the re-check on asks its
// engine for the checks it starts (at most once a second; none unless some expired
// connection is due and this VM wins the tick process-wide), and sends each as a callout:
// GET /v1/models to the provider's cluster with the connection's credential. The callout is
// filed under this root context (proxy-wasm-go-sdk proxywasm/internal/vmstate.go,
// registerHttpCallOut: the active context is the root during a tick), so its answer runs in
// proxyOnHttpCallResponse with the root effective, which is all the answer needs: it records
// the check and touches no stream (unlike a failover attempt dispatched from a tick, whose
// answer must be pinned to its stream: failover.go, pinnedCalloutAnswer).

// rechecker is one VM's re-check state: an engine of its own over a cache of its own, as the
// gauges have (metrics.go, gaugeReader), so the reads of a tick do not move the reads of this
// VM's next request out of it.
type rechecker struct {
	eng   *engine.Engine
	cache *state.Cache
	due   []engine.Recheck
}

// recheckTick starts this tick's re-checks. With the re-check off it returns before any
// shared-data operation or allocation.
func (p *pluginContext) recheckTick() {
	if !p.res.TerminalRecheck.Enabled {
		return
	}
	r := p.rechecks
	if r == nil {
		cache := state.NewCache(&p.store, isLiveKey)
		eng, err := engine.New(p.policy, cache, callbackClock{p}, engine.Options{})
		if err != nil {
			proxywasm.LogWarnf("spillway: terminal re-check: %v", err)
			return
		}
		r = &rechecker{eng: eng, cache: cache}
		p.rechecks = r
	}
	if !r.eng.RecheckLook() {
		return
	}
	if err := r.cache.Refresh(); err != nil {
		proxywasm.LogDebugf("spillway: terminal re-check: shared data: %v", err)
	}
	due, err := r.eng.DueRechecks(r.due[:0])
	r.due = due
	if err != nil {
		proxywasm.LogWarnf("spillway: terminal re-check: %v", err)
	}
	for _, rc := range due {
		p.sendRecheck(r, rc)
	}
}

// sendRecheck sends one check. A callout the host refuses (an unknown cluster) is an
// inconclusive check: the claim already moved the connection's next check on.
func (p *pluginContext) sendRecheck(r *rechecker, rc engine.Recheck) {
	pv := &p.res.Providers[rc.Provider]
	cn := &pv.Connections[rc.Connection]
	authority := pv.Authority
	if authority == "" {
		authority = pv.Cluster // Envoy's httpCall needs a :authority (Context::httpCall)
	}
	hdrs := append(make([][2]string, 0, 6), [2]string{":method", "GET"}, [2]string{":path", recheck.ModelsPath},
		[2]string{":authority", authority}, [2]string{"accept", "application/json"})
	hdrs = append(hdrs, recheck.ExtraHeaders(pv.API)...)
	if cn.CredentialHeader != "" {
		hdrs = append(hdrs, [2]string{cn.CredentialHeader, cn.CredentialValue.Reveal()})
	}
	timeout := uint32(max(r.eng.RecheckTimeout().Milliseconds(), 1))
	answer := func(numHeaders, _, _ int) { p.onRecheckAnswer(r, rc, numHeaders) }
	if _, err := proxywasm.DispatchHttpCall(pv.Cluster, hdrs, nil, nil, timeout, answer); err != nil {
		proxywasm.LogWarnf("spillway: terminal re-check of %s/%s: cluster %q refused the call: %v", pv.ID, cn.ID, pv.Cluster, err)
		p.metrics.recheck(rc, engine.RecheckInconclusive)
	}
}

// onRecheckAnswer records a check's answer (numHeaders 0: none came, a timeout or a reset).
func (p *pluginContext) onRecheckAnswer(r *rechecker, rc engine.Recheck, numHeaders int) {
	defer p.recoverRoot("terminal re-check answer")
	p.readClock()
	status := 0
	if numHeaders > 0 {
		if hdrs, err := proxywasm.GetHttpCallResponseHeaders(); err == nil {
			status, _ = statusAndType(hdrs)
		}
	}
	if err := r.cache.Refresh(); err != nil {
		proxywasm.LogDebugf("spillway: terminal re-check: shared data: %v", err)
	}
	out, err := r.eng.RecordRecheck(rc, status)
	pv := &p.res.Providers[rc.Provider]
	id := pv.Connections[rc.Connection].ID
	if err != nil {
		proxywasm.LogWarnf("spillway: terminal re-check of %s/%s: %v", pv.ID, id, err)
	}
	p.metrics.recheck(rc, out)
	switch out {
	case engine.RecheckRestored:
		proxywasm.LogInfof("spillway: terminal re-check: provider=%s connection=%s status=%d: the credential works again, expired state cleared",
			pv.ID, id, status)
	case engine.RecheckRefused:
		proxywasm.LogDebugf("spillway: terminal re-check: provider=%s connection=%s status=%d: still refused, stays expired", pv.ID, id, status)
	default:
		proxywasm.LogDebugf("spillway: terminal re-check: provider=%s connection=%s status=%s: inconclusive, nothing changed",
			pv.ID, id, statusText(status))
	}
}

func statusText(status int) string {
	if status == 0 {
		return "none"
	}
	return strconv.Itoa(status)
}
