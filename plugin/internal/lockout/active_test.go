package lockout

import (
	"testing"
	"time"
)

// Active counts what List lists, and reads nothing but the index when nothing is in force.
func TestActiveCountsTheLockoutsInForce(t *testing.T) {
	f := newFixture(t, enabled())
	active := func() int {
		t.Helper()
		n, err := f.tr.Active(f.conn)
		if err != nil {
			t.Fatal(err)
		}
		list, err := f.tr.List(f.conn)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(list) {
			t.Fatalf("Active = %d, List has %d", n, len(list))
		}
		return n
	}
	if n := active(); n != 0 {
		t.Fatalf("clean connection: %d", n)
	}
	f.fail(t, "gpt-4o", v502, time.Time{}) // 120 s
	f.clock.Advance(time.Minute)
	f.fail(t, "o3", v502, time.Time{}) // 120 s from here
	if n := active(); n != 2 {
		t.Fatalf("two lockouts: %d", n)
	}
	f.clock.Advance(90 * time.Second) // gpt-4o's ended
	if n := active(); n != 1 {
		t.Fatalf("after one ended: %d", n)
	}
	f.clock.Advance(time.Minute) // both ended: the index alone says so
	allocs := testing.AllocsPerRun(20, func() {
		if n, err := f.tr.Active(f.conn); n != 0 || err != nil {
			t.Fatalf("all ended: %d %v", n, err)
		}
	})
	// MemStore copies what it returns (shared data hands over a buffer): Active may cost
	// that read and nothing more.
	read := testing.AllocsPerRun(20, func() { _, _, _, _ = f.store.Get(f.conn.indexKey) })
	if allocs != read {
		t.Errorf("Active allocates %.0f times with nothing in force, its index read %.0f", allocs, read)
	}
	// A rotated credential starts clean.
	f.fail(t, "gpt-4o", v502, time.Time{})
	rotated, err := NewConn("codex", "codex-a", "codex/codex-a", "fp-2")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.tr.Active(rotated); n != 0 || err != nil {
		t.Fatalf("rotated credential: %d %v", n, err)
	}
}
