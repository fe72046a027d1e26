package main

// The metrics and the decision log on the compiled module: each scenario runs in its own
// world (build/spillway.wasm, two worker VMs, the virtual clock) and asserts that the
// metrics it concerns moved as they should. After each one, every stat the filter defined
// is checked against plugin/stats (the tag regexes take out exactly its family's labels),
// and no configured credential appears in any log line or stat name; at the end, every
// family must have been defined by some scenario.

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// metricsPolicy: two OpenAI keys on a dotted model, a local-profile provider whose circuit
// opens at 2 failures (with the provider cooldown gate on), a capped key, agentrouter's
// misstated quota, Anthropic. Model lockout is on without 404, so a missing model concerns
// only the request. The credentials are distinctive, so a leak is found by substring.
const metricsPolicy = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer cred-7f3a-openai-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer cred-91c4-openai-b"}}
  - id: flaky
    profile: local
    cluster: flaky
    connections:
      - {id: flaky-1, credential: {header: authorization, value: "Bearer cred-55d0-flaky-1"}}
      - {id: flaky-2, credential: {header: authorization, value: "Bearer cred-55d1-flaky-2"}}
  - id: glm
    cluster: openai
    connections:
      - {id: glm-1, credential: {header: authorization, value: "Bearer cred-0b2e-glm"}, maxConcurrent: 1}
  - id: agentrouter
    api: anthropic
    cluster: agentrouter
    connections:
      - {id: ar-1, credential: {header: authorization, value: "Bearer cred-c8e1-agentrouter"}}
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
      - {id: ant-a, credential: {header: x-api-key, value: "cred-3d9f-anthropic"}}
routes:
  - model: gpt-4.1
    targets: [{provider: openai}]
  - model: flaky-model
    targets: [{provider: flaky}]
  - model: glm-4.7
    targets: [{provider: glm}]
  - model: "ar-*"
    targets: [{provider: agentrouter}]
  - model: "claude-*"
    targets: [{provider: anthropic}]
resilience:
  modelLockout: {enabled: true, errorCodes: [403, 429, 502, 503, 504]}
  providerCooldown: {enabled: true}
  requestQueue: {maxQueueDepth: 1, maxWaitMs: 10000, executionMaxWaitMs: 20000}
