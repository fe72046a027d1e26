package breaker

import (
	"bytes"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

func TestThresholdsPerProfile(t *testing.T) {
	tests := []struct {
		profile   policies.Profile
		degradeAt int           // failure that makes it DEGRADED (guide: 5 / 7 / derived 1)
		openAt    int           // failure that opens it (guide: 8 / 12 / 2)
		reset     time.Duration // first OPEN period (guide: 60 s / 30 s / 15 s)
	}{
		{policies.ProfileOAuth, 5, 8, 60 * time.Second},
		{policies.ProfileAPIKey, 7, 12, 30 * time.Second},
		{policies.ProfileLocal, 1, 2, 15 * time.Second},
	}
	for _, tc := range tests {
		t.Run(string(tc.profile), func(t *testing.T) {
			e := newEnv(t)
			p := provider(t, "prov", tc.profile, nil)
			for i := 1; i <= tc.openAt; i++ {
				st := fail(t, e.b, p, 1, verdict503)
				want := Closed
				switch {
				case i >= tc.openAt:
					want = Open
				case i >= tc.degradeAt:
					want = Degraded
				}
				if st != want {
					t.Fatalf("after failure %d: %s, want %s", i, st, want)
				}
				d := allow(t, e.b, p)
				if d.Allowed != (want != Open) || d.State != want {
					t.Fatalf("after failure %d: decision %+v", i, d)
				}
			}
			s := status(t, e.b, p)
			if s.RetryAfter != tc.reset || !s.OpenUntil.Equal(t0.Add(tc.reset)) || s.OpenCycles != 1 || s.Failures != tc.openAt {
				t.Fatalf("open status %+v", s)
			}
		})
	}
}

func TestOnlyTripStatusesOpenTheCircuit(t *testing.T) {
	tests := []struct {
		v     failure.Verdict // repeated failThreshold times
		opens bool            // whether the circuit opens
	}{
		{failure.Verdict{Status: 408, Reason: failure.ReasonTimeout}, true},
		{failure.Verdict{Status: 500, Reason: failure.ReasonServerError}, true},
		{failure.Verdict{Status: 502, Reason: failure.ReasonServerError}, true},
		{failure.Verdict{Status: 503, Reason: failure.ReasonServerError}, true},
		{failure.Verdict{Status: 504, Reason: failure.ReasonTimeout}, true},
		{failure.Verdict{Reason: failure.ReasonTransport}, true},
		{failure.Verdict{Status: 401, Reason: failure.ReasonAuthError}, false},
		{failure.Verdict{Status: 403, Reason: failure.ReasonAuthError}, false},
		{failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit}, false},
		{failure.Verdict{Status: 429, Reason: failure.ReasonConcurrencyLimited, KeepBackoff: true}, false},
		{failure.Verdict{Status: 404, Reason: failure.ReasonNotFound}, false},
		{failure.Verdict{Status: 400, Reason: failure.ReasonBadRequest}, false},
	}
	for _, tc := range tests {
		e := newEnv(t)
		p := provider(t, "prov", policies.ProfileOAuth, nil)
		st := fail(t, e.b, p, policies.BreakerOAuthFailureThreshold, tc.v)
		if (st == Open) != tc.opens {
			t.Errorf("status %d reason %q: state %s after %d failures, opens=%v wanted",
				tc.v.Status, tc.v.Reason, st, policies.BreakerOAuthFailureThreshold, tc.opens)
		}
		if !tc.opens && e.store.Keys() != 1 { // only the store's guard key
			t.Errorf("status %d: a non-counting failure wrote a record", tc.v.Status)
		}
	}
}

func TestSuccessWhileClosedResetsTheCount(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileOAuth, nil)
	fail(t, e.b, p, 4, verdict503) // one short of DEGRADED
	succeed(t, e.b, p, 1)
	if st := fail(t, e.b, p, 4, verdict503); st != Closed {
		t.Fatalf("4 failures after a success: %s, want CLOSED", st)
	}
	if st := fail(t, e.b, p, 1, verdict503); st != Degraded {
		t.Fatalf("5th failure in a row: %s, want DEGRADED", st)
	}
}

