package conncooldown

import (
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

func TestDefaultConfig(t *testing.T) {
	cases := []struct {
		profile  policies.Profile // provider profile
		base     time.Duration    // expected base cooldown
		preferHT bool             // expected preference for upstream 429 hints
	}{
		{policies.ProfileOAuth, 5 * time.Second, false},
		{policies.ProfileAPIKey, 3 * time.Second, true},
		{policies.ProfileLocal, 1 * time.Second, true},
		{"mystery", 3 * time.Second, true},
	}
	for _, tc := range cases {
		c := DefaultConfig(tc.profile)
		if c.BaseCooldown != tc.base || c.PreferRetryHint != tc.preferHT {
			t.Errorf("%s: base %v prefer %v, want %v %v", tc.profile, c.BaseCooldown, c.PreferRetryHint, tc.base, tc.preferHT)
		}
		if c.ConcurrencyLimitCooldown != time.Second || c.ExpiredRetryMax != 3 || c.RequestRejectedStreak != 3 ||
			c.StreamStallCooldown || c.MaxBackoffSteps != policies.ConnectionCooldownMaxBackoffSteps ||
			c.MaxCooldown != policies.ConnectionCooldownMax {
			t.Errorf("%s: shared defaults wrong: %+v", tc.profile, c)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: defaults invalid: %v", tc.profile, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string          // what is wrong
		mutate func(c *Config) // the bad setting
		field  string          // the setting the error must name
	}{
		{"zero max", func(c *Config) { c.MaxCooldown = 0 }, "maxCooldown"},
		{"max over a day", func(c *Config) { c.MaxCooldown = 25 * time.Hour }, "maxCooldown"},
		{"zero base", func(c *Config) { c.BaseCooldown = 0 }, "baseCooldown"},
		{"base over max", func(c *Config) { c.BaseCooldown = time.Hour }, "baseCooldown"},
		{"negative steps", func(c *Config) { c.MaxBackoffSteps = -1 }, "maxBackoffSteps"},
		{"too many steps", func(c *Config) { c.MaxBackoffSteps = 31 }, "maxBackoffSteps"},
		{"zero concurrency cooldown", func(c *Config) { c.ConcurrencyLimitCooldown = 0 }, "concurrencyLimitCooldown"},
		{"zero expired retries", func(c *Config) { c.ExpiredRetryMax = 0 }, "expiredRetryMax"},
		{"zero rejection streak", func(c *Config) { c.RequestRejectedStreak = 0 }, "requestRejectedStreak"},
		{"sub-millisecond max", func(c *Config) { c.MaxCooldown += time.Microsecond }, "maxCooldown"},
		{"sub-millisecond base", func(c *Config) { c.BaseCooldown += time.Microsecond }, "baseCooldown"},
	}
	for _, tc := range cases {
		c := apikey()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.HasPrefix(err.Error(), "conncooldown: ") {
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := New(nil, nil, apikey()); err == nil {
		t.Errorf("New without store and clock succeeded")
	}
}

func TestNewConnValidatesIDs(t *testing.T) {
	cases := []struct {
		provider, connection string // ids under test
		ok                   bool   // whether they are accepted
	}{
		{"openai", "openai-a", true},
		{"", "a", false},
		{"openai", "", false},
		{"open:ai", "a", false},
		{"openai", "a:b", false},
		{"openai", "a b", false},
		{"openai", "a\nb", false},
		{"openai", strings.Repeat("x", 129), false},
		{"openai", strings.Repeat("x", 128), true},
	}
	for _, tc := range cases {
		_, err := NewConn(tc.provider, tc.connection, "upstream", "account", "")
		if (err == nil) != tc.ok {
			t.Errorf("NewConn(%q, %q) err=%v, want ok=%v", tc.provider, tc.connection, err, tc.ok)
		}
	}
}

// step is one event in a scenario: a failure, or a success when success is set.
type step struct {
	advance    time.Duration   // clock moves forward by this first
	verdict    failure.Verdict // the failure's verdict
	startedAgo time.Duration   // the attempt started this long before now (0 = just now)
	success    bool            // record a success instead of a failure
	counted    bool            // expected Outcome.Counted (failures only)
	status     Status          // expected status afterwards
	retryAfter time.Duration   // expected time left in the cooldown afterwards
	level      int             // expected backoff level afterwards
}

func TestFailureRules(t *testing.T) {
	oauth := DefaultConfig(policies.ProfileOAuth)
	bigBase := apikey()
	bigBase.BaseCooldown = 5 * time.Minute
	stallOn := apikey()
	stallOn.StreamStallCooldown = true
	const gone = time.Hour // long enough for any cooldown in these scenarios to pass

	cases := []struct {
		name  string // the rule under test
		cfg   Config // settings
		steps []step // events and the state after each
	}{
		{"apikey base 3s then doubles", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: 3 * time.Second, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: 6 * time.Second, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 12 * time.Second, level: 3},
		}},
		// issue 19 (OmniRoute 3.7.9 checkFallbackError's last branch; the guide is silent):
		// a failure no rule names cools for the base cooldown every time and leaves the
		// ladder where it was.
		{"unknown failure: the base cooldown, the ladder untouched", apikey(), []step{
			{verdict: vUnknown, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 0},
			{advance: gone, verdict: vUnknown, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 0},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vUnknown, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
		}},
		{"unknown failure on oauth: its 5 s base", oauth, []step{
			{verdict: vUnknown, counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 0},
		}},
		{"oauth base 5s", oauth, []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 10 * time.Second, level: 2},
		}},
		{"ladder capped at max backoff steps (8: 3s×256=768s)", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 12 * time.Second, level: 3},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 24 * time.Second, level: 4},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 48 * time.Second, level: 5},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 96 * time.Second, level: 6},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 192 * time.Second, level: 7},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 384 * time.Second, level: 8},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 768 * time.Second, level: 8},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 768 * time.Second, level: 8},
		}},
		{"max cooldown 30min clamps the ladder", bigBase, []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 5 * time.Minute, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 10 * time.Minute, level: 2},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 20 * time.Minute, level: 3},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 30 * time.Minute, level: 4},
		}},
		{"apikey 429 prefers Retry-After", apikey(), []step{
			{verdict: testfixture.WithHint(vRateLimit, 42*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 42 * time.Second, level: 0},
			{advance: gone, verdict: testfixture.WithHint(vRateLimit, 7*time.Second, failure.HintBodyText), counted: true, status: StatusUnavailable, retryAfter: 7 * time.Second, level: 0},
		}},
		{"apikey 429 hint clamped to max cooldown", apikey(), []step{
			{verdict: testfixture.WithHint(vRateLimit, 10*time.Hour, failure.HintRateLimitReset), counted: true, status: StatusUnavailable, retryAfter: 30 * time.Minute, level: 0},
		}},
		// guide §2: a 429 prefers the upstream's hint; when the hint decides, the ladder does
		// not climb, and the next failure without a hint starts again from the base
		// (checkFallbackError: newBackoffLevel 0 with usedUpstreamRetryHint).
		{"hint-decided cooldown resets the ladder to the base", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: testfixture.WithHint(vRateLimit, 42*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 42 * time.Second, level: 0},
			{advance: gone, verdict: vRateLimit, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: testfixture.WithHint(vRateLimit, 9*time.Second, failure.HintRateLimitReset), counted: true, status: StatusUnavailable, retryAfter: 9 * time.Second, level: 0},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"oauth ignores 429 hints, so its ladder climbs", DefaultConfig(policies.ProfileOAuth), []step{
			{verdict: testfixture.WithHint(vRateLimit, 42*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 1},
			{advance: gone, verdict: testfixture.WithHint(vRateLimit, 42*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 10 * time.Second, level: 2},
		}},
		// guide §2 and §4: an exhausted quota stays locked until its reset ("vergrendeld tot
		// middernacht"): the verdict's window as it is, past the 30 min maximum, without
		// climbing the ladder; up to failure.MaxQuotaWindow.
		{"quota window: until the reset, not clamped to max cooldown, ladder reset", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vQuota(12 * time.Hour), counted: true, status: StatusUnavailable, retryAfter: 12 * time.Hour, level: 0},
			{advance: 12 * time.Hour, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"quota window on oauth: the window too", DefaultConfig(policies.ProfileOAuth), []step{
			{verdict: vQuota(time.Hour), counted: true, status: StatusUnavailable, retryAfter: time.Hour, level: 0},
		}},
		{"quota window capped at a day", apikey(), []step{
			{verdict: vQuota(30 * time.Hour), counted: true, status: StatusUnavailable, retryAfter: failure.MaxQuotaWindow, level: 0},
		}},
		{"quota window extends a running cooldown; a shorter one does not", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: time.Second, verdict: vQuota(5 * time.Hour), counted: true, status: StatusUnavailable, retryAfter: 5 * time.Hour, level: 1},
			{advance: time.Hour, verdict: vQuota(time.Hour), counted: false, status: StatusUnavailable, retryAfter: 4 * time.Hour, level: 1},
		}},
		// guide "Foutopsporing": only one model fails → model lockout, not connection cooldown.
		{"model-only failure leaves the connection alone", apikey(), []step{
			{verdict: vModelOnly, counted: false, status: StatusAvailable, level: 0},
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vModelOnly, counted: false, status: StatusAvailable, level: 1},
		}},
		{"restatement's synthetic 60s is not a cooldown", apikey(), []step{
			{verdict: testfixture.WithHint(vRateLimit, 60*time.Second, failure.HintRestatement), counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"oauth 429 keeps computed backoff", oauth, []step{
			{verdict: testfixture.WithHint(vRateLimit, 42*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 1},
		}},
		{"429 without hint climbs the ladder", apikey(), []step{
			{verdict: vRateLimit, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"rule's declared cooldown is the ladder base", apikey(), []step{
			{verdict: failure.Verdict{Status: 403, Reason: failure.ReasonQuotaExhausted, Cooldown: time.Minute}, counted: true, status: StatusUnavailable, retryAfter: time.Minute, level: 1},
			{advance: gone, verdict: failure.Verdict{Status: 403, Reason: failure.ReasonQuotaExhausted, Cooldown: time.Minute}, counted: true, status: StatusUnavailable, retryAfter: 2 * time.Minute, level: 2},
		}},
		{"concurrency 429: fixed 1s, backoff level kept", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vConcurrency, counted: true, status: StatusUnavailable, retryAfter: time.Second, level: 1},
			{advance: gone, verdict: testfixture.WithHint(vConcurrency, 4*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 4 * time.Second, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
		}},
		{"concurrency 429 on oauth still honours the hint", oauth, []step{
			{verdict: testfixture.WithHint(vConcurrency, 2*time.Second, failure.HintRetryAfter), counted: true, status: StatusUnavailable, retryAfter: 2 * time.Second, level: 0},
		}},
		{"herd: failure while cooling neither extends nor escalates", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: time.Second, verdict: vServer, counted: false, status: StatusUnavailable, retryAfter: 2 * time.Second, level: 1},
			{advance: time.Second, verdict: testfixture.WithHint(vRateLimit, time.Minute, failure.HintRetryAfter), counted: false, status: StatusUnavailable, retryAfter: time.Second, level: 1},
			{verdict: vConcurrency, counted: false, status: StatusUnavailable, retryAfter: time.Second, level: 1},
		}},
		{"herd: attempt started before the cooldown was set does not escalate after it ends", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: 4 * time.Second, verdict: vServer, startedAgo: 5 * time.Second, counted: false, status: StatusAvailable, level: 1},
			{verdict: vServer, startedAgo: time.Second, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
		}},
		{"lazy recovery: elapsed cooldown reads available, level kept", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: 3 * time.Second, success: true, startedAgo: 4 * time.Second, status: StatusAvailable, level: 1},
			{advance: time.Second, success: true, status: StatusAvailable, level: 0},
		}},
		{"success clears error fields and backoff", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{success: true, status: StatusAvailable, level: 0},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"content stall records the error without cooling", apikey(), []step{
			{verdict: vStall, counted: true, status: StatusAvailable, level: 0},
			{verdict: vStall, counted: true, status: StatusAvailable, level: 0},
		}},
		{"content stall cools when streamStallCooldown is enabled", stallOn, []step{
			{verdict: vStall, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"ban keywords: terminal at once", apikey(), []step{
			{verdict: vBanned, counted: true, status: StatusBanned},
		}},
		{"credits exhausted: terminal at once, even while cooling", apikey(), []step{
			{verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{verdict: vCredits, counted: true, status: StatusCreditsExhausted, level: 1},
		}},
		{"single rejection only cools; third consecutive bans", apikey(), []step{
			{verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: time.Second, verdict: vRejected, counted: false, status: StatusUnavailable, retryAfter: 2 * time.Second, level: 1},
			{advance: gone, verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: vRejected, counted: true, status: StatusBanned, level: 2},
		}},
		{"rejection streak broken by another failure", apikey(), []step{
			{verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 12 * time.Second, level: 3},
			{advance: gone, verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 24 * time.Second, level: 4},
			{advance: gone, verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 48 * time.Second, level: 5},
			{advance: gone, verdict: vRejected, counted: true, status: StatusBanned, level: 5},
		}},
		{"rejection streak broken by a success", apikey(), []step{
			{verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{success: true, status: StatusAvailable},
			{verdict: vRejected, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
		}},
		{"expired: two bounded retries with backoff, terminal on the third", oauth, []step{
			{verdict: vExpired, counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 1},
			{advance: gone, verdict: vExpired, counted: true, status: StatusUnavailable, retryAfter: 10 * time.Second, level: 2},
			{advance: gone, verdict: vExpired, counted: true, status: StatusExpired, level: 2},
		}},
		// guide §2: expired "gaat na begrensde retries over naar terminaal — EXPIRED_RETRY_MAX
		// = 3 met exponentiële backoff". A revoked key answers a plain 401 ("invalid key"),
		// never "expired": consecutive 401s, spaced by the backoff, make it expired on the
		// third whatever the body says; a success in between starts the count again.
		{"revoked key: third consecutive 401 is terminal expired", apikey(), []step{
			{verdict: v401, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: time.Second, verdict: v401, counted: false, status: StatusUnavailable, retryAfter: 2 * time.Second, level: 1}, // while cooling: not a retry
			{advance: gone, verdict: v401, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: vServer, counted: true, status: StatusUnavailable, retryAfter: 12 * time.Second, level: 3},
			{advance: gone, verdict: v401, counted: true, status: StatusExpired, level: 3},
		}},
		{"revoked key: a success between 401s resets the count", apikey(), []step{
			{verdict: v401, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: v401, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{success: true, status: StatusAvailable},
			{verdict: v401, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: v401, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: vExpired401, counted: true, status: StatusExpired, level: 2}, // expired wording counts the same
		}},
		{"403 auth errors are not 401s: never expired", apikey(), []step{
			{verdict: v403, counted: true, status: StatusUnavailable, retryAfter: 3 * time.Second, level: 1},
			{advance: gone, verdict: v403, counted: true, status: StatusUnavailable, retryAfter: 6 * time.Second, level: 2},
			{advance: gone, verdict: v403, counted: true, status: StatusUnavailable, retryAfter: 12 * time.Second, level: 3},
		}},
		{"expired retries reset by a success", oauth, []step{
			{verdict: vExpired, counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 1},
			{advance: gone, verdict: vExpired, counted: true, status: StatusUnavailable, retryAfter: 10 * time.Second, level: 2},
			{success: true, status: StatusAvailable},
			{advance: gone, verdict: vExpired, counted: true, status: StatusUnavailable, retryAfter: 5 * time.Second, level: 1},
		}},
		{"terminal is never overwritten by cooldowns or successes", apikey(), []step{
			{verdict: vBanned, counted: true, status: StatusBanned},
			{verdict: vServer, counted: false, status: StatusBanned},
			{advance: gone, verdict: testfixture.WithHint(vRateLimit, time.Second, failure.HintRetryAfter), counted: false, status: StatusBanned},
			{verdict: vConcurrency, counted: false, status: StatusBanned},
			{verdict: vStall, counted: false, status: StatusBanned},
			{verdict: vCredits, counted: false, status: StatusBanned},
			{success: true, status: StatusBanned},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg)
			for i, s := range tc.steps {
				f.clock.Advance(s.advance)
				started := f.clock.Now().Add(-s.startedAgo)
				if s.success {
					if err := f.tr.RecordSuccess(f.conn, started); err != nil {
						t.Fatalf("step %d: RecordSuccess: %v", i, err)
					}
				} else if out := f.fail(t, s.verdict, started); out.Counted != s.counted {
					t.Errorf("step %d: counted %v, want %v", i, out.Counted, s.counted)
				}
				a := f.check(t)
				if a.Status != s.status || a.RetryAfter != s.retryAfter || a.BackoffLevel != s.level {
					t.Fatalf("step %d: got %s retryAfter %v level %d, want %s %v %d",
						i, a.Status, a.RetryAfter, a.BackoffLevel, s.status, s.retryAfter, s.level)
				}
				if a.Available() != (s.status == StatusAvailable) {
					t.Errorf("step %d: Available() = %v for %s", i, a.Available(), a.Status)
				}
			}
		})
	}
}

func TestAvailabilityTransient(t *testing.T) {
	// guide §4: combo retry waits out only the cooldowns of a would-be 429 (rate limits,
	// busy accounts), never a server error or an overloaded model (a 5xx), quota_exhausted
	// ("vergrendeld tot middernacht") or auth reasons; Availability says which it is.
	cases := []struct {
		verdict   failure.Verdict // the failure that set the cooldown
		transient bool            // expected Availability.Transient()
	}{
		{vServer, false},
		{failure.Verdict{Status: 529, Reason: failure.ReasonModelCapacity, Fallback: true, Scope: failure.ScopeExact}, false},
		{vRateLimit, true},
		{vConcurrency, true},
		{vQuota(12 * time.Hour), false},
		{v403, false},
		{v401, false},
	}
	for _, tc := range cases {
		f := newFixture(t, apikey())
		f.fail(t, tc.verdict, f.clock.Now())
		a := f.check(t)
		if a.Status != StatusUnavailable || a.Reason != tc.verdict.Reason || a.Transient() != tc.transient {
			t.Errorf("%s: %+v, Transient() = %v, want %v", tc.verdict.Reason, a, a.Transient(), tc.transient)
		}
		f.clock.Advance(25 * time.Hour)
		if a := f.check(t); a.Transient() || a.Reason != "" {
			t.Errorf("%s: after the cooldown %+v still reads transient or keeps a reason", tc.verdict.Reason, a)
		}
	}
}
