package testfixture

import (
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// The counting store counts every call and logs writes only when asked.
func TestStoreCounts(t *testing.T) {
	s := NewStore()
	if err := s.Set("k", []byte{1}, 0); err != nil {
		t.Fatal(err)
	}
	if len(s.Writes) != 0 {
		t.Fatalf("logged %q without Log", s.Writes)
	}
	s.Log = true
	_, cas, _, _ := s.Get("k")
	if err := s.Set("k", []byte{2}, cas+1); err == nil {
		t.Fatal("a stale CAS was accepted")
	}
	if s.Gets != 1 || s.Sets != 2 || len(s.Writes) != 1 {
		t.Fatalf("gets %d sets %d writes %q, want 1, 2 and one logged write", s.Gets, s.Sets, s.Writes)
	}
}

// An interleaving runs the other writer before each of the next Sets it is given, never
// inside the other writer's own Sets, and on one key when asked.
func TestInterleave(t *testing.T) {
	for _, tc := range []struct {
		name  string   // the case
		key   string   // the key interleaved on ("" every key)
		times int      // how many Sets to interleave
		sets  []string // the caller's Sets, in order
		want  int      // how many times the other writer runs
	}{
		{"once", "", 1, []string{"a", "b"}, 1},
		{"every set", "", 3, []string{"a", "b", "c"}, 3},
		{"more wanted than sets", "", 5, []string{"a", "b"}, 2},
		{"one key", "b", 5, []string{"a", "b", "a", "b"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := state.NewMemStore()
			var order []string
			in := InterleaveOn(store, tc.key, tc.times, func() {
				order = append(order, "other")
				if err := store.Set("other", []byte{1}, 0); err != nil { // must not recurse
					t.Fatal(err)
				}
			})
			for _, k := range tc.sets {
				if err := store.Set(k, []byte{1}, 0); err != nil {
					t.Fatal(err)
				}
				order = append(order, k)
			}
			if in.Ran != tc.want || len(order) != len(tc.sets)+tc.want {
				t.Fatalf("ran %d times (%v), want %d", in.Ran, order, tc.want)
			}
		})
	}
}
