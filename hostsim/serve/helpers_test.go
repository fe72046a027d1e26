package serve

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// logBuf is a bytes.Buffer safe for the concurrent writers serve has.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the lines containing sub.
func (l *logBuf) lines(sub string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

// await waits (bounded) until at least n lines contain sub, and returns the lines that do:
// the access line of a request is written once its stream ended, which can be just after
// the client read the last byte.
func (l *logBuf) await(sub string, n int) []string {
	for i := 0; i < 500 && len(l.lines(sub)) < n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	return l.lines(sub)
}

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
