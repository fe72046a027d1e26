package breaker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
)

func TestDefaultConfigFollowsTheGuide(t *testing.T) {
	tests := []struct {
		profile     policies.Profile
		degradation int           // failures to DEGRADED (guide: 5 / 7 / derived)
		open        int           // failures to OPEN (guide: 8 / 12 / 2)
		reset       time.Duration // first OPEN period (guide: 60 s / 30 s / 15 s)
	}{
		{policies.ProfileOAuth, 5, 8, 60 * time.Second},
		{policies.ProfileAPIKey, 7, 12, 30 * time.Second},
		{policies.ProfileLocal, 1, 2, 15 * time.Second},
	}
	for _, tc := range tests {
		t.Run(string(tc.profile), func(t *testing.T) {
			cfg, err := DefaultConfig(tc.profile)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DegradationThreshold != tc.degradation || cfg.FailureThreshold != tc.open || cfg.ResetTimeout != tc.reset {
				t.Errorf("got degrade %d open %d reset %v, want %d %d %v",
					cfg.DegradationThreshold, cfg.FailureThreshold, cfg.ResetTimeout, tc.degradation, tc.open, tc.reset)
			}
			if !slices.Equal(cfg.TripStatuses, []int{408, 500, 502, 503, 504}) {
				t.Errorf("trip statuses %v", cfg.TripStatuses)
			}
			if cfg.MaxBackoffMultiplier != policies.BreakerMaxBackoffMultiplier ||
				cfg.RecoverySuccesses != policies.BreakerRecoverySuccesses ||
				cfg.ProbeTimeout != policies.BreakerProbeTimeout {
				t.Errorf("shared settings not from policies: %+v", cfg)
			}
			for k := KindServerError; k < kindCount; k++ {
				if got := cfg.OpenPeriod(k, 1); got != tc.reset {
					t.Errorf("default cooldown of %s = %v, want the reset timeout %v", k, got, tc.reset)
				}
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("defaults do not validate: %v", err)
			}
			cfg.TripStatuses[0] = 999 // the defaults must be a copy
			if policies.BreakerTripStatuses[0] != 408 {
				t.Fatal("DefaultConfig shares the policies slice")
			}
		})
	}
	if _, err := DefaultConfig("gold"); err == nil || !strings.HasPrefix(err.Error(), "breaker: ") {
		t.Errorf("unknown profile: err %v", err)
	}
}

func TestValidateRejectsOutOfRange(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config) // breaks one setting of valid apikey defaults
		want string        // substring of the error
	}{
		{"zero failure threshold", func(c *Config) { c.FailureThreshold = 0 }, "failureThreshold"},
		{"degradation above failure", func(c *Config) { c.DegradationThreshold = c.FailureThreshold + 1 }, "degradationThreshold"},
		{"zero degradation", func(c *Config) { c.DegradationThreshold = 0 }, "degradationThreshold"},
		{"zero reset timeout", func(c *Config) { c.ResetTimeout = 0 }, "resetTimeout"},
		{"reset timeout over a day", func(c *Config) { c.ResetTimeout = 25 * time.Hour }, "resetTimeout"},
		{"multiplier below one", func(c *Config) { c.MaxBackoffMultiplier = 0 }, "maxBackoffMultiplier"},
		{"no recovery successes", func(c *Config) { c.RecoverySuccesses = 0 }, "recoverySuccesses"},
		{"no probe timeout", func(c *Config) { c.ProbeTimeout = 0 }, "probeTimeout"},
		{"negative kind cooldown", func(c *Config) { c.CooldownByKind[KindTimeout] = -time.Second }, "cooldownByKind.timeout"},
		{"account-level 429 as trip status", func(c *Config) { c.TripStatuses = append(c.TripStatuses, 429) }, "account-level"},
		{"account-level 401 as trip status", func(c *Config) { c.TripStatuses = []int{401} }, "account-level"},
		{"success status as trip status", func(c *Config) { c.TripStatuses = []int{200} }, "not an HTTP error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := DefaultConfig(policies.ProfileAPIKey)
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "breaker: ") {
				t.Fatalf("Validate() = %v, want an error about %s", err, tc.want)
			}
			if _, err := NewProvider("p", "p", cfg); err == nil {
				t.Fatal("NewProvider accepted an invalid config")
			}
		})
	}
}

