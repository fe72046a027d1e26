package e2e

import (
	"testing"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// twoKeysPolicy is one OpenAI provider with two keys, tried in order for gpt-4o, and the
// admin API on.
const twoKeysPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
      - {id: openai-b, credential: {header: authorization, value: "Bearer key-b"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai}]}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// requireAnswer checks the client got a 200 from provider/connection/model/attempts.
func requireAnswer(t *testing.T, what string, r *e2etest.Response, spillway string) {
	t.Helper()
	if r.Status != 200 || r.Spillway() != spillway {
		t.Fatalf("%s: %d from %s, want 200 from %s: %s", what, r.Status, r.Spillway(), spillway, r.Body)
	}
}

// requireRequests checks how many requests each credential of a fake received.
func requireRequests(t *testing.T, what string, f *fakeprovider.Server, want map[string]int) {
	t.Helper()
	for cred, n := range want {
		if got := f.StatsFor(cred).Requests; got != n {
			t.Errorf("%s: %s received %d requests, want %d", what, cred, got, n)
		}
	}
	if got := f.StatsFor(e2etest.ClientKey).Requests; got != 0 {
		t.Errorf("%s: the client's own key reached %s %d times", what, f.Name(), got)
	}
}

// A key's 429 with Retry-After is failed over to the next key in the same request; the
// key then cools for the Retry-After (guide §2, upstream retry hints), during which the
// next key serves alone, and takes traffic again once it passed. (3 s: long enough that
// the requests meant to find it cooling do on a loaded machine, short enough to wait out.)
func testKeyFailoverAndRecovery(t *testing.T, start e2etest.Starter) {
	tg := start(t, twoKeysPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-a", fakeprovider.Fault{Status: 429, ErrorType: "rate_limit_error", RetryAfter: "3"})

	requireAnswer(t, "the 429 is failed over", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/2")
	requireRequests(t, "after the failover", fake, map[string]int{"key-a": 1, "key-b": 1})

	_, c := tg.Admin(t, "GET", "resilience/cooldowns?provider=openai", "")
	a := c.Get(`connections.#(id=="openai-a")`)
	if a.Get("status").Str != "cooling_down" || a.Get("errorCode").Int() != 429 || a.Get("lastErrorType").Str != "rate_limit" ||
		a.Get("cooldownRemainingMs").Int() <= 0 || a.Get("cooldownRemainingMs").Int() > 3000 {
		t.Fatalf("openai-a after its 429 (Retry-After: 3): %s", a.Raw)
	}

	requireAnswer(t, "while openai-a cools", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/1")
	requireRequests(t, "while openai-a cools", fake, map[string]int{"key-a": 1, "key-b": 2})

	e2etest.WaitFor(t, "openai-a's Retry-After to pass", func() bool {
		_, c := tg.Admin(t, "GET", "resilience/cooldowns?provider=openai", "")
		return c.Get(`connections.#(id=="openai-a").status`).Str == "healthy"
	})
	requireAnswer(t, "after the Retry-After", tg.Chat(t, "gpt-4o", nil), "openai/openai-a/gpt-4o/1")
	requireRequests(t, "after the Retry-After", fake, map[string]int{"key-a": 2, "key-b": 2})
}
