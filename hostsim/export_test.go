package hostsim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// The bridge's heap-allocation counter is exact: reading it allocates nothing, and an
// export that makes n allocations moves it by n. gcstress is an SDK guest built by
// plugin/wasmbuild, so it carries the bridge.
func TestGuestHeapAllocsCountsExactly(t *testing.T) {
	h := hostsimtest.New(t, hostsimtest.Guest(t, "gcstress"))
	if !h.StartPlugin() {
		t.Fatal("gcstress did not start")
	}
	w := h.Host.Worker(0)
	read := func() uint64 {
		t.Helper()
		n, err := w.GuestHeapAllocs()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a0 := read()
	calls := w.HostCalls()
	a1 := read()
	if a1 != a0 {
		t.Fatalf("two readings in a row differ by %d: reading allocates", a1-a0)
	}
	if n := w.HostCalls().Sub(calls).Proxy(); n != 0 {
		t.Fatalf("reading made %d proxy-wasm host calls", n)
	}
	for _, n := range []uint64{1, 1000} {
		before := read()
		if _, err := w.CallExport("gcstress_alloc", n); err != nil {
			t.Fatal(err)
		}
		if d := read() - before; d != n {
			t.Fatalf("gcstress_alloc(%d) moved the count by %d", n, d)
		}
	}
	// The Host's figure is the sum over the main-thread VM and the workers.
	mainN, err := h.MainVM().GuestHeapAllocs()
	if err != nil {
		t.Fatal(err)
	}
	before := read()
	total, err := h.Host.GuestHeapAllocs()
	if err != nil {
		t.Fatal(err)
	}
	if total != mainN+before {
		t.Fatalf("Host.GuestHeapAllocs = %d, want main %d + worker %d", total, mainN, before)
	}
}

// A module without the export has no figure: an error wrapping ErrNoExport, never 0.
func TestGuestHeapAllocsNotAvailable(t *testing.T) {
	h := probe(t, "")
	if n, err := h.Host.Worker(0).GuestHeapAllocs(); !errors.Is(err, hostsim.ErrNoExport) {
		t.Fatalf("probe guest: got %d, %v; want ErrNoExport", n, err)
	}
	if n, err := h.Host.GuestHeapAllocs(); !errors.Is(err, hostsim.ErrNoExport) {
		t.Fatalf("probe host: got %d, %v; want ErrNoExport", n, err)
	}
}

// CallExport refuses the ABI's callbacks, the allocator and the start-up functions, and
// checks the argument count.
func TestCallExportRefuses(t *testing.T) {
	h := hostsimtest.New(t, hostsimtest.Guest(t, "gcstress"))
	if !h.StartPlugin() {
		t.Fatal("gcstress did not start")
	}
	w := h.Host.Worker(0)
	for _, c := range []struct {
		name string   // export
		args []uint64 // arguments
		want string   // error fragment
	}{
		{"proxy_on_tick", []uint64{1}, "refuses"},
		{"proxy_on_memory_allocate", []uint64{8}, "refuses"},
		{"_initialize", nil, "refuses"},
		{"malloc", []uint64{8}, "refuses"},
		{"gcstress_alloc", nil, "takes 1 arguments, got 0"},
		{"no_such_export", nil, "does not export"},
	} {
		_, err := w.CallExport(c.name, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CallExport(%s): %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if w.Err() != nil {
		t.Fatalf("a refused call failed the VM: %v", w.Err())
	}
}
