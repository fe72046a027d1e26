// Package engine composes Spillway's resilience mechanisms into the decisions of one request
// — which targets are eligible, in what order, whether a target may be dispatched now — and
// records each attempt's outcome in every layer it concerns. It reads a resolved policy and
// depends only on a state.Store and a state.Clock, so it runs natively in tests and inside
// the filter unchanged.
//
// How the layers compose:
//
//   - Plan checks every layer for every candidate (breaker, provider cooldown gate,
//     connection cooldown and terminal states, model lockout; a clean candidate from its
//     memo, see below) and orders the eligible ones.
//     Dispatch and TryDispatch check the target again, since state changes between a plan
//     and a dispatch (another worker's failure, a wait in the queue): a target excluded by
//     then is an *ExcludedError, the caller moves on, and AllExcluded counts it with the
//     plan's exclusions.
//   - A request remembers what its own failures blamed (Buffers): failover never goes back
//     to a connection that failed earlier in the same request, under any model, nor to a
//     provider a provider-scoped failure blamed — except after a failure about the model
//     alone (failure.Verdict.ModelOnly: a missing, retired or forbidden model), which
//     exhausted only that model there. Other requests are governed by the layers alone.
//   - A failure blames the layers its verdict names. The breaker counts provider-level
//     failures (the trip statuses, transport failures) and every failure a rule declares
//     scope: provider for, which leaves the connection alone (guide §7: a declared scope is
//     honoured). Connection scope and terminal states go to the connection. Model-level
//     scopes go to the model lockout and, when the lockout does not take them (off, or not
//     counting the status), to the connection cooldown — except a model that does not
//     exist there.
//   - A 404 or 400 that names a missing model (not_found, or a bad request about the model)
//     that the model lockout does not take is recorded in no layer: it only makes the
//     request that saw it move on (Result.RequestOnly, for the filter's log and metric).
//     This is the guide's debugging rule (Foutopsporing: "slechts één model faalt → geef de
//     voorkeur aan model-lockout boven connection-cooldown") and §3's example ("lokale
//     providers die 404 teruggeven voor één ontbrekend model"): with the lockout off,
//     cooling the whole connection would let a client that probes model names through a
//     glob route take the connection out for every model. An operator who wants such
//     models kept out turns model lockout on (404 is in its default errorCodes).
//   - A request-scoped failure (failure.ScopeRequest: the account's project lacks the API)
//     is recorded in no layer; the request that saw it moves on from the connection, which
//     stays active for every other request.
//   - A stream stall (RecordStall) records the error on the connection without a cooldown
//     unless streamStallCooldown is on, and never counts for the breaker (guide §2).
//   - Operators read and reset the layers through admin.go (the admin API's health snapshot,
//     provider reset, cooldown manager and model lockout clears): listings walk the policy's
//     providers and connections and each connection's bounded lockout index, since shared
//     data has no key listing; resets write through the store, so every worker sees them at
//     its next refresh. A provider reset is the guide's operator reset and clears terminal
//     states too (§2); the cooldown manager never does (§3). Listings and resets name the
//     policy's own ids, but the records they reach are the upstream account's and the
//     upstream's (state's keys.go): a reset through one policy clears them for every policy
//     in the proxy on the same credential or upstream.
//   - A model a glob route passes on is a name the policy does not spell, and its lockouts
//     share the connection's bounded pool with every name clients invent. Each worker
//     remembers, per connection and in memory only (lockout.Served), the ones the provider
//     served it, and tells the lockout so when one of them fails (lockout.Failure.Served):
//     no name the provider refused as unknown displaces such a model's lockout, and no
//     failure of a name without evidence locks a real model's bare name or family (the
//     lockout package doc states both; issue 18).
//   - The opt-in re-check of expired connections (recheck.go, resilience.terminalRecheck)
//     leaves the guide's terminal state in place (§2) and clears only the expired one, and
//     only when a check sent with the connection's current credential passed; banned and
//     credits_exhausted are never re-checked.
//   - A truncated stream (RecordTruncation) is a synthesised 502 at the exact model's scope
//     (guide §3): the model lockout takes it when on, else the connection cools; never the
//     breaker.
//   - comboCooldownWait (AllExcluded) waits out only an exclusion of the rate-limit class
//     (failure.Reason.Waitable: a rate limit or a concurrency limit, the would-be 429 of
//     guide §4); an open breaker, another worker's HALF_OPEN probe (Retry-After about a
//     second), 5xx, auth, quota, not-found and terminal states are answered at once.
//   - The recovery probe, Spillway's deviation from the guide (README, "The resilience
//     engine"; conncooldown's probe.go has the rules): when every target is excluded and each
//     that may serve again cools for a server error, Plan lists the one whose cooldown ends
//     soonest as the plan's only target if its provider's probe is ready, and Dispatch claims
//     the probe (after the slots, like the breaker's HALF_OPEN probe) or excludes the target
//     as the plan did. Its success clears the provider's server-error cooldowns set before
//     it was sent; its failure escalates its connection and counts for neither the breaker
//     nor the gate, unless it holds the breaker's probe too. Any other exclusion (a 429,
//     quota, auth or capacity cooldown, a lockout, an open breaker, the gate) rules it out.
//   - The load-aware strategies (least-used, p2c, fill-first) compare requests in flight:
//     the leases shared data holds where a connection has a cap, plus this worker's own
//     attempts that hold none, counted in memory by Dispatch and Release (no shared data).
//
// The success path, and how it avoids work. On clean state it writes no shared data (a
// mechanism with nothing stored for a target has nothing for a success to clear), and the
// filter's per-VM state.Cache makes the records a plan reads free after their first read:
// a request reads one shared-data key, the cache's generation, plus the live records its
// target needs (a capped connection's leases). Over that cache the engine also remembers
// conclusions, not only values: a route candidate whose every layer read found nothing
// stored is clean (cleanMemo), and stays clean for as long as the cache's Epoch stands
// still, since the cache then answers every key it read as it did. For a clean candidate
// Plan asks no mechanism, Dispatch neither re-checks its layers nor asks the breaker (with
// no record it allows, CLOSED), and Record on success calls no mechanism's RecordSuccess
// (each would find nothing and write nothing; it notes a glob-passed model in the
// connection's in-memory served list, above). Attempts are sampled for latency only when a
// route's strategy reads the samples (p2c with a latency weight).
//
// The staleness this accepts is the cache's, no more: what other workers wrote (an
// admin reset included) is seen at the filter's next Refresh — before every routing
// decision, before a queued request's dispatch and before failover — which moves the epoch
// and voids every memo; what this worker writes voids them at once. Between two refreshes
// a worker may act on state another worker has changed meanwhile, as it did with the cache
// alone: a plan's re-check at dispatch, in the same callback, sees what the plan saw, and a
// success whose response comes later is recorded against what the worker's cache holds.
package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/classify"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/latency"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/internal/providercooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/recheck"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/plugin/internal/selection"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// Options are the engine's environment beyond the policy. (The request queue's environment
// layer, RATE_LIMIT_*, is already folded into the resolved policy by policies.Parse.)
type Options struct {
	// Random drives random strategies; nil seeds one from crypto/rand.
	Random rand.Source
	// Node is the worker VM's identity in shared data (its heartbeats, admission.Node); nil
	// makes an anonymous one, whose leases only expire by time.
	Node *admission.Node
	// PluginName and RootID are the plugin's proxy-wasm plugin_name and plugin_root_id: the
	// namespace of the policy's own records (state.NamespaceID) unless the policy sets
	// stateNamespace.
	PluginName, RootID string
}

