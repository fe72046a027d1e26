package filter

import (
	"fmt"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/stats"
	"github.com/spillwayproxy/spillway/policies"
)

// Spillway's Envoy stats (plugin/stats names them and says how their labels reach
// Prometheus). Counting costs a request no host call: a VM counts in its own memory and
// adds what it counted to Envoy's counters on each tick (at most a second later, see
// idleTickMs) and when the plugin is done; a labelled series is defined the first time it
// moves, so a policy with many connections defines only the series that ever count.
// Gauges are read from the state every worker shares, about once a second, by one VM (the
// directory's lowest id, see peers), which sets only those that changed.

// counter is one unlabelled counter.
type counter struct {
	id      uint32
	pending int64
}

// Increment counts n events.
func (c *counter) Increment(n int64) { c.pending += n }

func (c *counter) flush() {
	if c.pending == 0 {
		return
	}
	if err := hostabi.IncrementMetric(c.id, c.pending); err != nil {
		proxywasm.LogDebugf("spillway: increment metric: %v", err)
		return
	}
	c.pending = 0
}

// series is a labelled counter family: one series per index, each with its own stat.
type series struct {
	family  *stats.Family
	values  func(i int) []string // the label values of series i (asked once, when it is defined)
	pending []int64
	ids     []uint32
	defined []bool
	// dirty lists the series with pending counts, each once; its capacity is the number of
	// series, so counting never allocates.
	dirty []int32
}

func newSeries(f *stats.Family, n int, values func(i int) []string) series {
	return series{family: f, values: values, pending: make([]int64, n), ids: make([]uint32, n),
		defined: make([]bool, n), dirty: make([]int32, 0, n)}
}

// add counts n events on series i.
func (s *series) add(i int, n int64) {
	if i < 0 || i >= len(s.pending) || n <= 0 {
		return
	}
	if s.pending[i] == 0 {
		s.dirty = append(s.dirty, int32(i))
	}
	s.pending[i] += n
}

// flush adds the pending counts to Envoy's counters, defining the series that move for the
// first time; what fails stays pending for the next flush.
func (s *series) flush() {
	kept := s.dirty[:0]
	for _, i := range s.dirty {
		if !s.defined[i] {
			id, err := defineMetric(stats.Counter, s.family.Stat(s.values(int(i))...))
			if err != nil {
				proxywasm.LogDebugf("spillway: %v", err)
				kept = append(kept, i)
				continue
			}
			s.ids[i], s.defined[i] = id, true
		}
		if err := hostabi.IncrementMetric(s.ids[i], s.pending[i]); err != nil {
			proxywasm.LogDebugf("spillway: increment metric %s: %v", s.family.Name, err)
			kept = append(kept, i)
			continue
		}
		s.pending[i] = 0
	}
	s.dirty = kept
}

// gauges is a labelled gauge family: one series per index, set to a value read from the
// shared state.
type gauges struct {
	family    *stats.Family
	values    func(i int) []string
	ids       []uint32
	defined   []bool
	published []int64 // the value last set
	known     []bool  // published holds what this VM last set
}

func newGauges(f *stats.Family, n int, values func(i int) []string) gauges {
	return gauges{family: f, values: values, ids: make([]uint32, n), defined: make([]bool, n),
		published: make([]int64, n), known: make([]bool, n)}
}

// set makes series i show v, with a host call only when v is not what this VM last set.
func (g *gauges) set(i int, v int64) {
	if i < 0 || i >= len(g.ids) || (g.known[i] && g.published[i] == v) {
		return
	}
	if !g.defined[i] {
		id, err := defineMetric(stats.Gauge, g.family.Stat(g.values(i)...))
		if err != nil {
			proxywasm.LogDebugf("spillway: %v", err)
			return
		}
		g.ids[i], g.defined[i] = id, true
	}
	if err := hostabi.SetGauge(g.ids[i], uint64(max(v, 0))); err != nil {
		proxywasm.LogDebugf("spillway: set gauge %s: %v", g.family.Name, err)
		return
	}
	g.published[i], g.known[i] = v, true
}

// forget makes the next set of every series a host call.
func (g *gauges) forget() { clear(g.known) }

// defineMetric defines a stat (the SDK panics when the host refuses).
func defineMetric(kind stats.Kind, name string) (id uint32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("define metric %q: %v", name, r)
		}
	}()
	if kind == stats.Gauge {
		return uint32(proxywasm.DefineGaugeMetric(name)), nil
	}
	return uint32(proxywasm.DefineCounterMetric(name)), nil
}

