package errorrules

import (
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
)

// agentrouter bodies (new-api gateway).
const (
	agentrouterNoModelAccess = `{"error":{"message":"该令牌无权访问模型 claude-opus-4-1-20250805","type":"new_api_error","code":""}}`
	agentrouterUserQuota     = `{"error":{"message":"用户额度不足, 剩余额度: ＄-0.012","type":"new_api_error","code":"insufficient_user_quota"}}`
)

func text(body string) Text { return Text{Full: []byte(body)} }

func TestBuiltinAgentrouterRules(t *testing.T) {
	c := Default()
	cases := []struct {
		name     string         // what the row shows
		provider string         // provider id
		status   int            // status after restatement
		text     Text           // error text
		ruleID   string         // expected rule, "" = no match
		reason   failure.Reason // expected reason
		scope    failure.Scope  // expected declared scope
		cooldown time.Duration  // expected declared cooldown
	}{
		{"无权访问模型 → auth_error, model, 6 h", "agentrouter", 403, text(agentrouterNoModelAccess),
			AgentrouterModelAccessDeniedID, failure.ReasonAuthError, failure.ScopeModel, 6 * time.Hour},
		{"restated 额度不足 → quota_exhausted, connection, no cooldown", "agentrouter", 429, text(agentrouterUserQuota),
			AgentrouterQuotaID, failure.ReasonQuotaExhausted, failure.ScopeConnection, 0},
		{"unrestated 403 额度不足 matches too", "agentrouter", 403, text(agentrouterUserQuota),
			AgentrouterQuotaID, failure.ReasonQuotaExhausted, failure.ScopeConnection, 0},
		{"provider case-insensitive", "AGENTROUTER", 429, text(agentrouterUserQuota),
			AgentrouterQuotaID, failure.ReasonQuotaExhausted, failure.ScopeConnection, 0},
		{"other agentrouter error: no rule", "agentrouter", 401, text(`{"error":{"message":"无效的令牌"}}`),
			"", "", "", 0},
		{"same body from another provider: no rule", "newapi-mirror", 403, text(agentrouterNoModelAccess),
			"", "", "", 0},
	}
	for _, tc := range cases {
		m, ok := c.Match(tc.provider, tc.status, tc.text)
		if ok != (tc.ruleID != "") || m.RuleID != tc.ruleID || m.Reason != tc.reason || m.Scope != tc.scope || m.Cooldown != tc.cooldown {
			t.Errorf("%s: got %+v, %v", tc.name, m, ok)
			continue
		}
		if ok && (!m.ScopeHonoured || m.Operator) {
			t.Errorf("%s: agentrouter built-in must be honoured and not operator: %+v", tc.name, m)
		}
	}
}

func TestBuiltinRulesAreValid(t *testing.T) {
	for _, r := range Builtin() {
		if _, err := normalize(r); err != nil {
			t.Errorf("built-in %q: %v", r.ID, err)
		}
		if r.Reason == failure.ReasonBanned || r.Reason == failure.ReasonCreditsExhausted || r.Reason == failure.ReasonExpired {
			t.Errorf("built-in %q declares a terminal reason %q: built-ins must recover on their own", r.ID, r.Reason)
		}
	}
	if policies.AgentrouterModelAccessDeniedCooldown != 6*time.Hour {
		t.Errorf("AgentrouterModelAccessDeniedCooldown = %v, want guide §7's 6 h", policies.AgentrouterModelAccessDeniedCooldown)
	}
}

// catalogueWithBuiltin builds a catalogue whose built-ins include one extra rule, for a
// provider outside both allowlists (Builtin() itself only covers agentrouter).
func catalogueWithBuiltin(t *testing.T, operator []Rule, builtin Rule) *Catalogue {
	t.Helper()
	c, err := New(operator)
	if err != nil {
		t.Fatal(err)
	}
	b, err := normalize(builtin)
	if err != nil {
		t.Fatal(err)
	}
	c.rules = append(c.rules, rule{b, false})
	return c
}