func TestDegradedRecovery(t *testing.T) {
	// apikey: DEGRADED at 7, OPEN at 12, reset 30 s, multiplier 8, 3 recovery successes.
	tests := []struct {
		name      string
		kindCool  time.Duration            // cooldownByKind for timeouts (0 = reset timeout)
		failWith  failure.Verdict          // the failures that degrade it
		recover   func(*env, Provider) any // what happens after DEGRADED (returns ignored)
		wantState State                    // state afterwards
	}{
		{
			name:     "enough successes",
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				return succeed(e.t(), e.b, p, policies.BreakerRecoverySuccesses)
			},
			wantState: Closed,
		},
		{
			name:     "one success short",
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				return succeed(e.t(), e.b, p, policies.BreakerRecoverySuccesses-1)
			},
			wantState: Degraded,
		},
		{
			name:     "a failure breaks the success streak",
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				succeed(e.t(), e.b, p, policies.BreakerRecoverySuccesses-1)
				fail(e.t(), e.b, p, 1, verdict503)
				return succeed(e.t(), e.b, p, policies.BreakerRecoverySuccesses-1)
			},
			wantState: Degraded,
		},
		{
			name:     "valid connection test",
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				st, err := e.b.ConnectionTestPassed(p)
				if err != nil {
					e.t().Fatal(err)
				}
				return st
			},
			wantState: Closed,
		},
		{
			name:     "quiet period: 30 s × 8 = 240 s",
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				e.clock.Advance(240 * time.Second)
				return nil
			},
			wantState: Closed,
		},
		{
			name:     "1 ms before the quiet period ends",
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				e.clock.Advance(240*time.Second - time.Millisecond)
				return nil
			},
			wantState: Degraded,
		},
		{
			name:     "quiet period of the last kind: timeout cooldown 10 s × 8 = 80 s",
			kindCool: 10 * time.Second,
			failWith: failure.Verdict{Status: 504, Reason: failure.ReasonTimeout},
			recover: func(e *env, p Provider) any {
				e.clock.Advance(80 * time.Second)
				return nil
			},
			wantState: Closed,
		},
		{
			name:     "a server error's quiet period ignores the timeout cooldown",
			kindCool: 10 * time.Second,
			failWith: verdict503,
			recover: func(e *env, p Provider) any {
				e.clock.Advance(80 * time.Second)
				return nil
			},
			wantState: Degraded,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := provider(t, "prov", policies.ProfileAPIKey, func(c *Config) { c.CooldownByKind[KindTimeout] = tc.kindCool })
			if st := fail(t, e.b, p, 7, tc.failWith); st != Degraded {
				t.Fatalf("setup: %s, want DEGRADED", st)
			}
			tc.recover(e, p)
			s := status(t, e.b, p)
			if s.State != tc.wantState {
				t.Fatalf("state %s, want %s (%+v)", s.State, tc.wantState, s)
			}
			if tc.wantState == Closed {
				// Back to a clean CLOSED: it takes 7 fresh failures to degrade again.
				if st := fail(t, e.b, p, 6, verdict503); st != Closed {
					t.Fatalf("6 failures after recovery: %s, want CLOSED", st)
				}
			}
		})
	}
}

func TestStaleDegradedReadsAsClosedAndNextFailureStartsOver(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileAPIKey, nil)
	fail(t, e.b, p, 11, verdict503) // DEGRADED, one short of OPEN
	e.clock.Advance(240 * time.Second)
	d := allow(t, e.b, p)
	if !d.Allowed || d.State != Closed {
		t.Fatalf("stale DEGRADED: %+v, want allowed CLOSED", d)
	}
	if e.store.Keys() != 1 {
		t.Fatal("Allow did not drop the recovered record")
	}
	if st := fail(t, e.b, p, 1, verdict503); st != Closed {
		t.Fatalf("first failure after the quiet period: %s, want CLOSED (count restarted)", st)
	}
	if s := status(t, e.b, p); s.Failures != 1 {
		t.Fatalf("failures %d, want 1", s.Failures)
	}
}

