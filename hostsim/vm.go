package hostsim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/stream"
	"github.com/spillwayproxy/spillway/hostsim/internal/hostcalls"
)

type vmKind int

const (
	vmBase vmKind = iota
	vmCanary
	vmMain
	vmWorker
)

// Restricted phases (the values match allowStartup and allowMalloc).
const (
	restrictNone    uint8 = 0
	restrictStartup uint8 = 1
	restrictMalloc  uint8 = 2
)

type vmKey struct{}

// VM is one instance of the module with its own Go heap: a worker (an Envoy worker
// thread), the main-thread clone, the canary or the base VM. Calls into one VM are
// serialized, as on an Envoy thread.
type VM struct {
	host  *Host
	kind  vmKind
	index int
	seq   int
	name  string

	mu  sync.Mutex
	gen uint64 // bumped when FAIL_RELOAD replaces the instance

	hostCalls hostcalls.Counters // calls per host function (hostcalls.go); atomic, read without mu

	mod        api.Module
	mem        api.Memory
	ctx        context.Context
	fns        vmFuncs
	stack      []uint64
	allocStack []uint64
	scratch    []byte

	restrict uint8
	exited   bool
	exitCode int32
	failed   error
	dead     bool
	// failures counts the instances that failed; reloads and reloadFailures FAIL_RELOAD's
	// replacements that started and that did not.
	failures, reloads, reloadFailures uint64
	stdout                            []byte // partial lines
	stderr                            []byte
	fatal                             string // first "fatal error:"/"panic:" line since the last trap

	nextID      uint32
	rootID      uint32
	rootCreated bool
	// more are the root contexts of the plugins after the first (Host.more) that started
	// on this instance, in start order.
	more       []pluginRoot
	streams    map[uint32]*httpStream
	thread     *stream.Thread // the streams' deferred actions, settled after each callback
	frame      *frame
	tickPeriod time.Duration
	tickGen    uint64
	status     Status // proxy_get_status: last callout result
	statusMsg  string
	recent     []*httpStream // the last finished streams, for the getters
	free       []*httpStream // finished streams evicted from recent, for reuse
	fr         frame         // the frame of the running callback
	recentNext int
}

// pluginRoot is the root context of a plugin after the first on a VM (WithPlugin,
// WithUpstreamFilter): cpp-host keeps one per plugin key (WasmBase::root_contexts_), and
// Envoy a tick period per root context (Wasm::setTickPeriod(root_context_id, ...)).
type pluginRoot struct {
	spec       *pluginSpec
	id         uint32
	created    bool
	tickPeriod time.Duration
	tickSeq    uint64
}

type vmFuncs struct {
	alloc, contextCreate, vmStart, configure, tick, queueReady                                    api.Function
	requestHeaders, requestBody, requestTrailers, responseHeaders, responseBody, responseTrailers api.Function
	httpCallResponse, log, done, delete                                                           api.Function
}

// frame is the callback running in the VM.
type frame struct {
	ctxID     uint32      // context the host called
	effective uint32      // proxy_set_effective_context
	stream    *httpStream // stream of the effective context (nil: root)
	buffer    []byte      // configuration buffer visible in this callback
	bufType   abi.BufferType
	hasBuffer bool
	callout   *CalloutResponse // response visible in on_http_call_response
	forceStop bool             // a local reply overrides the callback's result
}

// Name is the VM's name: "worker-0", "main", "canary" or "base".
func (vm *VM) Name() string { return vm.name }

// Err returns why the VM failed (nil while it is healthy).
func (vm *VM) Err() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.failed
}

func (vm *VM) isFailed() bool { return vm.failed != nil || vm.dead }

