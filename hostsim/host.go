package hostsim

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/callout"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/route"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/stream"
	"github.com/spillwayproxy/spillway/hostsim/internal/hostcalls"
	"github.com/spillwayproxy/spillway/hostsim/internal/metrics"
	"github.com/spillwayproxy/spillway/hostsim/internal/sched"
	"github.com/spillwayproxy/spillway/internal/manualclock"
)

// Host is one simulated Envoy process running one module's HTTP wasm filters (its first
// plugin, and those of WithPlugin and WithUpstreamFilter, sharing each VM): a base VM, a
// canary per plugin, the main-thread VM and N worker VMs, plus the process-wide state they
// share.
type Host struct {
	cfg      config
	rt       *Runtime
	ownsRT   bool
	module   *Module
	proc     *Process
	clock    Clock
	start    time.Time
	realtime bool

	lifecycle sync.Mutex // StartVM / StartPlugin / Close
	vmStarted bool
	started   bool
	closed    bool
	canary    *VM
	mainVM    *VM
	workers   []*VM

	mu        sync.Mutex // guards everything below
	logs      logBuffer
	metrics   *metrics.Store // the plugin's metrics (locked on their own)
	callouts  callout.Pending[*Callout]
	vmSeq     int
	callCount []hostcalls.Counters // the host-call counters of every VM made (HostCalls)
	randMu    sync.Mutex

	rr atomic.Uint64 // RunHTTP round-robin

	retries *retrySetup // the route's retry policy and the cluster's breaker (nil: none)
	// routeSpec is the route's cluster specifier (WithRouteCluster; nil: none).
	routeSpec *route.Specifier
	// more are the plugins every VM starts after the first (config.morePlugins).
	more []*pluginSpec

	loop *sched.Loop[event] // ticks, callouts, queue notifications, exchanges' timers
}

// LogEntry is one guest log line.
type LogEntry struct {
	Level   LogLevel
	VM      string // "worker-0", "main", "canary", "base"
	Message string
}

// New compiles wasm (once per Runtime), checks what Envoy checks at load (ABI marker,
// allocator, imports within the WASI mode and ABI), and runs the base VM's _initialize.
// Start the plugin with StartPlugin.
func New(wasm []byte, opts ...Option) (*Host, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.workers < 1 {
		return nil, fmt.Errorf("hostsim: need at least one worker, got %d", cfg.workers)
	}
	if cfg.streamUpstream != nil && !cfg.realtime {
		return nil, errors.New("hostsim: WithStreamingUpstream needs WithRealClock")
	}
	retries, err := newRetrySetup(&cfg)
	if err != nil {
		return nil, err
	}
	more, err := cfg.morePlugins()
	if err != nil {
		return nil, err
	}
	var spec *route.Specifier
	if rc := cfg.routeCluster; rc != nil {
		if spec, err = rc.specifier(); err != nil {
			return nil, err
		}
	}
	h := &Host{cfg: cfg, rt: cfg.runtime, clock: cfg.clock, realtime: cfg.realtime,
		metrics: metrics.NewStore(), retries: retries, routeSpec: spec, more: more}
	h.loop = sched.New(h.dispatch)
	if h.clock == nil {
		h.clock = manualclock.New(VirtualStart())
	}
	h.start = h.clock.Now()
	if h.rt == nil {
		rt, err := NewRuntime()
		if err != nil {
			return nil, err
		}
		h.rt, h.ownsRT = rt, true
	}
	mod, err := h.rt.Compile(wasm, cfg.wasi)
	if err == nil {
		err = mod.CheckExports()
	}
	if err == nil {
		err = mod.CheckImports(cfg.wasi)
	}
	if err != nil {
		h.closeRuntime()
		return nil, err
	}
	h.module = mod
	h.proc = cfg.process
	if h.proc == nil {
		h.proc = NewProcess()
	}
	h.proc.state.Acquire(cfg.vmID)
	base := h.newVM(vmBase, 0)
	if err := base.instantiate(); err != nil {
		h.proc.state.Release(cfg.vmID)
		h.closeRuntime()
		return nil, err
	}
	// The base VM only loads and initializes; clones do the rest.
	base.close()
	return h, nil
}

