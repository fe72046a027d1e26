package providercooldown

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// wide counts every failure: a large threshold in a day-long window.
func wide(c *Config) {
	c.FailureThreshold, c.FailureWindow = maxThreshold, 24*time.Hour
}

func TestInterleavedWindowWritersLoseAndDoubleNothing(t *testing.T) {
	tests := []struct {
		name      string
		direct    int // failures recorded by the worker under test
		intruders int // failures another worker slips in between its Get and Set
	}{
		{"one intruder", 1, 1},
		{"intruder before every write", 5, 5},
		{"many", 30, 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := state.NewMemStore()
			clock := manualclock.New(t0)
			p := providerEntry(t, "prov", enabled(t, policies.ProfileOAuth, wide))
			me, other := New(store, clock), New(store, clock)
			intruders := testfixture.Interleave(store, tc.intruders, func() {
				clock.Advance(time.Millisecond) // distinct timestamps, so a lost one would show
				if _, err := other.RecordFailure(p, vServer); err != nil {
					t.Error(err)
				}
			})
			for i := 0; i < tc.direct; i++ {
				if _, err := me.RecordFailure(p, vServer); err != nil {
					t.Fatal(err)
				}
			}
			store.BeforeSet = nil
			if intruders.Ran != tc.intruders {
				t.Fatalf("only %d of %d intruders ran", intruders.Ran, tc.intruders)
			}
			if s := check(t, me, p); s.Failures != tc.direct+tc.intruders {
				t.Fatalf("window holds %d failures, want %d", s.Failures, tc.direct+tc.intruders)
			}
		})
	}
}

func TestInterleavedConnectionFailuresEscalateOnce(t *testing.T) {
	// Two in-flight requests on one connection fail at once: the second lands while the
	// first one's cooldown is being written, retries, sees the cooldown and keeps it.
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	c := connectionEntry(t, "prov", "conn", enabled(t, policies.ProfileAPIKey, nil))
	me, other := New(store, clock), New(store, clock)
	intruder := testfixture.Interleave(store, 1, func() {
		if s, err := other.RecordFailure(c, vServer); err != nil || s.RetryAfter != time.Second {
			t.Errorf("intruder: %+v %v", s, err)
		}
	})
	s, err := me.RecordFailure(c, vServer)
	if intruder.Ran != 1 {
		t.Fatalf("the intruder ran %d times, want once", intruder.Ran)
	}
	if err != nil || s.Failures != 1 || s.RetryAfter != time.Second {
		t.Fatalf("retried writer: %+v %v; want the intruder's single 1 s step", s, err)
	}
}

func TestGoroutinesHammeringOneWindow(t *testing.T) {
	const workers, perWorker = 8, 100
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	p := providerEntry(t, "prov", enabled(t, policies.ProfileAPIKey, wide))
	var recorded atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := New(store, clock)
			for i := 0; i < perWorker; i++ {
				if s, err := g.Check(p); err != nil || s.Cooling {
					t.Errorf("check: %+v %v", s, err)
					return
				}
				_, err := g.RecordFailure(p, vServer)
				switch {
				case err == nil:
					recorded.Add(1)
				case !errors.Is(err, state.ErrContention):
					t.Errorf("record: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s := check(t, New(store, clock), p); int64(s.Failures) != recorded.Load() {
		t.Fatalf("window holds %d failures, %d recorded without error", s.Failures, recorded.Load())
	}
	if recorded.Load() < workers*perWorker/2 {
		t.Fatalf("only %d of %d writes got through", recorded.Load(), workers*perWorker)
	}
}
