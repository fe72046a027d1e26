package filter

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/admin"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/watchdog"
	"github.com/spillwayproxy/spillway/policies"
)

// Tick periods: a VM with streams waiting on time (a queue, a combo wait, a held stream)
// ticks often; an idle one only for the missing-option detector, lease renewals and its
// heartbeat.
const (
	busyTickMs = 100
	idleTickMs = 1000
)

// isLiveKey selects the shared-data records that change on most requests or without one
// — leases, tickets and pools, round-robin turns and decks, session pins, the VM directory,
// the terminal re-check's schedules and tick claim: the Live kinds of state's key registry
// (state.Keys) — which bypass the per-VM cache and do not bump its generation, so they do
// not make every other worker re-read everything after every request.
func isLiveKey(key string) bool { return state.IsLive(key) }

// pluginContext is one VM's root context: the policy, the engine over shared data, and
// the streams that wait for a tick or a wake-up.
type pluginContext struct {
	types.DefaultPluginContext
	vm *vmContext // the VM's context, shared by its plugins
	// role is what this root does (role.go), chosen by its root id at start: the upstream
	// role keeps only the policy; its tries act on the downstream plugin's state (router.go).
	role    role
	policy  *policies.Policy
	res     *policies.Resolved
	engine  *engine.Engine
	admin   *admin.Server // nil: the admin API is off (no token)
	store   sharedStore
	cache   *state.Cache
	metrics metrics
	streams uint64 // streams started on this VM (each stream's serial)
	// watchdog is the stream watchdogs' settings (watchdog.go).
	watchdog watchdog.Config
	// now is the time of the callback being run (see clock).
	now      time.Time
	nowValid bool
	// free holds ended streams' contexts for reuse, with their buffers.
	free []*httpContext

	// watched are the streams a tick must look at (a waiting request is in its engine's
	// queue lines instead: VisitQueues).
	watched []*httpContext
	// visitTick and visitWake are the queue visits of a tick and of a wake-up, bound once.
	visitTick, visitWake func(t admission.Ticket, user any)
	tickMs               uint32
	// optionProven: a stream held at its request headers got a body callback, so the
	// proxy has allow_on_headers_stop_iteration and the detector is off for this VM.
	optionProven    bool
	misconfigLogged bool

	// models interns the model names the policy knows, so a request's model (read out of
	// its body) needs no copy when it is one of them; modelList holds them too when they are
	// few (compared one by one: hashing a string is slow in a Go wasm module).
	models    map[string]string
	modelList []string
	// reqHeaders finds the request headers the request path acts on; paths lists the
	// policy's LLM API paths when they are few (see apiOf).
	reqHeaders *reqHeaderTable
	paths      []routedPath
	// logBuf is where the decision log builds its lines.
	logBuf []byte
	// pathBuf is where the admin check writes a path's canonical form (admin.go).
	pathBuf []byte
	// gaugeEngine reads the gauges through gaugeCache (made when this VM first publishes).
	gaugeEngine *engine.Engine
	gaugeCache  *state.Cache
	// rechecks is the terminal re-check's state (recheck.go); nil until its first tick.
	rechecks *rechecker

	// beforeCallback, when set (tests only), runs at the start of every stream callback.
	beforeCallback func(callback string)
	// timeNow, when set (tests only), replaces the wall clock.
	timeNow func() time.Time
	// wrapStore, when set (tests only), wraps the shared data the engine works on (to make
	// it fail).
	wrapStore func(state.Store) state.Store
}

// refreshCache brings the VM's shared-data cache up to date with the generation key before a
// decision that must see other workers' writes; a failure is logged and the decision goes on
// with what the cache holds.
func (p *pluginContext) refreshCache() {
	if err := p.cache.Refresh(); err != nil {
		proxywasm.LogWarnf("spillway: shared data: %v", err)
	}
}

// clock is the time of the callback being run, the engine's clock too: read at most once
// per callback, and only by a callback that needs it (each read of the WASI clock is two
// host calls).
func (p *pluginContext) clock() time.Time {
	if !p.nowValid {
		if p.timeNow != nil {
			p.now = p.timeNow()
		} else {
			p.now = hostabi.Now()
		}
		p.nowValid = true
	}
	return p.now
}

