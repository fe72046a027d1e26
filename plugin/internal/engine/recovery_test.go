package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
)

// The recovery probe (issue 19, Spillway's deviation from the guide): when every target of a
// request cools for a server error, one request in the process may go to the connection
// whose cooldown ends soonest. The numbers are the guide's (§2): an API key's base cooldown
// is 3 s, doubled per failure ("baseCooldownMs * 2 ** failureIndex"); §1: an API-key
// provider's breaker opens at 12 failures. The claim deadline is the breaker's probe
// timeout, 60 s (Spillway's documented choice; the guide is silent).

// recoveryPolicy: provider acme with two API keys, provider other with one. Its resilience
// block is the argument.
func recoveryPolicy(resilience string) []byte {
	return []byte(`
providers:
  - id: acme
    profile: apikey
    cluster: acme
    connections:
      - {id: acme-a, credential: {header: authorization, value: "Bearer a"}}
      - {id: acme-b, credential: {header: authorization, value: "Bearer b"}}
  - id: other
    profile: apikey
    cluster: other
    connections:
      - {id: other-a, credential: {header: authorization, value: "Bearer o"}}
routes:
  - model: m1
    targets: [{provider: acme, model: m1}]
  - model: m2
    targets: [{provider: other, model: m1}]
` + resilience)
}

// Upstream failures as providers send them.
var (
	serverDown  = Outcome{Status: 503, Body: []byte(`{"error":{"message":"upstream unavailable","type":"server_error"}}`)}
	gatewayDown = Outcome{Status: 502, Body: []byte(`bad gateway`)}
	noResponse  = Outcome{Status: 0}
	dailyQuota  = Outcome{Status: 429, Body: []byte(`{"error":{"message":"daily rate limit exceeded"}}`)}
	badKey      = Outcome{Status: 401, Body: []byte(`{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`)}
	forbidden   = Outcome{Status: 403, Body: []byte(`{"error":{"message":"forbidden"}}`)}
	capacity    = Outcome{Status: 529, Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}
	served      = Outcome{Status: 200}
)

// acmeKeys are provider acme's two connections serving m1.
func (f *fixture) acmeKeys(t *testing.T) []Target {
	return []Target{f.target(t, "acme", "acme-a", "m1"), f.target(t, "acme", "acme-b", "m1")}
}

// climb records o on every target steps times, each time once the previous cooldown ran
// out: an outage's first steps of the ladder (for a server error 3 s, 6 s, 12 s, …).
func (f *fixture) climb(t *testing.T, o Outcome, steps int, targets ...Target) {
	t.Helper()
	for step := 0; step < steps; step++ {
		if step > 0 {
			f.waitAvailable(t, targets...)
		}
		for _, tg := range targets {
			failOn(t, f.e, tg, o)
		}
	}
}

// settle moves the clock in 100 ms steps until every target's connection is available
// again, for at most 2 minutes.
func (f *fixture) settle(targets ...Target) bool {
	for i := 0; i < 1200; i++ {
		free := true
		for _, tg := range targets {
			pv := &f.e.providers[tg.Provider]
			if av, _ := pv.cooldown.Check(pv.conns[tg.Connection].cooldown); !av.Available() {
				free = false
			}
		}
		if free {
			return true
		}
		f.clock.Advance(100 * time.Millisecond)
	}
	return false
}

// waitAvailable is settle that fails the test when the connections keep cooling.
func (f *fixture) waitAvailable(t *testing.T, targets ...Target) {
	t.Helper()
	if !f.settle(targets...) {
		t.Fatal("the connections kept cooling for 2 minutes")
	}
}

// probeOf returns the plan's recovery probe target, or false when the plan has none.
func probeOf(p Plan) (Target, bool) {
	if len(p.Targets) == 1 && p.Targets[0].probe {
		return p.Targets[0], true
	}
	return Target{}, false
}

// cooling returns the time left on a target's connection cooldown (0 when available).
func (f *fixture) cooling(t *testing.T, e *Engine, tg Target) time.Duration {
	t.Helper()
	pv := &e.providers[tg.Provider]
	av, err := pv.cooldown.Check(pv.conns[tg.Connection].cooldown)
	if err != nil {
		t.Fatal(err)
	}
	return av.RetryAfter
}

