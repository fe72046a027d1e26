package hostsim

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/abi/wasm"
	"github.com/spillwayproxy/spillway/hostsim/internal/cachedir"
	"github.com/spillwayproxy/spillway/hostsim/internal/hostfn"
	"github.com/spillwayproxy/spillway/hostsim/internal/wasi"
)

// envoyMaxMemoryPages is V8's --wasm_max_mem_pages in cpp-host (1 GiB).
const envoyMaxMemoryPages = 16384

// Runtime compiles modules and links them to the host functions. Share one Runtime across a
// test suite (or a process) so each module is compiled once; every Host keeps its own
// state, so Hosts on one Runtime are independent and may run in parallel.
type Runtime struct {
	cfg runtimeConfig

	mu      sync.Mutex
	cache   wazero.CompilationCache
	engines [2]*engine // engineEnvoy, engineWazero
	closed  bool
}

type runtimeConfig struct {
	interpreter bool
	cacheDir    string
	cacheLimit  int64
}

// DefaultCompilationCacheLimit bounds a compilation cache directory's size unless
// WithCompilationCacheLimit says otherwise: a compiled Spillway module takes about 15 MB,
// every build of a changed module adds one, and the whole test suite's modules take about
// 120 MB, so the limit holds them a few times over.
const DefaultCompilationCacheLimit = 512 << 20

// RuntimeOption configures a Runtime.
type RuntimeOption func(*runtimeConfig)

// WithInterpreter makes the Runtime use wazero's interpreter instead of its compiler.
func WithInterpreter() RuntimeOption { return func(c *runtimeConfig) { c.interpreter = true } }

// WithCompilationCacheDir keeps compiled machine code in dir, so later processes (other test
// binaries, the next `go test` run) skip compilation. The directory is kept within its
// limit (WithCompilationCacheLimit): when a Runtime is created and when it is closed, the
// entries written longest ago are removed until the rest fit.
func WithCompilationCacheDir(dir string) RuntimeOption {
	return func(c *runtimeConfig) { c.cacheDir = dir }
}

// WithCompilationCacheLimit bounds the compilation cache directory to n bytes (default
// DefaultCompilationCacheLimit).
func WithCompilationCacheLimit(n int64) RuntimeOption {
	return func(c *runtimeConfig) { c.cacheLimit = n }
}

// NewRuntime returns a Runtime. Close it when done.
func NewRuntime(opts ...RuntimeOption) (*Runtime, error) {
	r := &Runtime{}
	for _, o := range opts {
		o(&r.cfg)
	}
	if r.cfg.cacheLimit <= 0 {
		r.cfg.cacheLimit = DefaultCompilationCacheLimit
	}
	if r.cfg.cacheDir != "" {
		if err := os.MkdirAll(r.cfg.cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("hostsim: compilation cache: %w", err)
		}
		cachedir.Prune(r.cfg.cacheDir, r.cfg.cacheLimit, time.Now())
		c, err := wazero.NewCompilationCacheWithDir(r.cfg.cacheDir)
		if err != nil {
			return nil, fmt.Errorf("hostsim: compilation cache: %w", err)
		}
		r.cache = c
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	return r, nil
}

// Close releases every compiled module and host VM created on the Runtime.
func (r *Runtime) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var errs []error
	for _, e := range r.engines {
		if e != nil {
			errs = append(errs, e.rt.Close(context.Background()))
		}
	}
	errs = append(errs, r.cache.Close(context.Background()))
	if r.cfg.cacheDir != "" {
		cachedir.Prune(r.cfg.cacheDir, r.cfg.cacheLimit, time.Now())
	}
	return errors.Join(errs...)
}

type engineKind int

const (
	engineEnvoy  engineKind = iota // hostsim's own WASI (Envoy modes)
	engineWazero                   // wazero's full WASI
)

// engine is one wazero runtime with the host modules linked for one kind of WASI.
type engine struct {
	kind    engineKind
	rt      wazero.Runtime
	mu      sync.Mutex
	modules map[[32]byte]*Module
	seq     atomic.Uint64
}

func (r *Runtime) engine(kind engineKind) (*engine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("hostsim: runtime closed")
	}
	if e := r.engines[kind]; e != nil {
		return e, nil
	}
	ctx := context.Background()
	rc := wazero.NewRuntimeConfigCompiler()
	if r.cfg.interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	rc = rc.WithCompilationCache(r.cache).WithMemoryLimitPages(envoyMaxMemoryPages).WithCloseOnContextDone(false)
	e := &engine{kind: kind, rt: wazero.NewRuntimeWithConfig(ctx, rc), modules: map[[32]byte]*Module{}}
	if err := instantiateEnv(ctx, e.rt); err != nil {
		e.rt.Close(ctx)
		return nil, err
	}
	var err error
	if kind == engineWazero {
		if _, err = wasi_snapshot_preview1.Instantiate(ctx, e.rt); err != nil {
			err = fmt.Errorf("wasi: %w", err)
		}
	} else {
		err = wasi.Instantiate(ctx, e.rt, func(module string, f wasm.Func[wasi.Guest]) api.GoModuleFunction {
			return wrapHostFunc(module, f, func(vm *VM) wasi.Guest { return (*guest)(vm) })
		})
	}
	if err != nil {
		e.rt.Close(ctx)
		return nil, fmt.Errorf("hostsim: %w", err)
	}
	r.engines[kind] = e
	return e, nil
}

