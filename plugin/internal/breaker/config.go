package breaker

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
)

// Kind is the kind of a provider-level failure. Each kind may have its own OPEN period
// (the guide's cooldownByKind, §1).
type Kind uint8

// Failure kinds. KindNone means the failure does not count against the breaker.
const (
	KindNone        Kind = iota // not a provider-level failure
	KindServerError             // 500, 502, 503 (and any other configured trip status)
	KindTimeout                 // 408, 504, or an upstream timeout without a response
	KindTransport               // no response: connection reset, refused, no healthy upstream

	kindCount // number of kinds, KindNone included
)

// String returns the kind's stable name, which is the matching failure.Reason value.
func (k Kind) String() string {
	switch k {
	case KindServerError:
		return string(failure.ReasonServerError)
	case KindTimeout:
		return string(failure.ReasonTimeout)
	case KindTransport:
		return string(failure.ReasonTransport)
	case KindNone:
		return "none"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText renders the kind by name (admin output).
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ParseKind reads a failure kind by its name (server_error, timeout, transport_error), as
// written in a policy's cooldownByKind.
func ParseKind(name string) (Kind, error) {
	for k := KindServerError; k < kindCount; k++ {
		if k.String() == name {
			return k, nil
		}
	}
	return KindNone, fmt.Errorf("breaker: unknown failure kind %q (want server_error, timeout or transport_error)", name)
}

// Config holds one provider's resolved breaker settings. Build it with ConfigFrom (or
// DefaultConfig in tests); NewProvider validates it.
type Config struct {
	// DegradationThreshold is the failure count (without a success in between while
	// CLOSED) that moves the provider to DEGRADED. Equal to FailureThreshold means the
	// provider never shows DEGRADED.
	DegradationThreshold int
	// FailureThreshold is the failure count that opens the circuit.
	FailureThreshold int
	// ResetTimeout is the first OPEN period of every kind without its own cooldown.
	ResetTimeout time.Duration
	// CooldownByKind is the first OPEN period per failure kind; zero means ResetTimeout.
	// Index with a Kind; the KindNone slot is ignored.
	CooldownByKind [kindCount]time.Duration
	// MaxBackoffMultiplier caps the escalation of the OPEN period over repeated OPEN
	// cycles: period = cooldown × 2^(cycle-1), at most cooldown × MaxBackoffMultiplier.
	MaxBackoffMultiplier int
	// RecoverySuccesses is how many successes in a row return DEGRADED to CLOSED.
	RecoverySuccesses int
	// ProbeTimeout bounds a HALF_OPEN probe claim: if its outcome is never reported
	// (the worker died, the client went away), another caller may probe after it.
	ProbeTimeout time.Duration
	// TripStatuses are the upstream statuses that count as provider-level failures.
	// Failures without any upstream status (transport errors, timeouts) always count.
	TripStatuses []int
}

// Limits enforced by Validate: generous bounds that keep arithmetic far from overflow.
const (
	maxThreshold  = 1_000_000
	maxMultiplier = 1 << 16
	maxPeriod     = 24 * time.Hour
	minPeriod     = time.Millisecond
)

// ConfigFrom converts a provider's resolved breaker settings (policies.Resolved) into a
// Config: the one conversion from policy settings to the breaker. It copies the trip
// statuses and fails on a cooldownByKind name the breaker does not know; Validate is left
// to NewProvider.
func ConfigFrom(s policies.BreakerSettings) (Config, error) {
	cfg := Config{
		DegradationThreshold: s.DegradationThreshold,
		FailureThreshold:     s.FailureThreshold,
		ResetTimeout:         s.ResetTimeout,
		MaxBackoffMultiplier: s.MaxBackoffMultiplier,
		RecoverySuccesses:    s.RecoverySuccesses,
		ProbeTimeout:         s.ProbeTimeout,
		TripStatuses:         append([]int(nil), s.TripStatuses...),
	}
	for name, d := range s.CooldownByKind {
		k, err := ParseKind(name)
		if err != nil {
			return Config{}, err
		}
		cfg.CooldownByKind[k] = d
	}
	return cfg, nil
}

// DefaultConfig returns the guide's breaker settings (§1) for a provider profile: its row of the
// policies defaults table (policies.ProfileDefaults).
func DefaultConfig(p policies.Profile) (Config, error) {
	d, ok := policies.ProfileDefaults(p)
	if !ok {
		return Config{}, fmt.Errorf("breaker: unknown profile %q", p)
	}
	return ConfigFrom(d.Breaker)
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.FailureThreshold < 1 || c.FailureThreshold > maxThreshold:
		return fmt.Errorf("breaker: failureThreshold %d out of range 1..%d", c.FailureThreshold, maxThreshold)
	case c.DegradationThreshold < 1 || c.DegradationThreshold > c.FailureThreshold:
		return fmt.Errorf("breaker: degradationThreshold %d out of range 1..failureThreshold (%d)",
			c.DegradationThreshold, c.FailureThreshold)
	case c.ResetTimeout < minPeriod || c.ResetTimeout > maxPeriod:
		return fmt.Errorf("breaker: resetTimeout %v out of range %v..%v", c.ResetTimeout, minPeriod, maxPeriod)
	case c.MaxBackoffMultiplier < 1 || c.MaxBackoffMultiplier > maxMultiplier:
		return fmt.Errorf("breaker: maxBackoffMultiplier %d out of range 1..%d", c.MaxBackoffMultiplier, maxMultiplier)
	case c.RecoverySuccesses < 1 || c.RecoverySuccesses > maxThreshold:
		return fmt.Errorf("breaker: recoverySuccesses %d out of range 1..%d", c.RecoverySuccesses, maxThreshold)
	case c.ProbeTimeout < minPeriod || c.ProbeTimeout > maxPeriod:
		return fmt.Errorf("breaker: probeTimeout %v out of range %v..%v", c.ProbeTimeout, minPeriod, maxPeriod)
	}
	for k := KindServerError; k < kindCount; k++ {
		if d := c.CooldownByKind[k]; d != 0 && (d < minPeriod || d > maxPeriod) {
			return fmt.Errorf("breaker: cooldownByKind.%s %v out of range %v..%v", k, d, minPeriod, maxPeriod)
		}
	}
	for _, s := range c.TripStatuses {
		switch {
		case s < 400 || s > 599:
			return fmt.Errorf("breaker: trip status %d is not an HTTP error status", s)
		case s == 401 || s == 403 || s == 429:
			return fmt.Errorf("breaker: trip status %d is account-level and must not trip the provider breaker", s)
		}
	}
	return nil
}

// KindOf says whether a failed attempt counts against the provider's breaker, and as
// which kind. It counts the configured trip statuses and failures that got no upstream
// status at all (transport errors and timeouts); it never counts a verdict that blames an
// account (rate limits, quota, auth, terminal states), whatever its status.
func (c Config) KindOf(v failure.Verdict) Kind {
	if v.Terminal != failure.TerminalNone {
		return KindNone
	}
	switch v.Reason {
	case failure.ReasonRateLimit, failure.ReasonQuotaExhausted, failure.ReasonConcurrencyLimited,
		failure.ReasonAuthError, failure.ReasonCreditsExhausted, failure.ReasonBanned,
		failure.ReasonExpired, failure.ReasonRequestRejected, failure.ReasonBadRequest:
		return KindNone
	}
	if v.Status == 0 {
		switch {
		case v.Reason == failure.ReasonTimeout:
			return KindTimeout
		case v.Reason == failure.ReasonTransport || v.CountBreaker:
			return KindTransport
		}
		return KindNone
	}
	if !c.trips(v.Status) {
		return KindNone
	}
	if v.Reason == failure.ReasonTimeout || v.Status == 408 || v.Status == 504 {
		return KindTimeout
	}
	return KindServerError
}

func (c Config) trips(status int) bool {
	for _, s := range c.TripStatuses {
		if s == status {
			return true
		}
	}
	return false
}

// cooldown is the first OPEN period of a failure kind.
func (c Config) cooldown(k Kind) time.Duration {
	if k < kindCount && c.CooldownByKind[k] > 0 {
		return c.CooldownByKind[k]
	}
	return c.ResetTimeout
}

// multiplier is the escalation factor of the given OPEN cycle (1 for the first).
func (c Config) multiplier(cycle uint64) int64 {
	limit := int64(max(c.MaxBackoffMultiplier, 1))
	m := int64(1)
	for i := uint64(1); i < cycle && m < limit; i++ {
		m *= 2
	}
	return min(m, limit)
}

// OpenPeriod is how long the circuit stays OPEN when a failure of kind k opens it for the
// given cycle (1 = first opening since the provider was last quiet).
func (c Config) OpenPeriod(k Kind, cycle int) time.Duration {
	return c.cooldown(k) * time.Duration(c.multiplier(uint64(max(cycle, 1))))
}

// QuietPeriod is how long a provider must go without a failure before a DEGRADED state,
// a partial failure count and the OPEN escalation are forgotten: the longest OPEN period
// of the last failure kind (its cooldown × MaxBackoffMultiplier), at least one cooldown.
func (c Config) QuietPeriod(last Kind) time.Duration {
	return c.cooldown(last) * time.Duration(max(c.MaxBackoffMultiplier, 1))
}

// longestOpen is the longest OPEN period any kind can reach.
func (c Config) longestOpen() time.Duration {
	var longest time.Duration
	for k := KindServerError; k < kindCount; k++ {
		longest = max(longest, c.QuietPeriod(k))
	}
	return longest
}
