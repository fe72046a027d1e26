package breaker

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// bigThresholds makes every failure visible in the count: nothing opens.
func bigThresholds(c *Config) {
	c.DegradationThreshold, c.FailureThreshold = 1_000_000, 1_000_000
}

func TestInterleavedWritersLoseAndDoubleNothing(t *testing.T) {
	tests := []struct {
		name      string
		direct    int // failures recorded by the worker under test
		intruders int // failures other workers slip in between its Get and Set
	}{
		{"one intruder", 1, 1},
		{"intruder before every write", 5, 5},
		{"more intruders than writes", 3, 9},
		{"many", 20, 15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := state.NewMemStore()
			clock := manualclock.New(t0)
			p := provider(t, "prov", policies.ProfileAPIKey, bigThresholds)
			me, other := New(store, clock), New(store, clock)
			intruders := testfixture.Interleave(store, tc.intruders, func() {
				if _, err := other.RecordFailure(p, verdict503, Attempt{}); err != nil {
					t.Error(err)
				}
			})
			for i := 0; i < tc.direct; i++ {
				if _, err := me.RecordFailure(p, verdict503, Attempt{}); err != nil {
					t.Fatal(err)
				}
			}
			store.BeforeSet = nil
			if intruders.Ran != tc.intruders {
				t.Fatalf("only %d of %d intruders ran", intruders.Ran, tc.intruders)
			}
			want := tc.direct + intruders.Ran
			if s := status(t, me, p); s.Failures != want {
				t.Fatalf("failures %d, want %d (%d direct + %d interleaved)", s.Failures, want, tc.direct, intruders.Ran)
			}
		})
	}
}

func TestInterleavedThresholdCrossingOpensOnce(t *testing.T) {
	// oauth opens at 8. Seven failures recorded, then two workers race the 8th and 9th:
	// the circuit must open once (cycle 1), and the late one is a straggler on OPEN.
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	p := provider(t, "prov", policies.ProfileOAuth, nil)
	a, b := New(store, clock), New(store, clock)
	fail(t, a, p, 7, verdict503)
	intruder := testfixture.Interleave(store, 1, func() {
		if st, err := b.RecordFailure(p, verdict503, Attempt{}); err != nil || st != Open {
			t.Errorf("intruder: %s, %v; want OPEN", st, err)
		}
	})
	st, err := a.RecordFailure(p, verdict503, Attempt{})
	if err != nil || st != Open || intruder.Ran != 1 {
		t.Fatalf("retried writer: %s, %v (intruder ran %d times); want OPEN after one intruder", st, err, intruder.Ran)
	}
	if s := status(t, a, p); s.OpenCycles != 1 || s.Failures != 8 {
		t.Fatalf("%+v: want one opening at 8 failures", s)
	}
}

func TestInterleavedProbeClaimsGrantOneProbe(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	p := provider(t, "prov", policies.ProfileLocal, nil)
	workers := []*Breaker{New(store, clock), New(store, clock), New(store, clock), New(store, clock)}
	fail(t, workers[0], p, 2, verdict503)
	clock.Advance(policies.BreakerLocalResetTimeout)

	// Every worker reads HALF_OPEN with no probe, then each one's CAS write is preceded
	// by the next worker's whole Allow.
	var decisions []Decision
	depth := 0
	store.BeforeSet = func(string) {
		depth++
		if depth < len(workers) {
			decisions = append(decisions, allow(t, workers[depth], p))
		}
	}
	decisions = append(decisions, allow(t, workers[0], p))
	probes := 0
	for _, d := range decisions {
		if d.Allowed {
			probes++
			if !d.Probe || d.State != HalfOpen {
				t.Errorf("allowed without holding the probe: %+v", d)
			}
		}
	}
	if probes != 1 || len(decisions) != len(workers) {
		t.Fatalf("%d probes among %d decisions %+v, want exactly 1", probes, len(decisions), decisions)
	}
}

func TestGoroutinesHammeringOneStore(t *testing.T) {
	const workers, perWorker = 8, 300
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	p := provider(t, "prov", policies.ProfileAPIKey, func(c *Config) {
		c.DegradationThreshold, c.FailureThreshold = 10, 1_000_000 // degrades early, never opens
	})
	var recorded atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := New(store, clock) // one Breaker per worker, like one per Envoy VM
			for i := 0; i < perWorker; i++ {
				if d, err := b.Allow(p); err != nil || !d.Allowed {
					t.Errorf("allow: %+v %v", d, err)
					return
				}
				_, err := b.RecordFailure(p, verdict503, Attempt{})
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
	s := status(t, New(store, clock), p)
	if int64(s.Failures) != recorded.Load() || s.State != Degraded {
		t.Fatalf("stored %d failures (%s), %d recorded without error", s.Failures, s.State, recorded.Load())
	}
	if recorded.Load() < workers*perWorker/2 {
		t.Fatalf("only %d of %d writes got through", recorded.Load(), workers*perWorker)
	}
}

func TestGoroutinesRacingForTheProbe(t *testing.T) {
	const workers, rounds = 16, 20
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	p := provider(t, "prov", policies.ProfileLocal, nil)
	fail(t, New(store, clock), p, 2, verdict503)
	for round := 0; round < rounds; round++ {
		clock.Advance(p.cfg.OpenPeriod(KindServerError, round+1)) // the whole OPEN period
		var probes atomic.Int32
		var probe atomic.Pointer[Decision]
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := New(store, clock)
				<-start
				for {
					d, err := b.Allow(p)
					if errors.Is(err, state.ErrContention) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						probes.Add(1)
						probe.Store(&d)
					}
					return
				}
			}()
		}
		close(start)
		wg.Wait()
		if probes.Load() != 1 {
			t.Fatalf("round %d: %d requests let through HALF_OPEN, want 1", round, probes.Load())
		}
		if st := probeOutcome(t, New(store, clock), p, *probe.Load(), clock.Now(), &verdict503); st != Open { // the probe fails
			t.Fatalf("round %d: probe failure left %s", round, st)
		}
	}
}