// Engine holds one worker's view of a policy: per-provider and per-connection handles into
// the shared state, prepared once so the request path allocates as little as possible. An
// Engine is used by one worker at a time (Envoy runs a VM's callbacks one after another).
type Engine struct {
	res        *policies.Resolved
	store      state.Store
	clock      state.Clock
	breakers   *breaker.Breaker
	gate       *providercooldown.Gate
	admitter   *admission.Admitter
	selector   *selection.Selector
	affinity   *affinity.Table
	latency    *latency.Tracker
	classifier *classify.Classifier
	comboWait  combo.Config
	gateOn     bool // the opt-in provider cooldown gate
	// rechecks schedules the opt-in re-checks of expired connections; nil when off.
	rechecks *recheck.Scheduler
	// cache is the store when it is the filter's per-VM cache (nil otherwise): its epoch
	// backs the clean memos that spare the success path its reads (see cleanMemo).
	cache *state.Cache
	// sampleLatency: a route's strategy reads the latency samples (p2c with a latency
	// weight), so attempts are recorded in the tracker; otherwise nothing would read them.
	sampleLatency bool

	providers []provider
	routes    []route
	routeOf   map[*policies.ResolvedRoute]int
	// lastModel and lastRoute: the last model routed and its route (lastRoute -1: none).
	lastModel string
	lastRoute int
}

