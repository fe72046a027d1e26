package providercooldown

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// guideWindows are the guide's window-gate numbers per profile (§1).
var guideWindows = []struct {
	profile   policies.Profile
	threshold int           // providerFailureThreshold (10 / 15 / 2)
	window    time.Duration // providerFailureWindowMs (15 / 30 / 5 min)
	cooldown  time.Duration // providerCooldownMs (5 / 10 / 1 min)
}{
	{policies.ProfileOAuth, 10, 15 * time.Minute, 5 * time.Minute},
	{policies.ProfileAPIKey, 15, 30 * time.Minute, 10 * time.Minute},
	{policies.ProfileLocal, 2, 5 * time.Minute, 1 * time.Minute},
}

func TestDefaultConfigFollowsTheGuide(t *testing.T) {
	for _, tc := range guideWindows {
		cfg, err := DefaultConfig(tc.profile)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Enabled {
			t.Errorf("%s: the gate is opt-in, default must be off", tc.profile)
		}
		if cfg.FailureThreshold != tc.threshold || cfg.FailureWindow != tc.window || cfg.Cooldown != tc.cooldown {
			t.Errorf("%s: %+v", tc.profile, cfg)
		}
		if cfg.MinRetryCooldown != policies.ProviderCooldownMinRetryCooldown || cfg.MaxRetryCooldown != policies.ProviderCooldownMaxRetryCooldown {
			t.Errorf("%s: retry cooldowns not from policies: %+v", tc.profile, cfg)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: defaults do not validate: %v", tc.profile, err)
		}
	}
	if _, err := DefaultConfig("gold"); err == nil || !strings.HasPrefix(err.Error(), "providercooldown: ") {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestValidateRejectsOutOfRange(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config) // breaks one setting of valid oauth defaults
		want string        // substring of the error
	}{
		{"zero threshold", func(c *Config) { c.FailureThreshold = 0 }, "providerFailureThreshold"},
		{"huge threshold", func(c *Config) { c.FailureThreshold = maxThreshold + 1 }, "providerFailureThreshold"},
		{"zero window", func(c *Config) { c.FailureWindow = 0 }, "providerFailureWindow"},
		{"zero cooldown", func(c *Config) { c.Cooldown = 0 }, "providerCooldown"},
		{"cooldown over a day", func(c *Config) { c.Cooldown = 25 * time.Hour }, "providerCooldown"},
		{"zero min retry", func(c *Config) { c.MinRetryCooldown = 0 }, "minRetryCooldown"},
		{"max below min", func(c *Config) { c.MaxRetryCooldown = c.MinRetryCooldown - 1 }, "maxRetryCooldown"},
	}
	for _, tc := range tests {
		cfg, _ := DefaultConfig(policies.ProfileOAuth)
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error about %s", tc.name, err, tc.want)
		}
		if _, err := ProviderEntry("p", "p", cfg); err == nil {
			t.Errorf("%s: ProviderEntry accepted it", tc.name)
		}
		if _, err := ConnectionEntry("p", "c", "p"+"/"+"c", cfg); err == nil {
			t.Errorf("%s: ConnectionEntry accepted it", tc.name)
		}
	}
}

func TestEntriesRejectBadIDs(t *testing.T) {
	cfg := enabled(t, policies.ProfileOAuth, nil)
	for _, id := range []string{"", "a:b", "two words", "\x00", strings.Repeat("x", maxIDLen+1)} {
		if _, err := ProviderEntry(id, id, cfg); err == nil {
			t.Errorf("ProviderEntry(%q) accepted", id)
		}
		if _, err := ConnectionEntry("p", id, "p"+"/"+id, cfg); err == nil {
			t.Errorf("ConnectionEntry(p, %q) accepted", id)
		}
		if _, err := ConnectionEntry(id, "c", id+"/"+"c", cfg); err == nil {
			t.Errorf("ConnectionEntry(%q, c) accepted", id)
		}
	}
	e := connectionEntry(t, "openai", "openai-a", cfg)
	if e.Provider() != "openai" || e.Connection() != "openai-a" || e.key != state.KeyGateBackoff.Key("openai/openai-a") {
		t.Fatalf("connection entry %+v", e)
	}
	var zero Entry
	g := newEnv(t).g
	if _, err := g.Check(zero); err == nil {
		t.Error("Check accepted a zero Entry")
	}
	if _, err := g.RecordFailure(zero, vServer); err == nil {
		t.Error("RecordFailure accepted a zero Entry")
	}
}

