// Package restate rewrites a misleading upstream error status before classification (guide
// §7): a gateway that reports temporary quota exhaustion as 403/400 is restated to 429.
//
// A Rule matches one provider (case-insensitive), one of its fromStatuses, and a body that
// holds one of its textMarkers (if it declares any; one the client sent is an echo and does
// not count) and none of its excludeMarkers. The first matching rule wins:
// operator rules in their order, then the built-in rules an operator rule does not replace
// by id. The restated response advertises the upstream's own positive Retry-After, or the
// rule's default (60 s); that value is only what the client is told, never the internal
// cooldown.
package restate

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/retryhint"
	"github.com/spillwayproxy/spillway/policies"
)

// Bounds on operator rules, so matching stays cheap whatever the policy says.
const (
	MaxRules        = 64                      // rules per table, built-ins included
	MaxMarkers      = 16                      // textMarkers or excludeMarkers per rule
	MaxMarkerBytes  = textscan.MaxNeedleBytes // bytes per marker: what an echo look-up reads
	MaxFromStatuses = 16                      // fromStatuses per rule
	maxIDBytes      = 128
)

// Rule restates one provider's misleading status.
type Rule struct {
	ID           string // names the rule in x-spillway-restated-from diagnostics and verdicts
	Provider     string // provider id, matched case-insensitively
	FromStatuses []int  // upstream statuses the rule applies to (400..599)
	ToStatus     int    // the status to report instead (400..599)
	// TextMarkers: the body must hold at least one (ASCII case-insensitive; other bytes
	// exactly, so Chinese markers match as written). Empty = any body.
	TextMarkers []string
	// ExcludeMarkers veto the rule even when a text marker matched: a permanent error
	// keeps its status.
	ExcludeMarkers []string
	// DefaultRetryAfter is advertised when the upstream sent no positive Retry-After;
	// 0 means policies.RestatementDefaultRetryAfter.
	DefaultRetryAfter time.Duration
}

// Result says whether and how a response was restated.
type Result struct {
	Restated   bool          // a rule matched
	Status     int           // the status after restatement (the input status when not restated)
	FromStatus int           // the upstream's own status
	RuleID     string        // the rule that matched
	RetryAfter time.Duration // Retry-After to advertise on the restated response
	// RetryAfterFromUpstream: RetryAfter is the upstream's own positive Retry-After,
	// not the rule's default.
	RetryAfterFromUpstream bool
}

// AgentrouterQuotaRuleID names the built-in agentrouter rule.
const AgentrouterQuotaRuleID = "agentrouter-quota-misstatus"

// Builtin returns the built-in rules (a fresh copy): agentrouter.org reports temporary
// quota exhaustion (额度不足, also 用户额度不足) as 403 or 400; it becomes 429 with
// Retry-After 60 s, unless the body says 无权访问 (no access: permanent, never restated).
func Builtin() []Rule {
	return []Rule{{
		ID:                AgentrouterQuotaRuleID,
		Provider:          "agentrouter",
		FromStatuses:      []int{403, 400},
		ToStatus:          429,
		TextMarkers:       []string{"额度不足"},
		ExcludeMarkers:    []string{"无权访问"},
		DefaultRetryAfter: policies.RestatementDefaultRetryAfter,
	}}
}

// Table is a validated, immutable set of rules. Its methods are safe for concurrent use.
type Table struct {
	rules []Rule
}

// New builds the table: operator rules first, then every built-in rule whose id no
// operator rule reuses (an operator replaces a built-in by declaring its id). It returns
// an error naming the first invalid operator rule.
func New(operator []Rule) (*Table, error) {
	seen := make(map[string]bool, len(operator))
	rules := make([]Rule, 0, len(operator)+1)
	for i, r := range operator {
		r, err := normalize(r)
		if err != nil {
			return nil, fmt.Errorf("restate: rule %d (%q): %w", i, r.ID, err)
		}
		if seen[r.ID] {
			return nil, fmt.Errorf("restate: rule %d: duplicate id %q", i, r.ID)
		}
		seen[r.ID] = true
		rules = append(rules, r)
	}
	for _, r := range Builtin() {
		if !seen[r.ID] {
			rules = append(rules, r)
		}
	}
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("restate: %d rules, at most %d", len(rules), MaxRules)
	}
	return &Table{rules: rules}, nil
}

// Default returns the table of built-in rules only.
func Default() *Table {
	t, err := New(nil)
	if err != nil {
		panic(err) // the built-ins are valid; TestBuiltinRulesAreValid proves it
	}
	return t
}

