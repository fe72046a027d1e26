package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// Two policies (two WasmPlugins in one proxy, which Istio gives one shared-data map) name
// one upstream account differently. Policy A calls the provider openai and its key a1, cap
// 1; policy B calls the same cluster and authority oai and the same key b-main, cap 3. Each
// also has a second key of its own.
const (
	policyA = `
providers:
  - id: openai
    cluster: openai-egress
    authority: api.openai.com
    connections:
      - {id: a1, credential: {header: authorization, value: "Bearer sk-shared"}, maxConcurrent: 1}
      - {id: a2, credential: {header: authorization, value: "Bearer sk-only-a"}}
routes:
  - model: gpt-4o
    targets: [{provider: openai, connection: a1}]
  - model: gpt-4o-mini
    strategy: round-robin
    targets: [{provider: openai, connection: a2}, {provider: openai, connection: a1}]
resilience:
  requestQueue: {maxQueueDepth: 1}
`
	policyB = `
providers:
  - id: oai
    cluster: openai-egress
    authority: api.openai.com
    connections:
      - {id: b-main, credential: {header: authorization, value: "Bearer sk-shared"}, maxConcurrent: 3}
      - {id: b-spare, credential: {header: authorization, value: "Bearer sk-only-b"}}
routes:
  - model: gpt-4o
    targets: [{provider: oai, connection: b-main}]
  - model: gpt-4o-mini
    strategy: round-robin
    targets: [{provider: oai, connection: b-spare}, {provider: oai, connection: b-main}]
resilience:
  requestQueue: {maxQueueDepth: 1}
`
)

// twoPolicies is one process: engines for A and B (plugins named a and b, as Istio names
// WasmPlugins <namespace>.<name>) over one shared store and clock.
type twoPolicies struct {
	store *state.MemStore
	clock *manualclock.Clock
	a, b  *Engine
}

func newTwoPolicies(t *testing.T, yamlA, yamlB string, edits ...func(*policies.Policy)) *twoPolicies {
	t.Helper()
	tp := &twoPolicies{store: state.NewMemStore(), clock: manualclock.New(start)}
	tp.a = tp.engine(t, yamlA, "istio-system.spillway-a", edits...)
	tp.b = tp.engine(t, yamlB, "team-b.spillway-b", edits...)
	return tp
}

