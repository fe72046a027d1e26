package admission

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

var t0 = testfixture.T0

// world is one Envoy process: a shared store, a clock, and worker VMs with their own
// Admitters.
type world struct {
	store   *state.MemStore
	clock   *manualclock.Clock
	workers []*Admitter
}

func newWorld(workers int) *world {
	w := &world{store: state.NewMemStore(), clock: manualclock.New(t0)}
	for range workers {
		w.workers = append(w.workers, New(w.store, w.clock))
	}
	return w
}

func mustGate(t testing.TB, cfg GateConfig) *Gate {
	t.Helper()
	if cfg.Queue == (QueueConfig{}) {
		cfg.Queue = DefaultQueueConfig()
	}
	g, err := NewGate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// poolLeases counts the live leases in a global or provider record.
func poolLeases(t *testing.T, w *world, key string) int {
	t.Helper()
	v, _, found, err := w.store.Get(key)
	if err != nil || !found {
		return 0
	}
	var p poolRecord
	if err := p.decode(v); err != nil {
		t.Fatal(err)
	}
	return len(pruneLeases(p.leases, w.clock.Now().UnixMilli()))
}

// step is one action in a scenario. Handles are numbered by the admit step that made them.
type step struct {
	do     string        // admit | poll | release | cancel | exec | advance
	worker int           // which worker VM acts
	gate   int           // admit: index into the scenario's gates
	model  string        // admit: the upstream model
	ref    int           // poll/release/cancel/exec: index of the admit step whose handle to use
	d      time.Duration // advance: how far the clock moves
	want   string        // granted | queued | full | timeout | waiters | idle | ok
}

type scenario struct {
	name    string
	gates   []GateConfig
	workers int
	steps   []step
	// inFlight is the expected live lease count per gate at the end.
	inFlight []int
}

func runScenario(t *testing.T, sc scenario) {
	w := newWorld(max(sc.workers, 1))
	gates := make([]*Gate, len(sc.gates))
	for i, c := range sc.gates {
		gates[i] = mustGate(t, c)
	}
	type handle struct {
		res Result
	}
	handles := map[int]*handle{}
	for i, s := range sc.steps {
		a := w.workers[s.worker]
		var got string
		outcome := func(r Result, err error) string {
			switch {
			case errors.Is(err, ErrQueueFull):
				return "full"
			case errors.Is(err, ErrQueueTimeout):
				return "timeout"
			case err != nil:
				t.Fatalf("step %d (%s): %v", i, s.do, err)
			case r.Granted:
				return "granted"
			}
			return "queued"
		}
		waiters := func(w Wake, err error) string {
			if err != nil {
				t.Fatalf("step %d (%s): %v", i, s.do, err)
			}
			if w.Any() {
				return "waiters"
			}
			return "idle"
		}
		switch s.do {
		case "admit":
			r, err := a.Admit(gates[s.gate], s.model)
			handles[i] = &handle{res: r}
			got = outcome(r, err)
		case "poll":
			h := handles[s.ref]
			r, err := a.TryAdmit(h.res.Ticket)
			if r.Granted {
				h.res = r
			}
			got = outcome(r, err)
		case "release":
			got = waiters(a.Release(handles[s.ref].res.Lease))
		case "cancel":
			got = waiters(a.Cancel(handles[s.ref].res.Ticket))
		case "exec":
			got = "ok"
			if err := a.CheckExecution(handles[s.ref].res.Lease); errors.Is(err, ErrExecutionTimeout) {
				got = "timeout"
			}
		case "advance":
			w.clock.Advance(s.d)
			continue
		default:
			t.Fatalf("step %d: unknown action %q", i, s.do)
		}
		if got != s.want {
			t.Fatalf("step %d (%s %s ref %d, worker %d): got %s, want %s", i, s.do, s.model, s.ref, s.worker, got, s.want)
		}
	}
	for i, want := range sc.inFlight {
		u, err := w.workers[0].Inspect(gates[i], "")
		if err != nil {
			t.Fatal(err)
		}
		if u.InFlight != want {
			t.Errorf("gate %d: %d in flight at the end, want %d", i, u.InFlight, want)
		}
	}
}

func TestAdmissionScenarios(t *testing.T) {
	// The guide's example: maxConcurrent 4, modelConcurrency {glm-5: 1, glm-4.7: 3}.
	glm := GateConfig{Provider: "zai", Connection: "glm-a", MaxConcurrent: 4, ModelConcurrency: map[string]int{"glm-5": 1, "glm-4.7": 3}}
	one := GateConfig{Provider: "glm", Connection: "solo", MaxConcurrent: 1}
	depth2 := GateConfig{Provider: "glm", Connection: "d2", MaxConcurrent: 1, Queue: QueueConfig{MaxWait: 30 * time.Second, ExecutionMaxWait: 10 * time.Minute, MaxQueueDepth: 2}}
	for _, sc := range []scenario{
		{
			name:  "connection and model caps are taken together; the stricter wins",
			gates: []GateConfig{glm},
			steps: []step{
				0:  {do: "admit", model: "glm-5", want: "granted"},
				1:  {do: "admit", model: "glm-5", want: "queued"}, // glm-5 at its cap of 1
				2:  {do: "admit", model: "glm-4.7", want: "granted"},
				3:  {do: "admit", model: "glm-4.7", want: "granted"},
				4:  {do: "admit", model: "glm-4.7", want: "granted"}, // connection now 4/4
				5:  {do: "admit", model: "glm-4.7", want: "queued"},  // model 3/3 and connection 4/4
				6:  {do: "admit", model: "glm-4", want: "queued"},    // uncapped model, connection full
				7:  {do: "release", ref: 0, want: "waiters"},
				8:  {do: "poll", ref: 6, want: "queued"},  // the glm-5 ticket is older and fits
				9:  {do: "poll", ref: 1, want: "granted"}, // glm-5 again, connection 4/4
				10: {do: "release", ref: 2, want: "waiters"},
				11: {do: "poll", ref: 5, want: "granted"}, // glm-4.7 back to 3/3
				12: {do: "poll", ref: 6, want: "queued"},  // connection full again
			},
			inFlight: []int{4},
		},
		{
			name:  "connection cap stricter than the model cap",
			gates: []GateConfig{{Provider: "p", Connection: "c", MaxConcurrent: 1, ModelConcurrency: map[string]int{"m": 3}}},
			steps: []step{
				{do: "admit", model: "m", want: "granted"},
				{do: "admit", model: "m", want: "queued"},
			},
			inFlight: []int{1},
		},
		{
			name:  "release frees both caps at once",
			gates: []GateConfig{{Provider: "p", Connection: "c", MaxConcurrent: 1, ModelConcurrency: map[string]int{"m": 1}}},
			steps: []step{
				0: {do: "admit", model: "m", want: "granted"},
				1: {do: "release", ref: 0, want: "idle"},
				2: {do: "admit", model: "m", want: "granted"},
				3: {do: "release", ref: 2, want: "idle"},
				4: {do: "release", ref: 2, want: "idle"}, // a double release frees nothing
			},
			inFlight: []int{0},
		},
		{
			name:  "a lease that outlives executionMaxWait frees its slot",
			gates: []GateConfig{one},
			steps: []step{
				0: {do: "admit", want: "granted"},
				1: {do: "exec", ref: 0, want: "ok"},
				2: {do: "advance", d: 10*time.Minute - time.Millisecond},
				3: {do: "admit", want: "queued"}, // still held 1 ms before the deadline
				4: {do: "exec", ref: 0, want: "ok"},
				5: {do: "advance", d: time.Millisecond},
				6: {do: "exec", ref: 0, want: "timeout"}, // RATE_LIMIT_EXECUTION_TIMEOUT
				7: {do: "poll", ref: 3, want: "granted"}, // the dead worker's slot came back
				8: {do: "release", ref: 0, want: "idle"}, // releasing the expired lease frees nothing
				9: {do: "admit", want: "queued"},
			},
			inFlight: []int{1},
		},
		{
			name:    "FIFO across workers",
			gates:   []GateConfig{one},
			workers: 3,
			steps: []step{
				0: {do: "admit", worker: 0, want: "granted"},
				1: {do: "admit", worker: 1, want: "queued"},
				2: {do: "advance", d: time.Second},
				3: {do: "admit", worker: 2, want: "queued"},
				4: {do: "release", worker: 0, ref: 0, want: "waiters"},
				5: {do: "poll", worker: 2, ref: 3, want: "queued"}, // woken first, but not its turn
				6: {do: "poll", worker: 1, ref: 1, want: "granted"},
				7: {do: "release", worker: 1, ref: 1, want: "waiters"},
				8: {do: "poll", worker: 2, ref: 3, want: "granted"},
				9: {do: "release", worker: 2, ref: 3, want: "idle"},
			},
			inFlight: []int{0},
		},
		{
			name:  "a newcomer never overtakes a waiting ticket",
			gates: []GateConfig{one},
			steps: []step{
				0: {do: "admit", want: "granted"},
				1: {do: "admit", want: "queued"},
				2: {do: "release", ref: 0, want: "waiters"},
				3: {do: "admit", want: "queued"}, // the slot is free but ticket 1 is first
				4: {do: "poll", ref: 1, want: "granted"},
			},
			inFlight: []int{1},
		},
		{
			name:  "a ticket held back by its model cap does not hold back another model",
			gates: []GateConfig{{Provider: "p", Connection: "c", MaxConcurrent: 3, ModelConcurrency: map[string]int{"a": 1}}},
			steps: []step{
				{do: "admit", model: "a", want: "granted"},
				{do: "admit", model: "a", want: "queued"},
				{do: "admit", model: "b", want: "granted"},
				{do: "admit", model: "b", want: "granted"},
				{do: "admit", model: "b", want: "queued"}, // connection 3/3
			},
			inFlight: []int{3},
		},
		{
			name:  "queue wait budget: RATE_LIMIT_QUEUE_TIMEOUT after 30 s",
			gates: []GateConfig{one},
			steps: []step{
				0: {do: "admit", want: "granted"},
				1: {do: "admit", want: "queued"},
				2: {do: "advance", d: 30*time.Second - time.Millisecond},
				3: {do: "poll", ref: 1, want: "queued"},
				4: {do: "advance", d: time.Millisecond},
				5: {do: "poll", ref: 1, want: "timeout"},
				6: {do: "release", ref: 0, want: "idle"}, // the expired ticket is no waiter
				7: {do: "exec", ref: 0, want: "ok"},      // 30 s is far from the 10 min execution limit
			},
			inFlight: []int{0},
		},
		{
			name:  "the wait budget stops at the grant; the execution limit starts there",
			gates: []GateConfig{one},
			steps: []step{
				0: {do: "admit", want: "granted"},
				1: {do: "admit", want: "queued"},
				2: {do: "advance", d: 29 * time.Second},
				3: {do: "release", ref: 0, want: "waiters"},
				4: {do: "poll", ref: 1, want: "granted"},
				5: {do: "advance", d: 10*time.Minute - time.Millisecond},
				6: {do: "exec", ref: 1, want: "ok"}, // 10 min after the grant, not after the enqueue
				7: {do: "advance", d: time.Millisecond},
				8: {do: "exec", ref: 1, want: "timeout"},
			},
		},
		{
			name:  "maxQueueDepth is checked before queuing",
			gates: []GateConfig{depth2},
			steps: []step{
				0: {do: "admit", want: "granted"},
				1: {do: "admit", want: "queued"},
				2: {do: "admit", want: "queued"},
				3: {do: "admit", want: "full"}, // RATE_LIMIT_QUEUE_FULL, nothing queued
				4: {do: "cancel", ref: 1, want: "waiters"},
				5: {do: "admit", want: "queued"}, // the cancelled ticket freed a place
				6: {do: "admit", want: "full"},
				7: {do: "advance", d: 30 * time.Second},
				8: {do: "admit", want: "queued"}, // expired tickets do not count
			},
			inFlight: []int{1},
		},
		{
			name:  "a request with no applicable cap needs no slot",
			gates: []GateConfig{{Provider: "p", Connection: "c", ModelConcurrency: map[string]int{"capped": 1}}},
			steps: []step{
				0: {do: "admit", model: "free", want: "granted"},
				1: {do: "admit", model: "free", want: "granted"},
				2: {do: "admit", model: "capped", want: "granted"},
				3: {do: "admit", model: "capped", want: "queued"},
				4: {do: "release", ref: 0, want: "idle"}, // holds nothing
			},
			inFlight: []int{1},
		},
		{
			name: "provider cap across connections",
			gates: []GateConfig{
				{Provider: "minimax", Connection: "a", ProviderMaxConcurrent: 1},
				{Provider: "minimax", Connection: "b", ProviderMaxConcurrent: 1},
			},
			workers: 2,
			steps: []step{
				0: {do: "admit", gate: 0, worker: 0, want: "granted"},
				1: {do: "admit", gate: 1, worker: 1, want: "queued"},
				2: {do: "release", ref: 0, worker: 0, want: "waiters"}, // b waits on the provider
				3: {do: "poll", ref: 1, worker: 1, want: "granted"},
				// The provider record only knows someone waited until b's wait deadline, so
				// it may over-report (a spare wake-up), never under-report.
				4: {do: "release", ref: 1, worker: 1, want: "waiters"},
				5: {do: "advance", d: 30 * time.Second},
				6: {do: "admit", gate: 0, worker: 0, want: "granted"},
				7: {do: "release", ref: 6, worker: 0, want: "idle"}, // b's deadline has passed
			},
			inFlight: []int{0, 0},
		},
		{
			name: "global cap across providers",
			gates: []GateConfig{
				{Provider: "p1", Connection: "a", GlobalMaxConcurrent: 2},
				{Provider: "p2", Connection: "b", GlobalMaxConcurrent: 2},
			},
			steps: []step{
				0: {do: "admit", gate: 0, want: "granted"},
				1: {do: "admit", gate: 1, want: "granted"},
				2: {do: "admit", gate: 1, want: "queued"},
				3: {do: "release", ref: 0, want: "waiters"},
				4: {do: "poll", ref: 2, want: "granted"},
			},
			inFlight: []int{0, 2},
		},
	} {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}

func TestAllOrNothingAcrossGates(t *testing.T) {
	w := newWorld(1)
	a := w.workers[0]
	// Global cap 2; provider p1 cap 1 over two connections; provider p2 uncapped.
	x := mustGate(t, GateConfig{Provider: "p1", Connection: "x", GlobalMaxConcurrent: 2, ProviderMaxConcurrent: 1})
	y := mustGate(t, GateConfig{Provider: "p1", Connection: "y", GlobalMaxConcurrent: 2, ProviderMaxConcurrent: 1})
	z := mustGate(t, GateConfig{Provider: "p2", Connection: "z", GlobalMaxConcurrent: 2, MaxConcurrent: 1})

	if r, err := a.Admit(x, "m"); err != nil || !r.Granted {
		t.Fatalf("x: %+v %v", r, err)
	}
	// y gets the global slot, then the provider refuses: the global slot goes back.
	ry, err := a.Admit(y, "m")
	if err != nil || ry.Granted {
		t.Fatalf("y: %+v %v", ry, err)
	}
	if n := poolLeases(t, w, x.globalKey); n != 1 {
		t.Fatalf("global leases after y's refusal = %d, want 1 (rolled back)", n)
	}
	// So z still finds a global slot.
	rz, err := a.Admit(z, "m")
	if err != nil || !rz.Granted {
		t.Fatalf("z: %+v %v", rz, err)
	}
	// A second z request: its connection is full, so it takes no upper slot at all.
	if r, err := a.Admit(z, "m"); err != nil || r.Granted {
		t.Fatalf("z2: %+v %v", r, err)
	}
	if g, p := poolLeases(t, w, x.globalKey), poolLeases(t, w, z.providerKey); g != 2 || p != 0 {
		t.Fatalf("global %d provider p2 %d, want 2 and 0", g, p)
	}
	// Releasing z frees its connection and global slots and reports the waiting z2 ticket.
	if waiters, err := a.Release(rz.Lease); err != nil || !waiters.Any() {
		t.Fatalf("release z: waiters=%v %v", waiters, err)
	}
	if n := poolLeases(t, w, x.globalKey); n != 1 {
		t.Fatalf("global leases after release = %d, want 1", n)
	}
}

func TestNoCapTouchesNoSharedData(t *testing.T) {
	w := newWorld(1)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", ModelConcurrency: map[string]int{"other": 1}})
	before := w.store.Keys()
	r, err := w.workers[0].Admit(g, "free")
	if err != nil || !r.Granted || r.Lease.Held() {
		t.Fatalf("Admit = %+v %v, want an empty granted lease", r, err)
	}
	if waiters, err := w.workers[0].Release(r.Lease); waiters.Any() || err != nil {
		t.Fatalf("Release = %v %v", waiters, err)
	}
	if w.workers[0].CheckExecution(r.Lease) != nil {
		t.Fatal("an empty lease timed out")
	}
	if after := w.store.Keys(); after != before {
		t.Fatalf("keys %d -> %d", before, after)
	}
}

func TestCorruptRecordIsTreatedAsAbsent(t *testing.T) {
	w := newWorld(1)
	a := w.workers[0]
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1})
	if err := w.store.Set(g.leaseKey, []byte("garbage"), 0); err != nil {
		t.Fatal(err)
	}
	if u, err := a.Inspect(g, ""); err != nil || u != (Usage{}) {
		t.Fatalf("Inspect over a corrupt record = %+v %v", u, err)
	}
	r, err := a.Admit(g, "m")
	if err != nil || !r.Granted {
		t.Fatalf("Admit over a corrupt record = %+v %v", r, err)
	}
	if a.CorruptRecords() == 0 {
		t.Fatal("corrupt record not counted")
	}
	v, _, _, _ := w.store.Get(g.leaseKey)
	var rec leaseRecord
	if err := rec.decode(v); err != nil || len(rec.leases) != 1 {
		t.Fatalf("record not rewritten cleanly: %+v %v", rec, err)
	}
}