// VMHealth is a VM's failure state and what the failure policy did about its failures, since
// the Host started.
type VMHealth struct {
	// Failed is the failure of the VM's running instance (Err); nil while it runs.
	Failed error
	// Recovers: the failure policy replaces the failed instance when the VM's next stream
	// starts (FAIL_RELOAD; a replacement that fails too answers that stream 503 and is
	// tried again at the next). Under FAIL_CLOSED and FAIL_OPEN a failed VM stays failed
	// until the Host closes: Envoy replaces a VM only under FAIL_RELOAD
	// (source/extensions/common/wasm/wasm.cc, PluginConfig::maybeReloadHandleIfNeeded
	// returns the failed VM otherwise).
	Recovers bool
	// Failures counts the instances that failed: a trap or a Go fatal error in a
	// callback, or a root that refused to start (Envoy counts none: it logs "Wasm VM
	// failed", wasm.cc, Wasm::error).
	Failures uint64
	// Reloads and ReloadFailures count FAIL_RELOAD's replacements that started and that
	// did not: Envoy's wasm.<plugin name>.vm_reload_success and vm_reload_failure
	// (source/extensions/common/wasm/stats_handler.h, WASM_STATS; counted in
	// maybeReloadHandleIfNeeded).
	Reloads, ReloadFailures uint64
}

// Health returns the VM's failure state and counts.
func (vm *VM) Health() VMHealth {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return VMHealth{Failed: vm.failed, Recovers: vm.failed != nil && vm.host.cfg.failurePolicy == FailReload,
		Failures: vm.failures, Reloads: vm.reloads, ReloadFailures: vm.reloadFailures}
}

// MemoryPages returns the size of the VM's linear memory in 64 KiB pages.
func (vm *VM) MemoryPages() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.mem == nil {
		return 0
	}
	return vm.mem.Size() / 65536
}

// instantiate creates the module instance and runs its start-up functions under the
// start-up allow-list.
func (vm *VM) instantiate() error {
	h := vm.host
	e, err := h.rt.engine(engineFor(h.cfg.wasi))
	if err != nil {
		return err
	}
	vm.gen++
	vm.ctx = context.WithValue(context.Background(), vmKey{}, vm)
	name := fmt.Sprintf("hostsim-%d-%s-%d", e.seq.Add(1), vm.name, vm.gen)
	mc := wazero.NewModuleConfig().WithName(name).WithStartFunctions()
	if h.cfg.wasi == WASIWazero {
		mc = vm.wazeroWASIConfig(mc)
	}
	mod, err := e.rt.InstantiateModule(vm.ctx, h.module.compiled, mc)
	if err != nil {
		return fmt.Errorf("hostsim: %s: instantiate: %w", vm.name, err)
	}
	vm.mod, vm.mem = mod, mod.Memory()
	if vm.mem == nil {
		mod.Close(vm.ctx)
		return fmt.Errorf("hostsim: %s: module exports no memory", vm.name)
	}
	f := mod.ExportedFunction
	vm.fns = vmFuncs{
		alloc: f("malloc"), contextCreate: f("proxy_on_context_create"), vmStart: f("proxy_on_vm_start"),
		configure: f("proxy_on_configure"), tick: f("proxy_on_tick"), queueReady: f("proxy_on_queue_ready"),
		requestHeaders: f("proxy_on_request_headers"), requestBody: f("proxy_on_request_body"),
		requestTrailers: f("proxy_on_request_trailers"), responseHeaders: f("proxy_on_response_headers"),
		responseBody: f("proxy_on_response_body"), responseTrailers: f("proxy_on_response_trailers"),
		httpCallResponse: f("proxy_on_http_call_response"), log: f("proxy_on_log"), done: f("proxy_on_done"),
		delete: f("proxy_on_delete"),
	}
	if vm.fns.alloc == nil {
		vm.fns.alloc = f("proxy_on_memory_allocate")
	}
	vm.stack = make([]uint64, 8)
	vm.allocStack = make([]uint64, 1)
	vm.streams = map[uint32]*httpStream{}
	vm.nextID, vm.rootID, vm.rootCreated = 1, 0, false
	vm.more = vm.more[:0]
	vm.failed, vm.exited, vm.dead = nil, false, false
	vm.tickPeriod = 0
	vm.tickGen++

	vm.restrict = restrictStartup
	defer func() { vm.restrict = restrictNone }()
	if init := f("_initialize"); init != nil {
		if err := vm.callRaw("_initialize", init); err != nil {
			return err
		}
	} else if start := f("_start"); start != nil {
		if err := vm.callRaw("_start", start); err != nil {
			return err
		}
	}
	if m := f("main"); m != nil && len(m.Definition().ParamTypes()) == 2 {
		vm.stack[0], vm.stack[1] = 0, 0
		return vm.callRaw("main", m)
	}
	if m := f("__main_void"); m != nil {
		return vm.callRaw("__main_void", m)
	}
	return nil
}

