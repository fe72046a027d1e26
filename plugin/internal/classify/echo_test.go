package classify

import (
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/errorrules"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

// openAIModel404 is OpenAI's answer to a model it does not know, echoing the name as sent
// (the shape of openAIModelNotFound).
func openAIModel404(model string) string {
	return `{"error":{"message":"The model ` + "`" + model + "`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
}

// chatBody is an OpenAI chat request for model (a JSON-quoted string as the client wrote it).
func chatBody(quotedModel string) []byte {
	return []byte(`{"model":` + quotedModel + `,"messages":[{"role":"user","content":"hi"}]}`)
}

// Verdicts the probes end in, as classification documents them (package doc; guide §2).
var (
	modelOnly404 = failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}
	credits404   = failure.Verdict{Status: 404, Reason: failure.ReasonCreditsExhausted, Fallback: true, Scope: failure.ScopeConnection,
		Terminal: failure.TerminalCreditsExhausted}
	banned404 = failure.Verdict{Status: 404, Reason: failure.ReasonBanned, Fallback: true, Scope: failure.ScopeConnection,
		Terminal: failure.TerminalBanned}
)

// TestAnEchoedMarkerIsNoEvidence: the four probes of issue 18 (a colleague's, through the
// built module) and OpenAI's enum echo. A marker the client sent, echoed back in the error,
// no longer decides: the 404 is the model-not-found it is without the phrase. The controls
// are the same bodies where the client did not send the phrase: still terminal.
func TestAnEchoedMarkerIsNoEvidence(t *testing.T) {
	c := New(nil, nil)
	roleEcho := `{"error":{"message":"'insufficient_quota' is not one of ['system', 'assistant', 'user', 'tool', 'function'] - 'messages.0.role'","type":"invalid_request_error","param":null,"code":null}}`
	cases := []struct {
		name   string          // what the row shows
		status int             // the provider's status
		body   string          // its error body
		sent   textscan.Sent   // what the client sent
		want   failure.Verdict // the verdict
	}{
		{"model gpt-5-insufficient_quota: model not found, as gpt-5-turbo is", 404, openAIModel404("gpt-5-insufficient_quota"),
			textscan.Sent{Body: chatBody(`"gpt-5-insufficient_quota"`)}, modelOnly404},
		{"model 'gpt-5 payment required'", 404, openAIModel404("gpt-5 payment required"),
			textscan.Sent{Body: chatBody(`"gpt-5 payment required"`)}, modelOnly404},
		{"model 'gpt-5 The free tier of the model has been exhausted'", 404, openAIModel404("gpt-5 The free tier of the model has been exhausted"),
			textscan.Sent{Body: chatBody(`"gpt-5 The free tier of the model has been exhausted"`)}, modelOnly404},
		{"model 'gpt-5 your account has been suspended': not banned", 404, openAIModel404("gpt-5 your account has been suspended"),
			textscan.Sent{Body: chatBody(`"gpt-5 your account has been suspended"`)}, modelOnly404},
		{"the name \\u-escaped in the request, echoed decoded", 404, openAIModel404("gpt-5-insufficient_quota"),
			textscan.Sent{Body: chatBody(`"gpt-5-\u0069nsufficient_quota"`)}, modelOnly404},
		{"the name in upper case, echoed as sent", 404, openAIModel404("GPT-5-INSUFFICIENT_QUOTA"),
			textscan.Sent{Body: chatBody(`"GPT-5-INSUFFICIENT_QUOTA"`)}, modelOnly404},
		{"header-routed, before the body: the model header alone", 404, openAIModel404("gpt-5 your account has been suspended"),
			textscan.Sent{Model: "gpt-5 your account has been suspended"}, modelOnly404},
		{"an invalid role echoed: the client's bad request, no fallback", 400, roleEcho,
			textscan.Sent{Body: []byte(`{"model":"gpt-5","messages":[{"role":"insufficient_quota","content":"hi"}]}`)},
			failure.Verdict{Status: 400, Reason: failure.ReasonBadRequest}},
		{"a header value echoed (an organization header)", 401,
			`{"error":{"message":"No such organization: org-insufficient_quota.","type":"invalid_request_error","param":null,"code":"invalid_organization"}}`,
			textscan.Sent{Body: chatBody(`"gpt-5"`), Headers: [][2]string{{"openai-organization", "org-insufficient_quota"}}},
			failure.Verdict{Status: 401, Reason: failure.ReasonAuthError, Fallback: true, Scope: failure.ScopeConnection}},
		// Controls: the phrase is the provider's own.
		{"control: insufficient_quota not sent", 404, openAIModel404("gpt-5-insufficient_quota"),
			textscan.Sent{Body: chatBody(`"gpt-5"`)}, credits404},
		{"control: payment required not sent", 404, openAIModel404("gpt-5 payment required"),
			textscan.Sent{Body: chatBody(`"gpt-5"`)}, credits404},
		{"control: the free tier not sent", 404, openAIModel404("gpt-5 The free tier of the model has been exhausted"),
			textscan.Sent{Body: chatBody(`"gpt-5"`)}, credits404},
		{"control: suspended not sent", 404, openAIModel404("gpt-5 your account has been suspended"),
			textscan.Sent{Body: chatBody(`"gpt-5"`)}, banned404},
		{"control: nothing known of the request", 404, openAIModel404("gpt-5-insufficient_quota"), textscan.Sent{}, credits404},
		// Narrowing wording counts whoever wrote it: every request body holds "model", and a
		// 404 naming the model stays model-only.
		{"Anthropic's not_found_error names the model; the body's \"model\" key changes nothing", 404,
			`{"type":"error","error":{"type":"not_found_error","message":"model: claude-x"}}`,
			textscan.Sent{Body: []byte(`{"model":"claude-x","max_tokens":5,"messages":[]}`)},
			failure.Verdict{Status: 404, Reason: failure.ReasonNotFound, Fallback: true, Scope: failure.ScopeModel, ModelOnly: true}},
		{"a planted 'does not exist' does not widen a genuine model-only 404", 404,
			`{"error":{"message":"The model ` + "`gpt-5 does not exist`" + ` does not exist","type":"invalid_request_error"}}`,
			textscan.Sent{Body: chatBody(`"gpt-5 does not exist"`)}, modelOnly404},
		// The trade-off (package doc): a genuine account error whose phrase the client also
		// sent loses its terminal state for that response.
		{"trade-off: a genuine insufficient_quota 429 whose prompt names insufficient_quota", 429, openAIInsufficientQuota,
			textscan.Sent{Body: []byte(`{"model":"gpt-5","messages":[{"role":"user","content":"What does insufficient_quota mean?"}]}`)},
			failure.Verdict{Status: 429, Reason: failure.ReasonRateLimit, Fallback: true, Scope: failure.ScopeQuotaFamily}},
	}
	for _, tc := range cases {
		got, _ := c.Classify(Input{Provider: "openai", Profile: apikey, Status: tc.status, Body: []byte(tc.body), Now: now, Sent: tc.sent})
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

// TestAnEchoedMultiFragmentSignalIsNoEvidence: a signal of several fragments counts only if
// the client sent none of them — here Google's expired API key on a 400, a credential
// failure of the connection, whose "expired" the client's prompt supplied.
func TestAnEchoedMultiFragmentSignalIsNoEvidence(t *testing.T) {
	c := New(nil, nil)
	body := `{"error":{"code":400,"message":"Invalid value at 'contents[0].parts[0].text' (TYPE_STRING), \"my coupon expired\": API key format","status":"INVALID_ARGUMENT"}}`
	in := Input{Provider: "gemini", Profile: apikey, Status: 400, Body: []byte(body), Now: now}
	if v, _ := c.Classify(in); v.Reason != failure.ReasonAuthError {
		t.Fatalf("control, nothing known of the request: %+v, want auth_error (api key + expired)", v)
	}
	in.Sent = textscan.Sent{Body: []byte(`{"contents":[{"parts":[{"text":"my coupon expired"}]}]}`)}
	if v, _ := c.Classify(in); v != (failure.Verdict{Status: 400, Reason: failure.ReasonBadRequest}) {
		t.Fatalf("with the prompt's 'expired' echoed: %+v, want the client's bad request", v)
	}
}

// TestEchoedRuleMarkersAreNoEvidence: a restatement's textMarker and a provider rule's marker
// the client sent do not count; an exclude marker vetoes whoever wrote it.
func TestEchoedRuleMarkersAreNoEvidence(t *testing.T) {
	rules, err := errorrules.New([]errorrules.Rule{{ID: "acme-locked", Provider: "acme", Markers: []string{"account locked"},
		ExcludeMarkers: []string{"temporarily"}, Reason: failure.ReasonBanned}})
	if err != nil {
		t.Fatal(err)
	}
	c := New(nil, rules)
	// agentrouter's 额度不足 (quota exhausted) on a 403 is restated to 429 and is a quota
	// by its built-in rule; the same bytes echoed from the client's prompt are neither.
	agentrouterEcho := `{"error":{"message":"invalid parameter 'user': 用户额度不足","type":"new_api_error"}}`
	acmeEcho := `{"error":{"message":"unknown tool 'account locked'","type":"invalid_request"}}`
	cases := []struct {
		name       string        // what the row shows
		provider   string        // provider id
		status     int           // upstream status
		body       string        // error body
		sent       textscan.Sent // what the client sent
		restatedTo int           // the restated status (0: not restated)
		reason     failure.Reason
		terminal   failure.Terminal
	}{
		{"restatement marker echoed: not restated, a plain 403", "agentrouter", 403, agentrouterEcho,
			textscan.Sent{Body: []byte(`{"user":"用户额度不足"}`)}, 0, failure.ReasonAuthError, failure.TerminalNone},
		{"control: the restatement marker is the provider's", "agentrouter", 403, agentrouterEcho,
			textscan.Sent{Body: []byte(`{"user":"u1"}`)}, 429, failure.ReasonQuotaExhausted, failure.TerminalNone},
		{"operator rule marker echoed: not banned", "acme", 400, acmeEcho,
			textscan.Sent{Body: []byte(`{"tools":[{"name":"account locked"}]}`)}, 0, failure.ReasonBadRequest, failure.TerminalNone},
		{"control: the operator rule marker is the provider's", "acme", 400, acmeEcho,
			textscan.Sent{Body: []byte(`{"tools":[]}`)}, 0, failure.ReasonBanned, failure.TerminalBanned},
		{"an echoed exclude marker still vetoes (it can only withdraw the rule)", "acme", 403,
			`{"error":{"message":"account locked; unknown field 'temporarily'"}}`,
			textscan.Sent{Body: []byte(`{"temporarily":1}`)}, 0, failure.ReasonAuthError, failure.TerminalNone},
	}
	for _, tc := range cases {
		v, rs := c.Classify(Input{Provider: tc.provider, Profile: apikey, Status: tc.status, Body: []byte(tc.body), Now: now, Sent: tc.sent})
		restatedTo := 0
		if rs.Restated {
			restatedTo = rs.Status
		}
		if restatedTo != tc.restatedTo || v.Reason != tc.reason || v.Terminal != tc.terminal {
			t.Errorf("%s: restated to %d, %+v; want restated to %d, %s, terminal %q", tc.name, restatedTo, v, tc.restatedTo, tc.reason, tc.terminal)
		}
	}
}

// TestEverySignalFragmentFitsTheEchoLookUp: a fragment longer than textscan.MaxNeedleBytes
// would be taken as sent unread, and never count.
func TestEverySignalFragmentFitsTheEchoLookUp(t *testing.T) {
	for _, list := range evidenceSignals() {
		for _, s := range list {
			for _, f := range s {
				if len(f) > textscan.MaxNeedleBytes || f == "" || strings.ToLower(f) != f {
					t.Errorf("fragment %q", f)
				}
			}
		}
	}
}

// evidenceSignals are the signal lists the echo check applies to (classify.go calls shows on
// them); the narrowing ones are left out, as the package doc says.
func evidenceSignals() [][]signal {
	return [][]signal{banSignals, creditSignals, expiredSignals, requestRejectedSignals, dailyQuotaSignals,
		subscriptionSignals, quotaSignals, capacitySignals, quotaWordSignals, concurrencySignals, credentialSignals,
		rateLimitSignals}
}