// An operator reset wipes the lease record (a tombstone): its leases and waiting counts are
// gone, but a waiting request lives in its VM's line, so its next poll puts its count back
// and it keeps its place ahead of anyone later.
func TestLostRecordKeepsTicketsInPlace(t *testing.T) {
	w := newWorld(2)
	a, b := w.workers[0], w.workers[1]
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1})
	first, _ := a.Admit(g, "m")
	w.clock.Advance(time.Second)
	waiting, _ := a.Admit(g, "m")
	if !first.Granted || waiting.Granted {
		t.Fatal("setup")
	}
	if err := w.store.Set(g.leaseKey, nil, 0); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Second)
	// Another worker finds the record empty: no lease, nobody waiting.
	newcomer, err := b.Admit(g, "m")
	if err != nil || !newcomer.Granted {
		t.Fatalf("newcomer after reset: %+v %v", newcomer, err)
	}
	// The old ticket polls: the connection is full, and its waiting count is back.
	if r, err := a.TryAdmit(waiting.Ticket); err != nil || r.Granted {
		t.Fatalf("old ticket: %+v %v", r, err)
	}
	if u, _ := b.Inspect(g, "m"); u.Queued != 1 {
		t.Fatalf("queued after the poll = %d, want the old ticket counted again", u.Queued)
	}
	later, _ := b.Admit(g, "m")
	if later.Granted {
		t.Fatal("a later newcomer was granted")
	}
	if _, err := b.Release(newcomer.Lease); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.TryAdmit(later.Ticket); r.Granted {
		t.Fatal("the later ticket overtook the restored one")
	}
	if r, _ := a.TryAdmit(waiting.Ticket); !r.Granted {
		t.Fatal("the restored ticket was not granted")
	}
}

