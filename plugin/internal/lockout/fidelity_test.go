package lockout

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

// recordKeys makes f's store remember every key ever written: shared data has no delete, so
// a key once written stays for the life of the proxy.
func recordKeys(f *fixture) map[string]bool {
	keys := map[string]bool{}
	f.store.BeforeSet = func(k string) { keys[k] = true }
	return keys
}

func TestClientInventedModelsNeitherGrowSharedDataNorDisplaceConfiguredLockouts(t *testing.T) {
	// guide §3: a lockout is per provider + connection + model, and a glob route passes on
	// whatever model a client names. Shared data has no delete: every invented name used to
	// write a lockout key of its own, and the bounded index evicted the entry that ended
	// first — 64 junk 404s removed a real 120 s lockout. Now invented names share
	// InventedSlots keys and only ever displace each other.
	const junk = 200
	f := newFixture(t, enabled(), "claude-sonnet-4")
	keys := recordKeys(f)
	f.fail(t, "claude-sonnet-4", v404, f.clock.Now())
	for i := range junk {
		f.clock.Advance(10 * time.Millisecond) // each junk lockout ends after the real one
		f.fail(t, fmt.Sprintf("claude-junk-%03d", i), v404, f.clock.Now())
	}
	if l, ok := f.locked(t, "claude-sonnet-4"); !ok || !l.Until.Equal(t0.Add(120*time.Second)) {
		t.Fatalf("the configured model's lockout was displaced: %+v %v", l, ok)
	}
	// The index, the configured model's own key, and the pool: nothing else, ever.
	if len(keys) != 2+InventedSlots {
		t.Fatalf("%d keys written for %d invented models, want %d", len(keys), junk, 2+InventedSlots)
	}
	for i := range junk {
		_, ok := f.locked(t, fmt.Sprintf("claude-junk-%03d", i))
		if want := i >= junk-InventedSlots; ok != want {
			t.Fatalf("claude-junk-%03d locked=%v, want %v (the newest %d hold the pool)", i, ok, want, InventedSlots)
		}
	}
	list, err := f.tr.List(f.conn)
	if err != nil || len(list) != 1+InventedSlots {
		t.Fatalf("List: %d entries (%v), want the configured lockout and %d pool slots", len(list), err, InventedSlots)
	}
	// A success on an invented model decays its pool slot like any lockout.
	newest := fmt.Sprintf("claude-junk-%03d", junk-1)
	f.succeed(t, newest)
	if _, ok := f.locked(t, newest); ok {
		t.Fatal("pool lockout not released by a success")
	}
	// Deleting and clearing reach the pool too, and the configured lock is left to its own.
	if n, err := f.tr.Delete(f.conn, fmt.Sprintf("claude-junk-%03d", junk-2)); err != nil || n != 1 {
		t.Fatalf("Delete of a pool lockout = %d, %v", n, err)
	}
	if n, err := f.tr.ClearConnection(f.conn); err != nil || n != InventedSlots-1 {
		t.Fatalf("ClearConnection = %d, %v; want the configured lockout and %d pool lockouts", n, err, InventedSlots-2)
	}
	if len(keys) != 2+InventedSlots {
		t.Fatalf("admin actions wrote new keys: %d", len(keys))
	}
}

