package selection

import (
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

func TestPinLeadsWhenEligible(t *testing.T) {
	for _, s := range Strategies {
		t.Run(s.String(), func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 1, 10)
			c := mustCombo(t, "r", s, 4)
			in := list("a", "b", "c", "d")
			for i := 0; i < 20; i++ {
				got, d := order(t, e.sel, c, in, Pin{Provider: "p", Connection: "c"})
				sameSet(t, got, in)
				if got[0].Connection != "c" || !d.Pinned || d.Degraded != nil {
					t.Fatalf("order %s %+v, want c pinned first", names(got), d)
				}
			}
		})
	}
}

func TestPinIgnoredWhenNotEligible(t *testing.T) {
	tests := []struct {
		name string // why the pin does not apply
		pin  Pin    // the session's pin
	}{
		{name: "pinned connection excluded", pin: Pin{Provider: "p", Connection: "z"}},
		{name: "same connection id, other provider", pin: Pin{Provider: "q", Connection: "b"}},
		{name: "no pin", pin: Pin{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 1, 0)
			got, d := order(t, e.sel, mustCombo(t, "r", Priority, 3), list("a", "b", "c"), tc.pin)
			if d.Pinned || names(got) != "a,b,c" {
				t.Fatalf("order %s %+v, want the strategy's a,b,c unpinned", names(got), d)
			}
		})
	}
}

func TestPinnedRestFollowsStrategy(t *testing.T) {
	tests := []struct {
		strategy Strategy // route strategy
		setup    func([]Candidate)
		want     string // full order with "a" pinned
	}{
		{strategy: Priority, want: "a,b,c,d"},
		{strategy: Weighted, setup: func(c []Candidate) { c[1].Weight, c[2].Weight, c[3].Weight = 1, 2, 3 }, want: "a,d,c,b"},
		{strategy: FillFirst, setup: func(c []Candidate) { c[1].InFlight, c[1].MaxConcurrent = 1, 1 }, want: "a,c,d,b"},
		{strategy: LeastUsed, setup: func(c []Candidate) { c[1].InFlight, c[2].InFlight, c[3].InFlight = 3, 1, 2 }, want: "a,c,d,b"},
	}
	for _, tc := range tests {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			e := newEnv(t, state.NewMemStore(), 1, 0)
			in := list("a", "b", "c", "d")
			if tc.setup != nil {
				tc.setup(in)
			}
			got, d := order(t, e.sel, mustCombo(t, "r", tc.strategy, 4), in, Pin{Provider: "p", Connection: "a"})
			if !d.Pinned || names(got) != tc.want {
				t.Fatalf("order %s %+v, want %s", names(got), d, tc.want)
			}
		})
	}
}

func TestPinnedRequestsDoNotAdvanceSharedState(t *testing.T) {
	t.Run("round-robin", func(t *testing.T) {
		e := newEnv(t, state.NewMemStore(), 1, 0)
		c := mustCombo(t, "r", RoundRobin, 3)
		in := list("a", "b", "c")
		if got, _ := order(t, e.sel, c, in, Pin{}); got[0].Connection != "a" {
			t.Fatalf("first turn %s", names(got))
		}
		for i := 0; i < 5; i++ {
			got, _ := order(t, e.sel, c, in, Pin{Provider: "p", Connection: "a"})
			// rest rotated from the current turn (1): b, c, then a was moved to the front
			if names(got) != "a,b,c" {
				t.Fatalf("pinned order %s, want a,b,c", names(got))
			}
		}
		if got, _ := order(t, e.sel, c, in, Pin{}); got[0].Connection != "b" {
			t.Fatalf("after pinned requests the rotation gave %s, want b next", names(got))
		}
	})
	t.Run("strict-random", func(t *testing.T) {
		e := newEnv(t, state.NewMemStore(), 1, 0)
		c := mustCombo(t, "r", StrictRandom, 3)
		in := list("a", "b", "c")
		first, _ := order(t, e.sel, c, in, Pin{})
		for i := 0; i < 5; i++ {
			got, _ := order(t, e.sel, c, in, Pin{Provider: "p", Connection: first[1].Connection})
			// the pinned target leads; the undrawn remainder of the deck follows before the
			// target already drawn this cycle
			if got[2].Connection != first[0].Connection {
				t.Fatalf("pinned order %s: drawn %s should be last", names(got), first[0].Connection)
			}
		}
		seen := map[string]bool{first[0].Connection: true}
		for i := 0; i < 2; i++ {
			got, _ := order(t, e.sel, c, in, Pin{})
			if seen[got[0].Connection] {
				t.Fatalf("pinned requests consumed the deck: %s again", got[0].Connection)
			}
			seen[got[0].Connection] = true
		}
	})
	t.Run("weighted", func(t *testing.T) {
		e := newEnv(t, state.NewMemStore(), 1, 0)
		c := mustCombo(t, "r", Weighted, 3)
		in := list("a", "b", "c")
		in[0].Weight = 5
		var picks []byte
		for i := 0; i < 7; i++ {
			got, _ := order(t, e.sel, c, in, Pin{})
			picks = append(picks, got[0].Connection[0])
			order(t, e.sel, c, in, Pin{Provider: "p", Connection: "c"}) // interleaved pinned
		}
		if string(picks) != "aabacaa" {
			t.Fatalf("unpinned picks %s, want the undisturbed sequence aabacaa", picks)
		}
	})
}
