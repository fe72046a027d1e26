package policies

import "strings"

// The failure vocabulary a policy may name. The strings are the engine's failure reasons and
// scopes (plugin/internal/failure), which this package, being below the plugin, cannot
// import: keep the lists in step with it.

// FailureKinds are the failure kinds providerBreaker.*.cooldownByKind may key on: the
// provider-level kinds the breaker distinguishes (any other configured trip status counts
// as server_error).
var FailureKinds = []string{"server_error", "timeout", "transport_error"}

// RuleReasons are the reasons a provider error rule may declare.
var RuleReasons = []string{
	"rate_limit", "quota_exhausted", "concurrency_limited", "server_error", "timeout",
	"auth_error", "not_found", "model_capacity", "credits_exhausted", "banned", "expired",
	"request_rejected", "bad_request",
}

// RuleScopes are the scopes a provider error rule may blame, widest first.
var RuleScopes = []string{"provider", "connection", "quota", "model", "exact"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func validFailureKind(s string) bool { return contains(FailureKinds, s) }
func validRuleReason(s string) bool  { return contains(RuleReasons, s) }
func validRuleScope(s string) bool   { return contains(RuleScopes, s) }
func failureKindList() string        { return strings.Join(FailureKinds, ", ") }
func ruleReasonList() string         { return strings.Join(RuleReasons, ", ") }

// ResponseHeaders are the headers Spillway adds to proxied responses (its HTTP contract;
// plugin/internal/filter sets them): no setting may reuse one of these names.
var ResponseHeaders = []string{
	"x-spillway-provider", "x-spillway-connection", "x-spillway-model", "x-spillway-attempts",
	"x-spillway-restated-from",
}
