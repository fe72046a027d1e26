package breaker

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// Benchmarks run over MemStore, whose Get copies a found value (one allocation, as
// Envoy's shared-data get copies into guest memory); an absent record costs none.

func BenchmarkAllowAbsent(b *testing.B) {
	e := newEnv(b)
	p := provider(b, "prov", policies.ProfileAPIKey, nil)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := e.b.Allow(p); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

func BenchmarkAllowClosedWithFailures(b *testing.B) {
	e := newEnv(b)
	p := provider(b, "prov", policies.ProfileAPIKey, nil)
	fail(b, e.b, p, 3, verdict503)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := e.b.Allow(p); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

func BenchmarkAllowOpen(b *testing.B) {
	e := newEnv(b)
	p := provider(b, "prov", policies.ProfileAPIKey, nil)
	fail(b, e.b, p, 12, verdict503)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := e.b.Allow(p); err != nil || d.Allowed {
			b.Fatal(d, err)
		}
	}
}

func BenchmarkRecordSuccessAbsent(b *testing.B) {
	e := newEnv(b)
	p := provider(b, "prov", policies.ProfileAPIKey, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.b.RecordSuccess(p, Attempt{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordFailure(b *testing.B) {
	e := newEnv(b)
	p := provider(b, "prov", policies.ProfileAPIKey, bigThresholds)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.b.RecordFailure(p, verdict503, Attempt{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordFailureOpenCycle measures a full cycle: 12 failures open the circuit,
// the OPEN period passes, the probe is claimed and succeeds.
func BenchmarkRecordFailureOpenCycle(b *testing.B) {
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	br := New(store, clock)
	p := provider(b, "prov", policies.ProfileAPIKey, nil)
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < 12; i++ {
			if _, err := br.RecordFailure(p, verdict503, Attempt{}); err != nil {
				b.Fatal(err)
			}
		}
		clock.Advance(4 * time.Minute)
		if d, err := br.Allow(p); err != nil || !d.Probe {
			b.Fatal(d, err)
		}
		if _, err := br.RecordSuccess(p, Attempt{}); err != nil {
			b.Fatal(err)
		}
		clock.Advance(4 * time.Minute)
	}
}