func TestDisabledGateDoesNothing(t *testing.T) {
	e := newEnv(t)
	cfg, _ := DefaultConfig(policies.ProfileLocal) // off by default
	p := providerEntry(t, "prov", cfg)
	c := connectionEntry(t, "prov", "conn", cfg)
	for _, entry := range []Entry{p, c} {
		if s := fail(t, e.g, entry, 50); s != (Status{}) {
			t.Fatalf("disabled gate recorded: %+v", s)
		}
		succeed(t, e.g, entry)
		if s := check(t, e.g, entry); s.Cooling {
			t.Fatalf("disabled gate cools: %+v", s)
		}
	}
	if e.store.Sets != 0 || e.store.Keys() != 1 {
		t.Fatalf("disabled gate wrote %d times", e.store.Sets)
	}
	// Records written while it was on are ignored once it is off.
	on := providerEntry(t, "prov", enabled(t, policies.ProfileLocal, nil))
	fail(t, e.g, on, 2)
	if s := check(t, e.g, p); s.Cooling {
		t.Fatal("disabled gate honours a stored cooldown")
	}
}

func TestWindowGateThresholds(t *testing.T) {
	for _, tc := range guideWindows {
		t.Run(string(tc.profile), func(t *testing.T) {
			e := newEnv(t)
			p := providerEntry(t, "prov", enabled(t, tc.profile, nil))
			for i := 1; i < tc.threshold; i++ {
				e.clock.Advance(time.Second)
				if s := fail(t, e.g, p, 1); s.Cooling || s.Failures != i {
					t.Fatalf("failure %d (below %d): %+v, want not cooling", i, tc.threshold, s)
				}
				if s := check(t, e.g, p); s.Cooling || s.Failures != i {
					t.Fatalf("check after failure %d: %+v", i, s)
				}
			}
			s := fail(t, e.g, p, 1)
			if !s.Cooling || s.RetryAfter != tc.cooldown || s.Failures != tc.threshold || !s.Until.Equal(e.clock.Now().Add(tc.cooldown)) {
				t.Fatalf("failure %d: %+v, want cooling for %v", tc.threshold, s, tc.cooldown)
			}
			e.clock.Advance(tc.cooldown - time.Millisecond)
			if s := check(t, e.g, p); !s.Cooling || s.RetryAfter != time.Millisecond {
				t.Fatalf("1 ms before the end: %+v", s)
			}
			e.clock.Advance(time.Millisecond)
			if s := check(t, e.g, p); s.Cooling {
				t.Fatalf("after the cooldown: %+v, want not cooling", s)
			}
		})
	}
}

func TestWindowSlides(t *testing.T) {
	// guide §1: "tript na N binnen window": the window is inclusive, so a failure exactly one
	// window old still counts; a millisecond later it has left.
	for _, tc := range guideWindows {
		tests := []struct {
			span    time.Duration // time from the first to the last of threshold failures
			cooling bool          // whether they cool the provider
		}{
			{tc.window - time.Millisecond, true},  // all inside the window
			{tc.window, true},                     // the first exactly one window old: still inside
			{tc.window + time.Millisecond, false}, // the first just left it
		}
		for _, st := range tests {
			e := newEnv(t)
			p := providerEntry(t, "prov", enabled(t, tc.profile, nil))
			fail(t, e.g, p, 1)
			e.clock.Advance(st.span)
			s := fail(t, e.g, p, tc.threshold-1)
			if s.Cooling != st.cooling {
				t.Errorf("%s: %d failures over %v: %+v, want cooling=%v", tc.profile, tc.threshold, st.span, s, st.cooling)
			}
		}
	}
}

func TestSuccessClearsTheWindow(t *testing.T) {
	e := newEnv(t)
	p := providerEntry(t, "prov", enabled(t, policies.ProfileOAuth, nil))
	fail(t, e.g, p, 9)
	succeed(t, e.g, p)
	if s := check(t, e.g, p); s.Failures != 0 || e.store.Keys() != 1 {
		t.Fatalf("after a success: %+v, %d keys", s, e.store.Keys())
	}
	if s := fail(t, e.g, p, 9); s.Cooling || s.Failures != 9 {
		t.Fatalf("9 fresh failures after the success: %+v, want not cooling", s)
	}
	// A success during a running cooldown clears the window but lets the cooldown run.
	fail(t, e.g, p, 1)
	succeed(t, e.g, p)
	if s := check(t, e.g, p); !s.Cooling || s.Failures != 0 || s.RetryAfter != 5*time.Minute {
		t.Fatalf("success while cooling: %+v, want still cooling with an empty window", s)
	}
	e.clock.Advance(5 * time.Minute)
	if s := fail(t, e.g, p, 1); s.Cooling || s.Failures != 1 {
		t.Fatalf("first failure after the cooldown: %+v, want a fresh count of 1", s)
	}
}