func (h *Host) closeRuntime() {
	if h.ownsRT {
		h.rt.Close()
	}
}

// Module returns the compiled module and what it imports and exports.
func (h *Host) Module() *Module { return h.module }

// Process returns the process-wide shared data and queues.
func (h *Host) Process() *Process { return h.proc }

// Clock returns the host's clock.
func (h *Host) Clock() Clock { return h.clock }

// StartVM creates the root context and runs proxy_on_vm_start in the canary (or, with
// WithoutCanary, in the main and worker VMs). It reports the guest's answer; a refusal
// also comes back as an error wrapping ErrStartRefused.
func (h *Host) StartVM() (bool, error) {
	h.lifecycle.Lock()
	defer h.lifecycle.Unlock()
	return h.startVMLocked()
}

func (h *Host) startVMLocked() (bool, error) {
	if h.closed {
		return false, errors.New("hostsim: host closed")
	}
	if h.vmStarted {
		return false, errors.New("hostsim: StartVM called twice")
	}
	h.vmStarted = true
	if h.cfg.noCanary {
		return h.startClones(false)
	}
	h.canary = h.newVM(vmCanary, 0)
	if err := h.canary.instantiate(); err != nil {
		return false, err
	}
	return h.canary.startRoot()
}

// StartPlugin runs proxy_on_configure (after StartVM, which it runs first if needed). With
// a canary: the canary configures and is killed without on_done/on_delete (its side effects
// stay), then the main-thread VM and every worker start the same way. It returns false if
// any VM refused its configuration (with an error wrapping ErrStartRefused); a VM that
// refused is failed.
func (h *Host) StartPlugin() (bool, error) {
	h.lifecycle.Lock()
	defer h.lifecycle.Unlock()
	if !h.vmStarted {
		ok, err := h.startVMLocked()
		if err != nil || !ok {
			return ok, err
		}
	}
	if h.started {
		return false, errors.New("hostsim: StartPlugin called twice")
	}
	h.started = true
	if h.canary != nil && h.canary.failed != nil {
		return false, h.canary.failed
	}
	if h.cfg.noCanary {
		return h.configureClones()
	}
	ok, err := h.canary.configureRoot()
	h.canary.kill()
	if err != nil || !ok {
		return ok, err
	}
	if ok, err := h.pluginCanaries(); err != nil || !ok {
		return ok, err
	}
	if ok, err := h.startClones(true); err != nil || !ok {
		return ok, err
	}
	if h.realtime {
		h.startDispatcher()
	}
	return true, nil
}

// pluginCanaries runs each further plugin's own canary (WithPlugin, WithUpstreamFilter):
// cpp-host WasmHandleBase::canary runs once per plugin key, on a fresh clone of the base VM
// that starts and configures that plugin alone and is then killed (no on_done/on_delete).
func (h *Host) pluginCanaries() (bool, error) {
	for i, p := range h.more {
		c := h.newVM(vmCanary, i+1)
		if err := c.instantiate(); err != nil {
			return false, err
		}
		ok, err := c.startPlugin(p)
		c.kill()
		if err != nil || !ok {
			return ok, err
		}
	}
	return true, nil
}

// startClones creates the main-thread VM and the workers; with configure it also runs
// on_configure in each, and then starts the further plugins (WithPlugin, WithUpstreamFilter).
func (h *Host) startClones(configure bool) (bool, error) {
	h.mainVM = h.newVM(vmMain, 0)
	vms := []*VM{h.mainVM}
	for i := 0; i < h.cfg.workers; i++ {
		w := h.newVM(vmWorker, i)
		h.workers = append(h.workers, w)
		vms = append(vms, w)
	}
	all := true
	var refusals []error
	for _, vm := range vms {
		if err := vm.instantiate(); err != nil {
			return false, err
		}
		ok, err := vm.startRoot()
		if ok && configure {
			ok, err = vm.configureRoot()
		}
		if ok && configure {
			ok, err = vm.startMorePlugins()
		}
		if err != nil && !errors.Is(err, ErrStartRefused) {
			return false, err
		}
		refusals = append(refusals, err)
		all = all && ok
	}
	return all, joinErr(errors.Join(refusals...), h.drain())
}

