package admission

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// ownerTTL is the documented bound (README, "Admission"): a VM whose heartbeat is older
// than 6 s has died, and its slots are free.
const ownerTTL = 6 * time.Second

// A VM that traps holding slots gets no on_done: nothing releases them. Once its heartbeat
// is older than the bound, by the clock, a waiter on another VM gets the slot — not a
// moment before, while a VM that keeps beating keeps its slot. Both the connection's lease
// and a provider pool's are freed. The live VM writes its heartbeat every 2 s, as the
// filter's ticks do.
func TestADeadVMsSlotsFreeAfterItsHeartbeatAges(t *testing.T) {
	for _, dies := range []bool{true, false} {
		t.Run(map[bool]string{true: "holder dies", false: "holder lives"}[dies], func(t *testing.T) {
			store, clock := state.NewMemStore(), manualclock.New(t0)
			holder, waiter := NewNode(store, 1), NewNode(store, 2)
			for _, n := range []*Node{holder, waiter} {
				if err := n.Heartbeat(clock.Now().UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
			a, b := NewOn(holder, store, clock), NewOn(waiter, store, clock)
			g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 1, ProviderMaxConcurrent: 1,
				Queue: QueueConfig{MaxWait: time.Minute, ExecutionMaxWait: 10 * time.Minute}})
			held, err := a.Admit(g, "m")
			if err != nil || !held.Granted {
				t.Fatalf("holder: %+v %v", held, err)
			}
			queued, err := b.Admit(g, "m")
			if err != nil || queued.Granted {
				t.Fatalf("waiter: %+v %v", queued, err)
			}
			var grantedAt time.Duration
			for step := 250 * time.Millisecond; clock.Now().Sub(t0) < 20*time.Second; {
				clock.Advance(step)
				nowMs := clock.Now().UnixMilli()
				if waiter.HeartbeatDue(nowMs) {
					if err := waiter.Heartbeat(nowMs); err != nil {
						t.Fatal(err)
					}
				}
				if !dies && holder.HeartbeatDue(nowMs) {
					if err := holder.Heartbeat(nowMs); err != nil {
						t.Fatal(err)
					}
				}
				r, err := b.TryAdmit(queued.Ticket)
				if err != nil {
					t.Fatal(err)
				}
				if r.Granted {
					grantedAt = clock.Now().Sub(t0)
					break
				}
			}
			switch {
			case !dies && grantedAt != 0:
				t.Fatalf("the slot of a VM that keeps beating was taken after %v", grantedAt)
			case dies && (grantedAt <= ownerTTL || grantedAt > ownerTTL+250*time.Millisecond):
				t.Fatalf("the dead VM's slot came back after %v, want at the first poll past %v", grantedAt, ownerTTL)
			}
			if dies {
				if u, _ := b.Inspect(g, "m"); u.InFlight != 1 {
					t.Fatalf("in flight %d after the takeover, want only the waiter's", u.InFlight)
				}
				if n := poolLeases(t, &world{store: store, clock: clock}, g.providerKey); n != 1 {
					t.Fatalf("provider pool holds %d leases, want only the waiter's", n)
				}
			}
		})
	}
}

// The directory is read only where a dead owner could matter: an admission that finds room
// never reads it, even with another VM's lease in the record; one that finds the cap full
// behind a lease its view cannot vouch for reads it once.
func TestHeartbeatsAreReadOnlyWhenTheCapIsFull(t *testing.T) {
	cs := &countingStore{Store: state.NewMemStore()}
	clock := manualclock.New(t0)
	other, mine := NewNode(cs, 1), NewNode(cs, 2)
	for _, n := range []*Node{other, mine} {
		if err := n.Heartbeat(clock.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	g := mustGate(t, GateConfig{Provider: "p", Connection: "c", MaxConcurrent: 2})
	if r, err := NewOn(other, cs, clock).Admit(g, "m"); err != nil || !r.Granted {
		t.Fatal(r, err)
	}
	a := NewOn(mine, cs, clock)
	clock.Advance(ownerTTL + time.Second) // mine's view of other is now too old to vouch for it
	dirGets := func(f func()) int {
		counting := &dirCounter{countingStore: cs}
		a.store, mine.store = counting, counting
		f()
		a.store, mine.store = cs, cs
		return counting.dir
	}
	var r Result
	if n := dirGets(func() { r, _ = a.Admit(g, "m") }); n != 0 || !r.Granted {
		t.Fatalf("an admission with room read the directory %d times (granted %v)", n, r.Granted)
	}
	// Full now: the other VM's lease stands in the way, and its heartbeat is 7 s old, so the
	// VM is dead and the slot free.
	if n := dirGets(func() { r, _ = a.Admit(g, "m") }); n != 1 || !r.Granted {
		t.Fatalf("a full cap behind a stale lease: %d directory reads, granted %v; want 1 and the slot", n, r.Granted)
	}
}

type dirCounter struct {
	*countingStore
	dir int
}

func (d *dirCounter) Get(k string) ([]byte, uint32, bool, error) {
	if k == DirectoryKey {
		d.dir++
	}
	return d.countingStore.Get(k)
}

// The directory keeps each VM once, drops the entries older than the bound, and a VM whose
// first heartbeat has not landed takes leases no one can take for dead.
func TestHeartbeatKeepsTheDirectory(t *testing.T) {
	store := state.NewMemStore()
	a, b := NewNode(store, 7), NewNode(store, 9)
	if a.owner() != 0 {
		t.Fatal("a node not in the directory yet signs its leases")
	}
	if err := a.Heartbeat(1000); err != nil {
		t.Fatal(err)
	}
	if err := b.Heartbeat(2000); err != nil {
		t.Fatal(err)
	}
	if err := a.Heartbeat(3000); err != nil {
		t.Fatal(err)
	}
	if a.owner() != 7 {
		t.Fatal("a registered node does not sign its leases")
	}
	if _, err := a.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := a.Peers(); len(got) != 2 || got[0] != (Peer{9, 2000}) || got[1] != (Peer{7, 3000}) {
		t.Fatalf("directory %+v", got)
	}
	// 9 stops; 7 beats on past the bound: 9 is dropped.
	if err := a.Heartbeat(2000 + ownerTTL.Milliseconds() + 1); err != nil {
		t.Fatal(err)
	}
	if got := a.Peers(); len(got) != 1 || got[0].ID != 7 {
		t.Fatalf("after the bound: %+v, want 9 dropped", got)
	}
	if !a.HeartbeatDue(2000+ownerTTL.Milliseconds()+1+2000) || a.HeartbeatDue(2000+ownerTTL.Milliseconds()+1+1999) {
		t.Fatal("a heartbeat is due every 2 s")
	}
}

// A directory of the earlier layout (version 1: VMs named by strings) reads as empty, and
// the first heartbeat replaces it.
func TestAnOldDirectoryReadsAsEmpty(t *testing.T) {
	store := state.NewMemStore()
	v1 := state.NewEncoder(nil, state.KindVMDirectory, 1).Uint(1).String("0123456789abcdef").Int(1000).Bytes()
	if err := store.Set(DirectoryKey, v1, 0); err != nil {
		t.Fatal(err)
	}
	n := NewNode(store, 5)
	if _, err := n.Refresh(); err != nil || len(n.Peers()) != 0 {
		t.Fatalf("an old directory reads as %+v (%v), want empty", n.Peers(), err)
	}
	if err := n.Heartbeat(2000); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Refresh(); err != nil || len(n.Peers()) != 1 || n.Peers()[0] != (Peer{5, 2000}) {
		t.Fatalf("after a heartbeat: %+v (%v)", n.Peers(), err)
	}
}