func TestZeroHandles(t *testing.T) {
	a := New(state.NewMemStore(), manualclock.New(t0))
	if _, err := a.TryAdmit(Ticket{}); err == nil {
		t.Error("TryAdmit on a zero ticket succeeded")
	}
	if waiters, err := a.Cancel(Ticket{}); waiters.Any() || err != nil {
		t.Errorf("Cancel(zero) = %v %v", waiters, err)
	}
	if waiters, err := a.Release(Lease{}); waiters.Any() || err != nil {
		t.Errorf("Release(zero) = %v %v", waiters, err)
	}
}

func TestUnboundedQueueByDefault(t *testing.T) {
	w := newWorld(1)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1}) // maxQueueDepth 0
	if r, err := w.workers[0].Admit(g, "m"); err != nil || !r.Granted {
		t.Fatal(r, err)
	}
	const n = 1000
	for i := range n {
		r, err := w.workers[0].Admit(g, "m")
		if err != nil || r.Granted {
			t.Fatalf("request %d: %+v %v", i, r, err)
		}
	}
	if u, _ := w.workers[0].Inspect(g, "m"); u.Queued != n || u.InFlight != 1 || u.ModelInFlight != 1 {
		t.Fatalf("usage %+v", u)
	}
}

func TestTicketRemaining(t *testing.T) {
	w := newWorld(1)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1})
	w.workers[0].Admit(g, "m")
	r, _ := w.workers[0].Admit(g, "m")
	if got := r.Ticket.Remaining(t0.Add(10 * time.Second)); got != 20*time.Second {
		t.Errorf("Remaining after 10 s = %v, want 20s", got)
	}
	if got := r.Ticket.Remaining(t0.Add(time.Minute)); got != 0 {
		t.Errorf("Remaining after 1 min = %v, want 0", got)
	}
}