func TestAllowlistsProtectBuiltinRulesOnly(t *testing.T) {
	gwRule := Rule{ID: "gw-daily", Provider: "gw", Status: 429, Markers: []string{"daily cap"},
		Reason: failure.ReasonQuotaExhausted, Scope: failure.ScopeConnection}
	gwCodeRule := Rule{ID: "gw-code", Provider: "gw", Status: 429, Markers: []string{"cap_reached"},
		Reason: failure.ReasonQuotaExhausted, Scope: failure.ScopeConnection}
	body := `{"error":{"message":"daily cap reached","code":"cap_reached"}}`

	// A built-in rule of a provider outside FullTextProviders is blind to body text...
	plain := catalogueWithBuiltin(t, nil, gwRule)
	if m, ok := plain.Match("gw", 429, Text{Code: "cap_reached", Full: []byte(body)}); ok {
		t.Errorf("built-in body-text rule matched without the full-text allowlist: %+v", m)
	}
	// ...but sees the structured code, and its scope is informational only.
	codes := catalogueWithBuiltin(t, nil, gwCodeRule)
	m, ok := codes.Match("gw", 429, Text{Code: "cap_reached", Full: []byte(body)})
	if !ok || m.RuleID != "gw-code" || m.ScopeHonoured || m.Scope != failure.ScopeConnection {
		t.Errorf("built-in code rule: got %+v, %v; want a match with an informational scope", m, ok)
	}

	// An operator rule for the provider lifts both allowlists, for the built-in rule too.
	operator := []Rule{{ID: "gw-op", Provider: "GW", Status: 503, Markers: []string{"maintenance"},
		Reason: failure.ReasonServerError, Scope: failure.ScopeProvider}}
	opted := catalogueWithBuiltin(t, operator, gwRule)
	if !opted.HasOperatorRule("gw") || !opted.SeesFullText("gw") || !opted.HonoursScope("gw") {
		t.Fatal("operator rule did not opt the provider in")
	}
	m, ok = opted.Match("gw", 429, Text{Full: []byte(body)})
	if !ok || m.RuleID != "gw-daily" || !m.ScopeHonoured || m.Operator {
		t.Errorf("built-in rule of an opted-in provider: got %+v, %v", m, ok)
	}
	m, ok = opted.Match("gw", 503, Text{Full: []byte(`planned maintenance window`)})
	if !ok || m.RuleID != "gw-op" || !m.Operator || !m.ScopeHonoured || m.Scope != failure.ScopeProvider {
		t.Errorf("operator rule: got %+v, %v", m, ok)
	}

	// Allowlist membership of the built-in providers.
	d := Default()
	if !d.SeesFullText("agentrouter") || !d.HonoursScope("AgentRouter") || d.SeesFullText("openai") || d.HonoursScope("openai") || d.HasOperatorRule("agentrouter") {
		t.Error("default allowlists wrong")
	}
}

