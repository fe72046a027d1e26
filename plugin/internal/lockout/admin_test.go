package lockout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func TestNothingLockedReadsOnceAndNeverWrites(t *testing.T) {
	f := newFixture(t, enabled())
	sets := 0
	f.store.BeforeSet = func(string) { sets++ }
	for _, m := range []string{"gpt-4o", "gpt-5", "models/x"} {
		if _, ok := f.locked(t, m); ok {
			t.Fatalf("%s locked on a clean connection", m)
		}
		f.succeed(t, m)
	}
	if out := f.fail(t, "gpt-4o", v500, time.Time{}); out.Locked || out.Counted {
		t.Fatalf("500 is not a model failure: %+v", out)
	}
	if sets != 0 || f.store.Keys() != 1 {
		t.Fatalf("clean connection: %d writes, %d keys", sets, f.store.Keys())
	}
}

func TestListDeleteClear(t *testing.T) {
	cfg := enabled()
	cfg.Family = codexFamilies.Family
	// models/gemini is configured: a 404 locks the bare name only for a model with evidence
	// that it is real (the package doc), and a client-chosen, never-served one has none.
	f := newFixture(t, cfg, "models/gemini")
	f.fail(t, "gpt-5-mini", v429, time.Time{})    // family codex, 120s
	f.fail(t, "gpt-4o", v502, time.Time{})        // exact gpt-4o, 120s
	f.fail(t, "models/gemini", v404, time.Time{}) // bare gemini, 120s
	f.clock.Advance(time.Minute)
	f.fail(t, "o3", testfixture.WithHint(v502, 10*time.Minute, failure.HintRetryAfter), time.Time{}) // exact o3, 10min

	list, err := f.tr.List(f.conn)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, e := range list {
		if e.Provider != "codex" || e.Connection != "codex-a" {
			t.Fatalf("entry names %s/%s", e.Provider, e.Connection)
		}
		got = append(got, fmt.Sprintf("%s:%s %s %d %d %s", e.Scope, e.Model, e.Reason, e.Status, e.FailureCount, e.ExpiresAt.Sub(t0)))
	}
	want := []string{
		"quota:codex rate_limit 429 1 2m0s",
		"exact:gpt-4o server_error 502 1 2m0s",
		"model:gemini not_found 404 1 2m0s",
		"exact:o3 server_error 502 1 11m0s",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("list\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Expired lockouts are not listed.
	f.clock.Advance(90 * time.Second)
	if list, _ := f.tr.List(f.conn); len(list) != 1 || list[0].Model != "o3" {
		t.Fatalf("after expiry: %+v", list)
	}
	f.clock.Set(t0.Add(time.Minute))

	// Delete by a model re-enables its family lock too; by a family name removes that entry.
	if n, err := f.tr.Delete(f.conn, "gpt-5.1"); err != nil || n != 1 {
		t.Fatalf("Delete(gpt-5.1) = %d, %v; want the codex family lock", n, err)
	}
	if _, ok := f.locked(t, "gpt-5-mini"); ok {
		t.Fatal("family still locked after delete")
	}
	if n, err := f.tr.Delete(f.conn, "gemini"); err != nil || n != 1 {
		t.Fatalf("Delete(gemini) = %d, %v", n, err)
	}
	if n, err := f.tr.Delete(f.conn, "never-locked"); err != nil || n != 0 {
		t.Fatalf("Delete(never-locked) = %d, %v", n, err)
	}
	if list, _ := f.tr.List(f.conn); len(list) != 2 {
		t.Fatalf("after deletes: %+v", list)
	}

	n, err := f.tr.ClearConnection(f.conn)
	if err != nil || n != 2 {
		t.Fatalf("ClearConnection = %d, %v; want 2", n, err)
	}
	if _, ok := f.locked(t, "o3"); ok {
		t.Fatal("o3 locked after clear")
	}
	if f.store.Keys() != 1 {
		t.Fatalf("%d live keys after clear, want only the store guard", f.store.Keys())
	}
	if n, err := f.tr.ClearConnection(f.conn); err != nil || n != 0 {
		t.Fatalf("second clear = %d, %v", n, err)
	}
}

func TestIndexIsBoundedAndPruned(t *testing.T) {
	const models = maxIndexEntries + 6
	var names []string
	for i := 0; i < models; i++ {
		names = append(names, fmt.Sprintf("m%02d", i))
	}
	f := newFixture(t, enabled(), names...) // a policy naming 70 models on one connection
	for i := 0; i < models; i++ {
		f.clock.Advance(time.Millisecond) // each lock ends a little later than the one before
		f.fail(t, fmt.Sprintf("m%02d", i), v502, time.Time{})
	}
	list, err := f.tr.List(f.conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != maxIndexEntries || list[0].Model != "m06" || list[len(list)-1].Model != fmt.Sprintf("m%02d", models-1) {
		t.Fatalf("index of %d entries from %s to %s; want %d, the earliest-ending dropped",
			len(list), list[0].Model, list[len(list)-1].Model, maxIndexEntries)
	}
	if _, ok := f.locked(t, "m69"); !ok {
		t.Fatal("newest lock not visible")
	}
	// Past the escalation window every entry is dead and the next rewrite prunes them.
	f.clock.Advance(time.Hour)
	f.fail(t, "fresh", v502, time.Time{})
	raw, _, _, _ := f.store.Get(f.conn.indexKey)
	x, err := decodeIndex(raw)
	if err != nil || len(x.entries) != 1 || x.entries[0].name != "fresh" {
		t.Fatalf("pruned index: %+v %v", x.entries, err)
	}
}

func TestCorruptReadsAreAbsent(t *testing.T) {
	f := newFixture(t, enabled(), "m")
	f.fail(t, "m", v502, time.Time{})
	lockKey := f.conn.lockKey(failure.ScopeExact, "m")

	// A corrupt lock record: not locked, and the next failure starts over.
	if err := f.store.Set(lockKey, []byte{'L', 1, 0x80}, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.locked(t, "m"); ok {
		t.Fatal("corrupt lock record read as locked")
	}
	if f.tr.CorruptReads() != 1 {
		t.Fatalf("corrupt count %d", f.tr.CorruptReads())
	}
	if out := f.fail(t, "m", v502, time.Time{}); !out.Counted || out.Lock.FailureCount != 1 {
		t.Fatalf("failure over corrupt record: %+v", out)
	}

	// A corrupt index: not locked; the next failure rebuilds it.
	badIndexes := [][]byte{
		{'X', 2},
		{'X', 2, 0x80},
		{'X', 1, 0, 0, 0}, // the old version
		index{entries: []indexEntry{{scope: failure.ScopeExact, until: 1, hash: 42, name: "m"}}}.encode(), // hash mismatch
		[]byte("garbage"),
	}
	for i, b := range badIndexes {
		if err := f.store.Set(f.conn.indexKey, b, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeIndex(b); !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("case %d: decodeIndex err %v", i, err)
		}
		if _, ok := f.locked(t, "m"); ok {
			t.Fatalf("case %d: locked through a corrupt index", i)
		}
		f.succeed(t, "m") // must not panic or fail
	}
	f.clock.Advance(time.Hour)
	f.fail(t, "m", v502, time.Time{})
	if _, ok := f.locked(t, "m"); !ok {
		t.Fatal("index not rebuilt after corruption")
	}
}

type failingStore struct{ state.Store }

var errStore = errors.New("host said no")

func (failingStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errStore }

func TestStoreErrors(t *testing.T) {
	tr, err := New(failingStore{state.NewMemStore()}, manualclock.New(t0), enabled())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewConn("p", "c", "p/c", "")
	if _, ok, err := tr.Locked(c, "m"); ok || !errors.Is(err, errStore) {
		t.Fatalf("Locked: ok=%v err=%v; want fail open with the error", ok, err)
	}
	if _, err := tr.RecordFailure(c, Failure{Model: "m", Verdict: v502}); !errors.Is(err, errStore) || !strings.HasPrefix(err.Error(), "lockout: ") {
		t.Fatalf("RecordFailure: %v", err)
	}
	if err := tr.RecordSuccess(c, "m", time.Time{}); !errors.Is(err, errStore) {
		t.Fatalf("RecordSuccess: %v", err)
	}
	if _, err := tr.List(c); !errors.Is(err, errStore) {
		t.Fatalf("List: %v", err)
	}
	if _, err := tr.Delete(c, "m"); !errors.Is(err, errStore) {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := tr.ClearConnection(c); !errors.Is(err, errStore) {
		t.Fatalf("ClearConnection: %v", err)
	}
	if _, _, err := tr.Locked(c, ""); err == nil {
		t.Fatal("empty model accepted")
	}
	bad := enabled()
	bad.Family = func(string) string { return "" }
	tr2, _ := New(state.NewMemStore(), manualclock.New(t0), bad)
	if _, err := tr2.RecordFailure(c, Failure{Model: "m", Verdict: v429}); err == nil {
		t.Fatal("empty family name accepted")
	}
}
