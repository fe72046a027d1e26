package providercooldown

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// Benchmarks run over MemStore, whose Get copies a found value (one allocation, as
// Envoy's shared-data get copies into guest memory); an absent record costs none.

func BenchmarkCheckDisabled(b *testing.B) {
	e := newEnv(b)
	cfg, _ := DefaultConfig(policies.ProfileAPIKey)
	p := providerEntry(b, "prov", cfg)
	b.ReportAllocs()
	for b.Loop() {
		if s, err := e.g.Check(p); err != nil || s.Cooling {
			b.Fatal(s, err)
		}
	}
}

func BenchmarkCheckAbsent(b *testing.B) {
	e := newEnv(b)
	p := providerEntry(b, "prov", enabled(b, policies.ProfileAPIKey, nil))
	b.ReportAllocs()
	for b.Loop() {
		if s, err := e.g.Check(p); err != nil || s.Cooling {
			b.Fatal(s, err)
		}
	}
}

func BenchmarkCheckWindowOfFourteen(b *testing.B) {
	e := newEnv(b)
	p := providerEntry(b, "prov", enabled(b, policies.ProfileAPIKey, nil))
	for i := 0; i < 14; i++ {
		e.clock.Advance(time.Second)
		fail(b, e.g, p, 1)
	}
	b.ReportAllocs()
	for b.Loop() {
		if s, err := e.g.Check(p); err != nil || s.Cooling || s.Failures != 14 {
			b.Fatal(s, err)
		}
	}
}

func BenchmarkRecordSuccessAbsent(b *testing.B) {
	e := newEnv(b)
	p := providerEntry(b, "prov", enabled(b, policies.ProfileAPIKey, nil))
	b.ReportAllocs()
	for b.Loop() {
		if err := e.g.RecordSuccess(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordFailureWindow(b *testing.B) {
	e := newEnv(b)
	p := providerEntry(b, "prov", enabled(b, policies.ProfileAPIKey, nil))
	b.ReportAllocs()
	for b.Loop() {
		e.clock.Advance(3 * time.Minute) // 30 min window, threshold 15: a steady 10, never cooling
		if _, err := e.g.RecordFailure(p, vServer); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordFailureWindowWorstCase keeps the largest window Validate allows.
func BenchmarkRecordFailureWindowWorstCase(b *testing.B) {
	e := newEnv(b)
	p := providerEntry(b, "prov", enabled(b, policies.ProfileAPIKey, func(c *Config) { c.FailureThreshold = maxThreshold }))
	b.ReportAllocs()
	for b.Loop() {
		e.clock.Advance(time.Second) // 15 min window, threshold 1000: a steady ~900 failures
		if _, err := e.g.RecordFailure(p, vServer); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordFailureConnection(b *testing.B) {
	e := newEnv(b)
	c := connectionEntry(b, "prov", "conn", enabled(b, policies.ProfileAPIKey, nil))
	b.ReportAllocs()
	for b.Loop() {
		e.clock.Advance(3 * time.Minute) // past any cooldown, so every failure writes
		if _, err := e.g.RecordFailure(c, vServer); err != nil {
			b.Fatal(err)
		}
	}
}
