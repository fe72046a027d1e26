package restate

import (
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

var now = testfixture.T0

// agentrouter bodies as its new-api gateway sends them.
const (
	agentrouterUserQuota   = `{"error":{"message":"用户额度不足, 剩余额度: ＄0.000000","type":"new_api_error","param":"","code":"insufficient_user_quota"}}`
	agentrouterQuota       = `{"error":{"message":"额度不足","type":"new_api_error"}}`
	agentrouterNoAccess    = `{"error":{"message":"该令牌无权访问模型 claude-opus-4 (额度不足时也不可用)","type":"new_api_error"}}`
	agentrouterEscaped     = `{"error":{"message":"\u7528\u6237\u989d\u5ea6\u4e0d\u8db3","type":"new_api_error"}}`
	agentrouterOtherError  = `{"error":{"message":"无效的令牌","type":"new_api_error"}}`
	openAIInsufficientQuot = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
)

func TestBuiltinAgentrouterRule(t *testing.T) {
	table := Default()
	cases := []struct {
		name       string        // what the row shows
		provider   string        // provider id of the attempt
		status     int           // upstream status
		headers    [][2]string   // upstream headers
		body       string        // upstream body
		restated   bool          // expected: a rule matched
		wantStatus int           // expected status after restatement
		retryAfter time.Duration // expected Retry-After to advertise
		upstream   bool          // expected: Retry-After is the upstream's own
	}{
		{"403 用户额度不足 → 429, 60 s", "agentrouter", 403, nil, agentrouterUserQuota, true, 429, 60 * time.Second, false},
		{"400 额度不足 → 429, 60 s", "agentrouter", 400, nil, agentrouterQuota, true, 429, 60 * time.Second, false},
		{"provider matched case-insensitively", "AgentRouter", 403, nil, agentrouterQuota, true, 429, 60 * time.Second, false},
		{"\\u-escaped body still matches", "agentrouter", 403, nil, agentrouterEscaped, true, 429, 60 * time.Second, false},
		{"upstream positive Retry-After wins", "agentrouter", 403, [][2]string{{"Retry-After", "15"}}, agentrouterQuota, true, 429, 15 * time.Second, true},
		{"upstream Retry-After 0 is not positive", "agentrouter", 403, [][2]string{{"retry-after", "0"}}, agentrouterQuota, true, 429, 60 * time.Second, false},
		{"upstream garbage Retry-After ignored", "agentrouter", 403, [][2]string{{"retry-after", "soon"}}, agentrouterQuota, true, 429, 60 * time.Second, false},
		{"无权访问 vetoes even with 额度不足", "agentrouter", 403, nil, agentrouterNoAccess, false, 403, 0, false},
		{"other agentrouter 403 untouched", "agentrouter", 403, nil, agentrouterOtherError, false, 403, 0, false},
		{"status not in fromStatuses", "agentrouter", 401, nil, agentrouterQuota, false, 401, 0, false},
		{"already 429", "agentrouter", 429, nil, agentrouterQuota, false, 429, 0, false},
		{"other provider with the same body", "openai", 403, nil, agentrouterQuota, false, 403, 0, false},
		{"provider id is not a substring match", "agentrouter-eu", 403, nil, agentrouterQuota, false, 403, 0, false},
		{"empty body", "agentrouter", 403, nil, "", false, 403, 0, false},
	}
	for _, c := range cases {
		got := table.Apply(c.provider, c.status, c.headers, []byte(c.body), now, nil)
		want := Result{Status: c.wantStatus, FromStatus: c.status}
		if c.restated {
			want.Restated, want.RuleID, want.RetryAfter, want.RetryAfterFromUpstream = true, AgentrouterQuotaRuleID, c.retryAfter, c.upstream
		}
		if got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, want)
		}
	}
}

func TestBuiltinRulesAreValid(t *testing.T) {
	for _, r := range Builtin() {
		if _, err := normalize(r); err != nil {
			t.Errorf("built-in %q: %v", r.ID, err)
		}
	}
	if policies.RestatementDefaultRetryAfter != 60*time.Second {
		t.Errorf("policies.RestatementDefaultRetryAfter = %v, want guide §7's 60 s", policies.RestatementDefaultRetryAfter)
	}
	if got := Builtin()[0].DefaultRetryAfter; got != policies.RestatementDefaultRetryAfter {
		t.Errorf("agentrouter default Retry-After = %v, want guide §7's 60 s", got)
	}
	// Builtin hands out copies: changing one cannot change the table.
	b := Builtin()
	b[0].TextMarkers[0] = "x"
	if Builtin()[0].TextMarkers[0] != "额度不足" {
		t.Error("Builtin shares its slices")
	}
}