func TestFailuresWhileCoolingAreTheSameIncident(t *testing.T) {
	e := newEnv(t)
	p := providerEntry(t, "prov", enabled(t, policies.ProfileLocal, nil))
	fail(t, e.g, p, 2)
	e.clock.Advance(30 * time.Second)
	sets := e.store.Sets
	s := fail(t, e.g, p, 5)
	if s.RetryAfter != 30*time.Second || s.Failures != 2 || e.store.Sets != sets {
		t.Fatalf("in-flight failures while cooling: %+v (%d writes), want the cooldown unchanged", s, e.store.Sets-sets)
	}
}

func TestProviderStillFailingAfterItsCooldownCoolsAgain(t *testing.T) {
	// local: 2 in 5 min → 1 min. The window still holds both failures when the cooldown
	// ends, so one more failure inside the window cools it again; once they left the
	// window it takes two again.
	e := newEnv(t)
	p := providerEntry(t, "prov", enabled(t, policies.ProfileLocal, nil))
	fail(t, e.g, p, 2)
	e.clock.Advance(time.Minute)
	if s := fail(t, e.g, p, 1); !s.Cooling || s.RetryAfter != time.Minute {
		t.Fatalf("failure right after the cooldown: %+v, want cooling again", s)
	}
	e.clock.Advance(5*time.Minute + time.Millisecond)
	if s := fail(t, e.g, p, 1); s.Cooling || s.Failures != 1 {
		t.Fatalf("failure after the window emptied: %+v, want not cooling", s)
	}
}

func TestConnectionBackoff(t *testing.T) {
	// min 1 s, max 2 min: 1, 2, 4, 8, 16, 32, 64 s, then capped at 120 s.
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 120, 120}
	e := newEnv(t)
	c := connectionEntry(t, "prov", "conn", enabled(t, policies.ProfileAPIKey, nil))
	p := providerEntry(t, "prov", enabled(t, policies.ProfileAPIKey, nil))
	for i, secs := range want {
		s := fail(t, e.g, c, 1)
		if !s.Cooling || s.RetryAfter != secs*time.Second || s.Failures != i+1 {
			t.Fatalf("failure %d: %+v, want cooling %ds", i+1, s, secs)
		}
		// In-flight failures during the cooldown do not escalate it.
		if s := fail(t, e.g, c, 3); s.RetryAfter != secs*time.Second || s.Failures != i+1 {
			t.Fatalf("failure %d: herd escalated it: %+v", i+1, s)
		}
		e.clock.Advance(secs * time.Second)
		if s := check(t, e.g, c); s.Cooling {
			t.Fatalf("after cooldown %d: %+v", i+1, s)
		}
	}
	if s := check(t, e.g, p); s.Cooling || s.Failures != 0 {
		t.Fatalf("connection failures touched the provider entry: %+v", s)
	}
	succeed(t, e.g, c)
	if s := fail(t, e.g, c, 1); s.RetryAfter != time.Second {
		t.Fatalf("after a success: %+v, want the 1 s start", s)
	}
}