func TestEscalationOverOpenCycles(t *testing.T) {
	// apikey: reset 30 s, multiplier 8. Each failed probe reopens with twice the period.
	want := []time.Duration{30, 60, 120, 240, 240, 240}
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileAPIKey, nil)
	fail(t, e.b, p, 12, verdict503)
	for cycle, secs := range want {
		s := status(t, e.b, p)
		if s.State != Open || s.RetryAfter != secs*time.Second || s.OpenCycles != cycle+1 {
			t.Fatalf("cycle %d: %+v, want OPEN for %ds", cycle+1, s, secs)
		}
		e.clock.Advance(secs * time.Second)
		d := allow(t, e.b, p)
		if !d.Probe {
			t.Fatalf("cycle %d: no probe after the OPEN period: %+v", cycle+1, d)
		}
		probeOutcome(t, e.b, p, d, e.clock.Now(), &verdict503) // the probe fails
	}
}

func TestEscalationKeptAcrossAQuickRecoveryAndForgottenAfterQuiet(t *testing.T) {
	tests := []struct {
		name      string
		pause     time.Duration // time between the probe's success and the next failures
		wantOpen  time.Duration // OPEN period of the next opening
		wantCycle int           // its cycle number
	}{
		{"flapping provider escalates", 10 * time.Second, 60 * time.Second, 2},
		{"quiet for 240 s since the last failure starts over", 240*time.Second - 31*time.Second, 30 * time.Second, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := provider(t, "prov", policies.ProfileAPIKey, nil)
			fail(t, e.b, p, 12, verdict503)
			e.clock.Advance(30 * time.Second)
			d := allow(t, e.b, p)
			if !d.Probe {
				t.Fatalf("no probe: %+v", d)
			}
			sent := e.clock.Now()
			e.clock.Advance(time.Second)
			if st := probeOutcome(t, e.b, p, d, sent, nil); st != Closed {
				t.Fatalf("probe success: %s, want CLOSED", st)
			}
			e.clock.Advance(tc.pause)
			fail(t, e.b, p, 12, verdict503)
			s := status(t, e.b, p)
			if s.State != Open || s.RetryAfter != tc.wantOpen || s.OpenCycles != tc.wantCycle {
				t.Fatalf("%+v, want OPEN for %v in cycle %d", s, tc.wantOpen, tc.wantCycle)
			}
		})
	}
}

func TestCooldownByKind(t *testing.T) {
	tests := []struct {
		v    failure.Verdict // the failure that trips the circuit
		want time.Duration   // first OPEN period
	}{
		{verdict503, 30 * time.Second}, // no own cooldown: reset timeout
		{failure.Verdict{Status: 504, Reason: failure.ReasonTimeout}, 10 * time.Second}, // timeout: own cooldown
		{failure.Verdict{Status: 408}, 10 * time.Second},                                // 408 is a timeout too
		{failure.Verdict{Reason: failure.ReasonTransport}, 5 * time.Second},             // transport: own cooldown
	}
	for _, tc := range tests {
		e := newEnv(t)
		p := provider(t, "prov", policies.ProfileAPIKey, func(c *Config) {
			c.CooldownByKind[KindTimeout] = 10 * time.Second
			c.CooldownByKind[KindTransport] = 5 * time.Second
		})
		fail(t, e.b, p, 11, verdict503)
		fail(t, e.b, p, 1, tc.v)
		s := status(t, e.b, p)
		if s.State != Open || s.RetryAfter != tc.want || s.LastFailureKind != p.cfg.KindOf(tc.v) {
			t.Errorf("%+v: status %+v, want OPEN for %v", tc.v, s, tc.want)
		}
		// The escalation applies to the kind's own cooldown.
		e.clock.Advance(tc.want)
		probeOutcome(t, e.b, p, allow(t, e.b, p), e.clock.Now(), &tc.v)
		if s := status(t, e.b, p); s.RetryAfter != 2*tc.want {
			t.Errorf("%+v: second cycle %v, want %v", tc.v, s.RetryAfter, 2*tc.want)
		}
	}
}

