package selection

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// window describes samples to record for one candidate.
type window struct {
	n        int           // how many samples
	ttfb     time.Duration // time to first byte of each
	failures int           // how many of them failed (the first ones)
	age      time.Duration // how long ago they were recorded
	model    string        // model recorded ("" = the candidate's model "m")
}

func (w window) record(e *env, conn string) {
	model := w.model
	if model == "" {
		model = "m"
	}
	for i := 0; i < w.n; i++ {
		e.tracker.Record("p", conn, model, e.clock.Now().Add(-w.age), w.ttfb, i >= w.failures)
	}
}

func TestP2CLatencyTerm(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string   // the rule under test
		weight   int      // p2cLatency.weight
		a, b     []window // samples recorded for a and b, in order
		inFlight [2]int   // in-flight of a and b
		penalty  [2]int   // soft penalty points of a and b
		want     string   // "a" or "b" always wins, or "either" when the pair is a coin toss
	}{
		{name: "weight 0 is off", weight: 0,
			a: []window{{n: 10, ttfb: 100 * ms}}, b: []window{{n: 10, ttfb: 900 * ms, failures: 10}}, want: "either"},
		{name: "faster wins", weight: 10,
			a: []window{{n: 5, ttfb: 100 * ms}}, b: []window{{n: 5, ttfb: 300 * ms}}, want: "a"},
		{name: "3 samples each is enough", weight: 10,
			a: []window{{n: 3, ttfb: 300 * ms}}, b: []window{{n: 3, ttfb: 100 * ms}}, want: "b"},
		{name: "2 samples: a new connection is not penalised", weight: 10,
			a: []window{{n: 5, ttfb: 100 * ms}}, b: []window{{n: 2, ttfb: 900 * ms, failures: 2}}, want: "either"},
		{name: "samples older than 15 minutes do not count", weight: 10,
			a: []window{{n: 5, ttfb: 100 * ms}}, b: []window{{n: 20, ttfb: 900 * ms, failures: 20, age: 15 * time.Minute}},
			want: "either"},
		{name: "only the last 20 samples count", weight: 10,
			a: []window{{n: 5, ttfb: 100 * ms}},
			b: []window{{n: 20, ttfb: 900 * ms, failures: 20, age: time.Minute}, {n: 20, ttfb: 100 * ms}}, want: "either"},
		{name: "error rate alone decides", weight: 10,
			a: []window{{n: 5, ttfb: 100 * ms, failures: 2}}, b: []window{{n: 5, ttfb: 100 * ms}}, want: "b"},
		{name: "load outweighs the capped term", weight: 5,
			a: []window{{n: 5, ttfb: 100 * ms}}, b: []window{{n: 5, ttfb: 900 * ms, failures: 5}},
			inFlight: [2]int{6, 0}, want: "b"},
		{name: "term outweighs a small load difference", weight: 10,
			a: []window{{n: 5, ttfb: 100 * ms}}, b: []window{{n: 5, ttfb: 200 * ms}},
			inFlight: [2]int{4, 0}, want: "a"},
		{name: "partial latency penalty vs load", weight: 10,
			a: []window{{n: 5, ttfb: 150 * ms}}, b: []window{{n: 5, ttfb: 100 * ms}},
			inFlight: [2]int{0, 2}, want: "b"}, // a: 2.5 points of latency, b: 2 in flight
		{name: "quota-locked penalty beats the maximal term", weight: 20,
			a: []window{{n: 20, ttfb: 100 * ms}}, b: []window{{n: 20, ttfb: time.Minute, failures: 20}},
			penalty: [2]int{PenaltyQuotaLocked, 0}, want: "b"},
		{name: "exhausted is worse than locked", weight: 0,
			penalty: [2]int{PenaltyQuotaExhausted, PenaltyQuotaLocked}, want: "b"},
		{name: "model windows are preferred", weight: 10,
			a: []window{{n: 10, ttfb: 100 * ms, model: "other"}, {n: 5, ttfb: 900 * ms}},
			b: []window{{n: 5, ttfb: 200 * ms}}, want: "b"},
		{name: "connection windows when a model has too few samples", weight: 10,
			a: []window{{n: 10, ttfb: 100 * ms, model: "other"}, {n: 2, ttfb: 900 * ms}},
			b: []window{{n: 5, ttfb: 300 * ms}}, want: "a"}, // a's connection mean ≈ 233ms < 300ms
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 31, tc.weight)
			for _, w := range tc.a {
				w.record(e, "a")
			}
			for _, w := range tc.b {
				w.record(e, "b")
			}
			c := mustCombo(t, "r", P2C, 2)
			in := list("a", "b")
			for i := range in {
				in[i].InFlight, in[i].Penalty = tc.inFlight[i], tc.penalty[i]
			}
			counts := map[string]int{}
			for i := 0; i < 400; i++ {
				got, _ := order(t, e.sel, c, in, Pin{})
				sameSet(t, got, in)
				counts[got[0].Connection]++
			}
			switch tc.want {
			case "either":
				if counts["a"] < 140 || counts["b"] < 140 {
					t.Fatalf("picks %v, want a coin toss", counts)
				}
			default:
				if counts[tc.want] != 400 {
					t.Fatalf("picks %v, want %s every time", counts, tc.want)
				}
			}
		})
	}
}

func TestP2CFailoverOrderIsSuccessivePairs(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 3, 0)
	c := mustCombo(t, "r", P2C, 4)
	in := list("a", "b", "c", "d")
	for i := range in {
		in[i].InFlight = 10 * i // a lightest ... d heaviest
	}
	lastCounts := map[string]int{}
	for i := 0; i < 500; i++ {
		got, _ := order(t, e.sel, c, in, Pin{})
		sameSet(t, got, in)
		if got[0].Connection == "d" {
			t.Fatalf("order %s: the heaviest can never win a pair", names(got))
		}
		lastCounts[got[3].Connection]++
	}
	// a wins every pair it is drawn into, so it is placed before the last position.
	if lastCounts["a"] != 0 {
		t.Fatalf("last places %v: a is lightest and cannot be last", lastCounts)
	}
}