// callbackClock is the engine's state.Clock: the callback's time (a method, not a closure,
// so a read is one call).
type callbackClock struct{ p *pluginContext }

// Now implements state.Clock.
func (c callbackClock) Now() time.Time { return c.p.clock() }

// readClock starts a callback: the time is read afresh when next asked for.
func (p *pluginContext) readClock() { p.nowValid = false }

// coarseClock starts a callback whose work only needs a recent time (giving slots back, whose
// clock only prunes expired leases): the last time read stands in, without a host call.
func (p *pluginContext) coarseClock() { p.nowValid = !p.now.IsZero() }

// OnPluginStart implements types.PluginContext: it parses the policy, builds the engine on
// it and refuses to start, with every problem and its field path in a critical log, when
// either rejects it. Each policy warning is logged. Under root id rootid.Upstream the
// policy is checked the same way, and the context then starts in the upstream role
// (startUpstream), which sets up nothing else.
func (p *pluginContext) OnPluginStart(configSize int) (status types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			proxywasm.LogCriticalf("spillway: refusing to start: panic while loading the policy: %v", r)
			status = types.OnPluginStartStatusFailed
		}
	}()
	p.readClock()
	rootID := readRootID()
	upstream := roleOf(rootID) == roleUpstream
	policy, err := loadPolicy(configSize)
	if err != nil {
		proxywasm.LogCriticalf("spillway: refusing to start: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if !upstream {
		for _, w := range policy.Warnings {
			proxywasm.LogWarnf("spillway: policy warning: %v", w)
		}
	}
	p.policy, p.res = policy, policy.Resolved()
	opts := engine.Options{PluginName: readPluginName(), RootID: rootID}
	if !upstream {
		if err := p.vm.startNode(); err != nil {
			proxywasm.LogCriticalf("spillway: refusing to start: %v", err)
			return types.OnPluginStartStatusFailed
		}
		opts.Node = p.vm.node
	}
	// Building the engine reads and writes no shared data (a cache is filled on use), so the
	// upstream role validates the policy with it too.
	var shared state.Store = &p.store
	if p.wrapStore != nil {
		shared = p.wrapStore(shared)
	}
	p.cache = state.NewCache(shared, isLiveKey)
	if p.engine, err = engine.New(policy, p.cache, callbackClock{p}, opts); err != nil {
		proxywasm.LogCriticalf("spillway: refusing to start: %v", err)
		return types.OnPluginStartStatusFailed
	}
	if upstream {
		return p.startUpstream()
	}
	if p.admin = admin.New(p.res.Admin, p.engine); p.admin != nil {
		proxywasm.LogInfof("spillway: admin API served under %s", p.admin.Prefix())
	}
	p.metrics.define(p.res)
	p.watchdog = watchdog.ConfigFrom(p.res.ThroughputWatchdog, p.res.ContentStall)
	p.models = internTable(p.res)
	if len(p.models) <= maxListedModels {
		for m := range p.models {
			p.modelList = append(p.modelList, m)
		}
	}
	p.reqHeaders = newReqHeaderTable(p.res.Routing.ClusterHeader)
	if p.admin != nil {
		p.pathBuf = make([]byte, 0, 256) // most paths fit: the check allocates nothing
	}
	p.paths = newRoutedPaths(&p.res.Routing)
	// Reserve the creation CAS now (a shared-data write, not allowed during _initialize) so
	// the first request that records state does not pay for it.
	if _, err := p.store.CreateCAS(); err != nil {
		proxywasm.LogWarnf("spillway: %v", err)
	}
	p.visitTick, p.visitWake = p.queueTick, p.queueWake
	p.vm.plugins = append(p.vm.plugins, p)
	if err := p.vm.registerWakeQueue(p); err != nil {
		// Without it queued requests still resume on ticks, only later.
		proxywasm.LogWarnf("spillway: %v; queued requests resume on ticks only", err)
	}
	p.setTick(idleTickMs)
	proxywasm.LogInfof("spillway: policy loaded: %s", policySummary(p.res))
	return types.OnPluginStartStatusOK
}

