package selection

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/latency"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

var t0 = testfixture.T0

// env is one simulated worker: its own Selector over a shared store.
type env struct {
	sel     *Selector
	clock   *manualclock.Clock
	tracker *latency.Tracker
}

func newEnv(t testing.TB, store state.Store, seed uint64, latencyWeight int) *env {
	t.Helper()
	clock := manualclock.New(t0)
	tr, err := latency.NewTracker(latency.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sel, err := New(Config{
		Store:         store,
		Clock:         clock,
		Random:        rand.NewPCG(seed, seed^0x9e3779b97f4a7c15),
		Latency:       tr,
		LatencyWeight: latencyWeight,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{sel: sel, clock: clock, tracker: tr}
}

func mustCombo(t testing.TB, name string, s Strategy, targets int) *Combo {
	t.Helper()
	c, err := NewCombo(ComboConfig{Name: name, Strategy: s, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// list builds candidates of provider "p" named by conns, with Index = position.
func list(conns ...string) []Candidate {
	out := make([]Candidate, len(conns))
	for i, c := range conns {
		out[i] = Candidate{Provider: "p", Connection: c, Model: "m", Index: i, Weight: 1}
	}
	return out
}

func names(cands []Candidate) string {
	var b strings.Builder
	for i, c := range cands {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Connection)
	}
	return b.String()
}

// order runs one decision on a fresh copy of cands and returns the ordered copy.
func order(t testing.TB, sel *Selector, c *Combo, cands []Candidate, pin Pin) ([]Candidate, Decision) {
	t.Helper()
	got := append([]Candidate(nil), cands...)
	d, err := sel.Order(Request{Combo: c, Candidates: got, Pin: pin})
	if err != nil {
		t.Fatalf("Order: %v", err)
	}
	return got, d
}

// sameSet fails unless got is a permutation of want (by connection).
func sameSet(t testing.TB, got, want []Candidate) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("order %s has %d candidates, want %d", names(got), len(got), len(want))
	}
	seen := map[string]int{}
	for _, c := range want {
		seen[c.Connection]++
	}
	for _, c := range got {
		seen[c.Connection]--
	}
	for k, v := range seen {
		if v != 0 {
			t.Fatalf("order %s is not a permutation of %s (%s off by %d)", names(got), names(want), k, v)
		}
	}
}

// failingStore fails every call.
type failingStore struct{}

var errStoreDown = errors.New("store down")

func (failingStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errStoreDown }
func (failingStore) Set(string, []byte, uint32) error         { return errStoreDown }
func (failingStore) CreateCAS() (uint32, error)               { return 0, errStoreDown }