// wazeroWASIConfig wires wazero's WASI to the host's clock, random source and logs.
func (vm *VM) wazeroWASIConfig(mc wazero.ModuleConfig) wazero.ModuleConfig {
	h := vm.host
	mc = mc.WithWalltime(func() (int64, int32) {
		t := h.clock.Now()
		return t.Unix(), int32(t.Nanosecond())
	}, 1).WithNanotime(func() int64 { return int64(h.monotonic()) }, 1).
		WithNanosleep(func(ns int64) {
			if sc, ok := h.clock.(SettableClock); ok && !h.realtime {
				sc.Set(sc.Now().Add(time.Duration(ns)))
				return
			}
			time.Sleep(time.Duration(ns))
		}).
		WithStdout(stdioWriter{vm, 1}).WithStderr(stdioWriter{vm, 2})
	if h.cfg.random != nil {
		mc = mc.WithRandSource(lockedReader{h})
	}
	for _, kv := range h.cfg.env {
		k, v, _ := strings.Cut(kv, "=")
		mc = mc.WithEnv(k, v)
	}
	return mc
}

type stdioWriter struct {
	vm *VM
	fd uint32
}

func (w stdioWriter) Write(p []byte) (int, error) {
	level := LogInfo
	if w.fd == 2 {
		level = LogError
	}
	w.vm.host.stdio(w.vm, w.fd, p, level)
	return len(p), nil
}

type lockedReader struct{ h *Host }

func (r lockedReader) Read(p []byte) (int, error) {
	r.h.random(p)
	return len(p), nil
}

// callRaw calls f with vm.stack as its stack and turns a trap into a failed VM.
func (vm *VM) callRaw(name string, f api.Function) error {
	if err := f.CallWithStack(vm.ctx, vm.stack); err != nil {
		return vm.trap(name, err)
	}
	if vm.exited {
		return vm.trap(name, fmt.Errorf("guest called proc_exit(%d)", vm.exitCode))
	}
	return nil
}

// call runs one callback with up to five i32 arguments in the given context.
func (vm *VM) call(name string, f api.Function, fr *frame, args ...uint64) (uint64, error) {
	if f == nil {
		return 0, nil
	}
	copy(vm.stack, args)
	vm.frame = fr
	err := vm.callRaw(name, f)
	vm.frame = nil
	if err != nil {
		return 0, err
	}
	return vm.stack[0], nil
}

// TrapError is a guest trap (or a Go runtime fatal error) in a named callback. The VM that
// raised it is failed.
type TrapError struct {
	VM       string // "worker-0", "main", "canary", "base"
	Callback string // "proxy_on_request_headers", "_initialize", ...
	Err      error
	Fatal    string // the guest's "fatal error: ..." or "panic: ..." line, if it printed one
}

// Error implements error.
func (e *TrapError) Error() string {
	msg := fmt.Sprintf("hostsim: %s: %s trapped: %v", e.VM, e.Callback, firstLine(e.Err.Error()))
	if e.Fatal != "" {
		msg += " [guest: " + e.Fatal + "]"
	}
	return msg
}

// Unwrap returns the wazero error.
func (e *TrapError) Unwrap() error { return e.Err }

