// Package lockout keeps model lockouts (provider + connection + model) in shared data: keyed
// by quota family, bare model or exact model according to the failing status, escalating,
// decayed by successes, listed through a bounded per-connection index.
//
// Names a client chooses. Guide §3 scopes a lockout to "provider + connection +
// model-triple" and keeps OmniRoute's in per-process maps, one entry per model; a glob route
// (`claude-*`) passes on whatever model a client names, so in shared data, which has no
// delete, that would be a key per name a client invents. The guide is silent on bounding
// them; Spillway's rule is this. A model the policy routes to a connection by name keeps
// keys of its own. Every other name's lockouts share the connection's InventedSlots fixed
// keys (the pool), each ranked by the Evidence that its model is real: served (this worker
// saw the provider serve it on the connection: Failure.Served, kept per worker by Served),
// metered (the failure was a rate limit, an exhausted quota or concurrency, an overloaded
// model: the provider meters or runs it), or none (the provider refused it as unknown, or
// failed it as it can fail any name). A failure takes the slot its name already holds, else
// a free one, else the slot whose holder has the least evidence (the one that ends first
// among those), never one whose holder has more evidence than its own; with none to take it
// locks nothing. A holder's evidence only grows while it holds the slot.
//
// What that guarantees, however many names clients invent and in whatever order:
//   - no key grows with client input: the pool, the connection's index and the configured
//     models' own keys are all the keys there are;
//   - a configured model's lockout is never displaced by a client-chosen name;
//   - a pool lockout — the lock and its escalation count, for its escalation window — of a
//     model the provider served is displaced only by another served model's, and a metered
//     one's only by a metered or served one: a name the provider refused as unknown never
//     displaces a lockout a real model is under, and never keeps it from a slot (its
//     lockouts are the first to make room). Only more real models locked at once than the
//     pool holds displace one another, the one that ends first going first.
//
// The evidence is as strong as its source: a served model is one this worker saw succeed
// (another worker's successes reach the pool when that worker records a failure of it, or
// through the metered evidence of the failure itself), and a provider that rate-limits a
// name it does not serve makes that name metered.
//
// Scope of a name without evidence: Spillway's divergence from the guide. Guide §3 widens a
// 404 to the bare model (getModelLockKey) and a 429/403/402 to the quota family
// (resolveLockoutScope). Those are keys real models are locked under, so under a glob route
// one request could lock a real model for every client: a 404 for claude-x/claude-sonnet-4-5
// locked claude-sonnet-4-5, a 403 for a junk name its whole family (issue 18: no client
// input may bypass the policy). Spillway widens only for a name with evidence that it is
// real: configured for the connection (the exact name, NewConn), seen served
// (Failure.Served), or failing in a metered way (EvidenceMetered: a provider's rate limit or
// quota is a fact about the account whatever name provoked it). Any other failure locks
// only its exact name, which only a request for that same name reads. Configured and served
// names keep the guide's rules exactly.
package lockout

