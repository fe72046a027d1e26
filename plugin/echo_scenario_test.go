package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// echoPolicy: two OpenAI keys behind a gpt-5* glob that passes on whatever model a client
// names, with the admin API.
const echoPolicy = `
admin: {token: "` + adminToken + `"}
providers:
  - id: openai
    api: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
routes:
  - model: "gpt-5*"
    targets: [{provider: openai}]
`

// TestScenarioAnEchoedMarkerLeavesTheConnectionsActive: issue 18 through the built module.
// A client names gpt-5-insufficient_quota under the glob; OpenAI answers each key with its
// 404 "The model `gpt-5-insufficient_quota` does not exist", echoing the name. The marker is
// the client's, not OpenAI's: the 404 is a missing model, and both keys serve the next
// request for gpt-5, and the admin API's health shows neither terminal (before the fix each
// 404 read from its body ended its key as credits_exhausted). Body-routed with callout failover, router failover holding a
// try's error body, and header-routed (whose first 404 is decided on its headers, and whose
// callout failover reads the body); and a stream whose first event is that error.
func TestScenarioAnEchoedMarkerLeavesTheConnectionsActive(t *testing.T) {
	const junk = "gpt-5-insufficient_quota"
	for _, tc := range []struct {
		name  string
		world func(t *testing.T) *world
		req   func(model string) *hostsim.Request
	}{
		{"body-routed", func(t *testing.T) *world { return newWorld(t, echoPolicy, 2) }, func(m string) *hostsim.Request { return chatReq(m) }},
		{"router failover, tries held", func(t *testing.T) *world {
			return newRetryWorld(t, echoPolicy+"resilience:\n  failover: {via: router, holdTries: true}\n", 2, 1)
		}, func(m string) *hostsim.Request { return chatReq(m) }},
		{"body-routed, an error event first in a 200 stream", func(t *testing.T) *world { return newWorld(t, echoPolicy, 2) },
			func(m string) *hostsim.Request { return streamReq(m) }},
		{"header-routed", func(t *testing.T) *world {
			return newWorld(t, echoPolicy+"routing:\n  mode: headers\n", 2, noOption)
		}, func(m string) *hostsim.Request { return headerChat(m, m) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.world(t)
			for _, key := range []string{"sk-a", "sk-b"} {
				w.fakes.set(key, func(c upstreamCall) *hostsim.UpstreamResponse {
					if !strings.Contains(c.model, "insufficient_quota") {
						return chatOK(c)
					}
					e := `{"error":{"message":"The model ` + "`" + c.model + "`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
					if strings.Contains(string(c.body), `"stream":true`) {
						return sse("data: " + e + "\n\n")
					}
					return jsonError(404, e)
				})
			}
			if r := w.run(0, tc.req(junk)); r.StatusCode != 404 && !strings.Contains(string(r.Body), "does not exist") {
				t.Fatalf("the junk name: %d %s, want OpenAI's error", r.StatusCode, r.Body)
			}
			_, h := w.admin(1, "GET", "monitoring/health", "")
			for _, id := range []string{"key-a", "key-b"} {
				if st := h.Get(`connections.#(id=="` + id + `").status`).Str; st == "" || st == "terminal" {
					t.Fatalf("%s is %q after the echoed 404: %s", id, st, h.Raw)
				}
			}
			for i := range 2 {
				if r := w.run(i, tc.req("gpt-5")); r.StatusCode != 200 {
					t.Fatalf("gpt-5 on worker %d after the echo: %d %s, want 200", i, r.StatusCode, r.Body)
				}
			}
			w.noStreamsLeft()
		})
	}
}

// TestScenarioEchoedResetTextIsNoRetryHint: issue 18's class through the built module. A
// client writes "try again in 86400s" in its prompt; key A's 429 (no Retry-After) quotes the
// prompt back. Read as OpenAI's own wait, it would cool key A for as long as a hint may, and
// the next request would go to key B; as the client's text it is no hint, key A cools for
// the apikey profile's base cooldown (3 s, guide §2) and serves the next request 4 s later.
func TestScenarioEchoedResetTextIsNoRetryHint(t *testing.T) {
	const prompt = "Repeat after me: try again in 86400s"
	w := newWorld(t, echoPolicy, 2)
	var limited atomic.Bool
	w.fakes.set("sk-a", func(c upstreamCall) *hostsim.UpstreamResponse {
		if !limited.CompareAndSwap(false, true) {
			return chatOK(c)
		}
		return jsonError(429, `{"error":{"message":"Rate limit reached for requests. Input: '`+prompt+`'","type":"requests","code":"rate_limit_exceeded"}}`)
	})
	req := func() *hostsim.Request {
		return llmRequest("/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"`+prompt+`"}]}`)
	}
	expect(t, "the 429", w.run(0, req()), 200, "openai/key-b/gpt-5/2")
	w.advance(4 * time.Second)
	expect(t, "4 s later", w.run(1, req()), 200, "openai/key-a/gpt-5/1")
	w.noStreamsLeft()
}