// RestrictedCallError is what a host function raises when called where Envoy forbids it
// (cpp-host's "restricted_callback"): anything but the start-up allow-list during
// _initialize/main, anything but the malloc allow-list inside proxy_on_memory_allocate.
type RestrictedCallError struct {
	Function string // e.g. "env.proxy_get_property"
	Phase    string // "start-up" or "proxy_on_memory_allocate"
}

// Error implements error.
func (e *RestrictedCallError) Error() string {
	return fmt.Sprintf("restricted_callback: %s is not allowed during %s", e.Function, e.Phase)
}

// ErrVMFailed is wrapped by errors about calls on a failed VM.
var errVMFailedSentinel = errors.New("hostsim: VM failed")

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func (vm *VM) partial(fd uint32) []byte {
	if fd == 2 {
		return vm.stderr
	}
	return vm.stdout
}

func (vm *VM) trap(name string, err error) error {
	for _, fd := range []uint32{1, 2} { // flush partial lines
		if b := vm.partial(fd); len(b) > 0 {
			vm.host.stdio(vm, fd, []byte{'\n'}, LogLevel(2+2*(fd-1)))
		}
	}
	te := &TrapError{VM: vm.name, Callback: name, Err: err, Fatal: vm.fatal}
	vm.fatal = ""
	vm.fail(te)
	return te
}

// fail marks the VM failed: its timers stop, notifications to it are dropped and streams
// follow the failure policy.
func (vm *VM) fail(err error) {
	if vm.failed == nil {
		vm.failed = err
		vm.failures++
	}
	vm.tickGen++
	vm.host.log(vm, LogCritical, "VM failed: "+firstLine(err.Error()))
}

// startRoot creates the root context and runs proxy_on_vm_start.
func (vm *VM) startRoot() (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.startRootLocked()
}

func (vm *VM) startRootLocked() (bool, error) {
	vm.rootID = vm.nextID
	vm.nextID++
	return vm.startRootContext(vm.rootID, &vm.rootCreated)
}

// startRootContext is cpp-host's ContextBase::onStart for root context id: proxy_on_context_create
// (parent 0), then proxy_on_vm_start with the VM configuration — for every plugin's root,
// the second plugin on a VM included ("the on_vm_start handler should be independent of the
// plugin since the specific plugin which ends up calling it is not necessarily known").
func (vm *VM) startRootContext(id uint32, created *bool) (bool, error) {
	fr := &frame{ctxID: id, effective: id}
	if _, err := vm.call("proxy_on_context_create", vm.fns.contextCreate, fr, uint64(id), 0); err != nil {
		return false, err
	}
	*created = true
	vmCfg := vm.host.cfg.vmConfig
	fr = &frame{ctxID: id, effective: id, buffer: vmCfg, bufType: abi.BufferVMConfiguration, hasBuffer: true}
	r, err := vm.call("proxy_on_vm_start", vm.fns.vmStart, fr, uint64(id), uint64(len(vmCfg)))
	if err != nil {
		return false, err
	}
	vm.afterCallback()
	if r == 0 && vm.fns.vmStart != nil {
		return false, vm.refused("proxy_on_vm_start")
	}
	return true, nil
}

// startMorePlugins starts and configures the plugins after the first (Host.more: WithPlugin's,
// then the upstream filter) on a VM whose first plugin started: cpp-host's
// getOrCreateThreadLocalPlugin for another plugin key on the thread's existing VM —
// WasmBase::start (a new root context, ContextBase::onStart) then WasmBase::configure
// (ContextBase::onConfigure). A no-op without them or on a failed VM.
func (vm *VM) startMorePlugins() (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.startMorePluginsLocked()
}

func (vm *VM) startMorePluginsLocked() (bool, error) {
	for _, p := range vm.host.more {
		if ok, err := vm.startPluginLocked(p); err != nil || !ok {
			return ok, err
		}
	}
	return true, nil
}