// loadPolicy reads and parses the plugin configuration. ${ENV} references expand from the
// VM environment (Envoy's vm_config.environment_variables, Istio's vmConfig.env).
func loadPolicy(configSize int) (*policies.Policy, error) {
	if configSize == 0 {
		return nil, fmt.Errorf("no policy configured: set the plugin configuration to a Spillway policy (JSON)")
	}
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		return nil, fmt.Errorf("read plugin configuration: %w", err)
	}
	policy, err := policies.Parse(data, policies.ParseOptions{LookupEnv: os.LookupEnv})
	if err != nil {
		return nil, fmt.Errorf("invalid policy:\n%w", err)
	}
	return policy, nil
}

// internTable lists every model name the policy spells: exact route models and target
// models.
func internTable(res *policies.Resolved) map[string]string {
	m := make(map[string]string)
	for i := range res.Routes {
		r := &res.Routes[i]
		m[r.Model] = r.Model
		for _, t := range r.Targets {
			if t.Model != "" {
				m[t.Model] = t.Model
			}
		}
	}
	return m
}

// intern returns the policy's copy of a model name, or a copy of it: a request's model is
// read out of its body, which must not be kept alive (or aliased) by the engine's tables.
func (p *pluginContext) intern(model string) string {
	if p.modelList != nil || len(p.models) == 0 {
		for _, s := range p.modelList {
			if s == model {
				return s
			}
		}
		return strings.Clone(model)
	}
	if s, ok := p.models[model]; ok {
		return s
	}
	return strings.Clone(model)
}

// maxListedModels is the most model names intern compares one by one.
const maxListedModels = 8

// NewHttpContext implements types.PluginContext. Contexts of ended streams are reused, with
// their buffers, so a request allocates nothing for its own state. An upstream-role try
// gets an upstreamTry (router.go), or the pass-through passTry when the policy fails over
// by callout; neither is counted.
func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	if p.role == roleUpstream {
		if !p.res.Failover.ViaRouter {
			return &passTry{} // zero-size: no allocation
		}
		return &upstreamTry{vm: p.vm, id: contextID}
	}
	p.metrics.requests.Increment(1)
	var h *httpContext
	if n := len(p.free); n > 0 {
		h, p.free = p.free[n-1], p.free[:n-1]
	} else {
		h = &httpContext{plugin: p}
	}
	p.streams++
	h.id, h.serial = contextID, p.streams
	return h
}

// maxFreeContexts bounds the reuse list (a burst of streams does not stay in memory).
const maxFreeContexts = 256

// recycle keeps an ended stream's context for the next one.
func (p *pluginContext) recycle(h *httpContext) {
	h.reset()
	if len(p.free) < maxFreeContexts {
		p.free = append(p.free, h)
	}
}

// setTick changes the tick period when it differs.
func (p *pluginContext) setTick(ms uint32) {
	if p.tickMs == ms || p.vm.inTry {
		// In an upstream try's callback (router.go) the period would be set on the upstream
		// root's tick (proxy_set_tick_period_milliseconds acts on the root of the running
		// context), not this one's: the next tick of this root sets it instead.
		return
	}
	if err := proxywasm.SetTickPeriodMilliSeconds(ms); err != nil {
		proxywasm.LogWarnf("spillway: set tick period: %v", err)
		return
	}
	p.tickMs = ms
}

// watch adds a stream to the ones ticks and wake-ups look at.
func (p *pluginContext) watch(h *httpContext) {
	if !h.watched {
		h.watched = true
		p.watched = append(p.watched, h)
	}
	if h.needsBusyTick() {
		p.setTick(busyTickMs)
	}
}

// unwatch removes a stream.
func (p *pluginContext) unwatch(h *httpContext) {
	if !h.watched {
		return
	}
	h.watched = false
	for i, w := range p.watched {
		if w == h {
			last := len(p.watched) - 1
			p.watched[i] = p.watched[last]
			p.watched[last] = nil
			p.watched = p.watched[:last]
			break
		}
	}
}

