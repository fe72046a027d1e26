package affinity

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

var t0 = testfixture.T0

func newTable(t testing.TB, cfg Config) (*Table, *testfixture.Store, *manualclock.Clock) {
	t.Helper()
	store := testfixture.NewStore()
	clock := manualclock.New(t0)
	tab, err := New(store, clock, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tab, store, clock
}

func mustKey(t testing.TB, id string) Key {
	t.Helper()
	k, err := NewKey("route", id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewValidates(t *testing.T) {
	store, clock := state.NewMemStore(), manualclock.New(t0)
	tests := []struct {
		name string // what the config shows
		cfg  Config // config to try
		ok   bool   // whether New accepts it
	}{
		{name: "off", cfg: Config{}, ok: true},
		{name: "on with defaults", cfg: Config{TTL: time.Hour}, ok: true},
		{name: "negative TTL", cfg: Config{TTL: -1}},
		{name: "negative refresh", cfg: Config{TTL: time.Hour, RefreshInterval: -1}},
		{name: "negative slots", cfg: Config{TTL: time.Hour, Slots: -1}},
		{name: "too many slots", cfg: Config{TTL: time.Hour, Slots: MaxSlots + 1}},
	}
	for _, tc := range tests {
		if _, err := New(store, clock, tc.cfg); (err == nil) != tc.ok {
			t.Errorf("%s: error = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if _, err := New(nil, clock, Config{}); err == nil {
		t.Error("nil store accepted")
	}
}

func TestPinExpiresTTLAfterLastUse(t *testing.T) {
	tests := []struct {
		name  string        // when the lookup happens
		after time.Duration // time since the pin was written
		found bool          // whether the pin is still live
	}{
		{name: "right away", after: 0, found: true},
		{name: "just before the TTL", after: 30*time.Minute - time.Millisecond, found: true},
		{name: "at the TTL", after: 30 * time.Minute},
		{name: "long after", after: 24 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab, _, clock := newTable(t, Config{TTL: 30 * time.Minute})
			k := mustKey(t, "s")
			if wrote, err := tab.Record(k, "p", "c1", Pin{}); !wrote || err != nil {
				t.Fatalf("Record = %v, %v", wrote, err)
			}
			clock.Advance(tc.after)
			pin, err := tab.Lookup(k)
			if err != nil || pin.IsZero() == tc.found {
				t.Fatalf("Lookup after %v = %+v, %v; want found=%v", tc.after, pin, err, tc.found)
			}
			if tc.found && (pin.Provider != "p" || pin.Connection != "c1" || !pin.LastUse.Equal(t0)) {
				t.Fatalf("pin = %+v", pin)
			}
		})
	}
}

func TestRefreshIsRateLimited(t *testing.T) {
	tab, store, clock := newTable(t, Config{TTL: 10 * time.Minute, RefreshInterval: 30 * time.Second})
	k := mustKey(t, "s")
	write := func() bool {
		pin, err := tab.Lookup(k)
		if err != nil {
			t.Fatal(err)
		}
		wrote, err := tab.Record(k, "p", "c1", pin)
		if err != nil {
			t.Fatal(err)
		}
		return wrote
	}
	if !write() {
		t.Fatal("first use did not pin")
	}
	// Requests every 5 s: a write at most every 30 s, and the pin never expires.
	writes := 0
	for i := 0; i < 60; i++ { // 5 minutes
		clock.Advance(5 * time.Second)
		if write() {
			writes++
		}
	}
	if writes != 10 || store.Sets != 11 {
		t.Fatalf("refresh writes %d (store sets %d), want one per 30 s: 10 (11)", writes, store.Sets)
	}
	// The refreshed pin outlives the original TTL.
	clock.Advance(9 * time.Minute)
	if pin, _ := tab.Lookup(k); pin.Connection != "c1" {
		t.Fatalf("refreshed pin expired: %+v", pin)
	}
}

func TestRefreshCappedAtATenthOfTheTTL(t *testing.T) {
	tab, store, clock := newTable(t, Config{TTL: 50 * time.Second}) // default 10 s, TTL/10 = 5 s
	k := mustKey(t, "s")
	tab.Record(k, "p", "c", Pin{})
	clock.Advance(5 * time.Second)
	pin, _ := tab.Lookup(k)
	if wrote, _ := tab.Record(k, "p", "c", pin); !wrote || store.Sets != 2 {
		t.Fatalf("refresh after TTL/10 did not write (sets %d)", store.Sets)
	}
}

func TestRepinWritesAtOnce(t *testing.T) {
	tab, _, clock := newTable(t, Config{TTL: time.Hour})
	k := mustKey(t, "s")
	tab.Record(k, "p", "c1", Pin{})
	clock.Advance(time.Second)
	pin, _ := tab.Lookup(k)
	// c1 was not eligible; the request went to c2: the pin moves right away.
	if wrote, err := tab.Record(k, "p", "c2", pin); !wrote || err != nil {
		t.Fatalf("re-pin = %v, %v", wrote, err)
	}
	if pin, _ := tab.Lookup(k); pin.Connection != "c2" || !pin.LastUse.Equal(t0.Add(time.Second)) {
		t.Fatalf("after re-pin: %+v", pin)
	}
	// Same connection id under another provider is another connection.
	pin, _ = tab.Lookup(k)
	if wrote, _ := tab.Record(k, "q", "c2", pin); !wrote {
		t.Fatal("provider change did not re-pin")
	}
}

func TestDisabledTableDoesNothing(t *testing.T) {
	tab, store, _ := newTable(t, Config{TTL: 0})
	k := mustKey(t, "s")
	if tab.Enabled() {
		t.Fatal("TTL 0 reported enabled")
	}
	if wrote, err := tab.Record(k, "p", "c", Pin{}); wrote || err != nil || store.Sets != 0 {
		t.Fatalf("Record with TTL 0 = %v, %v (sets %d)", wrote, err, store.Sets)
	}
	if pin, err := tab.Lookup(k); !pin.IsZero() || err != nil {
		t.Fatalf("Lookup with TTL 0 = %+v, %v", pin, err)
	}
}

func TestZeroKeyAndEmptyConnection(t *testing.T) {
	tab, store, _ := newTable(t, Config{TTL: time.Hour})
	if wrote, _ := tab.Record(Key{}, "p", "c", Pin{}); wrote {
		t.Fatal("zero key pinned")
	}
	if wrote, _ := tab.Record(mustKey(t, "s"), "p", "", Pin{}); wrote {
		t.Fatal("empty connection pinned")
	}
	if pin, _ := tab.Lookup(Key{}); !pin.IsZero() || store.Sets != 0 {
		t.Fatalf("zero key lookup = %+v (sets %d)", pin, store.Sets)
	}
}

func TestSlotCollisionTakesOver(t *testing.T) {
	tab, _, _ := newTable(t, Config{TTL: time.Hour, Slots: 1}) // every session shares one slot
	a, b := mustKey(t, "a"), mustKey(t, "b")
	tab.Record(a, "p", "c1", Pin{})
	if pin, _ := tab.Lookup(b); !pin.IsZero() {
		t.Fatalf("session b sees a's pin %+v", pin)
	}
	tab.Record(b, "p", "c2", Pin{})
	if pin, _ := tab.Lookup(a); !pin.IsZero() {
		t.Fatalf("session a still pinned after b took the slot: %+v", pin)
	}
	if pin, _ := tab.Lookup(b); pin.Connection != "c2" {
		t.Fatalf("session b pin = %+v", pin)
	}
}

// colliding returns n session keys whose first slots are the same in a table of slots.
func colliding(t *testing.T, tab *Table, n int) []Key {
	t.Helper()
	want, _ := tab.slotsOf(mustKey(t, "s0"))
	keys := []Key{mustKey(t, "s0")}
	for i := 1; len(keys) < n && i < 1_000_000; i++ {
		k := mustKey(t, fmt.Sprintf("s%d", i))
		if first, _ := tab.slotsOf(k); first == want {
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatal("no colliding keys found")
	}
	return keys
}

func TestCollidingSessionsBothKeepTheirPins(t *testing.T) {
	// guide "Sessieaffiniteit": a pin keeps a multi-turn agent on its connection. Two live
	// sessions whose keys share a slot must not evict each other on every turn (each losing
	// its pin, so both hop connections): each session has a second slot.
	tab, store, clock := newTable(t, Config{TTL: time.Hour, RefreshInterval: time.Second, Slots: 64})
	keys := colliding(t, tab, 2)
	a, b := keys[0], keys[1]
	pinOf := map[Key]string{a: "conn-a", b: "conn-b"}
	for turn := 0; turn < 6; turn++ {
		for _, k := range []Key{a, b} {
			pin, err := tab.Lookup(k)
			if err != nil {
				t.Fatal(err)
			}
			if turn > 0 && pin.Connection != pinOf[k] {
				t.Fatalf("turn %d: session %s lost its pin: %+v", turn, pinOf[k], pin)
			}
			if _, err := tab.Record(k, "p", pinOf[k], pin); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(2 * time.Second) // past the refresh interval: every turn refreshes
	}
	if store.Sets != 2*6 {
		t.Fatalf("%d writes, want one per session and turn", store.Sets)
	}
}

func TestThirdCollidingSessionDisplacesTheLeastRecentlyUsed(t *testing.T) {
	// With both of a session's slots held by live sessions, the one used least recently
	// gives way.
	tab, _, clock := newTable(t, Config{TTL: time.Hour, Slots: 2}) // two slots: everyone collides
	a, b, c := mustKey(t, "a"), mustKey(t, "b"), mustKey(t, "c")
	for _, s := range []struct {
		k    Key
		conn string
	}{{a, "conn-a"}, {b, "conn-b"}} {
		pin, _ := tab.Lookup(s.k)
		tab.Record(s.k, "p", s.conn, pin)
		clock.Advance(time.Minute)
	}
	if pa, _ := tab.Lookup(a); pa.Connection != "conn-a" {
		t.Fatalf("a lost its pin before c came: %+v", pa)
	}
	pin, _ := tab.Lookup(c)
	if !pin.IsZero() {
		t.Fatalf("c has a pin before pinning: %+v", pin)
	}
	tab.Record(c, "p", "conn-c", pin)
	pa, _ := tab.Lookup(a)
	pb, _ := tab.Lookup(b)
	pc, _ := tab.Lookup(c)
	if !pa.IsZero() || pb.Connection != "conn-b" || pc.Connection != "conn-c" {
		t.Fatalf("after c: a %+v b %+v c %+v; want a (least recently used) displaced", pa, pb, pc)
	}
}

func TestCorruptPinIsAbsent(t *testing.T) {
	fp1, fp2 := fingerprint(mustKey(t, "s"))
	for _, tc := range []struct {
		name  string // what is wrong
		value []byte // stored record
	}{
		{name: "garbage", value: []byte("xyz")},
		{name: "other version", value: state.NewEncoder(nil, kindPin, 9).Uint(fp1).Uint(fp2).
			String("p").String("c").Int(t0.UnixMilli()).Bytes()},
		{name: "truncated", value: state.NewEncoder(nil, kindPin, pinVersion).Uint(fp1).Uint(fp2).Bytes()},
		{name: "trailing bytes", value: append(state.NewEncoder(nil, kindPin, pinVersion).Uint(fp1).Uint(fp2).
			String("p").String("c").Int(t0.UnixMilli()).Bytes(), 1)},
		{name: "empty connection", value: state.NewEncoder(nil, kindPin, pinVersion).Uint(fp1).Uint(fp2).
			String("p").String("").Int(t0.UnixMilli()).Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, store, _ := newTable(t, Config{TTL: time.Hour, Slots: 1})
			k := mustKey(t, "s")
			if err := store.MemStore.Set(tab.slotKey(k), tc.value, 0); err != nil {
				t.Fatal(err)
			}
			if pin, err := tab.Lookup(k); !pin.IsZero() || err != nil {
				t.Fatalf("Lookup = %+v, %v; want no pin", pin, err)
			}
			if wrote, err := tab.Record(k, "p", "c", Pin{}); !wrote || err != nil {
				t.Fatalf("Record over a corrupt slot = %v, %v", wrote, err)
			}
			if pin, _ := tab.Lookup(k); pin.Connection != "c" {
				t.Fatalf("pin after rewrite = %+v", pin)
			}
		})
	}
}

func TestFutureLastUseIsClampedToNow(t *testing.T) {
	tab, store, clock := newTable(t, Config{TTL: time.Minute, Slots: 1})
	k := mustKey(t, "s")
	fp1, fp2 := fingerprint(k)
	future := state.NewEncoder(nil, kindPin, pinVersion).
		Uint(fp1).Uint(fp2).String("p").String("c").Int(t0.Add(time.Hour).UnixMilli()).Bytes()
	store.MemStore.Set(tab.slotKey(k), future, 0)
	pin, _ := tab.Lookup(k)
	if pin.Connection != "c" || !pin.LastUse.Equal(t0) {
		t.Fatalf("pin = %+v, want last use clamped to now", pin)
	}
	clock.Advance(time.Minute)
	if pin, _ := tab.Lookup(k); pin.IsZero() {
		// the stored time is still in the future: it stays clamped, not "expired"
		t.Fatalf("a future last use expired: %+v", pin)
	}
}

type brokenStore struct{}

var errDown = errors.New("down")

func (brokenStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errDown }
func (brokenStore) Set(string, []byte, uint32) error         { return errDown }
func (brokenStore) CreateCAS() (uint32, error)               { return 0, errDown }

func TestStoreFailuresAreReported(t *testing.T) {
	tab, err := New(brokenStore{}, manualclock.New(t0), Config{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	k := mustKey(t, "s")
	if _, err := tab.Lookup(k); !errors.Is(err, errDown) {
		t.Fatalf("Lookup error = %v", err)
	}
	if _, err := tab.Record(k, "p", "c", Pin{}); !errors.Is(err, errDown) {
		t.Fatalf("Record error = %v", err)
	}
}

// A pin key is the policy's namespace and the slot number (state's key layout), and the
// memo of built keys never hands one slot's key out for another that shares its memo entry.
func TestSlotKeysNameTheirSlotAndNamespace(t *testing.T) {
	const ns = "0123456789abcdef"
	tab, _, _ := newTable(t, Config{TTL: time.Minute, Slots: 1 << 20, Namespace: ns})
	keyAt := func(slot uint64) Key {
		var k Key
		for i := 0; i < 8; i++ {
			k.digest[i] = byte(slot >> (56 - 8*i))
		}
		k.digest[15] = 1 // a second slot apart from the first
		return k
	}
	for _, slot := range []uint64{3, 3 + 64, 3, 1<<20 - 1} {
		want := "spw2:aff:" + ns + ":" + fmt.Sprint(slot)
		if got := tab.slotKey(keyAt(slot)); got != want {
			t.Fatalf("slot %d key %q, want %q", slot, got, want)
		}
	}
	k := keyAt(5)
	if n := testing.AllocsPerRun(100, func() { tab.slotKey(k) }); n != 0 {
		t.Fatalf("a repeated session's key costs %v allocations, want 0", n)
	}
}