// outcome is how an LLM request ended (stats.TagOutcome), 0 while undecided.
type outcome uint8

// The outcomes, in the order of outcomeNames.
const (
	outcomeNone outcome = iota
	outcomeSuccess
	outcomeUpstreamFailure
	outcomeClientGone
	outcomeFailedOpen
	outcomeFirstReply // the reply codes follow, in replyCodes' order
)

// replyCodes are the error.code values of the replies an LLM request can get from
// Spillway; a code outside them counts as replies.CodeInternal.
var replyCodes = [...]string{
	replies.CodeInvalidRequest, replies.CodeRequestTooLarge, replies.CodeModelNotFound,
	replies.CodeNoExecutableTargets, replies.CodeAllTargetsCoolingDown, replies.CodeProviderCircuitOpen,
	replies.CodeRateLimit, replies.CodeQueueFull, replies.CodeQueueTimeout, replies.CodeExecutionTimeout,
	replies.CodeSemaphoreQueueFull, replies.CodeSemaphoreTimeout, replies.CodeMisconfigured,
	replies.CodeUpstreamError, replies.CodeInternal,
}

const outcomeCount = int(outcomeFirstReply) + len(replyCodes)

// outcomeName is the label value of an outcome.
func outcomeName(o outcome) string {
	switch o {
	case outcomeSuccess:
		return stats.OutcomeSuccess
	case outcomeUpstreamFailure:
		return stats.OutcomeUpstreamFailure
	case outcomeFailedOpen:
		return stats.OutcomeFailedOpen
	case outcomeNone, outcomeClientGone:
		return stats.OutcomeClientGone
	}
	if i := int(o - outcomeFirstReply); i < len(replyCodes) {
		return replyCodes[i]
	}
	return replies.CodeInternal
}

// replyOutcome is the outcome of a reply with error.code code.
func replyOutcome(code string) outcome {
	internal := outcomeFirstReply
	for i, c := range replyCodes {
		switch c {
		case code:
			return outcomeFirstReply + outcome(i)
		case replies.CodeInternal:
			internal = outcomeFirstReply + outcome(i)
		}
	}
	return internal
}

// failureReasons are the classifications a failure can have (stats.TagReason); another
// reason counts as failure.ReasonUnknown.
var failureReasons = [...]failure.Reason{
	failure.ReasonRateLimit, failure.ReasonQuotaExhausted, failure.ReasonConcurrencyLimited,
	failure.ReasonServerError, failure.ReasonTimeout, failure.ReasonTransport, failure.ReasonAuthError,
	failure.ReasonNotFound, failure.ReasonModelCapacity, failure.ReasonCreditsExhausted, failure.ReasonBanned,
	failure.ReasonExpired, failure.ReasonRequestRejected, failure.ReasonBadRequest, failure.ReasonStreamStall,
	failure.ReasonStreamTruncated, failure.ReasonUnknown,
}

func reasonIndex(r failure.Reason) int {
	for i, v := range failureReasons {
		if v == r {
			return i
		}
	}
	return len(failureReasons) - 1 // unknown
}

// watchdogKind is why the watchdog ended a stream (stats.TagReason of
// ConnectionWatchdogAborts).
type watchdogKind uint8

const (
	watchdogSlowStream watchdogKind = iota // throughput below the floor over the window
	watchdogStall                          // no model output in time
	watchdogKinds
)

// gaugeEvery is how often the publishing VM reads the gauges; every gaugeFullEvery-th
// reading sets every gauge again, whatever this VM believes it last set (another VM may
// have published meanwhile, while the directory's view of who publishes moved).
const (
	gaugeEvery     = time.Second
	gaugeFullEvery = 10
)

