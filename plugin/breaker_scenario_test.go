package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// stormPolicy: one provider of three keys whose breaker opens at 3 failures (local
// profile, 1 s OPEN), and same-request failover over all three: the e2e load test's storm.
const stormPolicy = `
providers:
  - id: stormy
    profile: local
    cluster: flaky
    connections:
      - {id: storm-1, credential: {header: authorization, value: "Bearer st-1"}}
      - {id: storm-2, credential: {header: authorization, value: "Bearer st-2"}}
      - {id: storm-3, credential: {header: authorization, value: "Bearer st-3"}}
routes:
  - {model: storm-model, targets: [{provider: stormy}]}
resilience:
  providerBreaker:
    local: {degradationThreshold: 1, failureThreshold: 3, resetTimeoutMs: 1000}
`

// A failed HALF_OPEN probe reopens the breaker for the whole provider (guide §1): its
// request does not fail over to the provider's other keys, whatever worker it runs on,
// and the client gets the probe's own failure after one attempt. The next probe, after the
// doubled OPEN period, closes the breaker.
func TestScenarioAFailedProbeReopensTheBreakerForEveryKey(t *testing.T) {
	for _, worker := range []int{0, 1} {
		t.Run(fmt.Sprintf("probe on worker %d", worker), func(t *testing.T) {
			w := newWorld(t, stormPolicy, 2)
			fail := func(upstreamCall) *hostsim.UpstreamResponse {
				return jsonError(500, `{"error":{"message":"boom","type":"server_error"}}`)
			}
			for _, k := range []string{"st-1", "st-2", "st-3"} {
				w.fakes.set(k, fail)
			}
			if r := w.run(1-worker, chatReq("storm-model")); r.StatusCode != 500 || header(r.Headers, "x-spillway-attempts") != "3" {
				t.Fatalf("the opening request: %d via %s, want 500 after 3 attempts (one per key)", r.StatusCode, spillway(r))
			}
			expect(t, "while OPEN", w.run(worker, chatReq("storm-model")), 503, "")
			w.advance(1100 * time.Millisecond)
			before := w.fakes.count("st-1") + w.fakes.count("st-2") + w.fakes.count("st-3")
			resp := w.run(worker, chatReq("storm-model"))
			if resp.StatusCode != 500 || header(resp.Headers, "x-spillway-attempts") != "1" {
				t.Fatalf("the failed probe's client: %d via %s, want the probe's 500 after 1 attempt; body %s",
					resp.StatusCode, spillway(resp), resp.Body)
			}
			if sent := w.fakes.count("st-1") + w.fakes.count("st-2") + w.fakes.count("st-3") - before; sent != 1 {
				t.Fatalf("the provider got %d requests for the probe's request, want 1", sent)
			}
			expect(t, "reopened", w.run(1-worker, chatReq("storm-model")), 503, "")
			for _, k := range []string{"st-1", "st-2", "st-3"} {
				w.fakes.set(k, nil)
			}
			w.advance(1100 * time.Millisecond) // not yet: the reopened period is doubled
			expect(t, "within the doubled period", w.run(worker, chatReq("storm-model")), 503, "")
			w.advance(1000 * time.Millisecond)
			resp = w.run(1-worker, chatReq("storm-model"))
			if resp.StatusCode != 200 || header(resp.Headers, "x-spillway-attempts") != "1" {
				t.Fatalf("the second probe: %d via %s, want 200 after 1 attempt", resp.StatusCode, spillway(resp))
			}
			w.noStreamsLeft()
		})
	}
}
