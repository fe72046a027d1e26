package providercooldown

import (
	"testing"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

// t0 is where the manual clock starts.
var t0 = testfixture.T0

// Verdicts as the classifier reports them.
var (
	vServer      = failure.Verdict{Status: 500, Reason: failure.ReasonServerError, Scope: failure.ScopeExact, CountBreaker: true}
	vConcurrency = failure.Verdict{Status: 429, Reason: failure.ReasonConcurrencyLimited, Scope: failure.ScopeConnection, KeepBackoff: true}
	vModelOnly   = failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Scope: failure.ScopeModel, ModelOnly: true}
)

// env is one shared store and clock with a Gate over them.
type env struct {
	store *testfixture.Store // counts the Sets
	clock *manualclock.Clock
	g     *Gate
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{store: testfixture.NewStore(), clock: manualclock.New(t0)}
	e.g = New(e.store, e.clock)
	return e
}

// enabled returns a profile's defaults with the gate turned on, adjusted by edit (may be nil).
func enabled(t testing.TB, profile policies.Profile, edit func(*Config)) Config {
	t.Helper()
	cfg, err := DefaultConfig(profile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Enabled = true
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

func providerEntry(t testing.TB, id string, cfg Config) Entry {
	t.Helper()
	e, err := ProviderEntry(id, id, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func connectionEntry(t testing.TB, provider, conn string, cfg Config) Entry {
	t.Helper()
	e, err := ConnectionEntry(provider, conn, provider+"/"+conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// fail records n failures and returns the last status.
func fail(t testing.TB, g *Gate, e Entry, n int) Status {
	t.Helper()
	var s Status
	for i := 0; i < n; i++ {
		var err error
		if s, err = g.RecordFailure(e, vServer); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func check(t testing.TB, g *Gate, e Entry) Status {
	t.Helper()
	s, err := g.Check(e)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func succeed(t testing.TB, g *Gate, e Entry) {
	t.Helper()
	if err := g.RecordSuccess(e); err != nil {
		t.Fatal(err)
	}
}