// metrics are the plugin's stats.
type metrics struct {
	requests      counter // HTTP streams seen
	routed        counter // LLM requests Spillway chose a target for
	localReplies  counter // replies Spillway answered itself
	attempts      counter // upstream attempts, the first included
	failovers     counter // attempts after the first (same-request failover)
	restated      counter // upstream statuses restated
	streamErrors  counter // 200 event streams whose first event was an error
	truncated     counter // committed streams that ended without their terminal event
	queued        counter // requests that waited for a concurrency slot
	failedOpen    counter // attempts sent without a slot (quotaShareConcurrencyLimit)
	requestOnly   counter // failures that named a model the connection does not serve
	wakeups       counter // cross-worker wake-ups sent
	misconfigured counter // requests answered spillway_misconfigured
	routerRetries counter // failover attempts made as the router's retries (router.go)
	unlinked      counter // router-mode requests no upstream instance saw a try of
	panics        counter // callbacks that panicked and failed open
	// adminLookalikes: requests answered 404 for looking like the admin API (admin.go).
	adminLookalikes counter

	// storeErrors: admission steps that met a store error, by storeOutcome.
	storeErrors storeErrorCounts
	// routeRequests: series route*outcomeCount + outcome, route len(res.Routes) for none.
	routeRequests series
	// Per connection: series connIndex(target) (connFailures: *len(failureReasons) + reason,
	// watchdogAborts: *watchdogKinds + kind).
	connAttempts, connFailovers, connRestated, connQueueWaits, connQueueWaitMs series
	connFailures, watchdogAborts                                               series
	// connRechecks: series connIndex*len(recheckOutcomes) + outcome (recheck.go).
	connRechecks series

	// Gauges, per provider and per connection.
	breakerState, providerCooling                                   gauges
	connCooling, connTerminal, connLockouts, queueDepth, slotsInUse gauges

	connBase  []int // each provider's first connection index
	routes    int
	gaugesAt  time.Time
	gaugeRuns int
}

// all lists the unlabelled counters with their families, for definition and flushing.
func (m *metrics) all() [17]struct {
	f *stats.Family
	c *counter
} {
	return [...]struct {
		f *stats.Family
		c *counter
	}{
		{&stats.Requests, &m.requests},
		{&stats.Routed, &m.routed},
		{&stats.LocalReplies, &m.localReplies},
		{&stats.Attempts, &m.attempts},
		{&stats.Failovers, &m.failovers},
		{&stats.Restated, &m.restated},
		{&stats.StreamErrorEvents, &m.streamErrors},
		{&stats.TruncatedStreams, &m.truncated},
		{&stats.Queued, &m.queued},
		{&stats.AdmissionFailedOpen, &m.failedOpen},
		{&stats.ModelNotServed, &m.requestOnly},
		{&stats.Wakeups, &m.wakeups},
		{&stats.Misconfigured, &m.misconfigured},
		{&stats.RouterRetries, &m.routerRetries},
		{&stats.RouterUnlinked, &m.unlinked},
		{&stats.Panics, &m.panics},
		{&stats.AdminLookalikes, &m.adminLookalikes},
	}
}

// define defines the unlabelled counters and sizes the labelled families for the policy
// (their series are defined when they first count).
func (m *metrics) define(res *policies.Resolved) {
	for _, e := range m.all() {
		e.c.id = uint32(proxywasm.DefineCounterMetric(e.f.Name))
	}
	type conn struct{ provider, connection string }
	var conns []conn
	m.connBase = make([]int, len(res.Providers))
	for i := range res.Providers {
		pv := &res.Providers[i]
		m.connBase[i] = len(conns)
		for j := range pv.Connections {
			conns = append(conns, conn{pv.ID, pv.Connections[j].ID})
		}
	}
	m.routes = len(res.Routes)
	n := len(conns)
	m.storeErrors.series = newSeries(&stats.AdmissionStoreErrors, len(storeOutcomes), func(i int) []string {
		return []string{storeOutcomes[i]}
	})
	byConn := func(i int) []string { return []string{conns[i].provider, conns[i].connection} }
	m.routeRequests = newSeries(&stats.RouteRequests, (m.routes+1)*outcomeCount, func(i int) []string {
		route, o := i/outcomeCount, outcome(i%outcomeCount)
		model := stats.NoRoute
		if route < m.routes {
			model = res.Routes[route].Model
		}
		return []string{model, outcomeName(o)}
	})
	m.connAttempts = newSeries(&stats.ConnectionAttempts, n, byConn)
	m.connFailovers = newSeries(&stats.ConnectionFailovers, n, byConn)
	m.connRestated = newSeries(&stats.ConnectionRestated, n, byConn)
	m.connQueueWaits = newSeries(&stats.ConnectionQueueWaits, n, byConn)
	m.connQueueWaitMs = newSeries(&stats.ConnectionQueueWaitMs, n, byConn)
	m.connFailures = newSeries(&stats.ConnectionFailures, n*len(failureReasons), func(i int) []string {
		c := conns[i/len(failureReasons)]
		return []string{c.provider, c.connection, string(failureReasons[i%len(failureReasons)])}
	})
	m.watchdogAborts = newSeries(&stats.ConnectionWatchdogAborts, n*int(watchdogKinds), func(i int) []string {
		c := conns[i/int(watchdogKinds)]
		reason := stats.WatchdogSlowStream
		if watchdogKind(i%int(watchdogKinds)) == watchdogStall {
			reason = stats.WatchdogStall
		}
		return []string{c.provider, c.connection, reason}
	})
	m.connRechecks = newSeries(&stats.ConnectionRechecks, n*len(recheckOutcomes), func(i int) []string {
		c := conns[i/len(recheckOutcomes)]
		return []string{c.provider, c.connection, recheckOutcomes[i%len(recheckOutcomes)].label}
	})
	byProvider := func(i int) []string { return []string{res.Providers[i].ID} }
	m.breakerState = newGauges(&stats.BreakerState, len(res.Providers), byProvider)
	m.providerCooling = newGauges(&stats.ProviderCooling, len(res.Providers), byProvider)
	m.connCooling = newGauges(&stats.ConnectionCooling, n, byConn)
	m.connTerminal = newGauges(&stats.ConnectionTerminal, n, byConn)
	m.connLockouts = newGauges(&stats.ConnectionLockouts, n, byConn)
	m.queueDepth = newGauges(&stats.ConnectionQueueDepth, n, byConn)
	m.slotsInUse = newGauges(&stats.ConnectionSlotsInUse, n, byConn)
}