func (h *Host) configureClones() (bool, error) {
	all := true
	var refusals []error
	for _, vm := range h.VMs() {
		ok, err := vm.configureRoot()
		if ok {
			ok, err = vm.startMorePlugins()
		}
		if err != nil && !errors.Is(err, ErrStartRefused) {
			return false, err
		}
		refusals = append(refusals, err)
		all = all && ok
	}
	if h.realtime {
		h.startDispatcher()
	}
	return all, joinErr(errors.Join(refusals...), h.drain())
}

// VMs returns the main-thread VM followed by the workers (nil before StartVM/StartPlugin).
func (h *Host) VMs() []*VM {
	if h.mainVM == nil {
		return nil
	}
	return append([]*VM{h.mainVM}, h.workers...)
}

// Worker returns worker VM i (0-based); nil if the plugin has not started or i is out of range.
func (h *Host) Worker(i int) *VM {
	if i < 0 || i >= len(h.workers) {
		return nil
	}
	return h.workers[i]
}

// Workers returns the worker VMs.
func (h *Host) Workers() []*VM { return append([]*VM(nil), h.workers...) }

// MainVM returns the main-thread VM, which never receives streams but ticks and can be
// notified of queue items.
func (h *Host) MainVM() *VM { return h.mainVM }

// Close shuts the plugin down like Envoy when the VMs go: proxy_on_done on each live root
// context, then proxy_on_delete when it returned true (a root that answered false would
// wait for proxy_done; hostsim does not wait). It then frees the VMs.
func (h *Host) Close() error {
	h.lifecycle.Lock()
	defer h.lifecycle.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	h.loop.Stop()
	var errs []error
	for _, vm := range h.VMs() {
		errs = append(errs, vm.shutdown())
	}
	h.proc.state.Release(h.cfg.vmID)
	h.closeRuntime()
	return errors.Join(errs...)
}

// FinishVM runs proxy_on_done on worker 0's root context (proxytest's FinishVM).
func (h *Host) FinishVM() (bool, error) {
	w := h.Worker(0)
	if w == nil {
		return false, errors.New("hostsim: plugin not started")
	}
	return w.FinishRoot()
}

func (h *Host) newVM(kind vmKind, index int) *VM {
	h.mu.Lock()
	h.vmSeq++
	seq := h.vmSeq
	vm := &VM{host: h, kind: kind, index: index, seq: seq, hostCalls: hostCallTable.NewCounters(),
		thread: stream.NewThread(h.cfg.streamConfig())}
	h.callCount = append(h.callCount, vm.hostCalls)
	h.mu.Unlock()
	switch kind {
	case vmBase:
		vm.name = "base"
	case vmCanary:
		vm.name = "canary"
	case vmMain:
		vm.name = "main"
	default:
		vm.name = fmt.Sprintf("worker-%d", index)
	}
	return vm
}

// monotonic is the guest's CLOCK_MONOTONIC: nanoseconds since the host started, plus one.
func (h *Host) monotonic() uint64 {
	return uint64(h.clock.Now().Sub(h.start).Nanoseconds()) + 1
}

func (h *Host) random(buf []byte) {
	if h.cfg.random == nil {
		_, _ = rand.Read(buf)
		return
	}
	h.randMu.Lock()
	defer h.randMu.Unlock()
	_, _ = h.cfg.random.Read(buf)
}

// ---------------------------------------------------------------------------------------
// Logs

func (h *Host) log(vm *VM, level LogLevel, msg string) {
	h.mu.Lock()
	h.logs.add(LogEntry{Level: level, VM: vm.name, Message: msg}, h.cfg.logRetention)
	w := h.cfg.logWriter
	h.mu.Unlock()
	if w != nil {
		fmt.Fprintf(w, "[%s] %s: %s\n", level, vm.name, msg)
	}
}