func TestConcurrencyLimitsCoolFixedAndLeaveTheBackoff(t *testing.T) {
	// guide §2: a concurrency-limit 429 means the account is healthy but busy: cool for the
	// fixed CONCURRENCY_LIMIT_COOLDOWN_MS (1 s) or the upstream's hint, leave backoffLevel
	// alone. It never climbs the connection entry's ladder, and never counts against the
	// provider's window.
	hinted := vConcurrency
	hinted.RetryHint, hinted.HintSource = 3*time.Second, failure.HintRetryAfter
	steps := []struct {
		verdict  failure.Verdict // what is recorded
		cooling  time.Duration   // expected cooldown afterwards
		failures int             // expected failures in a row afterwards
	}{
		{vConcurrency, time.Second, 0},
		{vConcurrency, time.Second, 0},
		{vConcurrency, time.Second, 0}, // a ladder would say 4 s here
		{vServer, time.Second, 1},
		{vConcurrency, time.Second, 1},
		{hinted, 3 * time.Second, 1},
		{vServer, 2 * time.Second, 2}, // the ladder resumes where it was
	}
	e := newEnv(t)
	c := connectionEntry(t, "prov", "conn", enabled(t, policies.ProfileAPIKey, nil))
	p := providerEntry(t, "prov", enabled(t, policies.ProfileLocal, nil)) // 2 failures cool it
	for i, st := range steps {
		s, err := e.g.RecordFailure(c, st.verdict)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Cooling || s.RetryAfter != st.cooling || s.Failures != st.failures {
			t.Fatalf("step %d (%s): %+v, want cooling %v with %d failures", i, st.verdict.Reason, s, st.cooling, st.failures)
		}
		// A busy account in flight while cooling is the same incident.
		if s, _ := e.g.RecordFailure(c, vConcurrency); s.RetryAfter != st.cooling {
			t.Fatalf("step %d: overlapping concurrency 429 changed the cooldown: %+v", i, s)
		}
		e.clock.Advance(st.cooling)
	}
	for range 5 {
		if s, err := e.g.RecordFailure(p, vConcurrency); err != nil || s.Cooling || s.Failures != 0 {
			t.Fatalf("concurrency 429 counted in the provider window: %+v, %v", s, err)
		}
	}
}

func TestModelOnlyFailuresSkipTheConnectionEntry(t *testing.T) {
	// guide "Foutopsporing": only one model fails → not the connection's cooldown.
	e := newEnv(t)
	c := connectionEntry(t, "prov", "conn", enabled(t, policies.ProfileAPIKey, nil))
	for range 3 {
		if s, err := e.g.RecordFailure(c, vModelOnly); err != nil || s.Cooling || s.Failures != 0 {
			t.Fatalf("model-only failure recorded on the connection: %+v, %v", s, err)
		}
	}
	if e.store.Sets != 0 {
		t.Fatalf("%d writes for model-only failures", e.store.Sets)
	}
}

func TestConnectionBackoffStartsOverAfterQuiet(t *testing.T) {
	tests := []struct {
		quiet time.Duration // time after the cooldown ended before the next failure
		want  time.Duration // that failure's cooldown
	}{
		{2*time.Minute - time.Millisecond, 4 * time.Second}, // still the same streak: third failure
		{2 * time.Minute, time.Second},                      // quiet for maxRetryCooldown: starts over
	}
	for _, tc := range tests {
		e := newEnv(t)
		c := connectionEntry(t, "prov", "conn", enabled(t, policies.ProfileOAuth, nil))
		fail(t, e.g, c, 1)
		e.clock.Advance(time.Second)
		fail(t, e.g, c, 1)
		e.clock.Advance(2*time.Second + tc.quiet)
		if s := fail(t, e.g, c, 1); s.RetryAfter != tc.want {
			t.Errorf("quiet %v: %+v, want %v", tc.quiet, s, tc.want)
		}
	}
}

func TestConnectionEntriesAreSeparate(t *testing.T) {
	e := newEnv(t)
	cfg := enabled(t, policies.ProfileOAuth, nil)
	a := connectionEntry(t, "prov", "a", cfg)
	b := connectionEntry(t, "prov", "b", cfg)
	other := connectionEntry(t, "other", "a", cfg)
	fail(t, e.g, a, 3)
	if s := check(t, e.g, b); s.Cooling {
		t.Fatal("a sibling connection cools")
	}
	if s := check(t, e.g, other); s.Cooling {
		t.Fatal("the same connection id of another provider cools")
	}
	if s := check(t, e.g, a); !s.Cooling {
		t.Fatal("the failing connection does not cool")
	}
}

func TestResetClearsAnEntry(t *testing.T) {
	e := newEnv(t)
	cfg := enabled(t, policies.ProfileLocal, nil)
	for _, entry := range []Entry{providerEntry(t, "prov", cfg), connectionEntry(t, "prov", "c", cfg)} {
		fail(t, e.g, entry, 2)
		if err := e.g.Reset(entry); err != nil {
			t.Fatal(err)
		}
		if s := check(t, e.g, entry); s != (Status{}) {
			t.Fatalf("after reset: %+v", s)
		}
	}
	if e.store.Keys() != 1 {
		t.Fatal("reset left live records")
	}
}

