package selection

import (
	"math/rand/v2"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// worker is one simulated Envoy worker: its own Selector and Combo (Go globals are per
// VM), sharing one store with the others.
type worker struct {
	env   *env
	combo *Combo
}

func newWorkers(t *testing.T, store state.Store, n int, s Strategy, targets int) []worker {
	t.Helper()
	ws := make([]worker, n)
	for i := range ws {
		ws[i] = worker{env: newEnv(t, store, uint64(100+i), 0), combo: mustCombo(t, "route", s, targets)}
	}
	return ws
}

func (w worker) pick(t *testing.T, cands []Candidate) string {
	t.Helper()
	got, d := order(t, w.env.sel, w.combo, cands, Pin{})
	if d.Degraded != nil {
		t.Fatalf("degraded: %v", d.Degraded)
	}
	return got[0].Connection
}

func TestWeightedRatiosAcrossWorkers(t *testing.T) {
	ws := newWorkers(t, state.NewMemStore(), 3, Weighted, 3)
	in := list("a", "b", "c")
	for i, w := range []int{5, 3, 2} {
		in[i].Weight = w
	}
	route := rand.New(rand.NewPCG(42, 42)) // which worker gets each request
	const total = 3000
	counts := map[string]int{}
	for i := 0; i < total; i++ {
		counts[ws[route.IntN(len(ws))].pick(t, in)]++
	}
	// Each worker is exact over its own cycles of 10, so the whole is off by at most a
	// few requests per worker: 1% tolerance.
	for name, share := range map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2} {
		want := share * total
		if got := float64(counts[name]); got < want-total*0.01 || got > want+total*0.01 {
			t.Fatalf("counts %v: %s = %v, want %v ± 1%%", counts, name, got, want)
		}
	}
}

func TestWeightedIsSmooth(t *testing.T) {
	// Smooth, not bursty: with 3:1 no target ever gets more than its share in a row.
	w := newWorkers(t, state.NewMemStore(), 1, Weighted, 2)[0]
	in := list("a", "b")
	in[0].Weight, in[1].Weight = 3, 1
	run, prev := 0, ""
	for i := 0; i < 400; i++ {
		p := w.pick(t, in)
		if p == prev {
			run++
		} else {
			run = 1
		}
		prev = p
		if run > 3 || (p == "b" && run > 1) {
			t.Fatalf("request %d: %s picked %d times in a row", i, p, run)
		}
	}
}

func TestRoundRobinEvenAcrossWorkers(t *testing.T) {
	store := state.NewMemStore()
	ws := newWorkers(t, store, 3, RoundRobin, 3)
	in := list("a", "b", "c")
	route := rand.New(rand.NewPCG(7, 7))
	counts := map[string]int{}
	interleaved := 0
	inHook := false
	// Half of the counter writes have another worker's whole decision slipped in between
	// the read and the write, so the CAS loop must retry without losing or doubling turns.
	store.BeforeSet = func(string) {
		if inHook || route.IntN(2) == 0 {
			return
		}
		inHook = true
		counts[ws[route.IntN(len(ws))].pick(t, in)]++
		interleaved++
		inHook = false
	}
	for i := 0; i < 900; i++ {
		counts[ws[route.IntN(len(ws))].pick(t, in)]++
	}
	total := 900 + interleaved
	if interleaved == 0 {
		t.Fatal("no interleaving happened")
	}
	// Every decision took its own turn, so three targets share them within one.
	for _, n := range []string{"a", "b", "c"} {
		if d := counts[n]*3 - total; d < -3 || d > 3 {
			t.Fatalf("counts %v over %d decisions: not even", counts, total)
		}
	}
	b, _, _, _ := store.Get(ws[0].combo.counterKey)
	if turn := decodeTurn(b, true); turn != uint64(total) {
		t.Fatalf("shared counter = %d, want %d (one turn per decision)", turn, total)
	}
}

func TestStrictRandomAcrossWorkers(t *testing.T) {
	store := state.NewMemStore()
	ws := newWorkers(t, store, 3, StrictRandom, 5)
	in := list("a", "b", "c", "d", "e")
	route := rand.New(rand.NewPCG(9, 9))
	var draws []string
	for i := 0; i < 500; i++ {
		draws = append(draws, ws[route.IntN(len(ws))].pick(t, in))
	}
	firstOfCycle := map[string]int{}
	for cycle := 0; cycle < len(draws)/5; cycle++ {
		seen := map[string]bool{}
		for _, d := range draws[cycle*5 : cycle*5+5] {
			if seen[d] {
				t.Fatalf("cycle %d %v: %s twice", cycle, draws[cycle*5:cycle*5+5], d)
			}
			seen[d] = true
		}
		firstOfCycle[draws[cycle*5]]++
	}
	for i := 1; i < len(draws); i++ {
		if draws[i] == draws[i-1] {
			t.Fatalf("draw %d repeats %s", i, draws[i])
		}
	}
	// The decks are shuffled: every target opens some cycle.
	if len(firstOfCycle) != 5 {
		t.Fatalf("cycle openers %v: not shuffled", firstOfCycle)
	}
}

func TestRandomIsUniform(t *testing.T) {
	w := newWorkers(t, state.NewMemStore(), 1, Random, 4)[0]
	in := list("a", "b", "c", "d")
	counts := map[string]int{}
	for i := 0; i < 8000; i++ {
		counts[w.pick(t, in)]++
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		if counts[n] < 1800 || counts[n] > 2200 {
			t.Fatalf("counts %v: %s outside 2000 ± 10%%", counts, n)
		}
	}
}

func TestP2CLoadDistribution(t *testing.T) {
	w := newWorkers(t, state.NewMemStore(), 1, P2C, 3)[0]
	in := list("a", "b", "c")
	in[0].InFlight, in[1].InFlight, in[2].InFlight = 0, 5, 10
	counts := map[string]int{}
	const total = 6000
	for i := 0; i < total; i++ {
		counts[w.pick(t, in)]++
	}
	// The heaviest loses every pair it is in; the lightest wins the 2 pairs of 3 it is in.
	if counts["c"] != 0 {
		t.Fatalf("counts %v: the heaviest candidate was picked", counts)
	}
	if counts["a"] < total*60/100 || counts["a"] > total*73/100 {
		t.Fatalf("counts %v: a should win about 2/3", counts)
	}
}