// Which cooldowns a probe may go past: server errors only (guide §1's provider-level
// failures), never a 429, quota, auth or capacity cooldown, nor a mix in which one target
// cools for such a reason. (A concurrency-limit 429 cools 1 s, never one base cooldown.)
func TestRecoveryProbeOnlyForServerErrorCooldowns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		a, b  Outcome // what acme-a and acme-b failed with, twice (see climb)
		probe bool    // a request then gets a probe, one base cooldown (3 s) later
	}{
		{name: "503 on both", a: serverDown, b: serverDown, probe: true},
		{name: "502 and no response", a: gatewayDown, b: noResponse, probe: true},
		{name: "429 rate limit", a: rateLimited, b: rateLimited},
		{name: "daily quota", a: dailyQuota, b: dailyQuota},
		{name: "401 bad key", a: badKey, b: badKey},
		{name: "403", a: forbidden, b: forbidden},
		{name: "overloaded model (529)", a: capacity, b: capacity},
		{name: "503 and a 429", a: serverDown, b: rateLimited},
		{name: "503 and a daily quota", a: serverDown, b: dailyQuota},
		{name: "503 and a bad key", a: serverDown, b: badKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, recoveryPolicy(""))
			keys := f.acmeKeys(t)
			for step := 0; step < 2; step++ { // climb, with a reason per key
				if step > 0 {
					f.settle(keys...) // a quota cools until its reset: the second failure overlaps
				}
				failOn(t, f.e, keys[0], tc.a)
				failOn(t, f.e, keys[1], tc.b)
			}
			f.clock.Advance(3 * time.Second)
			plan := f.plan(t, "m1", affinity.Key{})
			if len(plan.Excluded) != 2 {
				t.Fatalf("plan %v excluded %+v: want both keys still cooling 3 s after their second failure", f.names(plan), plan.Excluded)
			}
			tg, ok := probeOf(plan)
			if ok != tc.probe {
				t.Fatalf("plan %v (excluded %+v): probe %v, want %v", f.names(plan), plan.Excluded, ok, tc.probe)
			}
			if !ok {
				if len(plan.Targets) != 0 {
					t.Fatalf("plan %v, want no target", f.names(plan))
				}
				return
			}
			d, err := f.e.Dispatch(tg)
			if err != nil || !d.recovery.Held() {
				t.Fatalf("dispatch of the probe: %v (claim %+v)", err, d.recovery)
			}
		})
	}
}

