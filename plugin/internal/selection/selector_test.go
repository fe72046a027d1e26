package selection

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/latency"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

func TestNewValidates(t *testing.T) {
	tr, _ := latency.NewTracker(latency.DefaultConfig())
	src := rand.NewPCG(1, 2)
	store := state.NewMemStore()
	tests := []struct {
		name string // what is missing
		cfg  Config // config to try
		ok   bool   // whether New accepts it
	}{
		{name: "complete", cfg: Config{Store: store, Random: src, Latency: tr, Clock: manualclock.New(t0)}, ok: true},
		{name: "no latency needs no clock", cfg: Config{Store: store, Random: src}, ok: true},
		{name: "no store", cfg: Config{Random: src}},
		{name: "no random", cfg: Config{Store: store}},
		{name: "latency without clock", cfg: Config{Store: store, Random: src, Latency: tr}},
	}
	for _, tc := range tests {
		if _, err := New(tc.cfg); (err == nil) != tc.ok {
			t.Errorf("%s: New error = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestOrderRejectsBadInput(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 1, 0)
	c := mustCombo(t, "r", StrictRandom, 3)
	dup := list("a", "b")
	dup[1].Index = 0
	tests := []struct {
		name string  // what is wrong
		req  Request // the request
		want error   // sentinel the error wraps
	}{
		{name: "nil combo", req: Request{Candidates: list("a")}, want: ErrBadCombo},
		{name: "no candidates", req: Request{Combo: c}, want: ErrNoCandidates},
		{name: "index past targets", req: Request{Combo: c, Candidates: []Candidate{{Connection: "x", Index: 3}}}, want: ErrBadCandidate},
		{name: "negative index", req: Request{Combo: c, Candidates: []Candidate{{Connection: "x", Index: -1}}}, want: ErrBadCandidate},
		{name: "duplicate index in strict-random", req: Request{Combo: c, Candidates: dup}, want: ErrBadCandidate},
	}
	for _, tc := range tests {
		if _, err := e.sel.Order(tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: error = %v, want %v", tc.name, err, tc.want)
		}
	}
	// A rejected duplicate leaves no marks behind: a valid request still works.
	if _, err := e.sel.Order(Request{Combo: c, Candidates: list("a", "b", "c")}); err != nil {
		t.Fatalf("valid request after a rejected one: %v", err)
	}
}

func TestPriority(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 1, 0)
	c := mustCombo(t, "r", Priority, 4)
	in := list("a", "b", "c", "d")
	in[0].InFlight = 100 // load does not matter to priority
	for i := 0; i < 5; i++ {
		got, d := order(t, e.sel, c, in, Pin{})
		if names(got) != "a,b,c,d" || d.Pinned || d.Degraded != nil {
			t.Fatalf("priority order = %s %+v, want a,b,c,d", names(got), d)
		}
	}
}

func TestFillFirst(t *testing.T) {
	tests := []struct {
		name     string // the situation
		inFlight []int  // in-flight per candidate a, b, c
		caps     []int  // MaxConcurrent per candidate (0 = none)
		want     string // expected order
	}{
		{name: "first has room", inFlight: []int{1, 0, 0}, caps: []int{2, 2, 2}, want: "a,b,c"},
		{name: "first at capacity", inFlight: []int{2, 0, 0}, caps: []int{2, 2, 2}, want: "b,c,a"},
		{name: "first over capacity", inFlight: []int{5, 0, 0}, caps: []int{2, 2, 2}, want: "b,c,a"},
		{name: "first two full", inFlight: []int{2, 2, 1}, caps: []int{2, 2, 2}, want: "c,a,b"},
		{name: "all full keeps order", inFlight: []int{2, 2, 2}, caps: []int{2, 2, 2}, want: "a,b,c"},
		{name: "no cap never fills", inFlight: []int{100, 0, 0}, caps: []int{0, 1, 1}, want: "a,b,c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 1, 0)
			in := list("a", "b", "c")
			for i := range in {
				in[i].InFlight, in[i].MaxConcurrent = tc.inFlight[i], tc.caps[i]
			}
			got, _ := order(t, e.sel, mustCombo(t, "r", FillFirst, 3), in, Pin{})
			if names(got) != tc.want {
				t.Fatalf("order = %s, want %s", names(got), tc.want)
			}
		})
	}
}

func TestLeastUsed(t *testing.T) {
	tests := []struct {
		name     string   // the situation
		inFlight []int    // in-flight per candidate a, b, c, d
		first    []string // acceptable picks
		last     string   // the candidate that must come last
	}{
		{name: "one idle", inFlight: []int{3, 0, 2, 1}, first: []string{"b"}, last: "a"},
		{name: "tie between two", inFlight: []int{1, 4, 1, 2}, first: []string{"a", "c"}, last: "b"},
		{name: "negative counts as zero", inFlight: []int{2, -5, 1, 0}, first: []string{"b", "d"}, last: "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 7, 0)
			in := list("a", "b", "c", "d")
			for i := range in {
				in[i].InFlight = tc.inFlight[i]
			}
			firsts := map[string]int{}
			for i := 0; i < 200; i++ {
				got, _ := order(t, e.sel, mustCombo(t, "r", LeastUsed, 4), in, Pin{})
				sameSet(t, got, in)
				for k := 1; k < len(got); k++ {
					if clampLoad(got[k-1].InFlight) > clampLoad(got[k].InFlight) {
						t.Fatalf("order %s not by in-flight", names(got))
					}
				}
				if got[len(got)-1].Connection != tc.last {
					t.Fatalf("order %s, want %s last", names(got), tc.last)
				}
				firsts[got[0].Connection]++
			}
			for _, f := range tc.first {
				if firsts[f] == 0 {
					t.Fatalf("picks %v never chose %s: ties must be broken at random", firsts, f)
				}
			}
			if len(firsts) != len(tc.first) {
				t.Fatalf("picks %v, want only %v", firsts, tc.first)
			}
		})
	}
}

