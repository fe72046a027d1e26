// Package errorrules is the provider error rule catalogue (guide §7, providerRuleRegistry):
// rules that, for one provider's error, decide the failure reason, the scope it blames and
// its cooldown, before classification's generic status handling.
//
// Built-in rules are conservative by default: for a provider outside FullTextProviders they
// see only the structured error (code and type), not the body text, and their declared
// scope is only informational unless the provider is in HonoursScopeProviders. An operator
// rule is the operator's explicit opt-in (guide #11104): a provider with any operator rule
// gets the full error text and an honoured scope, for its operator and built-in rules
// alike. Operator rules are consulted before built-in ones. A marker the client sent (Text.Echo)
// does not count (classify's package doc, "Echoes").
package errorrules

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
)

// Bounds on operator rules, so matching stays cheap whatever the policy says.
const (
	MaxRules       = 128                     // rules per catalogue, built-ins included
	MaxMarkers     = 16                      // markers or exclude markers per rule
	MaxMarkerBytes = textscan.MaxNeedleBytes // bytes per marker: what an echo look-up reads
	// MaxCooldown bounds a declared cooldown (the layers clamp it further).
	MaxCooldown = 30 * 24 * time.Hour
	maxIDBytes  = 128
)

// Rule classifies one provider's errors.
type Rule struct {
	ID       string // names the rule in verdicts and logs; operator rules get one if empty
	Provider string // provider id, matched case-insensitively
	Status   int    // upstream status after restatement; 0 = any error status
	// Markers: the error text must hold at least one (ASCII case-insensitive, other bytes
	// exactly). Empty = any error of that provider and status.
	Markers []string
	// ExcludeMarkers veto the rule when the error text holds any of them.
	ExcludeMarkers []string
	Reason         failure.Reason // the reason to report
	// Scope is what the failure blames; failure.ScopeNone leaves the status's own scope.
	Scope failure.Scope
	// Cooldown is the declared base cooldown; 0 = the layer's own backoff. Lockout layers
	// still clamp it to their maximum.
	Cooldown time.Duration
}

// Text is what a rule may match against.
type Text struct {
	Code string // structured error code (OpenAI error.code, Google error.status, ...)
	Type string // structured error type (error.type)
	// Full is the full error text: the body, capped, \u-decoded and possibly folded to
	// lower case by the caller (matching ignores ASCII case anyway). Built-in rules of
	// providers outside FullTextProviders never see it.
	Full []byte
	// Echo is what the client sent (nil: unknown). A rule's marker that it holds does not
	// count, wherever it matched; exclude markers veto whoever wrote them (classify's package
	// doc, "Echoes").
	Echo *textscan.Echo
}

// Match is the rule that decided.
type Match struct {
	RuleID   string         // the matching rule
	Reason   failure.Reason // its reason
	Scope    failure.Scope  // its declared scope (failure.ScopeNone = none declared)
	Cooldown time.Duration  // its declared cooldown (0 = none)
	// ScopeHonoured: Scope must be applied. False means it is informational only (a
	// built-in rule of a provider outside HonoursScopeProviders with no operator rule).
	ScopeHonoured bool
	Operator      bool // an operator rule decided
}

// FullTextProviders are the providers whose built-in rules see the full error text
// (FULL_TEXT_RULE_PROVIDERS); every other built-in rule sees only {code, type}.
var FullTextProviders = []string{"agentrouter"}

// HonoursScopeProviders are the providers whose built-in rules' scope is applied
// (HONORS_RULE_LOCK_SCOPE_PROVIDERS); for every other built-in rule it is informational.
var HonoursScopeProviders = []string{"agentrouter"}

// Built-in rule ids.
const (
	AgentrouterModelAccessDeniedID = "agentrouter-model-access-denied"
	AgentrouterQuotaID             = "agentrouter-user-quota-exhausted"
)