// startPlugin starts and configures plugin p alone (its own canary).
func (vm *VM) startPlugin(p *pluginSpec) (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.startPluginLocked(p)
}

func (vm *VM) startPluginLocked(p *pluginSpec) (bool, error) {
	if vm.failed != nil || vm.rootOf(p) != 0 {
		return true, nil
	}
	id := vm.nextID
	vm.nextID++
	vm.more = append(vm.more, pluginRoot{spec: p, id: id})
	created := false
	ok, err := vm.startRootContext(id, &created)
	vm.pluginRoot(id).created = created
	if err != nil || !ok {
		return ok, err
	}
	return vm.configureRootContext(id, p.config)
}

// pluginRoot is the root context id of a plugin after the first (nil: none, or the first
// plugin's).
func (vm *VM) pluginRoot(id uint32) *pluginRoot {
	for i := range vm.more {
		if id != 0 && vm.more[i].id == id {
			return &vm.more[i]
		}
	}
	return nil
}

// rootOf is plugin p's root context id on the VM (0: not started).
func (vm *VM) rootOf(p *pluginSpec) uint32 {
	for i := range vm.more {
		if vm.more[i].spec == p {
			return vm.more[i].id
		}
	}
	return 0
}

// upRoot is the upstream filter plugin's root context id (0: none).
func (vm *VM) upRoot() uint32 { return vm.rootOf(vm.host.cfg.upstreamFilter) }

// isRoot reports whether id is one of the VM's root contexts.
func (vm *VM) isRoot(id uint32) bool { return id == vm.rootID || vm.pluginRoot(id) != nil }

// ErrStartRefused is wrapped by the error StartVM/StartPlugin return when a root context
// answered false (Envoy rejects the configuration: an xDS NACK, or a start-up failure).
var ErrStartRefused = errors.New("hostsim: plugin refused to start")

// refused fails the VM after its root refused to start, naming the callback and the
// guest's last critical or error log line.
func (vm *VM) refused(callback string) error {
	why := ""
	logs := vm.host.Logs()
	for i := len(logs) - 1; i >= 0; i-- {
		if l := logs[i]; l.VM == vm.name && l.Level >= LogError {
			why = " (guest: " + l.Message + ")"
			break
		}
	}
	err := fmt.Errorf("%w: %s: %s returned false%s", ErrStartRefused, vm.name, callback, why)
	vm.fail(err)
	return err
}

// configureRoot runs proxy_on_configure with the plugin configuration.
func (vm *VM) configureRoot() (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.configureRootLocked()
}

func (vm *VM) configureRootLocked() (bool, error) {
	if vm.failed != nil {
		return false, nil
	}
	return vm.configureRootContext(vm.rootID, vm.host.cfg.pluginConfig)
}

// configureRootContext runs proxy_on_configure on root context id with cfg
// (ContextBase::onConfigure).
func (vm *VM) configureRootContext(id uint32, cfg []byte) (bool, error) {
	fr := &frame{ctxID: id, effective: id, buffer: cfg, bufType: abi.BufferPluginConfiguration, hasBuffer: true}
	r, err := vm.call("proxy_on_configure", vm.fns.configure, fr, uint64(id), uint64(len(cfg)))
	if err != nil {
		return false, err
	}
	vm.afterCallback()
	if r == 0 && vm.fns.configure != nil {
		return false, vm.refused("proxy_on_configure")
	}
	return true, nil
}

// FinishRoot runs proxy_on_done on the root context and returns its answer.
func (vm *VM) FinishRoot() (bool, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.isFailed() {
		return false, vm.failedErr()
	}
	r, err := vm.call("proxy_on_done", vm.fns.done, vm.rootFrame(), uint64(vm.rootID))
	return r != 0 || vm.fns.done == nil, err
}

func (vm *VM) failedErr() error {
	if vm.failed != nil {
		return fmt.Errorf("%w: %s: %w", errVMFailedSentinel, vm.name, vm.failed)
	}
	return fmt.Errorf("%w: %s is gone", errVMFailedSentinel, vm.name)
}