func TestWeightedSmoothSequence(t *testing.T) {
	tests := []struct {
		name    string // the weights
		weights []int  // per candidate a, b, c
		want    string // picks over one full cycle (sum of weights)
	}{
		// nginx's smooth weighted round-robin sequence for 5:1:1.
		{name: "5:1:1", weights: []int{5, 1, 1}, want: "aabacaa"},
		{name: "1:1:1 rotates", weights: []int{1, 1, 1}, want: "abc"},
		{name: "2:1:0 standby never leads", weights: []int{2, 1, 0}, want: "aba"},
		{name: "all zero is configured order", weights: []int{0, 0, 0}, want: "aaa"},
		{name: "negative counts as zero", weights: []int{-4, 1, 1}, want: "bc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 1, 0)
			c := mustCombo(t, "r", Weighted, 3)
			in := list("a", "b", "c")
			for i := range in {
				in[i].Weight = tc.weights[i]
			}
			var picks []byte
			for i := 0; i < 2*len(tc.want); i++ {
				got, _ := order(t, e.sel, c, in, Pin{})
				sameSet(t, got, in)
				picks = append(picks, got[0].Connection[0])
			}
			if want := tc.want + tc.want; string(picks) != want {
				t.Fatalf("picks = %s, want %s", picks, want)
			}
		})
	}
}

func TestWeightedFailoverOrderIsByWeight(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 1, 0)
	c := mustCombo(t, "r", Weighted, 4)
	in := list("a", "b", "c", "d")
	for i, w := range []int{1, 5, 0, 3} {
		in[i].Weight = w
	}
	got, _ := order(t, e.sel, c, in, Pin{})
	if names(got) != "b,d,a,c" { // first pick of 1:5:0:3 is b; the rest heaviest first
		t.Fatalf("order = %s, want b,d,a,c", names(got))
	}
}