// provider is one provider's prepared handles.
type provider struct {
	res      *policies.ResolvedProvider
	breaker  breaker.Provider
	gate     providercooldown.Entry
	cooldown *conncooldown.Tracker
	lockout  *lockout.Tracker
	conns    []connection
}

// connection is one connection's prepared handles.
type connection struct {
	res      *policies.ResolvedConnection
	cooldown conncooldown.Conn
	lockout  lockout.Conn
	gate     providercooldown.Entry
	admit    *admission.Gate
	recheck  recheck.Conn // its re-check schedule (used only with the re-check on)
	// capped: the connection has a concurrency cap (maxConcurrent or modelConcurrency), so
	// shared data counts the leases of its attempts.
	capped bool
	// unleased counts this worker's attempts in flight on the connection that hold no lease
	// (no cap applies to them, or they failed open), kept by Dispatch and Release: the load
	// signal of the load-aware strategies where shared data has none.
	unleased int
	// served remembers the client-chosen models (a glob route's) this worker saw the
	// connection serve: the evidence that ranks their lockouts in the lockout pool
	// (lockout.Failure.Served), kept in memory at no shared-data cost.
	served lockout.Served
}

// route is one route's expanded candidate list (a target naming no connection stands for
// each of its provider's connections) and its selection state.
type route struct {
	res        *policies.ResolvedRoute
	combo      *selection.Combo
	candidates []candidateRef
	clean      []cleanMemo  // per candidate
	api        policies.API // the API every candidate's provider speaks ("" when they differ)
	needsLoad  bool         // the strategy reads in-flight counts
	inOrder    bool         // the strategy keeps the configured order (priority; see planInOrder)
}

// candidateRef is one configured candidate of a route.
type candidateRef struct {
	provider   int
	connection int
	model      string // upstream model; "" = the requested model
	weight     int
	// invented: a glob route passes the client's model on (model ""), a name the policy
	// does not spell; a success of it is noted in its connection's served memory.
	invented bool
}

// settings are the mechanism configs of one resolved policy: the one place where the
// engine turns policies.Resolved into mechanism settings, each through its package's
// conversion (breaker.ConfigFrom and the like). settingsFrom is pure, so a test can check
// that every resolved setting reaches a mechanism.
type settings struct {
	namespace     string // state.NamespaceID of the policy's own records
	latency       latency.Config
	latencyWeight int  // selection.Config.LatencyWeight
	sampleLatency bool // some route's strategy reads the latency samples
	affinity      affinity.Config
	combo         combo.Config
	restate       []restate.Rule
	errorRules    []errorrules.Rule
	classify      classify.Options
	providers     []providerSettings
	routes        []routeSettings
	recheck       recheck.Config
	recheckOn     bool // resilience.terminalRecheck.enabled
}

// providerSettings are one provider's mechanism configs.
type providerSettings struct {
	upstream string // state.UpstreamID: the key of its breaker and provider cooldown window
	breaker  breaker.Config
	gate     providercooldown.Config
	cooldown conncooldown.Config
	lockout  lockout.Config
	conns    []connectionSettings
}

// connectionSettings are one connection's mechanism configs.
type connectionSettings struct {
	fingerprint string // conncooldown's and lockout's credential fingerprint
	// account is the connection's upstream account (accountOf): the key of its cooldown,
	// backoff, lockouts and lease record, shared with every policy on the credential.
	account string
	admit   admission.GateConfig
	// models are the upstream models the policy routes to the connection by name: they keep
	// lockout keys of their own, while names a client invents (through a glob route) share
	// a bounded pool.
	models []string
}

