package main

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Issue 19's provider errors through the built module (the guide is silent; Spillway follows
// OmniRoute 3.7.9): each request is the scenario policy's gpt-4o, key A first, key B next.

// A 403 whose body says the free tier is exhausted is credits_exhausted, terminal: the
// request fails over to key B, and key A gets nothing more, an hour later either.
func TestScenarioACreditsExhausted403EndsTheKey(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(403, `{"error":{"message":"The free tier of the model has been exhausted","type":"AccessDenied"}}`)
	})
	expect(t, "the failing request", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	for _, after := range []time.Duration{time.Second, time.Minute, time.Hour} {
		w.advance(after)
		expect(t, "after "+after.String(), w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	}
	if n := w.fakes.count("sk-a"); n != 1 {
		t.Fatalf("key A got %d requests, want only the first: credits exhausted is terminal", n)
	}
	w.noStreamsLeft()
}

// A 4xx no rule names (418) is no longer the client's fault: the request fails over, and
// key A cools for the apikey base cooldown (3 s, guide §2's default) each time, never
// climbing.
func TestScenarioAnUnlisted4xxFallsBackAndCoolsForTheBaseCooldown(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(418, `{"error":{"message":"I'm a teapot"}}`)
	})
	for round := range 3 {
		expect(t, "the 418's request", w.run(round%2, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
		w.advance(2900 * time.Millisecond)
		expect(t, "within the 3 s", w.run(1-round%2, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
		w.advance(200 * time.Millisecond) // past the 3 s again: no escalation to 6 s
		if n := w.fakes.count("sk-a"); n != round+1 {
			t.Fatalf("round %d: key A got %d requests, want %d", round, n, round+1)
		}
	}
	w.noStreamsLeft()
}

// Spillway's own breaker-open 503 carries x-spillway-breaker: open; a provider's own error
// passed to the client does not.
func TestScenarioTheBreakerOpenReplyIsMarked(t *testing.T) {
	w := newWorld(t, stormPolicy, 1)
	for _, k := range []string{"st-1", "st-2", "st-3"} {
		w.fakes.set(k, func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(503, `{"error":{"message":"upstream unavailable","type":"server_error"}}`)
		})
	}
	provider := w.run(0, chatReq("storm-model")) // three 503s open the breaker
	if provider.StatusCode != 503 || errorCode(provider) == "provider_circuit_open" || header(provider.Headers, "x-spillway-breaker") != "" {
		t.Fatalf("the provider's own 503: %d %s %v", provider.StatusCode, provider.Body, provider.Headers)
	}
	open := w.run(0, chatReq("storm-model"))
	if open.StatusCode != 503 || errorCode(open) != "provider_circuit_open" || header(open.Headers, "x-spillway-breaker") != "open" {
		t.Fatalf("while OPEN: %d %s %v, want provider_circuit_open with x-spillway-breaker: open", open.StatusCode, open.Body, open.Headers)
	}
	w.noStreamsLeft()
}