func TestWeightedSkipsExcludedTargets(t *testing.T) {
	// A target excluded for a while (absent from the eligible list) keeps its place: the
	// others share its turns meanwhile, and the full ratio returns afterwards.
	e := newEnv(t, state.NewMemStore(), 1, 0)
	c := mustCombo(t, "r", Weighted, 3)
	all := list("a", "b", "c")
	counts := map[string]int{}
	for i := 0; i < 30; i++ {
		got, _ := order(t, e.sel, c, []Candidate{all[0], all[2]}, Pin{})
		counts[got[0].Connection]++
	}
	if counts["a"] != 15 || counts["c"] != 15 {
		t.Fatalf("without b: %v, want a and c 15 each", counts)
	}
	clear(counts)
	for i := 0; i < 300; i++ {
		got, _ := order(t, e.sel, c, all, Pin{})
		counts[got[0].Connection]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if counts[n] < 99 || counts[n] > 101 {
			t.Fatalf("after b returns: %v, want about 100 each", counts)
		}
	}
}

func TestRoundRobinRotates(t *testing.T) {
	store := state.NewMemStore()
	e := newEnv(t, store, 1, 0)
	c := mustCombo(t, "r", RoundRobin, 3)
	in := list("a", "b", "c")
	want := []string{"a,b,c", "b,c,a", "c,a,b", "a,b,c"}
	for i, w := range want {
		got, d := order(t, e.sel, c, in, Pin{})
		if names(got) != w || d.Degraded != nil {
			t.Fatalf("turn %d: order %s (%v), want %s", i, names(got), d.Degraded, w)
		}
	}
	// Another route has its own counter.
	other := mustCombo(t, "other", RoundRobin, 3)
	if got, _ := order(t, e.sel, other, in, Pin{}); names(got) != "a,b,c" {
		t.Fatalf("other route starts at %s, want a,b,c", names(got))
	}
}

func TestRoundRobinCorruptCounterRestarts(t *testing.T) {
	store := state.NewMemStore()
	e := newEnv(t, store, 1, 0)
	c := mustCombo(t, "r", RoundRobin, 3)
	if err := store.Set(c.counterKey, []byte{'R', 9, 1}, 0); err != nil { // unknown version
		t.Fatal(err)
	}
	got, d := order(t, e.sel, c, list("a", "b", "c"), Pin{})
	if names(got) != "a,b,c" || d.Degraded != nil {
		t.Fatalf("order %s %+v, want a restart at turn 0", names(got), d)
	}
	if got, _ := order(t, e.sel, c, list("a", "b", "c"), Pin{}); names(got) != "b,c,a" {
		t.Fatalf("next order %s, want b,c,a", names(got))
	}
}

func TestSharedStrategiesDegradeWhenStoreFails(t *testing.T) {
	for _, s := range []Strategy{RoundRobin, StrictRandom} {
		t.Run(s.String(), func(t *testing.T) {
			e := newEnv(t, failingStore{}, 1, 0)
			c := mustCombo(t, "r", s, 3)
			in := list("a", "b", "c")
			firsts := map[string]bool{}
			for i := 0; i < 30; i++ {
				got, d := order(t, e.sel, c, in, Pin{})
				sameSet(t, got, in)
				if !errors.Is(d.Degraded, errStoreDown) {
					t.Fatalf("Degraded = %v, want the store error", d.Degraded)
				}
				firsts[got[0].Connection] = true
			}
			if len(firsts) != 3 {
				t.Fatalf("fallback picked only %v, want every candidate over 30 turns", firsts)
			}
			// Pinned requests degrade the same way.
			got, d := order(t, e.sel, c, in, Pin{Provider: "p", Connection: "b"})
			if got[0].Connection != "b" || !d.Pinned || !errors.Is(d.Degraded, errStoreDown) {
				t.Fatalf("pinned: %s %+v", names(got), d)
			}
		})
	}
}

func TestRandomIsAPermutation(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 3, 0)
	c := mustCombo(t, "r", Random, 4)
	in := list("a", "b", "c", "d")
	orders := map[string]bool{}
	for i := 0; i < 500; i++ {
		got, _ := order(t, e.sel, c, in, Pin{})
		sameSet(t, got, in)
		orders[names(got)] = true
	}
	if len(orders) != 24 {
		t.Fatalf("saw %d of the 24 orders in 500 draws", len(orders))
	}
}

