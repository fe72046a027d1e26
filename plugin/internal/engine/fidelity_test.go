package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
)

// The engine's wiring of the mechanisms' issue-8 rules: each test drives the engine the way
// the filter does and would fail if the engine stopped passing a mechanism what the rule
// needs (the attempt's probe, its start, the credential fingerprint, the configured models).

// TestAProbeWithoutAVerdictIsHandedBack: only the probe's provider-level outcome decides
// HALF_OPEN (guide §1: "bij succes sluit de breaker, bij falen opent hij opnieuw"). A probe
// whose attempt ends any other way — a stream stall (guide §2: never the breaker's), an
// account-level failure (a 429, guide §1: "NIET trippen bij fouten op accountniveau"), a
// missing model, a 500 the provider's tripStatuses leave out — gives the probe back at once,
// so the next request probes instead of the provider staying out for the probe's 60 s
// timeout.
func TestAProbeWithoutAVerdictIsHandedBack(t *testing.T) {
	notFound := Outcome{Status: 404, Body: []byte(`{"error":{"message":"The model 'm1' does not exist","code":"model_not_found"}}`)}
	serverError := Outcome{Status: 500, Body: []byte(`{"error":{"message":"internal","type":"server_error"}}`)}
	for _, c := range []struct {
		name       string   // how the probe's attempt ends
		resilience string   // the policy's resilience block
		outcome    *Outcome // nil: a stream stall (RecordStall)
		next       string   // the next request's fate: "probe", "circuit_open" or "closed"
	}{
		{name: "stream stall", next: "probe"},
		{name: "429 rate limit", outcome: &rateLimited, next: "probe"},
		{name: "404 missing model", outcome: &notFound, next: "probe"},
		{name: "500 with 500 left out of tripStatuses", outcome: &serverError, next: "probe",
			resilience: "resilience: {providerBreaker: {tripStatuses: [408, 502, 503, 504]}}\n"},
		// The controls: a provider-level failure reopens the circuit, a success closes it.
		{name: "503 (a trip status)", outcome: &overloaded, next: "circuit_open"},
		{name: "500 (a trip status by default)", outcome: &serverError, next: "circuit_open"},
		{name: "200", outcome: &Outcome{Status: 200}, next: "closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := acmePolicy(c.resilience)
			f := newFixture(t, yaml)
			pv := &f.e.providers[0]
			for i := 0; i < 12; i++ { // apikey: OPEN at 12 provider-level failures, for 30 s
				if _, err := f.e.breakers.RecordKind(pv.breaker, breaker.KindServerError, breaker.Attempt{}); err != nil {
					t.Fatal(err)
				}
			}
			f.clock.Advance(30 * time.Second)
			probe, err := f.e.Dispatch(f.target(t, "acme", "acme-a", "m1"))
			if err != nil || !probe.probe.Probe {
				t.Fatalf("probe: %+v %v", probe, err)
			}
			if c.outcome == nil {
				f.e.RecordStall(probe)
				f.e.Release(probe)
			} else {
				f.e.Finish(probe, *c.outcome, nil)
			}
			next, err := f.peer(t, yaml).Dispatch(f.target(t, "acme", "acme-b", "m1"))
			switch c.next {
			case "probe":
				if err != nil || !next.probe.Probe {
					t.Fatalf("another worker's request after the probe ended without a verdict: %+v %v, want the probe at once", next.probe, err)
				}
			case "circuit_open":
				assertExcluded(t, err, "acme-b", combo.ReasonCircuitOpen)
			case "closed":
				if err != nil || next.probe.Probe || next.probe.State != breaker.Closed {
					t.Fatalf("after the probe's success: %+v %v, want CLOSED", next.probe, err)
				}
			}
		})
	}
}

