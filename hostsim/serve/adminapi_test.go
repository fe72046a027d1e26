package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// demoAdminToken is the demo policy's admin token when SPILLWAY_ADMIN_TOKEN is not set.
const demoAdminToken = "spillway-demo-admin-token"

// adminCall sends an admin API request to the front end (token "" = no Authorization).
func adminCall(t *testing.T, d *demo, method, path, token, body string) (int, http.Header, gjson.Result) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, d.URL()+"/spillway/api/"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("content-type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !gjson.ValidBytes(b) {
		t.Fatalf("%s %s: %d, not JSON: %q", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, gjson.ParseBytes(b)
}

// The README's admin API walk-through against `make serve` (the demo policy): a 429 on
// openai-a locks gpt-4o there, the admin API lists it, deletes it, and openai-a serves
// again; the cooldown manager and the reset answer; the token comes from the policy.
func TestAdminAPIOnTheDemo(t *testing.T) {
	d := startDemo(t, nil)
	if b := d.Banner(); !strings.Contains(b, "admin API: "+d.URL()+"/spillway/api/ (") || strings.Contains(b, demoAdminToken) {
		t.Fatalf("banner must name the admin API, never its token:\n%s", b)
	}
	if st, _, r := adminCall(t, d, "GET", "monitoring/health", "", ""); st != 401 || r.Get("error.code").Str != "unauthorized" {
		t.Fatalf("no token: %d %s", st, r.Raw)
	}
	st, h, r := adminCall(t, d, "GET", "monitoring/health", demoAdminToken, "")
	if st != 200 || r.Get("status").Str != "healthy" || r.Get("providerHealth.openai.state").Str != "CLOSED" ||
		r.Get("connections.#").Int() != 4 || h.Get("cache-control") != "no-store" {
		t.Fatalf("health: %d %s", st, r.Raw)
	}
	status, hdr, _ := post(t, d.URL()+"/v1/chat/completions", chatBody,
		map[string]string{"x-fake-scenario": "rate-limit", "x-fake-key-suffix": "key-a"})
	if status != 200 || hdr.Get("x-spillway-connection") != "openai-b" || hdr.Get("x-spillway-attempts") != "2" {
		t.Fatalf("the 429 on openai-a: %d via %s/%s", status, hdr.Get("x-spillway-connection"), hdr.Get("x-spillway-attempts"))
	}
	_, _, r = adminCall(t, d, "GET", "resilience/model-cooldowns", demoAdminToken, "")
	if r.Get("items.#").Int() != 1 || r.Get("items.0.connection").Str != "openai-a" || r.Get("items.0.model").Str != "gpt-4o" ||
		r.Get("items.0.reason").Str != "rate_limit" {
		t.Fatalf("model cooldowns: %s", r.Raw)
	}
	st, _, r = adminCall(t, d, "DELETE", "resilience/model-cooldowns", demoAdminToken,
		`{"provider":"openai","connection":"openai-a","model":"gpt-4o"}`)
	if st != 200 || r.Get("removed").Int() != 1 {
		t.Fatalf("delete: %d %s", st, r.Raw)
	}
	if status, hdr, _ = post(t, d.URL()+"/v1/chat/completions", chatBody, nil); status != 200 || hdr.Get("x-spillway-connection") != "openai-a" {
		t.Fatalf("after the delete: %d via %s", status, hdr.Get("x-spillway-connection"))
	}
	st, _, r = adminCall(t, d, "GET", "resilience/cooldowns?provider=openai", demoAdminToken, "")
	if st != 200 || r.Get("connections.#").Int() != 2 || r.Get("connections.0.concurrency.maxConcurrent").Int() != 4 {
		t.Fatalf("cooldowns: %d %s", st, r.Raw)
	}
	st, _, r = adminCall(t, d, "POST", "resilience/cooldowns", demoAdminToken, `{"all":true,"provider":"openai"}`)
	if st != 200 || r.Get("unchanged").Int() != 2 {
		t.Fatalf("clear: %d %s", st, r.Raw)
	}
	st, _, r = adminCall(t, d, "POST", "resilience/reset", demoAdminToken, "")
	if st != 200 || r.Get("resetCount").Int() != 3 {
		t.Fatalf("reset: %d %s", st, r.Raw)
	}
	if lines := d.logs.await(`admin POST "/spillway/api/resilience/reset": reset openai, openrouter, anthropic`, 1); len(lines) != 1 {
		t.Fatalf("reset log lines %v", lines)
	}
	if strings.Contains(d.logs.String(), demoAdminToken) {
		t.Fatal("a log line holds the admin token")
	}
}

// SPILLWAY_ADMIN_TOKEN in the VM environment (-env) replaces the demo's default token.
func TestAdminAPITokenFromTheEnvironment(t *testing.T) {
	d := startDemo(t, func(o *Options) {
		o.Env = append(o.Env, EnvVar{Key: "SPILLWAY_ADMIN_TOKEN", Value: "from-the-env-0123456789"})
	})
	if st, _, r := adminCall(t, d, "GET", "monitoring/health", demoAdminToken, ""); st != 403 || r.Get("error.code").Str != "forbidden" {
		t.Fatalf("the demo token with another configured: %d %s", st, r.Raw)
	}
	if st, _, _ := adminCall(t, d, "GET", "monitoring/health", "from-the-env-0123456789", ""); st != 200 {
		t.Fatalf("the environment's token: %d", st)
	}
}