func TestStrictRandomOnePerCycle(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 5, 0)
	c := mustCombo(t, "r", StrictRandom, 4)
	in := list("a", "b", "c", "d")
	prev := ""
	for cycle := 0; cycle < 50; cycle++ {
		seen := map[string]bool{}
		for k := 0; k < 4; k++ {
			got, d := order(t, e.sel, c, in, Pin{})
			sameSet(t, got, in)
			pick := got[0].Connection
			if d.Degraded != nil {
				t.Fatal(d.Degraded)
			}
			if seen[pick] {
				t.Fatalf("cycle %d: %s drawn twice", cycle, pick)
			}
			if pick == prev {
				t.Fatalf("cycle %d: %s drawn twice in a row", cycle, pick)
			}
			// The failover order starts with the targets still in the deck.
			for j := 1; j < 4-k; j++ {
				if seen[got[j].Connection] {
					t.Fatalf("order %s: already-drawn %s ahead of undrawn targets", names(got), got[j].Connection)
				}
			}
			seen[pick] = true
			prev = pick
		}
	}
}

func TestStrictRandomKeepsTurnsOfExcludedTargets(t *testing.T) {
	e := newEnv(t, state.NewMemStore(), 11, 0)
	c := mustCombo(t, "r", StrictRandom, 3)
	all := list("a", "b", "c")
	// Draw twice, then make the remaining target ineligible: a new cycle starts among
	// the eligible two, and the excluded target still gets one turn per cycle after.
	for trial := 0; trial < 20; trial++ {
		first, _ := order(t, e.sel, c, all, Pin{})
		second, _ := order(t, e.sel, c, all, Pin{})
		if first[0].Connection == second[0].Connection {
			t.Fatalf("repeat %s", first[0].Connection)
		}
		var eligible []Candidate
		for _, x := range all {
			if x.Connection == first[0].Connection || x.Connection == second[0].Connection {
				eligible = append(eligible, x)
			}
		}
		third, _ := order(t, e.sel, c, eligible, Pin{})
		if third[0].Connection == second[0].Connection {
			t.Fatalf("new cycle repeated the last draw %s", third[0].Connection)
		}
		// Finish that cycle with everything eligible: two more draws, all different.
		seen := map[string]bool{third[0].Connection: true}
		for k := 0; k < 2; k++ {
			got, _ := order(t, e.sel, c, all, Pin{})
			if seen[got[0].Connection] {
				t.Fatalf("trial %d: %s twice in one cycle", trial, got[0].Connection)
			}
			seen[got[0].Connection] = true
		}
	}
}

func TestStrictRandomBadDeckStartsANewCycle(t *testing.T) {
	for _, tc := range []struct {
		name string // what is wrong with the stored deck
		deck []byte // stored value
	}{
		{name: "garbage", deck: []byte("not a deck")},
		{name: "other target count", deck: state.NewEncoder(nil, kindDeck, 1).Uint(5).Uint(0).Uint(1).Uint(4).Bytes()},
		{name: "index out of range", deck: state.NewEncoder(nil, kindDeck, 1).Uint(3).Uint(0).Uint(1).Uint(7).Bytes()},
		{name: "duplicate index", deck: state.NewEncoder(nil, kindDeck, 1).Uint(3).Uint(0).Uint(2).Uint(1).Uint(1).Bytes()},
		{name: "last out of range", deck: state.NewEncoder(nil, kindDeck, 1).Uint(3).Uint(9).Uint(0).Bytes()},
		{name: "truncated", deck: state.NewEncoder(nil, kindDeck, 1).Uint(3).Uint(0).Uint(3).Uint(1).Bytes()},
		{name: "trailing bytes", deck: state.NewEncoder(nil, kindDeck, 1).Uint(3).Uint(0).Uint(1).Uint(1).Uint(2).Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := state.NewMemStore()
			e := newEnv(t, store, 2, 0)
			c := mustCombo(t, "r", StrictRandom, 3)
			if err := store.Set(c.deckKey, tc.deck, 0); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for k := 0; k < 3; k++ {
				got, d := order(t, e.sel, c, list("a", "b", "c"), Pin{})
				if d.Degraded != nil || seen[got[0].Connection] {
					t.Fatalf("draw %d: %s %+v after a bad deck", k, names(got), d)
				}
				seen[got[0].Connection] = true
			}
		})
	}
}
