package lockout

import (
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

var t0 = testfixture.T0

type fixture struct {
	tr    *Tracker
	store *state.MemStore
	clock *manualclock.Clock
	conn  Conn
}

// newFixture is a tracker over a fresh store, and a connection under credential "fp-1"
// whose configured models are configured (none: every model is client-invented and lives in
// the pool slots).
func newFixture(tb testfixture.TB, cfg Config, configured ...string) *fixture {
	tb.Helper()
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	tr, err := New(store, clock, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	conn, err := NewConn("codex", "codex-a", "codex/codex-a", "fp-1", configured...)
	if err != nil {
		tb.Fatalf("NewConn: %v", err)
	}
	return &fixture{tr: tr, store: store, clock: clock, conn: conn}
}

func (f *fixture) fail(tb testfixture.TB, model string, v failure.Verdict, started time.Time) Outcome {
	tb.Helper()
	out, err := f.tr.RecordFailure(f.conn, Failure{Model: model, Verdict: v, Started: started})
	if err != nil {
		tb.Fatalf("RecordFailure: %v", err)
	}
	return out
}

func (f *fixture) locked(tb testfixture.TB, model string) (Lock, bool) {
	tb.Helper()
	l, ok, err := f.tr.Locked(f.conn, model)
	if err != nil {
		tb.Fatalf("Locked: %v", err)
	}
	return l, ok
}

func (f *fixture) succeed(tb testfixture.TB, model string) {
	tb.Helper()
	if err := f.tr.RecordSuccess(f.conn, model, f.clock.Now()); err != nil {
		tb.Fatalf("RecordSuccess: %v", err)
	}
}

// enabled is the guide's defaults (§3) with the master switch on.
func enabled() Config {
	c := DefaultConfig(policies.ProfileAPIKey)
	c.Enabled = true
	return c
}

// codexFamilies maps every gpt-5* model to the codex quota family.
var codexFamilies = FamilyMap{
	Models:   map[string]string{"codex-mini-latest": "codex"},
	Prefixes: []FamilyPrefix{{Prefix: "gpt-5", Family: "codex"}},
}

// Verdicts as the classifier produces them.
var (
	v429 = failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit}
	v403 = failure.Verdict{Status: 403, Reason: failure.ReasonAuthError}
	v404 = failure.Verdict{Status: 404, Reason: failure.ReasonNotFound}
	v502 = failure.Verdict{Status: 502, Reason: failure.ReasonServerError}
	v500 = failure.Verdict{Status: 500, Reason: failure.ReasonServerError}
)
