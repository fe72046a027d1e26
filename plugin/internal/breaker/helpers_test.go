package breaker

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// t0 is where the manual clock starts.
var t0 = testfixture.T0

// env is one shared store and clock with a Breaker over them.
type env struct {
	store *testfixture.Store // counts the Sets
	clock *manualclock.Clock
	b     *Breaker
	tb    testing.TB
}

// t returns the test the env belongs to (for helpers called from table closures).
func (e *env) t() testing.TB { return e.tb }

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{store: testfixture.NewStore(), clock: manualclock.New(t0), tb: t}
	e.b = New(e.store, e.clock)
	return e
}

// worker returns another Breaker over the same store and clock, like another Envoy worker.
func (e *env) worker() *Breaker { return New(e.store, e.clock) }

// provider builds a provider with a profile's defaults, adjusted by edit (may be nil).
func provider(t testing.TB, id string, profile policies.Profile, edit func(*Config)) Provider {
	t.Helper()
	cfg, err := DefaultConfig(profile)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&cfg)
	}
	p, err := NewProvider(id, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// verdict503 is a provider-level server error.
var verdict503 = failure.Verdict{Status: 503, Reason: failure.ReasonServerError, CountBreaker: true}

// fail records n failures with verdict v and returns the last state.
func fail(t testing.TB, b *Breaker, p Provider, n int, v failure.Verdict) State {
	t.Helper()
	st := Closed
	for i := 0; i < n; i++ {
		var err error
		if st, err = b.RecordFailure(p, v, Attempt{}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// succeed records n successes and returns the last state.
func succeed(t testing.TB, b *Breaker, p Provider, n int) State {
	t.Helper()
	st := Closed
	for i := 0; i < n; i++ {
		var err error
		if st, err = b.RecordSuccess(p, Attempt{}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func status(t testing.TB, b *Breaker, p Provider) Status {
	t.Helper()
	s, err := b.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func allow(t testing.TB, b *Breaker, p Provider) Decision {
	t.Helper()
	d, err := b.Allow(p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// probeOutcome reports the probe's failure (v) or, with v nil, its success, as the engine
// does: with the probe's Decision and the time it was sent.
func probeOutcome(t testing.TB, b *Breaker, p Provider, probe Decision, sent time.Time, v *failure.Verdict) State {
	t.Helper()
	a := Attempt{Started: sent, Decision: probe}
	var st State
	var err error
	if v == nil {
		st, err = b.RecordSuccess(p, a)
	} else {
		st, err = b.RecordFailure(p, *v, a)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}
