package policies

import (
	"strings"
	"testing"
	"time"
)

func TestClamps(t *testing.T) {
	tests := []struct {
		name     string                          // what is clamped
		set      string                          // dotted path to change in richBase
		value    any                             // out-of-range value
		warnPath string                          // expected warning path
		effect   func(r *Resolved) time.Duration // reads the effective value (as a duration or count)
		want     time.Duration                   // expected effective value
	}{
		{"queue wait below 1 ms", "resilience.requestQueue.maxWaitMs", 0, "resilience.requestQueue.maxWaitMs",
			func(r *Resolved) time.Duration { return r.RequestQueue.MaxWait }, time.Millisecond},
		{"queue wait negative", "resilience.requestQueue.maxWaitMs", -5, "resilience.requestQueue.maxWaitMs",
			func(r *Resolved) time.Duration { return r.RequestQueue.MaxWait }, time.Millisecond},
		{"queue wait above 24 h", "resilience.requestQueue.maxWaitMs", 100000000, "resilience.requestQueue.maxWaitMs",
			func(r *Resolved) time.Duration { return r.RequestQueue.MaxWait }, 24 * time.Hour},
		{"execution wait above 24 h", "resilience.requestQueue.executionMaxWaitMs", 90000000, "resilience.requestQueue.executionMaxWaitMs",
			func(r *Resolved) time.Duration { return r.RequestQueue.ExecutionMaxWait }, 24 * time.Hour},
		{"queue depth above cap", "resilience.requestQueue.maxQueueDepth", 200000, "resilience.requestQueue.maxQueueDepth",
			func(r *Resolved) time.Duration { return time.Duration(r.RequestQueue.MaxQueueDepth) }, 100000},
		{"queue depth negative", "resilience.requestQueue.maxQueueDepth", -1, "resilience.requestQueue.maxQueueDepth",
			func(r *Resolved) time.Duration { return time.Duration(r.RequestQueue.MaxQueueDepth) }, 0},
		{"override wait below 1 ms", "providers.0.connections.0.rateLimitOverrides.maxWaitMs", 0, "providers[0].connections[0].rateLimitOverrides.maxWaitMs",
			func(r *Resolved) time.Duration { return r.Providers[0].Connections[0].QueueMaxWait }, time.Millisecond},
		{"override execution above 24 h", "providers.0.connections.0.rateLimitOverrides.executionMaxWaitMs", 1 << 40, "providers[0].connections[0].rateLimitOverrides.executionMaxWaitMs",
			func(r *Resolved) time.Duration { return r.Providers[0].Connections[0].ExecutionMaxWait }, 24 * time.Hour},
		{"lockout base below 1 s", "resilience.modelLockout.baseCooldownMs", 10, "resilience.modelLockout.baseCooldownMs",
			func(r *Resolved) time.Duration { return r.ModelLockout.BaseCooldown }, time.Second},
		{"lockout max below base", "resilience.modelLockout", map[string]any{"baseCooldownMs": 60000, "maxCooldownMs": 1000}, "resilience.modelLockout.maxCooldownMs",
			func(r *Resolved) time.Duration { return r.ModelLockout.MaxCooldown }, time.Minute},
		{"lockout max above 24 h", "resilience.modelLockout.maxCooldownMs", 100000000, "resilience.modelLockout.maxCooldownMs",
			func(r *Resolved) time.Duration { return r.ModelLockout.MaxCooldown }, 24 * time.Hour},
		{"lockout base above default max raises max", "resilience.modelLockout.baseCooldownMs", 3600000, "resilience.modelLockout.maxCooldownMs",
			func(r *Resolved) time.Duration { return r.ModelLockout.MaxCooldown }, time.Hour},
		{"lockout steps above 30", "resilience.modelLockout.maxBackoffSteps", 99, "resilience.modelLockout.maxBackoffSteps",
			func(r *Resolved) time.Duration { return time.Duration(r.ModelLockout.MaxBackoffSteps) }, 30},
		{"lockout steps negative", "resilience.modelLockout.maxBackoffSteps", -2, "resilience.modelLockout.maxBackoffSteps",
			func(r *Resolved) time.Duration { return time.Duration(r.ModelLockout.MaxBackoffSteps) }, 0},
		{"p2c weight above 20", "resilience.p2cLatency.weight", 50, "resilience.p2cLatency.weight",
			func(r *Resolved) time.Duration { return time.Duration(r.P2CLatency.Weight) }, 20},
		{"p2c weight negative", "resilience.p2cLatency.weight", -1, "resilience.p2cLatency.weight",
			func(r *Resolved) time.Duration { return time.Duration(r.P2CLatency.Weight) }, 0},
		{"watchdog window below 1 s", "resilience.streamRecovery.throughputWatchdog.windowMs", 5, "resilience.streamRecovery.throughputWatchdog.windowMs",
			func(r *Resolved) time.Duration { return r.ThroughputWatchdog.Window }, time.Second},
		{"watchdog warmup above 10 min", "resilience.streamRecovery.throughputWatchdog.warmupMs", 3600000, "resilience.streamRecovery.throughputWatchdog.warmupMs",
			func(r *Resolved) time.Duration { return r.ThroughputWatchdog.Warmup }, 10 * time.Minute},
		{"watchdog rate below 1", "resilience.streamRecovery.throughputWatchdog.minBytesPerSecond", 0, "resilience.streamRecovery.throughputWatchdog.minBytesPerSecond",
			func(r *Resolved) time.Duration { return time.Duration(r.ThroughputWatchdog.MinBytesPerSecond) }, 1},
		{"watchdog output above 1 MiB", "resilience.streamRecovery.throughputWatchdog.minOutputBytes", 1 << 30, "resilience.streamRecovery.throughputWatchdog.minOutputBytes",
			func(r *Resolved) time.Duration { return time.Duration(r.ThroughputWatchdog.MinOutputBytes) }, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, mutate(t, tt.set, tt.value), ParseOptions{})
			found := false
			for _, w := range p.Warnings {
				if w.Path == tt.warnPath && (strings.Contains(w.Message, "clamped") || strings.Contains(w.Message, "raised")) {
					found = true
				}
			}
			if !found || len(p.Warnings) != 1 {
				t.Errorf("want one warning at %s, got %v", tt.warnPath, p.Warnings)
			}
			if got := tt.effect(p.Resolved()); got != tt.want {
				t.Errorf("effective value = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInRangeValuesAreNotClamped(t *testing.T) {
	doc := withResilience(`{"requestQueue":{"maxWaitMs":1,"executionMaxWaitMs":86400000,"maxQueueDepth":100000},` +
		`"modelLockout":{"baseCooldownMs":1000,"maxCooldownMs":1000,"maxBackoffSteps":30},"p2cLatency":{"weight":20}}`)
	p := mustParse(t, doc, ParseOptions{})
	if len(p.Warnings) != 0 {
		t.Errorf("boundary values were clamped: %v", p.Warnings)
	}
}

func TestClampWarningWording(t *testing.T) {
	p := mustParse(t, withResilience(`{"requestQueue":{"maxWaitMs":0}}`), ParseOptions{})
	want := "clamped 0 ms to 1 ms (allowed 1 ms–24 h)"
	if len(p.Warnings) != 1 || p.Warnings[0].Message != want {
		t.Errorf("warnings = %v, want %q", p.Warnings, want)
	}
}

func TestFormatMs(t *testing.T) {
	tests := []struct {
		ms   int64  // milliseconds
		want string // rendering
	}{
		{0, "0 ms"},
		{1, "1 ms"},
		{1500, "1500 ms"},
		{30000, "30 s"},
		{600000, "10 min"},
		{86400000, "24 h"},
		{604800000, "7 days"},
		{-1, "-1 ms"},
	}
	for _, tt := range tests {
		if got := formatMs(tt.ms); got != tt.want {
			t.Errorf("formatMs(%d) = %q, want %q", tt.ms, got, tt.want)
		}
	}
}
