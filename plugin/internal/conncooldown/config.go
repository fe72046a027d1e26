// Package conncooldown keeps one connection's (account's or key's) cooldown and terminal state in
// shared data: escalating backoff, upstream retry hints, thundering-herd protection, lazy
// recovery, and the terminal states banned, expired and credits_exhausted; and its
// provider's recovery probe claim (probe.go), Spillway's deviation from the guide.
package conncooldown

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// Bounds on configured values, so arithmetic stays far from overflow.
const (
	maxBackoffStepsLimit = 30
	maxCooldownLimit     = 24 * time.Hour
	maxStreakLimit       = 100
)

// Config holds the resolved connection-cooldown settings of one provider profile.
type Config struct {
	// BaseCooldown is the first cooldown of a failing connection (baseCooldownMs).
	BaseCooldown time.Duration
	// MaxBackoffSteps caps failureIndex in BaseCooldown × 2^failureIndex, and so backoffLevel.
	MaxBackoffSteps int
	// MaxCooldown clamps every cooldown, upstream retry hints included.
	MaxCooldown time.Duration
	// PreferRetryHint makes a 429 cool for the upstream's own retry hint (Retry-After, reset
	// headers, parseable reset text) instead of the computed backoff.
	PreferRetryHint bool
	// ConcurrencyLimitCooldown is the fixed cooldown of a concurrency-limit 429 that carries
	// no upstream hint (CONCURRENCY_LIMIT_COOLDOWN_MS).
	ConcurrencyLimitCooldown time.Duration
	// ExpiredRetryMax is the expired-credential verdict that makes the state terminal
	// (EXPIRED_RETRY_MAX): the earlier ones only cool with backoff.
	ExpiredRetryMax int
	// RequestRejectedStreak is how many consecutive request_rejected verdicts ban the
	// connection; fewer only cool it.
	RequestRejectedStreak int
	// StreamStallCooldown makes a content stall cool the connection like any other failure
	// (streamStallCooldown.enabled); when false it only records the error.
	StreamStallCooldown bool
	// ProbeTimeout frees a recovery probe claim whose outcome never came (see ClaimProbe).
	// It is the provider breaker's probeTimeoutMs: one setting bounds both of a provider's
	// probe claims, the breaker's HALF_OPEN probe and this one.
	ProbeTimeout time.Duration
}

// ConfigFrom converts a provider's resolved connection-cooldown settings
// (policies.ResolvedProvider.ConnectionCooldown) and its breaker's probe timeout
// (ResolvedProvider.Breaker.ProbeTimeout) into a Config: the one conversion from policy
// settings to the tracker.
func ConfigFrom(s policies.ConnectionCooldownSettings, probeTimeout time.Duration) Config {
	return Config{
		ProbeTimeout:             probeTimeout,
		BaseCooldown:             s.BaseCooldown,
		MaxBackoffSteps:          s.MaxBackoffSteps,
		MaxCooldown:              s.MaxCooldown,
		PreferRetryHint:          s.UseUpstreamRetryHints,
		ConcurrencyLimitCooldown: s.ConcurrencyLimitCooldown,
		ExpiredRetryMax:          s.ExpiredRetryMax,
		RequestRejectedStreak:    s.RequestRejectedStreak,
		StreamStallCooldown:      s.StreamStallCooldown,
	}
}

// DefaultConfig returns the guide's defaults (§2) for profile p: its row of the policies
// defaults table. An unknown profile gets the API-key defaults; policy validation rejects
// unknown profiles before they reach the engine.
func DefaultConfig(p policies.Profile) Config {
	d, ok := policies.ProfileDefaults(p)
	if !ok {
		d, _ = policies.ProfileDefaults(policies.ProfileAPIKey)
	}
	return ConfigFrom(d.ConnectionCooldown, d.Breaker.ProbeTimeout)
}

// Validate reports the first setting that is out of range.
func (c Config) Validate() error {
	switch {
	case c.MaxCooldown <= 0 || c.MaxCooldown > maxCooldownLimit:
		return fmt.Errorf("conncooldown: maxCooldown %v outside (0, %v]", c.MaxCooldown, maxCooldownLimit)
	case c.BaseCooldown < time.Millisecond || c.BaseCooldown > c.MaxCooldown:
		return fmt.Errorf("conncooldown: baseCooldown %v outside [1ms, maxCooldown %v]", c.BaseCooldown, c.MaxCooldown)
	case c.MaxBackoffSteps < 0 || c.MaxBackoffSteps > maxBackoffStepsLimit:
		return fmt.Errorf("conncooldown: maxBackoffSteps %d outside [0, %d]", c.MaxBackoffSteps, maxBackoffStepsLimit)
	case c.ConcurrencyLimitCooldown < time.Millisecond || c.ConcurrencyLimitCooldown > c.MaxCooldown:
		return fmt.Errorf("conncooldown: concurrencyLimitCooldown %v outside [1ms, maxCooldown %v]", c.ConcurrencyLimitCooldown, c.MaxCooldown)
	case c.ExpiredRetryMax < 1 || c.ExpiredRetryMax > maxStreakLimit:
		return fmt.Errorf("conncooldown: expiredRetryMax %d outside [1, %d]", c.ExpiredRetryMax, maxStreakLimit)
	case c.RequestRejectedStreak < 1 || c.RequestRejectedStreak > maxStreakLimit:
		return fmt.Errorf("conncooldown: requestRejectedStreak %d outside [1, %d]", c.RequestRejectedStreak, maxStreakLimit)
	case c.ProbeTimeout < time.Millisecond || c.ProbeTimeout > maxCooldownLimit:
		return fmt.Errorf("conncooldown: probeTimeout %v outside [1ms, %v]", c.ProbeTimeout, maxCooldownLimit)
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{{"baseCooldown", c.BaseCooldown}, {"maxCooldown", c.MaxCooldown}, {"concurrencyLimitCooldown", c.ConcurrencyLimitCooldown},
		{"probeTimeout", c.ProbeTimeout}} {
		if d.v%time.Millisecond != 0 {
			return fmt.Errorf("conncooldown: %s %v is not a whole number of milliseconds", d.name, d.v)
		}
	}
	return nil
}
