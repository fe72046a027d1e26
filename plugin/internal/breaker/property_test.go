package breaker

import (
	"testing"
	"testing/quick"
	"time"

	"pgregory.net/rapid"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// inflight is a request a simulated worker let through and has not reported yet.
type inflight struct {
	worker int
	probe  Decision // the Allow decision (Probe set if it holds the probe)
	id     int      // probe id, 0 for ordinary requests
}

// TestPropertyOpenGetsOnlyTheSingleProbe drives several simulated workers over one store
// with random arrivals, outcomes and clock moves, and checks after every step:
//   - a request is never let through while the circuit reads OPEN;
//   - while it reads HALF_OPEN only the probe holder is let through;
//   - no second probe is granted while a live one (claimed, unreported, within its
//     timeout, same HALF_OPEN period) exists;
//   - independently of Status: once a failure opens the circuit, nothing gets through
//     for at least that failure kind's first OPEN period.
func TestPropertyOpenGetsOnlyTheSingleProbe(t *testing.T) {
	steps := []time.Duration{time.Millisecond, time.Second, 5 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 10 * time.Minute}
	verdicts := []failure.Verdict{
		verdict503,
		{Status: 504, Reason: failure.ReasonTimeout},
		{Reason: failure.ReasonTransport},
		{Status: 429, Reason: failure.ReasonRateLimit}, // does not count
	}
	rapid.Check(t, func(rt *rapid.T) {
		cfg, err := DefaultConfig(rapid.SampledFrom(policies.Profiles).Draw(rt, "profile"))
		if err != nil {
			rt.Fatal(err)
		}
		cfg.CooldownByKind[KindTimeout] = rapid.SampledFrom([]time.Duration{0, 5 * time.Second, 2 * time.Minute}).Draw(rt, "timeoutCooldown")
		p, err := NewProvider("prov", "prov", cfg)
		if err != nil {
			rt.Fatal(err)
		}
		store := state.NewMemStore()
		clock := manualclock.New(t0)
		workers := make([]*Breaker, rapid.IntRange(2, 8).Draw(rt, "workers"))
		for i := range workers {
			workers[i] = New(store, clock)
		}
		var pending []inflight
		liveProbe, probeAt, nextID := 0, time.Time{}, 1
		var blockedUntil time.Time // no request may pass before this (model of an opening)

		n := rapid.IntRange(1, 200).Draw(rt, "steps")
		for i := 0; i < n; i++ {
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1, 2: // a request arrives at some worker
				w := rapid.IntRange(0, len(workers)-1).Draw(rt, "worker")
				before, err := workers[w].Status(p)
				if err != nil {
					rt.Fatal(err)
				}
				d, err := workers[w].Allow(p)
				if err != nil {
					rt.Fatal(err)
				}
				if d.Allowed && clock.Now().Before(blockedUntil) {
					rt.Fatalf("step %d: request let through %v before the OPEN period ends", i, blockedUntil.Sub(clock.Now()))
				}
				if d.Allowed && before.State == Open {
					rt.Fatalf("step %d: request let through an OPEN circuit (%+v)", i, before)
				}
				if d.Allowed && before.State == HalfOpen && !d.Probe {
					rt.Fatalf("step %d: HALF_OPEN let a non-probe through", i)
				}
				if d.Probe {
					if liveProbe != 0 && clock.Now().Before(probeAt.Add(cfg.ProbeTimeout)) {
						rt.Fatalf("step %d: second probe while probe %d is live", i, liveProbe)
					}
					liveProbe, probeAt = nextID, clock.Now()
					pending = append(pending, inflight{worker: w, probe: d, id: nextID})
					nextID++
				} else if d.Allowed {
					pending = append(pending, inflight{worker: w})
				}
			case 3: // an in-flight request finishes
				if len(pending) == 0 {
					continue
				}
				j := rapid.IntRange(0, len(pending)-1).Draw(rt, "request")
				req := pending[j]
				pending = append(pending[:j], pending[j+1:]...)
				b := workers[req.worker]
				var st State
				switch outcome := rapid.IntRange(0, len(verdicts)).Draw(rt, "outcome"); outcome {
				case len(verdicts): // success
					st, err = b.RecordSuccess(p, Attempt{})
				default:
					v := verdicts[outcome]
					before, serr := b.Status(p)
					if serr != nil {
						rt.Fatal(serr)
					}
					st, err = b.RecordFailure(p, v, Attempt{})
					if err == nil && st == Open && before.State != Open {
						blockedUntil = clock.Now().Add(cfg.OpenPeriod(cfg.KindOf(v), 1))
					}
					if err == nil && req.id != 0 && cfg.KindOf(v) == KindNone {
						err = b.ReleaseProbe(p, req.probe)
						if req.id == liveProbe {
							liveProbe = 0
						}
					}
				}
				if err != nil {
					rt.Fatal(err)
				}
				if st != HalfOpen { // the HALF_OPEN period ended: any probe claim went with it
					liveProbe = 0
				}
			case 4: // time passes
				clock.Advance(rapid.SampledFrom(steps).Draw(rt, "advance"))
			case 6: // time passes to just before the end of the modelled OPEN period
				if gap := blockedUntil.Sub(clock.Now()); gap > time.Second {
					clock.Advance(gap - rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second}).Draw(rt, "short"))
				}
			case 5: // an operator's connection test passes
				if _, err := workers[0].ConnectionTestPassed(p); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}

// TestPropertyOneProbePerHalfOpenPeriod lets every one of many workers try at once
// whenever the circuit is HALF_OPEN: exactly one gets through, whatever the order.
func TestPropertyOneProbePerHalfOpenPeriod(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg, _ := DefaultConfig(policies.ProfileAPIKey)
		p, _ := NewProvider("prov", "prov", cfg)
		store := state.NewMemStore()
		clock := manualclock.New(t0)
		workers := make([]*Breaker, rapid.IntRange(2, 32).Draw(rt, "workers"))
		for i := range workers {
			workers[i] = New(store, clock)
		}
		for i := 0; i < cfg.FailureThreshold; i++ {
			if _, err := workers[0].RecordFailure(p, verdict503, Attempt{}); err != nil {
				rt.Fatal(err)
			}
		}
		rounds := rapid.IntRange(1, 6).Draw(rt, "rounds")
		for round := 1; round <= rounds; round++ {
			s, _ := workers[0].Status(p)
			clock.Advance(s.RetryAfter)
			order := rapid.Permutation(workerIndexes(len(workers))).Draw(rt, "order")
			probes := 0
			var probe Decision
			for _, w := range order {
				d, err := workers[w].Allow(p)
				if err != nil {
					rt.Fatal(err)
				}
				if d.Allowed {
					probes++
					probe = d
				}
			}
			if probes != 1 || !probe.Probe {
				rt.Fatalf("round %d: %d requests through HALF_OPEN, want exactly the probe", round, probes)
			}
			if _, err := workers[order[0]].RecordFailure(p, verdict503, Attempt{}); err != nil {
				rt.Fatal(err)
			}
		}
	})
}

func workerIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// TestPropertyRecordRoundTrip: any in-range record decodes to itself.
func TestPropertyRecordRoundTrip(t *testing.T) {
	f := func(st, kind uint8, failures, successes uint32, cycles uint8, last, open, probe int64) bool {
		r := record{
			state:         State(st % uint8(stateCount)),
			failures:      uint64(failures % (maxThreshold * 2)),
			successes:     uint64(successes % (maxThreshold * 2)),
			cycles:        uint64(cycles % (maxCycles + 1)),
			lastKind:      Kind(kind % uint8(kindCount)),
			lastFailureAt: last, openUntil: open, probeUntil: probe,
		}
		got, err := decodeRecord(r.encode())
		return err == nil && got == r
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}