// routeSettings are one route's expanded candidates and selection config.
type routeSettings struct {
	combo      selection.ComboConfig
	candidates []candidateRef
	needsLoad  bool
}

// settingsFrom converts a resolved policy into every mechanism's config, under the state
// namespace of res's stateNamespace or else the plugin's name and root id.
func settingsFrom(res *policies.Resolved, pluginName, rootID string) (*settings, error) {
	ns := state.NamespaceID(res.StateNamespace, pluginName, rootID)
	s := &settings{
		namespace:     ns,
		latency:       latency.ConfigFrom(res.P2CLatency),
		latencyWeight: res.P2CLatency.Weight,
		affinity:      affinity.ConfigFrom(res),
		combo:         combo.ConfigFrom(res.ComboCooldownWait),
		classify:      classify.Options{TripStatuses: map[string][]int{}, QuotaResetLocation: res.QuotaResetTimeZone},
		providers:     make([]providerSettings, len(res.Providers)),
		routes:        make([]routeSettings, len(res.Routes)),
	}
	s.affinity.Namespace = ns
	s.recheck, s.recheckOn = recheck.ConfigFrom(res.TerminalRecheck)
	for i := range res.Providers {
		rp := &res.Providers[i]
		for _, r := range rp.StatusRestatement {
			s.restate = append(s.restate, restate.Rule{ID: r.ID, Provider: r.Provider, FromStatuses: r.FromStatuses, ToStatus: r.ToStatus,
				TextMarkers: r.TextMarkers, ExcludeMarkers: r.ExcludeMarkers, DefaultRetryAfter: r.DefaultRetryAfter})
		}
		for _, r := range rp.ErrorRules {
			s.errorRules = append(s.errorRules, errorrules.Rule{ID: r.ID, Provider: r.Provider, Status: r.Status, Markers: r.TextMarkers,
				ExcludeMarkers: r.ExcludeMarkers, Reason: failure.Reason(r.Reason), Scope: failure.Scope(r.Scope),
				Cooldown: r.Cooldown})
		}
		s.classify.TripStatuses[rp.ID] = rp.Breaker.TripStatuses
		ps := &s.providers[i]
		ps.upstream = state.UpstreamID(rp.Cluster, rp.Authority)
		var err error
		if ps.breaker, err = breaker.ConfigFrom(rp.Breaker); err != nil {
			return nil, fmt.Errorf("engine: provider %q: %w", rp.ID, err)
		}
		ps.gate = providercooldown.ConfigFrom(res.ProviderCooldownEnabled, rp.ProviderCooldown)
		ps.cooldown = conncooldown.ConfigFrom(rp.ConnectionCooldown, rp.Breaker.ProbeTimeout)
		ps.lockout = lockout.ConfigFrom(res.ModelLockout, res.RequestQueue)
		if len(rp.QuotaFamilies) > 0 {
			ps.lockout.Family = rp.QuotaFamily
		}
		ps.conns = make([]connectionSettings, len(rp.Connections))
		for j := range rp.Connections {
			rc := &rp.Connections[j]
			cs := connectionSettings{fingerprint: fingerprint(rc), account: accountOf(ns, ps.upstream, rp, rc),
				admit: admission.GateConfigFrom(res, rp.ID, rc)}
			cs.admit.Account, cs.admit.Namespace = cs.account, ns
			ps.conns[j] = cs
		}
	}
	for i := range res.Routes {
		rr := &res.Routes[i]
		rs := &s.routes[i]
		for _, t := range rr.Targets {
			rp := &res.Providers[t.Provider]
			s.configureModel(rr, t)
			invented := t.Model == "" && rr.IsGlob
			if t.Connection >= 0 {
				rs.candidates = append(rs.candidates, candidateRef{provider: t.Provider, connection: t.Connection,
					model: t.Model, weight: weightOf(t, rp.Connections[t.Connection].Weight), invented: invented})
				continue
			}
			for j := range rp.Connections {
				rs.candidates = append(rs.candidates, candidateRef{provider: t.Provider, connection: j,
					model: t.Model, weight: weightOf(t, rp.Connections[j].Weight), invented: invented})
			}
		}
		strategy, err := selection.ParseStrategy(string(rr.Strategy))
		if err != nil {
			return nil, fmt.Errorf("engine: route %q: %w", rr.Model, err)
		}
		rs.needsLoad = strategy == selection.LeastUsed || strategy == selection.P2C || strategy == selection.FillFirst
		if strategy == selection.P2C && latency.ClampWeight(s.latencyWeight) > 0 {
			s.sampleLatency = true
		}
		rs.combo = selection.ComboConfig{Name: rr.Model, Strategy: strategy, Targets: len(rs.candidates), Namespace: ns}
	}
	return s, nil
}