func TestStoreErrorsAreWrapped(t *testing.T) {
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1})
	a := New(failingStore{}, manualclock.New(t0))
	_, err := a.Admit(g, "m")
	if err == nil || !errors.Is(err, errStoreDown) || err.Error()[:len("admission: ")] != "admission: " {
		t.Fatalf("err = %v", err)
	}
	if _, ok := g.Reply(err); ok {
		t.Fatal("a store error became a client reply")
	}
}

var errStoreDown = errors.New("store down")

type failingStore struct{}

func (failingStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errStoreDown }
func (failingStore) Set(string, []byte, uint32) error         { return errStoreDown }
func (failingStore) CreateCAS() (uint32, error)               { return 1, nil }

func ExampleAdmitter() {
	store, clock := state.NewMemStore(), manualclock.New(t0)
	gate, _ := NewGate(GateConfig{Provider: "zai", Connection: "glm-a", MaxConcurrent: 1, Queue: DefaultQueueConfig()})
	worker1, worker2 := New(store, clock), New(store, clock)

	first, _ := worker1.Admit(gate, "glm-5")
	second, _ := worker2.Admit(gate, "glm-5") // paused by the glue
	waiters, _ := worker1.Release(first.Lease)
	again, _ := worker2.TryAdmit(second.Ticket) // woken through a shared queue
	fmt.Println(first.Granted, second.Granted, waiters.Any(), again.Granted)
	// Output: true false true true
}

