package providercooldown

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// windowModel is a plain restatement of the provider window rules, kept as a full list
// of failure times, to check the compact stored record against.
type windowModel struct {
	cfg          Config
	failures     []time.Time
	coolingUntil time.Time
}

func (m *windowModel) inWindow(now time.Time) int {
	n := 0
	for _, at := range m.failures {
		if now.Sub(at) <= m.cfg.FailureWindow { // inclusive (guide §1)
			n++
		}
	}
	return n
}

func (m *windowModel) fail(now time.Time) {
	if now.Before(m.coolingUntil) {
		return // same incident
	}
	m.failures = append(m.failures, now)
	if m.inWindow(now) >= m.cfg.FailureThreshold {
		m.coolingUntil = now.Add(m.cfg.Cooldown)
	}
}

func (m *windowModel) succeed() { m.failures = nil }

// TestPropertyWindowGateMatchesModel: for random failures, successes and clock moves,
// the gate cools exactly when the model says and reports the same window count.
func TestPropertyWindowGateMatchesModel(t *testing.T) {
	steps := []time.Duration{time.Millisecond, time.Second, 20 * time.Second, time.Minute,
		4 * time.Minute, 10 * time.Minute, 29 * time.Minute}
	rapid.Check(t, func(rt *rapid.T) {
		cfg, _ := DefaultConfig(rapid.SampledFrom(policies.Profiles).Draw(rt, "profile"))
		cfg.Enabled = true
		p, err := ProviderEntry("prov", "prov", cfg)
		if err != nil {
			rt.Fatal(err)
		}
		clock := manualclock.New(t0)
		g := New(state.NewMemStore(), clock)
		model := &windowModel{cfg: cfg}
		n := rapid.IntRange(1, 150).Draw(rt, "steps")
		for i := 0; i < n; i++ {
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1:
				if _, err := g.RecordFailure(p, vServer); err != nil {
					rt.Fatal(err)
				}
				model.fail(clock.Now())
			case 2:
				if err := g.RecordSuccess(p); err != nil {
					rt.Fatal(err)
				}
				model.succeed()
			default:
				clock.Advance(rapid.SampledFrom(steps).Draw(rt, "advance"))
			}
			s, err := g.Check(p)
			if err != nil {
				rt.Fatal(err)
			}
			now := clock.Now()
			wantCooling := now.Before(model.coolingUntil)
			if s.Cooling != wantCooling || (wantCooling && s.RetryAfter != model.coolingUntil.Sub(now)) {
				rt.Fatalf("step %d: %+v, model cooling=%v until %v", i, s, wantCooling, model.coolingUntil.Sub(now))
			}
			if want := min(model.inWindow(now), cfg.FailureThreshold); s.Failures != want {
				rt.Fatalf("step %d: window %d, model %d", i, s.Failures, want)
			}
		}
	})
}

// TestPropertyConnectionCooldownStaysInBounds: whatever happens, a connection entry's
// cooldown is between minRetryCooldown and maxRetryCooldown, and a failure outside a
// cooldown never shortens the backoff step of a streak.
func TestPropertyConnectionCooldownStaysInBounds(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg, _ := DefaultConfig(policies.ProfileOAuth)
		cfg.Enabled = true
		cfg.MinRetryCooldown = time.Duration(rapid.IntRange(1, 5000).Draw(rt, "minMs")) * time.Millisecond
		cfg.MaxRetryCooldown = cfg.MinRetryCooldown * time.Duration(rapid.IntRange(1, 300).Draw(rt, "maxFactor"))
		c, err := ConnectionEntry("prov", "conn", "prov"+"/"+"conn", cfg)
		if err != nil {
			rt.Fatal(err)
		}
		clock := manualclock.New(t0)
		g := New(state.NewMemStore(), clock)
		n := rapid.IntRange(1, 100).Draw(rt, "steps")
		for i := 0; i < n; i++ {
			before, _ := g.Check(c)
			if rapid.Bool().Draw(rt, "fail") {
				s, err := g.RecordFailure(c, vServer)
				if err != nil {
					rt.Fatal(err)
				}
				if before.Cooling { // same incident: the running cooldown is kept as it was
					if s.RetryAfter != before.RetryAfter || s.Failures != before.Failures {
						rt.Fatalf("step %d: failure during a cooldown changed it: %+v -> %+v", i, before, s)
					}
					continue
				}
				if !s.Cooling || s.RetryAfter < cfg.MinRetryCooldown || s.RetryAfter > cfg.MaxRetryCooldown {
					rt.Fatalf("step %d: cooldown %v outside [%v, %v]", i, s.RetryAfter, cfg.MinRetryCooldown, cfg.MaxRetryCooldown)
				}
				if before.Failures > 0 && s.Failures != min(before.Failures+1, maxBackoffFailures) {
					rt.Fatalf("step %d: streak went from %d to %d", i, before.Failures, s.Failures)
				}
			} else {
				clock.Advance(time.Duration(rapid.IntRange(0, int(3*cfg.MaxRetryCooldown/time.Millisecond)).Draw(rt, "advanceMs")) * time.Millisecond)
			}
		}
	})
}
