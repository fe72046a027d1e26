package conncooldown

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

func newFixture(tb testfixture.TB, cfg Config) *fixture {
	tb.Helper()
	store := state.NewMemStore()
	clock := manualclock.New(t0)
	tr, err := New(store, clock, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	conn, err := NewConn("openai", "openai-a", "openai", "openai/openai-a", "fp-1")
	if err != nil {
		tb.Fatalf("NewConn: %v", err)
	}
	return &fixture{tr: tr, store: store, clock: clock, conn: conn}
}

func (f *fixture) fail(tb testfixture.TB, v failure.Verdict, started time.Time) Outcome {
	tb.Helper()
	out, err := f.tr.RecordFailure(f.conn, Failure{Verdict: v, Started: started, Message: "upstream said no"})
	if err != nil {
		tb.Fatalf("RecordFailure: %v", err)
	}
	return out
}

func (f *fixture) check(tb testfixture.TB) Availability {
	tb.Helper()
	a, err := f.tr.Check(f.conn)
	if err != nil {
		tb.Fatalf("Check: %v", err)
	}
	return a
}

// Verdicts as the classifier produces them.
var (
	vServer      = failure.Verdict{Status: 500, Reason: failure.ReasonServerError, Scope: failure.ScopeConnection}
	vRateLimit   = failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Scope: failure.ScopeConnection}
	vConcurrency = failure.Verdict{Status: 429, Reason: failure.ReasonConcurrencyLimited, Scope: failure.ScopeConnection, KeepBackoff: true}
	vStall       = failure.Verdict{Reason: failure.ReasonStreamStall, Scope: failure.ScopeConnection}
	vUnknown     = failure.Verdict{Status: 418, Reason: failure.ReasonUnknown, Scope: failure.ScopeExact}
	vBanned      = failure.Verdict{Status: 403, Reason: failure.ReasonBanned, Terminal: failure.TerminalBanned}
	vCredits     = failure.Verdict{Status: 402, Reason: failure.ReasonCreditsExhausted, Terminal: failure.TerminalCreditsExhausted}
	vExpired     = failure.Verdict{Status: 401, Reason: failure.ReasonExpired, Terminal: failure.TerminalExpired}
	vRejected    = failure.Verdict{Status: 403, Reason: failure.ReasonRequestRejected, Scope: failure.ScopeConnection}
	v401         = failure.Verdict{Status: 401, Reason: failure.ReasonAuthError, Scope: failure.ScopeConnection}
	vExpired401  = failure.Verdict{Status: 401, Reason: failure.ReasonExpired, Scope: failure.ScopeConnection}
	v403         = failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Scope: failure.ScopeQuotaFamily}
	vModelOnly   = failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Scope: failure.ScopeModel, ModelOnly: true}
)

// vQuota is an exhausted quota with its window, as the classifier reports it.
func vQuota(window time.Duration) failure.Verdict {
	return failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Scope: failure.ScopeQuotaFamily,
		Cooldown: window, QuotaWindow: true}
}

func apikey() Config { return DefaultConfig(policies.ProfileAPIKey) }