// connIndex is a target's connection in the per-connection families.
func (m *metrics) connIndex(t engine.Target) int {
	if t.Provider < 0 || t.Provider >= len(m.connBase) {
		return -1
	}
	return m.connBase[t.Provider] + t.Connection
}

// request counts an LLM request's end: route is its route index + 1 (0: none).
func (m *metrics) request(route int, o outcome) {
	r := route - 1
	if r < 0 || r >= m.routes {
		r = m.routes
	}
	if o == outcomeNone {
		o = outcomeClientGone
	}
	m.routeRequests.add(r*outcomeCount+int(o), 1)
}

// attempt counts an upstream attempt on t.
func (m *metrics) attempt(t engine.Target) { m.connAttempts.add(m.connIndex(t), 1) }

// failure counts a classified failure on t.
func (m *metrics) failure(t engine.Target, r failure.Reason) {
	if c := m.connIndex(t); c >= 0 {
		m.connFailures.add(c*len(failureReasons)+reasonIndex(r), 1)
	}
}

// queueWait counts a wait in t's queue that ended after waited.
func (m *metrics) queueWait(t engine.Target, waited time.Duration) {
	c := m.connIndex(t)
	m.connQueueWaits.add(c, 1)
	m.connQueueWaitMs.add(c, max(waited.Milliseconds(), 0))
}

// WatchdogAbort counts a stream of t that the throughput watchdog (kind watchdogSlowStream)
// or the content-stall check (watchdogStall) ended (guide §6): the watchdog calls it once
// per stream it ends.
func (m *metrics) WatchdogAbort(t engine.Target, kind watchdogKind) {
	if c := m.connIndex(t); c >= 0 && kind < watchdogKinds {
		m.watchdogAborts.add(c*int(watchdogKinds)+int(kind), 1)
	}
}

// recheckOutcomes are the outcomes of a terminal re-check with their label values
// (stats.TagOutcome of stats.ConnectionRechecks).
var recheckOutcomes = [...]struct {
	outcome engine.RecheckOutcome
	label   string
}{
	{engine.RecheckRestored, stats.RecheckRestored},
	{engine.RecheckRefused, stats.RecheckRefused},
	{engine.RecheckInconclusive, stats.RecheckInconclusive},
}

// recheck counts a terminal re-check of rc's connection that ended with o.
func (m *metrics) recheck(rc engine.Recheck, o engine.RecheckOutcome) {
	c := m.connIndex(engine.Target{Provider: rc.Provider, Connection: rc.Connection})
	if c < 0 {
		return
	}
	for i, ro := range recheckOutcomes {
		if ro.outcome == o {
			m.connRechecks.add(c*len(recheckOutcomes)+i, 1)
		}
	}
}

// flush adds every pending count to Envoy's counters.
func (m *metrics) flush() {
	for _, e := range m.all() {
		e.c.flush()
	}
	for _, s := range [...]*series{&m.storeErrors.series, &m.routeRequests, &m.connAttempts, &m.connFailovers, &m.connRestated,
		&m.connQueueWaits, &m.connQueueWaitMs, &m.connFailures, &m.watchdogAborts, &m.connRechecks} {
		s.flush()
	}
}

func (m *metrics) allGauges() [7]*gauges {
	return [...]*gauges{&m.breakerState, &m.providerCooling, &m.connCooling, &m.connTerminal, &m.connLockouts,
		&m.queueDepth, &m.slotsInUse}
}

