package combo

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

var t0 = testfixture.T0

// lock is a transient model lockout of d on a Gemini target.
func lock(model string, d time.Duration) Exclusion {
	return Exclusion{Provider: "gemini", Connection: "g-1", Model: model, Reason: ReasonModelLockout, RetryAfter: d, Transient: true}
}

func TestDefaultConfigComesFromPolicies(t *testing.T) {
	c := DefaultConfig()
	if c.Enabled != policies.ComboCooldownWaitEnabled || c.MaxWait != policies.ComboCooldownWaitMaxWait ||
		c.MaxAttempts != policies.ComboCooldownWaitMaxAttempts || c.Budget != policies.ComboCooldownWaitBudget {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
}

func TestAllowWait(t *testing.T) {
	on := Config{Enabled: true, MaxWait: 65 * time.Second, MaxAttempts: 2, Budget: 90 * time.Second}
	tests := []struct {
		name string
		cfg  Config        // settings
		wait time.Duration // the wait asked for
		p    Progress      // what the request already spent
		want Refusal       // RefusalNone = it waits
	}{
		{name: "gemini window", cfg: on, wait: 60 * time.Second, want: RefusalNone},
		{name: "exactly maxWait", cfg: on, wait: 65 * time.Second, want: RefusalNone},
		{name: "over maxWait", cfg: on, wait: 65*time.Second + time.Millisecond, want: RefusalTooLong},
		{name: "disabled", cfg: Config{MaxWait: time.Hour, MaxAttempts: 9, Budget: time.Hour}, wait: time.Second, want: RefusalDisabled},
		{name: "zero wait", cfg: on, wait: 0, want: RefusalNoWait},
		{name: "negative wait", cfg: on, wait: -time.Second, want: RefusalNoWait},
		{name: "second attempt", cfg: on, wait: time.Second, p: Progress{Attempts: 1, Waited: 60 * time.Second}, want: RefusalNone},
		{name: "attempts used up", cfg: on, wait: time.Second, p: Progress{Attempts: 2}, want: RefusalAttempts},
		{name: "budget exactly enough", cfg: on, wait: 30 * time.Second, p: Progress{Attempts: 1, Waited: 60 * time.Second}, want: RefusalNone},
		{name: "budget short by 1ms", cfg: on, wait: 30*time.Second + time.Millisecond, p: Progress{Attempts: 1, Waited: 60 * time.Second}, want: RefusalBudget},
		{name: "no attempts allowed", cfg: Config{Enabled: true, MaxWait: time.Minute, Budget: time.Minute}, wait: time.Second, want: RefusalAttempts},
	}
	for _, tc := range tests {
		if got := AllowWait(tc.cfg, tc.wait, tc.p); got != tc.want {
			t.Errorf("%s: AllowWait = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecideExcluded(t *testing.T) {
	cfg := DefaultConfig() // enabled, 65 s, 2 attempts, 90 s budget
	off := cfg
	off.Enabled = false
	quota := Exclusion{Provider: "gemini", Connection: "g-2", Model: "gemini-2.5-pro", Reason: ReasonModelLockout, RetryAfter: 8 * time.Hour}
	circuit := Exclusion{Provider: "openai", Connection: "o-1", Model: "gpt-4o", Reason: ReasonCircuitOpen, RetryAfter: 30 * time.Second}
	tests := []struct {
		name     string
		cfg      Config        // settings
		excluded []Exclusion   // what target resolution skipped
		p        Progress      // waits already made
		outcome  Outcome       // what happens
		wait     time.Duration // OutcomeWait: how long
		retry    time.Duration // Decision.RetryAfter
		refusal  Refusal       // why it does not wait
	}{
		{
			name:     "two-model combo, both models in a Gemini window: wait the earlier one",
			cfg:      cfg,
			excluded: []Exclusion{lock("gemini-2.5-pro", 60*time.Second), lock("gemini-2.5-flash", 58*time.Second)},
			outcome:  OutcomeWait, wait: 58 * time.Second,
		},
		{
			name:     "feature off: 429 with the earliest transient lock",
			cfg:      off,
			excluded: []Exclusion{lock("a", 60*time.Second), lock("b", 58*time.Second)},
			outcome:  OutcomeRateLimited, retry: 58 * time.Second, refusal: RefusalDisabled,
		},
		{
			name:     "lock longer than maxWait",
			cfg:      cfg,
			excluded: []Exclusion{lock("a", 70*time.Second)},
			outcome:  OutcomeRateLimited, retry: 70 * time.Second, refusal: RefusalTooLong,
		},
		{
			name:     "attempts used up",
			cfg:      cfg,
			excluded: []Exclusion{lock("a", 5*time.Second)},
			p:        Progress{Attempts: 2, Waited: 10 * time.Second},
			outcome:  OutcomeRateLimited, retry: 5 * time.Second, refusal: RefusalAttempts,
		},
		{
			name:     "budget left 50 s < 58 s",
			cfg:      cfg,
			excluded: []Exclusion{lock("a", 58*time.Second)},
			p:        Progress{Attempts: 1, Waited: 40 * time.Second},
			outcome:  OutcomeRateLimited, retry: 58 * time.Second, refusal: RefusalBudget,
		},
		{
			name:     "budget left exactly 58 s",
			cfg:      cfg,
			excluded: []Exclusion{lock("a", 58*time.Second)},
			p:        Progress{Attempts: 1, Waited: 32 * time.Second},
			outcome:  OutcomeWait, wait: 58 * time.Second,
		},
		{
			name:     "transient lock waited even when a non-transient timer ends first",
			cfg:      cfg,
			excluded: []Exclusion{{Reason: ReasonProviderCooldown, RetryAfter: 10 * time.Second}, lock("a", 45*time.Second)},
			outcome:  OutcomeWait, wait: 45 * time.Second,
		},
		{
			name:     "quota exhausted and circuit open: hintless 503 with the earliest timer",
			cfg:      cfg,
			excluded: []Exclusion{quota, circuit},
			outcome:  OutcomeCoolingDown, retry: 30 * time.Second, refusal: RefusalNotTransient,
		},
		{
			name:     "circuit open with no known time left is still a resilience timer",
			cfg:      cfg,
			excluded: []Exclusion{{Reason: ReasonCircuitOpen}},
			outcome:  OutcomeCoolingDown, retry: 0, refusal: RefusalNotTransient,
		},
		{
			name:     "connection cooldown after a 429 (unavailable, transient)",
			cfg:      cfg,
			excluded: []Exclusion{{Reason: ReasonUnavailable, RetryAfter: 3 * time.Second, Transient: true}},
			outcome:  OutcomeWait, wait: 3 * time.Second,
		},
		{
			name:     "nothing configured",
			cfg:      cfg,
			excluded: nil,
			outcome:  OutcomeNoExecutableTargets, refusal: RefusalNoWait,
		},
		{
			name:     "terminal and failed availability: no timer involved",
			cfg:      cfg,
			excluded: []Exclusion{{Reason: ReasonTerminal}, {Reason: ReasonUnavailable}},
			outcome:  OutcomeNoExecutableTargets, refusal: RefusalNoWait,
		},
		{
			name:     "a terminal entry never counts as a transient timer",
			cfg:      cfg,
			excluded: []Exclusion{{Reason: ReasonTerminal, RetryAfter: time.Second, Transient: true}},
			outcome:  OutcomeNoExecutableTargets, refusal: RefusalNoWait,
		},
		{
			name:     "an expired (negative) timer is ignored",
			cfg:      cfg,
			excluded: []Exclusion{{Reason: ReasonUnavailable, RetryAfter: -time.Second, Transient: true}},
			outcome:  OutcomeNoExecutableTargets, refusal: RefusalNoWait,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideExcluded(tc.cfg, tc.excluded, tc.p, t0)
			if d.Outcome != tc.outcome || d.Wait != tc.wait || d.RetryAfter != tc.retry || d.Refusal != tc.refusal {
				t.Fatalf("got %+v, want outcome %d wait %v retry %v refusal %v", d, tc.outcome, tc.wait, tc.retry, tc.refusal)
			}
			wantReset := time.Time{}
			if tc.outcome == OutcomeRateLimited {
				wantReset = t0.Add(tc.retry)
			}
			if !d.ResetAt.Equal(wantReset) {
				t.Errorf("ResetAt = %v, want %v", d.ResetAt, wantReset)
			}
		})
	}
}

func TestOneProvidersOpenCircuit(t *testing.T) {
	// guide §1: when a provider's breaker is OPEN "krijgen aanroepers een
	// provider-circuit-open-antwoord": a request every one of whose targets (api mismatches
	// aside) is excluded by the same provider's open circuit — or its HALF_OPEN probe held
	// by another request (issue 8: it used to get 404) — is told so, 503
	// provider_circuit_open; any other mix is all_targets_cooling_down.
	open := func(provider string, d time.Duration) Exclusion {
		return Exclusion{Provider: provider, Connection: provider + "-1", Model: "m", Reason: ReasonCircuitOpen, RetryAfter: d}
	}
	mismatch := Exclusion{Provider: "anthropic", Connection: "a-1", Model: "m", Reason: ReasonAPIMismatch}
	tests := []struct {
		name     string
		excluded []Exclusion // what target resolution skipped
		outcome  Outcome     // what happens
		provider string      // Decision.Provider (OutcomeCircuitOpen)
		retry    time.Duration
	}{
		{"one provider, two connections", []Exclusion{open("openai", 30*time.Second), open("openai", time.Second)},
			OutcomeCircuitOpen, "openai", time.Second},
		{"one provider and a target of another API", []Exclusion{mismatch, open("openai", time.Second)},
			OutcomeCircuitOpen, "openai", time.Second},
		{"two providers' circuits", []Exclusion{open("openai", 30*time.Second), open("azure", 20*time.Second)},
			OutcomeCoolingDown, "", 20 * time.Second},
		{"a circuit and a cooled connection", []Exclusion{open("openai", 30*time.Second),
			{Provider: "azure", Connection: "z-1", Reason: ReasonUnavailable, RetryAfter: 5 * time.Second}},
			OutcomeCoolingDown, "", 5 * time.Second},
	}
	for _, tc := range tests {
		d := DecideExcluded(DefaultConfig(), tc.excluded, Progress{}, t0)
		if d.Outcome != tc.outcome || d.Provider != tc.provider || d.RetryAfter != tc.retry {
			t.Errorf("%s: %+v, want outcome %d provider %q retry %v", tc.name, d, tc.outcome, tc.provider, tc.retry)
		}
		if r, ok := d.Reply("m", tc.excluded); !ok || r.Status != 503 ||
			strings.Contains(string(r.Body), "provider_circuit_open") != (tc.outcome == OutcomeCircuitOpen) {
			t.Errorf("%s: reply %d %s", tc.name, r.Status, r.Body)
		}
	}
}

func TestDecideAfterFailure(t *testing.T) {
	// guide §4: a request that would answer a 429 waits a short transient cooldown out;
	// nothing else is waited on (a 5xx, an overloaded model, quota, auth, not-found).
	cfg := DefaultConfig()
	tests := []struct {
		name    string
		verdict failure.Verdict // the failure that would become the combo's 429
		wait    time.Duration   // the target's cooldown
		want    Refusal         // RefusalNone = wait and re-dispatch
	}{
		{name: "rate limit, 60 s", verdict: failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit}, wait: 60 * time.Second, want: RefusalNone},
		{name: "concurrency limit, 1 s", verdict: failure.Verdict{Status: 429, Reason: failure.ReasonConcurrencyLimited}, wait: time.Second, want: RefusalNone},
		{name: "server error", verdict: failure.Verdict{Status: 503, Reason: failure.ReasonServerError}, wait: 3 * time.Second, want: RefusalNotTransient},
		{name: "overloaded model (529)", verdict: failure.Verdict{Status: 529, Reason: failure.ReasonModelCapacity}, wait: 3 * time.Second, want: RefusalNotTransient},
		{name: "timeout", verdict: failure.Verdict{Status: 504, Reason: failure.ReasonTimeout}, wait: 3 * time.Second, want: RefusalNotTransient},
		{name: "quota exhausted", verdict: failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted}, wait: 10 * time.Second, want: RefusalNotTransient},
		{name: "auth", verdict: failure.Verdict{Status: 401, Reason: failure.ReasonAuthError}, wait: 10 * time.Second, want: RefusalNotTransient},
		{name: "not found", verdict: failure.Verdict{Status: 404, Reason: failure.ReasonNotFound}, wait: 10 * time.Second, want: RefusalNotTransient},
		{name: "terminal", verdict: failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Terminal: failure.TerminalBanned}, wait: time.Second, want: RefusalNotTransient},
		{name: "rate limit, no hint", verdict: failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit}, wait: 0, want: RefusalNoWait},
		{name: "rate limit, 5 min", verdict: failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit}, wait: 5 * time.Minute, want: RefusalTooLong},
	}
	for _, tc := range tests {
		if got := DecideAfterFailure(cfg, tc.verdict, tc.wait, Progress{}); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecisionReplies(t *testing.T) {
	excluded := []Exclusion{
		lock("gemini-2.5-pro", 61500*time.Millisecond),
		{Provider: "openai", Connection: "o-1", Model: "gpt-4o", Reason: ReasonCircuitOpen, RetryAfter: 30 * time.Second},
	}
	type body struct {
		Error struct {
			Code        string `json:"code"`
			RetryAfter  int64  `json:"retry_after"`
			ResetAt     string `json:"reset_at"`
			Diagnostics struct {
				Excluded []struct {
					Provider, Connection, Model, Reason string
					RetryAfterSeconds                   int64
				} `json:"excluded"`
			} `json:"diagnostics"`
		} `json:"error"`
	}
	tests := []struct {
		name     string
		decision Decision
		status   int    // HTTP status
		code     string // error.code
		retry    int64  // error.retry_after
		reset    string // error.reset_at
		listed   int    // diagnostics entries
	}{
		{
			name:     "429",
			decision: Decision{Outcome: OutcomeRateLimited, RetryAfter: 61500 * time.Millisecond, ResetAt: t0.Add(61500 * time.Millisecond)},
			status:   429, code: "rate_limit_error", retry: 62, reset: "2025-06-01T12:01:02Z", // t0 + 61.5 s, rounded up
		},
		{
			name:     "503",
			decision: Decision{Outcome: OutcomeCoolingDown, RetryAfter: 30 * time.Second},
			status:   503, code: "all_targets_cooling_down", retry: 30, listed: 2,
		},
		{
			name:     "404",
			decision: Decision{Outcome: OutcomeNoExecutableTargets},
			status:   404, code: "no_executable_targets",
		},
	}
	for _, tc := range tests {
		r, ok := tc.decision.Reply("combo-model", excluded)
		if !ok {
			t.Fatalf("%s: no reply", tc.name)
		}
		var b body
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Status != tc.status || b.Error.Code != tc.code || b.Error.RetryAfter != tc.retry ||
			b.Error.ResetAt != tc.reset || len(b.Error.Diagnostics.Excluded) != tc.listed {
			t.Errorf("%s: status %d body %+v", tc.name, r.Status, b.Error)
		}
		if tc.listed > 0 {
			e := b.Error.Diagnostics.Excluded[1]
			if e.Provider != "openai" || e.Connection != "o-1" || e.Model != "gpt-4o" || e.Reason != "circuit_open" || e.RetryAfterSeconds != 30 {
				t.Errorf("%s: diagnostics entry = %+v", tc.name, e)
			}
		}
	}
	if _, ok := (Decision{Outcome: OutcomeWait, Wait: time.Second}).Reply("m", nil); ok {
		t.Error("a wait decision produced a reply")
	}
}

func TestRefusalString(t *testing.T) {
	if RefusalBudget.String() != "budget" || RefusalNone.String() != "none" || Refusal(200).String() != "unknown" {
		t.Error("refusal names changed")
	}
}

func BenchmarkDecideExcluded3(b *testing.B) {
	cfg := DefaultConfig()
	excluded := []Exclusion{
		lock("gemini-2.5-pro", 60*time.Second),
		{Provider: "openai", Connection: "o-1", Model: "gpt-4o", Reason: ReasonCircuitOpen, RetryAfter: 30 * time.Second},
		{Provider: "glm", Connection: "z-1", Model: "glm-5", Reason: ReasonUnavailable, RetryAfter: 3 * time.Second, Transient: true},
	}
	b.ReportAllocs()
	var d Decision
	for b.Loop() {
		d = DecideExcluded(cfg, excluded, Progress{Attempts: 1, Waited: 5 * time.Second}, t0)
	}
	if d.Outcome != OutcomeWait || d.Wait != 3*time.Second {
		b.Fatalf("unexpected decision %+v", d)
	}
}