// configureModel notes the upstream model a route target sends to its connections by name:
// the target's own model, or the route's when it is exact and the target passes it on.
func (s *settings) configureModel(rr *policies.ResolvedRoute, t policies.ResolvedTarget) {
	model := t.Model
	if model == "" && !rr.IsGlob {
		model = rr.Model
	}
	if model == "" {
		return
	}
	conns := s.providers[t.Provider].conns
	for j := range conns {
		if (t.Connection < 0 || t.Connection == j) && !slices.Contains(conns[j].models, model) {
			conns[j].models = append(conns[j].models, model)
		}
	}
}

// New prepares an engine for a validated policy.
func New(p *policies.Policy, store state.Store, clock state.Clock, opts Options) (*Engine, error) {
	res := p.Resolved()
	cfg, err := settingsFrom(res, opts.PluginName, opts.RootID)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		res:       res,
		store:     store,
		clock:     clock,
		breakers:  breaker.New(store, clock),
		gate:      providercooldown.New(store, clock),
		admitter:  newAdmitter(opts.Node, store, clock),
		gateOn:    res.ProviderCooldownEnabled,
		comboWait: cfg.combo,
		routeOf:   make(map[*policies.ResolvedRoute]int, len(res.Routes)),
		lastRoute: -1,

		sampleLatency: cfg.sampleLatency,
	}
	e.cache, _ = store.(*state.Cache)
	if e.latency, err = latency.NewTracker(cfg.latency); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	random := opts.Random
	if random == nil {
		random = selection.NewSeededSource()
	}
	if e.selector, err = selection.New(selection.Config{Store: store, Clock: clock, Random: random,
		Latency: e.latency, LatencyWeight: cfg.latencyWeight}); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.affinity, err = affinity.New(store, clock, cfg.affinity); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if e.classifier, err = newClassifier(cfg); err != nil {
		return nil, err
	}
	if cfg.recheckOn {
		if e.rechecks, err = recheck.New(store, clock, cfg.recheck); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	e.providers = make([]provider, len(res.Providers))
	for i := range res.Providers {
		if err := e.prepareProvider(i, &cfg.providers[i]); err != nil {
			return nil, err
		}
	}
	e.routes = make([]route, len(res.Routes))
	for i := range res.Routes {
		if err := e.prepareRoute(i, &cfg.routes[i]); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Engine) prepareProvider(i int, cfg *providerSettings) error {
	rp := &e.res.Providers[i]
	pv := &e.providers[i]
	pv.res = rp
	fail := func(err error) error { return fmt.Errorf("engine: provider %q: %w", rp.ID, err) }

	var err error
	if pv.breaker, err = breaker.NewProvider(rp.ID, cfg.upstream, cfg.breaker); err != nil {
		return fail(err)
	}
	if pv.gate, err = providercooldown.ProviderEntry(rp.ID, cfg.upstream, cfg.gate); err != nil {
		return fail(err)
	}
	if pv.cooldown, err = conncooldown.New(e.store, e.clock, cfg.cooldown); err != nil {
		return fail(err)
	}
	if pv.lockout, err = lockout.New(e.store, e.clock, cfg.lockout); err != nil {
		return fail(err)
	}
	pv.conns = make([]connection, len(rp.Connections))
	for j := range rp.Connections {
		rc := &rp.Connections[j]
		c := &pv.conns[j]
		c.res = rc
		c.capped = rc.MaxConcurrent > 0 || len(rc.ModelConcurrency) > 0
		cs := &cfg.conns[j]
		if c.cooldown, err = conncooldown.NewConn(rp.ID, rc.ID, cfg.upstream, cs.account, cs.fingerprint); err != nil {
			return fail(err)
		}
		if c.lockout, err = lockout.NewConn(rp.ID, rc.ID, cs.account, cs.fingerprint, cs.models...); err != nil {
			return fail(err)
		}
		if c.gate, err = providercooldown.ConnectionEntry(rp.ID, rc.ID, cs.account, cfg.gate); err != nil {
			return fail(err)
		}
		if c.admit, err = admission.NewGate(cfg.conns[j].admit); err != nil {
			return fail(err)
		}
		if c.recheck, err = recheck.NewConn(rp.ID, rc.ID, cs.account); err != nil {
			return fail(err)
		}
	}
	return nil
}

func (e *Engine) prepareRoute(i int, cfg *routeSettings) error {
	rr := &e.res.Routes[i]
	rt := &e.routes[i]
	rt.res = rr
	e.routeOf[rr] = i
	rt.candidates = cfg.candidates
	rt.clean = make([]cleanMemo, len(cfg.candidates))
	rt.needsLoad = cfg.needsLoad
	rt.inOrder = cfg.combo.Strategy == selection.Priority && !cfg.needsLoad
	for j, c := range cfg.candidates {
		api := e.res.Providers[c.provider].API
		switch {
		case j == 0:
			rt.api = api
		case api != rt.api:
			rt.api = ""
		}
	}
	var err error
	if rt.combo, err = selection.NewCombo(cfg.combo); err != nil {
		return fmt.Errorf("engine: route %q: %w", rr.Model, err)
	}
	return nil
}

// weightOf is a candidate's weighted-strategy share: the target's own weight when the
// route sets one, else the connection's.
func weightOf(t policies.ResolvedTarget, connWeight int) int {
	if t.Weight > 0 {
		return t.Weight
	}
	return connWeight
}

// accountOf is a connection's upstream account in shared data (state's keys.go says who
// shares what): its credential at its provider's upstream, or, for a connection that sends
// none, its ids in the policy's namespace ns.
func accountOf(ns, upstream string, rp *policies.ResolvedProvider, rc *policies.ResolvedConnection) string {
	if rc.CredentialHeader == "" {
		return state.LocalAccountID(ns, rp.ID, rc.ID)
	}
	return state.AccountID(upstream, rc.CredentialHeader, rc.CredentialValue.Reveal())
}

// fingerprint identifies a connection's credential without revealing it, so a changed
// credential clears a terminal state recorded under the old one.
func fingerprint(c *policies.ResolvedConnection) string {
	if c.CredentialHeader == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(c.CredentialHeader + "\x00" + c.CredentialValue.Reveal()))
	return hex.EncodeToString(sum[:8])
}

// newClassifier builds the classifier from the built-in rules plus the policy's operator
// rules.
func newClassifier(cfg *settings) (*classify.Classifier, error) {
	rt, err := restate.New(cfg.restate)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	cat, err := errorrules.New(cfg.errorRules)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	c, err := classify.NewWithOptions(rt, cat, cfg.classify)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return c, nil
}

// Resolved returns the policy the engine runs.
func (e *Engine) Resolved() *policies.Resolved { return e.res }

// SamplesLatency reports whether Record reads a success's Outcome.TTFB: only when a route's
// strategy reads latency samples. Otherwise a caller need not read the clock to measure it.
func (e *Engine) SamplesLatency() bool { return e.sampleLatency }

// ErrNoRoute reports a requested model that no route serves.
var ErrNoRoute = errors.New("engine: no route serves the model")

// now is the engine's clock.
func (e *Engine) now() time.Time { return e.clock.Now() }

func newAdmitter(node *admission.Node, store state.Store, clock state.Clock) *admission.Admitter {
	if node == nil {
		return admission.New(store, clock)
	}
	return admission.NewOn(node, store, clock)
}
