package admission

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

// Two workers race for the last slot: the second completes its whole admit between the
// first one's read and its write. Exactly one is granted; the other retries its CAS, sees
// the connection full and queues.
func TestInterleavedRaceForLastSlot(t *testing.T) {
	w := newWorld(2)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1})
	var second Result
	var secondErr error
	in := testfixture.Interleave(w.store, 1, func() { second, secondErr = w.workers[1].Admit(g, "m") })
	first, err := w.workers[0].Admit(g, "m")
	w.store.BeforeSet = nil
	if err != nil || secondErr != nil {
		t.Fatal(err, secondErr)
	}
	if in.Ran != 1 || !second.Granted || first.Granted {
		t.Fatalf("first granted=%v, second granted=%v (interleaved %d times)", first.Granted, second.Granted, in.Ran)
	}
	if u, _ := w.workers[0].Inspect(g, "m"); u.InFlight != 1 || u.Queued != 1 {
		t.Fatalf("usage %+v, want 1 in flight and 1 queued", u)
	}
}

// A release interleaved with a newcomer's admit: the newcomer, arriving while a ticket
// waits, queues behind it even though the slot is being freed; nothing is lost.
func TestInterleavedReleaseAndAdmit(t *testing.T) {
	w := newWorld(3)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1, ModelConcurrency: map[string]int{"m": 1}})
	held, _ := w.workers[0].Admit(g, "m")
	waiting, _ := w.workers[1].Admit(g, "m")
	var newcomer Result
	in := testfixture.Interleave(w.store, 1, func() { newcomer, _ = w.workers[2].Admit(g, "m") })
	waiters, err := w.workers[0].Release(held.Lease)
	w.store.BeforeSet = nil
	if err != nil || !waiters.Any() || newcomer.Granted || in.Ran != 1 {
		t.Fatalf("release waiters=%v err=%v, newcomer granted=%v (interleaved %d times)", waiters, err, newcomer.Granted, in.Ran)
	}
	if r, _ := w.workers[2].TryAdmit(newcomer.Ticket); r.Granted {
		t.Fatal("the newcomer overtook the older ticket")
	}
	r, _ := w.workers[1].TryAdmit(waiting.Ticket)
	if !r.Granted {
		t.Fatal("the older ticket was not granted the freed slot")
	}
	if u, _ := w.workers[0].Inspect(g, "m"); u.InFlight != 1 || u.ModelInFlight != 1 || u.Queued != 1 {
		t.Fatalf("usage %+v", u)
	}
}