func TestCorruptRecordsReadAsAbsentAndAreReplaced(t *testing.T) {
	rawWindow := func(coolingUntil int64, n uint64, ts ...int64) []byte {
		enc := state.NewEncoder(nil, windowKind, windowVersion).Int(coolingUntil).Uint(n)
		for i, at := range ts {
			if i == 0 {
				enc.Int(at)
			} else {
				enc.Uint(uint64(at))
			}
		}
		return enc.Bytes()
	}
	now := t0.UnixMilli()
	tests := []struct {
		name       string
		connection bool   // connection entry (else provider entry)
		raw        []byte // stored bytes
	}{
		{"provider: garbage", false, []byte("nope")},
		{"provider: backoff record", false, backoff{coolingUntil: now + 1000, failures: 1}.encode()},
		{"provider: too many timestamps", false, rawWindow(now+1000, maxThreshold+1)},
		{"provider: timestamps missing", false, rawWindow(now+1000, 3, now)},
		{"provider: trailing bytes", false, append(window{coolingUntil: now + 1000}.encode(), 1)},
		{"connection: garbage", true, []byte{0xff}},
		{"connection: window record", true, window{coolingUntil: now + 1000}.encode()},
		{"connection: absurd count", true, state.NewEncoder(nil, backoffKind, backoffVersion).Int(now + 1000).Uint(1000).Bytes()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			cfg := enabled(t, policies.ProfileLocal, nil)
			entry := providerEntry(t, "prov", cfg)
			if tc.connection {
				entry = connectionEntry(t, "prov", "c", cfg)
			}
			if err := e.store.Set(entry.key, tc.raw, 0); err != nil {
				t.Fatal(err)
			}
			if s := check(t, e.g, entry); s.Cooling {
				t.Fatalf("a corrupt record cools: %+v", s)
			}
			if s := fail(t, e.g, entry, 1); s.Failures != 1 {
				t.Fatalf("failure over a corrupt record: %+v, want a fresh count of 1", s)
			}
			if e.g.CorruptRecords() != 2 {
				t.Fatalf("corrupt reads counted %d, want 2", e.g.CorruptRecords())
			}
			if s := check(t, e.g, entry); s.Failures != 1 {
				t.Fatalf("record not replaced: %+v", s)
			}
		})
	}
	// A corrupt record is also dropped by a success.
	e := newEnv(t)
	p := providerEntry(t, "prov", enabled(t, policies.ProfileLocal, nil))
	_ = e.store.Set(p.key, []byte("nope"), 0)
	succeed(t, e.g, p)
	if e.store.Keys() != 1 || e.g.CorruptRecords() != 1 {
		t.Fatalf("success kept a corrupt record (%d keys, %d counted)", e.store.Keys(), e.g.CorruptRecords())
	}
}

func TestDeadlinesBeyondTheConfigMeanTheClockMovedBack(t *testing.T) {
	e := newEnv(t)
	cfg := enabled(t, policies.ProfileLocal, nil)
	p := providerEntry(t, "prov", cfg)
	c := connectionEntry(t, "prov", "c", cfg)
	fail(t, e.g, p, 2) // cooling 1 min
	fail(t, e.g, c, 1) // cooling 1 s
	e.clock.Set(t0.Add(-time.Hour))
	if s := check(t, e.g, p); s.Cooling {
		t.Fatalf("provider cooldown an hour away (max 1 min): %+v, want over", s)
	}
	if s := check(t, e.g, c); s.Cooling {
		t.Fatalf("connection cooldown an hour away (max 2 min): %+v, want over", s)
	}
	if s := fail(t, e.g, c, 1); s.RetryAfter != time.Second {
		t.Fatalf("connection failure after the clock moved back: %+v, want a fresh 1 s", s)
	}
}

func TestStoreErrorsAreWrapped(t *testing.T) {
	g := New(failingStore{}, manualclock.New(t0))
	p := providerEntry(t, "prov", enabled(t, policies.ProfileLocal, nil))
	if s, err := g.Check(p); err == nil || s.Cooling || !errors.Is(err, errStore) || !strings.HasPrefix(err.Error(), "providercooldown: ") {
		t.Fatalf("Check: %+v, %v", s, err)
	}
	if _, err := g.RecordFailure(p, vServer); !errors.Is(err, errStore) || !strings.HasPrefix(err.Error(), "providercooldown: ") {
		t.Fatalf("RecordFailure: %v", err)
	}
	if err := g.RecordSuccess(p); !errors.Is(err, errStore) {
		t.Fatalf("RecordSuccess: %v", err)
	}
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errStore }
func (failingStore) Set(string, []byte, uint32) error         { return errStore }
func (failingStore) CreateCAS() (uint32, error)               { return 0, errStore }

var errStore = errors.New("store down")