// TestARotatedCredentialStartsClean: terminal states last "totdat de credentials wijzigen"
// (guide §2), and lockouts are tied to the credential the same way (issue 8: lockouts
// survived a key rotation). A worker whose policy carries new credentials, over the same
// shared data, routes both connections again; one with the old credentials does not.
func TestARotatedCredentialStartsClean(t *testing.T) {
	yaml := acmePolicy("resilience: {modelLockout: {enabled: true}}\n")
	f := newFixture(t, yaml)
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), creditsGone) // terminal
	failOn(t, f.e, f.target(t, "acme", "acme-b", "m1"), overloaded)  // locks m1 on acme-b
	same := f.peer(t, yaml)
	plan, err := same.Plan("acme-only", f.apiOf("acme-only"), affinity.Key{}, &Buffers{})
	if err != nil || len(plan.Targets) != 0 {
		t.Fatalf("same credentials: %v targets %d, want both excluded (%+v)", err, len(plan.Targets), plan.Excluded)
	}
	if got := fmt.Sprint(excludedReasons(plan)); got != "map[acme-a:terminal acme-b:model_lockout]" {
		t.Fatalf("same credentials: exclusions %s", got)
	}
	rotated := strings.NewReplacer(`"Bearer a"`, `"Bearer a2"`, `"Bearer b"`, `"Bearer b2"`).Replace(string(yaml))
	plan, err = f.peer(t, []byte(rotated)).Plan("acme-only", f.apiOf("acme-only"), affinity.Key{}, &Buffers{})
	if err != nil || len(plan.Targets) != 2 {
		t.Fatalf("rotated credentials: %v, targets %d excluded %+v, want both connections clean", err, len(plan.Targets), plan.Excluded)
	}
}

