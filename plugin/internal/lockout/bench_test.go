package lockout

import (
	"fmt"
	"testing"
	"time"
)

// Benchmarks call the Tracker directly: the fixture helpers' t.Helper() would dominate.

// The hot path: a candidate check on a connection that never had a lockout.
func BenchmarkLockedNothingLocked(b *testing.B) {
	f := newFixture(b, enabled())
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := f.tr.Locked(f.conn, "gpt-5-mini"); ok || err != nil {
			b.Fatal("locked")
		}
	}
}

// Every listed lockout has ended: one read, the index's first value decides.
func BenchmarkLockedAllEnded(b *testing.B) {
	f := newFixture(b, enabled())
	for i := 0; i < 8; i++ {
		f.fail(b, fmt.Sprintf("m%d", i), v502, time.Time{})
	}
	f.clock.Advance(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, _ := f.tr.Locked(f.conn, "gpt-5-mini"); ok {
			b.Fatal("locked")
		}
	}
}

// Other models of the connection are locked: the index triples are scanned, no record read.
func BenchmarkLockedOthersLocked(b *testing.B) {
	f := newFixture(b, enabled())
	for i := 0; i < 8; i++ {
		f.fail(b, fmt.Sprintf("m%d", i), v502, time.Time{})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, _ := f.tr.Locked(f.conn, "gpt-5-mini"); ok {
			b.Fatal("locked")
		}
	}
}

func BenchmarkLockedHit(b *testing.B) {
	f := newFixture(b, enabled())
	f.fail(b, "gpt-5-mini", v429, time.Time{})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, _ := f.tr.Locked(f.conn, "gpt-5-mini"); !ok {
			b.Fatal("not locked")
		}
	}
}

func BenchmarkRecordSuccessClean(b *testing.B) {
	f := newFixture(b, enabled())
	b.ReportAllocs()
	for b.Loop() {
		if err := f.tr.RecordSuccess(f.conn, "gpt-5-mini", time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// Every iteration is a fresh, counted failure that writes the lock and the index.
func BenchmarkRecordFailure(b *testing.B) {
	f := newFixture(b, enabled())
	b.ReportAllocs()
	for b.Loop() {
		f.clock.Advance(time.Hour)
		out, err := f.tr.RecordFailure(f.conn, Failure{Model: "gpt-5-mini", Verdict: v502})
		if err != nil || !out.Counted {
			b.Fatal("not counted")
		}
	}
}