// publishGauges reads the shared state and sets the gauges that changed, when this VM
// publishes them and gaugeEvery has passed since its last reading. A VM that stopped
// publishing forgets what it set, so it sets everything again if it publishes again.
func (p *pluginContext) publishGauges(publisher bool) {
	m := &p.metrics
	if !publisher {
		if !m.gaugesAt.IsZero() {
			m.gaugesAt = time.Time{}
			for _, g := range m.allGauges() {
				g.forget()
			}
		}
		return
	}
	now := p.clock()
	if !m.gaugesAt.IsZero() && now.Sub(m.gaugesAt) < gaugeEvery {
		return
	}
	m.gaugesAt = now
	if m.gaugeRuns++; m.gaugeRuns%gaugeFullEvery == 0 {
		for _, g := range m.allGauges() {
			g.forget()
		}
	}
	eng, err := p.gaugeReader()
	if err != nil {
		proxywasm.LogWarnf("spillway: gauges: %v", err)
		return
	}
	gateOn := eng.GateEnabled()
	for i := range p.res.Providers {
		g, err := eng.ProviderGauges(i)
		if err != nil {
			proxywasm.LogDebugf("spillway: gauges of %s: %v", p.res.Providers[i].ID, err)
		}
		m.breakerState.set(i, breakerValue(g.Breaker))
		if gateOn {
			m.providerCooling.set(i, boolValue(g.Cooling))
		}
		for j := range p.res.Providers[i].Connections {
			c := m.connBase[i] + j
			cg, err := eng.ConnectionGauges(i, j)
			if err != nil {
				proxywasm.LogDebugf("spillway: gauges of %s/%s: %v", p.res.Providers[i].ID, p.res.Providers[i].Connections[j].ID, err)
			}
			m.connCooling.set(c, boolValue(cg.Status == conncooldown.StatusUnavailable))
			m.connTerminal.set(c, boolValue(cg.Status.Terminal()))
			m.connLockouts.set(c, int64(cg.Lockouts))
			if cg.Capped {
				m.queueDepth.set(c, int64(cg.Queued))
				m.slotsInUse.set(c, int64(cg.SlotsInUse))
			}
		}
	}
}

// gaugeReader is the engine the gauges are read with, its per-VM cache refreshed. It has a
// cache of its own: refreshing the request path's cache from a tick would move the reads of
// what other workers wrote out of this VM's next request, so a VM's requests would cost
// what they cost depending on whether it publishes the gauges.
func (p *pluginContext) gaugeReader() (*engine.Engine, error) {
	if p.gaugeEngine == nil {
		p.gaugeCache = state.NewCache(&p.store, isLiveKey)
		e, err := engine.New(p.policy, p.gaugeCache, callbackClock{p}, engine.Options{})
		if err != nil {
			return nil, err
		}
		p.gaugeEngine = e
	}
	if err := p.gaugeCache.Refresh(); err != nil {
		proxywasm.LogDebugf("spillway: gauges: shared data: %v", err)
	}
	return p.gaugeEngine, nil
}

// breakerValue is a circuit's gauge value: 0 CLOSED, 1 DEGRADED, 2 OPEN, 3 HALF_OPEN
// (stats.BreakerState).
func breakerValue(s breaker.State) int64 {
	switch s {
	case breaker.Degraded:
		return 1
	case breaker.Open:
		return 2
	case breaker.HalfOpen:
		return 3
	}
	return 0
}

func boolValue(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// storeOutcome is what became of an admission step that met a store error
// (stats.AdmissionStoreErrors), in the order of storeOutcomes.
type storeOutcome uint8

const (
	storeRetried storeOutcome = iota
	storeFailedOpen
	storeAbandoned
)

var storeOutcomes = [...]string{stats.StoreRetried, stats.StoreFailedOpen, stats.StoreAbandoned}

// storeErrorCounts counts the store errors the filter handled (admission and queue polls,
// renewals) and takes in those the engine's admitter handled on its own (releases, queue
// updates), from the running totals it reports.
type storeErrorCounts struct {
	series
	admitter admission.StoreStats // the admitter's totals as last taken in
}

func (c *storeErrorCounts) count(o storeOutcome) { c.add(int(o), 1) }

// takeIn adds what the admitter counted since the last call.
func (c *storeErrorCounts) takeIn(now admission.StoreStats) {
	c.add(int(storeRetried), int64(now.Retried-c.admitter.Retried))
	c.add(int(storeAbandoned), int64(now.Abandoned-c.admitter.Abandoned))
	c.admitter = now
}