func (tp *twoPolicies) engine(t *testing.T, yaml, plugin string, edits ...func(*policies.Policy)) *Engine {
	t.Helper()
	p, err := policyfile.Parse([]byte(yaml), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range edits {
		edit(p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	e, err := New(p, tp.store, tp.clock, Options{PluginName: plugin})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// targetOf names a connection of e's policy.
func targetOf(t *testing.T, e *Engine, connection, model string) Target {
	t.Helper()
	pv, cn, ok := e.res.Connection(connection)
	if !ok {
		t.Fatalf("no connection %s", connection)
	}
	return Target{Provider: pv.Index, Connection: cn.Index, Model: model}
}

// planned lists the connection ids a plan of model on e would try, in order.
func planned(t *testing.T, e *Engine, model string) []string {
	t.Helper()
	p, err := e.Plan(model, policies.APIOpenAI, affinity.Key{}, &Buffers{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tg := range p.Targets {
		ids = append(ids, e.res.Providers[tg.Provider].Connections[tg.Connection].ID)
	}
	return ids
}

// A 429 on the key, recorded through either policy, cools the key for both; a tripped
// circuit of the upstream is open for both; a policy's other key, and the same key at
// another upstream, are untouched. An admin reset through B's API clears A's view too.
func TestTwoPoliciesOnOneKeyShareItsAccountFacts(t *testing.T) {
	t.Run("rate limit", func(t *testing.T) {
		tp := newTwoPolicies(t, policyA, policyB)
		failOn(t, tp.a, targetOf(t, tp.a, "a1", "gpt-4o"), rateLimited)
		if got := planned(t, tp.b, "gpt-4o"); len(got) != 0 {
			t.Fatalf("B plans %v after A's 429 on the shared key, want b-main excluded", got)
		}
		if got := planned(t, tp.b, "gpt-4o-mini"); len(got) != 1 || got[0] != "b-spare" {
			t.Fatalf("B plans %v for its round-robin route, want its own key b-spare alone", got)
		}
		// B's operator resets its provider: the shared record is cleared for A too.
		if _, err := tp.b.Reset("oai"); err != nil {
			t.Fatal(err)
		}
		if got := planned(t, tp.a, "gpt-4o"); len(got) != 1 || got[0] != "a1" {
			t.Fatalf("A plans %v after B's reset of the shared key, want a1", got)
		}
	})
	t.Run("circuit", func(t *testing.T) {
		tp := newTwoPolicies(t, policyA, policyB)
		tg := targetOf(t, tp.b, "b-spare", "gpt-4o-mini")
		for i := 0; i < 12; i++ { // apikey profile: open at 12 (REFERENCE, breaker.failureThreshold)
			failOn(t, tp.b, tg, overloaded)
		}
		if got := planned(t, tp.a, "gpt-4o-mini"); len(got) != 0 {
			t.Fatalf("A plans %v with the upstream's circuit open through B, want nothing", got)
		}
	})
	t.Run("other upstream", func(t *testing.T) {
		tp := newTwoPolicies(t, policyA, policyB, func(p *policies.Policy) {
			if p.Providers[0].ID == "oai" {
				p.Providers[0].Authority = "eu.api.openai.com" // the same credential at another host
			}
		})
		failOn(t, tp.a, targetOf(t, tp.a, "a1", "gpt-4o"), rateLimited)
		if got := planned(t, tp.b, "gpt-4o"); len(got) != 1 || got[0] != "b-main" {
			t.Fatalf("B plans %v: a 429 at another upstream cooled its key", got)
		}
	})
}

// The concurrency rule: a policy admits an attempt on a key only while the attempts in
// flight on that key, counted over every policy, are fewer than its own cap. A (cap 1) and
// B (cap 3) on one key therefore never have more than 3 in flight together, and A none
// while any other is in flight.
func TestTwoPoliciesCountEachOthersLeasesAgainstTheirOwnCap(t *testing.T) {
	tp := newTwoPolicies(t, policyA, policyB)
	ta, tb := targetOf(t, tp.a, "a1", "gpt-4o"), targetOf(t, tp.b, "b-main", "gpt-4o")
	dispatch := func(e *Engine, tg Target) Dispatch {
		t.Helper()
		d, err := e.Dispatch(tg)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	da := dispatch(tp.a, ta)
	if !da.Lease.Held() {
		t.Fatal("A's first attempt on an idle key waits")
	}
	b1, b2 := dispatch(tp.b, tb), dispatch(tp.b, tb)
	if !b1.Lease.Held() || !b2.Lease.Held() {
		t.Fatal("B waits with 1 and 2 in flight on its cap of 3")
	}
	if b3 := dispatch(tp.b, tb); !b3.Waiting {
		t.Fatal("B admitted a fourth attempt on a key with 3 in flight (A's 1 and B's 2), its cap 3")
	} else if _, err := tp.b.Abandon(b3); err != nil {
		t.Fatal(err)
	}
	tp.a.Finish(da, Outcome{Status: 200}, nil)
	if a2 := dispatch(tp.a, ta); !a2.Waiting {
		t.Fatal("A admitted an attempt with B's 2 in flight on the key, its cap 1")
	} else if _, err := tp.a.Abandon(a2); err != nil {
		t.Fatal(err)
	}
	if b3 := dispatch(tp.b, tb); !b3.Lease.Held() {
		t.Fatal("B waits with 2 in flight on its cap of 3")
	}
}

// Each policy's queue is its own: B's waiter does not fill A's queue (depth 1 each), and
// round-robin turns on a route both name gpt-4o-mini do not move each other's.
func TestTwoPoliciesKeepTheirQueuesAndTurnsApart(t *testing.T) {
	t.Run("queue", func(t *testing.T) {
		tp := newTwoPolicies(t, policyA, policyB)
		ta, tb := targetOf(t, tp.a, "a1", "gpt-4o"), targetOf(t, tp.b, "b-main", "gpt-4o")
		var held []Dispatch
		for i := 0; i < 3; i++ { // B fills the key to its cap
			d, err := tp.b.Dispatch(tb)
			if err != nil || !d.Lease.Held() {
				t.Fatalf("B's attempt %d: %v", i, err)
			}
			held = append(held, d)
		}
		if d, err := tp.b.Dispatch(tb); err != nil || !d.Waiting {
			t.Fatalf("B's fourth attempt: waiting=%v %v, want it queued", d.Waiting, err)
		}
		d, err := tp.a.Dispatch(ta)
		if err != nil || !d.Waiting {
			t.Fatalf("A's attempt: waiting=%v err=%v; want it queued in A's own queue, which B's waiter does not fill", d.Waiting, err)
		}
		if d2, err := tp.a.Dispatch(ta); err == nil || d2.Waiting {
			t.Fatalf("A's second waiter: waiting=%v err=%v, want its own queue (depth 1) full", d2.Waiting, err)
		}
		_ = held
	})
	turns := func(t *testing.T, tp *twoPolicies) []string {
		var firsts []string
		for i := 0; i < 4; i++ {
			planned(t, tp.a, "gpt-4o-mini") // A takes a turn between each of B's
			firsts = append(firsts, planned(t, tp.b, "gpt-4o-mini")[0])
		}
		return firsts
	}
	t.Run("turns", func(t *testing.T) {
		got := turns(t, newTwoPolicies(t, policyA, policyB))
		if got[0] == got[1] || got[1] == got[2] || got[2] == got[3] {
			t.Fatalf("B's round-robin starts %v with A planning between: A moved B's turns", got)
		}
	})
	t.Run("turns shared on purpose", func(t *testing.T) {
		got := turns(t, newTwoPolicies(t, policyA, policyB, func(p *policies.Policy) { p.StateNamespace = "team-llm" }))
		if got[0] != got[1] || got[1] != got[2] {
			t.Fatalf("B's round-robin starts %v, want every second turn taken by A (one stateNamespace)", got)
		}
	})
}

// A policy's stateNamespace must be an identifier (letters, digits, '.', '_', '-', at most
// 64): it is documented so, and Validate refuses anything else.
func TestStateNamespaceIsValidated(t *testing.T) {
	for ns, ok := range map[string]bool{"team-llm": true, "a.b_c-1": true, "-x": false, "a b": false, "a:b": false,
		strings.Repeat("x", 64): true, strings.Repeat("x", 65): false} {
		p, err := policyfile.Parse([]byte(policyA), policies.ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.StateNamespace = ns
		var perr policies.Errors
		if err := p.Validate(); (err == nil) != ok || (err != nil && !errors.As(err, &perr)) {
			t.Errorf("stateNamespace %q: %v, want ok=%v", ns, err, ok)
		}
	}
}
