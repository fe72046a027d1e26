package serve

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// logBuf collects what serve logs from its concurrent writers, and can be waited on.
type logBuf struct{ hostsimtest.Lines }

// lines returns the lines containing sub.
func (l *logBuf) lines(sub string) []string { return l.Matching(sub) }

// await waits until at least n lines contain sub (woken by the writes, bounded by
// hostsimtest.WaitLimit), and returns the lines that do: the access line of a request is
// written once its stream ended, which can be just after the client read the last byte.
func (l *logBuf) await(sub string, n int) []string { return l.Wait(sub, n) }

// spillwayWasm returns the path of build/spillway.wasm; a missing module fails the test
// with "run make build".
func spillwayWasm(t testing.TB) string {
	t.Helper()
	hostsimtest.ReadModule(t, "build/spillway.wasm")
	return filepath.Join(hostsimtest.ModuleRoot(t), "build", "spillway.wasm")
}

// demo is a started serve on the demo policy with its built-in fakes.
type demo struct {
	*Instance
	access, logs *logBuf
}

// startDemo starts serve in-process on 127.0.0.1:0 with the embedded demo policy and the
// built-in fakes; change adjusts the options first.
func startDemo(t testing.TB, change func(*Options)) *demo {
	t.Helper()
	opts := DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	opts.WasmPath = spillwayWasm(t)
	opts.Runtime = hostsimtest.Runtime(t)
	if change != nil {
		change(&opts)
	}
	d := &demo{access: &logBuf{}, logs: &logBuf{}}
	inst, err := Start(opts, d.access, d.logs)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	d.Instance = inst
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := inst.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return d
}

// fake returns the built-in fake serving cluster name.
func (d *demo) fake(t *testing.T, name string) *fakeprovider.Server {
	t.Helper()
	f, ok := d.Fakes[name]
	if !ok {
		t.Fatalf("no built-in fake for %s (have %v)", name, d.Fakes)
	}
	return f
}
