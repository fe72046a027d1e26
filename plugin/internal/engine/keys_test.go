package engine

import (
	"sort"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// recordingStore is a MemStore that remembers every key written and the first byte of the
// last value written under it (0 for the empty tombstone).
type recordingStore struct {
	*state.MemStore
	written map[string]byte
}

func (s *recordingStore) Set(key string, value []byte, cas uint32) error {
	err := s.MemStore.Set(key, value, cas)
	if err == nil {
		var kind byte
		if len(value) > 0 {
			kind = value[0]
		}
		s.written[key] = kind
	}
	return err
}

// A policy that reaches every layer: the provider cooldown gate, model lockout, session
// affinity, capped keys with a queue, round-robin and strict-random routes, and a key
// without a credential.
const everyLayer = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 1}
      - {id: b, credential: {header: authorization, value: "Bearer sk-b"}, modelConcurrency: {gpt-4o: 1}}
  - id: local
    cluster: ollama
    connections:
      - {id: box}
routes:
  - model: gpt-4o
    strategy: round-robin
    targets: [{provider: openai}, {provider: local}]
  - model: gpt-4o-mini
    strategy: strict-random
    targets: [{provider: openai}]
  - model: "llama*"
    targets: [{provider: local}]
resilience:
  modelLockout: {enabled: true}
  providerCooldown: {enabled: true}
  sessionAffinityTtlMs: 60000
`

// Every key the engine writes, through the filter's per-VM cache, is one a registered key
// builder makes (state.ParseKey), and holds the record kind the registry names for it; a
// scenario mix reaches every record kind the engine owns.
func TestEveryWrittenKeyIsRegistered(t *testing.T) {
	rec := &recordingStore{MemStore: state.NewMemStore(), written: map[string]byte{}}
	cache := state.NewCache(rec, state.IsLive)
	clock := manualclock.New(start)
	p, err := policyfile.Parse([]byte(everyLayer), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := admission.NewNode(rec, 7)
	e, err := New(p, cache, clock, Options{Node: node, PluginName: "default.spillway", RootID: "spillway"})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Heartbeat(clock.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	session, err := affinity.NewKey("gpt-4o", "s-1")
	if err != nil {
		t.Fatal(err)
	}
	run := func(model string, session affinity.Key, o Outcome) {
		t.Helper()
		if err := cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		plan, err := e.Plan(model, policies.APIOpenAI, session, &Buffers{})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Targets) == 0 {
			return
		}
		d, err := e.Dispatch(plan.Targets[0])
		if err != nil {
			return
		}
		if d.Waiting {
			if _, err := e.Abandon(d); err != nil {
				t.Fatal(err)
			}
			return
		}
		e.Finish(d, o, &plan)
	}
	// Successes with a session (pins, turns, decks, leases), a queued attempt (tickets), a
	// 429 and a 401 (lockout, cooldown, backoff), a missing model (lockout and its index), 5xx until the circuit
	// and the provider window trip.
	run("gpt-4o", session, Outcome{Status: 200})
	run("gpt-4o-mini", affinity.Key{}, Outcome{Status: 200})
	ta := targetOf(t, e, "a", "gpt-4o")
	held, err := e.Dispatch(ta)
	if err != nil || !held.Lease.Held() {
		t.Fatalf("dispatch on a: %v", err)
	}
	if queued, err := e.Dispatch(ta); err != nil || !queued.Waiting {
		t.Fatalf("second dispatch on a: waiting=%v %v", queued.Waiting, err)
	} else if _, err := e.Abandon(queued); err != nil {
		t.Fatal(err)
	}
	e.Finish(held, Outcome{Status: 200}, nil)
	failOn(t, e, targetOf(t, e, "a", "gpt-4o"), rateLimited)
	failOn(t, e, targetOf(t, e, "b", "gpt-4o"), Outcome{Status: 401,
		Body: []byte(`{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`)})
	failOn(t, e, targetOf(t, e, "box", "llama-missing"), Outcome{Status: 404,
		Body: []byte(`{"error":{"message":"model 'llama-missing' not found","type":"not_found_error"}}`)})
	for i := 0; i < 20; i++ {
		clock.Advance(time.Second)
		failOn(t, e, targetOf(t, e, "b", "gpt-4o-mini"), overloaded)
	}

	// A second policy on the same store: an expired key's re-check (its schedule and the
	// process's tick claim) and a recovery probe (the upstream's claim).
	p2, err := policyfile.Parse(recoveryPolicy(recheckOn), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e2, err := New(p2, cache, clock, Options{PluginName: "team-b.spillway"})
	if err != nil {
		t.Fatal(err)
	}
	expiredB, coolingA := targetOf(t, e2, "acme-b", "m1"), targetOf(t, e2, "acme-a", "m1")
	for i := range 3 {
		if i > 0 {
			clock.Advance(time.Minute)
		}
		failOn(t, e2, expiredB, revokedKey)
	}
	for _, wait := range []time.Duration{0, 3 * time.Second, 6 * time.Second, 12 * time.Second} {
		clock.Advance(wait)
		failOn(t, e2, coolingA, serverDown)
	}
	clock.Advance(3 * time.Second)
	if err := cache.Refresh(); err != nil {
		t.Fatal(err)
	}
	if plan, err := e2.Plan("m1", policies.APIOpenAI, affinity.Key{}, &Buffers{}); err != nil || !isProbe(plan) {
		t.Fatalf("no recovery probe planned: %v %+v", err, plan.Excluded)
	} else if d, err := e2.Dispatch(plan.Targets[0]); err != nil {
		t.Fatal(err)
	} else {
		e2.Finish(d, serverDown, &plan)
	}
	clock.Advance(time.Minute)
	if !e2.RecheckLook() {
		t.Fatal("no re-check look a minute after the expiry")
	}
	if due, err := e2.DueRechecks(nil); err != nil || len(due) == 0 {
		t.Fatalf("no re-check due: %v", err)
	}

	seen := map[string]bool{}
	for key, kind := range rec.written {
		k, ok := state.ParseKey(key)
		if !ok {
			t.Errorf("written key %q is made by no registered key builder", key)
			continue
		}
		if kind != 0 && kind != k.Kind && k.Kind != 0 {
			t.Errorf("key %q (tag %s) holds a record of kind %q, the registry says %q", key, k.Tag, kind, k.Kind)
		}
		seen[k.Tag] = true
	}
	// The kinds the engine writes, and the ones nothing in a policy reaches: the pools (the
	// policy sets no global or provider cap), the guard (the filter's store), the wake queues
	// (not shared data).
	notByEngine := map[string]bool{state.KeyGlobalPool.Tag: true, state.KeyProviderPool.Tag: true,
		state.KeyGuard.Tag: true, state.KeyWakeQueue.Tag: true}
	var missing []string
	for _, k := range state.Keys {
		if !seen[k.Tag] && !notByEngine[k.Tag] {
			missing = append(missing, k.Tag)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the scenario mix wrote no key of %v: extend it so every kind is checked", missing)
	}
}
