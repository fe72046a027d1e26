package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// requireSpillwayError checks a reply Spillway made itself: its status, its error code,
// the x-spillway-* headers of a request that reached no target (attempts 0), and a
// Retry-After when wantRetryAfter.
func requireSpillwayError(t *testing.T, what string, r *e2etest.Response, status int, code string, wantRetryAfter bool) {
	t.Helper()
	if r.Status != status || r.JSON(t).Get("error.code").Str != code {
		t.Fatalf("%s: %d %s, want %d %s", what, r.Status, r.Body, status, code)
	}
	if h := r.Header; h.Get("x-spillway-provider") != "-" || h.Get("x-spillway-connection") != "-" || h.Get("x-spillway-attempts") != "0" {
		t.Errorf("%s: Spillway's own reply with %s", what, r.Spillway())
	}
	if got := r.Header.Get("Retry-After"); (got != "") != wantRetryAfter {
		t.Errorf("%s: Retry-After %q, want one: %v", what, got, wantRetryAfter)
	}
}

// waitHealthy waits until the admin API lists connection as healthy (its cooldown ran out).
func waitHealthy(t *testing.T, tg *e2etest.Target, connection string) {
	t.Helper()
	e2etest.WaitFor(t, connection+"'s cooldown to pass", func() bool {
		_, c := tg.Admin(t, "GET", "resilience/cooldowns", "")
		return c.Get(`connections.#(id=="`+connection+`").status`).Str == "healthy"
	})
}

// breakerPolicy opens openai's breaker after 3 failures for 3 s (long enough that the
// request meant to find it open does on a loaded machine, short enough to wait out), with a 1 ms connection cooldown so each failure reaches the provider,
// and one attempt per request.
const breakerPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
routes:
  - {model: gpt-4o, targets: [{provider: openai}]}
resilience:
  providerBreaker: {apikey: {failureThreshold: 3, resetTimeoutMs: 3000}}
  connectionCooldown: {apikey: {baseCooldownMs: 1, maxBackoffSteps: 0}}
  failover: {maxAttempts: 1}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// A 5xx storm opens the provider's breaker (guide §1): the next request is answered 503
// provider_circuit_open without reaching the provider. After the reset timeout one
// request is the HALF_OPEN probe, and while it runs every other is turned away; its
// success closes the circuit.
func testBreaker(t *testing.T, start e2etest.Starter) {
	tg := start(t, breakerPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-a", fakeprovider.Repeat(3, fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})...)
	for i := 0; i < 3; i++ {
		waitHealthy(t, tg, "openai-a") // the 1 ms cooldown of the previous failure
		if r := tg.Chat(t, "gpt-4o", nil); r.Status != 503 || r.Spillway() != "openai/openai-a/gpt-4o/1" {
			t.Fatalf("storm request %d: %d from %s: %s", i, r.Status, r.Spillway(), r.Body)
		}
	}
	waitHealthy(t, tg, "openai-a")
	requireSpillwayError(t, "after the storm", tg.Chat(t, "gpt-4o", nil), 503, "provider_circuit_open", true)
	requireRequests(t, "the open circuit", fake, map[string]int{"key-a": 3})
	if _, h := tg.Admin(t, "GET", "monitoring/health", ""); h.Get("providerHealth.openai.state").Str != "OPEN" ||
		h.Get("providerHealth.openai.failures").Int() != 3 || h.Get("circuitBreakers.open").Int() != 1 {
		t.Fatalf("health after the storm: %s", h.Get("providerHealth.openai").Raw)
	}

	e2etest.WaitFor(t, "the breaker's reset timeout", func() bool {
		_, h := tg.Admin(t, "GET", "monitoring/health", "")
		return h.Get("providerHealth.openai.state").Str == "HALF_OPEN"
	})
	// The probe: the fake holds its answer until the test has seen the probe in flight and
	// sent a request that finds it there.
	fake.ScriptFor("key-a", fakeprovider.Fault{Delay: 3 * time.Second})
	var probe *e2etest.Response
	var probeErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		probe, probeErr = e2etest.Send(context.Background(), "POST", tg.URL+"/v1/chat/completions", e2etest.ChatBody("gpt-4o", false), nil)
	}()
	e2etest.WaitFor(t, "the probe in flight", func() bool {
		_, h := tg.Admin(t, "GET", "monitoring/health", "")
		return h.Get("providerHealth.openai.probeInFlight").Bool()
	})
	requireSpillwayError(t, "during the probe", tg.Chat(t, "gpt-4o", nil), 503, "provider_circuit_open", true)
	wg.Wait()
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	requireAnswer(t, "the probe", probe, "openai/openai-a/gpt-4o/1")
	if _, h := tg.Admin(t, "GET", "monitoring/health", ""); h.Get("providerHealth.openai.state").Str != "CLOSED" ||
		h.Get("providerHealth.openai.probeInFlight").Bool() {
		t.Fatalf("health after the probe: %s", h.Get("providerHealth.openai").Raw)
	}
	requireAnswer(t, "closed again", tg.Chat(t, "gpt-4o", nil), "openai/openai-a/gpt-4o/1")
	requireRequests(t, "in all", fake, map[string]int{"key-a": 5})
}