// Rules returns a copy of the table's rules in match order.
func (t *Table) Rules() []Rule {
	return append([]Rule(nil), t.rules...)
}

// normalize validates a rule and fills its defaults.
func normalize(r Rule) (Rule, error) {
	switch {
	case r.ID == "" || len(r.ID) > maxIDBytes:
		return r, fmt.Errorf("id must be 1 to %d bytes", maxIDBytes)
	case r.Provider == "" || len(r.Provider) > maxIDBytes:
		return r, fmt.Errorf("provider must be 1 to %d bytes", maxIDBytes)
	case len(r.FromStatuses) == 0 || len(r.FromStatuses) > MaxFromStatuses:
		return r, fmt.Errorf("fromStatuses must list 1 to %d statuses", MaxFromStatuses)
	case !errorStatus(r.ToStatus):
		return r, fmt.Errorf("toStatus %d outside 400..599", r.ToStatus)
	case r.DefaultRetryAfter < 0 || r.DefaultRetryAfter > retryhint.MaxDelay:
		return r, fmt.Errorf("defaultRetryAfter %v outside [0, %v]", r.DefaultRetryAfter, retryhint.MaxDelay)
	}
	for _, s := range r.FromStatuses {
		if !errorStatus(s) {
			return r, fmt.Errorf("fromStatuses: %d outside 400..599", s)
		}
		if s == r.ToStatus {
			return r, fmt.Errorf("fromStatuses: %d is the toStatus itself", s)
		}
	}
	if err := validMarkers("textMarkers", r.TextMarkers); err != nil {
		return r, err
	}
	if err := validMarkers("excludeMarkers", r.ExcludeMarkers); err != nil {
		return r, err
	}
	if r.DefaultRetryAfter == 0 {
		r.DefaultRetryAfter = policies.RestatementDefaultRetryAfter
	}
	r.FromStatuses = append([]int(nil), r.FromStatuses...)
	r.TextMarkers = append([]string(nil), r.TextMarkers...)
	r.ExcludeMarkers = append([]string(nil), r.ExcludeMarkers...)
	return r, nil
}

func errorStatus(s int) bool { return 400 <= s && s <= 599 }

// validMarkers checks a marker list: bounded count and length, no empty marker (it would
// match everything, which an empty list already says explicitly).
func validMarkers(field string, markers []string) error {
	if len(markers) > MaxMarkers {
		return fmt.Errorf("%s: %d markers, at most %d", field, len(markers), MaxMarkers)
	}
	for i, m := range markers {
		if m == "" || len(m) > MaxMarkerBytes {
			return fmt.Errorf("%s[%d] must be 1 to %d bytes", field, i, MaxMarkerBytes)
		}
	}
	return nil
}

// Apply restates one upstream error response when a rule matches; otherwise it returns
// the status unchanged (Restated false). headers are the upstream's response headers
// (for its Retry-After); at most textscan.MaxScanBytes of body are read. echo is what the
// client sent (nil: unknown): a textMarker it holds does not count, while an excludeMarker
// vetoes whoever wrote it (classify's package doc, "Echoes"). A response that no rule's
// provider and status select costs no allocation.
func (t *Table) Apply(provider string, status int, headers [][2]string, body []byte, now time.Time, echo *textscan.Echo) Result {
	res := Result{Status: status, FromStatus: status}
	var text string // searched text, decoded lazily the first time a rule needs it
	searched := false
	for i := range t.rules {
		r := &t.rules[i]
		if !textscan.EqualFold(r.Provider, provider) || !hasStatus(r.FromStatuses, status) {
			continue
		}
		if !searched {
			text, searched = textscan.String(textscan.Searchable(body)), true
		}
		if (len(r.TextMarkers) > 0 && !shows(text, r.TextMarkers, echo)) ||
			textscan.ContainsAnyFold(text, r.ExcludeMarkers) {
			continue
		}
		res.Restated, res.Status, res.RuleID = true, r.ToStatus, r.ID
		if d, ok := retryhint.RetryAfter(headers, now); ok {
			res.RetryAfter, res.RetryAfterFromUpstream = d, true
		} else {
			res.RetryAfter = r.DefaultRetryAfter
		}
		return res
	}
	return res
}

func hasStatus(statuses []int, s int) bool {
	for _, x := range statuses {
		if x == s {
			return true
		}
	}
	return false
}

// shows reports whether text holds one of markers that the client did not send.
func shows(text string, markers []string, echo *textscan.Echo) bool {
	for _, m := range markers {
		if m != "" && textscan.ContainsFold(text, m) && !echo.Echoed(m) {
			return true
		}
	}
	return false
}
