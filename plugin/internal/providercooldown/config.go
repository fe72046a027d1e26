package providercooldown

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// Config holds the resolved settings of the gate for one provider's profile.
type Config struct {
	// Enabled turns the gate on (PROVIDER_COOLDOWN_ENABLED; off by default). When off,
	// every check passes and nothing is recorded.
	Enabled bool
	// FailureThreshold is how many failures within FailureWindow cool the provider
	// (providerFailureThreshold).
	FailureThreshold int
	// FailureWindow is the sliding window failures are counted in (providerFailureWindowMs).
	FailureWindow time.Duration
	// Cooldown is how long a provider that reached the threshold cools (providerCooldownMs).
	Cooldown time.Duration
	// MinRetryCooldown is a connection entry's first cooldown (minRetryCooldownMs); each
	// further failure in a row doubles it.
	MinRetryCooldown time.Duration
	// MaxRetryCooldown caps a connection entry's cooldown (maxRetryCooldownMs).
	MaxRetryCooldown time.Duration
}

// Limits enforced by Validate. The threshold bound also bounds a stored window record
// (one timestamp per counted failure).
const (
	maxThreshold = 1000
	minPeriod    = time.Millisecond
	maxPeriod    = 24 * time.Hour
)

// ConfigFrom converts a provider's resolved gate settings and the policy-wide switch
// (policies.Resolved.ProviderCooldownEnabled) into a Config: the one conversion from policy
// settings to the gate.
func ConfigFrom(enabled bool, s policies.ProviderCooldownSettings) Config {
	return Config{
		Enabled:          enabled,
		FailureThreshold: s.FailureThreshold,
		FailureWindow:    s.FailureWindow,
		Cooldown:         s.Cooldown,
		MinRetryCooldown: s.MinRetryCooldown,
		MaxRetryCooldown: s.MaxRetryCooldown,
	}
}

// DefaultConfig returns the guide's gate settings for a provider profile (guide §1, "Opt-in
// globale Provider Cooldown"; disabled, as the guide's default): its row of the policies
// defaults table.
func DefaultConfig(p policies.Profile) (Config, error) {
	d, ok := policies.ProfileDefaults(p)
	if !ok {
		return Config{}, fmt.Errorf("providercooldown: unknown profile %q", p)
	}
	return ConfigFrom(policies.Defaults().ProviderCooldownEnabled, d.ProviderCooldown), nil
}

// Validate reports the first setting out of range (checked whether or not the gate is
// enabled, so turning it on later cannot surface a bad value).
func (c Config) Validate() error {
	switch {
	case c.FailureThreshold < 1 || c.FailureThreshold > maxThreshold:
		return fmt.Errorf("providercooldown: providerFailureThreshold %d out of range 1..%d", c.FailureThreshold, maxThreshold)
	case c.FailureWindow < minPeriod || c.FailureWindow > maxPeriod:
		return fmt.Errorf("providercooldown: providerFailureWindow %v out of range %v..%v", c.FailureWindow, minPeriod, maxPeriod)
	case c.Cooldown < minPeriod || c.Cooldown > maxPeriod:
		return fmt.Errorf("providercooldown: providerCooldown %v out of range %v..%v", c.Cooldown, minPeriod, maxPeriod)
	case c.MinRetryCooldown < minPeriod || c.MinRetryCooldown > maxPeriod:
		return fmt.Errorf("providercooldown: minRetryCooldown %v out of range %v..%v", c.MinRetryCooldown, minPeriod, maxPeriod)
	case c.MaxRetryCooldown < c.MinRetryCooldown || c.MaxRetryCooldown > maxPeriod:
		return fmt.Errorf("providercooldown: maxRetryCooldown %v out of range minRetryCooldown (%v)..%v",
			c.MaxRetryCooldown, c.MinRetryCooldown, maxPeriod)
	}
	return nil
}

// RetryCooldown is a connection entry's cooldown after the given number of failures in a
// row (1 = first): MinRetryCooldown × 2^(failures-1), at most MaxRetryCooldown.
func (c Config) RetryCooldown(failures int) time.Duration {
	d := c.MinRetryCooldown
	for i := 1; i < failures && d < c.MaxRetryCooldown; i++ {
		d *= 2
	}
	return min(d, c.MaxRetryCooldown)
}