// TestRenewKeepsALongStreamsSlot: a lease expires executionMaxWait after it was granted so a
// dead worker's slots come back; a stream that is still running renews it, so the cap holds
// for as long as the stream lives (routing issue: "a stream longer than the lease never
// silently gives up its slot").
func TestRenewKeepsALongStreamsSlot(t *testing.T) {
	for _, renew := range []bool{false, true} {
		w := newWorld(2)
		g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1,
			ModelConcurrency: map[string]int{"m": 1},
			Queue:            QueueConfig{MaxWait: time.Minute, ExecutionMaxWait: 10 * time.Second}})
		first, err := w.workers[0].Admit(g, "m")
		if err != nil || !first.Granted {
			t.Fatalf("first admit: %+v, %v", first, err)
		}
		lease := first.Lease
		for i := 0; i < 5; i++ { // the stream runs 25 s, renewing every 5 s
			w.clock.Advance(5 * time.Second)
			if renew {
				if lease, err = w.workers[0].Renew(lease); err != nil {
					t.Fatal(err)
				}
				if want := w.clock.Now().Add(10 * time.Second); !lease.Deadline.Equal(want) {
					t.Fatalf("renewed deadline %v, want %v", lease.Deadline, want)
				}
			}
		}
		second, err := w.workers[1].Admit(g, "m")
		if err != nil {
			t.Fatal(err)
		}
		if second.Granted == renew {
			t.Fatalf("renew=%v: a second request was granted=%v after 25 s; the running stream's slot must hold only when renewed",
				renew, second.Granted)
		}
	}
}