func (vm *VM) rootFrame() *frame { return vm.rootFrameFor(vm.rootID) }

// rootFrameFor is the frame of a callback on root context id.
func (vm *VM) rootFrameFor(id uint32) *frame {
	vm.fr = frame{ctxID: id, effective: id}
	return &vm.fr
}

// kill ends the canary the way cpp-host does: no on_done, no on_delete.
func (vm *VM) kill() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.dead = true
	vm.tickGen++
	vm.closeModule()
}

func (vm *VM) close() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.dead = true
	vm.closeModule()
}

func (vm *VM) closeModule() {
	if vm.mod != nil {
		vm.mod.Close(context.Background())
	}
}

// shutdown runs on_done / on_delete on a live root and frees the instance.
func (vm *VM) shutdown() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	var err error
	roots := []pluginRoot{{id: vm.rootID, created: vm.rootCreated}}
	for _, root := range append(roots, vm.more...) {
		if err != nil || vm.isFailed() || !root.created {
			continue
		}
		var r uint64
		fr := &frame{ctxID: root.id, effective: root.id}
		r, err = vm.call("proxy_on_done", vm.fns.done, fr, uint64(root.id))
		if err == nil && (r != 0 || vm.fns.done == nil) {
			_, err = vm.call("proxy_on_delete", vm.fns.delete, fr, uint64(root.id))
		}
	}
	vm.dead = true
	vm.tickGen++
	vm.closeModule()
	return err
}

// reload replaces a failed VM with a fresh instance and starts its root (FAIL_RELOAD;
// Envoy's backoff is not modelled: the next stream reloads). The VM is locked.
func (vm *VM) reload() error {
	vm.closeModule()
	if err := vm.instantiate(); err != nil {
		return err
	}
	vm.host.log(vm, LogWarn, "VM reloaded after failure (FAIL_RELOAD)")
	ok, err := vm.startRootLocked()
	if err == nil && ok {
		ok, err = vm.configureRootLocked()
	}
	if err == nil && ok {
		ok, err = vm.startMorePluginsLocked()
	}
	if err == nil && !ok {
		err = vm.failed
	}
	return err
}

// ---------------------------------------------------------------------------------------
// Memory

// allocate calls the guest's allocator under the malloc allow-list; a trap propagates as a
// panic out of the host function, failing the calling callback.
func (vm *VM) allocate(n uint32) uint32 {
	prev := vm.restrict
	vm.restrict = restrictMalloc
	vm.allocStack[0] = uint64(n)
	err := vm.fns.alloc.CallWithStack(vm.ctx, vm.allocStack)
	vm.restrict = prev
	if err != nil {
		panic(fmt.Errorf("hostsim: proxy_on_memory_allocate(%d): %w", n, err))
	}
	return uint32(vm.allocStack[0])
}

// foreignOffset is how far past the block the guest's allocator returned
// WithForeignAddresses places the data it hands over.
const foreignOffset = 8

// place allocates n bytes in the guest for data the host hands over and returns where the
// data goes: the block's address (0 when the allocator returned none), or, with
// WithForeignAddresses, an address inside the block that the allocator never returned.
func (vm *VM) place(n uint32) uint32 {
	if !vm.host.cfg.foreignAddresses {
		return vm.allocate(n)
	}
	addr := vm.allocate(n + foreignOffset)
	if addr == 0 {
		return 0
	}
	return addr + foreignOffset
}

// ---------------------------------------------------------------------------------------
// Ticks and queue notifications