// TestASuccessFromBeforeALockoutLeavesIt: success decay (guide §3) applies only to what the
// success vouches for. An attempt sent before the model was locked, succeeding after, says
// nothing about the model since: the lockout stays (issue 8: it halved the count to zero and
// unlocked the model), as the connection cooldown already ignores such successes.
func TestASuccessFromBeforeALockoutLeavesIt(t *testing.T) {
	f := newFixture(t, acmePolicy("resilience: {modelLockout: {enabled: true}}\n"))
	a := f.target(t, "acme", "acme-a", "m1")
	early, err := f.e.Dispatch(a)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	late, err := f.e.Dispatch(a)
	if err != nil {
		t.Fatal(err)
	}
	f.e.Finish(late, overloaded, nil) // 503: locks m1 exactly on acme-a for 120 s
	f.clock.Advance(time.Second)
	f.e.Finish(early, Outcome{Status: 200}, nil)
	plan := f.plan(t, "acme-only", affinity.Key{})
	if x := excludedReasons(plan)["acme-a"]; x != combo.ReasonModelLockout {
		t.Fatalf("after the early success: acme-a %q (targets %v), want still locked", x, f.names(plan))
	}
	// A success sent after the lockout does release it (count 1 halves to 0).
	pv := &f.e.providers[a.Provider]
	if err := pv.lockout.RecordSuccess(pv.conns[a.Connection].lockout, "m1", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if x := excludedReasons(f.plan(t, "acme-only", affinity.Key{}))["acme-a"]; x != "" {
		t.Fatalf("after a later success: acme-a %q, want released", x)
	}
}

// TestInventedModelsCannotDisplaceAConfiguredLockout: on a glob route every model name a
// client invents reaches the lockout (guide §3: provider + connection + model). The engine
// tells the lockout which models the policy routes by name, so invented names share a
// bounded pool: 200 junk 404s neither grow shared data past it nor remove the configured
// model's real lockout (issue 8: 64 junk 404s removed a real 120 s lockout).
func TestInventedModelsCannotDisplaceAConfiguredLockout(t *testing.T) {
	f := newFixture(t, []byte(`
providers:
  - id: acme
    cluster: acme
    connections:
      - {id: acme-a, credential: {header: authorization, value: "Bearer a"}}
routes:
  - model: m1
    targets: [{provider: acme}]
  - model: "junk-*"
    targets: [{provider: acme}]
resilience: {modelLockout: {enabled: true}}
`))
	missing := func(model string) Outcome {
		return Outcome{Status: 404, Body: []byte(`{"error":{"message":"The model '` + model + `' does not exist","code":"model_not_found"}}`)}
	}
	tg := Target{Provider: 0, Connection: 0}
	tg.Model = "m1"
	failOn(t, f.e, tg, missing("m1"))
	var keys int
	for i := 0; i < 200; i++ {
		f.clock.Advance(10 * time.Millisecond) // every junk lockout ends after the real one
		tg.Model = fmt.Sprintf("junk-%03d", i)
		failOn(t, f.e, tg, missing(tg.Model))
		if i == lockout.InventedSlots+4 {
			keys = f.store.Keys()
		}
	}
	if n := f.store.Keys(); n != keys {
		t.Fatalf("shared data grew from %d to %d keys over invented model names", keys, n)
	}
	plan := f.plan(t, "m1", affinity.Key{})
	if len(plan.Excluded) != 1 || plan.Excluded[0].Reason != combo.ReasonModelLockout ||
		plan.Excluded[0].RetryAfter != 120*time.Second-2*time.Second {
		t.Fatalf("m1 after 200 invented 404s: targets %v excluded %+v, want its 120 s lockout intact", f.names(plan), plan.Excluded)
	}
}

// TestJunkNamesCannotDisplaceAGlobServedModelsLockout: issue 18 — a model served only through
// a glob route is a name the policy never spells, so its lockout shares the connection's pool
// with every name clients invent, and "the 16th junk name evicts a live 2-minute lockout".
// The model served a request here first, then hit a rate limit (guide §3: locked 120 s);
// junk names that the provider refuses as unknown — after it, or filling the pool before it
// — leave that lockout intact.
func TestJunkNamesCannotDisplaceAGlobServedModelsLockout(t *testing.T) {
	const real = "claude-sonnet-4-5"
	missing := func(model string) Outcome {
		return Outcome{Status: 404, Body: []byte(`{"type":"error","error":{"type":"not_found_error","message":"model: ` + model + `"}}`)}
	}
	limited := func(string) Outcome {
		return Outcome{Status: 429, Body: []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}`)}
	}
	for _, tc := range []struct {
		name          string
		before, after int                        // junk names failing before and after the real model's 429
		junk          func(model string) Outcome // how the provider fails each junk name
		reason        failure.Reason             // its classification
	}{
		{"16 junk names after the lockout", 0, lockout.InventedSlots, missing, failure.ReasonNotFound},
		{"16 junk names fill the pool first, 16 more after", lockout.InventedSlots, lockout.InventedSlots, missing, failure.ReasonNotFound},
		// Only the worker's memory that the provider served the model tells it apart from
		// junk the provider rate-limits as well.
		{"32 junk names the provider rate-limits too", 0, 2 * lockout.InventedSlots, limited, failure.ReasonRateLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []byte(`
providers:
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
      - {id: anthropic-a, credential: {header: x-api-key, value: "k"}}
routes:
  - model: "claude-*"
    targets: [{provider: anthropic}]
resilience: {modelLockout: {enabled: true}}
`))
			junk := func(n int, prefix string) {
				for i := range n {
					f.clock.Advance(10 * time.Millisecond) // every junk lockout ends after the real one
					model := fmt.Sprintf("claude-%s-%02d", prefix, i)
					plan := f.plan(t, model, affinity.Key{})
					if r := f.attempt(t, plan, tc.junk(model)); r.Verdict.Reason != tc.reason {
						t.Fatalf("%s: verdict %+v", model, r.Verdict)
					}
				}
			}
			f.attempt(t, f.plan(t, real, affinity.Key{}), Outcome{Status: 200}) // the provider serves it
			junk(tc.before, "junk-before")
			lockedAt := f.clock.Now()
			if r := f.attempt(t, f.plan(t, real, affinity.Key{}), limited(real)); !r.Effects.Locked {
				t.Fatalf("the real model's 429 did not lock it: %+v", r.Effects)
			}
			junk(tc.after, "junk-after")
			lock, locked, err := f.e.providers[0].lockout.Locked(f.e.providers[0].conns[0].lockout, real)
			if err != nil || !locked || !lock.Until.Equal(lockedAt.Add(120*time.Second)) {
				t.Fatalf("%s after junk: lockout %+v locked=%v (%v), want its 120 s lockout from %v intact", real,
					lock, locked, err, lockedAt)
			}
		})
	}
}

// TestATruncatedStreamLocksOnlyItsModel: a stream that ended without its terminal event is
// Spillway's verdict on a bad stream, recorded as a synthesised 502 at the exact model's
// scope (guide §3: "Elke andere status — ... OmniRoute's eigen gesynthetiseerde 502 uit
// kwaliteitsvalidatie — vergrendelt alleen de exacte provider/connection/model-tuple"). With
// the model lockout taking it, the connection keeps serving its other models; without, the
// connection cools. Never the breaker's: the provider answered.
func TestATruncatedStreamLocksOnlyItsModel(t *testing.T) {
	for _, c := range []struct {
		name       string       // the lockout settings
		resilience string       // the policy's resilience block
		excluded   combo.Reason // acme-a for m1 afterwards
		otherModel bool         // acme-a still serves m2
	}{
		{"lockout off: the connection cools", "", combo.ReasonUnavailable, false},
		{"lockout on: the exact model is locked", "resilience: {modelLockout: {enabled: true}}\n", combo.ReasonModelLockout, true},
		{"lockout on without 502 among its errorCodes: the connection cools",
			"resilience: {modelLockout: {enabled: true, errorCodes: [429]}}\n", combo.ReasonUnavailable, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(c.resilience))
			d, err := f.e.Dispatch(f.target(t, "acme", "acme-a", "m1"))
			if err != nil {
				t.Fatal(err)
			}
			f.e.Record(d, Outcome{Status: 200}, nil) // the stream's start went to the client
			if r := f.e.RecordTruncation(d); r.Errors != nil || r.Verdict.Reason != "stream_truncated" {
				t.Fatalf("truncation: %+v", r)
			}
			f.e.Release(d)
			plan := f.plan(t, "m1", affinity.Key{})
			var m1, m2 combo.Reason // why acme-a is excluded for each model ("" = planned)
			for _, x := range plan.Excluded {
				switch {
				case x.Connection == "acme-a" && x.Model == "m1":
					m1 = x.Reason
				case x.Connection == "acme-a" && x.Model == "m2":
					m2 = x.Reason
				}
			}
			if m1 != c.excluded || (m2 == "") != c.otherModel {
				t.Fatalf("after the truncation: acme-a m1 %q, m2 %q; want m1 %q, m2 served=%v", m1, m2, c.excluded, c.otherModel)
			}
			if st, _ := f.e.breakers.Status(f.e.providers[0].breaker); st.Failures != 0 {
				t.Fatalf("breaker counted a truncation: %+v", st)
			}
		})
	}
}

// TestFailoverAfterAMissingModelMayUseTheConnectionsNextModel: same-request failover skips
// what the request's failure exhausted (issue 8). A failure about the model alone — the body
// names a missing or retired model — exhausted that model, not the connection (guide
// "Foutopsporing": "slechts één model faalt → model-lockout, niet connection-cooldown"), so
// the route's next model on the same connection is tried; a bare 404, which may be the
// connection's own (a wrong base URL), and a server error move the request off the
// connection.
func TestFailoverAfterAMissingModelMayUseTheConnectionsNextModel(t *testing.T) {
	for _, c := range []struct {
		name       string  // the failure of acme-a for m1
		resilience string  // the policy's resilience block
		outcome    Outcome // its outcome
		sameConn   bool    // the same request may then send m2 to acme-a
	}{
		{"404 naming the model, lockout off", "", Outcome{Status: 404,
			Body: []byte(`{"error":{"message":"The model 'm1' does not exist","code":"model_not_found"}}`)}, true},
		{"404 naming the model, lockout on", "resilience: {modelLockout: {enabled: true}}\n", Outcome{Status: 404,
			Body: []byte(`{"error":{"message":"The model 'm1' does not exist","code":"model_not_found"}}`)}, true},
		{"410 retired model", "", Outcome{Status: 410,
			Body: []byte(`{"error":{"message":"The model m1 is no longer available"}}`)}, true},
		{"bare 404", "", Outcome{Status: 404, Body: []byte(`404 page not found`)}, false},
		{"503", "", overloaded, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(c.resilience))
			plan := f.plan(t, "m1", affinity.Key{})
			if got := f.names(plan); len(got) < 2 || got[0] != "acme/acme-a/m1" || got[1] != "acme/acme-a/m2" {
				t.Fatalf("plan %v", got)
			}
			d, err := f.e.Dispatch(plan.Targets[0])
			if err != nil {
				t.Fatal(err)
			}
			if r := f.e.Finish(d, c.outcome, &plan); !r.Verdict.Fallback {
				t.Fatalf("verdict %+v, want a fallback", r.Verdict)
			}
			_, err = f.e.Dispatch(plan.Targets[1]) // acme-a, for m2
			if c.sameConn && err != nil {
				t.Fatalf("failover to acme-a for m2 after a failure of m1 alone: %v", err)
			}
			if !c.sameConn {
				assertExcluded(t, err, "acme-a", combo.ReasonUnavailable)
			}
		})
	}
}

// TestAClientChosenNameCannotLockARealModel: issue 18 — "no client input can … bypass the
// policy". Guide §3 widens a 404 to the bare model and a 403 to the quota family; under a
// glob route the failing name is the client's, so a 404 for claude-x/claude-sonnet-4-5 took
// claude-sonnet-4-5 out of routing for every client for 120 s. Spillway's rule (the lockout
// package doc): a name with no evidence that it is real locks only itself; a metered failure
// (a 429 rate limit) keeps the guide's family scope, whatever the name.
func TestAClientChosenNameCannotLockARealModel(t *testing.T) {
	const policy = `
providers:
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
      - {id: anthropic-a, credential: {header: x-api-key, value: "k"}}
  - id: openai
    cluster: openai
    quotaFamilies: {"gpt-5*": "gpt-5"}
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer k"}}
routes:
  - model: claude-sonnet-4-5
    targets: [{provider: anthropic}]
  - model: "claude-*"
    targets: [{provider: anthropic}]
  - model: gpt-5-mini
    targets: [{provider: openai}]
  - model: "gpt-5*"
    targets: [{provider: openai}]
resilience: {modelLockout: {enabled: true}}
`
	// Without the configured claude route, claude-sonnet-4-5 is a name only the glob passes.
	globOnly := strings.Replace(policy, "  - model: claude-sonnet-4-5\n    targets: [{provider: anthropic}]\n", "", 1)
	missing := Outcome{Status: 404, Body: []byte(`{"type":"error","error":{"type":"not_found_error","message":"model: claude-x/claude-sonnet-4-5"}}`)}
	forbidden := Outcome{Status: 403, Body: []byte(`{"error":{"message":"Forbidden"}}`)}
	limited := Outcome{Status: 429, Body: []byte(`{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)}
	cases := []struct {
		name   string
		policy string
		served bool           // the real model served a request first
		real   string         // the real model
		junk   string         // the client's name
		fail   Outcome        // how the provider fails it
		reason failure.Reason // its classification
		locked bool           // the real model is locked afterwards
	}{
		{"404 of a prefixed name spares the configured model", policy, false, "claude-sonnet-4-5", "claude-x/claude-sonnet-4-5", missing, failure.ReasonNotFound, false},
		{"404 of a prefixed name spares a model served through the glob", globOnly, true, "claude-sonnet-4-5", "claude-x/claude-sonnet-4-5", missing, failure.ReasonNotFound, false},
		{"403 of a junk name spares its quota family", policy, false, "gpt-5-mini", "gpt-5-junk", forbidden, failure.ReasonAuthError, false},
		{"429 of a junk name locks its quota family (metered)", policy, false, "gpt-5-mini", "gpt-5-junk", limited, failure.ReasonRateLimit, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []byte(tc.policy))
			if tc.served {
				f.attempt(t, f.plan(t, tc.real, affinity.Key{}), Outcome{Status: 200})
			}
			r := f.attempt(t, f.plan(t, tc.junk, affinity.Key{}), tc.fail)
			if r.Verdict.Reason != tc.reason || !r.Effects.Locked {
				t.Fatalf("%s: verdict %+v effects %+v, want %s and locked", tc.junk, r.Verdict, r.Effects, tc.reason)
			}
			lockedOut := func(model string) bool {
				plan := f.plan(t, model, affinity.Key{})
				out := len(plan.Targets) == 0 && len(plan.Excluded) == 1 && plan.Excluded[0].Reason == combo.ReasonModelLockout
				if !out && (len(plan.Targets) != 1 || len(plan.Excluded) != 0) {
					t.Fatalf("%s: targets %v excluded %+v, want one target either locked out or eligible", model, f.names(plan), plan.Excluded)
				}
				return out
			}
			if !lockedOut(tc.junk) {
				t.Fatalf("%s itself is not locked out", tc.junk)
			}
			if got := lockedOut(tc.real); got != tc.locked {
				t.Fatalf("%s after the failure of %s: locked out %v, want %v", tc.real, tc.junk, got, tc.locked)
			}
		})
	}
}
