package conncooldown

import (
	"testing"
	"time"
)

// Benchmarks call the Tracker directly: the fixture helpers' t.Helper() would dominate.

func BenchmarkCheckClean(b *testing.B) {
	f := newFixture(b, apikey())
	b.ReportAllocs()
	for b.Loop() {
		if a, err := f.tr.Check(f.conn); err != nil || !a.Available() {
			b.Fatal("clean connection not available")
		}
	}
}

func BenchmarkCheckCooling(b *testing.B) {
	f := newFixture(b, apikey())
	f.fail(b, vServer, f.clock.Now())
	b.ReportAllocs()
	for b.Loop() {
		if a, _ := f.tr.Check(f.conn); a.Available() {
			b.Fatal("cooling connection available")
		}
	}
}

func BenchmarkRecordSuccessClean(b *testing.B) {
	f := newFixture(b, apikey())
	b.ReportAllocs()
	for b.Loop() {
		if err := f.tr.RecordSuccess(f.conn, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// Every iteration is a fresh, counted failure: the clock moves past the previous cooldown.
func BenchmarkRecordFailure(b *testing.B) {
	f := newFixture(b, apikey())
	b.ReportAllocs()
	for b.Loop() {
		f.clock.Advance(time.Hour)
		out, err := f.tr.RecordFailure(f.conn, Failure{Verdict: vServer, Started: f.clock.Now()})
		if err != nil || !out.Counted {
			b.Fatal("failure not counted")
		}
	}
}

// Overlapping failures while cooling: read, decide, no write.
func BenchmarkRecordFailureHerd(b *testing.B) {
	f := newFixture(b, apikey())
	f.fail(b, vServer, f.clock.Now())
	b.ReportAllocs()
	for b.Loop() {
		out, err := f.tr.RecordFailure(f.conn, Failure{Verdict: vServer, Started: f.clock.Now()})
		if err != nil || out.Counted {
			b.Fatal("overlapping failure counted")
		}
	}
}