// The claim is exclusive across worker VMs: two Engines over one store plan the probe at the
// same moment, one wins it and the other's request gets today's 503; while the probe is in
// flight no other request probes, even past one base cooldown; a failed probe escalates its
// key, and the next probe goes to the key whose cooldown ends soonest, one base cooldown
// after the last claim and never sooner.
func TestRecoveryProbeIsExclusiveAcrossWorkersAndSpaced(t *testing.T) {
	for _, winner := range []int{0, 1} {
		yaml := recoveryPolicy("")
		f := newFixture(t, yaml)
		engines := []*Engine{f.e, f.peer(t, yaml)}
		keys := f.acmeKeys(t)
		f.climb(t, serverDown, 3, keys...) // failures at 0, 3 and 9 s: both keys cool 12 s from 9 s
		f.clock.Advance(3 * time.Second)   // 12 s: each key's cooldown has run one base cooldown

		var bufs [2]Buffers
		var plans [2]Plan
		for i, e := range engines {
			p, err := e.Plan("m1", "openai", affinity.Key{}, &bufs[i])
			if err != nil {
				t.Fatal(err)
			}
			if tg, ok := probeOf(p); !ok || tg.Connection != keys[0].Connection {
				t.Fatalf("worker %d: plan %v excluded %+v, want the probe on acme-a (a tie goes to the first)", i, f.names(p), p.Excluded)
			}
			plans[i] = p
		}
		won, err := engines[winner].Dispatch(plans[winner].Targets[0])
		if err != nil || !won.recovery.Held() {
			t.Fatalf("winner: %v %+v", err, won.recovery)
		}
		loser := 1 - winner
		_, err = engines[loser].Dispatch(plans[loser].Targets[0])
		var ex *ExcludedError
		if !errors.As(err, &ex) || ex.Exclusion.Reason != combo.ReasonUnavailable || ex.Exclusion.RetryAfter != 9*time.Second {
			t.Fatalf("loser's dispatch: %v, want the target excluded as cooling for 9 s more", err)
		}
		if dec := engines[loser].AllExcluded(&plans[loser], combo.Progress{}); dec.Outcome != combo.OutcomeCoolingDown {
			t.Fatalf("loser's decision %+v, want 503 all_targets_cooling_down", dec)
		}

		// 15 s: one base cooldown after the claim, the probe still in flight: no second
		// probe on either worker.
		f.clock.Advance(3 * time.Second)
		for i, e := range engines {
			if p, _ := e.Plan("m1", "openai", affinity.Key{}, &bufs[i]); len(p.Targets) != 0 {
				t.Fatalf("worker %d: plan while the probe is in flight: %v", i, f.names(p))
			}
		}
		if r := engines[winner].Finish(won, serverDown, &plans[winner]); r.Errors != nil {
			t.Fatal(r.Errors)
		}
		// The failed probe escalated acme-a as the next failure of its ladder would:
		// failureIndex 3, 3 s × 2³ = 24 s from now. acme-b still cools until 21 s.
		if got := f.cooling(t, f.e, keys[0]); got != 24*time.Second {
			t.Fatalf("acme-a cools %v after its failed probe, want 24 s", got)
		}
		p, _ := engines[loser].Plan("m1", "openai", affinity.Key{}, &bufs[loser])
		tg, ok := probeOf(p)
		if !ok || tg.Connection != keys[1].Connection {
			t.Fatalf("plan after the failed probe: %v excluded %+v, want the probe on acme-b (ends soonest)", f.names(p), p.Excluded)
		}
		d, err := engines[loser].Dispatch(tg)
		if err != nil || !d.recovery.Held() {
			t.Fatalf("second probe: %v", err)
		}
		claimed := f.clock.Now()
		if r := engines[loser].Finish(d, serverDown, &p); r.Errors != nil {
			t.Fatal(r.Errors)
		}
		// At most one probe per provider per base cooldown: none 2.9 s after the claim,
		// the next at 3 s.
		f.clock.Set(claimed.Add(2900 * time.Millisecond))
		for i, e := range engines {
			if p, _ := e.Plan("m1", "openai", affinity.Key{}, &bufs[i]); len(p.Targets) != 0 {
				t.Fatalf("worker %d: plan 2.9 s after a probe: %v", i, f.names(p))
			}
		}
		f.clock.Set(claimed.Add(3 * time.Second))
		if p, _ := engines[winner].Plan("m1", "openai", affinity.Key{}, &bufs[winner]); !isProbe(p) {
			t.Fatalf("plan 3 s after a probe: %v excluded %+v, want the next probe", f.names(p), p.Excluded)
		}
	}
}

func isProbe(p Plan) bool { _, ok := probeOf(p); return ok }