// fallbackPolicy backs gpt-4o up with a second provider that names the model its own way.
const fallbackPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
  - id: backup
    cluster: fake-backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer key-backup"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai}, {provider: backup, model: vendor/gpt-4o}]}
`

// A provider's 5xx is failed over to the second provider within the same request: the
// client gets the backup's answer (its model, its attempt), the backup got the request
// with its own key and model.
func testFallbackProvider(t *testing.T, start e2etest.Starter) {
	tg := start(t, fallbackPolicy)
	oa, bk := tg.Fake(t, "fake-openai"), tg.Fake(t, "fake-backup")
	oa.ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})
	r := tg.Chat(t, "gpt-4o", nil)
	requireAnswer(t, "the fallback", r, "backup/backup-a/vendor/gpt-4o/2")
	if !strings.Contains(string(r.Body), "Hello from fake-backup") || !strings.Contains(string(r.Body), "answering as vendor/gpt-4o") {
		t.Errorf("the client did not get the backup's answer: %s", r.Body)
	}
	requireRequests(t, "openai", oa, map[string]int{"key-a": 1})
	requireRequests(t, "backup", bk, map[string]int{"key-backup": 1})
	rec := bk.Requests()
	if len(rec) != 1 || !strings.Contains(string(rec[0].Body), `"model":"vendor/gpt-4o"`) || rec[0].Header.Get("Authorization") != "Bearer key-backup" {
		t.Fatalf("the backup received %+v", rec)
	}
}

// coolingPolicy has one key for gpt-4o; its 5xx cools it for the apikey profile's 3 s.
const coolingPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
routes:
  - {model: gpt-4o, targets: [{provider: openai}]}
`

// With every target cooling down (a 5xx, never waited for) Spillway answers at once 503
// all_targets_cooling_down with Retry-After and diagnostics naming each excluded target;
// the provider is not asked.
func testAllTargetsCoolingDown(t *testing.T, start e2etest.Starter) {
	tg := start(t, coolingPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})
	if r := tg.Chat(t, "gpt-4o", nil); r.Status != 503 || r.Spillway() != "openai/openai-a/gpt-4o/1" {
		t.Fatalf("the upstream's 503: %d from %s", r.Status, r.Spillway())
	}
	r := tg.Chat(t, "gpt-4o", nil)
	requireSpillwayError(t, "cooling down", r, 503, "all_targets_cooling_down", true)
	ex := r.JSON(t).Get("error.diagnostics.excluded").Array()
	if len(ex) != 1 || ex[0].Get("provider").Str != "openai" || ex[0].Get("connection").Str != "openai-a" ||
		ex[0].Get("model").Str != "gpt-4o" || ex[0].Get("reason").Str != "unavailable" || ex[0].Get("retryAfterSeconds").Int() < 1 {
		t.Fatalf("diagnostics: %s", r.Body)
	}
	if strings.Contains(string(r.Body), "key-a") {
		t.Errorf("a credential in the reply: %s", r.Body)
	}
	requireRequests(t, "cooling down", fake, map[string]int{"key-a": 1})
}

// restatePolicy has a rule restating the gateway's 403 "quota exceeded" to 429 unless
// the body says "account disabled" (guide §7), and agentrouter, which has Spillway's
// built-in rule for its 403 额度不足. Each model has its own connection and one attempt,
// so one answer's cooldown never decides another's.
const restatePolicy = `
providers:
  - id: gateway
    cluster: fake-gateway
    connections:
      - {id: gw-1, credential: {header: authorization, value: "Bearer key-gw-1"}}
      - {id: gw-2, credential: {header: authorization, value: "Bearer key-gw-2"}}
  - id: agentrouter
    api: anthropic
    cluster: fake-agentrouter
    connections:
      - {id: ar-1, credential: {header: x-api-key, value: "key-ar-1"}}
routes:
  - {model: m-quota, targets: [{provider: gateway, connection: gw-1}]}
  - {model: m-disabled, targets: [{provider: gateway, connection: gw-2}]}
  - {model: "claude-*", targets: [{provider: agentrouter}]}
resilience:
  failover: {maxAttempts: 1}
  statusRestatement:
    - id: gateway-quota
      provider: gateway
      fromStatuses: [403]
      toStatus: 429
      textMarkers: ["quota exceeded"]
      excludeMarkers: ["account disabled"]
      defaultRetryAfterMs: 2000
`