`

// metricsCredentials are the credential values of metricsPolicy, as the fakes see them.
var metricsCredentials = []string{"cred-7f3a-openai-a", "cred-91c4-openai-b", "cred-55d0-flaky-1", "cred-55d1-flaky-2",
	"cred-0b2e-glm", "cred-c8e1-agentrouter", "cred-3d9f-anthropic"}

// newMetricsWorld is a world on policy with the gauges published: the canary's directory
// entry (it stopped after its start) outlives it by the peer TTL, and while it does the
// canary might hold the lowest id.
func newMetricsWorld(t *testing.T, policy string, opts ...hostsim.Option) *world {
	t.Helper()
	w := newWorld(t, policy, 2, opts...)
	w.advance(10 * time.Second)
	return w
}

// series reads a counter series once every VM has flushed (0, false: never defined).
func (w *world) series(f *stats.Family, values ...string) (uint64, bool) {
	w.t.Helper()
	for _, vm := range w.host.Host.Workers() {
		if err := vm.Tick(); err != nil {
			w.t.Fatal(err)
		}
	}
	n, err := w.host.Host.GetCounterMetric(f.Stat(values...))
	return n, err == nil
}

// count is a counter series that must exist.
func (w *world) count(f *stats.Family, values ...string) uint64 {
	w.t.Helper()
	n, ok := w.series(f, values...)
	if !ok {
		w.t.Fatalf("%s was never counted", f.Stat(values...))
	}
	return n
}

// gauge reads a gauge series after the publishing VM's next reading (it reads about once
// a second, on its tick).
func (w *world) gauge(f *stats.Family, values ...string) uint64 {
	w.t.Helper()
	w.advance(1100 * time.Millisecond)
	n, err := w.host.Host.GetGaugeMetric(f.Stat(values...))
	if err != nil {
		w.t.Fatalf("gauge %s: %v", f.Stat(values...), err)
	}
	return n
}

// wantCount fails unless the counter series holds want.
func (w *world) wantCount(what string, want uint64, f *stats.Family, values ...string) {
	w.t.Helper()
	if got := w.count(f, values...); got != want {
		w.t.Errorf("%s: %s = %d, want %d", what, f.Stat(values...), got, want)
	}
}

// wantGauge fails unless the gauge series shows want.
func (w *world) wantGauge(what string, want uint64, f *stats.Family, values ...string) {
	w.t.Helper()
	if got := w.gauge(f, values...); got != want {
		w.t.Errorf("%s: %s = %d, want %d", what, f.Stat(values...), got, want)
	}
}

// metricScenarios are the scenarios; each asserts the metrics it concerns.
var metricScenarios = []struct {
	name    string
	policy  string           // "" = metricsPolicy
	options []hostsim.Option // the world's extra options
	run     func(t *testing.T, w *world)
}{
	{name: "outcomes, attempts, failovers, failures and lockouts", run: func(t *testing.T, w *world) {
		expect(t, "first", w.run(0, chatReq("gpt-4.1")), 200, "openai/key-a/gpt-4.1/1")
		// Key A's 429 locks the model there (lockout on, for the 10 min the upstream asks: longer
		// than a combo wait) and the request fails over to key B.
		w.fakes.set("cred-7f3a-openai-a", rateLimited("600"))
		expect(t, "failover", w.run(1, chatReq("gpt-4.1")), 200, "openai/key-b/gpt-4.1/2")
		// Key B's 429 has nowhere to go: the client gets it.
		w.fakes.set("cred-91c4-openai-b", rateLimited("600"))
		expect(t, "both limited", w.run(0, chatReq("gpt-4.1")), 429, "openai/key-b/gpt-4.1/1")
		// Both locked: Spillway answers itself.
		refused := w.run(1, chatReq("gpt-4.1"))
		if refused.StatusCode != 429 || errorCode(refused) != "rate_limit_error" {
			t.Fatalf("all locked: %d %s", refused.StatusCode, refused.Body)
		}
		bad := w.run(0, llmRequest("/v1/chat/completions", `{"messages":[]}`))
		unknown := w.run(1, chatReq("gpt-9"))

		w.wantCount("a 2xx", 2, &stats.RouteRequests, "gpt-4.1", stats.OutcomeSuccess)
		w.wantCount("key B's 429 passed on", 1, &stats.RouteRequests, "gpt-4.1", stats.OutcomeUpstreamFailure)
		w.wantCount("Spillway's refusal", 1, &stats.RouteRequests, "gpt-4.1", errorCode(refused))
		w.wantCount("no model", 1, &stats.RouteRequests, stats.NoRoute, errorCode(bad))
		w.wantCount("unknown model", 1, &stats.RouteRequests, stats.NoRoute, errorCode(unknown))
		if errorCode(bad) != "invalid_request" || errorCode(unknown) != "model_not_found" {
			t.Errorf("codes %q %q", errorCode(bad), errorCode(unknown))
		}
		w.wantCount("key A's attempts", 2, &stats.ConnectionAttempts, "openai", "key-a")
		w.wantCount("key B's attempts", 2, &stats.ConnectionAttempts, "openai", "key-b")
		w.wantCount("key A's 429", 1, &stats.ConnectionFailures, "openai", "key-a", "rate_limit")
		w.wantCount("key B's 429", 1, &stats.ConnectionFailures, "openai", "key-b", "rate_limit")
		w.wantCount("failed over from key A", 1, &stats.ConnectionFailovers, "openai", "key-a")
		if _, ok := w.series(&stats.ConnectionFailovers, "openai", "key-b"); ok {
			t.Error("key B's failure had no failover, yet it is counted")
		}
		if n := w.metric(stats.Attempts.Name); n != 4 {
			t.Errorf("attempts = %d, want 4", n)
		}
		if n := w.metric(stats.Failovers.Name); n != 1 {
			t.Errorf("failovers = %d, want 1", n)
		}
		w.wantGauge("key A's lockout", 1, &stats.ConnectionLockouts, "openai", "key-a")
		w.wantGauge("key B's lockout", 1, &stats.ConnectionLockouts, "openai", "key-b")
		w.wantGauge("a lockout is not a cooldown", 0, &stats.ConnectionCooling, "openai", "key-a")
		// The decision lines: one per failed attempt, with what it set and what came next.
		info := strings.Join(w.host.Host.LogsAt(hostsim.LogInfo), "\n")
		for _, want := range []string{
			`provider=openai connection=key-a model="gpt-4.1" status=429 reason=rate_limit set="lockout quota:gpt-4.1 600s" next="failover to openai/key-b"`,
			`provider=openai connection=key-b model="gpt-4.1" status=429 reason=rate_limit set="lockout quota:gpt-4.1 600s" next="answer 429"`,
		} {
			if !strings.Contains(info, "spillway: attempt failed: request=- "+want) {
				t.Errorf("no decision line %q in:\n%s", want, info)
			}
		}
		w.advance(11 * time.Minute)
		w.wantGauge("after the lockout", 0, &stats.ConnectionLockouts, "openai", "key-a")
	}},
	{name: "a cooldown shows while it runs", run: func(t *testing.T, w *world) {
		// A 500 is not a lockout code: it cools the key (apikey: 3 s) and the request fails over.
		w.fakes.set("cred-7f3a-openai-a", func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(500, `{"error":{"message":"internal error","type":"server_error"}}`)
		})
		expect(t, "failover", w.run(0, chatReq("gpt-4.1", [2]string{"x-request-id", "req-42"})), 200, "openai/key-b/gpt-4.1/2")
		w.wantGauge("cooling", 1, &stats.ConnectionCooling, "openai", "key-a")
		w.wantGauge("the other key", 0, &stats.ConnectionCooling, "openai", "key-b")
		w.wantCount("the 500", 1, &stats.ConnectionFailures, "openai", "key-a", "server_error")
		info := strings.Join(w.host.Host.LogsAt(hostsim.LogInfo), "\n")
		if want := `spillway: attempt failed: request="req-42" provider=openai connection=key-a model="gpt-4.1" status=500 reason=server_error set="cooldown 3s" next="failover to openai/key-b"`; !strings.Contains(info, want) {
			t.Errorf("no decision line %q in:\n%s", want, info)
		}
		debug := strings.Join(w.host.Host.LogsAt(hostsim.LogDebug), "\n")
		if !strings.Contains(debug, `spillway: attempt failed (details): request="req-42" attempt=1 ttfb=0s scope=exact fallback=true counts_breaker=true`) {
			t.Errorf("no details at debug:\n%s", debug)
		}
		w.advance(5 * time.Second)
		w.wantGauge("cooled", 0, &stats.ConnectionCooling, "openai", "key-a")
	}},
	{name: "the breaker and the provider cooldown gate", run: func(t *testing.T, w *world) {
		overloaded := func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(503, `{"error":{"message":"upstream unavailable","type":"server_error"}}`)
		}
		w.fakes.set("cred-55d0-flaky-1", overloaded)
		w.fakes.set("cred-55d1-flaky-2", overloaded)
		w.wantGauge("a quiet provider", 0, &stats.BreakerState, "flaky")
		w.wantGauge("a quiet provider's gate", 0, &stats.ProviderCooling, "flaky")
		// Key 1's 503 (DEGRADED: local profile) fails over to key 2, whose 503 opens the
		// circuit (OPEN at 2) and is the answer.
		expect(t, "503s", w.run(0, chatReq("flaky-model")), 503, "flaky/flaky-2/flaky-model/2")
		w.wantGauge("two failures", 2, &stats.BreakerState, "flaky") // OPEN
		w.wantGauge("the gate (local: 2 failures)", 1, &stats.ProviderCooling, "flaky")
		refused := w.run(1, chatReq("flaky-model"))
		w.wantCount("the provider's 503", 1, &stats.RouteRequests, "flaky-model", stats.OutcomeUpstreamFailure)
		w.wantCount("refused while open", 1, &stats.RouteRequests, "flaky-model", errorCode(refused))
		if errorCode(refused) == "" {
			t.Errorf("while open: %d %s", refused.StatusCode, refused.Body)
		}
		w.advance(16 * time.Second)                                   // past the 15 s OPEN period
		w.wantGauge("lazy recovery", 3, &stats.BreakerState, "flaky") // HALF_OPEN
		info := strings.Join(w.host.Host.LogsAt(hostsim.LogInfo), "\n")
		for _, want := range []string{
			`connection=flaky-1 model="flaky-model" status=503 reason=server_error set="breaker DEGRADED, lockout exact:flaky-model 120s" next="failover to flaky/flaky-2"`,
			`connection=flaky-2 model="flaky-model" status=503 reason=server_error set="breaker OPEN, lockout exact:flaky-model 120s" next="answer 503"`,
		} {
			if !strings.Contains(info, want) {
				t.Errorf("no decision line %q in:\n%s", want, info)
			}
		}
	}},
	{name: "terminal states and a model the connection does not serve", run: func(t *testing.T, w *world) {
		w.fakes.set("cred-3d9f-anthropic", func(c upstreamCall) *hostsim.UpstreamResponse {
			if c.model == "claude-missing" {
				return jsonError(404, `{"type":"error","error":{"type":"not_found_error","message":"model: claude-missing"}}`)
			}
			return jsonError(400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`)
		})
		missing := w.run(0, llmRequest("/v1/messages", `{"model":"claude-missing","max_tokens":5,"messages":[]}`))
		if missing.StatusCode != 404 {
			t.Fatalf("missing model: %d %s", missing.StatusCode, missing.Body)
		}
		if n := w.metric(stats.ModelNotServed.Name); n != 1 {
			t.Errorf("model not served = %d", n)
		}
		w.wantGauge("a missing model cools nothing", 0, &stats.ConnectionCooling, "anthropic", "ant-a")
		resp := w.run(1, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[]}`))
		if resp.StatusCode != 400 {
			t.Fatalf("credits: %d %s", resp.StatusCode, resp.Body)
		}
		w.wantGauge("credits exhausted", 1, &stats.ConnectionTerminal, "anthropic", "ant-a")
		w.wantCount("credits", 1, &stats.ConnectionFailures, "anthropic", "ant-a", "credits_exhausted")
		w.wantCount("not found", 1, &stats.ConnectionFailures, "anthropic", "ant-a", "not_found")
		w.wantCount("both passed on", 2, &stats.RouteRequests, "claude-*", stats.OutcomeUpstreamFailure)
		w.advance(time.Hour)
		w.wantGauge("terminal stays", 1, &stats.ConnectionTerminal, "anthropic", "ant-a")
	}},
	{name: "a terminal re-check, refused and then restoring", policy: metricsPolicy + "  terminalRecheck: {enabled: true, intervalMs: 60000}\n",
		run: func(t *testing.T, w *world) {
			key := &revocableKey{}
			w.fakes.set("cred-7f3a-openai-a", key.answer)
			for i := range 3 { // the guide's EXPIRED_RETRY_MAX revoked-key 401s, each failed over
				expect(t, "revoked", w.run(i%2, chatReq("gpt-4.1")), 200, "openai/key-b/gpt-4.1/2")
				w.advance(10 * time.Second)
			}
			w.wantGauge("expired", 1, &stats.ConnectionTerminal, "openai", "key-a")
			w.advance(time.Minute) // the first check, still refused
			w.wantCount("refused", 1, &stats.ConnectionRechecks, "openai", "key-a", stats.RecheckRefused)
			key.fixed.Store(true)
			w.advance(2 * time.Minute) // the second, twice the interval later, passes
			w.wantCount("restored", 1, &stats.ConnectionRechecks, "openai", "key-a", stats.RecheckRestored)
			w.wantGauge("restored", 0, &stats.ConnectionTerminal, "openai", "key-a")
			expect(t, "restored", w.run(0, chatReq("gpt-4.1")), 200, "openai/key-a/gpt-4.1/1")
		}},
	{name: "a restated status", run: func(t *testing.T, w *world) {
		w.fakes.set("cred-c8e1-agentrouter", func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(403, `{"error":{"message":"用户额度不足, 剩余额度: 0","type":"new_api_error"}}`)
		})
		resp := w.run(0, llmRequest("/v1/messages", `{"model":"ar-sonnet","max_tokens":5,"messages":[]}`))
		if resp.StatusCode != 429 {
			t.Fatalf("got %d %s", resp.StatusCode, resp.Body)
		}
		w.wantCount("restated", 1, &stats.ConnectionRestated, "agentrouter", "ar-1")
		if n := w.metric(stats.Restated.Name); n != 1 {
			t.Errorf("restated = %d", n)
		}
		info := strings.Join(w.host.Host.LogsAt(hostsim.LogInfo), "\n")
		if !strings.Contains(info, `provider=agentrouter connection=ar-1 model="ar-sonnet" status=403->429`) {
			t.Errorf("the decision line does not show the restatement:\n%s", info)
		}
	}},
	{name: "queue depth, slots, waits and a client that leaves", run: func(t *testing.T, w *world) {
		w.fakes.set("cred-0b2e-glm", func(c upstreamCall) *hostsim.UpstreamResponse {
			r := chatOK(c)
			r.Delay = 3 * time.Second
			return r
		})
		first := w.start(0, chatReq("glm-4.7"))
		second := w.start(1, chatReq("glm-4.7"))
		w.wantGauge("the busy slot", 1, &stats.ConnectionSlotsInUse, "glm", "glm-1")
		w.wantGauge("the waiting request", 1, &stats.ConnectionQueueDepth, "glm", "glm-1")
		full := w.run(0, chatReq("glm-4.7")) // depth 1: refused at once
		expect(t, "first", w.wait(first), 200, "glm/glm-1/glm-4.7/1")
		expect(t, "second", w.wait(second), 200, "glm/glm-1/glm-4.7/1")
		w.wantCount("one wait", 1, &stats.ConnectionQueueWaits, "glm", "glm-1")
		if ms := w.count(&stats.ConnectionQueueWaitMs, "glm", "glm-1"); ms < 3000 || ms > 3100 {
			// The second got the slot when the first ended, 3 s after both started.
			t.Errorf("waited %d ms, want about 3000", ms)
		}
		w.wantCount("queue full", 1, &stats.RouteRequests, "glm-4.7", errorCode(full))
		if errorCode(full) != "RATE_LIMIT_QUEUE_FULL" {
			t.Errorf("third: %d %s", full.StatusCode, full.Body)
		}
		w.wantGauge("free again", 0, &stats.ConnectionSlotsInUse, "glm", "glm-1")
		w.wantGauge("empty again", 0, &stats.ConnectionQueueDepth, "glm", "glm-1")
		// A queued client that goes away: its wait ends, and so does the request.
		busy := w.start(0, chatReq("glm-4.7"))
		leaving := chatReq("glm-4.7")
		leaving.ResetAfter = 500 * time.Millisecond
		gone := w.start(1, leaving)
		w.wait(gone)
		w.wait(busy)
		w.wantCount("gone", 1, &stats.RouteRequests, "glm-4.7", stats.OutcomeClientGone)
		w.wantCount("two waits", 2, &stats.ConnectionQueueWaits, "glm", "glm-1")
		w.wantCount("successes", 3, &stats.RouteRequests, "glm-4.7", stats.OutcomeSuccess)
		if n := w.metric(stats.Queued.Name); n != 2 {
			t.Errorf("queued = %d", n)
		}
		if n := w.metric(stats.Wakeups.Name); n == 0 {
			t.Error("no wake-up counted")
		}
	}},
	{name: "a wait that fails open", policy: strings.Replace(metricsPolicy, "  modelLockout:",
		"  quotaShareConcurrencyLimit: {enabled: true}\n  modelLockout:", 1), run: func(t *testing.T, w *world) {
		w.fakes.set("cred-0b2e-glm", func(c upstreamCall) *hostsim.UpstreamResponse {
			r := chatOK(c)
			r.Delay = 3 * time.Second
			return r
		})
		busy := w.start(0, chatReq("glm-4.7"))
		queued := w.start(1, chatReq("glm-4.7"))
		w.advance(100 * time.Millisecond)
		// The queue is full: with quota-share fail-open the third goes without a slot.
		expect(t, "fails open", w.run(0, chatReq("glm-4.7")), 200, "glm/glm-1/glm-4.7/1")
		w.wait(busy)
		w.wait(queued)
		if n := w.metric(stats.AdmissionFailedOpen.Name); n != 1 {
			t.Errorf("failed open = %d", n)
		}
	}},
	{name: "streams: an error event, a truncation, an execution timeout", run: func(t *testing.T, w *world) {
		w.fakes.set("cred-7f3a-openai-a", func(upstreamCall) *hostsim.UpstreamResponse { return sse(chatRoleEvent, chatErrorEvent) })
		expect(t, "error event", w.run(0, chatReq("gpt-4.1")), 200, "openai/key-b/gpt-4.1/2")
		if n := w.metric(stats.StreamErrorEvents.Name); n != 1 {
			t.Errorf("stream error events = %d", n)
		}
		w.wantCount("the callout's answer", 1, &stats.RouteRequests, "gpt-4.1", stats.OutcomeSuccess)
		if n := w.metric(stats.LocalReplies.Name); n != 1 {
			t.Errorf("local replies = %d (the failover answer)", n)
		}
		w.fakes.set("cred-91c4-openai-b", func(upstreamCall) *hostsim.UpstreamResponse { return sse(chatRoleEvent, chatContentEvent) })
		expect(t, "truncated", w.run(1, chatReq("gpt-4.1")), 200, "openai/key-b/gpt-4.1/1")
		w.wantCount("the truncation", 1, &stats.ConnectionFailures, "openai", "key-b", "stream_truncated")
		if n := w.metric(stats.TruncatedStreams.Name); n != 1 {
			t.Errorf("truncated = %d", n)
		}
		w.fakes.set("cred-0b2e-glm", func(c upstreamCall) *hostsim.UpstreamResponse {
			r := chatOK(c)
			r.Delay = time.Minute
			return r
		})
		timedOut := w.run(0, chatReq("glm-4.7"))
		w.wantCount("the timeout", 1, &stats.ConnectionFailures, "glm", "glm-1", "timeout")
		w.wantCount("its answer", 1, &stats.RouteRequests, "glm-4.7", "RATE_LIMIT_EXECUTION_TIMEOUT")
		if errorCode(timedOut) != "RATE_LIMIT_EXECUTION_TIMEOUT" {
			t.Errorf("timeout: %d %s", timedOut.StatusCode, timedOut.Body)
		}
	}},
	{name: "the missing-option detector", options: []hostsim.Option{hostsim.WithoutAllowOnHeadersStopIteration()},
		run: func(t *testing.T, w *world) {
			r := w.run(0, chatReq("gpt-4.1"))
			if errorCode(r) != "spillway_misconfigured" {
				t.Fatalf("got %d %s", r.StatusCode, r.Body)
			}
			if n := w.metric(stats.Misconfigured.Name); n != 1 {
				t.Errorf("misconfigured = %d", n)
			}
			// Held at its headers, the request never had its model read.
			w.wantCount("no route", 1, &stats.RouteRequests, stats.NoRoute, "spillway_misconfigured")
		}},
}

func TestMetricsScenarios(t *testing.T) {
	extractor, err := stats.NewExtractor(stats.Tags())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	defined := map[string]bool{} // families some scenario defined
	for _, sc := range metricScenarios {
		t.Run(sc.name, func(t *testing.T) {
			policy := sc.policy
			if policy == "" {
				policy = metricsPolicy
			}
			w := newMetricsWorld(t, policy, sc.options...)
			sc.run(t, w)
			for _, vm := range w.host.Host.Workers() {
				if err := vm.Tick(); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range w.host.Host.Metrics() {
				f := checkStatName(t, extractor, m)
				mu.Lock()
				defined[f] = true
				mu.Unlock()
			}
			noCredentialIn(t, w)
			w.noStreamsLeft()
		})
	}
	// The families a scenario cannot reach on the built module: a panic (the filter's native
	// tests provoke one), the watchdog's aborts (counted through metrics.WatchdogAbort,
	// tested natively, until the watchdog exists), and a shared-data error in admission
	// (hostsim's shared data does not fail; the filter's native tests make it, with a store
	// that loses its CAS races: TestAStoreError*).
	natively := map[string]bool{stats.Panics.Name: true, stats.ConnectionWatchdogAborts.Name: true,
		stats.AdmissionStoreErrors.Name: true}
	for _, f := range stats.Families() {
		if !defined[f.Name] && !natively[f.Name] {
			t.Errorf("no scenario defined %s", f.Name)
		}
	}
}

// checkStatName checks one stat the filter defined: the tag regexes take out exactly its
// family's labels, its type is the family's, and its Prometheus name is the family's. It
// returns the family's name.
func checkStatName(t *testing.T, x *stats.Extractor, m hostsim.MetricValue) string {
	t.Helper()
	stat := stats.Namespace + "." + m.Name
	if !strings.HasPrefix(stat, stats.InclusionPrefix) {
		t.Errorf("%q does not start with %s", stat, stats.InclusionPrefix)
	}
	extracted, tags := x.Extract(stat)
	name := strings.TrimPrefix(extracted, stats.Namespace+".")
	f, ok := stats.Lookup(name)
	if !ok {
		t.Errorf("%q extracts to %q, which is no family", stat, extracted)
		return name
	}
	if wantType := map[stats.Kind]hostsim.MetricType{stats.Counter: hostsim.MetricCounter, stats.Gauge: hostsim.MetricGauge}[f.Kind]; m.Type != wantType {
		t.Errorf("%s is a %s, its family a %s", m.Name, m.Type, f.Kind)
	}
	if len(tags) != len(f.Labels) {
		t.Errorf("%q carries %v, want the labels %v", stat, tags, f.Labels)
		return name
	}
	for _, l := range f.Labels {
		found := false
		for _, tag := range tags {
			if tag.Name == l {
				found = tag.Value != ""
			}
		}
		if !found {
			t.Errorf("%q lacks the label %s (tags %v)", stat, l, tags)
		}
	}
	return name
}

// noCredentialIn fails if a configured credential appears in a log line (any VM, any
// level) or a stat name.
func noCredentialIn(t *testing.T, w *world) {
	t.Helper()
	var logs int
	for _, e := range w.host.Host.Logs() {
		logs++
		for _, c := range metricsCredentials {
			if strings.Contains(e.Message, c) {
				t.Errorf("%s log on %s holds a credential: %s", e.Level, e.VM, e.Message)
			}
		}
	}
	if logs == 0 {
		t.Error("no log lines: nothing was checked")
	}
	for _, m := range w.host.Host.Metrics() {
		for _, c := range metricsCredentials {
			if strings.Contains(m.Name, c) {
				t.Errorf("stat %s holds a credential", m.Name)
			}
		}
	}
}