// A probe whose outcome never comes (its VM died) holds the claim until its deadline, the
// breaker's probe timeout (60 s), and not a moment longer; a probe given up (Abandon) ends
// its claim at once, and the next comes one base cooldown after it was claimed. The claim is
// the provider's: another provider probes meanwhile.
func TestALostProbesClaimFreesAfterItsDeadline(t *testing.T) {
	// A 503 that a rule cools for 120 s, so the keys still cool past the deadline.
	yaml := recoveryPolicy(`
resilience:
  providerErrorRules:
    - {id: long-outage, provider: acme, status: 503, reason: server_error, scope: connection, cooldownMs: 120000}
    - {id: long-outage-other, provider: other, status: 503, reason: server_error, scope: connection, cooldownMs: 120000}
`)
	f := newFixture(t, yaml)
	peer := f.peer(t, yaml)
	keys := f.acmeKeys(t)
	other := f.target(t, "other", "other-a", "m1")
	for _, tg := range append(keys, other) {
		failOn(t, f.e, tg, serverDown)
	}
	f.clock.Advance(3 * time.Second)
	plan := f.plan(t, "m1", affinity.Key{})
	tg, ok := probeOf(plan)
	if !ok {
		t.Fatalf("plan %v excluded %+v, want a probe", f.names(plan), plan.Excluded)
	}
	lost, err := f.e.Dispatch(tg)
	if err != nil || !lost.recovery.Held() {
		t.Fatalf("probe: %v", err)
	}
	claimed := f.clock.Now()
	// The other provider's claim is its own.
	var ob Buffers
	op, err := peer.Plan("m2", "openai", affinity.Key{}, &ob)
	if err != nil || !isProbe(op) {
		t.Fatalf("other provider's plan during acme's probe: %v %+v", err, op.Excluded)
	}
	var buf Buffers
	for _, at := range []time.Duration{3 * time.Second, 30 * time.Second, 59900 * time.Millisecond} {
		f.clock.Set(claimed.Add(at))
		if p, _ := peer.Plan("m1", "openai", affinity.Key{}, &buf); len(p.Targets) != 0 {
			t.Fatalf("%v after the lost probe's claim: plan %v, want none (the claim holds)", at, f.names(p))
		}
	}
	f.clock.Set(claimed.Add(60 * time.Second))
	p, _ := peer.Plan("m1", "openai", affinity.Key{}, &buf)
	next, ok := probeOf(p)
	if !ok {
		t.Fatalf("at the lost claim's deadline: plan %v excluded %+v, want a probe", f.names(p), p.Excluded)
	}
	d, err := peer.Dispatch(next)
	if err != nil || !d.recovery.Held() {
		t.Fatalf("probe after the deadline: %v", err)
	}
	// The lost probe's late outcome ends nothing of the new claim.
	if r := f.e.Finish(lost, serverDown, &plan); r.Errors != nil {
		t.Fatal(r.Errors)
	}
	f.clock.Advance(3 * time.Second)
	if p, _ := f.e.Plan("m1", "openai", affinity.Key{}, &buf); len(p.Targets) != 0 {
		t.Fatalf("plan while the new probe is in flight: %v", f.names(p))
	}
	// Given up: the claim ends at once (here already a base cooldown after it was made).
	if _, err := peer.Abandon(d); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.e.Plan("m1", "openai", affinity.Key{}, &buf); !isProbe(p) {
		t.Fatalf("plan after the probe was abandoned: %v excluded %+v, want a probe", f.names(p), p.Excluded)
	}
}

// The probe's success clears its connection, as any success does, and the provider's other
// connections cooling for a server error recorded before the probe was sent — the provider's
// service is back — but never a sibling cooling for a 429, nor a failure recorded after the
// probe was sent.
func TestARecoveryProbesSuccessLiftsTheProvidersServerErrorCooldowns(t *testing.T) {
	yaml := []byte(`
providers:
  - id: acme
    profile: apikey
    cluster: acme
    connections:
      - {id: acme-a, credential: {header: authorization, value: "Bearer a"}}
      - {id: acme-b, credential: {header: authorization, value: "Bearer b"}}
      - {id: acme-c, credential: {header: authorization, value: "Bearer c"}}
      - {id: acme-d, credential: {header: authorization, value: "Bearer d"}}
routes:
  - model: m1
    targets: [{provider: acme, connection: acme-a, model: m1}]
`)
	f := newFixture(t, yaml)
	a, b := f.target(t, "acme", "acme-a", "m1"), f.target(t, "acme", "acme-b", "m1")
	c, dk := f.target(t, "acme", "acme-c", "m1"), f.target(t, "acme", "acme-d", "m1")
	f.climb(t, serverDown, 2, a, c) // 6 s cooldowns
	failOn(t, f.e, b, rateLimited)  // 20 s (its Retry-After)
	f.clock.Advance(3 * time.Second)
	plan := f.plan(t, "m1", affinity.Key{})
	tg, ok := probeOf(plan)
	if !ok {
		t.Fatalf("plan %v excluded %+v, want a probe", f.names(plan), plan.Excluded)
	}
	d, err := f.e.Dispatch(tg)
	if err != nil || !d.recovery.Held() {
		t.Fatalf("probe: %v", err)
	}
	f.clock.Advance(time.Second)
	failOn(t, f.e, dk, serverDown) // acme-d fails after the probe was sent: 3 s
	if r := f.e.Finish(d, served, &plan); r.Errors != nil {
		t.Fatal(r.Errors)
	}
	for _, tc := range []struct {
		name    string
		tg      Target
		cooling bool // still cooling after the probe's success
	}{
		{"the probed key", a, false},
		{"a sibling cooling for a 503 since before the probe", c, false},
		{"a sibling cooling for a 429", b, true},
		{"a sibling whose 503 came after the probe was sent", dk, true},
	} {
		if got := f.cooling(t, f.e, tc.tg) > 0; got != tc.cooling {
			t.Errorf("%s: cooling %v, want %v", tc.name, got, tc.cooling)
		}
	}
}

