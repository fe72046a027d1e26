package main

// A client's x-spillway-* request headers on build/spillway.wasm in hostsim: whatever path
// a request takes — routed, passed through, failed over by callout, retried by the router,
// routed at its headers — no upstream receives one of them (Spillway's namespace is its own;
// the only x-spillway-* header an upstream sees is the cluster header the filter set).

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
)

// noClientSpillwayHeaders fails unless every x-spillway-* header in hs is the filter's own
// cluster header naming cluster ("" for none: a request the filter did not route).
func noClientSpillwayHeaders(t *testing.T, what string, hs [][2]string, cluster string) {
	t.Helper()
	for _, kv := range hs {
		name := strings.ToLower(kv[0])
		if strings.HasPrefix(name, "x-spillway-") && (name != "x-spillway-cluster" || cluster == "" || kv[1] != cluster) {
			t.Errorf("%s: %s=%q reached the upstream", what, kv[0], kv[1])
		}
	}
}

func TestScenarioAClientsSpillwayHeadersReachNoUpstream(t *testing.T) {
	t.Run("routed, passed through, failed over by callout", func(t *testing.T) {
		w := newWorld(t, scenarioPolicy, 2)
		resp := w.run(0, chatReq("gpt-4o", hostileSpillwayHeaders...))
		expect(t, "routed", resp, 200, "openai/key-a/gpt-4o/1")
		noClientSpillwayHeaders(t, "routed", resp.Upstream.Headers, "openai")

		pass := w.run(1, &hostsim.Request{Headers: append([][2]string{{":method", "GET"}, {":path", "/v1/models"},
			{":authority", "spillway.local"}, {":scheme", "http"}}, hostileSpillwayHeaders...)})
		if pass.Upstream == nil || pass.LocalReply != nil {
			t.Fatalf("pass-through: %d, local %v", pass.StatusCode, pass.LocalReply)
		}
		noClientSpillwayHeaders(t, "passed through", pass.Upstream.Headers, "")

		w.rateLimitKeyA() // key A's 429 fails over to key B by callout
		expect(t, "failover", w.run(0, chatReq("gpt-4o", hostileSpillwayHeaders...)), 200, "openai/key-b/gpt-4o/2")
		calls := w.fakes.received()
		last := calls[len(calls)-1]
		if !last.viaCallout || last.credential != "sk-b" {
			t.Fatalf("the failover attempt: %+v", last)
		}
		noClientSpillwayHeaders(t, "callout", last.headers, "")
		w.noStreamsLeft()
	})
	t.Run("router retry", func(t *testing.T) {
		w := newRetryWorld(t, routerPolicy, 1, 2)
		w.fakes.set("sk-a", rateLimited("30"))
		resp := w.run(0, chatReq("gpt-4o", hostileSpillwayHeaders...))
		expect(t, "retried", resp, 200, "openai/key-b/gpt-4o/2")
		if len(resp.Tries) != 2 || w.via() != "sk-a/router sk-b/router" {
			t.Fatalf("tries %d, via %s: want key A's and key B's through the router", len(resp.Tries), w.via())
		}
		for i, try := range resp.Tries {
			noClientSpillwayHeaders(t, fmt.Sprintf("try %d", i+1), try.Headers, "openai")
		}
		w.noStreamsLeft()
	})
	t.Run("header mode", func(t *testing.T) {
		w := newWorld(t, headerPolicy, 1, noOption)
		var hs [][2]string // the model header is headerChat's (the filter reads its first value)
		for _, kv := range hostileSpillwayHeaders {
			if kv[0] != "x-spillway-request-model" {
				hs = append(hs, kv)
			}
		}
		resp := w.run(0, headerChat("gpt-4o", "gpt-4o", hs...))
		expect(t, "header-routed", resp, 200, "openai/key-a/gpt-4o/1")
		noClientSpillwayHeaders(t, "header-routed", resp.Upstream.Headers, "openai")
		w.noStreamsLeft()
	})
}
