package main

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// Two WasmPlugins in one proxy (Istio sets no vm_id: one shared-data map) whose policies
// name one upstream account differently: A's provider openai, key a1, cap 1; B's provider
// oai, key b-main, cap 3; the same cluster and the same credential. Neither waits out a
// cooldown (comboCooldownWait off), so a cooled key is answered at once.
const (
	sharedKeyA = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: a1, credential: {header: authorization, value: "Bearer sk-shared"}, maxConcurrent: 1}
routes:
  - model: gpt-4o
    targets: [{provider: openai, connection: a1}]
resilience: {comboCooldownWait: {enabled: false}}
`
	sharedKeyB = `
providers:
  - id: oai
    cluster: openai
    connections:
      - {id: b-main, credential: {header: authorization, value: "Bearer sk-shared"}, maxConcurrent: 3}
routes:
  - model: gpt-4o
    targets: [{provider: oai, connection: b-main}]
resilience: {comboCooldownWait: {enabled: false}}
`
)

// pluginB is policy B as a second plugin, named as Istio names a WasmPlugin.
func pluginB(t *testing.T) hostsim.PluginConfig {
	t.Helper()
	config, err := policyfile.ToJSON([]byte(sharedKeyB))
	if err != nil {
		t.Fatal(err)
	}
	return hostsim.PluginConfig{Name: "team-b.spillway", Configuration: config}
}

// forB sends a request through plugin B's filter.
func forB(r *hostsim.Request) *hostsim.Request { r.Plugin = "team-b.spillway"; return r }

// rateLimitFor20s answers 429 with Retry-After 20 s for the next 20 s of virtual time, then
// 200.
func rateLimitFor20s(w *world) {
	until := w.host.Clock().Now().Add(20 * time.Second)
	w.fakes.set("sk-shared", func(c upstreamCall) *hostsim.UpstreamResponse {
		if c.at.Before(until) {
			return jsonError(429, `{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`, [2]string{"retry-after", "20"})
		}
		return chatOK(c)
	})
}

// Both plugins on one VM (WithPlugin): a 429 through A cools the key for B, which sends it
// nothing until the Retry-After has passed; in flight, B's three requests hold the key
// against A's cap of 1, and A's waiter goes the moment they end (B's release wakes it).
func TestScenarioTwoPluginsShareOneKeysAccount(t *testing.T) {
	w := newWorld(t, sharedKeyA, 1, hostsim.WithPluginName("istio-system.spillway"), hostsim.WithPlugin(pluginB(t)))
	rateLimitFor20s(w)
	if r := w.run(0, chatReq("gpt-4o")); r.StatusCode != 429 {
		t.Fatalf("A's request: %d, want the provider's 429", r.StatusCode)
	}
	sent := w.fakes.count("sk-shared")
	r := w.run(0, forB(chatReq("gpt-4o")))
	if r.StatusCode == 200 || w.fakes.count("sk-shared") != sent {
		t.Fatalf("B's request after A's 429: %d with %d upstream calls; want it answered locally, the key cooling", r.StatusCode, w.fakes.count("sk-shared")-sent)
	}
	w.advance(21 * time.Second)
	expect(t, "B after the Retry-After", w.run(0, forB(chatReq("gpt-4o"))), 200, "oai/b-main/gpt-4o/1")

	w.fakes.set("sk-shared", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = time.Second
		return r
	})
	before := w.fakes.count("sk-shared")
	var bs []*hostsim.Exchange
	for range 3 {
		bs = append(bs, w.start(0, forB(chatReq("gpt-4o"))))
	}
	w.advance(10 * time.Millisecond)
	a := w.start(0, chatReq("gpt-4o"))
	w.advance(100 * time.Millisecond)
	if n := w.fakes.count("sk-shared") - before; n != 3 || a.Done() {
		t.Fatalf("%d requests sent with B's 3 in flight on the key (A done=%v); want A waiting on its cap of 1", n, a.Done())
	}
	for _, b := range bs {
		expect(t, "B", w.wait(b), 200, "oai/b-main/gpt-4o/1")
	}
	freed := w.host.Clock().Now()
	expect(t, "A", w.wait(a), 200, "openai/a1/gpt-4o/1")
	calls := w.fakes.received()
	if gap := calls[len(calls)-1].at.Sub(freed); gap > 10*time.Millisecond {
		t.Fatalf("A's waiter was sent %v after B's slots freed: B's release did not wake it", gap)
	}
	w.noStreamsLeft()
}

// Each policy in a module of its own (separate VMs per vm_config, one shared-data map per
// vm_id: Hosts on one Process with no vm_id): a 429 through A's VM cools the key for B's.
func TestScenarioTwoModulesShareOneKeysAccount(t *testing.T) {
	proc := hostsim.NewProcess()
	a := newWorld(t, sharedKeyA, 1, hostsim.WithProcess(proc), hostsim.WithPluginName("istio-system.spillway"))
	b := newWorld(t, sharedKeyB, 1, hostsim.WithProcess(proc), hostsim.WithPluginName("team-b.spillway"))
	rateLimitFor20s(a)
	if r := a.run(0, chatReq("gpt-4o")); r.StatusCode != 429 {
		t.Fatalf("A's request: %d, want the provider's 429", r.StatusCode)
	}
	if r := b.run(0, chatReq("gpt-4o")); r.StatusCode == 200 || b.fakes.count("sk-shared") != 0 {
		t.Fatalf("B's request after A's 429: %d with %d upstream calls; want it answered locally", r.StatusCode, b.fakes.count("sk-shared"))
	}
}