// Random operations from four workers, with another worker's operation slipped in before
// many of the writes. After every operation the caps hold, and at the end the records hold
// exactly what the workers think they hold: every lease, each worker's waiting count, and
// each worker's first Window tickets per line in the ticket record — none lost, none
// doubled. A worker polls and cancels only its own tickets (a ticket lives in the memory of
// the VM whose request waits); any worker releases any lease.
func TestRandomInterleavingKeepsBooks(t *testing.T) {
	const workers, ops, connCap = 4, 3000, 3
	caps := map[string]int{"a": 1, "b": 2}
	models := []string{"a", "b", "c"}
	w := newWorld(workers)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: connCap, ModelConcurrency: caps})
	rng := rand.New(rand.NewPCG(1, 2))

	type held struct {
		lease Lease
		model string
	}
	type queued struct {
		ticket Ticket
		model  string
	}
	var leases []held
	tickets := make([][]queued, workers) // per worker, in enqueue order
	busy := make([]bool, workers)
	nesting, interleavings := 0, 0

	check := func(where string) {
		v, _, found, err := w.store.Get(g.leaseKey)
		if err != nil || !found {
			return
		}
		var r leaseRecord
		if err := r.decode(v); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		perModel := map[uint64]int{}
		for _, l := range r.leases {
			perModel[l.model]++
		}
		if len(r.leases) > connCap {
			t.Fatalf("%s: %d leases over the connection cap of %d", where, len(r.leases), connCap)
		}
		for m, c := range caps {
			if perModel[hashModel(m)] > c {
				t.Fatalf("%s: %d leases for %s over its cap of %d", where, perModel[hashModel(m)], m, c)
			}
		}
	}

	op := func(worker int) {
		busy[worker] = true
		defer func() { busy[worker] = false }()
		a := w.workers[worker]
		mine := tickets[worker]
		switch k := rng.IntN(10); {
		case k < 4:
			m := models[rng.IntN(len(models))]
			r, err := a.Admit(g, m)
			if err != nil {
				t.Fatal(err)
			}
			if r.Granted {
				leases = append(leases, held{r.Lease, m})
			} else {
				tickets[worker] = append(tickets[worker], queued{r.Ticket, m})
			}
		case k < 7 && len(mine) > 0:
			i := rng.IntN(len(mine))
			q := mine[i]
			r, err := a.TryAdmit(q.ticket)
			if err != nil {
				t.Fatal(err)
			}
			if r.Granted {
				tickets[worker] = slices.DeleteFunc(tickets[worker], func(o queued) bool { return o.ticket.seq == q.ticket.seq })
				leases = append(leases, held{r.Lease, q.model})
			}
		case k < 9 && len(leases) > 0:
			i := rng.IntN(len(leases))
			l := leases[i]
			leases = append(leases[:i], leases[i+1:]...) // taken out while in use
			if _, err := a.Release(l.lease); err != nil {
				t.Fatal(err)
			}
		case len(mine) > 0:
			q := mine[rng.IntN(len(mine))]
			tickets[worker] = slices.DeleteFunc(tickets[worker], func(o queued) bool { return o.ticket.seq == q.ticket.seq })
			if _, err := a.Cancel(q.ticket); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.store.BeforeSet = func(string) {
		if nesting > 0 || rng.IntN(2) == 0 {
			return
		}
		other := rng.IntN(workers)
		if busy[other] {
			return
		}
		nesting++
		interleavings++
		op(other)
		nesting--
	}
	for i := range ops {
		op(rng.IntN(workers))
		check(fmt.Sprint("after op ", i))
	}
	w.store.BeforeSet = nil
	if interleavings < ops/10 {
		t.Fatalf("only %d interleaved operations", interleavings)
	}

	v, _, _, _ := w.store.Get(g.leaseKey)
	var r leaseRecord
	if err := r.decode(v); err != nil {
		t.Fatal(err)
	}
	var gotLeases, wantLeases []uint64
	for _, l := range r.leases {
		gotLeases = append(gotLeases, l.id)
	}
	for _, h := range leases {
		wantLeases = append(wantLeases, h.lease.id)
	}
	slices.Sort(gotLeases)
	slices.Sort(wantLeases)
	if !equalIDs(gotLeases, wantLeases) {
		t.Fatalf("leases in the record %v, held by workers %v", gotLeases, wantLeases)
	}
	v, _, _, _ = w.store.Get(g.ticketKey)
	var tr ticketRecord
	if err := tr.decode(v); err != nil {
		t.Fatal(err)
	}
	for wi, a := range w.workers {
		own, _ := r.waitingOf(a.lane, g.ns)
		if own != len(tickets[wi]) {
			t.Fatalf("worker %d: waiting count %d in the record, %d tickets held", wi, own, len(tickets[wi]))
		}
		// Its published tickets per model: the first Window (the model's cap, at most the
		// connection's) of the tickets it holds for that model, in order. (A lane without
		// waiters may have left lines behind: readers skip them: Admitter.others.)
		if own == 0 {
			continue
		}
		for _, m := range models {
			var want []uint64
			for _, q := range tickets[wi] {
				if q.model == m && len(want) < g.window(caps[m]) {
					want = append(want, q.ticket.line.q[q.ticket.line.find(q.ticket.seq)].order)
				}
			}
			var got []uint64
			for _, l := range tr.lines {
				if l.lane == a.lane && l.model == hashModel(m) {
					for _, pt := range tr.tickets[l.start : l.start+l.n] {
						got = append(got, pt.order)
					}
				}
			}
			if !equalIDs(got, want) {
				t.Fatalf("worker %d model %s: published %v, want %v", wi, m, got, want)
			}
		}
	}
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Real goroutines, one Admitter each, on one MemStore: every request is eventually served,
// the connection, model and provider caps are never exceeded, and at the end no slot and no
// ticket is left behind.
func TestGoroutinesNeverExceedCaps(t *testing.T) {
	const workers, perWorker = 8, 150
	w := newWorld(workers)
	// Two connections of one provider: connection caps 3, model a cap 1, provider cap 4.
	gates := []*Gate{
		mustGate(t, GateConfig{Provider: "p", Connection: "c1", MaxConcurrent: 3, ProviderMaxConcurrent: 4, ModelConcurrency: map[string]int{"a": 1}}),
		mustGate(t, GateConfig{Provider: "p", Connection: "c2", MaxConcurrent: 3, ProviderMaxConcurrent: 4, ModelConcurrency: map[string]int{"a": 1}}),
	}
	var provider, granted atomic.Int64
	var conn, modelA [2]atomic.Int64
	var maxProvider, maxConn atomic.Int64
	var failures atomic.Int64
	fail := func(format string, args ...any) {
		failures.Add(1)
		t.Errorf(format, args...)
	}
	raise := func(m *atomic.Int64, v int64) {
		for {
			cur := m.Load()
			if v <= cur || m.CompareAndSwap(cur, v) {
				return
			}
		}
	}
	// retry repeats an operation that lost too many CAS races in a row: the glue would fail
	// open there, the test wants every request served under the caps.
	retry := func(f func() error) {
		for {
			if err := f(); !errors.Is(err, state.ErrContention) {
				if err != nil && !errors.Is(err, ErrQueueTimeout) {
					fail("unexpected error: %v", err)
				}
				return
			}
		}
	}

	var wg sync.WaitGroup
	for wi := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := w.workers[wi]
			rng := rand.New(rand.NewPCG(uint64(wi), 7))
			for range perWorker {
				if failures.Load() > 0 {
					return
				}
				gi := rng.IntN(2)
				g := gates[gi]
				model := "b"
				if rng.IntN(3) == 0 {
					model = "a"
				}
				var r Result
				retry(func() (err error) { r, err = a.Admit(g, model); return err })
				for polls := 0; !r.Granted; polls++ {
					if polls == 1_000_000 {
						fail("worker %d starved: a slot leaked", wi)
						return
					}
					runtime.Gosched()
					tk := r.Ticket
					retry(func() (err error) { r, err = a.TryAdmit(tk); return err })
					if !r.Granted {
						r.Ticket = tk
					}
				}
				granted.Add(1)
				p := provider.Add(1)
				c := conn[gi].Add(1)
				raise(&maxProvider, p)
				raise(&maxConn, c)
				if p > 4 {
					fail("provider in flight %d > 4", p)
				}
				if c > 3 {
					fail("connection %d in flight %d > 3", gi, c)
				}
				if model == "a" {
					if n := modelA[gi].Add(1); n > 1 {
						fail("model a on connection %d in flight %d > 1", gi, n)
					}
				}
				runtime.Gosched()
				if model == "a" {
					modelA[gi].Add(-1)
				}
				conn[gi].Add(-1)
				provider.Add(-1)
				retry(func() error { _, err := a.Release(r.Lease); return err })
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := granted.Load(); n != workers*perWorker {
		t.Fatalf("served %d requests, want %d", n, workers*perWorker)
	}
	for _, g := range gates {
		if u, err := w.workers[0].Inspect(g, "a"); err != nil || u != (Usage{}) {
			t.Fatalf("%s left %+v (%v)", g, u, err)
		}
	}
	if n := poolLeases(t, w, gates[0].providerKey); n != 0 {
		t.Fatalf("provider record left %d leases", n)
	}
	t.Logf("peak in flight: provider %d, connection %d", maxProvider.Load(), maxConn.Load())
}

// phantomStore is one worker's view of a shared MemStore that can make a CAS race it
// cannot win: while armed, each Set on an admission key is preceded by another writer's
// Set of the same value (a phantom worker), so the caller's CAS fails. It also counts the
// updates that ran out of attempts, injected or not: the oracle for the errors admission
// must report.
type phantomStore struct {
	*state.MemStore
	armed     int  // Sets still to lose
	injected  int  // updates made to fail by arming (MaxCASAttempts losses each)
	lossRun   int  // consecutive lost Sets of the caller's update
	lastGet   bool // the caller's last operation was a Get (a Get after a Get starts a new update)
	exhausted int  // updates that lost MaxCASAttempts Sets in a row
}

func (p *phantomStore) Get(key string) ([]byte, uint32, bool, error) {
	if p.lastGet {
		p.lossRun = 0 // the update before ended without a write
	}
	p.lastGet = true
	return p.MemStore.Get(key)
}

func (p *phantomStore) Set(key string, v []byte, cas uint32) error {
	p.lastGet = false
	if p.armed > 0 {
		if cur, cas, found, _ := p.MemStore.Get(key); found {
			_ = p.MemStore.Set(key, cur, cas) // a CAS writer too: it never loses another's write
			if p.armed--; p.armed == 0 {
				p.injected++
			}
		}
	}
	err := p.MemStore.Set(key, v, cas)
	switch {
	case errors.Is(err, state.ErrCasMismatch):
		if p.lossRun++; p.lossRun == state.MaxCASAttempts {
			p.exhausted++
			p.lossRun = 0
		}
	case err == nil:
		p.lossRun = 0
	}
	return err
}

// 64 concurrent writers, each its own VM (node and Admitter) over one MemStore, hammer one
// connection with admissions, polls and releases, and every tenth admission of each loses
// its CAS race state.MaxCASAttempts times in a row. Every store error is retried on a later
// "tick", as the filter does (StoreRetry), and none persists: no request fails open, none is
// abandoned; the caps are never exceeded; no slot, count or ticket is left at the end; and
// the errors admission reported (returned, or retried on its own) are exactly the updates
// that ran out of attempts.
func TestSixtyFourWritersResolveContentionByRetry(t *testing.T) {
	const workers, perWorker, connCap, capA = 64, 40, 8, 2
	mem := state.NewMemStore()
	clock := manualclock.New(t0)
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: connCap, ModelConcurrency: map[string]int{"a": capA},
		Queue: QueueConfig{MaxWait: time.Hour, ExecutionMaxWait: time.Hour}})
	var inFlight, inFlightA, maxInFlight atomic.Int64
	var returned, failedOpen, served atomic.Int64
	stores := make([]*phantomStore, workers)
	admitters := make([]*Admitter, workers)
	for i := range workers {
		stores[i] = &phantomStore{MemStore: mem}
		n := NewNode(stores[i], uint64(i+1))
		if err := n.Heartbeat(t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		admitters[i] = NewOn(n, stores[i], clock)
	}
	var wg sync.WaitGroup
	for wi := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, st := admitters[wi], stores[wi]
			rng := rand.New(rand.NewPCG(uint64(wi), 64))
			// do runs one step until it succeeds, a "tick" (a yield) after each store error.
			do := func(step func() error) bool {
				var retry StoreRetry
				for {
					err := step()
					if err == nil {
						return true
					}
					var refusal *Error
					if errors.As(err, &refusal) {
						t.Errorf("worker %d: refused %v", wi, err)
						return false
					}
					returned.Add(1)
					if _, open := retry.Failed(t0, time.Millisecond, a.node.Jitter()); open {
						failedOpen.Add(1)
						return false
					}
					runtime.Gosched()
				}
			}
			for i := range perWorker {
				model := "b"
				if rng.IntN(3) == 0 {
					model = "a"
				}
				if i%10 == 0 {
					st.armed = state.MaxCASAttempts
				}
				var r Result
				if !do(func() (err error) { r, err = a.Admit(g, model); return err }) {
					return
				}
				for polls := 0; !r.Granted; polls++ {
					if polls == 1_000_000 {
						t.Errorf("worker %d starved: a slot leaked", wi)
						return
					}
					runtime.Gosched()
					tk := r.Ticket
					if !do(func() (err error) { r, err = a.TryAdmit(tk); return err }) {
						return
					}
					if !r.Granted {
						r.Ticket = tk
					}
				}
				n := inFlight.Add(1)
				for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
				}
				if n > connCap {
					t.Errorf("%d in flight over the cap of %d", n, connCap)
				}
				if model == "a" {
					if n := inFlightA.Add(1); n > capA {
						t.Errorf("%d of model a in flight over its cap of %d", n, capA)
					}
				}
				runtime.Gosched()
				if model == "a" {
					inFlightA.Add(-1)
				}
				inFlight.Add(-1)
				a.Release(r.Lease) // a failure is retried by Retry
				a.Retry(0)
				served.Add(1)
			}
			for range 1000 {
				if len(a.pending) == 0 {
					break
				}
				runtime.Gosched()
				a.Retry(0)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := served.Load(); n != workers*perWorker || failedOpen.Load() != 0 {
		t.Fatalf("served %d of %d requests, %d failed open", n, workers*perWorker, failedOpen.Load())
	}
	var injected, exhausted int
	var retried, abandoned uint64
	for i := range workers {
		injected += stores[i].injected
		exhausted += stores[i].exhausted
		s := admitters[i].StoreStats()
		retried, abandoned = retried+s.Retried, abandoned+s.Abandoned
		if len(admitters[i].pending) != 0 {
			t.Fatalf("worker %d still has %d operations to retry", i, len(admitters[i].pending))
		}
	}
	if injected != workers*perWorker/10 || abandoned != 0 {
		t.Fatalf("injected %d contention runs (want %d), %d abandoned", injected, workers*perWorker/10, abandoned)
	}
	if got := returned.Load() + int64(retried); got != int64(exhausted) {
		t.Fatalf("admission reported %d store errors (%d returned, %d retried on its own); the store saw %d updates run out of attempts",
			got, returned.Load(), retried, exhausted)
	}
	if u, err := admitters[0].Inspect(g, "a"); err != nil || u != (Usage{}) {
		t.Fatalf("left behind %+v (%v)", u, err)
	}
	// Lines a lane left in the ticket record when its last waiter went count for nothing:
	// the lease record no longer has a waiting count for the lane.
	v, _, _, _ := mem.Get(g.leaseKey)
	var lr leaseRecord
	if err := lr.decode(v); err != nil {
		t.Fatal(err)
	}
	v, _, found, _ := mem.Get(g.ticketKey)
	var tr ticketRecord
	if found {
		if err := tr.decode(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range tr.lines {
		if lr.laneWaits(l.lane) {
			t.Fatalf("lane %d still counts as waiting, with its line %+v", l.lane, l)
		}
	}
	t.Logf("%d contention runs injected, %d updates ran out of attempts, peak in flight %d", injected, exhausted, maxInFlight.Load())
}