func TestOperatorRules(t *testing.T) {
	table, err := New([]Rule{
		{ // a gateway that reports its daily cap as 503
			ID: "acme-daily-cap", Provider: "acme", FromStatuses: []int{503}, ToStatus: 429,
			TextMarkers: []string{"Daily Cap Reached"}, ExcludeMarkers: []string{"permanent"},
			DefaultRetryAfter: 5 * time.Minute,
		},
		{ // no defaultRetryAfter: guide §7's 60 s
			ID: "acme-402", Provider: "acme", FromStatuses: []int{402}, ToStatus: 429,
			TextMarkers: []string{"try later"},
		},
		{ // no text markers: any body of that provider and status
			ID: "acme-418", Provider: "acme", FromStatuses: []int{418}, ToStatus: 503,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string        // what the row shows
		provider   string        // provider id
		status     int           // upstream status
		body       string        // upstream body
		ruleID     string        // expected rule, "" = not restated
		retryAfter time.Duration // expected advertised Retry-After
	}{
		{"marker matched case-insensitively", "ACME", 503, `{"error":"daily cap reached"}`, "acme-daily-cap", 5 * time.Minute},
		{"exclude marker vetoes", "acme", 503, `daily cap reached (permanent)`, "", 0},
		{"zero default → guide default", "acme", 402, `please try later`, "acme-402", policies.RestatementDefaultRetryAfter},
		{"no markers: any body", "acme", 418, `I'm a teapot`, "acme-418", policies.RestatementDefaultRetryAfter},
		{"no markers: empty body too", "acme", 418, ``, "acme-418", policies.RestatementDefaultRetryAfter},
		{"built-ins still apply", "agentrouter", 403, agentrouterQuota, AgentrouterQuotaRuleID, 60 * time.Second},
		{"OpenAI insufficient_quota is never restated", "openai", 429, openAIInsufficientQuot, "", 0},
	}
	for _, c := range cases {
		got := table.Apply(c.provider, c.status, nil, []byte(c.body), now, nil)
		if got.RuleID != c.ruleID || got.Restated != (c.ruleID != "") || got.RetryAfter != c.retryAfter {
			t.Errorf("%s: got %+v, want rule %q retry-after %v", c.name, got, c.ruleID, c.retryAfter)
		}
		if got.Restated && got.Status != 429 && got.Status != 503 {
			t.Errorf("%s: status %d, want the rule's toStatus", c.name, got.Status)
		}
	}
}

func TestOperatorRuleReplacesBuiltinByID(t *testing.T) {
	table, err := New([]Rule{{
		ID: AgentrouterQuotaRuleID, Provider: "agentrouter", FromStatuses: []int{403}, ToStatus: 429,
		TextMarkers: []string{"额度不足"}, ExcludeMarkers: []string{"无权访问"}, DefaultRetryAfter: 2 * time.Minute,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(table.Rules()); n != 1 {
		t.Fatalf("table has %d rules, want the replacement only", n)
	}
	if got := table.Apply("agentrouter", 403, nil, []byte(agentrouterQuota), now, nil); got.RetryAfter != 2*time.Minute {
		t.Errorf("replacement not applied: %+v", got)
	}
	if got := table.Apply("agentrouter", 400, nil, []byte(agentrouterQuota), now, nil); got.Restated {
		t.Errorf("the replaced built-in still restates 400: %+v", got)
	}
}

func TestNewRejectsInvalidRules(t *testing.T) {
	valid := Rule{ID: "r", Provider: "p", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: []string{"m"}}
	cases := []struct {
		name   string      // what is wrong
		mutate func(*Rule) // how the valid rule is broken
		errHas string      // a fragment the error must hold
	}{
		{"empty id", func(r *Rule) { r.ID = "" }, "id must be"},
		{"long id", func(r *Rule) { r.ID = strings.Repeat("x", 200) }, "id must be"},
		{"empty provider", func(r *Rule) { r.Provider = "" }, "provider must be"},
		{"no fromStatuses", func(r *Rule) { r.FromStatuses = nil }, "fromStatuses must list"},
		{"2xx fromStatus", func(r *Rule) { r.FromStatuses = []int{200} }, "outside 400..599"},
		{"fromStatus equals toStatus", func(r *Rule) { r.FromStatuses = []int{429} }, "toStatus itself"},
		{"toStatus 200", func(r *Rule) { r.ToStatus = 200 }, "toStatus 200"},
		{"toStatus 600", func(r *Rule) { r.ToStatus = 600 }, "toStatus 600"},
		{"empty marker", func(r *Rule) { r.TextMarkers = []string{""} }, "textMarkers[0]"},
		{"long exclude marker", func(r *Rule) { r.ExcludeMarkers = []string{strings.Repeat("x", 300)} }, "excludeMarkers[0]"},
		{"too many markers", func(r *Rule) { r.TextMarkers = make([]string, 17) }, "at most 16"},
		{"negative retry-after", func(r *Rule) { r.DefaultRetryAfter = -time.Second }, "defaultRetryAfter"},
		{"huge retry-after", func(r *Rule) { r.DefaultRetryAfter = 48 * time.Hour }, "defaultRetryAfter"},
	}
	for _, c := range cases {
		r := valid
		r.FromStatuses = append([]int(nil), valid.FromStatuses...)
		c.mutate(&r)
		_, err := New([]Rule{r})
		if err == nil || !strings.Contains(err.Error(), c.errHas) || !strings.HasPrefix(err.Error(), "restate: ") {
			t.Errorf("%s: err = %v, want one holding %q", c.name, err, c.errHas)
		}
	}
	if _, err := New([]Rule{valid, valid}); err == nil || !strings.Contains(err.Error(), "duplicate id") {
		t.Errorf("duplicate ids: err = %v", err)
	}
	many := make([]Rule, MaxRules+1)
	for i := range many {
		many[i] = valid
		many[i].ID = strings.Repeat("r", i+1)
	}
	if _, err := New(many); err == nil {
		t.Error("more than MaxRules accepted")
	}
}

func TestNewCopiesOperatorSlices(t *testing.T) {
	markers := []string{"quota"}
	table, err := New([]Rule{{ID: "r", Provider: "p", FromStatuses: []int{403}, ToStatus: 429, TextMarkers: markers}})
	if err != nil {
		t.Fatal(err)
	}
	markers[0] = "changed"
	if !table.Apply("p", 403, nil, []byte("quota"), now, nil).Restated {
		t.Error("the table aliases the caller's marker slice")
	}
}

func FuzzApply(f *testing.F) {
	for _, s := range []string{agentrouterUserQuota, agentrouterNoAccess, agentrouterEscaped, "", `\u`, "\xe9\xa2"} {
		f.Add("agentrouter", 403, []byte(s), "15")
	}
	table := Default()
	f.Fuzz(func(t *testing.T, provider string, status int, body []byte, retryAfter string) {
		got := table.Apply(provider, status, [][2]string{{"Retry-After", retryAfter}}, body, now, nil)
		if got.FromStatus != status {
			t.Fatalf("FromStatus %d, want %d", got.FromStatus, status)
		}
		if !got.Restated {
			if got.Status != status || got.RuleID != "" || got.RetryAfter != 0 {
				t.Fatalf("not restated but changed: %+v", got)
			}
			return
		}
		if got.Status != 429 || got.RetryAfter <= 0 {
			t.Fatalf("restated badly: %+v", got)
		}
	})
}

func BenchmarkApplyNonMatchingProvider(b *testing.B) {
	table := Default()
	body := []byte(openAIInsufficientQuot)
	b.ReportAllocs()
	for b.Loop() {
		if table.Apply("openai", 429, nil, body, now, nil).Restated {
			b.Fatal("restated")
		}
	}
}

func BenchmarkApplyNonMatchingBody(b *testing.B) {
	// Provider and status select the agentrouter rule; the body has no marker.
	table := Default()
	body := []byte(agentrouterOtherError)
	b.ReportAllocs()
	for b.Loop() {
		if table.Apply("agentrouter", 403, nil, body, now, nil).Restated {
			b.Fatal("restated")
		}
	}
}

func BenchmarkApplyMatching(b *testing.B) {
	table := Default()
	body := []byte(agentrouterUserQuota)
	b.ReportAllocs()
	for b.Loop() {
		if !table.Apply("agentrouter", 403, nil, body, now, nil).Restated {
			b.Fatal("not restated")
		}
	}
}

// TestAnEchoedTextMarkerDoesNotRestate: a textMarker the client sent, echoed back in the
// error, does not count (classify's package doc, "Echoes"); an excludeMarker vetoes whoever
// wrote it.
func TestAnEchoedTextMarkerDoesNotRestate(t *testing.T) {
	table := Default()
	echoing := `{"error":{"message":"invalid parameter 'user': 用户额度不足","type":"new_api_error"}}`
	cases := []struct {
		name     string // what the row shows
		body     string // the 403's error body
		sent     string // the request body the client sent
		restated bool   // restated to 429
	}{
		{"the marker echoed from the request", echoing, `{"user":"用户额度不足"}`, false},
		{"the marker \\u-escaped in the request", echoing, `{"user":"\u7528\u6237\u989d\u5ea6\u4e0d\u8db3"}`, false},
		{"control: the marker is the gateway's", echoing, `{"user":"u1"}`, true},
		{"control: the gateway's own quota text", agentrouterUserQuota, `{"messages":[]}`, true},
		{"an echoed exclude marker still vetoes", `{"error":{"message":"额度不足; unknown field '无权访问'"}}`, `{"无权访问":1}`, false},
	}
	for _, c := range cases {
		echo := textscan.NewEcho(textscan.Sent{Body: []byte(c.sent)})
		if got := table.Apply("agentrouter", 403, nil, []byte(c.body), now, &echo); got.Restated != c.restated {
			t.Errorf("%s: restated %v, want %v", c.name, got.Restated, c.restated)
		}
	}
}