func TestLazyRefreshOfAnExpiredOpenCircuit(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileLocal, nil) // opens at 2, 15 s
	fail(t, e.b, p, 2, verdict503)
	raw, _, _, _ := e.store.Get(p.key)
	sets := e.store.Sets

	e.clock.Advance(15*time.Second - time.Millisecond)
	if d := allow(t, e.b, p); d.Allowed || d.State != Open || d.RetryAfter != time.Millisecond {
		t.Fatalf("1 ms before the end: %+v", d)
	}
	e.clock.Advance(time.Millisecond)
	s := status(t, e.b, p)
	if s.State != HalfOpen || s.RetryAfter != 0 || s.ProbeInFlight {
		t.Fatalf("Status at the end of the OPEN period: %+v, want HALF_OPEN, probe available", s)
	}
	now, _, _, _ := e.store.Get(p.key)
	if e.store.Sets != sets || !bytes.Equal(raw, now) {
		t.Fatal("Status or a rejected Allow wrote to the store")
	}
	d := allow(t, e.b, p)
	if !d.Allowed || !d.Probe || d.State != HalfOpen {
		t.Fatalf("Allow after the OPEN period: %+v, want the probe", d)
	}
	if s := status(t, e.b, p); !s.ProbeInFlight || s.RetryAfter != policies.BreakerProbeTimeout {
		t.Fatalf("status after the claim: %+v", s)
	}
}

func TestHalfOpenProbe(t *testing.T) {
	tests := []struct {
		name      string
		outcome   func(*env, Provider, Decision) // what happens to the probe
		wantState State                          // circuit state afterwards
		wantAllow bool                           // whether the next request (another worker) is allowed
		wantRetry time.Duration                  // and its RetryAfter
	}{
		{"probe succeeds: closes", func(e *env, p Provider, probe Decision) {
			probeOutcome(e.t(), e.b, p, probe, e.clock.Now(), nil)
		}, Closed, true, 0},
		{"probe fails: reopens for 30 s × 2", func(e *env, p Provider, probe Decision) {
			probeOutcome(e.t(), e.b, p, probe, e.clock.Now(), &verdict503)
		}, Open, false, 60 * time.Second},
		// guide §1: only the probe decides HALF_OPEN ("Bij succes sluit de breaker, bij
		// falen opent hij opnieuw") — not the outcome of an attempt that holds no probe.
		{"a success without the probe changes nothing", func(e *env, p Provider, _ Decision) {
			succeed(e.t(), e.b, p, 3)
		}, HalfOpen, false, policies.BreakerProbeTimeout},
		{"a failure without the probe changes nothing", func(e *env, p Provider, _ Decision) {
			fail(e.t(), e.b, p, 3, verdict503)
		}, HalfOpen, false, policies.BreakerProbeTimeout},
		{"probe still running: others wait for its claim", func(*env, Provider, Decision) {}, HalfOpen, false, policies.BreakerProbeTimeout},
		{"probe abandoned: claim lapses after the probe timeout", func(e *env, p Provider, _ Decision) { e.clock.Advance(policies.BreakerProbeTimeout) }, HalfOpen, true, 0},
		{"probe released: next request probes at once", func(e *env, p Provider, probe Decision) {
			if err := e.b.ReleaseProbe(p, probe); err != nil {
				e.t().Fatal(err)
			}
		}, HalfOpen, true, 0},
		{"a non-probe decision releases nothing", func(e *env, p Provider, _ Decision) {
			if err := e.b.ReleaseProbe(p, Decision{Allowed: true, State: Closed}); err != nil {
				e.t().Fatal(err)
			}
		}, HalfOpen, false, policies.BreakerProbeTimeout},
		{"a lapsed probe cannot release its successor's claim", func(e *env, p Provider, probe Decision) {
			e.clock.Advance(policies.BreakerProbeTimeout)
			if next := allow(e.t(), e.worker(), p); !next.Probe {
				e.t().Fatalf("no second probe after the claim lapsed: %+v", next)
			}
			if err := e.b.ReleaseProbe(p, probe); err != nil {
				e.t().Fatal(err)
			}
		}, HalfOpen, false, policies.BreakerProbeTimeout},
		{"non-counting outcome (429) without the probe changes nothing", func(e *env, p Provider, _ Decision) {
			fail(e.t(), e.b, p, 1, failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit})
		}, HalfOpen, false, policies.BreakerProbeTimeout},
		{"the probe's non-counting outcome (429) gives the probe back", func(e *env, p Provider, probe Decision) {
			probeOutcome(e.t(), e.b, p, probe, e.clock.Now(), &failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit})
		}, HalfOpen, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := provider(t, "prov", policies.ProfileAPIKey, nil)
			fail(t, e.b, p, 12, verdict503)
			e.clock.Advance(30 * time.Second)
			probe := allow(t, e.b, p)
			if !probe.Probe || !probe.Allowed {
				t.Fatalf("first request after OPEN: %+v, want the probe", probe)
			}
			tc.outcome(e, p, probe)
			if s := status(t, e.b, p); s.State != tc.wantState {
				t.Fatalf("state %s, want %s", s.State, tc.wantState)
			}
			d := allow(t, e.worker(), p)
			if d.Allowed != tc.wantAllow || d.RetryAfter != tc.wantRetry {
				t.Fatalf("next request: %+v, want allowed=%v retryAfter=%v", d, tc.wantAllow, tc.wantRetry)
			}
		})
	}
}