// Builtin returns the built-in catalogue (a fresh copy), most specific first:
//   - agentrouter 无权访问模型 (no access to this model): auth_error at model scope with a
//     declared 6 h cooldown, which the lockout layer clamps to its maximum;
//   - agentrouter 额度不足 (quota exhausted, usually restated to 429 first):
//     quota_exhausted at connection scope, no declared cooldown (the connection layer's
//     backoff applies). Never terminal: it recovers on its own.
func Builtin() []Rule {
	return []Rule{
		{
			ID:       AgentrouterModelAccessDeniedID,
			Provider: "agentrouter",
			Markers:  []string{"无权访问模型"},
			Reason:   failure.ReasonAuthError,
			Scope:    failure.ScopeModel,
			Cooldown: policies.AgentrouterModelAccessDeniedCooldown,
		},
		{
			ID:             AgentrouterQuotaID,
			Provider:       "agentrouter",
			Markers:        []string{"额度不足"},
			ExcludeMarkers: []string{"无权访问"},
			Reason:         failure.ReasonQuotaExhausted,
			Scope:          failure.ScopeConnection,
		},
	}
}

// RuleReasons are the reasons a rule may declare: every classification reason except
// success, transport failures, stream stalls and unknown (which no error body can show).
var RuleReasons = []failure.Reason{
	failure.ReasonRateLimit, failure.ReasonQuotaExhausted, failure.ReasonConcurrencyLimited,
	failure.ReasonServerError, failure.ReasonTimeout, failure.ReasonAuthError,
	failure.ReasonNotFound, failure.ReasonModelCapacity, failure.ReasonCreditsExhausted,
	failure.ReasonBanned, failure.ReasonExpired, failure.ReasonRequestRejected,
	failure.ReasonBadRequest,
}

// RuleScopes are the scopes a rule may declare (plus failure.ScopeNone).
var RuleScopes = []failure.Scope{
	failure.ScopeProvider, failure.ScopeConnection, failure.ScopeQuotaFamily,
	failure.ScopeModel, failure.ScopeExact,
}

// rule is a validated rule with where it came from.
type rule struct {
	Rule
	operator bool
}

// Catalogue is a validated, immutable rule set. Its methods are safe for concurrent use.
type Catalogue struct {
	rules             []rule
	operatorProviders []string // providers with at least one operator rule
}

// New builds the catalogue: operator rules (validated, in order), then the built-ins. It
// returns an error naming the first invalid operator rule.
func New(operator []Rule) (*Catalogue, error) {
	c := &Catalogue{rules: make([]rule, 0, len(operator)+2)}
	seen := make(map[string]bool, len(operator))
	for i, r := range operator {
		if r.ID == "" {
			r.ID = fmt.Sprintf("operator-%s-%d", r.Provider, i)
		}
		r, err := normalize(r)
		if err != nil {
			return nil, fmt.Errorf("errorrules: rule %d (%q): %w", i, r.ID, err)
		}
		if seen[r.ID] {
			return nil, fmt.Errorf("errorrules: rule %d: duplicate id %q", i, r.ID)
		}
		seen[r.ID] = true
		c.rules = append(c.rules, rule{r, true})
		if !containsFold(c.operatorProviders, r.Provider) {
			c.operatorProviders = append(c.operatorProviders, r.Provider)
		}
	}
	for _, r := range Builtin() {
		c.rules = append(c.rules, rule{r, false})
	}
	if len(c.rules) > MaxRules {
		return nil, fmt.Errorf("errorrules: %d rules, at most %d", len(c.rules), MaxRules)
	}
	return c, nil
}

// Default returns the catalogue of built-in rules only.
func Default() *Catalogue {
	c, err := New(nil)
	if err != nil {
		panic(err) // the built-ins are valid; TestBuiltinRulesAreValid proves it
	}
	return c
}

