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
		for _, v := range []failure.Verdict{v404, v429, v502} { // bare, family and exact keys
			f.fail(t, fmt.Sprintf("m%03d", i), v, f.clock.Now())
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
		rotated, _ := NewConn("codex", "codex-a", "fp-2", configured...)
		unknown, _ := NewConn("codex", "codex-a", "", configured...)
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