// A probe's server error counts for neither the breaker nor the provider cooldown gate: a
// 40 s outage probed once per base cooldown must not open the breaker (guide §1: an API-key
// provider opens at 12 failures), whose OPEN period the probe is there to shorten. Only the
// ladder's own failures count.
func TestRecoveryProbeFailuresDoNotOpenTheBreaker(t *testing.T) {
	f := newFixture(t, recoveryPolicy(""))
	ordinary, probes := 0, 0
	for i := 0; i < 400; i++ { // a request every 100 ms for 40 s, every attempt a 503
		p, _ := f.e.Plan("m1", "openai", affinity.Key{}, &f.buf)
		if len(p.Targets) > 0 {
			d, err := f.e.Dispatch(p.Targets[0])
			if err != nil {
				t.Fatalf("at %v: dispatch %v", f.clock.Now().Sub(start), err)
			}
			if d.recovery.Held() {
				probes++
			} else {
				ordinary++
			}
			if r := f.e.Finish(d, serverDown, &p); r.Errors != nil {
				t.Fatal(r.Errors)
			}
		}
		f.clock.Advance(100 * time.Millisecond)
	}
	if ordinary+probes < 12 {
		t.Fatalf("%d ordinary attempts and %d probes: fewer than the 12 failures that open the breaker", ordinary, probes)
	}
	st, err := f.e.breakers.Status(f.e.providers[0].breaker)
	if err != nil {
		t.Fatal(err)
	}
	if st.State == breaker.Open || st.Failures != ordinary {
		t.Fatalf("breaker %s with %d failures after %d ordinary failures and %d probes, want it closed with %d",
			st.State, st.Failures, ordinary, probes, ordinary)
	}
}

// At most one probe per provider per base cooldown (3 s), and none before a cooldown has run
// for one: along an outage whose 503s a rule cools for 120 s, so only these two rules space
// the probes.
func TestRecoveryProbesAreSpacedByOneBaseCooldown(t *testing.T) {
	f := newFixture(t, recoveryPolicy(`
resilience:
  providerErrorRules:
    - {id: long-outage, provider: acme, status: 503, reason: server_error, scope: connection, cooldownMs: 120000}
`))
	keys := f.acmeKeys(t)
	for _, tg := range keys {
		failOn(t, f.e, tg, serverDown)
	}
	for _, step := range []struct {
		at    time.Duration // since the keys failed
		probe string        // the key probed then ("" = no probe), which fails
	}{
		{at: 2900 * time.Millisecond},           // the cooldowns ran less than 3 s
		{at: 3 * time.Second, probe: "acme-a"},  // the first probe
		{at: 3 * time.Second},                   // acme-b is ready, the provider was just probed
		{at: 5900 * time.Millisecond},           // 2.9 s after the claim
		{at: 6 * time.Second, probe: "acme-b"},  // 3 s after it: acme-b ends soonest now
		{at: 8900 * time.Millisecond},           // 2.9 s after that claim
		{at: 9 * time.Second, probe: "acme-a"},  // both escalated (120 s × 2): acme-a ends first
		{at: 12*time.Second - time.Millisecond}, // 1 ms short of 3 s after it
		{at: 12 * time.Second, probe: "acme-b"}, // acme-a escalated again (× 4)
	} {
		f.clock.Set(start.Add(step.at))
		p := f.plan(t, "m1", affinity.Key{})
		tg, ok := probeOf(p)
		got := ""
		if ok {
			got = f.e.res.Providers[tg.Provider].Connections[tg.Connection].ID
		} else if len(p.Targets) > 0 {
			t.Fatalf("at %v: ordinary targets %v", step.at, f.names(p))
		}
		if got != step.probe {
			t.Fatalf("at %v: probe %q, want %q", step.at, got, step.probe)
		}
		if ok {
			f.attempt(t, p, serverDown)
		}
	}
}
