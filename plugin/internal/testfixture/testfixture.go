// Package testfixture is what the engine packages' tests share: a start instant, a shared
// data store that counts what reaches it, another worker's write interleaved between a
// caller's read and its CAS write, verdict helpers and upstream bodies. Only tests import
// it (the boundaries test enforces that).
package testfixture

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// TB is what the fixtures need of *testing.T, *testing.B and *rapid.T.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// T0 is where the tests' manual clocks start, 2025-06-01 12:00 UTC: half a day from a daily
// quota's reset either way.
var T0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// Store is a MemStore that counts the calls reaching it, for tests that bound what a path
// reads and writes (a clean success writes nothing, a warm cache reads one key). The
// counters are not safe for concurrent use; the MemStore underneath is.
type Store struct {
	*state.MemStore
	Gets, Sets int
	// Log, when set, makes every Set append "key=value cas=N err=E" (value in hex) to
	// Writes, in order.
	Log    bool
	Writes []string
}

// NewStore returns a counting Store over a fresh MemStore.
func NewStore() *Store { return &Store{MemStore: state.NewMemStore()} }

// Get implements state.Store.
func (s *Store) Get(key string) ([]byte, uint32, bool, error) {
	s.Gets++
	return s.MemStore.Get(key)
}

// Set implements state.Store.
func (s *Store) Set(key string, value []byte, cas uint32) error {
	s.Sets++
	err := s.MemStore.Set(key, value, cas)
	if s.Log {
		s.Writes = append(s.Writes, fmt.Sprintf("%s=%x cas=%d err=%v", key, value, cas, err))
	}
	return err
}

// Interleaving is another worker's write slipped in before a caller's Sets.
type Interleaving struct {
	// Ran is how many times the other worker's write ran so far.
	Ran int
}

// Interleave makes each of the next times Sets on store first run other: the caller has
// read the record, another worker writes it, and the caller's CAS write must fail and
// retry. The Sets other makes itself do not interleave again. It replaces store.BeforeSet;
// set that to nil to stop early.
func Interleave(store *state.MemStore, times int, other func()) *Interleaving {
	return InterleaveOn(store, "", times, other)
}

// InterleaveOn is Interleave for the Sets of one key ("" for every key).
func InterleaveOn(store *state.MemStore, key string, times int, other func()) *Interleaving {
	in := &Interleaving{}
	inside := false
	store.BeforeSet = func(k string) {
		if inside || in.Ran >= times || (key != "" && k != key) {
			return
		}
		inside = true
		in.Ran++
		other()
		inside = false
	}
	return in
}

// WithHint returns v with the retry hint d the upstream gave through src, as the classifier
// attaches it.
func WithHint(v failure.Verdict, d time.Duration, src failure.HintSource) failure.Verdict {
	v.RetryHint, v.HintSource = d, src
	return v
}
