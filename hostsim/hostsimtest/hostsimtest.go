// Package hostsimtest is testing.TB helpers for hostsim: a shared Runtime (each module is
// compiled once per test binary, and machine code is cached on disk across binaries, under
// build/), loaders for the built modules that fail with "run make build" when one is
// missing or stale, and a Host whose methods mirror the SDK's proxytest one to one, failing
// the test on a guest trap instead of returning errors.
package hostsimtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/buildstamp"
	"github.com/spillwayproxy/spillway/internal/modroot"
)

// CacheDir is where compiled machine code is kept, relative to the module root: under
// build/, so `make clean` removes it, and bounded (hostsim.DefaultCompilationCacheLimit).
const CacheDir = "build/.hostsim-cache"

// shared holds the test binary's Runtime. It only caches compiled code: every Host keeps
// its own state, so tests that share it may run in parallel.
var shared struct {
	once sync.Once
	rt   *hostsim.Runtime
	err  error
}

// Runtime returns the test binary's shared Runtime. Compiled machine code is also kept in
// CacheDir, so later test binaries skip compiling.
func Runtime(t testing.TB) *hostsim.Runtime {
	t.Helper()
	root := ModuleRoot(t)
	shared.once.Do(func() {
		shared.rt, shared.err = hostsim.NewRuntime(hostsim.WithCompilationCacheDir(filepath.Join(root, CacheDir)))
	})
	if shared.err != nil {
		t.Fatalf("hostsimtest: runtime: %v", shared.err)
	}
	return shared.rt
}

// ModuleRoot returns the directory of the spillway module (where go.mod is).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := modroot.Dir()
	if err != nil {
		t.Fatalf("hostsimtest: %v", err)
	}
	return root
}

// ReadModule reads a built module, rel to the module root (e.g. "build/spillway.wasm"). A
// module that is missing, or stale — its sources changed since it was built, by its build
// stamp (hostsim/buildstamp) — fails the test with the command that builds it.
func ReadModule(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := readModule(ModuleRoot(t), rel)
	if err != nil {
		t.Fatalf("hostsimtest: %v", err)
	}
	return b
}

// Guest reads build/guests/<name>.wasm, built by `go run ./hostsim/internal/buildguests`
// (part of make build), and fails the test as ReadModule does.
func Guest(t testing.TB, name string) []byte {
	t.Helper()
	return ReadModule(t, "build/guests/"+name+".wasm")
}

// checked remembers the modules this test binary found fresh: each is checked once.
var checked sync.Map // absolute path -> module digest

// readModule reads the module at rel under root and checks it against its build stamp.
func readModule(root, rel string) ([]byte, error) {
	path := filepath.Join(root, filepath.FromSlash(rel))
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s is missing: run make build (%w)", rel, err)
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	if d, ok := checked.Load(path); ok && d == digest {
		return b, nil
	}
	s, err := buildstamp.Check(root, path)
	var stale *buildstamp.StaleError
	switch {
	case errors.As(err, &stale):
		return nil, fmt.Errorf("%s is stale (%s): run make build", rel, stale.Reason)
	case err != nil:
		return nil, fmt.Errorf("%s: %w: run make build", rel, err)
	case s.Module != digest: // rebuilt between the read and the check
		return nil, fmt.Errorf("%s is stale (it changed while being read): run make build", rel)
	}
	checked.Store(path, digest)
	return b, nil
}

// Host is a hostsim.Host with proxytest's method shapes: guest traps fail the test.
type Host struct {
	*hostsim.Host
	t testing.TB
}

// New creates a Host on the shared Runtime (options given later win) and closes it when
// the test ends.
func New(t testing.TB, wasm []byte, opts ...hostsim.Option) *Host {
	t.Helper()
	h, err := hostsim.New(wasm, append([]hostsim.Option{hostsim.WithRuntime(Runtime(t))}, opts...)...)
	if err != nil {
		t.Fatalf("hostsimtest: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("hostsimtest: close: %v", err)
		}
	})
	return &Host{Host: h, t: t}
}

func (h *Host) check(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("hostsimtest: %v", err)
	}
}

// StartVM runs proxy_on_vm_start (proxytest): a refusal is false, a trap fails the test.
func (h *Host) StartVM() types.OnVMStartStatus {
	h.t.Helper()
	ok, err := h.Host.StartVM()
	if !errors.Is(err, hostsim.ErrStartRefused) {
		h.check(err)
	}
	return types.OnVMStartStatus(ok)
}

// StartPlugin runs proxy_on_configure (proxytest): a refusal is false, a trap fails the test.
func (h *Host) StartPlugin() types.OnPluginStartStatus {
	h.t.Helper()
	ok, err := h.Host.StartPlugin()
	if !errors.Is(err, hostsim.ErrStartRefused) {
		h.check(err)
	}
	return types.OnPluginStartStatus(ok)
}

// FinishVM runs proxy_on_done on worker 0's root (proxytest).
func (h *Host) FinishVM() bool {
	h.t.Helper()
	ok, err := h.Host.FinishVM()
	h.check(err)
	return ok
}

// Worker returns worker VM i with proxytest's method shapes.
func (h *Host) Worker(i int) *VM {
	h.t.Helper()
	w := h.Host.Worker(i)
	if w == nil {
		h.t.Fatalf("hostsimtest: no worker %d (plugin started?)", i)
	}
	return &VM{VM: w, t: h.t}
}

// CallOnRequestHeaders runs on worker 0.
func (h *Host) CallOnRequestHeaders(id uint32, headers [][2]string, eos bool) types.Action {
	h.t.Helper()
	return h.Worker(0).CallOnRequestHeaders(id, headers, eos)
}