// TestRenewPutsBackAPrunedLease: a renewal that comes after its lease was pruned (a long
// pause of the worker) puts it back, so the running stream counts against the cap again.
func TestRenewPutsBackAPrunedLease(t *testing.T) {
	w := newWorld(2)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1,
		Queue: QueueConfig{MaxWait: time.Minute, ExecutionMaxWait: 10 * time.Second}})
	first, _ := w.workers[0].Admit(g, "m")
	w.clock.Advance(11 * time.Second)
	if u, _ := w.workers[1].Inspect(g, "m"); u.InFlight != 0 {
		t.Fatalf("expired lease still counted: %+v", u)
	}
	if _, err := w.workers[0].Renew(first.Lease); err != nil {
		t.Fatal(err)
	}
	if u, _ := w.workers[1].Inspect(g, "m"); u.InFlight != 1 {
		t.Fatalf("after renewal in flight = %d, want 1", u.InFlight)
	}
	if waiters, err := w.workers[0].Release(first.Lease); err != nil || waiters.Any() {
		t.Fatalf("release: waiters %v, %v", waiters, err)
	}
	if u, _ := w.workers[1].Inspect(g, "m"); u.InFlight != 0 {
		t.Fatalf("after release in flight = %d, want 0", u.InFlight)
	}
}