// Module is a compiled proxy-wasm module and what it imports and exports.
type Module struct {
	// Size is the module's size in bytes.
	Size int
	// SHA256 is the module's digest, the compile-cache key.
	SHA256 [32]byte
	// Imports lists the imported functions as "module.name", sorted.
	Imports []string
	// Exports lists the exported names (functions and memories), sorted.
	Exports []string
	// ABI is the proxy-wasm ABI marker found among the exports ("" if none).
	ABI ABIVersion

	compiled wazero.CompiledModule
	funcs    map[string]bool
	imports  []api.FunctionDefinition
}

// Compile compiles wasm for the given WASI mode's engine, once per distinct module.
func (r *Runtime) Compile(wasm []byte, mode WASIMode) (*Module, error) {
	e, err := r.engine(engineFor(mode))
	if err != nil {
		return nil, err
	}
	return e.compile(wasm)
}

func (e *engine) compile(wasm []byte) (*Module, error) {
	sum := sha256.Sum256(wasm)
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := e.modules[sum]; m != nil {
		return m, nil
	}
	cm, err := e.rt.CompileModule(context.Background(), wasm)
	if err != nil {
		return nil, fmt.Errorf("hostsim: compile: %w", err)
	}
	m := &Module{Size: len(wasm), SHA256: sum, compiled: cm, funcs: map[string]bool{}}
	for name := range cm.ExportedFunctions() {
		m.funcs[name] = true
		m.Exports = append(m.Exports, name)
	}
	for name := range cm.ExportedMemories() {
		m.Exports = append(m.Exports, name)
	}
	sort.Strings(m.Exports)
	for _, d := range cm.ImportedFunctions() {
		mod, name, _ := d.Import()
		m.Imports = append(m.Imports, mod+"."+name)
		m.imports = append(m.imports, d)
	}
	sort.Strings(m.Imports)
	// cpp-host stops at the first marker in export order; wazero does not keep the order,
	// so the oldest ABI wins when a module declares several (none of ours does).
	for _, v := range abi.ABIVersions {
		if m.funcs[string(v)] {
			m.ABI = v
			break
		}
	}
	e.modules[sum] = m
	return m, nil
}

// HasExport reports whether the module exports a function or memory named name.
func (m *Module) HasExport(name string) bool {
	i := sort.SearchStrings(m.Exports, name)
	return i < len(m.Exports) && m.Exports[i] == name
}

// Missing returns the names among want that the module does not export.
func (m *Module) Missing(want ...string) []string {
	var out []string
	for _, w := range want {
		if !m.HasExport(w) {
			out = append(out, w)
		}
	}
	return out
}

// GoSDKExports lists what a Go SDK filter built with the ABI bridge exports: the start-up
// function, the memory, the ABI marker, the allocator and every proxy_on_* callback of ABI
// 0.2.0 (the bridge exports them all, used or not).
func GoSDKExports() []string {
	return []string{"_initialize", "memory", string(ABI020), "proxy_on_memory_allocate",
		"proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure", "proxy_on_tick", "proxy_on_queue_ready",
		"proxy_on_request_headers", "proxy_on_request_body", "proxy_on_request_trailers",
		"proxy_on_response_headers", "proxy_on_response_body", "proxy_on_response_trailers",
		"proxy_on_http_call_response", "proxy_on_log", "proxy_on_done", "proxy_on_delete",
		"proxy_on_new_connection", "proxy_on_downstream_data", "proxy_on_downstream_connection_close",
		"proxy_on_upstream_data", "proxy_on_upstream_connection_close"}
}

// CheckImports reports every import that Envoy, in the given WASI mode and for the module's
// ABI, would not resolve (Envoy fails the load with "missing import").
func (m *Module) CheckImports(mode WASIMode) error {
	var missing []string
	for _, d := range m.imports {
		mod, name, _ := d.Import()
		ok := false
		switch mod {
		case "env":
			ok = hostfn.ImportAllowed(name, m.ABI)
		case wasi_snapshot_preview1.ModuleName, "wasi_unstable":
			ok = mode.Provides(name) && (mod == wasi_snapshot_preview1.ModuleName || mode != WASIWazero)
		}
		if !ok {
			missing = append(missing, mod+"."+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("hostsim: failed to load wasm module due to missing imports (%s): %v", mode, missing)
	}
	return nil
}

// CheckExports reports what cpp-host's load would reject: no ABI marker, or no allocator.
func (m *Module) CheckExports() error {
	if m.ABI == "" {
		return errors.New("hostsim: missing or unknown Proxy-Wasm ABI version")
	}
	if !m.funcs["malloc"] && !m.funcs["proxy_on_memory_allocate"] {
		return errors.New("hostsim: wasm module is missing malloc (no malloc or proxy_on_memory_allocate export)")
	}
	return nil
}
