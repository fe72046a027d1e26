package latency

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

var t0 = testfixture.T0

func newTracker(t testing.TB) *Tracker {
	t.Helper()
	tr, err := NewTracker(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestNewTrackerValidates(t *testing.T) {
	tests := []struct {
		name string // what is wrong with the config
		cfg  Config // the config to try
		ok   bool   // whether NewTracker accepts it
	}{
		{name: "guide defaults", cfg: DefaultConfig(), ok: true},
		{name: "zero max tracked means default", cfg: Config{Samples: 20, Window: time.Minute}, ok: true},
		{name: "no samples", cfg: Config{Samples: 0, Window: time.Minute}},
		{name: "too many samples", cfg: Config{Samples: MaxSamplesPerWindow + 1, Window: time.Minute}},
		{name: "zero window", cfg: Config{Samples: 20}},
		{name: "negative window", cfg: Config{Samples: 20, Window: -time.Second}},
		{name: "negative max tracked", cfg: Config{Samples: 20, Window: time.Minute, MaxTracked: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewTracker(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewTracker(%+v) error = %v, want ok=%v", tc.cfg, err, tc.ok)
			}
		})
	}
}

func TestDefaultConfigIsTheGuides(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.Samples != 20 || cfg.Window != 15*time.Minute {
		t.Fatalf("DefaultConfig() = %+v, want the last 20 samples within 15 minutes", cfg)
	}
}

func TestWindowKeepsTheLast20Samples(t *testing.T) {
	tr := newTracker(t)
	// 5 failures first, then 20 successes at 100 ms: only the successes remain.
	for i := 0; i < 5; i++ {
		tr.Record("p", "c", "m", t0.Add(time.Duration(i)*time.Second), 0, false)
	}
	for i := 0; i < 20; i++ {
		tr.Record("p", "c", "m", t0.Add(time.Duration(10+i)*time.Second), 100*time.Millisecond, true)
	}
	now := t0.Add(time.Minute)
	for _, st := range []Stats{tr.Connection("p", "c", now), tr.Model("p", "c", "m", now)} {
		want := Stats{Samples: 20, Failures: 0, Timed: 20, MeanTTFB: 100 * time.Millisecond}
		if st != want {
			t.Fatalf("stats = %+v, want %+v", st, want)
		}
	}
}

func TestWindowDropsSamplesOlderThan15Minutes(t *testing.T) {
	// Samples at t0-4m (fail), t0-3m (fail, untimed), t0-1m (ok) and t0 (ok).
	tests := []struct {
		name   string        // what the query time shows
		now    time.Duration // query time relative to t0
		want   int           // samples still counted
		failed int           // failures still counted
		timed  int           // timed samples still counted
	}{
		{name: "all fresh", now: 0, want: 4, failed: 2, timed: 3},
		{name: "oldest is 15m minus 1ns old", now: 11*time.Minute - 1, want: 4, failed: 2, timed: 3},
		{name: "oldest is exactly 15m old: out", now: 11 * time.Minute, want: 3, failed: 1, timed: 2},
		{name: "both failures expired", now: 12 * time.Minute, want: 2, failed: 0, timed: 2},
		{name: "all expired", now: time.Hour, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(t)
			tr.Record("p", "c", "", t0.Add(-4*time.Minute), time.Second, false)
			tr.Record("p", "c", "", t0.Add(-3*time.Minute), 0, false)
			tr.Record("p", "c", "", t0.Add(-time.Minute), time.Second, true)
			tr.Record("p", "c", "", t0, time.Second, true)
			st := tr.Connection("p", "c", t0.Add(tc.now))
			if st.Samples != tc.want || st.Failures != tc.failed || st.Timed != tc.timed {
				t.Fatalf("at t0%+v: stats = %+v, want %d samples, %d failures, %d timed",
					tc.now, st, tc.want, tc.failed, tc.timed)
			}
		})
	}
}

func TestRecordSeparatesLevelsAndKeys(t *testing.T) {
	tr := newTracker(t)
	tr.Record("p", "c", "m1", t0, 10*time.Millisecond, true)
	tr.Record("p", "c", "m2", t0, 30*time.Millisecond, false)
	tr.Record("q", "c", "m1", t0, time.Second, true) // another provider's connection "c"
	tr.Record("p", "", "m1", t0, time.Second, true)  // no connection: ignored
	if got := tr.Connection("p", "c", t0); got.Samples != 2 || got.Failures != 1 || got.MeanTTFB != 20*time.Millisecond {
		t.Fatalf("connection stats = %+v, want 2 samples, 1 failure, 20ms mean", got)
	}
	if got := tr.Model("p", "c", "m1", t0); got.Samples != 1 || got.MeanTTFB != 10*time.Millisecond {
		t.Fatalf("model m1 stats = %+v, want 1 sample at 10ms", got)
	}
	if got := tr.Connection("q", "c", t0); got.Samples != 1 || got.MeanTTFB != time.Second {
		t.Fatalf("provider q stats = %+v, want its own sample only", got)
	}
	if got := tr.Tracked(); got != 5 {
		t.Fatalf("Tracked() = %d, want 5 windows (p/c, p/c/m1, p/c/m2, q/c, q/c/m1)", got)
	}
}

func TestRecordClampsTTFB(t *testing.T) {
	tr := newTracker(t)
	tr.Record("p", "c", "", t0, -time.Second, true)  // negative: untimed
	tr.Record("p", "c", "", t0, 100*time.Hour, true) // clamped to an hour
	tr.Record("p", "c", "", t0, time.Nanosecond, true)
	st := tr.Connection("p", "c", t0)
	if st.Samples != 3 || st.Timed != 2 {
		t.Fatalf("stats = %+v, want 3 samples of which 2 timed", st)
	}
	want := 30 * time.Minute // (1h + 1µs) / 2 in whole microseconds
	if st.MeanTTFB != want {
		t.Fatalf("mean = %v, want %v (1h clamp and 1µs floor)", st.MeanTTFB, want)
	}
}

func TestTrackerBoundsItsWindows(t *testing.T) {
	tr, err := NewTracker(Config{Samples: 4, Window: time.Minute, MaxTracked: 2})
	if err != nil {
		t.Fatal(err)
	}
	tr.Record("p", "a", "", t0, time.Second, true)
	tr.Record("p", "b", "", t0.Add(30*time.Second), time.Second, true)
	tr.Record("p", "c", "", t0.Add(40*time.Second), time.Second, true) // both fresh: dropped
	if tr.Tracked() != 2 || tr.Dropped != 1 {
		t.Fatalf("tracked %d dropped %d, want 2 and 1", tr.Tracked(), tr.Dropped)
	}
	if got := tr.Connection("p", "c", t0.Add(40*time.Second)); got.Samples != 0 {
		t.Fatalf("untracked key has %+v", got)
	}
	// a's only sample is now older than the window: it is evicted to make room.
	tr.Record("p", "c", "", t0.Add(70*time.Second), time.Second, true)
	if tr.Tracked() != 2 || tr.Dropped != 1 {
		t.Fatalf("tracked %d dropped %d, want 2 and 1", tr.Tracked(), tr.Dropped)
	}
	if got := tr.Connection("p", "c", t0.Add(70*time.Second)); got.Samples != 1 {
		t.Fatalf("c after eviction has %+v, want 1 sample", got)
	}
	if got := tr.Connection("p", "b", t0.Add(70*time.Second)); got.Samples != 1 {
		t.Fatalf("fresh window b was evicted: %+v", got)
	}
}

func TestClampWeight(t *testing.T) {
	for in, want := range map[int]int{-5: 0, 0: 0, 7: 7, 20: 20, 21: 20, 1000: 20} {
		if got := ClampWeight(in); got != want {
			t.Errorf("ClampWeight(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestPairTerm(t *testing.T) {
	ms := time.Millisecond
	ok := func(n int, mean time.Duration) Stats { return Stats{Samples: n, Timed: n, MeanTTFB: mean} }
	tests := []struct {
		name    string // the rule under test
		weight  int    // configured p2c latency weight
		a, b    Stats  // the pair's windows
		wantA   int64  // penalty of a in milli-points
		wantB   int64  // penalty of b in milli-points
		applied bool   // whether the term applies at all
	}{
		{name: "weight 0 is off", weight: 0, a: ok(10, 100*ms), b: ok(10, 900*ms)},
		{name: "negative weight is off", weight: -3, a: ok(10, 100*ms), b: ok(10, 900*ms)},
		{name: "a has 2 samples: no term", weight: 10, a: ok(2, 100*ms), b: ok(10, 900*ms)},
		{name: "b has 2 samples: no term", weight: 10, a: ok(10, 100*ms), b: ok(2, 900*ms)},
		{name: "3 samples each is enough", weight: 10, a: ok(3, 100*ms), b: ok(3, 200*ms),
			wantA: 0, wantB: 5000, applied: true},
		{name: "equal latency, no errors", weight: 10, a: ok(5, 100*ms), b: ok(5, 100*ms), applied: true},
		{name: "1.5x slower takes half of the latency half", weight: 10, a: ok(5, 100*ms), b: ok(5, 150*ms),
			wantA: 0, wantB: 2500, applied: true},
		{name: "twice as slow takes the full half", weight: 10, a: ok(5, 200*ms), b: ok(5, 100*ms),
			wantA: 5000, wantB: 0, applied: true},
		{name: "ten times slower is capped at the half", weight: 10, a: ok(5, 100*ms), b: ok(5, time.Second),
			wantA: 0, wantB: 5000, applied: true},
		{name: "error rate takes the other half", weight: 10,
			a:     Stats{Samples: 4, Failures: 1, Timed: 4, MeanTTFB: 100 * ms},
			b:     Stats{Samples: 4, Failures: 4, Timed: 4, MeanTTFB: 100 * ms},
			wantA: 1250, wantB: 5000, applied: true},
		{name: "worst case is the full weight", weight: 20, a: ok(5, 100*ms),
			b:     Stats{Samples: 5, Failures: 5, Timed: 5, MeanTTFB: time.Minute},
			wantA: 0, wantB: 20000, applied: true},
		{name: "weight above 20 is clamped", weight: 50, a: ok(5, 100*ms),
			b:     Stats{Samples: 5, Failures: 5, Timed: 5, MeanTTFB: time.Minute},
			wantA: 0, wantB: 20000, applied: true},
		{name: "untimed side: only error rates", weight: 10, a: ok(5, 100*ms),
			b:     Stats{Samples: 5, Failures: 5},
			wantA: 0, wantB: 5000, applied: true},
		{name: "odd weight keeps the fraction", weight: 1, a: ok(5, 100*ms), b: ok(5, 300*ms),
			wantA: 0, wantB: 500, applied: true},
		{name: "sub-microsecond means do not divide by zero", weight: 10,
			a: Stats{Samples: 3, Timed: 3, MeanTTFB: 1}, b: Stats{Samples: 3, Timed: 3, MeanTTFB: 5},
			wantA: 0, wantB: 0, applied: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b, applied := PairTerm(tc.weight, policies.P2CLatencyMinSamples, tc.a, tc.b)
			if a != tc.wantA || b != tc.wantB || applied != tc.applied {
				t.Fatalf("PairTerm = (%d, %d, %v), want (%d, %d, %v)", a, b, applied, tc.wantA, tc.wantB, tc.applied)
			}
		})
	}
}

func TestPairTermNeverExceedsWeight(t *testing.T) {
	// Exhaustive over small windows: the term is at most weight points per candidate.
	for w := 0; w <= policies.P2CLatencyWeightMax; w++ {
		for fail := 0; fail <= 5; fail++ {
			for _, mean := range []time.Duration{time.Microsecond, time.Millisecond, time.Hour} {
				a := Stats{Samples: 5, Failures: fail, Timed: 5, MeanTTFB: mean}
				b := Stats{Samples: 5, Timed: 5, MeanTTFB: time.Microsecond}
				pa, pb, _ := PairTerm(w, policies.P2CLatencyMinSamples, a, b)
				if pa > int64(w)*MilliPoint || pb > int64(w)*MilliPoint || pa < 0 || pb < 0 {
					t.Fatalf("weight %d, %d failures, mean %v: penalties %d, %d out of 0..%d", w, fail, mean, pa, pb, w*MilliPoint)
				}
			}
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	tr := newTracker(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tr.Record("p", "c", "m", t0.Add(time.Duration(i)*time.Millisecond), 120*time.Millisecond, i%7 != 0)
	}
}

func BenchmarkStats(b *testing.B) {
	tr := newTracker(b)
	for i := 0; i < 20; i++ {
		tr.Record("p", "c", "m", t0.Add(time.Duration(i)*time.Second), 120*time.Millisecond, i%7 != 0)
	}
	now := t0.Add(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		if tr.Model("p", "c", "m", now).Samples != 20 {
			b.Fatal("lost samples")
		}
	}
}