func TestOperatorRules(t *testing.T) {
	c, err := New([]Rule{
		{ID: "glm-overdue", Provider: "glm", Markers: []string{"欠费"}, Reason: failure.ReasonCreditsExhausted, Scope: failure.ScopeConnection},
		{ID: "acme-model", Provider: "acme", Status: 403, Markers: []string{"Model Not Enabled"}, ExcludeMarkers: []string{"temporarily"},
			Reason: failure.ReasonNotFound, Scope: failure.ScopeModel, Cooldown: 10 * time.Minute},
		{Provider: "acme", Status: 500, Reason: failure.ReasonServerError, Scope: failure.ScopeNone}, // no id, no markers, no scope
		{ID: "agentrouter-override", Provider: "agentrouter", Markers: []string{"额度不足"}, Reason: failure.ReasonRateLimit, Scope: failure.ScopeExact},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string        // what the row shows
		provider string        // provider id
		status   int           // status
		body     string        // full error text
		ruleID   string        // expected rule, "" = none
		honoured bool          // expected ScopeHonoured
		cooldown time.Duration // expected cooldown
	}{
		{"any status, Chinese marker", "glm", 429, `{"error":{"code":"1113","message":"您的账户已欠费，请充值后重试。"}}`, "glm-overdue", true, 0},
		{"status and folded marker", "acme", 403, `model not enabled for this key`, "acme-model", true, 10 * time.Minute},
		{"exclude marker vetoes", "acme", 403, `model not enabled temporarily`, "", false, 0},
		{"wrong status", "acme", 404, `model not enabled`, "", false, 0},
		{"status-only rule, generated id, no scope", "acme", 500, `anything at all`, "operator-acme-2", false, 0},
		{"operator rule wins over the built-in", "agentrouter", 429, agentrouterUserQuota, "agentrouter-override", true, 0},
		{"built-in still behind it", "agentrouter", 403, agentrouterNoModelAccess, AgentrouterModelAccessDeniedID, true, 6 * time.Hour},
	}
	for _, tc := range cases {
		m, ok := c.Match(tc.provider, tc.status, text(tc.body))
		if ok != (tc.ruleID != "") || m.RuleID != tc.ruleID || m.ScopeHonoured != tc.honoured || m.Cooldown != tc.cooldown {
			t.Errorf("%s: got %+v, %v", tc.name, m, ok)
		}
	}
}

func TestNewRejectsInvalidRules(t *testing.T) {
	valid := Rule{ID: "r", Provider: "p", Status: 429, Markers: []string{"m"}, Reason: failure.ReasonRateLimit, Scope: failure.ScopeConnection}
	cases := []struct {
		name   string      // what is wrong
		mutate func(*Rule) // how the valid rule is broken
		errHas string      // a fragment the error must hold
	}{
		{"no provider", func(r *Rule) { r.Provider = "" }, "provider must be"},
		{"long id", func(r *Rule) { r.ID = strings.Repeat("i", 200) }, "id longer"},
		{"status 200", func(r *Rule) { r.Status = 200 }, "status 200"},
		{"status 700", func(r *Rule) { r.Status = 700 }, "status 700"},
		{"no reason", func(r *Rule) { r.Reason = failure.ReasonNone }, "reason"},
		{"transport reason", func(r *Rule) { r.Reason = failure.ReasonTransport }, "reason"},
		{"made-up reason", func(r *Rule) { r.Reason = "sad" }, "reason"},
		{"made-up scope", func(r *Rule) { r.Scope = "galaxy" }, "scope"},
		{"negative cooldown", func(r *Rule) { r.Cooldown = -1 }, "cooldown"},
		{"cooldown over 30 days", func(r *Rule) { r.Cooldown = 31 * 24 * time.Hour }, "cooldown"},
		{"empty marker", func(r *Rule) { r.Markers = []string{""} }, "markers[0]"},
		{"long exclude marker", func(r *Rule) { r.ExcludeMarkers = []string{strings.Repeat("x", 257)} }, "excludeMarkers[0]"},
		{"too many markers", func(r *Rule) { r.Markers = make([]string, 17) }, "at most 16"},
	}
	for _, tc := range cases {
		r := valid
		tc.mutate(&r)
		_, err := New([]Rule{r})
		if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.HasPrefix(err.Error(), "errorrules: ") {
			t.Errorf("%s: err = %v, want one holding %q", tc.name, err, tc.errHas)
		}
	}
	if _, err := New([]Rule{valid, valid}); err == nil || !strings.Contains(err.Error(), "duplicate id") {
		t.Errorf("duplicate ids: %v", err)
	}
	many := make([]Rule, MaxRules)
	for i := range many {
		many[i] = valid
		many[i].ID = ""
	}
	if _, err := New(many); err == nil {
		t.Error("more than MaxRules accepted")
	}
	// Every reason the policy vocabulary allows is accepted here too.
	for _, reason := range policies.RuleReasons {
		r := valid
		r.Reason = failure.Reason(reason)
		if _, err := New([]Rule{r}); err != nil {
			t.Errorf("policy reason %q rejected: %v", reason, err)
		}
	}
	for _, scope := range policies.RuleScopes {
		r := valid
		r.Scope = failure.Scope(scope)
		if _, err := New([]Rule{r}); err != nil {
			t.Errorf("policy scope %q rejected: %v", scope, err)
		}
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("agentrouter", 403, "", "", []byte(agentrouterNoModelAccess))
	f.Add("agentrouter", 429, "insufficient_user_quota", "new_api_error", []byte(agentrouterUserQuota))
	f.Add("gw", 0, "\xff", "", []byte("\x00"))
	c, err := New([]Rule{{ID: "op", Provider: "gw", Markers: []string{"cap"}, Reason: failure.ReasonQuotaExhausted, Scope: failure.ScopeConnection}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, provider string, status int, code, typ string, full []byte) {
		m, ok := c.Match(provider, status, Text{Code: code, Type: typ, Full: full})
		if ok != (m.RuleID != "") || (ok && !validReason(m.Reason)) {
			t.Fatalf("inconsistent match %+v, %v", m, ok)
		}
	})
}

func BenchmarkMatchNoRuleForProvider(b *testing.B) {
	c := Default()
	t := text(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Match("openai", 429, t); ok {
			b.Fatal("matched")
		}
	}
}

// TestAnEchoedMarkerDoesNotMatch: a rule's marker the client sent does not count wherever it
// matched, the structured code included (classify's package doc, "Echoes"); an exclude marker
// vetoes whoever wrote it.
func TestAnEchoedMarkerDoesNotMatch(t *testing.T) {
	c, err := New([]Rule{{ID: "acme-locked", Provider: "acme", Markers: []string{"account locked"},
		ExcludeMarkers: []string{"temporarily"}, Reason: failure.ReasonBanned}})
	if err != nil {
		t.Fatal(err)
	}
	echoing := `{"error":{"message":"unknown tool 'account locked'","type":"invalid_request"}}`
	cases := []struct {
		name  string // what the row shows
		text  Text   // the error text (Echo set from sent)
		sent  string // the request body the client sent
		match bool   // the rule matches
	}{
		{"the marker echoed from the request", text(echoing), `{"tools":[{"name":"Account Locked"}]}`, false},
		{"the marker in the structured code, sent", Text{Code: "account_locked", Type: "ACCOUNT LOCKED"}, `{"x":"account locked"}`, false},
		{"control: the marker is the provider's", text(echoing), `{"tools":[]}`, true},
		{"control: nothing known of the request", text(echoing), ``, true},
		{"an echoed exclude marker still vetoes", text(`{"error":{"message":"account locked; unknown field 'temporarily'"}}`), `{"temporarily":1}`, false},
	}
	for _, tc := range cases {
		echo := textscan.NewEcho(textscan.Sent{Body: []byte(tc.sent)})
		tc.text.Echo = &echo
		if _, ok := c.Match("acme", 400, tc.text); ok != tc.match {
			t.Errorf("%s: matched %v, want %v", tc.name, ok, tc.match)
		}
	}
}