func normalize(r Rule) (Rule, error) {
	switch {
	case len(r.ID) > maxIDBytes:
		return r, fmt.Errorf("id longer than %d bytes", maxIDBytes)
	case r.Provider == "" || len(r.Provider) > maxIDBytes:
		return r, fmt.Errorf("provider must be 1 to %d bytes", maxIDBytes)
	case r.Status != 0 && (r.Status < 400 || r.Status > 599):
		return r, fmt.Errorf("status %d outside 400..599 (0 = any)", r.Status)
	case !validReason(r.Reason):
		return r, fmt.Errorf("reason %q cannot be declared", r.Reason)
	case r.Scope != failure.ScopeNone && !validScope(r.Scope):
		return r, fmt.Errorf("unknown scope %q", r.Scope)
	case r.Cooldown < 0 || r.Cooldown > MaxCooldown:
		return r, fmt.Errorf("cooldown %v outside [0, %v]", r.Cooldown, MaxCooldown)
	}
	for _, list := range []struct {
		field   string
		markers []string
	}{{"markers", r.Markers}, {"excludeMarkers", r.ExcludeMarkers}} {
		if len(list.markers) > MaxMarkers {
			return r, fmt.Errorf("%s: %d markers, at most %d", list.field, len(list.markers), MaxMarkers)
		}
		for i, m := range list.markers {
			if m == "" || len(m) > MaxMarkerBytes {
				return r, fmt.Errorf("%s[%d] must be 1 to %d bytes", list.field, i, MaxMarkerBytes)
			}
		}
	}
	r.Markers = append([]string(nil), r.Markers...)
	r.ExcludeMarkers = append([]string(nil), r.ExcludeMarkers...)
	return r, nil
}

func validReason(r failure.Reason) bool {
	for _, x := range RuleReasons {
		if x == r {
			return true
		}
	}
	return false
}

func validScope(s failure.Scope) bool {
	for _, x := range RuleScopes {
		if x == s {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if textscan.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// HasOperatorRule reports whether the operator declared a rule for provider
// (hasOperatorRuleForProvider).
func (c *Catalogue) HasOperatorRule(provider string) bool {
	return containsFold(c.operatorProviders, provider)
}

// SeesFullText reports whether provider's rules match the full error text
// (resolveRuleMatchBody): an operator rule or FullTextProviders.
func (c *Catalogue) SeesFullText(provider string) bool {
	return c.HasOperatorRule(provider) || containsFold(FullTextProviders, provider)
}

// HonoursScope reports whether provider's rule scopes are applied (honorsRuleLockScope):
// an operator rule or HonoursScopeProviders.
func (c *Catalogue) HonoursScope(provider string) bool {
	return c.HasOperatorRule(provider) || containsFold(HonoursScopeProviders, provider)
}

// Match returns the first rule matching provider's error with status, or false. It never
// allocates.
func (c *Catalogue) Match(provider string, status int, text Text) (Match, bool) {
	fullText, honoured, known := false, false, false
	for i := range c.rules {
		r := &c.rules[i]
		if !textscan.EqualFold(r.Provider, provider) || (r.Status != 0 && r.Status != status) {
			continue
		}
		if !known {
			fullText, honoured, known = c.SeesFullText(provider), c.HonoursScope(provider), true
		}
		if !matches(r.Markers, r.ExcludeMarkers, text, fullText) {
			continue
		}
		return Match{
			RuleID:        r.ID,
			Reason:        r.Reason,
			Scope:         r.Scope,
			Cooldown:      r.Cooldown,
			ScopeHonoured: honoured && r.Scope != failure.ScopeNone,
			Operator:      r.operator,
		}, true
	}
	return Match{}, false
}

// matches applies a rule's markers to the text it may see: the structured code and type
// always, the full text only when fullText is set. A marker the client sent (text.Echo)
// does not count; an exclude marker vetoes the rule whoever wrote it.
func matches(markers, exclude []string, text Text, fullText bool) bool {
	if len(markers) > 0 && !shows(markers, text, fullText) {
		return false
	}
	for _, m := range exclude {
		if has(m, text, fullText) {
			return false
		}
	}
	return true
}

// shows reports whether the text holds one of markers that the client did not send.
func shows(markers []string, text Text, fullText bool) bool {
	for _, m := range markers {
		if has(m, text, fullText) && !text.Echo.Echoed(m) {
			return true
		}
	}
	return false
}

// has reports whether the text holds marker m (an empty one matches nothing).
func has(m string, text Text, fullText bool) bool {
	return m != "" && (textscan.ContainsFold(text.Code, m) || textscan.ContainsFold(text.Type, m) ||
		(fullText && textscan.ContainsFold(textscan.String(text.Full), m)))
}