// OnTick implements types.PluginContext: it moves on every stream that waits on time, polls
// the heads of the queue lines, runs the missing-option detector, the lease renewals and the
// admission retries, and keeps this VM in the directory.
func (p *pluginContext) OnTick() {
	if p.role == roleUpstream {
		return // it sets no tick period; a host that ticks it anyway finds nothing to do
	}
	defer p.recoverRoot("tick")
	p.readClock()
	if p.vm.queueRoot == nil && p.vm.node != nil {
		// The plugin the wake queue notified is done: this one takes the notifications over.
		if err := p.vm.registerWakeQueue(p); err != nil {
			proxywasm.LogDebugf("spillway: %v", err)
		}
	}
	p.vm.heartbeat(p)
	p.engine.RetryAdmission(busyTickMs * time.Millisecond)
	p.metrics.storeErrors.takeIn(p.engine.AdmissionStoreErrors())
	busy := false
	for i := 0; i < len(p.watched); {
		h := p.watched[i]
		h.onTick()
		if i < len(p.watched) && p.watched[i] == h { // not unwatched meanwhile
			busy = busy || h.needsBusyTick()
			i++
		}
	}
	p.engine.VisitQueues(0, p.visitTick)
	if busy || p.engine.Queued() {
		p.setTick(busyTickMs)
	} else {
		p.setTick(idleTickMs)
	}
	p.publishGauges(p.vm.publishesGauges())
	p.recheckTick()
	p.metrics.flush()
}

// OnPluginDone implements types.PluginContext: the last counts go to Envoy, and the VM's
// wake-ups no longer serve this plugin.
func (p *pluginContext) OnPluginDone() bool {
	if p.role == roleUpstream {
		return true // it defined no metrics
	}
	p.metrics.flush()
	v := p.vm
	for i, q := range v.plugins {
		if q == p {
			v.plugins = append(v.plugins[:i], v.plugins[i+1:]...)
			break
		}
	}
	if v.queueRoot == p {
		v.queueRoot = nil // the next tick of a plugin left registers the queue again (OnTick)
	}
	return true
}

// OnQueueReady implements types.PluginContext: slots were freed somewhere in the process.
// The wake-ups name their gates; every plugin of this VM polls the heads of its lines for
// them (a VM without waiters for a gate does nothing).
func (p *pluginContext) OnQueueReady(queueID uint32) {
	if p.role == roleUpstream {
		return // it registers no queue
	}
	defer p.recoverRoot("queue ready")
	p.readClock()
	var gates [maxWakeGates]uint64
	n, all := wakeGates(queueID, &gates)
	for _, q := range p.vm.plugins {
		if q != p {
			q.readClock()
		}
		if all {
			q.engine.VisitQueues(0, q.visitWake)
			continue
		}
		for _, g := range gates[:n] {
			q.engine.VisitQueues(g, q.visitWake)
		}
	}
}

// queueTick is a tick's visit of a queue line's head: it polls its turn.
func (p *pluginContext) queueTick(t admission.Ticket, user any) {
	if h := p.queuedStream(t, user); h != nil {
		h.queueTurn("tick")
	}
}

// queueWake is a wake-up's visit of a queue line's head.
func (p *pluginContext) queueWake(t admission.Ticket, user any) {
	if h := p.queuedStream(t, user); h != nil {
		h.queueTurn("queue wake-up")
	}
}

// queuedStream is the stream waiting with t, or nil. A ticket no waiting stream holds (it
// cannot be: every way out of the queue cancels the ticket) is cancelled, so it never holds
// its line back.
func (p *pluginContext) queuedStream(t admission.Ticket, user any) *httpContext {
	if h, ok := user.(*httpContext); ok && h.phase == phaseQueued && h.d.Waiting {
		return h
	}
	proxywasm.LogWarnf("spillway: a queue ticket without a waiting stream: cancelled")
	p.engine.DropTicket(t)
	return nil
}

// recoverRoot keeps a panic in a root callback from escaping (it would fail the VM).
func (p *pluginContext) recoverRoot(callback string) {
	if r := recover(); r != nil {
		p.metrics.panics.Increment(1)
		proxywasm.LogErrorf("spillway: panic in %s: %v", callback, r)
	}
}
