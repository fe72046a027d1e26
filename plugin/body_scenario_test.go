package main

// Hostile request bodies on build/spillway.wasm (issue 18): a body nested far deeper than any
// request needs, and bodies whose routing keys appear twice in some spelling. Each is
// answered 400 invalid_request before anything reaches an upstream, and the VM that read it
// goes on routing.

import (
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
)

// deepBody is the audit's body: a key and then n array openings, never closed, no model.
func deepBody(n int) string { return `{"x":` + strings.Repeat("[", n) }

func TestScenarioADeeplyNestedBodyIsRefusedAndTheVMGoesOn(t *testing.T) {
	bodies := []struct {
		name string // the shape
		body string // the request body
	}{
		{"700,000 unclosed [", deepBody(700_000)},
		{`700,000 unclosed {"a":`, `{"x":` + strings.Repeat(`{"a":`, 700_000)},
		{"400,000 closed [ then a model", deepBody(400_000) + strings.Repeat("]", 400_000) + `,"model":"gpt-4o"}`},
	}
	// The proxy buffers up to the policy's maxRequestBodyBytes (8 MiB by default), as the
	// bootstrap render envoy writes does.
	w := newWorld(t, scenarioPolicy, 1, hostsim.WithBufferLimit(8<<20))
	for _, b := range bodies {
		resp := w.run(0, llmRequest("/v1/chat/completions", b.body))
		if err := w.host.Host.Worker(0).Err(); err != nil {
			t.Fatalf("%s: the VM failed: %v", b.name, err)
		}
		if resp.StatusCode != 400 || errorCode(resp) != "invalid_request" {
			t.Fatalf("%s: %d %.200s, want 400 invalid_request", b.name, resp.StatusCode, resp.Body)
		}
		// The same VM routes the next request.
		expect(t, b.name+", then a chat", w.run(0, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	}
	if n := len(w.fakes.received()); n != len(bodies) {
		t.Fatalf("%d upstream calls, want only the %d chats", n, len(bodies))
	}
	w.noStreamsLeft()
}

// duplicateBodies are bodies whose top-level object names a routing key twice: the first
// model is one the policy routes, the second another (which an upstream that reads the
// last key would run).
var duplicateBodies = []struct {
	name string // the spelling
	body string // the request body
}{
	{"model twice", `{"model":"gpt-4o","model":"claude-opus-4"}`},
	{"the second escaped", `{"model":"gpt-4o","mod\u0065l":"claude-opus-4"}`},
	{"the first escaped", `{"\u006dodel":"gpt-4o","model":"claude-opus-4"}`},
	{"the second in capitals", `{"model":"gpt-4o","MODEL":"claude-opus-4"}`},
	{"stream twice", `{"model":"gpt-4o","stream":false,"stream":true}`},
	{"after a large value", `{"model":"gpt-4o","messages":[{"role":"user","content":"` +
		strings.Repeat("hello ", 10_000) + `"}],"model":"claude-opus-4"}`},
}

func TestScenarioARoutingKeyGivenTwiceIsRefused(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	for _, b := range duplicateBodies {
		resp := w.run(0, llmRequest("/v1/chat/completions", b.body))
		if resp.StatusCode != 400 || errorCode(resp) != "invalid_request" {
			t.Errorf("%s: %d %.200s, want 400 invalid_request", b.name, resp.StatusCode, resp.Body)
		}
	}
	if n := len(w.fakes.received()); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
	w.noStreamsLeft()
}

func TestHeaderModeRefusesABodyThatGivesItsModelTwice(t *testing.T) {
	w, router := newRouterWorld(t, headerPolicy, 1, noOption)
	for _, b := range duplicateBodies {
		req := llmRequest("/v1/chat/completions", b.body, modelHeader("gpt-4o"))
		resp := w.run(0, req)
		if resp.StatusCode != 400 || errorCode(resp) != "invalid_request" {
			t.Errorf("%s: %d %.200s, want 400 invalid_request", b.name, resp.StatusCode, resp.Body)
		}
	}
	if n := len(w.fakes.received()); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
	if n := len(router.all()); n != len(duplicateBodies) {
		t.Fatalf("the router saw %d requests, want %d (header mode sends the headers on first)", n, len(duplicateBodies))
	}
	w.noStreamsLeft()
}
