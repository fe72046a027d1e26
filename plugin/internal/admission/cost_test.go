package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// countingStore counts the shared-data operations that pass through it, and the bytes
// they move (what a proxy-wasm host copies in and out of the guest).
type countingStore struct {
	state.Store
	gets, sets, bytes int
}

func (c *countingStore) Get(k string) ([]byte, uint32, bool, error) {
	c.gets++
	v, cas, found, err := c.Store.Get(k)
	c.bytes += len(v)
	return v, cas, found, err
}

func (c *countingStore) Set(k string, v []byte, cas uint32) error {
	c.sets++
	c.bytes += len(v)
	return c.Store.Set(k, v, cas)
}

func (c *countingStore) reset() { c.gets, c.sets, c.bytes = 0, 0, 0 }

// The success path — a request admitted with a slot free and nobody waiting, then
// released — costs what it cost when the tickets lived in the lease record (measured on
// that code with this very store): one Get and one Set to admit, one Get and one Set to
// release; through the compound gate (global and provider caps too) four Gets and three
// Sets to admit, three and three to release. Moving the tickets out made no request pay for
// them.
func TestSuccessPathSharedDataOperations(t *testing.T) {
	compound := glmGate
	compound.GlobalMaxConcurrent, compound.ProviderMaxConcurrent = 64, 16
	for _, tc := range []struct {
		name                     string
		cfg                      GateConfig
		admitGets, admitSets     int // measured before the change
		releaseGets, releaseSets int
	}{
		{"connection and model caps", glmGate, 1, 1, 1, 1},
		{"compound gate", compound, 4, 3, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := &countingStore{Store: state.NewMemStore()}
			g := mustGate(t, tc.cfg)
			a := New(cs, manualclock.New(t0))
			for i := range 3 { // the first round creates the records; the others are the steady state
				cs.reset()
				r, err := a.Admit(g, "glm-5")
				if err != nil || !r.Granted {
					t.Fatal(r, err)
				}
				ag, as := cs.gets, cs.sets
				if _, err := a.Release(r.Lease); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					continue
				}
				if ag != tc.admitGets || as != tc.admitSets || cs.gets-ag != tc.releaseGets || cs.sets-as != tc.releaseSets {
					t.Fatalf("admit %d gets %d sets, release %d gets %d sets; want %d/%d and %d/%d",
						ag, as, cs.gets-ag, cs.sets-as, tc.admitGets, tc.admitSets, tc.releaseGets, tc.releaseSets)
				}
			}
		})
	}
}

// queueWorld is one process with vms worker VMs (each a heartbeating node with its
// Admitter) over one store, a connection with cap 4 held full, and waiters requests queued
// round-robin across the VMs.
type queueWorld struct {
	store *countingStore
	clock *manualclock.Clock
	gate  *Gate
	vms   []*Admitter
	polls int
}

func newQueueWorld(tb testing.TB, vms, waiters int) *queueWorld {
	tb.Helper()
	q := &queueWorld{store: &countingStore{Store: state.NewMemStore()}, clock: manualclock.New(t0)}
	q.gate = mustGate(tb, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 4,
		Queue: QueueConfig{MaxWait: time.Hour, ExecutionMaxWait: time.Hour}})
	for i := range vms {
		n := NewNode(q.store, uint64(i+1))
		if err := n.Heartbeat(q.clock.Now().UnixMilli()); err != nil {
			tb.Fatal(err)
		}
		q.vms = append(q.vms, NewOn(n, q.store, q.clock))
	}
	for range 4 {
		if r, err := q.vms[0].Admit(q.gate, "m"); err != nil || !r.Granted {
			tb.Fatal(r, err)
		}
	}
	for i := range waiters {
		if r, err := q.vms[i%vms].Admit(q.gate, "m"); err != nil || r.Granted {
			tb.Fatalf("waiter %d: %+v %v", i, r, err)
		}
	}
	return q
}

// round is one tick of every VM: each polls the heads of its lines (none is granted: the
// cap stays full).
func (q *queueWorld) round(tb testing.TB) {
	for _, a := range q.vms {
		a.Heads(0, func(t Ticket, _ any) {
			q.polls++
			if r, err := a.TryAdmit(t); err != nil || r.Granted {
				tb.Fatalf("poll: %+v %v", r, err)
			}
		})
	}
}

// A tick round costs the same shared-data operations with 10 waiters as with 10,000 across
// four VMs, and moves at most twice the bytes: only each VM's head of line polls, and the
// ticket record holds each lane's first cap-many tickets, whatever the depth. (Before, every
// waiter polled a record holding every ticket: 10,000 waiters made 10,000 reads of a
// 10,000-ticket record per round.)
func TestPollCostDoesNotGrowWithTheQueue(t *testing.T) {
	cost := func(waiters int) (ops, bytes, polls int) {
		q := newQueueWorld(t, 4, waiters)
		q.round(t) // the first round reads what the enqueues wrote
		q.store.reset()
		q.polls = 0
		q.round(t)
		return q.store.gets + q.store.sets, q.store.bytes, q.polls
	}
	ops10, bytes10, polls10 := cost(10)
	ops10k, bytes10k, polls10k := cost(10000)
	t.Logf("per round: 10 waiters %d ops %d B %d polls; 10,000 waiters %d ops %d B %d polls", ops10, bytes10, polls10, ops10k, bytes10k, polls10k)
	if polls10 != 4 || polls10k != 4 {
		t.Fatalf("polls per round %d and %d, want one per VM (4)", polls10, polls10k)
	}
	if ops10k != ops10 || bytes10k > 2*bytes10 {
		t.Fatalf("10,000 waiters cost %d ops and %d bytes per round, 10 cost %d and %d", ops10k, bytes10k, ops10, bytes10)
	}
}

// BenchmarkQueuePoll is one tick round of 4 VMs with 10, 1,000 and 10,000 requests waiting
// on one full connection (README, Benchmarks: the admission curve).
func BenchmarkQueuePoll(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			q := newQueueWorld(b, 4, n)
			q.round(b)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				q.round(b)
			}
		})
	}
}

// BenchmarkQueuePollRatio measures a round at 10 and at 10,000 waiters in the same run and
// reports their ratio (the goal: at most 2).
func BenchmarkQueuePollRatio(b *testing.B) {
	small, large := newQueueWorld(b, 4, 10), newQueueWorld(b, 4, 10000)
	small.round(b)
	large.round(b)
	var ts, tl time.Duration
	for b.Loop() {
		s := time.Now()
		small.round(b)
		m := time.Now()
		large.round(b)
		ts, tl = ts+m.Sub(s), tl+time.Since(m)
	}
	b.ReportMetric(float64(ts.Nanoseconds())/float64(b.N), "ns-10/round")
	b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N), "ns-10000/round")
	b.ReportMetric(float64(tl)/float64(ts), "x-10")
}
