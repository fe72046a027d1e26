package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/plugin/internal/selection"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixture is an engine on the demo policy (or another) over a MemStore and a manual clock.
type fixture struct {
	e     *Engine
	store *state.MemStore
	clock *manualclock.Clock
	buf   Buffers
}

func newFixture(t testing.TB, yaml []byte, edits ...func(*policies.Policy)) *fixture {
	t.Helper()
	p, err := policyfile.Parse(yaml, policies.ParseOptions{LookupEnv: func(name string) (string, bool) {
		return "test-value-of-" + name, true
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range edits {
		edit(p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	f := &fixture{store: state.NewMemStore(), clock: manualclock.New(start)}
	if f.e, err = New(p, f.store, f.clock, Options{Random: rand.NewPCG(1, 2)}); err != nil {
		t.Fatal(err)
	}
	return f
}

// apiOf is the API a test request for model is written in: that of the route's first
// target's provider (a client asks a route in the API its targets speak).
func (f *fixture) apiOf(model string) policies.API {
	if rr, ok := f.e.res.Route(model); ok && len(rr.Targets) > 0 {
		return f.e.res.Providers[rr.Targets[0].Provider].API
	}
	return policies.APIOpenAI
}

// noLockout turns the demo's model lockout off, so connection-level behaviour shows alone.
func noLockout(p *policies.Policy) {
	off := false
	p.Resilience.ModelLockout.Enabled = &off
}

// names renders a plan's targets as provider/connection/model.
func (f *fixture) names(p Plan) []string {
	var out []string
	for _, t := range p.Targets {
		pv := f.e.res.Providers[t.Provider]
		out = append(out, pv.ID+"/"+pv.Connections[t.Connection].ID+"/"+t.Model)
	}
	return out
}

func (f *fixture) plan(t *testing.T, model string, session affinity.Key) Plan {
	t.Helper()
	p, err := f.e.Plan(model, f.apiOf(model), session, &f.buf)
	if err != nil {
		t.Fatal(err)
	}
	if p.Degraded != nil {
		t.Fatalf("plan degraded: %v", p.Degraded)
	}
	return p
}

// attempt dispatches to the plan's first target and finishes it with the outcome.
func (f *fixture) attempt(t *testing.T, p Plan, o Outcome) Result {
	t.Helper()
	if len(p.Targets) == 0 {
		t.Fatal("no eligible target")
	}
	d, err := f.e.Dispatch(p.Targets[0])
	if err != nil || d.Waiting {
		t.Fatalf("dispatch: %v waiting=%v", err, d.Waiting)
	}
	r := f.e.Finish(d, o, &p)
	if r.Errors != nil {
		t.Fatalf("finish: %v", r.Errors)
	}
	return r
}

func excludedReasons(p Plan) map[string]combo.Reason {
	out := map[string]combo.Reason{}
	for _, x := range p.Excluded {
		out[x.Connection] = x.Reason
	}
	return out
}

func TestPlanOrdersTheDemoCombo(t *testing.T) {
	f := newFixture(t, examples.Demo())
	p := f.plan(t, "gpt-4o", affinity.Key{})
	want := []string{"openai/openai-a/gpt-4o", "openai/openai-b/gpt-4o", "openrouter/openrouter-a/openai/gpt-4o"}
	if got := f.names(p); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("targets %v, want %v (priority order, openrouter maps the model)", got, want)
	}
	if _, err := f.e.Plan("no-such-model", policies.APIOpenAI, affinity.Key{}, &f.buf); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("unrouted model: %v, want ErrNoRoute", err)
	}
	if p := f.plan(t, "claude-3-haiku", affinity.Key{}); len(p.Targets) != 1 || p.Targets[0].Model != "claude-3-haiku" {
		t.Fatalf("glob route: %v", f.names(p))
	}
}

func TestLockedModelSparesTheConnectionsOtherModels(t *testing.T) {
	f := newFixture(t, examples.Demo()) // model lockout on
	p := f.plan(t, "gpt-4o", affinity.Key{})
	r := f.attempt(t, p, Outcome{Status: 429, Body: []byte(`{"error":{"message":"Rate limit reached for gpt-4o","code":"rate_limit_exceeded"}}`)})
	if r.Verdict.Scope != failure.ScopeQuotaFamily {
		t.Fatalf("verdict %+v", r.Verdict)
	}
	p2 := f.plan(t, "gpt-4o", affinity.Key{})
	if excludedReasons(p2)["openai-a"] != combo.ReasonModelLockout {
		t.Fatalf("gpt-4o on openai-a not locked: %v", p2.Excluded)
	}
	// The same key still serves another model.
	p3 := f.plan(t, "gpt-4o-mini", affinity.Key{})
	if len(p3.Targets) != 2 {
		t.Fatalf("gpt-4o-mini lost a key to gpt-4o's lockout: %v excluded %v", f.names(p3), p3.Excluded)
	}
}

func TestRateLimitCoolsOnlyThatConnection(t *testing.T) {
	f := newFixture(t, examples.Demo(), noLockout)
	p := f.plan(t, "gpt-4o-mini", affinity.Key{})
	first := f.names(p)[0]
	// An API-key 429 with Retry-After: the connection cools for the upstream's hint while
	// the other key serves.
	r := f.attempt(t, p, Outcome{Status: 429, Headers: [][2]string{{"retry-after", "20"}},
		Body: []byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)})
	if r.Verdict.Reason != failure.ReasonRateLimit || !r.Verdict.Fallback {
		t.Fatalf("verdict %+v", r.Verdict)
	}
	p2 := f.plan(t, "gpt-4o-mini", affinity.Key{})
	if len(p2.Targets) != 1 || f.names(p2)[0] == first {
		t.Fatalf("after 429 on %s: targets %v", first, f.names(p2))
	}
	if len(p2.Excluded) != 1 || p2.Excluded[0].RetryAfter <= 0 || !p2.Excluded[0].Transient {
		t.Fatalf("exclusion %+v", p2.Excluded)
	}
	// The breaker did not count an account-level 429.
	st, _ := f.e.breakers.Status(f.e.providers[0].breaker)
	if st.Failures != 0 {
		t.Fatalf("breaker counted a 429: %+v", st)
	}
	if p2.Excluded[0].Reason != combo.ReasonUnavailable || p2.Excluded[0].RetryAfter > 20*time.Second {
		t.Fatalf("exclusion %+v, want unavailable for the 20 s hint", p2.Excluded[0])
	}
	// Lazy recovery: once the hint passes, both keys are eligible again.
	f.clock.Advance(21 * time.Second)
	if p3 := f.plan(t, "gpt-4o-mini", affinity.Key{}); len(p3.Targets) != 2 {
		t.Fatalf("after the cooldown: %v excluded %v", f.names(p3), p3.Excluded)
	}
}

func TestServerErrorsOpenTheProviderBreaker(t *testing.T) {
	f := newFixture(t, examples.Demo(), noLockout)
	// apikey profile opens at 12 provider-level failures, one every 50 s here: openai-a
	// serves while its cooldown (3 s doubling) is shorter than that, then openai-b serves
	// while openai-a cools (up to 192 s by the twelfth), and OpenRouter never does. Each
	// failure comes well inside the breaker's quiet period, so every one counts toward the
	// threshold.
	for i := 0; i < 12; i++ {
		if i > 0 {
			f.clock.Advance(50 * time.Second)
		}
		p := f.plan(t, "gpt-4o", affinity.Key{})
		if f.names(p)[0] == "openrouter/openrouter-a/openai/gpt-4o" {
			t.Fatalf("openai skipped after only %d failures (excluded %v)", i, p.Excluded)
		}
		f.attempt(t, p, Outcome{Status: 503, Body: []byte(`upstream overloaded`)})
	}
	p := f.plan(t, "gpt-4o", affinity.Key{})
	if got := f.names(p); len(got) != 1 || got[0] != "openrouter/openrouter-a/openai/gpt-4o" {
		t.Fatalf("after 12 failures: %v (excluded %v)", got, p.Excluded)
	}
	for conn, reason := range excludedReasons(p) {
		if reason != combo.ReasonCircuitOpen {
			t.Errorf("%s excluded for %s, want circuit_open", conn, reason)
		}
	}
	// After the 30 s reset timeout the provider is HALF_OPEN: it plans again, but only one
	// dispatch gets the probe; a second worker's dispatch is refused until the probe ends.
	f.clock.Advance(31 * time.Second)
	p = f.plan(t, "gpt-4o", affinity.Key{})
	if f.names(p)[0] != "openai/openai-b/gpt-4o" && f.names(p)[0] != "openai/openai-a/gpt-4o" {
		t.Fatalf("HALF_OPEN provider not planned: %v", f.names(p))
	}
	probe, err := f.e.Dispatch(p.Targets[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Dispatch(p.Targets[0]); !errors.Is(err, ErrTargetUnavailable) {
		t.Fatalf("second dispatch during the probe: %v, want ErrTargetUnavailable", err)
	}
	if p := f.plan(t, "gpt-4o", affinity.Key{}); excludedReasons(p)["openai-b"] != combo.ReasonCircuitOpen {
		t.Fatalf("plan during the probe: %v excluded %v", f.names(p), p.Excluded)
	}
	// The probe succeeds: the circuit closes and both keys serve again.
	f.e.Finish(probe, Outcome{Status: 200}, nil)
	if st, _ := f.e.breakers.Status(f.e.providers[0].breaker); st.State.String() != "CLOSED" {
		t.Fatalf("after a successful probe: %v", st.State)
	}
}

func TestTerminalStateExcludesUntilReset(t *testing.T) {
	f := newFixture(t, examples.Demo())
	p := f.plan(t, "claude-sonnet-4", affinity.Key{})
	r := f.attempt(t, p, Outcome{Status: 400, Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`)})
	if r.Verdict.Terminal != failure.TerminalCreditsExhausted {
		t.Fatalf("verdict %+v", r.Verdict)
	}
	f.clock.Advance(48 * time.Hour)
	p2 := f.plan(t, "claude-sonnet-4", affinity.Key{})
	if len(p2.Targets) != 0 || excludedReasons(p2)["anthropic-a"] != combo.ReasonTerminal {
		t.Fatalf("terminal connection still routed: %v %v", f.names(p2), p2.Excluded)
	}
	d := f.e.AllExcluded(&p2, combo.Progress{})
	if d.Outcome == combo.OutcomeWait {
		t.Fatalf("waits on a terminal state: %+v", d)
	}
}

func TestAllTargetsCoolingWaitsThenAnswers429(t *testing.T) {
	f := newFixture(t, examples.Demo(), noLockout)
	// Cool every key of the round-robin gpt-4o-mini combo with short 429s (Retry-After 5).
	for i := 0; i < 2; i++ {
		p := f.plan(t, "gpt-4o-mini", affinity.Key{})
		f.attempt(t, p, Outcome{Status: 429, Headers: [][2]string{{"retry-after", "5"}}, Body: []byte(`{"error":{"message":"Rate limit","code":"rate_limit_exceeded"}}`)})
	}
	p := f.plan(t, "gpt-4o-mini", affinity.Key{})
	if len(p.Targets) != 0 || len(p.Excluded) != 2 {
		t.Fatalf("targets %v excluded %v", f.names(p), p.Excluded)
	}
	d := f.e.AllExcluded(&p, combo.Progress{})
	if d.Outcome != combo.OutcomeWait || d.Wait <= 0 || d.Wait > 5*time.Second {
		t.Fatalf("decision %+v, want a wait within the upstream's 5 s hint", d)
	}
	// With comboCooldownWait's attempts spent, the answer is 429 rate_limit_error with the
	// earliest reset.
	d = f.e.AllExcluded(&p, combo.Progress{Attempts: 99})
	if d.RetryAfter <= 0 || d.RetryAfter > 5*time.Second {
		t.Fatalf("decision %+v, want the earliest reset, within 5 s", d)
	}
	reply, ok := d.Reply("gpt-4o-mini", p.Excluded)
	if !ok || reply.Status != 429 || reply.Code != replies.CodeRateLimit {
		t.Fatalf("reply %+v ok=%v, want 429 %s", reply, ok, replies.CodeRateLimit)
	}
}

func TestSessionAffinityPinsTheConnection(t *testing.T) {
	f := newFixture(t, examples.Demo())
	key, err := affinity.NewKey("gpt-4o-mini", "session-42")
	if err != nil {
		t.Fatal(err)
	}
	p := f.plan(t, "gpt-4o-mini", key)
	pinned := f.names(p)[0]
	f.attempt(t, p, Outcome{Status: 200, TTFB: 80 * time.Millisecond})
	// Round-robin would rotate to the other key; the session stays.
	for i := 0; i < 3; i++ {
		p := f.plan(t, "gpt-4o-mini", key)
		if !p.Pinned || f.names(p)[0] != pinned {
			t.Fatalf("request %d: %v pinned=%v, want %s first", i, f.names(p), p.Pinned, pinned)
		}
		f.attempt(t, p, Outcome{Status: 200})
	}
}

func TestConcurrencyCapQueuesTheThirdRequest(t *testing.T) {
	f := newFixture(t, examples.Demo())
	// openai-b has maxConcurrent 2.
	target := Target{Provider: 0, Connection: 1, Model: "gpt-4o-mini"}
	var held []Dispatch
	for i := 0; i < 2; i++ {
		d, err := f.e.Dispatch(target)
		if err != nil || d.Waiting {
			t.Fatalf("dispatch %d: %v waiting=%v", i, err, d.Waiting)
		}
		held = append(held, d)
	}
	third, err := f.e.Dispatch(target)
	if err != nil || !third.Waiting {
		t.Fatalf("third: %v waiting=%v, want queued", err, third.Waiting)
	}
	if r := f.e.Finish(held[0], Outcome{Status: 200}, nil); !r.Waiters.Any() {
		t.Fatal("release did not report the waiter")
	}
	third, err = f.e.TryDispatch(third)
	if err != nil || third.Waiting {
		t.Fatalf("third after a release: %v waiting=%v", err, third.Waiting)
	}
	// openai-b's queue budget is 2 s (rateLimitOverrides): a fourth waits, then times out.
	fourth, _ := f.e.Dispatch(target)
	f.clock.Advance(3 * time.Second)
	if _, err := f.e.TryDispatch(fourth); !errors.Is(err, admission.ErrQueueTimeout) {
		t.Fatalf("fourth after 3 s: %v, want queue timeout", err)
	}
}

func TestRestatementBeforeClassification(t *testing.T) {
	f := newFixture(t, examples.Agentrouter())
	model := f.e.res.Routes[0].Model
	p := f.plan(t, model, affinity.Key{})
	r := f.attempt(t, p, Outcome{Status: 403, Body: []byte(`{"error":{"message":"用户额度不足"}}`)})
	if !r.Restatement.Restated || r.Restatement.Status != 429 || r.Verdict.Status != 429 {
		t.Fatalf("restatement %+v verdict %+v", r.Restatement, r.Verdict)
	}
}

// benchPolicy has 1,000 connections over 10 providers and a route of 3 targets, each
// naming one connection.
func benchPolicy(b *testing.B) []byte {
	var sb strings.Builder
	sb.WriteString(`{"providers":[`)
	for p := 0; p < 10; p++ {
		if p > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"id":"p%d","profile":"apikey","cluster":"c%d","connections":[`, p, p)
		for c := 0; c < 100; c++ {
			if c > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"id":"p%d-c%d","credential":{"header":"authorization","value":"Bearer k%d"}}`, p, c, c)
		}
		sb.WriteString("]}")
	}
	sb.WriteString(`],"routes":[{"model":"bench","strategy":"priority","targets":[` +
		`{"provider":"p3","connection":"p3-c17"},{"provider":"p7","connection":"p7-c99"},{"provider":"p0","connection":"p0-c0"}]}]}`)
	return []byte(sb.String())
}

func BenchmarkPlan3Of1000Connections(b *testing.B) {
	f := newFixture(b, benchPolicy(b))
	if _, err := f.e.Plan("bench", policies.APIOpenAI, affinity.Key{}, &f.buf); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := f.e.Plan("bench", policies.APIOpenAI, affinity.Key{}, &f.buf)
		if err != nil || len(p.Targets) != 3 {
			b.Fatal(err, len(p.Targets))
		}
	}
}

func BenchmarkDispatchAndFinishSuccess(b *testing.B) {
	f := newFixture(b, benchPolicy(b))
	p, _ := f.e.Plan("bench", policies.APIOpenAI, affinity.Key{}, &f.buf)
	t := p.Targets[0]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := f.e.Dispatch(t)
		if err != nil {
			b.Fatal(err)
		}
		f.e.Finish(d, Outcome{Status: 200}, nil)
	}
}

func BenchmarkFinishFailure(b *testing.B) {
	f := newFixture(b, benchPolicy(b))
	p, _ := f.e.Plan("bench", policies.APIOpenAI, affinity.Key{}, &f.buf)
	// Each iteration is a request of its own: a target without the plan's request memory,
	// which would skip the connection once it failed.
	t := Target{Provider: p.Targets[0].Provider, Connection: p.Targets[0].Connection, Model: p.Targets[0].Model}
	o := Outcome{Status: 429, Headers: [][2]string{{"retry-after", "2"}},
		Body: []byte(`{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, _ := f.e.Dispatch(t)
		f.e.Finish(d, o, nil)
		f.clock.Advance(time.Minute)
	}
}

// TestPolicyVocabularyMatchesTheEngine keeps the policy's lists of names (which the
// policies package cannot import from the engine) in step with the engine's own.
func TestPolicyVocabularyMatchesTheEngine(t *testing.T) {
	for _, name := range policies.FailureKinds {
		if _, err := breaker.ParseKind(name); err != nil {
			t.Errorf("policy failure kind %q: %v", name, err)
		}
	}
	if got, want := fmt.Sprint(policies.RuleReasons), fmt.Sprint(errorrules.RuleReasons); got != want {
		t.Errorf("rule reasons: policies %v, errorrules %v", got, want)
	}
	if got, want := fmt.Sprint(policies.RuleScopes), fmt.Sprint(errorrules.RuleScopes); got != want {
		t.Errorf("rule scopes: policies %v, errorrules %v", got, want)
	}
	for _, s := range policies.Strategies {
		if _, err := selection.ParseStrategy(string(s)); err != nil {
			t.Errorf("policy strategy %q: %v", s, err)
		}
	}
}

// A request that waits for a concurrency slot must not hold the provider's single HALF_OPEN
// probe while it waits: another worker with a free connection probes meanwhile.
func TestQueuedRequestDoesNotHoldTheProbe(t *testing.T) {
	f := newFixture(t, examples.Demo(), noLockout)
	openaiB := Target{Provider: 0, Connection: 1, Model: "gpt-4o-mini"} // maxConcurrent 2
	openaiA := Target{Provider: 0, Connection: 0, Model: "gpt-4o-mini"}
	for i := 0; i < 2; i++ { // fill openai-b while the provider is healthy
		if d, err := f.e.Dispatch(openaiB); err != nil || d.Waiting {
			t.Fatalf("fill %d: %v waiting=%v", i, err, d.Waiting)
		}
	}
	pv := &f.e.providers[0]
	for i := 0; i < 12; i++ { // open the circuit (apikey: 12 failures)...
		if _, err := f.e.breakers.RecordKind(pv.breaker, breaker.KindServerError, breaker.Attempt{}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(31 * time.Second) // ...and let it become HALF_OPEN
	queued, err := f.e.Dispatch(openaiB)
	if err != nil || !queued.Waiting {
		t.Fatalf("openai-b at its cap: %v waiting=%v, want queued", err, queued.Waiting)
	}
	probe, err := f.e.Dispatch(openaiA)
	if err != nil {
		t.Fatalf("openai-a could not probe while openai-b's request waits: %v", err)
	}
	if !probe.probe.Probe {
		t.Fatal("openai-a's dispatch does not hold the probe")
	}
	// A second request granted a slot while the probe is out is refused and gives its slot back.
	before, _ := f.e.admitter.Inspect(pv.conns[0].admit, "gpt-4o-mini")
	if _, err := f.e.Dispatch(openaiA); !errors.Is(err, ErrTargetUnavailable) {
		t.Fatalf("second dispatch during the probe: %v, want ErrTargetUnavailable", err)
	}
	after, _ := f.e.admitter.Inspect(pv.conns[0].admit, "gpt-4o-mini")
	if after.InFlight != before.InFlight {
		t.Fatalf("the refused dispatch kept a slot: in flight %d -> %d", before.InFlight, after.InFlight)
	}
}

// BenchmarkDispatchAndFinishSuccessCached is BenchmarkDispatchAndFinishSuccess through the
// filter's per-VM cache, which makes every record a dispatch reads a memory hit once the
// plan has read it.
func BenchmarkDispatchAndFinishSuccessCached(b *testing.B) {
	p, err := policyfile.Parse(benchPolicy(b), policies.ParseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cache := state.NewCache(state.NewMemStore(), nil)
	e, err := New(p, cache, manualclock.New(start), Options{Random: rand.NewPCG(1, 2)})
	if err != nil {
		b.Fatal(err)
	}
	var buf Buffers
	if err := cache.Refresh(); err != nil {
		b.Fatal(err)
	}
	plan, _ := e.Plan("bench", policies.APIOpenAI, affinity.Key{}, &buf)
	t := plan.Targets[0]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := e.Dispatch(t)
		if err != nil {
			b.Fatal(err)
		}
		e.Finish(d, Outcome{Status: 200}, nil)
	}
}

// BenchmarkRequestSuccessCached is one request's whole success path on the demo policy the
// way the filter runs it — refresh the per-VM cache, plan gpt-4o, dispatch to the first
// target (a capped connection: a lease taken and given back), record a 200, release — on
// clean state with the cache warm.
func BenchmarkRequestSuccessCached(b *testing.B) {
	p, err := policyfile.Parse(examples.Demo(), policies.ParseOptions{LookupEnv: func(string) (string, bool) { return "k", true }})
	if err != nil {
		b.Fatal(err)
	}
	cache := state.NewCache(state.NewMemStore(), state.IsLive)
	e, err := New(p, cache, manualclock.New(start), Options{Random: rand.NewPCG(1, 2)})
	if err != nil {
		b.Fatal(err)
	}
	var buf Buffers
	request := func() {
		if err := cache.Refresh(); err != nil {
			b.Fatal(err)
		}
		plan, err := e.Plan("gpt-4o", policies.APIOpenAI, affinity.Key{}, &buf)
		if err != nil || len(plan.Targets) == 0 {
			b.Fatal(err, plan.Excluded)
		}
		d, err := e.Dispatch(plan.Targets[0])
		if err != nil || !d.Lease.Held() {
			b.Fatal(err)
		}
		if r := e.Finish(d, Outcome{Status: 200, TTFB: time.Millisecond}, &plan); r.Errors != nil {
			b.Fatal(r.Errors)
		}
	}
	request()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		request()
	}
}

// TestAnEchoedMarkerLeavesTheConnectionActive: issue 18. A client names, under the demo's
// claude-* glob, a model whose name is Anthropic's credit-exhaustion text; Anthropic's 404
// echoes the name. With what the client sent (Outcome.Sent) the 404 is the model-not-found
// it is, the connection serves the next request; the control, recorded without it, is the
// terminal credits_exhausted the same body is when the phrase is the provider's own.
func TestAnEchoedMarkerLeavesTheConnectionActive(t *testing.T) {
	const junk = "claude-x your credit balance is too low"
	body := []byte(`{"type":"error","error":{"type":"not_found_error","message":"model: ` + junk + `"}}`)
	sent := textscan.Sent{Body: []byte(`{"model":"` + junk + `","max_tokens":5,"messages":[]}`)}
	for _, tc := range []struct {
		name     string         // what the row shows
		sent     textscan.Sent  // what the client sent, as the filter passes it
		terminal bool           // the connection ends terminal
		reason   failure.Reason // the verdict's reason
	}{
		{"echoed", sent, false, failure.ReasonNotFound},
		{"control: nothing known of the request", textscan.Sent{}, true, failure.ReasonCreditsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, examples.Demo())
			r := f.attempt(t, f.plan(t, junk, affinity.Key{}), Outcome{Status: 404, Body: body, Sent: tc.sent})
			if r.Verdict.Reason != tc.reason || (r.Verdict.Terminal != failure.TerminalNone) != tc.terminal {
				t.Fatalf("verdict %+v, want %s (terminal %v)", r.Verdict, tc.reason, tc.terminal)
			}
			next, err := f.e.Plan("claude-sonnet-4", f.apiOf("claude-sonnet-4"), affinity.Key{}, &f.buf)
			if err != nil {
				t.Fatal(err)
			}
			terminal := excludedReasons(next)["anthropic-a"] == combo.ReasonTerminal
			if served := len(next.Targets) > 0; terminal != tc.terminal || served == tc.terminal {
				t.Fatalf("the next request's plan %v excluded %v; want anthropic-a terminal: %v", f.names(next), next.Excluded, tc.terminal)
			}
		})
	}
}

// TestEchoedResetTextSetsNoCooldown: issue 18's class. A client plants "try again in 86400s"
// in its prompt and the provider's 429 quotes it. Read as the provider's hint, it cools the
// connection for as long as any hint may (rate limit) or, with quota wording, makes the 429
// an exhausted quota locked for the day it names. With what the client sent (Outcome.Sent)
// the echo is no hint: the 429 is the rate limit it is, and the connection cools for the
// apikey profile's base cooldown, 3 s (guide §2). The controls, recorded without it, show
// the day-long text read as the provider's own.
func TestEchoedResetTextSetsNoCooldown(t *testing.T) {
	const planted = "try again in 86400s"
	sent := textscan.Sent{Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + planted + `"}]}`)}
	rateLimit := []byte(`{"error":{"message":"Rate limit reached for gpt-4o-mini. Input: '` + planted + `'","type":"requests","code":"rate_limit_exceeded"}}`)
	quota := []byte(`{"error":{"message":"You exceeded your current quota. Input: '` + planted + `'","type":"requests"}}`)
	for _, tc := range []struct {
		name     string         // what the row shows
		body     []byte         // the provider's 429
		sent     textscan.Sent  // what the client sent, as the filter passes it
		reason   failure.Reason // the verdict's reason
		min, max time.Duration  // the bounds of the connection's cooldown, as the next plan reports it
	}{
		{"rate limit, echoed", rateLimit, sent, failure.ReasonRateLimit, time.Second, 3 * time.Second},
		{"rate limit, control: nothing known of the request", rateLimit, textscan.Sent{}, failure.ReasonRateLimit, 29 * time.Minute, 24 * time.Hour},
		{"quota wording, echoed", quota, sent, failure.ReasonRateLimit, time.Second, 3 * time.Second},
		{"quota wording, control: nothing known of the request", quota, textscan.Sent{}, failure.ReasonQuotaExhausted, 23 * time.Hour, 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, examples.Demo(), noLockout)
			p := f.plan(t, "gpt-4o-mini", affinity.Key{})
			first := p.Targets[0].Connection
			r := f.attempt(t, p, Outcome{Status: 429, Body: tc.body, Sent: tc.sent})
			if r.Verdict.Reason != tc.reason {
				t.Fatalf("verdict %+v, want %s", r.Verdict, tc.reason)
			}
			next := f.plan(t, "gpt-4o-mini", affinity.Key{})
			name := f.e.res.Providers[p.Targets[0].Provider].Connections[first].ID
			for _, x := range next.Excluded {
				if x.Connection == name {
					t.Logf("%s: %s, cools for %v", name, r.Verdict.Reason, x.RetryAfter)
					if x.RetryAfter < tc.min || x.RetryAfter > tc.max {
						t.Fatalf("%s cools for %v, want within [%v, %v]", name, x.RetryAfter, tc.min, tc.max)
					}
					return
				}
			}
			t.Fatalf("%s not excluded after its 429: %+v", name, next.Excluded)
		})
	}
}