func TestOpenCircuitIgnoresStragglers(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileOAuth, nil)
	fail(t, e.b, p, 8, verdict503)
	before := status(t, e.b, p)
	e.clock.Advance(10 * time.Second)
	fail(t, e.b, p, 5, verdict503) // requests sent before it opened, failing late
	succeed(t, e.b, p, 5)          // and some succeeding late
	after := status(t, e.b, p)
	if after.State != Open || !after.OpenUntil.Equal(before.OpenUntil) || after.Failures != before.Failures {
		t.Fatalf("stragglers changed an OPEN circuit: before %+v after %+v", before, after)
	}
	if _, err := e.b.ConnectionTestPassed(p); err != nil {
		t.Fatal(err)
	}
	if s := status(t, e.b, p); s.State != Open {
		t.Fatalf("a connection test closed an OPEN circuit: %+v", s)
	}
}

func TestLateOutcomesDoNotDecideRecovery(t *testing.T) {
	// guide §1: HALF_OPEN lets one test request through; "bij succes sluit de breaker, bij
	// falen opent hij opnieuw". An attempt sent while the circuit was still CLOSED and
	// failing (or succeeding) late belongs to the outage, not to the recovery: it neither
	// reopens a recovering circuit (with a higher backoff) nor closes it, nor counts once
	// the probe closed it. apikey: opens at 12, 30 s.
	type step struct {
		early   bool             // the outcome is of an attempt sent before the circuit opened
		probe   bool             // the outcome is the probe's
		failure *failure.Verdict // nil = success
		state   State            // expected state afterwards
		cycles  int              // expected OPEN cycles afterwards
		fails   int              // expected failure count afterwards
	}
	v := verdict503
	tests := []struct {
		name  string
		steps []step // after the circuit opened and its OPEN period ended (HALF_OPEN, probe claimed)
	}{
		{"a late failure in HALF_OPEN is ignored; the probe's success closes", []step{
			{early: true, failure: &v, state: HalfOpen, cycles: 1, fails: 12},
			{probe: true, state: Closed, cycles: 1},
		}},
		{"a late success in HALF_OPEN is ignored; the probe's failure reopens, escalated", []step{
			{early: true, state: HalfOpen, cycles: 1, fails: 12},
			{probe: true, failure: &v, state: Open, cycles: 2, fails: 12},
		}},
		{"after the probe closed it, late outcomes count for nothing", []step{
			{probe: true, state: Closed, cycles: 1},
			{failure: &v, state: Closed, cycles: 1, fails: 1}, // a fresh failure counts
			{early: true, failure: &v, state: Closed, cycles: 1, fails: 1},
			{early: true, state: Closed, cycles: 1, fails: 1}, // a late success resets nothing
			{state: Closed, cycles: 1, fails: 0},              // a fresh one does
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := provider(t, "prov", policies.ProfileAPIKey, nil)
			early := e.clock.Now() // sent while CLOSED
			e.clock.Advance(time.Second)
			fail(t, e.b, p, 12, verdict503)
			e.clock.Advance(30 * time.Second)
			probe := allow(t, e.b, p)
			if !probe.Probe {
				t.Fatalf("no probe: %+v", probe)
			}
			sent := e.clock.Now()
			for i, st := range tc.steps {
				e.clock.Advance(time.Second)
				a := Attempt{Started: e.clock.Now()}
				switch {
				case st.early:
					a.Started = early
				case st.probe:
					a = Attempt{Started: sent, Decision: probe}
				}
				var err error
				if st.failure != nil {
					_, err = e.b.RecordFailure(p, *st.failure, a)
				} else {
					_, err = e.b.RecordSuccess(p, a)
				}
				if err != nil {
					t.Fatal(err)
				}
				if s := status(t, e.b, p); s.State != st.state || s.OpenCycles != st.cycles || s.Failures != st.fails {
					t.Fatalf("step %d: %+v, want %s, %d cycles, %d failures", i, s, st.state, st.cycles, st.fails)
				}
			}
		})
	}
}