// stdio logs guest stdout (info) and stderr (error) line by line. cpp-host logs each
// fd_write call as it comes; the Go runtime writes a traceback in many small pieces, so
// hostsim joins them into lines. The first "fatal error:" or "panic:" line is kept for
// TrapError.
func (h *Host) stdio(vm *VM, fd uint32, b []byte, level LogLevel) {
	buf := &vm.stdout
	if fd == 2 {
		buf = &vm.stderr
	}
	*buf = append(*buf, b...)
	for {
		i := bytes.IndexByte(*buf, '\n')
		if i < 0 {
			break
		}
		line := string((*buf)[:i])
		*buf = append((*buf)[:0], (*buf)[i+1:]...)
		if vm.fatal == "" && (strings.HasPrefix(line, "fatal error:") || strings.HasPrefix(line, "panic:")) {
			vm.fatal = line
		}
		h.log(vm, level, line)
	}
	if len(*buf) > 64<<10 { // no newline for a long time: flush as is
		h.log(vm, level, string(*buf))
		*buf = (*buf)[:0]
	}
}

// Logs returns the log lines kept (the last WithLogRetention of them), oldest first.
func (h *Host) Logs() []LogEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LogEntry(nil), h.logs.kept()...)
}

// LogsAt returns the kept messages logged at level, in order.
func (h *Host) LogsAt(level LogLevel) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.logs.kept() {
		if e.Level == level {
			out = append(out, e.Message)
		}
	}
	return out
}

// LogCount is how many lines were logged at level since the start (or ResetLogs), the
// ones no longer kept included.
func (h *Host) LogCount(level LogLevel) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.count(level)
}

// LogsDropped is how many lines were forgotten to keep the retention bound.
func (h *Host) LogsDropped() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.dropped
}

// GetTraceLogs returns the trace-level messages (proxytest).
func (h *Host) GetTraceLogs() []string { return h.LogsAt(LogTrace) }

// GetDebugLogs returns the debug-level messages (proxytest).
func (h *Host) GetDebugLogs() []string { return h.LogsAt(LogDebug) }

// GetInfoLogs returns the info-level messages, guest stdout included (proxytest).
func (h *Host) GetInfoLogs() []string { return h.LogsAt(LogInfo) }

// GetWarnLogs returns the warn-level messages (proxytest).
func (h *Host) GetWarnLogs() []string { return h.LogsAt(LogWarn) }

// GetErrorLogs returns the error-level messages, guest stderr included (proxytest).
func (h *Host) GetErrorLogs() []string { return h.LogsAt(LogError) }

// GetCriticalLogs returns the critical-level messages (proxytest).
func (h *Host) GetCriticalLogs() []string { return h.LogsAt(LogCritical) }

// ResetLogs forgets the logs collected so far.
func (h *Host) ResetLogs() {
	h.mu.Lock()
	h.logs = logBuffer{}
	h.mu.Unlock()
}

// ---------------------------------------------------------------------------------------
// Metrics (hostsim/internal/metrics): one store per Host, so a name is one stat for the
// whole process, whichever VM defines it.

// metricValue reads a metric for the proxytest getters.
func (h *Host) metricValue(name string, t MetricType) (uint64, []uint64, error) {
	v, samples, err := h.metrics.Lookup(name, t)
	if err != nil {
		return 0, nil, fmt.Errorf("hostsim: %w", err)
	}
	return v, samples, nil
}

// GetCounterMetric returns a counter's value (proxytest).
func (h *Host) GetCounterMetric(name string) (uint64, error) {
	v, _, err := h.metricValue(name, MetricCounter)
	return v, err
}

// GetGaugeMetric returns a gauge's value (proxytest).
func (h *Host) GetGaugeMetric(name string) (uint64, error) {
	v, _, err := h.metricValue(name, MetricGauge)
	return v, err
}

// GetHistogramMetric returns the last value recorded in a histogram (proxytest).
func (h *Host) GetHistogramMetric(name string) (uint64, error) {
	v, _, err := h.metricValue(name, MetricHistogram)
	return v, err
}