// A misleading 403 is restated to 429 with the rule's Retry-After and
// x-spillway-restated-from, its body unchanged; the exclude marker vetoes the rule, so
// a permanent 403 stays 403. Spillway's built-in agentrouter rule does the same for
// agentrouter's Chinese quota message.
func testRestatement(t *testing.T, start e2etest.Starter) {
	tg := start(t, restatePolicy)
	gw, ar := tg.Fake(t, "fake-gateway"), tg.Fake(t, "fake-agentrouter")
	gw.ScriptFor("key-gw-1", fakeprovider.Fault{Status: 403, Message: "quota exceeded for today"})
	gw.ScriptFor("key-gw-2", fakeprovider.Fault{Status: 403, Message: "quota exceeded: account disabled"})
	ar.ScriptFor("key-ar-1", fakeprovider.Fault{Scenario: fakeprovider.ScenarioAgentrouterQuota})

	r := tg.Chat(t, "m-quota", nil)
	if r.Status != 429 || r.Header.Get("x-spillway-restated-from") != "403" || r.Header.Get("Retry-After") != "2" ||
		r.JSON(t).Get("error.message").Str != "quota exceeded for today" || r.Spillway() != "gateway/gw-1/m-quota/1" {
		t.Errorf("restated: %d restated-from %q Retry-After %q %s: %s", r.Status, r.Header.Get("x-spillway-restated-from"),
			r.Header.Get("Retry-After"), r.Spillway(), r.Body)
	}
	r = tg.Chat(t, "m-disabled", nil)
	if r.Status != 403 || r.Header.Get("x-spillway-restated-from") != "" || r.JSON(t).Get("error.message").Str != "quota exceeded: account disabled" {
		t.Errorf("vetoed: %d restated-from %q: %s", r.Status, r.Header.Get("x-spillway-restated-from"), r.Body)
	}
	r = e2etest.Do(t, "POST", tg.URL+"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`, nil)
	if r.Status != 429 || r.Header.Get("x-spillway-restated-from") != "403" || r.Header.Get("Retry-After") != "60" ||
		!strings.Contains(string(r.Body), "额度不足") {
		t.Errorf("agentrouter: %d restated-from %q Retry-After %q: %s", r.Status, r.Header.Get("x-spillway-restated-from"), r.Header.Get("Retry-After"), r.Body)
	}
	requireRequests(t, "gateway", gw, map[string]int{"key-gw-1": 1, "key-gw-2": 1})
	requireRequests(t, "agentrouter", ar, map[string]int{"key-ar-1": 1})
}

// lockoutPolicy turns model lockout on: gpt-4o on either key, gpt-4o-mini on openai-a only.
const lockoutPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
      - {id: openai-b, credential: {header: authorization, value: "Bearer key-b"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai}]}
  - {model: gpt-4o-mini, targets: [{provider: openai, connection: openai-a}]}
resilience:
  modelLockout: {enabled: true}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// A 429 for gpt-4o on openai-a locks that model there (guide §3), not the key: openai-a
// keeps serving gpt-4o-mini while gpt-4o goes straight to openai-b. The admin API lists
// the lockout, and deleting it gives gpt-4o back to openai-a.
func testModelLockout(t *testing.T, start e2etest.Starter) {
	tg := start(t, lockoutPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit})
	requireAnswer(t, "the 429", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/2")
	requireAnswer(t, "openai-a's other model", tg.Chat(t, "gpt-4o-mini", nil), "openai/openai-a/gpt-4o-mini/1")
	requireAnswer(t, "gpt-4o while locked", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/1")
	requireRequests(t, "while locked", fake, map[string]int{"key-a": 2, "key-b": 2})
	var models []string
	for _, rec := range fake.Requests() {
		if rec.Credential == "key-a" {
			models = append(models, rec.Header.Get("x-spillway-model")+string(rec.Body))
		}
	}
	if len(models) != 2 || !strings.Contains(models[0], `"model":"gpt-4o"`) || !strings.Contains(models[1], `"model":"gpt-4o-mini"`) {
		t.Errorf("openai-a received %q", models)
	}

	_, l := tg.Admin(t, "GET", "resilience/model-cooldowns", "")
	items := l.Get("items").Array()
	if len(items) != 1 || items[0].Get("connection").Str != "openai-a" || items[0].Get("model").Str != "gpt-4o" ||
		items[0].Get("reason").Str != "rate_limit" || items[0].Get("remainingMs").Int() <= 0 {
		t.Fatalf("model cooldowns: %s", l.Raw)
	}
	if _, c := tg.Admin(t, "GET", "resilience/cooldowns", ""); c.Get(`connections.#(id=="openai-a").status`).Str != "model_locked" {
		t.Errorf("openai-a: %s", c.Get(`connections.#(id=="openai-a")`).Raw)
	}
	if st, d := tg.Admin(t, "DELETE", "resilience/model-cooldowns", `{"provider":"openai","connection":"openai-a","model":"gpt-4o"}`); st != 200 || d.Get("removed").Int() != 1 {
		t.Fatalf("delete: %d %s", st, d.Raw)
	}
	requireAnswer(t, "after the delete", tg.Chat(t, "gpt-4o", nil), "openai/openai-a/gpt-4o/1")
	requireRequests(t, "in all", fake, map[string]int{"key-a": 3, "key-b": 2})
}
