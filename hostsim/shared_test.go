package hostsim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// Shared data: one CAS counter for the process, cas 0 unconditional, CasMismatch on a
// stale cas, a non-zero cas on a missing key succeeds. proxytest differs (per-key CAS).
func TestSharedDataCAS(t *testing.T) {
	h := probe(t, `
tick get_shared a
tick set_shared a v1 0
tick set_shared b w1 0
tick get_shared b
tick get_shared a
tick set_shared a v2 7
tick set_shared a v2 $cas
tick set_shared missing m 12345
tick set_shared a v3 0
tick get_shared a
`)
	h.Tick()
	// Nothing else wrote, so the process counter starts at 1 here.
	requireTrace(t, h.Host, "worker-0",
		"op get_shared a -> NotFound",
		"op set_shared a v1 0 -> Ok",
		"op set_shared b w1 0 -> Ok",
		"op get_shared b -> Ok w1 cas=2", // process-global counter, not per key
		"op get_shared a -> Ok v1 cas=1",
		"op set_shared a v2 7 -> CasMismatch",
		"op set_shared a v2 $cas -> Ok",
		"op set_shared missing m 12345 -> Ok", // a cas on a missing key is not checked
		"op set_shared a v3 0 -> Ok",          // cas 0: unconditional
		"op get_shared a -> Ok v3 cas=5")
}

// The host-side view shares the guest's rules, and a stale write from "another worker"
// makes the guest's CAS fail.
func TestSharedDataHostSide(t *testing.T) {
	h := probe(t, `
tick get_shared k
tick set_shared k guest $cas
`)
	if st := h.SetSharedData("k", []byte("v1"), 0); st != hostsim.StatusOK {
		t.Fatal(st)
	}
	_, cas, _ := h.GetSharedData("k")
	h.Tick() // guest reads (cas) and writes with it: Ok
	v, cas2, _ := h.GetSharedData("k")
	if string(v) != "guest" || cas2 <= cas {
		t.Fatalf("after guest CAS write: %q cas %d (was %d)", v, cas2, cas)
	}
	if st := h.SetSharedData("k", []byte("stale"), cas); st != hostsim.StatusCasMismatch {
		t.Fatalf("stale host write: %v", st)
	}
	if st := h.SetSharedData("new", []byte("x"), 999); st != hostsim.StatusOK {
		t.Fatalf("cas on a missing key: %v", st)
	}
}

// The canary's side effects (shared data written in its on_configure) survive it, and the
// namespace is per vm_id: Hosts on one Process share it only with the same vm_id.
func TestSharedDataCanaryAndVMID(t *testing.T) {
	proc := hostsim.NewProcess()
	script := []byte("configure set_shared started yes 0")
	a := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithProcess(proc), hostsim.WithVMID("x"),
		hostsim.WithPluginConfiguration(script))
	if _, _, found := proc.GetSharedData("x", "started"); found {
		t.Fatal("data before start")
	}
	a.StartPlugin()
	v, cas, found := proc.GetSharedData("x", "started")
	if !found || string(v) != "yes" || cas != 3 { // canary, main and worker-0 each wrote once
		t.Fatalf("value %q cas %d found %v", v, cas, found)
	}
	requireTrace(t, a.Host, "canary", "op set_shared started yes 0 -> Ok")
	b := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithProcess(proc), hostsim.WithVMID("y"),
		hostsim.WithPluginConfiguration([]byte("configure get_shared started")))
	b.StartPlugin()
	requireTrace(t, b.Host, "worker-0", "op get_shared started -> NotFound")
	c := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithProcess(proc), hostsim.WithVMID("x"),
		hostsim.WithPluginConfiguration([]byte("configure get_shared started")))
	c.StartPlugin()
	requireTrace(t, c.Host, "worker-0", "op get_shared started -> Ok yes")
}

// Shared queues: every VM registers, the last registrant is notified, asynchronously and
// once per enqueue; dequeue gives Empty when drained; unknown tokens are NotFound.
func TestSharedQueues(t *testing.T) {
	h := probe(t, `
configure register_queue jobs
request_headers resolve_queue - jobs
request_headers enqueue $queue one
request_headers enqueue $queue two
request_headers log 2 after-enqueue
request_headers enqueue 999 x
request_headers resolve_queue - nope
queue_ready dequeue $queue
tick dequeue $queue
`, hostsim.WithWorkers(2))
	// The last registrant is worker-1 (main registers first, then the workers in order).
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	requireTrace(t, h.Host, "worker-0",
		"op enqueue $queue one -> Ok", "op enqueue $queue two -> Ok",
		"op enqueue 999 x -> NotFound", "op resolve_queue - nope -> NotFound")
	requireNoLine(t, h.Host, "worker-0", "cb queue_ready")
	requireNoLine(t, h.Host, "main", "cb queue_ready")
	requireTrace(t, h.Host, "worker-1",
		"cb queue_ready ctx=1", "op dequeue $queue -> Ok one",
		"cb queue_ready ctx=1", "op dequeue $queue -> Ok two")
	// Notifications ran after the enqueuing callback returned, not inside it.
	var iAfter, iReady int
	for i, l := range h.Logs() {
		switch {
		case l.Message == "after-enqueue":
			iAfter = i
		case l.Message == "cb queue_ready ctx=1 1" && iReady == 0:
			iReady = i
		}
	}
	if iReady < iAfter {
		t.Fatalf("queue_ready (%d) ran before the enqueuing callback finished (%d)", iReady, iAfter)
	}
	if err := h.Host.Worker(1).Tick(); err != nil {
		t.Fatal(err)
	}
	requireTrace(t, h.Host, "worker-1", "cb tick ctx=1", "op dequeue $queue -> Empty")
}

// Ticks: per VM root, first one period after the call, re-armed after each on_tick; the
// guest's time.Now() follows the virtual clock; period 0 stops them.
func TestTicksAndVirtualClock(t *testing.T) {
	h := probe(t, `
configure tick_period 100
tick now
tick@1 time_ns
`, hostsim.WithWorkers(2))
	start := h.Clock().Now()
	h.Advance(250 * time.Millisecond)
	for _, vm := range []string{"main", "worker-0", "worker-1"} {
		n := 0
		for _, l := range trace(h.Host, vm) {
			if l == "cb tick ctx=1" {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%s ticked %d times in 250ms at 100ms, want 2", vm, n)
		}
	}
	requireNoLine(t, h.Host, "canary", "cb tick")
	want := fmt.Sprintf("now %d", start.Add(100*time.Millisecond).UnixNano())
	if !hostsimtest.ContainsLine(h.GetInfoLogs(), want) {
		t.Fatalf("guest time.Now() did not follow the virtual clock: want %q in %v", want, trace(h.Host, "worker-0"))
	}
	requireTrace(t, h.Host, "worker-0", fmt.Sprintf("op time_ns -> Ok %d", start.Add(200*time.Millisecond).UnixNano()))
	if p := h.GetTickPeriod(); p != 100 {
		t.Fatalf("tick period %d", p)
	}
}

func TestTickPeriodZeroStops(t *testing.T) {
	h := probe(t, `
configure tick_period 10
tick tick_period 0
`)
	h.Advance(100 * time.Millisecond)
	n := 0
	for _, l := range trace(h.Host, "worker-0") {
		if l == "cb tick ctx=1" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d ticks after setting the period to 0 in the first", n)
	}
}