// GetHistogramValues returns every value recorded in a histogram.
func (h *Host) GetHistogramValues(name string) ([]uint64, error) {
	_, vs, err := h.metricValue(name, MetricHistogram)
	return vs, err
}

// MetricValue is a snapshot of one metric the plugin defined: Name, Type, Value (a counter's
// or gauge's value, a histogram's last recorded one) and a histogram's Samples, oldest first.
type MetricValue = metrics.Value

// Metrics returns every defined metric's current value, sorted by name and type (for an
// admin endpoint such as hostsim serve's /stats/prometheus).
func (h *Host) Metrics() []MetricValue { return h.metrics.Values() }

// MetricNames lists the defined metrics as "type:name", sorted.
func (h *Host) MetricNames() []string { return h.metrics.Names() }

// ---------------------------------------------------------------------------------------
// Shared data and queues, host side.

// GetSharedData reads shared data in this host's vm_id namespace.
func (h *Host) GetSharedData(key string) (value []byte, cas uint32, found bool) {
	return h.proc.GetSharedData(h.cfg.vmID, key)
}

// SetSharedData writes shared data as another worker would, with the guest's CAS rules.
func (h *Host) SetSharedData(key string, value []byte, cas uint32) Status {
	return h.proc.SetSharedData(h.cfg.vmID, key, value, cas)
}

// SharedDataKeys lists the keys in this host's vm_id namespace.
func (h *Host) SharedDataKeys() []string { return h.proc.SharedDataKeys(h.cfg.vmID) }

// GetQueueSize returns the number of items in a shared queue (proxytest).
func (h *Host) GetQueueSize(queueID uint32) int { return h.proc.QueueSize(queueID) }

// ResolveQueue returns the token of a registered queue in this host's vm_id namespace.
func (h *Host) ResolveQueue(name string) (uint32, bool) { return h.proc.resolveQueue(h.cfg.vmID, name) }

// EnqueueSharedQueue appends to a queue as another VM would, notifying its registrant.
func (h *Host) EnqueueSharedQueue(token uint32, value []byte) (Status, error) {
	st := h.proc.enqueue(h, token, value)
	return st, h.drain()
}

// ---------------------------------------------------------------------------------------
// Properties, host side (proxytest).

// GetProperty returns a configured property.
func (h *Host) GetProperty(path []string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.cfg.properties[joinPath(path)]
	if !ok {
		return nil, fmt.Errorf("hostsim: property %q not found", strings.Join(path, "."))
	}
	return append([]byte(nil), v...), nil
}

// SetProperty sets a configured property.
func (h *Host) SetProperty(path []string, value []byte) error {
	if len(path) == 0 {
		return errors.New("hostsim: empty property path")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cfg.properties[joinPath(path)] = append([]byte(nil), value...)
	return nil
}

func (h *Host) property(path string) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.cfg.properties[path]
	return v, ok
}

// RegisterForeignFunction registers a foreign function (proxytest).
func (h *Host) RegisterForeignFunction(name string, f func([]byte) []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cfg.foreign[name] = func(b []byte) ([]byte, error) { return f(b), nil }
}

// ---------------------------------------------------------------------------------------
// Events and timers. With a virtual clock everything runs in the caller's goroutine: each
// API call drains the events it caused before returning, and Advance fires timers in time
// order. With a real clock a dispatcher goroutine does both.

type eventKind int

const (
	evQueueReady eventKind = iota
	evTick
	evCalloutInvoke
	evCalloutDeliver
	evCalloutTimeout
	evUpstreamInvoke
	evUpstreamDeliver
	evExchange // ex's timer: runs exFn
)

type event struct {
	kind    eventKind
	vm      *VM
	gen     uint64
	root    uint32
	token   uint32
	tickGen uint64
	callout *Callout
	resp    *CalloutResponse
	ex      *Exchange
	try     *upTry
	up      *UpstreamResponse
	upErr   error
	exFn    func(*Exchange) error
}