import (
	"fmt"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// Bounds on configured values, so arithmetic stays far from overflow.
const (
	maxBackoffStepsLimit = 30
	maxCooldownLimit     = 24 * time.Hour
	maxLongRetryCap      = 7 * 24 * time.Hour
)

// Config holds the resolved model-lockout settings of one provider
// (DEFAULT_MODEL_LOCKOUT_SETTINGS plus the long-retry rule).
type Config struct {
	// Enabled is the master switch (default off). Long typed Google RetryInfo hints lock
	// even when it is off: they replace a queue pause, which is not opt-in.
	Enabled bool
	// ErrorCodes are the upstream statuses that count as model-level failures.
	ErrorCodes []int
	// BaseCooldown is the first lockout's length.
	BaseCooldown time.Duration
	// MaxCooldown caps every escalated lockout, a rule's declared cooldown included.
	MaxCooldown time.Duration
	// MaxBackoffSteps caps the exponent of BaseCooldown × 2^(failures-1).
	MaxBackoffSteps int
	// UseExponentialBackoff escalates repeated failures; false locks for BaseCooldown every time.
	UseExponentialBackoff bool
	// LongRetryCap caps a lockout made from a typed Google RetryInfo hint that is longer
	// than the queue wait budget.
	LongRetryCap time.Duration
	// QueueMaxWait is the queue wait budget (requestQueue.maxWaitMs): a typed Google
	// RetryInfo hint longer than this becomes a lockout instead of pacing. A Failure may
	// carry the connection's own budget instead.
	QueueMaxWait time.Duration
	// EscalationWindow is how long after a lockout ends a new failure still escalates from
	// its failure count; later, counting starts again at one.
	EscalationWindow time.Duration
	// Family maps a model to its quota family (429/402/403 lock the family). Nil means the
	// model is its own family. See FamilyMap for a table.
	Family func(model string) string
	// Bare maps a model to its bare name (404 locks the bare model). Nil means BareModel.
	Bare func(model string) string
}

// ConfigFrom converts the resolved model-lockout settings and the policy-wide request
// queue (whose maxWaitMs decides when a long RetryInfo hint becomes a lockout) into a
// Config: the one conversion from policy settings to the tracker. Family and Bare, which
// are functions rather than settings, are left for the caller.
func ConfigFrom(s policies.ModelLockoutSettings, queue policies.RequestQueueSettings) Config {
	return Config{
		Enabled:               s.Enabled,
		ErrorCodes:            append([]int(nil), s.ErrorCodes...),
		BaseCooldown:          s.BaseCooldown,
		MaxCooldown:           s.MaxCooldown,
		MaxBackoffSteps:       s.MaxBackoffSteps,
		UseExponentialBackoff: s.UseExponentialBackoff,
		LongRetryCap:          s.LongRetryCap,
		QueueMaxWait:          queue.MaxWait,
		EscalationWindow:      s.EscalationWindow,
	}
}

// DefaultConfig returns the guide's defaults (§3, DEFAULT_MODEL_LOCKOUT_SETTINGS; from
// policies.Defaults). They are the same for
// every profile; the parameter keeps the constructor shape of the other engine packages.
func DefaultConfig(policies.Profile) Config {
	d := policies.Defaults()
	return ConfigFrom(d.ModelLockout, d.RequestQueue)
}

// Validate reports the first setting that is out of range.
func (c Config) Validate() error {
	switch {
	case c.MaxCooldown <= 0 || c.MaxCooldown > maxCooldownLimit:
		return fmt.Errorf("lockout: maxCooldown %v outside (0, %v]", c.MaxCooldown, maxCooldownLimit)
	case c.BaseCooldown < time.Millisecond || c.BaseCooldown > c.MaxCooldown:
		return fmt.Errorf("lockout: baseCooldown %v outside [1ms, maxCooldown %v]", c.BaseCooldown, c.MaxCooldown)
	case c.MaxBackoffSteps < 0 || c.MaxBackoffSteps > maxBackoffStepsLimit:
		return fmt.Errorf("lockout: maxBackoffSteps %d outside [0, %d]", c.MaxBackoffSteps, maxBackoffStepsLimit)
	case c.LongRetryCap <= 0 || c.LongRetryCap > maxLongRetryCap:
		return fmt.Errorf("lockout: longRetryCap %v outside (0, %v]", c.LongRetryCap, maxLongRetryCap)
	case c.QueueMaxWait < 0 || c.QueueMaxWait > maxCooldownLimit:
		return fmt.Errorf("lockout: queueMaxWait %v outside [0, %v]", c.QueueMaxWait, maxCooldownLimit)
	case c.EscalationWindow < 0 || c.EscalationWindow > maxCooldownLimit:
		return fmt.Errorf("lockout: escalationWindow %v outside [0, %v]", c.EscalationWindow, maxCooldownLimit)
	}
	for _, d := range [...]struct {
		name string
		v    time.Duration
	}{{"baseCooldown", c.BaseCooldown}, {"maxCooldown", c.MaxCooldown}, {"longRetryCap", c.LongRetryCap},
		{"queueMaxWait", c.QueueMaxWait}, {"escalationWindow", c.EscalationWindow}} {
		if d.v%time.Millisecond != 0 {
			return fmt.Errorf("lockout: %s %v is not a whole number of milliseconds", d.name, d.v)
		}
	}
	for i, code := range c.ErrorCodes {
		if code < 100 || code > 599 {
			return fmt.Errorf("lockout: errorCodes[%d] %d is not an HTTP status", i, code)
		}
	}
	return nil
}

// BareModel is the default bare-model mapping: the part after the last '/', so
// "models/gemini-2.5-pro" and "google/gemini-2.5-pro" both become "gemini-2.5-pro".
func BareModel(model string) string {
	if i := strings.LastIndexByte(model, '/'); i >= 0 && i < len(model)-1 {
		return model[i+1:]
	}
	return model
}

// FamilyMap is a table mapping of models to quota families: an exact entry first, then the
// first matching prefix, else the model itself.
type FamilyMap struct {
	Models   map[string]string // exact model → family
	Prefixes []FamilyPrefix    // tried in order
}

// FamilyPrefix maps every model that starts with Prefix to Family.
type FamilyPrefix struct {
	Prefix string
	Family string
}

// Family returns model's quota family.
func (m FamilyMap) Family(model string) string {
	if f, ok := m.Models[model]; ok {
		return f
	}
	for _, p := range m.Prefixes {
		if strings.HasPrefix(model, p.Prefix) {
			return p.Family
		}
	}
	return model
}