// CallOnRequestBody runs on worker 0.
func (h *Host) CallOnRequestBody(id uint32, body []byte, eos bool) types.Action {
	h.t.Helper()
	return h.Worker(0).CallOnRequestBody(id, body, eos)
}

// CallOnRequestTrailers runs on worker 0.
func (h *Host) CallOnRequestTrailers(id uint32, trailers [][2]string) types.Action {
	h.t.Helper()
	return h.Worker(0).CallOnRequestTrailers(id, trailers)
}

// CallOnResponseHeaders runs on worker 0.
func (h *Host) CallOnResponseHeaders(id uint32, headers [][2]string, eos bool) types.Action {
	h.t.Helper()
	return h.Worker(0).CallOnResponseHeaders(id, headers, eos)
}

// CallOnResponseBody runs on worker 0.
func (h *Host) CallOnResponseBody(id uint32, body []byte, eos bool) types.Action {
	h.t.Helper()
	return h.Worker(0).CallOnResponseBody(id, body, eos)
}

// CallOnResponseTrailers runs on worker 0.
func (h *Host) CallOnResponseTrailers(id uint32, trailers [][2]string) types.Action {
	h.t.Helper()
	return h.Worker(0).CallOnResponseTrailers(id, trailers)
}

// CompleteHttpContext runs on worker 0.
func (h *Host) CompleteHttpContext(id uint32) {
	h.t.Helper()
	h.Worker(0).CompleteHttpContext(id)
}

// ResetStream resets a stream on worker 0 as a downstream reset does in Envoy (log, done,
// delete).
func (h *Host) ResetStream(id uint32, details string) {
	h.t.Helper()
	h.check(h.Host.ResetStream(id, details))
}

// CallOnHttpCallResponse answers a pending callout (proxytest).
func (h *Host) CallOnHttpCallResponse(calloutID uint32, headers, trailers [][2]string, body []byte) {
	h.t.Helper()
	h.check(h.Host.CallOnHttpCallResponse(calloutID, headers, trailers, body))
}

// Tick runs proxy_on_tick on worker 0 (proxytest).
func (h *Host) Tick() {
	h.t.Helper()
	h.check(h.Host.Tick())
}

// Advance moves the virtual clock, firing timers.
func (h *Host) Advance(d time.Duration) {
	h.t.Helper()
	h.check(h.Host.Advance(d))
}

// RunHTTP drives a whole request through a worker.
func (h *Host) RunHTTP(req *hostsim.Request) *hostsim.Response {
	h.t.Helper()
	resp, err := h.Host.RunHTTP(context.Background(), req)
	h.check(err)
	return resp
}

// VM is a hostsim.VM with proxytest's method shapes.
type VM struct {
	*hostsim.VM
	t testing.TB
}

func (w *VM) check(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatalf("hostsimtest: %v", err)
	}
}

// CallOnRequestHeaders delivers request headers.
func (w *VM) CallOnRequestHeaders(id uint32, headers [][2]string, eos bool) types.Action {
	w.t.Helper()
	a, err := w.VM.CallOnRequestHeaders(id, headers, eos)
	w.check(err)
	return a
}

// CallOnRequestBody delivers a request body chunk.
func (w *VM) CallOnRequestBody(id uint32, body []byte, eos bool) types.Action {
	w.t.Helper()
	a, err := w.VM.CallOnRequestBody(id, body, eos)
	w.check(err)
	return a
}

// CallOnRequestTrailers delivers request trailers.
func (w *VM) CallOnRequestTrailers(id uint32, trailers [][2]string) types.Action {
	w.t.Helper()
	a, err := w.VM.CallOnRequestTrailers(id, trailers)
	w.check(err)
	return a
}

// CallOnResponseHeaders delivers response headers.
func (w *VM) CallOnResponseHeaders(id uint32, headers [][2]string, eos bool) types.Action {
	w.t.Helper()
	a, err := w.VM.CallOnResponseHeaders(id, headers, eos)
	w.check(err)
	return a
}

// CallOnResponseBody delivers a response body chunk.
func (w *VM) CallOnResponseBody(id uint32, body []byte, eos bool) types.Action {
	w.t.Helper()
	a, err := w.VM.CallOnResponseBody(id, body, eos)
	w.check(err)
	return a
}

// CallOnResponseTrailers delivers response trailers.
func (w *VM) CallOnResponseTrailers(id uint32, trailers [][2]string) types.Action {
	w.t.Helper()
	a, err := w.VM.CallOnResponseTrailers(id, trailers)
	w.check(err)
	return a
}

// CompleteHttpContext ends the stream (log → done → delete).
func (w *VM) CompleteHttpContext(id uint32) {
	w.t.Helper()
	w.check(w.VM.CompleteHttpContext(id))
}

// ResetStream resets a stream on this VM as a downstream reset does in Envoy.
func (w *VM) ResetStream(id uint32, details string) {
	w.t.Helper()
	w.check(w.VM.ResetStream(id, details))
}

// Tick runs proxy_on_tick on this VM.
func (w *VM) Tick() {
	w.t.Helper()
	w.check(w.VM.Tick())
}

// RunHTTP drives a whole request through this VM.
func (w *VM) RunHTTP(req *hostsim.Request) *hostsim.Response {
	w.t.Helper()
	resp, err := w.VM.RunHTTP(context.Background(), req)
	w.check(err)
	return resp
}

// ContainsLine reports whether some line contains every one of the substrings.
func ContainsLine(lines []string, substrs ...string) bool {
	for _, l := range lines {
		all := true
		for _, s := range substrs {
			if !strings.Contains(l, s) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