func TestAProbeOfAnEarlierRecoveryDecidesNothing(t *testing.T) {
	// Only this recovery's probe decides HALF_OPEN: a probe claimed in an earlier HALF_OPEN
	// (its claim lapsed, another probe reopened the circuit) reporting very late is stale.
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileLocal, nil) // opens at 2, 15 s
	fail(t, e.b, p, 2, verdict503)
	e.clock.Advance(15 * time.Second)
	first := allow(t, e.b, p)
	firstSent := e.clock.Now()
	e.clock.Advance(policies.BreakerProbeTimeout) // the first probe's claim lapses
	second := allow(t, e.worker(), p)
	if !first.Probe || !second.Probe {
		t.Fatalf("probes %+v %+v", first, second)
	}
	if st := probeOutcome(t, e.b, p, second, e.clock.Now(), &verdict503); st != Open {
		t.Fatalf("second probe failed: %s, want OPEN", st)
	}
	e.clock.Advance(30 * time.Second) // cycle 2: 15 s × 2
	if st := probeOutcome(t, e.b, p, first, firstSent, nil); st != HalfOpen {
		t.Fatalf("the first probe's late success: %s, want HALF_OPEN still", st)
	}
	if d := allow(t, e.b, p); !d.Probe {
		t.Fatalf("this recovery's probe is still free: %+v", d)
	}
}

func TestProbeWithANonTripStatusIsGivenBack(t *testing.T) {
	// guide §1: the trip statuses are configurable. With 500 removed, a probe answered 500
	// is no provider-level outcome: the probe is given back at once instead of blocking the
	// provider for the 60 s probe timeout.
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileLocal, func(c *Config) { c.TripStatuses = []int{408, 502, 503, 504} })
	fail(t, e.b, p, 2, verdict503)
	e.clock.Advance(15 * time.Second)
	probe := allow(t, e.b, p)
	v500 := failure.Verdict{Status: 500, Reason: failure.ReasonServerError, Fallback: true}
	if st := probeOutcome(t, e.b, p, probe, e.clock.Now(), &v500); st != HalfOpen {
		t.Fatalf("after the probe's 500: %s, want HALF_OPEN", st)
	}
	if d := allow(t, e.worker(), p); !d.Probe || d.RetryAfter != 0 {
		t.Fatalf("next request: %+v, want the probe at once", d)
	}
}

func TestResetClearsEverything(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileOAuth, nil)
	fail(t, e.b, p, 8, verdict503)
	if err := e.b.Reset(p); err != nil {
		t.Fatal(err)
	}
	if s := status(t, e.b, p); s != (Status{Provider: "prov"}) {
		t.Fatalf("after reset: %+v", s)
	}
	if e.store.Keys() != 1 {
		t.Fatal("reset left a live record")
	}
	// The next opening is a first cycle again.
	fail(t, e.b, p, 8, verdict503)
	if s := status(t, e.b, p); s.RetryAfter != 60*time.Second || s.OpenCycles != 1 {
		t.Fatalf("after reset and 8 failures: %+v", s)
	}
}