// The refusal codes follow the cap that keeps a request waiting: the per-model gate
// (modelConcurrency) answers SEMAPHORE_QUEUE_FULL / SEMAPHORE_TIMEOUT (guide §4), the
// request queue (the connection's maxConcurrent) RATE_LIMIT_QUEUE_FULL /
// RATE_LIMIT_QUEUE_TIMEOUT (guide §5). With QuotaShareFailOpen the connection's cap fails
// open instead (guide §4 "Serialisatie van quota-share-requests"): the request is granted
// without a slot; the model gate still refuses.
func TestRefusalsNameTheGateThatRefused(t *testing.T) {
	cases := []struct {
		name        string // which cap is full
		connCap     int    // maxConcurrent
		modelCap    int    // modelConcurrency for "m"
		failOpen    bool   // QuotaShareFailOpen
		wantFull    error  // refusal of a newcomer once the queue is full (nil: granted without a slot)
		wantTimeout error  // refusal of a queued request past its budget (nil: granted without a slot)
	}{
		{"model cap full, connection has room", 4, 1, false, ErrSemaphoreQueueFull, ErrSemaphoreTimeout},
		{"connection cap full", 1, 0, false, ErrQueueFull, ErrQueueTimeout},
		{"both full: the connection's queue", 1, 1, false, ErrQueueFull, ErrQueueTimeout},
		{"fail-open: model cap full still refuses", 4, 1, true, ErrSemaphoreQueueFull, ErrSemaphoreTimeout},
		{"fail-open: connection cap full goes without a slot", 1, 0, true, nil, nil},
		{"fail-open: both full, the connection's queue goes without a slot", 1, 1, true, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(1)
			cfg := GateConfig{Provider: "p", Connection: "c", MaxConcurrent: c.connCap, QuotaShareFailOpen: c.failOpen,
				Queue: QueueConfig{MaxWait: time.Second, ExecutionMaxWait: time.Minute, MaxQueueDepth: 1}}
			if c.modelCap > 0 {
				cfg.ModelConcurrency = map[string]int{"m": c.modelCap}
			}
			g := mustGate(t, cfg)
			a := w.workers[0]
			if r, err := a.Admit(g, "m"); err != nil || !r.Granted || r.FailedOpen {
				t.Fatalf("first: %+v %v", r, err)
			}
			queued, err := a.Admit(g, "m")
			if err != nil || queued.Granted {
				t.Fatalf("second should queue: %+v %v", queued, err)
			}
			check := func(what string, r Result, err, want error) {
				t.Helper()
				if want != nil {
					if !errors.Is(err, want) || r.Granted {
						t.Fatalf("%s: %+v %v, want %v", what, r, err, want)
					}
					return
				}
				if err != nil || !r.Granted || !r.FailedOpen || r.Lease.Held() {
					t.Fatalf("%s: %+v %v, want granted without a slot", what, r, err)
				}
			}
			third, err := a.Admit(g, "m")
			check("third", third, err, c.wantFull)
			w.clock.Advance(2 * time.Second)
			late, err := a.TryAdmit(queued.Ticket)
			check("queued past its budget", late, err, c.wantTimeout)
			for _, err := range []error{c.wantFull, c.wantTimeout} {
				if err == nil {
					continue
				}
				r, ok := g.Reply(err)
				if !ok || r.Status != 429 || r.Code != err.(*Error).Code {
					t.Fatalf("reply for %v: %+v %v", err, r, ok)
				}
			}
			// A request that failed open holds no slot: the first request's is the only one.
			if u, err := a.Inspect(g, "m"); err != nil || u.InFlight != 1 {
				t.Fatalf("in flight %+v %v, want only the first request's slot", u, err)
			}
		})
	}
}

