package conncooldown

import (
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func TestInterleavedFailuresEscalateOnce(t *testing.T) {
	f := newFixture(t, apikey())
	started := f.clock.Now()
	var inner Outcome
	testfixture.Interleave(f.store, 1, func() { inner = f.fail(t, vServer, started) })
	outer := f.fail(t, vServer, started)
	if !inner.Counted || outer.Counted {
		t.Fatalf("inner counted %v, outer counted %v: want exactly the first writer counted", inner.Counted, outer.Counted)
	}
	if a := f.check(t); a.BackoffLevel != 1 || a.RetryAfter != 3*time.Second {
		t.Fatalf("after two overlapping failures: %+v, want level 1 and 3s", a)
	}
}

func TestInterleavedTerminalSurvivesTransientWriter(t *testing.T) {
	f := newFixture(t, apikey())
	testfixture.Interleave(f.store, 1, func() { f.fail(t, vBanned, f.clock.Now()) })
	if out := f.fail(t, vServer, f.clock.Now()); out.Counted || out.Availability.Status != StatusBanned {
		t.Fatalf("transient writer after interleaved ban: %+v", out)
	}
	testfixture.Interleave(f.store, 1, func() {})
	if err := f.tr.RecordSuccess(f.conn, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if a := f.check(t); a.Status != StatusBanned {
		t.Fatalf("status %s, want banned", a.Status)
	}
}

func TestInterleavedSuccessDoesNotEraseNewerFailure(t *testing.T) {
	f := newFixture(t, apikey())
	f.fail(t, vServer, f.clock.Now()) // level 1
	f.clock.Advance(time.Hour)
	started := f.clock.Now() // the successful attempt starts after that cooldown ended
	f.clock.Advance(time.Second)
	// The success reads level 1 and would clear it; a newer failure lands before its write.
	testfixture.Interleave(f.store, 1, func() { f.fail(t, vServer, f.clock.Now()) })
	if err := f.tr.RecordSuccess(f.conn, started); err != nil {
		t.Fatal(err)
	}
	if a := f.check(t); a.Status != StatusUnavailable || a.BackoffLevel != 2 {
		t.Fatalf("success erased a failure newer than its attempt: %+v", a)
	}
}

func TestGoroutinesHerdCountsOnce(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	conn, _ := NewConn("openai", "openai-a", "openai", "openai/openai-a", "fp")
	const workers = 16
	started := clock.Now()
	var wg sync.WaitGroup
	counted := make(chan bool, workers)
	for w := 0; w < workers; w++ {
		tr, err := New(store, clock, apikey()) // one tracker per worker VM
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := tr.RecordFailure(conn, Failure{Verdict: vServer, Started: started})
			if err != nil {
				t.Error(err)
			}
			counted <- out.Counted
		}()
	}
	wg.Wait()
	close(counted)
	n := 0
	for c := range counted {
		if c {
			n++
		}
	}
	tr, _ := New(store, clock, apikey())
	a, _ := tr.Check(conn)
	if n != 1 || a.BackoffLevel != 1 || a.RetryAfter != 3*time.Second {
		t.Fatalf("%d of %d overlapping failures counted, state %+v; want 1, level 1, 3s", n, workers, a)
	}
}

func TestGoroutinesTerminalNeverOverwritten(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	conn, _ := NewConn("openai", "openai-a", "openai", "openai/openai-a", "fp")
	verdicts := []failure.Verdict{vServer, vRateLimit, vConcurrency, vStall, vRejected, vExpired}
	var wg sync.WaitGroup
	for w := 0; w < 12; w++ {
		tr, _ := New(store, clock, apikey())
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if w == 0 && i == 10 {
					if _, err := tr.RecordFailure(conn, Failure{Verdict: vBanned}); err != nil {
						t.Error(err)
					}
					continue
				}
				if i%7 == 0 {
					_ = tr.RecordSuccess(conn, time.Time{})
					continue
				}
				if _, err := tr.RecordFailure(conn, Failure{Verdict: verdicts[(w+i)%len(verdicts)]}); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	tr, _ := New(store, clock, apikey())
	if a, _ := tr.Check(conn); a.Status != StatusBanned {
		t.Fatalf("status %s after concurrent writers, want banned", a.Status)
	}
}

// One worker escalates while others hammer the same connection with overlapping (stale)
// failures and successes and reads: no escalation is lost, none is doubled.
func TestGoroutinesNoLostEscalation(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	conn, _ := NewConn("openai", "openai-a", "openai", "openai/openai-a", "fp")
	writer, _ := New(store, clock, apikey())
	if out, _ := writer.RecordFailure(conn, Failure{Verdict: vServer, Started: clock.Now()}); !out.Counted {
		t.Fatal("first failure not counted")
	}
	stale := t0.Add(-time.Second) // started before any cooldown was set
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		tr, _ := New(store, clock, apikey())
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (w + i) % 3 {
				case 0:
					if out, err := tr.RecordFailure(conn, Failure{Verdict: vServer, Started: stale}); err != nil || out.Counted {
						t.Errorf("stale failure counted=%v err=%v", out.Counted, err)
						return
					}
				case 1:
					if err := tr.RecordSuccess(conn, stale); err != nil {
						t.Error(err)
						return
					}
				default:
					if _, err := tr.Check(conn); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(w)
	}
	const escalations = 6
	for i := 0; i < escalations; i++ {
		clock.Advance(time.Hour)
		out, err := writer.RecordFailure(conn, Failure{Verdict: vServer, Started: clock.Now()})
		if err != nil || !out.Counted {
			t.Fatalf("escalation %d: counted=%v err=%v", i, out.Counted, err)
		}
	}
	close(stop)
	wg.Wait()
	a, _ := writer.Check(conn)
	if a.BackoffLevel != escalations+1 || a.RetryAfter != 3*time.Second<<escalations {
		t.Fatalf("final %+v, want level %d and %v", a, escalations+1, 3*time.Second<<escalations)
	}
}