func TestConnectionWithoutConfiguredModelsKeepsItsKeysBounded(t *testing.T) {
	// A connection built without its configured models treats every model as client input:
	// bounded all the same.
	f := newFixture(t, enabled())
	keys := recordKeys(f)
	for i := range 100 {
		f.clock.Advance(time.Millisecond)
		for _, v := range []failure.Verdict{v404, v429, v502} {
			// Exact and family keys; a 404 of a name seen served locks the bare name too.
			for _, served := range []bool{false, true} {
				model := fmt.Sprintf("%v/m%03d", served, i)
				if _, err := f.tr.RecordFailure(f.conn, Failure{Model: model, Verdict: v, Started: f.clock.Now(), Served: served}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(keys) != 1+InventedSlots {
		t.Fatalf("%d keys written, want the index and %d pool slots", len(keys), InventedSlots)
	}
}

func TestConfiguredModelsKeepTheirOwnKeysForEveryScope(t *testing.T) {
	// A configured model's bare name and quota family are configured keys too, shared by any
	// model (invented or not) in that family.
	cfg := enabled()
	cfg.Family = codexFamilies.Family
	f := newFixture(t, cfg, "gpt-5-mini")
	keys := recordKeys(f)
	f.fail(t, "gpt-5-junk", v429, f.clock.Now()) // an invented name in the configured codex family
	if !keys[f.conn.lockKey(failure.ScopeQuotaFamily, "codex")] {
		t.Fatalf("family lockout not under its own key: %v", keys)
	}
	if l, ok := f.locked(t, "gpt-5-mini"); !ok || l.Scope != failure.ScopeQuotaFamily {
		t.Fatalf("the configured model does not see its family's lockout: %+v %v", l, ok)
	}
	for k := range keys {
		if k != f.conn.indexKey && k != f.conn.lockKey(failure.ScopeQuotaFamily, "codex") {
			t.Fatalf("unexpected key %s", k)
		}
	}
}

func TestLockoutsFollowTheCredential(t *testing.T) {
	// guide §2: terminal states last "totdat de credentials wijzigen"; lockouts are tied to
	// the credential the same way, so a rotated key starts clean (and the old key's
	// lockouts are gone once the new key records its own).
	for _, configured := range [][]string{{"m"}, nil} {
		f := newFixture(t, enabled(), configured...) // credential fp-1
		f.fail(t, "m", v502, f.clock.Now())
		f.clock.Advance(121 * time.Second)
		f.fail(t, "m", v502, f.clock.Now()) // count 2 under fp-1
		rotated, _ := NewConn("codex", "codex-a", "codex/codex-a", "fp-2", configured...)
		unknown, _ := NewConn("codex", "codex-a", "codex/codex-a", "", configured...)
		if _, ok, _ := f.tr.Locked(rotated, "m"); ok {
			t.Fatalf("configured=%v: the rotated credential inherited the lockout", configured)
		}
		if l, ok, _ := f.tr.Locked(unknown, "m"); !ok || l.FailureCount != 2 {
			t.Fatalf("configured=%v: an unknown fingerprint must match: %+v %v", configured, l, ok)
		}
		sets := 0
		f.store.BeforeSet = func(string) { sets++ }
		if err := f.tr.RecordSuccess(rotated, "m", f.clock.Now()); err != nil || sets != 0 {
			t.Fatalf("configured=%v: success under the new credential wrote %d times (%v)", configured, sets, err)
		}
		out, err := f.tr.RecordFailure(rotated, Failure{Model: "m", Verdict: v502, Started: f.clock.Now()})
		if err != nil || !out.Counted || out.Lock.FailureCount != 1 || out.Lock.Until.Sub(f.clock.Now()) != 120*time.Second {
			t.Fatalf("configured=%v: first failure under the new credential: %+v %v, want a fresh 120 s", configured, out, err)
		}
		if l, ok, _ := f.tr.Locked(rotated, "m"); !ok || l.FailureCount != 1 {
			t.Fatalf("configured=%v: new credential's lockout: %+v %v", configured, l, ok)
		}
		if _, ok := f.locked(t, "m"); ok {
			t.Fatalf("configured=%v: the old credential still sees a lockout after the rotation", configured)
		}
	}
}

func TestClientChosenNamesNeverDisplaceARealModelsLockout(t *testing.T) {
	// issue 18: a model served only through a glob route (claude-*) is itself a name the
	// policy does not spell, so its lockout lives in the pool; "the 16th junk name evicts a
	// live 2-minute lockout". A name's evidence that it is real ranks the pool: junk names the
	// provider refuses as unknown (404) or even rate-limits never displace the lockout of a
	// model it served, nor keep it from a slot (guide §3: 120 s for the first failure).
	const real = "claude-sonnet-4-5"
	type junk struct {
		n       int             // how many distinct junk names fail
		verdict failure.Verdict // how each fails
	}
	cases := []struct {
		name    string
		before  junk            // junk failures before the real model's
		verdict failure.Verdict // the real model's failure
		served  bool            // the worker recording it saw the provider serve it
		after   junk            // junk failures after it
		locked  bool            // the real model is still locked at the end
	}{
		{"served, then 16 junk 404s (the issue's case)", junk{}, v429, true, junk{InventedSlots, v404}, true},
		{"served, then 200 junk 404s", junk{}, v429, true, junk{200, v404}, true},
		{"served, then 200 junk names the provider rate-limits", junk{}, v429, true, junk{200, v429}, true},
		{"served 502, then 200 junk 404s", junk{}, v502, true, junk{200, v404}, true},
		{"rate-limited but never seen served, then 200 junk 404s", junk{}, v429, false, junk{200, v404}, true},
		{"overloaded but never seen served, then 200 junk 404s", junk{}, v503(), false, junk{200, v404}, true},
		{"16 junk 404s fill the pool first: the served model still gets a slot", junk{InventedSlots, v404}, v429, true, junk{200, v404}, true},
		{"16 junk 429s fill the pool first: the served model still gets a slot", junk{InventedSlots, v429}, v502, true, junk{200, v429}, true},
		{"16 junk 404s first: a rate-limited model takes the slot of one", junk{InventedSlots, v404}, v429, false, junk{200, v404}, true},
		// The contrast: with no evidence at all a name is one more junk name, and the
		// newest InventedSlots hold the pool.
		{"a 404 never seen served is junk among junk", junk{}, v404, false, junk{InventedSlots, v404}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, enabled()) // nothing configured: every name shares the pool
			keys := recordKeys(f)
			fail := func(j junk, prefix string) {
				for i := range j.n {
					f.clock.Advance(10 * time.Millisecond) // every junk lockout ends after the real one
					f.fail(t, fmt.Sprintf("%s-%03d", prefix, i), j.verdict, f.clock.Now())
				}
			}
			fail(tc.before, "claude-junk-before")
			at := f.clock.Now()
			out, err := f.tr.RecordFailure(f.conn, Failure{Model: real, Verdict: tc.verdict, Started: at, Served: tc.served})
			if err != nil || !out.Locked {
				t.Fatalf("the real model's failure: %+v %v, want it locked", out, err)
			}
			fail(tc.after, "claude-junk-after")
			l, ok := f.locked(t, real)
			if ok != tc.locked {
				t.Fatalf("real model locked=%v (%+v), want %v", ok, l, tc.locked)
			}
			if ok && !l.Until.Equal(at.Add(120*time.Second)) {
				t.Fatalf("real model's lockout changed: until %v, want %v", l.Until, at.Add(120*time.Second))
			}
			// The index and the pool: nothing else, ever.
			if len(keys) > 1+InventedSlots {
				t.Fatalf("%d keys written, want at most the index and %d pool slots", len(keys), InventedSlots)
			}
		})
	}
}

func TestOnlyRealModelsDisplaceRealModels(t *testing.T) {
	// The pool stays bounded when more real models are locked at once than it holds: the
	// one that ends first makes room, for another served model only. A newcomer with less
	// evidence than every holder locks nothing and writes nothing.
	f := newFixture(t, enabled())
	for i := range InventedSlots + 1 {
		f.clock.Advance(10 * time.Millisecond)
		if _, err := f.tr.RecordFailure(f.conn, Failure{Model: fmt.Sprintf("real-%02d", i), Verdict: v429, Served: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := f.locked(t, "real-00"); ok {
		t.Fatal("the 17th served model did not take the slot of the one that ends first")
	}
	for i := 1; i <= InventedSlots; i++ {
		if _, ok := f.locked(t, fmt.Sprintf("real-%02d", i)); !ok {
			t.Fatalf("real-%02d lost its lockout", i)
		}
	}
	sets := 0
	f.store.BeforeSet = func(string) { sets++ }
	for _, v := range []failure.Verdict{v404, v429, v502} {
		out := f.fail(t, "junk", v, f.clock.Now())
		if out.Locked || out.Counted {
			t.Fatalf("junk %d with a pool of served models: %+v, want not locked", v.Status, out)
		}
	}
	if sets != 0 {
		t.Fatalf("refused junk failures wrote shared data %d times", sets)
	}
	// Rate-limited junk displaces nothing served either.
	if _, ok := f.locked(t, "junk"); ok {
		t.Fatal("junk locked")
	}
}

func TestEvidenceGrowsWhileANameHoldsItsSlot(t *testing.T) {
	// A model first seen failing with a 404 (no evidence) is later rate-limited on a worker
	// that saw it served: the overlapping failure does not escalate (guide §3, herd
	// protection), but the lockout now carries the served evidence, and junk cannot
	// displace it.
	f := newFixture(t, enabled())
	f.fail(t, "claude-sonnet-4-5", withScope(v404, failure.ScopeExact), f.clock.Now())
	out, err := f.tr.RecordFailure(f.conn, Failure{Model: "claude-sonnet-4-5", Verdict: withScope(v429, failure.ScopeExact),
		Started: f.clock.Now(), Served: true})
	if err != nil || !out.Locked || out.Counted || out.Lock.FailureCount != 1 {
		t.Fatalf("overlapping served failure: %+v %v, want locked, not counted again", out, err)
	}
	for i := range 3 * InventedSlots {
		f.clock.Advance(10 * time.Millisecond)
		f.fail(t, fmt.Sprintf("claude-junk-%03d", i), v404, f.clock.Now())
	}
	if l, ok := f.locked(t, "claude-sonnet-4-5"); !ok || !l.Until.Equal(t0.Add(120*time.Second)) {
		t.Fatalf("lockout after junk: %+v %v, want the first 120 s intact", l, ok)
	}
}

func TestRacingJunkNeverOverwritesAServedLock(t *testing.T) {
	// Two workers at once: a junk name reserves a pool slot, and before its lock is written a
	// served model's failure takes that slot (the junk's fresh reservation ends first). The
	// junk's write must not overwrite the served lock, nor its index entry hide it.
	for _, at := range []string{"lock write", "index write"} {
		t.Run(at, func(t *testing.T) {
			f := newFixture(t, enabled())
			for i := range InventedSlots - 1 { // leave one slot free for the racing junk
				f.fail(t, fmt.Sprintf("junk-%02d", i), v404, f.clock.Now())
			}
			f.clock.Advance(time.Second)
			served := func() {
				out, err := f.tr.RecordFailure(f.conn, Failure{Model: "real", Verdict: v429, Started: f.clock.Now(), Served: true})
				if err != nil || !out.Locked {
					t.Errorf("served failure inside the race: %+v %v", out, err)
				}
			}
			inside, n := false, 0
			f.store.BeforeSet = func(k string) {
				if inside {
					return
				}
				switch {
				case at == "lock write" && k != f.conn.indexKey:
					n++ // the racing junk's lock write, the first Set of a slot key
				case at == "index write" && k == f.conn.indexKey:
					n += 2 // its reservation, then its index write after the lock
					if n == 2 {
						return
					}
				default:
					return
				}
				if n == 1 || n == 4 {
					inside = true
					served()
					inside = false
				}
			}
			f.fail(t, "junk-racing", v404, f.clock.Now())
			f.store.BeforeSet = nil
			if _, ok := f.locked(t, "real"); !ok {
				t.Fatal("the served model's lockout was lost to the racing junk")
			}
			if l, ok := f.locked(t, "junk-racing"); ok {
				t.Fatalf("the racing junk holds the slot: %+v", l)
			}
		})
	}
}

func TestANameWithoutEvidenceLocksOnlyItself(t *testing.T) {
	// Issue 18, "no client input can … bypass the policy". Guide §3 widens a 404 to the
	// bare model and a 429/403/402 to the quota family. A glob route (claude-*) passes on
	// whatever name a client chooses, so that widening let one request lock a real model
	// for every client: a 404 for claude-x/claude-sonnet-4-5 locked claude-sonnet-4-5 for
	// 120 s, a 403 for a junk gpt-5 name the whole codex family. The lead's rule (the
	// package doc): a failure of a name with no evidence that it is real — not configured,
	// not served, not metered — locks only that name; a metered failure (the provider's
	// rate limit or quota is a fact about the account whatever name provoked it) and a
	// configured or served name keep the guide's scope.
	const real = "claude-sonnet-4-5"
	quotaSpent := quotaWindow(time.Hour)
	cases := []struct {
		name       string
		configured []string        // the models the policy routes to the connection
		model      string          // the failing name
		served     bool            // the worker saw the provider serve it (Failure.Served)
		verdict    failure.Verdict // how it failed
		scope      failure.Scope   // the scope it is locked under
		other      string          // another model, the one the failure must or must not reach
		locked     bool            // whether other is locked afterwards
	}{
		// No evidence: only the exact name.
		{"404 of a prefixed junk name spares the configured bare model", []string{real}, "claude-x/" + real, false, v404, failure.ScopeExact, real, false},
		{"404 of a prefixed junk name spares an unconfigured bare model", nil, "claude-x/" + real, false, v404, failure.ScopeExact, real, false},
		{"a rule's model scope on a junk name spares the bare model", []string{real}, "claude-x/" + real, false,
			withScope(v403, failure.ScopeModel), failure.ScopeExact, real, false},
		{"403 of a junk name spares its configured family", []string{"gpt-5-mini"}, "gpt-5-junk", false, v403, failure.ScopeExact, "gpt-5-mini", false},
		{"403 of a junk name spares its unconfigured family", nil, "gpt-5-junk", false, v403, failure.ScopeExact, "gpt-5.1", false},
		// Metered: the guide's scope, whatever the name.
		{"429 of a junk name locks its configured family", []string{"gpt-5-mini"}, "gpt-5-junk", false, v429, failure.ScopeQuotaFamily, "gpt-5-mini", true},
		{"429 of a junk name locks its unconfigured family", nil, "gpt-5-junk", false, v429, failure.ScopeQuotaFamily, "gpt-5.1", true},
		{"an exhausted quota of a junk name locks its family", []string{"gpt-5-mini"}, "gpt-5-junk", false, quotaSpent, failure.ScopeQuotaFamily, "gpt-5-mini", true},
		// Configured or served: the guide's scope.
		{"404 of a configured prefixed name locks the bare model", []string{"claude-x/" + real, real}, "claude-x/" + real, false, v404, failure.ScopeModel, real, true},
		{"404 of a served prefixed name locks the bare model", []string{real}, "claude-x/" + real, true, v404, failure.ScopeModel, real, true},
		{"403 of a configured name locks its family", []string{"gpt-5-mini", "gpt-5.1"}, "gpt-5.1", false, v403, failure.ScopeQuotaFamily, "gpt-5-mini", true},
		{"403 of a served name locks its family", nil, "gpt-5-junk", true, v403, failure.ScopeQuotaFamily, "gpt-5.1", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := enabled()
			cfg.Family = codexFamilies.Family
			f := newFixture(t, cfg, tc.configured...)
			out, err := f.tr.RecordFailure(f.conn, Failure{Model: tc.model, Verdict: tc.verdict, Started: f.clock.Now(), Served: tc.served})
			if err != nil || !out.Locked || out.Lock.Scope != tc.scope {
				t.Fatalf("%s: %+v %v, want locked under scope %s", tc.model, out, err, tc.scope)
			}
			if l, ok := f.locked(t, tc.model); !ok || l.Scope != tc.scope {
				t.Fatalf("%s reads locked=%v %+v, want locked under scope %s", tc.model, ok, l, tc.scope)
			}
			if l, ok := f.locked(t, tc.other); ok != tc.locked {
				t.Fatalf("%s locked=%v (%+v), want %v", tc.other, ok, l, tc.locked)
			}
		})
	}
}