func (vm *VM) setTickPeriod(ms uint32) {
	if r := vm.pluginRoot(vm.callerRoot()); r != nil {
		// Envoy keeps a tick period per root context (Wasm::setTickPeriod(root_context_id,
		// ...)); each plugin's root ticks on its own.
		r.tickSeq++
		r.tickPeriod = time.Duration(ms) * time.Millisecond
		if ms > 0 && vm.kind != vmCanary && vm.kind != vmBase {
			vm.host.schedule(vm.host.clock.Now().Add(r.tickPeriod), event{kind: evTick, vm: vm, gen: vm.gen, root: r.id, tickGen: r.tickSeq})
		}
		return
	}
	vm.tickGen++
	vm.tickPeriod = time.Duration(ms) * time.Millisecond
	if ms > 0 && vm.kind != vmCanary && vm.kind != vmBase {
		vm.host.schedule(vm.host.clock.Now().Add(vm.tickPeriod), event{kind: evTick, vm: vm, gen: vm.gen, tickGen: vm.tickGen})
	}
}

// onPluginTick is a tick of the root context of a plugin after the first.
func (vm *VM) onPluginTick(root uint32, seq uint64) error {
	if r := vm.pluginRoot(root); r == nil || seq != r.tickSeq {
		return nil
	}
	if _, err := vm.call("proxy_on_tick", vm.fns.tick, vm.rootFrameFor(root), uint64(root)); err != nil {
		return err
	}
	vm.afterCallback()
	if r := vm.pluginRoot(root); r != nil && seq == r.tickSeq && r.tickPeriod > 0 {
		vm.host.schedule(vm.host.clock.Now().Add(r.tickPeriod), event{kind: evTick, vm: vm, gen: vm.gen, root: root, tickGen: seq})
	}
	return nil
}

func (vm *VM) onTick(gen uint64) error {
	if gen != vm.tickGen {
		return nil
	}
	_, err := vm.call("proxy_on_tick", vm.fns.tick, vm.rootFrame(), uint64(vm.rootID))
	if err != nil {
		return err
	}
	vm.afterCallback()
	if gen == vm.tickGen && vm.tickPeriod > 0 {
		vm.host.schedule(vm.host.clock.Now().Add(vm.tickPeriod), event{kind: evTick, vm: vm, gen: vm.gen, tickGen: gen})
	}
	return nil
}

// Tick runs proxy_on_tick on the VM's root context now (proxytest's Tick).
func (vm *VM) Tick() error {
	vm.mu.Lock()
	if vm.isFailed() {
		vm.mu.Unlock()
		return vm.failedErr()
	}
	_, err := vm.call("proxy_on_tick", vm.fns.tick, vm.rootFrame(), uint64(vm.rootID))
	if err == nil {
		vm.afterCallback()
	}
	vm.mu.Unlock()
	return joinErr(err, vm.host.drain())
}

// GetTickPeriod returns the tick period the VM's root set, in milliseconds.
func (vm *VM) GetTickPeriod() uint32 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return uint32(vm.tickPeriod / time.Millisecond)
}

func (vm *VM) onQueueReady(root, token uint32) error {
	if !vm.isRoot(root) {
		return nil
	}
	_, err := vm.call("proxy_on_queue_ready", vm.fns.queueReady, vm.rootFrameFor(root), uint64(root), uint64(token))
	if err == nil {
		vm.afterCallback()
	}
	return err
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return errors.Join(a, b)
}

// setEffectiveContext makes the root or a live stream the context host calls act on.
func (vm *VM) setEffectiveContext(id uint32) Status {
	fr := vm.frame
	if fr == nil {
		return abi.StatusBadArgument
	}
	if vm.isRoot(id) {
		fr.effective, fr.stream = id, nil
		return StatusOK
	}
	s := vm.streams[id]
	if s == nil || !s.Created || s.Deleted() {
		return abi.StatusBadArgument
	}
	fr.effective, fr.stream = id, s
	return StatusOK
}

// callerRoot is the root context of the running callback's effective context: the plugin a
// callout, a queue registration or a tick belongs to.
func (vm *VM) callerRoot() uint32 {
	if fr := vm.frame; fr != nil {
		if fr.stream != nil {
			return fr.stream.root
		}
		if vm.pluginRoot(fr.effective) != nil {
			return fr.effective
		}
	}
	return vm.rootID
}
