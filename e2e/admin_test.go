package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// The admin API (guide §1 Status-API and Reset-API): no credential is 401, another
// token 403, and neither reaches a provider; health and the cooldown list show a key
// that failed cooling down, a reset or a clear gives it back to traffic at once; no
// reply shows a credential.
func testAdminAPI(t *testing.T, start e2etest.Starter) {
	tg := start(t, twoKeysPolicy)
	fake := tg.Fake(t, "fake-openai")

	resp, err := http.Get(tg.AdminAPI() + "monitoring/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no credential: %d, want 401", resp.StatusCode)
	}
	for _, tc := range []struct {
		auth   string // the Authorization header
		status int    // the reply's status
		code   string // its error.code
	}{
		{"Basic " + e2etest.AdminToken, 401, "unauthorized"},
		{"Bearer not-the-token", 403, "forbidden"},
	} {
		r := e2etest.Do(t, "GET", tg.AdminAPI()+"monitoring/health", "", map[string]string{"Authorization": tc.auth})
		if r.Status != tc.status || r.JSON(t).Get("error.code").Str != tc.code {
			t.Errorf("%q: %d %s, want %d %s", tc.auth, r.Status, r.Body, tc.status, tc.code)
		}
	}
	if n := fake.TotalStats().Requests; n != 0 {
		t.Fatalf("refused admin calls reached the provider %d times", n)
	}

	st, h := tg.Admin(t, "GET", "monitoring/health", "")
	if st != 200 || h.Get("status").Str != "healthy" || h.Get("providerHealth.openai.state").Str != "CLOSED" ||
		len(h.Get(`connections.#(status=="healthy")#`).Array()) != 2 {
		t.Fatalf("health: %d %s", st, h.Raw)
	}

	fake.ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})
	requireAnswer(t, "a 503 failed over", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/2")
	_, c := tg.Admin(t, "GET", "resilience/cooldowns?provider=openai", "")
	if c.Get(`connections.#(id=="openai-a").status`).Str != "cooling_down" || c.Get(`connections.#(id=="openai-b").status`).Str != "healthy" {
		t.Fatalf("cooldowns: %s", c.Raw)
	}
	if st, r := tg.Admin(t, "POST", "resilience/reset", `{"provider":"openai"}`); st != 200 || !r.Get("ok").Bool() ||
		r.Get("resetCount").Int() != 1 || r.Get("providers.0").Str != "openai" {
		t.Fatalf("reset: %d %s", st, r.Raw)
	}
	if _, c := tg.Admin(t, "GET", "resilience/cooldowns", ""); c.Get(`connections.#(id=="openai-a").status`).Str != "healthy" {
		t.Fatalf("after the reset: %s", c.Raw)
	}
	requireAnswer(t, "after the reset", tg.Chat(t, "gpt-4o", nil), "openai/openai-a/gpt-4o/1")

	fake.ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})
	requireAnswer(t, "another 503", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/2")
	if st, r := tg.Admin(t, "POST", "resilience/cooldowns", `{"connectionIds":["openai-a"]}`); st != 200 ||
		r.Get("cleared").Int() != 1 || r.Get("unchanged").Int() != 0 {
		t.Fatalf("clear: %d %s", st, r.Raw)
	}
	requireAnswer(t, "after the clear", tg.Chat(t, "gpt-4o", nil), "openai/openai-a/gpt-4o/1")
	if st, r := tg.Admin(t, "POST", "resilience/reset", `{"provider":"azure"}`); st != 400 || r.Get("error.code").Str != "unknown_provider" {
		t.Errorf("unknown provider: %d %s", st, r.Raw)
	}

	for _, path := range []string{"monitoring/health", "resilience/cooldowns", "resilience/model-cooldowns"} {
		if _, r := tg.Admin(t, "GET", path, ""); strings.Contains(r.Raw, "key-a") || strings.Contains(r.Raw, "key-b") ||
			strings.Contains(r.Raw, e2etest.AdminToken) {
			t.Errorf("%s shows a secret: %s", path, r.Raw)
		}
	}
	// Only the chat requests reached the provider.
	requireRequests(t, "admin", fake, map[string]int{"key-a": 4, "key-b": 2})
}

// The admin listener's /stats/prometheus carries Spillway's metrics with the labels
// Envoy's stats_tags take out of their names (the bootstrap's, modelled by serve): per
// connection attempts, failovers and failures by reason, per route outcomes, the
// breaker's state per provider; never a credential.
func testMetrics(t *testing.T, start e2etest.Starter) {
	tg := start(t, twoKeysPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})
	requireAnswer(t, "a 503 failed over", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/2")
	if r := tg.Chat(t, "no-such-model", nil); r.Status != 404 {
		t.Fatalf("unknown model: %d %s", r.Status, r.Body)
	}
	want := []string{
		`# TYPE spillway_connection_attempts_total counter`,
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="openai-a"} 1`,
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="openai-b"} 1`,
		`spillway_connection_failovers_total{spillway_provider="openai",spillway_connection="openai-a"} 1`,
		`spillway_connection_failures_total{spillway_provider="openai",spillway_connection="openai-a",spillway_reason="server_error"} 1`,
		`spillway_route_requests_total{spillway_route_model="gpt-4o",spillway_outcome="success"} 1`,
		`spillway_route_requests_total{spillway_route_model="-",spillway_outcome="model_not_found"} 1`,
		`# TYPE spillway_breaker_state gauge`,
		`spillway_breaker_state{spillway_provider="openai"} 0`,
	}
	var scrape string
	e2etest.WaitFor(t, "the counters to reach the admin listener (flushed on the filter's tick)", func() bool {
		scrape = tg.Scrape(t)
		for _, line := range want {
			if !hasLine(scrape, line) {
				return false
			}
		}
		return true
	})
	for _, secret := range []string{"key-a", "key-b", e2etest.AdminToken} {
		if strings.Contains(scrape, secret) {
			t.Errorf("the scrape shows %q", secret)
		}
	}
	// The counters count what the provider saw: one attempt per key, the unknown model none.
	requireRequests(t, "metrics", fake, map[string]int{"key-a": 1, "key-b": 1})
}

// hasLine reports whether text has line as a whole line.
func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