// schedule runs ev on the event loop once the clock reaches at; cancel takes it off.
func (h *Host) schedule(at time.Time, ev event) *sched.Timer[event] { return h.loop.Schedule(at, ev) }

// cancel takes a timer off the event loop (nil, or one that fired: nothing to do).
func (h *Host) cancel(t *sched.Timer[event]) { h.loop.Cancel(t) }

// post runs ev on the event loop next, outside the VM that posts it.
func (h *Host) post(ev event) { h.loop.Post(ev) }

// deliverAfter posts ev now, or schedules it delay later on the Host's clock: how the answer
// of a test's handler (an upstream function, a callout handler) with a Delay comes back.
func (h *Host) deliverAfter(delay time.Duration, ev event) {
	if delay > 0 {
		h.schedule(h.clock.Now().Add(delay), ev)
		return
	}
	h.post(ev)
}

// runHandler runs a test's handler outside the VM: on its own goroutine on the real clock,
// where it may block like a real upstream; inline on the virtual clock, where the run stays
// deterministic.
func (h *Host) runHandler(run func()) {
	if h.realtime {
		go run()
		return
	}
	run()
}

// drain runs pending events until none is left (virtual clock). With a real clock the
// dispatcher does it.
func (h *Host) drain() error {
	if h.realtime && h.loop.Dispatching() {
		return nil
	}
	return h.loop.Drain()
}

// drainNow runs pending events until none is left, whatever the clock.
func (h *Host) drainNow() error { return h.loop.Drain() }

// Advance moves a virtual clock forward by d, firing ticks, callout deliveries and
// timeouts in time order on their VMs. Errors are guest traps in those callbacks.
func (h *Host) Advance(d time.Duration) error {
	sc, ok := h.clock.(SettableClock)
	if !ok || h.realtime {
		return errors.New("hostsim: Advance needs a virtual clock")
	}
	return h.loop.Advance(sc, d)
}

// FailurePolicy is what the Host does with a VM's streams once the VM failed
// (WithFailurePolicy).
func (h *Host) FailurePolicy() FailurePolicy { return h.cfg.failurePolicy }

// NextTimer returns when the next timer fires (false if none is scheduled).
func (h *Host) NextTimer() (time.Time, bool) { return h.loop.Next() }

// AsyncErrors returns (and forgets) guest traps raised by events the dispatcher ran with a
// real clock.
func (h *Host) AsyncErrors() []error { return h.loop.AsyncErrors() }

// startDispatcher runs the event loop on the wall clock (WithRealClock).
func (h *Host) startDispatcher() { h.loop.Start() }

// dispatch runs one event.
func (h *Host) dispatch(ev event) error {
	switch ev.kind {
	case evCalloutInvoke:
		h.invokeCallout(ev.callout)
		return nil
	case evUpstreamInvoke:
		h.invokeUpstream(ev.ex, ev.try)
		return nil
	}
	vm := ev.vm
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if ev.kind == evUpstreamDeliver || ev.kind == evExchange {
		if vm.gen != ev.gen || vm.dead {
			vm.mu.Unlock()
			ev.ex.finishFailedVM()
			vm.mu.Lock()
			return nil
		}
		if ev.kind == evExchange {
			return ev.ex.runEvent(ev.exFn)
		}
		return ev.ex.deliverUpstream(ev.try, ev.up, ev.upErr)
	}
	if vm.gen != ev.gen || vm.dead || vm.failed != nil {
		return nil // the VM is gone: Envoy drops the notification silently
	}
	switch ev.kind {
	case evQueueReady:
		return vm.onQueueReady(ev.root, ev.token)
	case evTick:
		if ev.root != 0 {
			return vm.onPluginTick(ev.root, ev.tickGen)
		}
		return vm.onTick(ev.tickGen)
	case evCalloutDeliver, evCalloutTimeout:
		return vm.deliverCallout(ev.callout, ev.resp, ev.kind == evCalloutTimeout)
	case evUpstreamDeliver:
		return ev.ex.deliverUpstream(ev.try, ev.up, ev.upErr)
	}
	return nil
}

func joinPath(path []string) string { return strings.Join(path, "\x00") }
