package lockout

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func TestInterleavedFailuresEscalateOnce(t *testing.T) {
	f := newFixture(t, enabled(), "m")
	started := f.clock.Now()
	var inner Outcome
	testfixture.InterleaveOn(f.store, f.conn.lockKey("exact", "m"), 1, func() { inner = f.fail(t, "m", v502, started) })
	outer := f.fail(t, "m", v502, started)
	if !inner.Counted || outer.Counted || !outer.Locked {
		t.Fatalf("inner %+v outer %+v: want exactly the first writer counted, both locked", inner, outer)
	}
	if l, _ := f.locked(t, "m"); l.FailureCount != 1 || l.Until.Sub(t0) != 120*time.Second {
		t.Fatalf("after two overlapping failures: %+v", l)
	}
}

func TestInterleavedIndexWritersLoseNothing(t *testing.T) {
	f := newFixture(t, enabled())
	testfixture.InterleaveOn(f.store, f.conn.indexKey, 1, func() { f.fail(t, "b", v502, time.Time{}) })
	f.fail(t, "a", v502, time.Time{})
	for _, m := range []string{"a", "b"} {
		if _, ok := f.locked(t, m); !ok {
			t.Fatalf("%s lost from the index", m)
		}
	}
}

// A success decays a lock to 0 and deletes it; before it drops the index entry, a new
// failure locks the model again. The entry must survive, or the new lock would be invisible.
func TestDecayRacingNewFailureKeepsIndexEntry(t *testing.T) {
	f := newFixture(t, enabled(), "m")
	f.fail(t, "m", v502, time.Time{})
	// Same millisecond: the new lock ends exactly when the decayed one did.
	testfixture.InterleaveOn(f.store, f.conn.indexKey, 1, func() { f.fail(t, "m", v502, time.Time{}) })
	f.succeed(t, "m")
	l, ok := f.locked(t, "m")
	if !ok || l.FailureCount != 1 || l.Until.Sub(f.clock.Now()) != 120*time.Second {
		t.Fatalf("lock after racing decay: %+v %v", l, ok)
	}
}

func TestGoroutinesHerdCountsOnce(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	conn, _ := NewConn("codex", "codex-a", "codex/codex-a", "")
	started := clock.Now()
	const workers = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	counted := 0
	for w := 0; w < workers; w++ {
		tr, _ := New(store, clock, enabled()) // one tracker per worker VM
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := tr.RecordFailure(conn, Failure{Model: "m", Verdict: v502, Started: started})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if out.Counted {
				counted++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	tr, _ := New(store, clock, enabled())
	l, ok, _ := tr.Locked(conn, "m")
	if counted != 1 || !ok || l.FailureCount != 1 || l.Until.Sub(t0) != 120*time.Second {
		t.Fatalf("%d of %d overlapping failures counted; lock %+v", counted, workers, l)
	}
}

// Workers lock distinct models, decay and re-lock them at once: at the end every active lock
// record is visible through the index (no lost index update) and listed.
func TestGoroutinesIndexLosesNoActiveLock(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	const workers = 12
	models := []string{"shared"}
	for w := 0; w < workers; w++ {
		models = append(models, fmt.Sprintf("m%d", w))
	}
	conn, _ := NewConn("codex", "codex-a", "codex/codex-a", "", models...)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		tr, _ := New(store, clock, enabled())
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mine := fmt.Sprintf("m%d", w)
			shared := "shared"
			for i := 0; i < 40; i++ {
				model := mine
				if i%3 == 0 {
					model = shared
				}
				if i%4 == 3 {
					if err := tr.RecordSuccess(conn, model, time.Time{}); err != nil {
						t.Error(err)
					}
					continue
				}
				if _, err := tr.RecordFailure(conn, Failure{Model: model, Verdict: v502}); err != nil {
					t.Error(err)
				}
			}
			// Each worker ends with its own model locked.
			if _, err := tr.RecordFailure(conn, Failure{Model: mine, Verdict: v502}); err != nil {
				t.Error(err)
			}
		}(w)
	}
	wg.Wait()
	tr, _ := New(store, clock, enabled())
	list, err := tr.List(conn)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range list {
		listed[e.Model] = true
	}
	for w := 0; w <= workers; w++ {
		model := fmt.Sprintf("m%d", w)
		if w == workers {
			model = "shared"
		}
		rec, active, _ := tr.readLock(conn, indexEntry{scope: failure.ScopeExact, name: model})
		active = active && rec.until > clock.Now().UnixMilli()
		_, locked, _ := tr.Locked(conn, model)
		if active != locked || active != listed[model] {
			t.Fatalf("%s: record active %v, Locked %v, listed %v", model, active, locked, listed[model])
		}
		if w < workers && !locked {
			t.Fatalf("%s: worker's final lock lost", model)
		}
	}
}