func TestHealthyProviderKeepsNoRecord(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileOAuth, nil)
	allow(t, e.b, p)
	succeed(t, e.b, p, 3)
	if e.store.Sets != 0 {
		t.Fatalf("a healthy provider caused %d writes", e.store.Sets)
	}
	fail(t, e.b, p, 2, verdict503)
	succeed(t, e.b, p, 1) // clean CLOSED again: the record goes
	if e.store.Keys() != 1 {
		t.Fatal("a clean CLOSED provider kept a record")
	}
	if _, cas, found, _ := e.store.Get(p.key); found || cas == 0 {
		t.Fatal("record not tombstoned")
	}
}

func TestCorruptRecordReadsAsAbsentAndIsReplaced(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte // what is stored under the provider's key
	}{
		{"garbage", []byte("not a record")},
		{"wrong kind", state.NewEncoder(nil, 'X', 1).Uint(2).Bytes()},
		{"future version", state.NewEncoder(nil, recordKind, 9).Uint(2).Bytes()},
		{"truncated", record{state: Open, failures: 8, openUntil: 1 << 40}.encode()[:6]},
		{"unknown state", state.NewEncoder(nil, recordKind, recordVersion).Uint(7).Uint(0).Uint(0).Uint(0).Uint(0).Int(0).Int(0).Int(0).Bytes()},
		{"unknown kind", state.NewEncoder(nil, recordKind, recordVersion).Uint(2).Uint(0).Uint(0).Uint(1).Uint(9).Int(0).Int(0).Int(0).Bytes()},
		{"trailing bytes", append(record{state: Open}.encode(), 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := provider(t, "prov", policies.ProfileLocal, nil)
			if err := e.store.Set(p.key, tc.raw, 0); err != nil {
				t.Fatal(err)
			}
			if d := allow(t, e.b, p); !d.Allowed || d.State != Closed {
				t.Fatalf("corrupt record blocked traffic: %+v", d)
			}
			if s := status(t, e.b, p); s.State != Closed {
				t.Fatalf("status of a corrupt record: %+v", s)
			}
			if st := fail(t, e.b, p, 1, verdict503); st != Degraded {
				t.Fatalf("failure over a corrupt record: %s, want DEGRADED (count 1)", st)
			}
			if e.b.CorruptRecords() != 3 {
				t.Fatalf("corrupt reads counted %d, want 3", e.b.CorruptRecords())
			}
			if s := status(t, e.b, p); s.Failures != 1 {
				t.Fatalf("record not replaced: %+v", s)
			}
		})
	}
}

func TestDeadlinesBeyondTheConfigMeanTheClockMovedBack(t *testing.T) {
	e := newEnv(t)
	p := provider(t, "prov", policies.ProfileLocal, nil)
	fail(t, e.b, p, 2, verdict503) // OPEN until t0+15s
	e.clock.Set(t0.Add(-time.Hour))
	d := allow(t, e.b, p)
	if !d.Probe {
		t.Fatalf("OPEN deadline an hour away (longest OPEN is 2 min): %+v, want one probe to decide", d)
	}
	e.clock.Set(t0.Add(-3 * time.Hour))
	if d := allow(t, e.worker(), p); !d.Probe {
		t.Fatalf("probe claim far beyond the probe timeout: %+v, want it released", d)
	}
}

func TestStoreErrorsFailOpenAndAreWrapped(t *testing.T) {
	p := provider(t, "prov", policies.ProfileOAuth, nil)
	b := New(failingStore{}, manualclock.New(t0))
	d, err := b.Allow(p)
	if err == nil || !d.Allowed || !bytes.HasPrefix([]byte(err.Error()), []byte("breaker: ")) {
		t.Fatalf("Allow on a failing store: %+v, %v", d, err)
	}
	if _, err := b.RecordFailure(p, verdict503, Attempt{}); err == nil || !bytes.HasPrefix([]byte(err.Error()), []byte("breaker: ")) {
		t.Fatalf("RecordFailure on a failing store: %v", err)
	}
	if _, err := b.Status(p); err == nil {
		t.Fatal("Status on a failing store: no error")
	}
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errStore }
func (failingStore) Set(string, []byte, uint32) error         { return errStore }
func (failingStore) CreateCAS() (uint32, error)               { return 0, errStore }

var errStore = bytesError("store down")

type bytesError string

func (e bytesError) Error() string { return string(e) }
