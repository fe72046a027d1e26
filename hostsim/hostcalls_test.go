package hostsim_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// Every host call the guest makes is counted once, per function and per VM: the probe logs
// each callback and each op with proxy_log, so its calls are known exactly.
func TestHostCallsCountWhatTheGuestCalls(t *testing.T) {
	h := probe(t, `
request_headers get_header 0 :path
request_headers set_shared k v 0
request_headers get_shared k
request_headers get_shared missing
request_headers now
`, hostsim.WithWorkers(2))
	h.ResetHostCalls()
	if got := h.Host.HostCalls(); len(got) != 0 {
		t.Fatalf("after ResetHostCalls: %v", got)
	}
	w := h.Worker(0)
	id := w.InitializeHttpContext()
	w.CallOnRequestHeaders(id, getReq, true)

	want := hostsim.HostCallCounts{
		// "cb context_create", "cb request_headers", one "op ..." line per op but "now",
		// which logs "now <ns>" instead: 2 + 5.
		"env.proxy_log":                  7,
		"env.proxy_get_header_map_value": 1,
		"env.proxy_set_shared_data":      1,
		"env.proxy_get_shared_data":      2, // a NotFound read is a call too
		// time.Now reads the wall clock and the monotonic clock.
		"wasi_snapshot_preview1.clock_time_get": 2,
	}
	got := w.HostCalls()
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("worker-0 host calls (-want +got):\n%s", d)
	}
	for _, c := range []struct {
		name string // what is added up
		got  uint64 // the method's answer
		want uint64 // from the calls above
	}{
		{"Total", got.Total(), 13},
		{"Proxy", got.Proxy(), 11},
		{"WASI", got.WASI(), 2},
		{"SharedData", got.SharedData(), 3},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if other := h.Worker(1).HostCalls(); len(other) != 0 {
		t.Errorf("worker-1 made no call but counts %v", other)
	}
	if d := cmp.Diff(want, h.Host.HostCalls()); d != "" {
		t.Errorf("Host.HostCalls is not the sum over its VMs (-want +got):\n%s", d)
	}

	// Sub gives the calls of a window without a reset.
	before := w.HostCalls()
	w.CallOnRequestHeaders(w.InitializeHttpContext(), getReq, true)
	if d := cmp.Diff(want, w.HostCalls().Sub(before)); d != "" {
		t.Errorf("second request (-want +got):\n%s", d)
	}

	w.ResetHostCalls()
	if got := w.HostCalls(); len(got) != 0 {
		t.Errorf("after VM ResetHostCalls: %v", got)
	}
}

// Host.HostCalls adds up every VM the Host made, the canary included: a start-up write in
// on_configure runs in the canary, the main-thread VM and each worker.
func TestHostCallsCoverEveryVM(t *testing.T) {
	h := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithWorkers(2),
		hostsim.WithPluginConfiguration([]byte("configure set_shared started yes 0")))
	if !h.StartPlugin() {
		t.Fatalf("plugin did not start:\n%s", dump(h.Host))
	}
	const fn = "env.proxy_set_shared_data"
	var clones uint64
	for _, vm := range h.VMs() {
		n := vm.HostCalls()[fn]
		if n != 1 {
			t.Errorf("%s: %s called %d times, want 1", vm.Name(), fn, n)
		}
		clones += n
	}
	if total := h.Host.HostCalls()[fn]; total != clones+1 {
		t.Fatalf("Host counts %d calls of %s; main and workers made %d, the canary 1", total, fn, clones)
	}
}

// A call refused in a restricted phase still counts: the guest made it.
func TestHostCallsCountRefusedCalls(t *testing.T) {
	h := probe(t, `request_headers malloc_hook shared
request_headers get_header 0 :path`)
	h.ResetHostCalls()
	w := h.Host.Worker(0)
	id := w.InitializeHttpContext()
	_, err := w.CallOnRequestHeaders(id, getReq, true)
	var rc *hostsim.RestrictedCallError
	if !errors.As(err, &rc) {
		t.Fatalf("want a restricted_callback trap, got %v", err)
	}
	if n := w.HostCalls()["env.proxy_set_shared_data"]; n != 1 {
		t.Fatalf("refused proxy_set_shared_data counted %d times, want 1", n)
	}
}
