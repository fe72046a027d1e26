package lockout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig(policies.ProfileOAuth)
	want := []struct {
		name     string // setting
		got, exp any    // value and the guide's default (§3)
	}{
		{"enabled", c.Enabled, false},
		{"errorCodes", fmt.Sprint(c.ErrorCodes), "[403 404 429 502 503 504]"},
		{"baseCooldownMs", c.BaseCooldown, 120 * time.Second},
		{"maxCooldownMs", c.MaxCooldown, 30 * time.Minute},
		{"maxBackoffSteps", c.MaxBackoffSteps, 10},
		{"useExponentialBackoff", c.UseExponentialBackoff, true},
		{"long retry cap", c.LongRetryCap, 24 * time.Hour},
		{"queue wait budget", c.QueueMaxWait, 30 * time.Second},
	}
	for _, w := range want {
		if w.got != w.exp {
			t.Errorf("%s = %v, want %v", w.name, w.got, w.exp)
		}
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.ErrorCodes[0] = 999 // a copy: the shared default must not change
	if policies.ModelLockoutErrorCodes[0] != 403 {
		t.Fatal("DefaultConfig aliases the policies slice")
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string          // what is wrong
		mutate func(c *Config) // the bad setting
		field  string          // the setting the error must name
	}{
		{"zero max", func(c *Config) { c.MaxCooldown = 0 }, "maxCooldown"},
		{"base over max", func(c *Config) { c.BaseCooldown = time.Hour }, "baseCooldown"},
		{"zero base", func(c *Config) { c.BaseCooldown = 0 }, "baseCooldown"},
		{"steps over 30", func(c *Config) { c.MaxBackoffSteps = 31 }, "maxBackoffSteps"},
		{"zero long cap", func(c *Config) { c.LongRetryCap = 0 }, "longRetryCap"},
		{"negative queue wait", func(c *Config) { c.QueueMaxWait = -1 }, "queueMaxWait"},
		{"negative window", func(c *Config) { c.EscalationWindow = -1 }, "escalationWindow"},
		{"status 99", func(c *Config) { c.ErrorCodes = []int{429, 99} }, "errorCodes[1]"},
		{"status 600", func(c *Config) { c.ErrorCodes = []int{600} }, "errorCodes[0]"},
		{"sub-millisecond max", func(c *Config) { c.MaxCooldown += time.Microsecond }, "maxCooldown"},
		{"sub-millisecond window", func(c *Config) { c.EscalationWindow = time.Microsecond }, "escalationWindow"},
	}
	for _, tc := range cases {
		c := enabled()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.HasPrefix(err.Error(), "lockout: ") {
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := New(nil, nil, enabled()); err == nil {
		t.Error("New without store and clock succeeded")
	}
}

func TestNamesAndKeys(t *testing.T) {
	if _, err := NewConn("codex", "a:b", "codex/a:b", ""); err == nil {
		t.Error("connection id with ':' accepted")
	}
	if _, err := NewConn("", "a", "/a", ""); err == nil {
		t.Error("empty provider accepted")
	}
	c, _ := NewConn("ollama", "local", "ollama/local", "")
	if got := c.lockKey(failure.ScopeExact, "llama3:8b"); got != "spw2:mlk:ollama/local:exact:llama3:8b" {
		t.Errorf("lock key %q", got)
	}
	models := []struct {
		model string // model name under test
		ok    bool   // whether it is accepted
	}{
		{"gpt-4o", true},
		{"llama3:8b", true},
		{"models/gemini-2.5-pro", true},
		{"", false},
		{"a\x00b", false},
		{"a\nb", false},
		{strings.Repeat("m", 257), false},
	}
	for _, m := range models {
		if err := validModel(m.model); (err == nil) != m.ok {
			t.Errorf("validModel(%q) = %v, want ok=%v", m.model, err, m.ok)
		}
	}
	bare := []struct{ in, out string }{
		{"gemini-2.5-pro", "gemini-2.5-pro"},
		{"models/gemini-2.5-pro", "gemini-2.5-pro"},
		{"accounts/fireworks/models/llama-v3", "llama-v3"},
		{"weird/", "weird/"},
	}
	for _, b := range bare {
		if got := BareModel(b.in); got != b.out {
			t.Errorf("BareModel(%q) = %q, want %q", b.in, got, b.out)
		}
	}
	fam := []struct{ in, out string }{
		{"gpt-5", "codex"},
		{"gpt-5.1-codex-max", "codex"},
		{"codex-mini-latest", "codex"},
		{"gpt-4o", "gpt-4o"},
	}
	for _, f := range fam {
		if got := codexFamilies.Family(f.in); got != f.out {
			t.Errorf("Family(%q) = %q, want %q", f.in, got, f.out)
		}
	}
}

func TestResolveScope(t *testing.T) {
	cases := []struct {
		v    failure.Verdict // verdict
		want failure.Scope   // key scope it locks
	}{
		{failure.Verdict{Status: 429}, failure.ScopeQuotaFamily},
		{failure.Verdict{Status: 403}, failure.ScopeQuotaFamily},
		{failure.Verdict{Status: 402}, failure.ScopeQuotaFamily},
		{failure.Verdict{Status: 404}, failure.ScopeModel},
		{failure.Verdict{Status: 502}, failure.ScopeExact},
		{failure.Verdict{Status: 503}, failure.ScopeExact},
		{failure.Verdict{Status: 429, Scope: failure.ScopeExact}, failure.ScopeExact},
		{failure.Verdict{Status: 403, Scope: failure.ScopeModel}, failure.ScopeModel},
		{failure.Verdict{Status: 502, Scope: failure.ScopeQuotaFamily}, failure.ScopeQuotaFamily},
		{failure.Verdict{Status: 429, Scope: failure.ScopeConnection}, failure.ScopeQuotaFamily},
	}
	for _, tc := range cases {
		if got := ResolveScope(tc.v); got != tc.want {
			t.Errorf("ResolveScope(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

// check is an expectation on Locked(model) after a step.
type check struct {
	model  string        // model queried
	locked bool          // expected lock state
	left   time.Duration // expected time left (when locked)
	scope  failure.Scope // expected key scope (when locked)
	count  int           // expected failure count (when locked)
}

// step is one event: a failure of model (or a success when success is set), then checks.
type step struct {
	advance    time.Duration   // clock moves forward by this first
	model      string          // model of the attempt
	verdict    failure.Verdict // the failure's verdict
	startedAgo time.Duration   // the attempt started this long before now
	success    bool            // record a success instead
	counted    bool            // expected Outcome.Counted (failures only)
	checks     []check         // expectations afterwards
}

func TestLockoutRules(t *testing.T) {
	flat := enabled()
	flat.UseExponentialBackoff = false
	families := enabled()
	families.Family = codexFamilies.Family
	disabled := DefaultConfig(policies.ProfileAPIKey)
	const gone = 25 * time.Hour    // past any lockout, inside no escalation window
	const ended = 31 * time.Minute // past any escalated lockout, inside its escalation window

	cases := []struct {
		name  string // the rule under test
		cfg   Config // settings
		steps []step // events and expectations
	}{
		{"off by default", disabled, []step{
			{model: "gpt-4o", verdict: v429, checks: []check{{model: "gpt-4o"}}},
		}},
		{"status outside errorCodes never locks", enabled(), []step{
			{model: "gpt-4o", verdict: v500, checks: []check{{model: "gpt-4o"}}},
		}},
		{"base 120s then exponential to the 30min cap", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: 121 * time.Second, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 240 * time.Second, failure.ScopeExact, 2}}},
			{advance: 241 * time.Second, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 480 * time.Second, failure.ScopeExact, 3}}},
			{advance: ended, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 960 * time.Second, failure.ScopeExact, 4}}},
			{advance: ended, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 30 * time.Minute, failure.ScopeExact, 5}}},
			{advance: ended, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 30 * time.Minute, failure.ScopeExact, 6}}},
		}},
		{"useExponentialBackoff false: base every time", flat, []step{
			{model: "m", verdict: v503(), counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: ended, model: "m", verdict: v503(), counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 2}}},
		}},
		{"escalation window passed: counting restarts", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: gone, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
		}},
		{"429 locks the quota family", families, []step{
			{model: "gpt-5-mini", verdict: v429, counted: true, checks: []check{
				{"gpt-5-mini", true, 120 * time.Second, failure.ScopeQuotaFamily, 1},
				{"gpt-5.1-codex", true, 120 * time.Second, failure.ScopeQuotaFamily, 1},
				{"codex-mini-latest", true, 120 * time.Second, failure.ScopeQuotaFamily, 1},
				{model: "gpt-4o"},
			}},
		}},
		{"403 and default family = the model itself", enabled(), []step{
			{model: "gpt-5-mini", verdict: v403, counted: true, checks: []check{
				{"gpt-5-mini", true, 120 * time.Second, failure.ScopeQuotaFamily, 1},
				{model: "gpt-5.1-codex"},
			}},
		}},
		{"404 locks the bare model", families, []step{
			{model: "models/gemini-2.5-pro", verdict: v404, counted: true, checks: []check{
				{"models/gemini-2.5-pro", true, 120 * time.Second, failure.ScopeModel, 1},
				{"google/gemini-2.5-pro", true, 120 * time.Second, failure.ScopeModel, 1},
				{"gemini-2.5-pro", true, 120 * time.Second, failure.ScopeModel, 1},
				{model: "gemini-2.5-flash"},
			}},
		}},
		{"5xx locks only the exact tuple", families, []step{
			{model: "gpt-5.6-luna", verdict: v502, counted: true, checks: []check{
				{"gpt-5.6-luna", true, 120 * time.Second, failure.ScopeExact, 1},
				{model: "gpt-5-mini"},
				{model: "models/gpt-5.6-luna"},
			}},
		}},
		{"explicit rule scope wins", families, []step{
			{model: "gpt-5-mini", verdict: withScope(v429, failure.ScopeExact), counted: true, checks: []check{
				{"gpt-5-mini", true, 120 * time.Second, failure.ScopeExact, 1},
				{model: "gpt-5.1-codex"},
			}},
		}},
		{"rule's declared 6h cooldown clamped to maxCooldown", enabled(), []step{
			{model: "claude-opus", verdict: failure.Verdict{Status: 403, Reason: failure.ReasonAuthError, Scope: failure.ScopeModel, Cooldown: 6 * time.Hour, RuleID: "agentrouter-model-access-denied"},
				counted: true, checks: []check{{"claude-opus", true, 30 * time.Minute, failure.ScopeModel, 1}}},
		}},
		// guide §5 ("Retries uit de body: pacing versus lockout"): a 429's upstream hint is the
		// truth — short hints pace, long ones lock; the base applies only without one. The
		// upstream set the length, so the count does not climb: the next hintless failure
		// gets the base again.
		{"429 upstream Retry-After is the lockout, clamped; no climb", enabled(), []step{
			{model: "m", verdict: testfixture.WithHint(v429, 10*time.Minute, failure.HintRetryAfter), counted: true, checks: []check{{"m", true, 10 * time.Minute, failure.ScopeQuotaFamily, 0}}},
			{advance: ended, model: "m", verdict: testfixture.WithHint(v429, 5*time.Hour, failure.HintRetryAfter), counted: true, checks: []check{{"m", true, 30 * time.Minute, failure.ScopeQuotaFamily, 0}}},
			{advance: ended, model: "m", verdict: v429, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
		}},
		{"429 with Retry-After 1 locks for 1 s, not the 120 s base", enabled(), []step{
			{model: "m", verdict: testfixture.WithHint(v429, time.Second, failure.HintRetryAfter), counted: true, checks: []check{{"m", true, time.Second, failure.ScopeQuotaFamily, 0}}},
			{advance: time.Second, model: "m", verdict: testfixture.WithHint(v429, time.Second, failure.HintRateLimitReset), counted: true, checks: []check{{"m", true, time.Second, failure.ScopeQuotaFamily, 0}}},
		}},
		{"an escalated count survives a hinted lockout, then starts over", enabled(), []step{
			{model: "m", verdict: v429, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
			{advance: 121 * time.Second, model: "m", verdict: v429, counted: true, checks: []check{{"m", true, 240 * time.Second, failure.ScopeQuotaFamily, 2}}},
			{advance: 241 * time.Second, model: "m", verdict: testfixture.WithHint(v429, 5*time.Second, failure.HintBodyText), counted: true, checks: []check{{"m", true, 5 * time.Second, failure.ScopeQuotaFamily, 0}}},
			{advance: 6 * time.Second, model: "m", verdict: v429, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
		}},
		{"a 5xx's Retry-After only lengthens the ladder", enabled(), []step{
			{model: "m", verdict: testfixture.WithHint(v502, 20*time.Second, failure.HintRetryAfter), counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: ended, model: "m", verdict: testfixture.WithHint(v502, 10*time.Minute, failure.HintRetryAfter), counted: true, checks: []check{{"m", true, 10 * time.Minute, failure.ScopeExact, 2}}},
		}},
		// guide §4: quota_exhausted is "vergrendeld tot middernacht": until its reset, past
		// the 30 min maxCooldown, without climbing.
		{"quota window locks until the reset", enabled(), []step{
			{model: "m", verdict: quotaWindow(12 * time.Hour), counted: true, checks: []check{{"m", true, 12 * time.Hour, failure.ScopeQuotaFamily, 0}}},
			{advance: time.Hour, model: "m", verdict: v429, checks: []check{{"m", true, 11 * time.Hour, failure.ScopeQuotaFamily, 0}}},
		}},
		{"quota window capped at a day", enabled(), []step{
			{model: "m", verdict: quotaWindow(30 * time.Hour), counted: true, checks: []check{{"m", true, failure.MaxQuotaWindow, failure.ScopeQuotaFamily, 0}}},
		}},
		{"quota window extends a running lockout", enabled(), []step{
			{model: "m", verdict: v429, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
			{advance: time.Second, model: "m", verdict: quotaWindow(6 * time.Hour), checks: []check{{"m", true, 6 * time.Hour, failure.ScopeQuotaFamily, 1}}},
		}},
		{"restatement's synthetic 60s does not set the lockout", enabled(), []step{
			{model: "m", verdict: testfixture.WithHint(v429, 20*time.Minute, failure.HintRestatement), counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
		}},
		{"long Google RetryInfo: exact lockout for the hint, even when disabled", disabled, []step{
			{model: "models/gemini-2.5-pro", verdict: testfixture.WithHint(v429, 86399*time.Second, failure.HintGoogleRetryInfo), counted: true, checks: []check{
				{"models/gemini-2.5-pro", true, 86399 * time.Second, failure.ScopeExact, 0},
				{model: "gemini-2.5-pro"},
			}},
		}},
		{"long Google RetryInfo locks exactly even under a family scope", families, []step{
			{model: "gpt-5-mini", verdict: withScope(testfixture.WithHint(v429, 2*time.Hour, failure.HintGoogleRetryInfo), failure.ScopeQuotaFamily), counted: true, checks: []check{
				{"gpt-5-mini", true, 2 * time.Hour, failure.ScopeExact, 0},
				{model: "gpt-5.1"},
			}},
		}},
		{"long Google RetryInfo capped at 24h", disabled, []step{
			{model: "g", verdict: testfixture.WithHint(v429, 30*time.Hour, failure.HintGoogleRetryInfo), counted: true, checks: []check{{"g", true, 24 * time.Hour, failure.ScopeExact, 0}}},
		}},
		{"Google hint within the queue budget is pacing, not a long lockout", disabled, []step{
			{model: "g", verdict: testfixture.WithHint(v429, 20*time.Second, failure.HintGoogleRetryInfo), checks: []check{{model: "g"}}},
		}},
		{"untyped long hint is no long lockout", disabled, []step{
			{model: "g", verdict: testfixture.WithHint(v429, 86399*time.Second, failure.HintBodyText), checks: []check{{model: "g"}}},
		}},
		{"herd: failure while locked neither escalates nor extends", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: 10 * time.Second, model: "m", verdict: v502, checks: []check{{"m", true, 110 * time.Second, failure.ScopeExact, 1}}},
			{advance: 10 * time.Second, model: "m", verdict: withScope(v429, failure.ScopeExact), checks: []check{{"m", true, 100 * time.Second, failure.ScopeExact, 1}}},
		}},
		{"herd: attempt started before the lockout does not escalate after it ends", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: 130 * time.Second, startedAgo: 131 * time.Second, model: "m", verdict: v502, checks: []check{{model: "m"}}},
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 240 * time.Second, failure.ScopeExact, 2}}},
		}},
		{"overlapping long hint extends a short lockout", enabled(), []step{
			{model: "g", verdict: withScope(v429, failure.ScopeExact), counted: true, checks: []check{{"g", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: time.Second, model: "g", verdict: testfixture.WithHint(v429, 86399*time.Second, failure.HintGoogleRetryInfo), checks: []check{{"g", true, 86399 * time.Second, failure.ScopeExact, 1}}},
		}},
		{"success decay halves the count and releases at 0", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: 121 * time.Second, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 240 * time.Second, failure.ScopeExact, 2}}},
			{advance: 241 * time.Second, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 480 * time.Second, failure.ScopeExact, 3}}},
			{advance: 80 * time.Second, model: "m", success: true, checks: []check{{"m", true, 400 * time.Second, failure.ScopeExact, 1}}},
			{model: "m", success: true, checks: []check{{model: "m"}}},
			{advance: time.Second, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
		}},
		// guide §3 success decay, applied only to what the success can vouch for: an attempt
		// that started before the lockout was set says nothing about the model since (as the
		// connection cooldown already ignores such successes).
		{"a success from before the lockout leaves it; a later one releases it", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: time.Second, startedAgo: 2 * time.Second, model: "m", success: true, checks: []check{{"m", true, 119 * time.Second, failure.ScopeExact, 1}}},
			{startedAgo: time.Second, model: "m", success: true, checks: []check{{model: "m"}}}, // started exactly when it locked
		}},
		{"success on a sibling model decays the shared family", families, []step{
			{model: "gpt-5-mini", verdict: v429, counted: true, checks: []check{{"gpt-5.1", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
			{model: "gpt-5.1", success: true, checks: []check{{model: "gpt-5-mini"}}},
		}},
		{"success on an unrelated model changes nothing", families, []step{
			{model: "gpt-5-mini", verdict: v429, counted: true, checks: []check{{"gpt-5-mini", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
			{model: "gpt-4o", success: true, checks: []check{{"gpt-5-mini", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
		}},
		{"success after the lockout ended still decays (escalation stops)", enabled(), []step{
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: 121 * time.Second, model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 240 * time.Second, failure.ScopeExact, 2}}},
			{advance: 241 * time.Second, model: "m", success: true, checks: []check{{model: "m"}}},
			{model: "m", verdict: v502, counted: true, checks: []check{{"m", true, 240 * time.Second, failure.ScopeExact, 2}}},
		}},
		{"several keys locked: the latest end wins", families, []step{
			{model: "gpt-5-mini", verdict: v502, counted: true, checks: []check{{"gpt-5-mini", true, 120 * time.Second, failure.ScopeExact, 1}}},
			{advance: time.Minute, model: "gpt-5-mini", verdict: v429, counted: true, checks: []check{{"gpt-5-mini", true, 120 * time.Second, failure.ScopeQuotaFamily, 1}}},
		}},
	}
	// Every rule holds alike for a model the policy names (its own keys) and for one a
	// client chose that the provider served (the pool slots). A client-chosen name with no
	// evidence that it is real locks only itself: TestANameWithoutEvidenceLocksOnlyItself.
	for _, tc := range cases {
		var named []string
		for _, s := range tc.steps {
			named = append(named, s.model)
			for _, c := range s.checks {
				named = append(named, c.model)
			}
		}
		for _, kind := range []string{"configured", "served"} {
			configured := named
			if kind == "served" {
				configured = nil
			}
			runLockoutSteps(t, tc.name+"/"+kind, tc.cfg, configured, kind == "served", tc.steps)
		}
	}
}

// runLockoutSteps runs steps on a connection that configures configured; served says every
// failure's model was seen served (Failure.Served).
func runLockoutSteps(t *testing.T, name string, cfg Config, configured []string, served bool, steps []step) {
	t.Run(name, func(t *testing.T) {
		f := newFixture(t, cfg, configured...)
		for i, s := range steps {
			f.clock.Advance(s.advance)
			if s.success {
				if err := f.tr.RecordSuccess(f.conn, s.model, f.clock.Now().Add(-s.startedAgo)); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			} else {
				out, err := f.tr.RecordFailure(f.conn, Failure{Model: s.model, Verdict: s.verdict, Started: f.clock.Now().Add(-s.startedAgo), Served: served})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if out.Counted != s.counted {
					t.Errorf("step %d: counted %v, want %v", i, out.Counted, s.counted)
				}
			}
			for _, c := range s.checks {
				l, ok := f.locked(t, c.model)
				if ok != c.locked {
					t.Fatalf("step %d: %s locked=%v (%+v), want %v", i, c.model, ok, l, c.locked)
				}
				if !ok {
					continue
				}
				if left := l.Until.Sub(f.clock.Now()); left != c.left || l.Scope != c.scope || l.FailureCount != c.count {
					t.Fatalf("step %d: %s left %v scope %s count %d, want %v %s %d", i, c.model, left, l.Scope, l.FailureCount, c.left, c.scope, c.count)
				}
			}
		}
	})
}

func v503() failure.Verdict { return failure.Verdict{Status: 503, Reason: failure.ReasonModelCapacity} }

// quotaWindow is an exhausted quota with its window, as the classifier reports it.
func quotaWindow(d time.Duration) failure.Verdict {
	return failure.Verdict{Status: 429, Reason: failure.ReasonQuotaExhausted, Cooldown: d, QuotaWindow: true}
}

func withScope(v failure.Verdict, s failure.Scope) failure.Verdict {
	v.Scope = s
	return v
}

func TestQueueBudgetPerFailure(t *testing.T) {
	f := newFixture(t, DefaultConfig(policies.ProfileAPIKey))
	v := testfixture.WithHint(v429, 5*time.Minute, failure.HintGoogleRetryInfo)
	out, err := f.tr.RecordFailure(f.conn, Failure{Model: "g", Verdict: v, QueueMaxWait: 10 * time.Minute})
	if err != nil || out.Locked {
		t.Fatalf("hint within the connection's own 10min budget locked: %+v %v", out, err)
	}
	out, err = f.tr.RecordFailure(f.conn, Failure{Model: "g", Verdict: v})
	if err != nil || !out.Locked || out.Lock.Until.Sub(t0) != 5*time.Minute {
		t.Fatalf("hint beyond the default 30s budget: %+v %v", out, err)
	}
}

func TestLockTransient(t *testing.T) {
	// guide §4: comboCooldownWait waits only where a request would answer a 429 — a rate
	// limit or a busy account — never on a lockout a 5xx set (server error, overloaded
	// model), nor on quota ("vergrendeld tot middernacht"), auth or not-found.
	cases := []struct {
		reason failure.Reason // lock reason
		want   bool           // whether combo retry may wait on it
	}{
		{failure.ReasonRateLimit, true},
		{failure.ReasonConcurrencyLimited, true},
		{failure.ReasonModelCapacity, false},
		{failure.ReasonServerError, false},
		{failure.ReasonTimeout, false},
		{failure.ReasonQuotaExhausted, false},
		{failure.ReasonAuthError, false},
		{failure.ReasonNotFound, false},
	}
	for _, tc := range cases {
		if got := (Lock{Reason: tc.reason}).Transient(); got != tc.want {
			t.Errorf("%s: Transient() = %v, want %v", tc.reason, got, tc.want)
		}
	}
}