// A worker skips decoding a connection record that holds the very bytes it last wrote; a
// record another worker changed since, on the same connection or another, is read afresh.
func TestOwnWriteIsReusedAndOthersAreRead(t *testing.T) {
	w := newWorld(2)
	a, b := w.workers[0], w.workers[1]
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 2})
	other := mustGate(t, GateConfig{Provider: "p", Connection: "d", MaxConcurrent: 2})
	mine, err := a.Admit(g, "m")
	if err != nil || !mine.Granted {
		t.Fatal(mine, err)
	}
	// Another worker takes the second slot: the record is no longer what a wrote.
	theirs, err := b.Admit(g, "m")
	if err != nil || !theirs.Granted {
		t.Fatal(theirs, err)
	}
	// a works on another connection meanwhile, then comes back.
	if r, err := a.Admit(other, "m"); err != nil || !r.Granted {
		t.Fatal(r, err)
	}
	if r, err := a.Admit(g, "m"); err != nil || r.Granted {
		t.Fatalf("a third request took a slot of a full connection: %+v, %v", r, err)
	} else if _, err := a.Cancel(r.Ticket); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(mine.Lease); err != nil {
		t.Fatal(err)
	}
	u, err := b.Inspect(g, "m")
	if err != nil || u.InFlight != 1 {
		t.Fatalf("after a's release: %+v, %v; want b's lease alone in flight", u, err)
	}
	// Release reads back what it wrote: a's next admit takes the freed slot, and only it.
	again, err := a.Admit(g, "m")
	if err != nil || !again.Granted {
		t.Fatal(again, err)
	}
	if u, err = b.Inspect(g, "m"); err != nil || u.InFlight != 2 {
		t.Fatalf("after a's second admit: %+v, %v; want 2 in flight", u, err)
	}
}

// A release names whom it may let in: nobody when nobody waits, the connection's gate when
// its waiters may now go (the same id on every VM: the filter's wake-up carries it), and
// every gate for a provider's slot, which any of its connections' waiters may want. Heads
// visits the lines of the gate named only.
func TestReleaseWakesTheGateItFreed(t *testing.T) {
	w := newWorld(2)
	a, b := w.workers[0], w.workers[1]
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c1", MaxConcurrent: 1})
	same := mustGate(t, GateConfig{Provider: "p", Connection: "c1", MaxConcurrent: 1})
	other := mustGate(t, GateConfig{Provider: "p", Connection: "c2", MaxConcurrent: 1})
	if g.ID() != same.ID() || g.ID() == other.ID() || g.ID() == 0 {
		t.Fatalf("gate ids %d %d %d: one per connection, the same for every gate of it", g.ID(), same.ID(), other.ID())
	}
	first, _ := a.Admit(g, "m")
	if wake, _ := a.Release(first.Lease); wake.Any() {
		t.Fatalf("a release with nobody waiting wakes %+v", wake)
	}
	first, _ = a.Admit(g, "m")
	queued, _ := b.Admit(g, "m")
	visits := func(gate uint64) (n int) {
		b.Heads(gate, func(Ticket, any) { n++ })
		return n
	}
	if n := visits(other.ID()); n != 0 {
		t.Fatalf("Heads for another gate visited %d heads", n)
	}
	if n := visits(0); n != 1 {
		t.Fatalf("Heads for every gate visited %d heads, want the one", n)
	}
	wake, _ := a.Release(first.Lease)
	if !wake.Any() || wake.Gate() != g.ID() {
		t.Fatalf("release with a waiter wakes %+v, want gate %d", wake, g.ID())
	}
	var granted bool
	b.Heads(wake.Gate(), func(t Ticket, _ any) { r, _ := b.TryAdmit(t); granted = r.Granted })
	if !granted || queued.Granted {
		t.Fatal("the woken head was not granted the freed slot")
	}
	pg := mustGate(t, GateConfig{Provider: "q", Connection: "c", ProviderMaxConcurrent: 1})
	held, _ := a.Admit(pg, "m")
	if r, _ := b.Admit(pg, "m"); r.Granted {
		t.Fatal("the provider cap let a second request in")
	}
	if wake, _ := a.Release(held.Lease); !wake.Any() || wake.Gate() != 0 {
		t.Fatalf("a provider slot's release wakes %+v, want every gate (0)", wake)
	}
}