func TestKindOfCountsOnlyProviderLevelFailures(t *testing.T) {
	tests := []struct {
		name string
		v    failure.Verdict // the failed attempt
		want Kind            // how the breaker counts it
	}{
		{"408", failure.Verdict{Status: 408, Reason: failure.ReasonTimeout}, KindTimeout},
		{"500", failure.Verdict{Status: 500, Reason: failure.ReasonServerError}, KindServerError},
		{"502", failure.Verdict{Status: 502, Reason: failure.ReasonServerError}, KindServerError},
		{"503", failure.Verdict{Status: 503, Reason: failure.ReasonServerError}, KindServerError},
		{"504", failure.Verdict{Status: 504, Reason: failure.ReasonServerError}, KindTimeout},
		{"503 without a reason", failure.Verdict{Status: 503}, KindServerError},
		{"401 account auth", failure.Verdict{Status: 401, Reason: failure.ReasonAuthError}, KindNone},
		{"403 account auth", failure.Verdict{Status: 403, Reason: failure.ReasonAuthError}, KindNone},
		{"429 rate limit", failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit}, KindNone},
		{"429 even if the classifier said count", failure.Verdict{Status: 429, CountBreaker: true}, KindNone},
		{"404 model", failure.Verdict{Status: 404, Reason: failure.ReasonNotFound}, KindNone},
		{"400 bad request", failure.Verdict{Status: 400, Reason: failure.ReasonBadRequest}, KindNone},
		{"529 not configured", failure.Verdict{Status: 529, Reason: failure.ReasonModelCapacity}, KindNone},
		{"503 restated from a concurrency 429", failure.Verdict{Status: 503, Reason: failure.ReasonConcurrencyLimited}, KindNone},
		{"503 quota", failure.Verdict{Status: 503, Reason: failure.ReasonQuotaExhausted}, KindNone},
		{"502 with terminal state", failure.Verdict{Status: 502, Terminal: failure.TerminalBanned}, KindNone},
		{"no response: transport", failure.Verdict{Reason: failure.ReasonTransport}, KindTransport},
		{"no response: timeout", failure.Verdict{Reason: failure.ReasonTimeout}, KindTimeout},
		{"no response: classifier counts it", failure.Verdict{Reason: failure.ReasonUnknown, CountBreaker: true}, KindTransport},
		{"no response: stream stall", failure.Verdict{Reason: failure.ReasonStreamStall}, KindNone},
		{"empty verdict", failure.Verdict{}, KindNone},
	}
	cfg, _ := DefaultConfig(policies.ProfileAPIKey)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cfg.KindOf(tc.v); got != tc.want {
				t.Fatalf("KindOf(%+v) = %s, want %s", tc.v, got, tc.want)
			}
		})
	}
	cfg.TripStatuses = append(cfg.TripStatuses, 529)
	if got := cfg.KindOf(failure.Verdict{Status: 529, Reason: failure.ReasonModelCapacity}); got != KindServerError {
		t.Errorf("configured 529 counts as %s, want server_error", got)
	}
}

func TestParseKind(t *testing.T) {
	for k := KindServerError; k < kindCount; k++ {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), got, err)
		}
	}
	for _, bad := range []string{"", "none", "transport", "Timeout"} {
		if _, err := ParseKind(bad); err == nil {
			t.Errorf("ParseKind(%q) accepted", bad)
		}
	}
}

func TestOpenPeriodEscalatesToTheCap(t *testing.T) {
	tests := []struct {
		multiplier int             // MaxBackoffMultiplier
		cycles     []time.Duration // OPEN period of cycles 1, 2, 3... with a 30 s reset timeout
	}{
		{8, []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 240 * time.Second, 240 * time.Second}},
		{1, []time.Duration{30 * time.Second, 30 * time.Second}},
		{5, []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 150 * time.Second, 150 * time.Second}},
	}
	for _, tc := range tests {
		cfg, _ := DefaultConfig(policies.ProfileAPIKey)
		cfg.MaxBackoffMultiplier = tc.multiplier
		for i, want := range tc.cycles {
			if got := cfg.OpenPeriod(KindServerError, i+1); got != want {
				t.Errorf("multiplier %d cycle %d: %v, want %v", tc.multiplier, i+1, got, want)
			}
		}
		if got := cfg.OpenPeriod(KindServerError, maxCycles); got != 30*time.Second*time.Duration(tc.multiplier) {
			t.Errorf("multiplier %d: cycle %d not capped: %v", tc.multiplier, maxCycles, got)
		}
	}
}

func TestNewProviderRejectsBadIDs(t *testing.T) {
	cfg, _ := DefaultConfig(policies.ProfileOAuth)
	for _, id := range []string{"", "a:b", "sp ace", "tab\t", "nul\x00", strings.Repeat("x", maxIDLen+1)} {
		if _, err := NewProvider(id, id, cfg); err == nil {
			t.Errorf("NewProvider(%q) accepted", id)
		}
	}
	p, err := NewProvider("azure-east_1.prod", "azure-east_1.prod", cfg)
	if err != nil || p.ID() != "azure-east_1.prod" {
		t.Fatalf("valid id: %v", err)
	}
	var zero Provider
	e := newEnv(t)
	if _, err := e.b.Allow(zero); err == nil {
		t.Error("a zero Provider was accepted")
	}
	if err := e.b.Reset(zero); err == nil {
		t.Error("Reset accepted a zero Provider")
	}
}

func TestNewProviderCopiesTripStatuses(t *testing.T) {
	cfg, _ := DefaultConfig(policies.ProfileOAuth)
	p, err := NewProvider("p", "p", cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TripStatuses[0] = 500
	if p.Config().TripStatuses[0] != 408 {
		t.Fatal("provider shares the caller's trip status slice")
	}
}
