package main

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
)

// lockoutGlobPolicy: Anthropic with claude-sonnet-4-5 routed by name and a claude-* glob
// that passes on whatever model a client names, with model lockout on.
const lockoutGlobPolicy = `
providers:
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}
routes:
  - model: claude-sonnet-4-5
    targets: [{provider: anthropic}]
  - model: "claude-*"
    targets: [{provider: anthropic}]
resilience: {modelLockout: {enabled: true}}
`

// TestScenarioAClientChosenNameCannotLockARealModel: issue 18 through the built module. A
// client asks the glob for claude-x/claude-sonnet-4-5 and Anthropic answers 404 not_found.
// Guide §3 would lock the bare model, claude-sonnet-4-5, for 120 s for every client; a name
// with no evidence that it is real locks only itself (the lockout package doc), so the real
// model — routed by name, or only served through the glob — still goes to Anthropic from
// another worker, while the junk name, locked, is not sent again.
func TestScenarioAClientChosenNameCannotLockARealModel(t *testing.T) {
	const real, junk = "claude-sonnet-4-5", "claude-x/claude-sonnet-4-5"
	messages := func(model string) *hostsim.Request {
		return llmRequest("/v1/messages", `{"model":"`+model+`","max_tokens":5,"messages":[]}`)
	}
	globOnly := strings.Replace(lockoutGlobPolicy, "  - model: claude-sonnet-4-5\n    targets: [{provider: anthropic}]\n", "", 1)
	for _, tc := range []struct {
		name   string
		policy string
		served bool // the real model served a request first (on worker 0)
	}{
		{"configured on its own route", lockoutGlobPolicy, false},
		{"served only through the glob", globOnly, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.policy, 2)
			w.fakes.set("sk-ant", func(c upstreamCall) *hostsim.UpstreamResponse {
				if c.model == junk {
					return jsonError(404, `{"type":"error","error":{"type":"not_found_error","message":"model: `+junk+`"}}`)
				}
				return chatOK(c)
			})
			if tc.served {
				expect(t, "the real model served", w.run(0, messages(real)), 200, "anthropic/ant-a/"+real+"/1")
			}
			if r := w.run(0, messages(junk)); r.StatusCode != 404 {
				t.Fatalf("the junk name: %d %s, want the provider's 404", r.StatusCode, r.Body)
			}
			expect(t, "the real model after the junk 404", w.run(1, messages(real)), 200, "anthropic/ant-a/"+real+"/1")
			// Guide §3: the junk name's own lockout, 120 s, answered at once (not-found is
			// never waited on).
			r := w.run(1, messages(junk))
			x := gjson.GetBytes(r.Body, "error.diagnostics.excluded")
			if r.StatusCode != 503 || errorCode(r) != "all_targets_cooling_down" || len(x.Array()) != 1 ||
				x.Get("0.model").Str != junk || x.Get("0.reason").Str != "model_lockout" || x.Get("0.retryAfterSeconds").Int() != 120 {
				t.Fatalf("the junk name again: %d %s, want 503 with its own 120 s model lockout", r.StatusCode, r.Body)
			}
			sent := map[string]int{}
			for _, c := range w.fakes.received() {
				sent[c.model]++
			}
			if want := 1; sent[junk] != want {
				t.Fatalf("Anthropic received the junk name %d times, want %d (then locked out)", sent[junk], want)
			}
			w.noStreamsLeft()
		})
	}
}
