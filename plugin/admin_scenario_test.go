package main

// Admin API scenarios: build/spillway.wasm in hostsim with two worker VMs on the virtual
// clock. Every admin path is called on the compiled module; state set by traffic on one
// worker is read and reset through the admin API on the other, and the first worker's next
// request shows the reset took.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
)

const adminToken = "scenario-admin-token-0123"

// adminPolicy is the scenario policy with model lockout on and the admin API.
var adminPolicy = scenarioPolicy + `
resilience:
  modelLockout: {enabled: true}
admin: {token: "` + adminToken + `"}
`

// adminReq is an admin API call: a GET when body is "", else method with the body in two
// chunks (so the filter must hold the headers for it). auth is the Authorization value
// ("" = no header).
func adminReq(method, path, auth, body string) *hostsim.Request {
	hs := [][2]string{{":method", method}, {":path", "/spillway/api/" + path}, {":authority", "spillway.local"}, {":scheme", "http"}}
	if auth != "" {
		hs = append(hs, [2]string{"authorization", auth})
	}
	if body == "" {
		return &hostsim.Request{Headers: hs}
	}
	hs = append(hs, [2]string{"content-type", "application/json"}, [2]string{"content-length", strconv.Itoa(len(body))})
	half := len(body) / 2
	return &hostsim.Request{Headers: hs, BodyChunks: [][]byte{[]byte(body[:half]), []byte(body[half:])}}
}

// admin calls the admin API on worker i with the right token and checks it was answered
// by the filter itself, as JSON.
func (w *world) admin(worker int, method, path, body string) (*hostsim.Response, gjson.Result) {
	w.t.Helper()
	resp := w.run(worker, adminReq(method, path, "Bearer "+adminToken, body))
	if resp.LocalReply == nil || resp.Upstream != nil {
		w.t.Fatalf("%s %s was not answered by the filter: %d, upstream %v", method, path, resp.StatusCode, resp.Upstream)
	}
	if !gjson.ValidBytes(resp.Body) || header(resp.Headers, "content-type") != "application/json" {
		w.t.Fatalf("%s %s: not a JSON reply: %q", method, path, resp.Body)
	}
	return resp, gjson.ParseBytes(resp.Body)
}

// rateLimitKeyA makes key A answer 429 with Retry-After: 120.
func (w *world) rateLimitKeyA() {
	w.fakes.set("sk-a", rateLimited("120"))
}

func TestAdminScenarioAuth(t *testing.T) {
	w := newWorld(t, adminPolicy, 2)
	for _, tc := range []struct {
		name   string // the case
		auth   string // the Authorization header ("" = none)
		status int    // the status the filter answers with
		code   string // its error.code ("" for a success)
	}{
		{name: "no token", status: 401, code: "unauthorized"},
		{name: "another scheme", auth: "Basic " + adminToken, status: 401, code: "unauthorized"},
		{name: "wrong token", auth: "Bearer wrong-token-of-some-length", status: 403, code: "forbidden"},
		{name: "right token", auth: "Bearer " + adminToken, status: 200},
	} {
		for i, path := range []string{"monitoring/health", "resilience/reset"} {
			method, body := "GET", ""
			if i == 1 {
				method, body = "POST", `{"provider":"openai"}`
			}
			resp := w.run(i, adminReq(method, path, tc.auth, body))
			if resp.StatusCode != tc.status || resp.Upstream != nil || resp.LocalReply == nil {
				t.Fatalf("%s %s: %d (upstream %v), want %d from the filter", tc.name, path, resp.StatusCode, resp.Upstream, tc.status)
			}
			if tc.code != "" && errorCode(resp) != tc.code {
				t.Fatalf("%s %s: code %q, want %q", tc.name, path, errorCode(resp), tc.code)
			}
			if strings.Contains(string(resp.Body), adminToken) {
				t.Fatalf("%s: the reply holds the token", tc.name)
			}
		}
	}
	// A refused reset did nothing: only the authorized one is logged.
	if n := resetLogs(w); n != 1 {
		t.Fatalf("%d reset log lines, want 1 (the authorized reset)", n)
	}
	w.noStreamsLeft()
}

// No lookalike of the admin path and no request carrying the admin token elsewhere reaches
// an upstream: each is answered 404 by the filter, counted and logged without the token, and
// the fakes receive nothing; the admin API itself still answers.
func TestAdminScenarioLookalikesAndTheTokenNeverReachTheUpstream(t *testing.T) {
	w := newWorld(t, adminPolicy, 2)
	bearer := "Bearer " + adminToken
	refused := 0
	wantRefused := func(what string, req *hostsim.Request) {
		t.Helper()
		resp := w.run(refused%2, req)
		refused++
		if resp.StatusCode != 404 || resp.LocalReply == nil || resp.Upstream != nil || errorCode(resp) != "not_found" {
			t.Errorf("%s: %d (local %v, upstream %v), want the filter's 404 not_found and nothing upstream",
				what, resp.StatusCode, resp.LocalReply != nil, resp.Upstream)
		}
		if strings.Contains(string(resp.Body), adminToken) {
			t.Errorf("%s: the reply holds the token", what)
		}
	}
	for _, path := range lookalikePaths {
		wantRefused(path, &hostsim.Request{Headers: [][2]string{{":method", "GET"}, {":path", path},
			{":authority", "spillway.local"}, {":scheme", "http"}, {"authorization", bearer}}})
	}
	for _, cred := range [][2]string{{"authorization", bearer}, {"x-api-key", adminToken}} {
		wantRefused("GET /v1/models with "+cred[0], &hostsim.Request{Headers: [][2]string{{":method", "GET"},
			{":path", "/v1/models"}, {":authority", "spillway.local"}, {":scheme", "http"}, cred}})
		req := chatReq("gpt-4o", cred)
		if cred[0] == "authorization" {
			req = chatReq("gpt-4o")
			for i := range req.Headers {
				if req.Headers[i][0] == "authorization" {
					req.Headers[i][1] = bearer
				}
			}
		}
		wantRefused("a chat completion with "+cred[0], req)
	}
	if calls := w.fakes.received(); len(calls) != 0 {
		t.Fatalf("the fakes received %d requests: %+v", len(calls), calls)
	}
	if _, h := w.admin(0, "GET", "monitoring/health", ""); h.Get("status").Str != "healthy" {
		t.Fatalf("the admin API: %s", h.Raw)
	}
	expect(t, "an ordinary request", w.run(1, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	if n := w.metric("spillway_admin_lookalikes_total"); n != uint64(refused) {
		t.Errorf("spillway_admin_lookalikes_total = %d, want %d", n, refused)
	}
	warned := 0
	for _, e := range w.host.Host.Logs() {
		if strings.Contains(e.Message, adminToken) {
			t.Fatalf("a log line holds the token: %q", e.Message)
		}
		if e.Level == hostsim.LogWarn && strings.Contains(e.Message, "looks like the admin API without being it") {
			warned++
		}
	}
	if warned != refused {
		t.Errorf("%d warn lines for %d refusals", warned, refused)
	}
	w.noStreamsLeft()
}

// Without an admin token the admin paths are ordinary requests: they pass through.
func TestAdminScenarioOffPassesThrough(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	resp := w.run(0, adminReq("GET", "monitoring/health", "Bearer "+adminToken, ""))
	if resp.LocalReply != nil || resp.Upstream == nil || header(resp.Upstream.Headers, ":path") != "/spillway/api/monitoring/health" {
		t.Fatalf("admin off: %d local %v, want the request passed upstream", resp.StatusCode, resp.LocalReply)
	}
	resp = w.run(1, adminReq("POST", "resilience/reset", "", `{}`))
	if resp.LocalReply != nil || resp.Upstream == nil || string(resp.Upstream.Body) != "{}" {
		t.Fatalf("admin off POST: %d local %v, want it passed upstream with its body", resp.StatusCode, resp.LocalReply)
	}
	w.noStreamsLeft()
}

// A cooldown set by traffic on worker 0 is seen and cleared through the admin API on worker
// 1, and worker 0's next request uses the connection again; the clear is logged at info.
func TestAdminScenarioCooldownClearReachesEveryWorker(t *testing.T) {
	w := newWorld(t, scenarioPolicy+"admin: {token: \""+adminToken+"\"}\n", 2) // model lockout off: 429s cool the key
	w.rateLimitKeyA()
	expect(t, "429 fails over", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	w.fakes.set("sk-a", nil)
	w.advance(10 * time.Second)
	_, l := w.admin(1, "GET", "resilience/cooldowns?provider=openai", "")
	if l.Get("connections.#").Int() != 2 || l.Get("connections.0.id").Str != "key-a" || l.Get("connections.0.status").Str != "cooling_down" ||
		l.Get("connections.0.cooldownRemainingMs").Int() != 110000 || l.Get("connections.0.errorCode").Int() != 429 ||
		l.Get("connections.0.lastErrorType").Str != "rate_limit" || l.Get("connections.1.status").Str != "healthy" {
		t.Fatalf("cooldowns on worker 1: %s", l.Raw)
	}
	expect(t, "while cooling", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	resp, c := w.admin(1, "POST", "resilience/cooldowns", `{"connectionIds":["key-a"]}`)
	if resp.StatusCode != 200 || c.Get("cleared").Int() != 1 || c.Get("unchanged").Int() != 0 || c.Get("skippedTerminal").Int() != 0 {
		t.Fatalf("clear: %d %s", resp.StatusCode, c.Raw)
	}
	expect(t, "after the clear, worker 0", w.run(0, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	if n := countLogs(w, "admin POST \"/spillway/api/resilience/cooldowns\": cleared cooldowns of connections [key-a]: cleared [key-a]"); n != 1 {
		t.Fatalf("clear log lines %d: %v", n, w.host.Host.LogsAt(hostsim.LogInfo))
	}
	w.noStreamsLeft()
}

// A model lockout set by traffic on worker 0 is listed and deleted on worker 1.
func TestAdminScenarioModelCooldowns(t *testing.T) {
	w := newWorld(t, adminPolicy, 2)
	w.rateLimitKeyA()
	expect(t, "429 locks gpt-4o on key-a", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	w.fakes.set("sk-a", nil)
	_, l := w.admin(1, "GET", "resilience/model-cooldowns", "")
	if l.Get("items.#").Int() != 1 || l.Get("items.0.provider").Str != "openai" || l.Get("items.0.connection").Str != "key-a" ||
		l.Get("items.0.model").Str != "gpt-4o" || l.Get("items.0.remainingMs").Int() != 120000 || l.Get("items.0.status").Int() != 429 {
		t.Fatalf("model cooldowns on worker 1: %s", l.Raw)
	}
	_, h := w.admin(0, "GET", "monitoring/health", "")
	if h.Get("lockouts.#").Int() != 1 || h.Get("connections.0.status").Str != "model_locked" || h.Get("settings.modelLockout").Bool() != true {
		t.Fatalf("health: %s", h.Raw)
	}
	expect(t, "while locked", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	resp, d := w.admin(1, "DELETE", "resilience/model-cooldowns", `{"provider":"openai","connection":"key-a","model":"gpt-4o"}`)
	if resp.StatusCode != 200 || d.Get("removed").Int() != 1 {
		t.Fatalf("delete: %d %s", resp.StatusCode, d.Raw)
	}
	expect(t, "after the delete, worker 0", w.run(0, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	if _, l = w.admin(0, "GET", "resilience/model-cooldowns", ""); l.Get("items.#").Int() != 0 {
		t.Fatalf("lockouts left: %s", l.Raw)
	}
	if n := countLogs(w, `re-enabled model "gpt-4o" on openai/key-a: 1 model lockout(s) removed`); n != 1 {
		t.Fatalf("delete log lines %d", n)
	}
	w.noStreamsLeft()
}

// localBreakerPolicy: a local-profile provider (its breaker opens at 2 failures for 15 s)
// and a backup, one attempt per request.
const localBreakerPolicy = `
providers:
  - id: openai
    profile: local
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
  - id: backup
    cluster: backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer sk-backup"}}
      - {id: backup-b, credential: {header: authorization, value: "Bearer sk-backup-b"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
      - {provider: backup}
resilience:
  failover: {maxAttempts: 1}
admin: {token: "` + adminToken + `"}
`

// An OPEN breaker and a terminal connection, both set by traffic on worker 0, are reset
// through worker 1 (POST resilience/reset), and worker 0 sends to the provider again.
func TestAdminScenarioResetReachesEveryWorker(t *testing.T) {
	w := newWorld(t, localBreakerPolicy, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(503, `{"error":{"message":"upstream unavailable","type":"server_error"}}`)
	})
	w.fakes.set("sk-backup", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}`)
	})
	expect(t, "first 503", w.run(0, chatReq("gpt-4o")), 503, "openai/key-a/gpt-4o/1")
	w.advance(6 * time.Second) // key-a's cooldown (5 s) runs out; the breaker counts on
	expect(t, "second 503", w.run(0, chatReq("gpt-4o")), 503, "openai/key-a/gpt-4o/1")
	expect(t, "breaker open: backup, credits gone", w.run(0, chatReq("gpt-4o")), 400, "backup/backup-a/gpt-4o/1")
	w.fakes.set("sk-a", nil)
	_, h := w.admin(1, "GET", "monitoring/health", "")
	if h.Get("providerHealth.openai.state").Str != "OPEN" || h.Get("providerHealth.openai.failures").Int() != 2 ||
		h.Get("providerHealth.openai.retryAfterMs").Int() <= 0 || h.Get("circuitBreakers.open").Int() != 1 ||
		h.Get(`connections.#(id=="backup-a").status`).Str != "terminal" {
		t.Fatalf("health on worker 1: %s", h.Raw)
	}
	// The cooldown manager shows the terminal state but never clears it.
	_, c := w.admin(1, "POST", "resilience/cooldowns", `{"all":true,"provider":"backup"}`)
	if c.Get("skippedTerminal").Int() != 1 || c.Get("connections.skippedTerminal.0").Str != "backup-a" || c.Get("unchanged").Int() != 1 {
		t.Fatalf("clear: %s", c.Raw)
	}
	expect(t, "still open", w.run(0, chatReq("gpt-4o")), 200, "backup/backup-b/gpt-4o/1")
	resp, r := w.admin(1, "POST", "resilience/reset", "")
	if resp.StatusCode != 200 || r.Get("resetCount").Int() != 2 || r.Get("breakersReset").Int() != 1 ||
		r.Get("terminalCleared.0").Str != "backup-a" {
		t.Fatalf("reset: %d %s", resp.StatusCode, r.Raw)
	}
	expect(t, "after the reset, worker 0", w.run(0, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	if _, h = w.admin(0, "GET", "monitoring/health", ""); h.Get("providerHealth.openai.state").Str != "CLOSED" ||
		h.Get(`connections.#(id=="backup-a").status`).Str != "healthy" {
		t.Fatalf("health after the reset: %s", h.Raw)
	}
	if n := countLogs(w, `admin POST "/spillway/api/resilience/reset": reset openai, backup: 1 breaker(s)`); n != 1 {
		t.Fatalf("reset log lines %d: %v", n, w.host.Host.LogsAt(hostsim.LogInfo))
	}
	w.noStreamsLeft()
}

// Caps in use and queue depths, every worker's leases counted.
func TestAdminScenarioHealthShowsCapsInUse(t *testing.T) {
	policy := strings.Replace(adminPolicy, `{id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}`,
		`{id: key-a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 3, modelConcurrency: {gpt-4o: 2}}`, 1)
	w := newWorld(t, policy, 2)
	w.fakes.set("sk-a", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 10 * time.Second
		return r
	})
	a := w.start(0, chatReq("gpt-4o"))
	b := w.start(1, chatReq("gpt-4o"))
	w.advance(time.Second)
	_, h := w.admin(0, "GET", "monitoring/health", "")
	rl := h.Get(`rateLimitStatus.openai\:key-a`)
	if rl.Get("running").Int() != 2 || rl.Get("maxConcurrent").Int() != 3 || rl.Get("models.gpt-4o.running").Int() != 2 ||
		rl.Get("models.gpt-4o.limit").Int() != 2 || rl.Get("queued").Int() != 0 {
		t.Fatalf("rate limit status while two requests run: %s", h.Get("rateLimitStatus").Raw)
	}
	expect(t, "a", w.wait(a), 200, "openai/key-a/gpt-4o/1")
	expect(t, "b", w.wait(b), 200, "openai/key-a/gpt-4o/1")
	if _, h = w.admin(1, "GET", "monitoring/health", ""); h.Get(`rateLimitStatus.openai\:key-a.running`).Int() != 0 {
		t.Fatalf("after both ended: %s", h.Get("rateLimitStatus").Raw)
	}
	w.noStreamsLeft()
}

// Bad requests get typed errors from the compiled module too.
func TestAdminScenarioBadRequests(t *testing.T) {
	w := newWorld(t, adminPolicy, 2)
	for i, tc := range []struct {
		method, path, body string // the request (path under the prefix; body "" = a GET without one)
		status             int    // the refusal's status
		code, param        string // its error.code and error.param
	}{
		{"POST", "resilience/cooldowns", `{"connectionIds":`, 400, "invalid_json", ""},
		{"POST", "resilience/cooldowns", `[]`, 400, "invalid_json", ""},
		{"POST", "resilience/cooldowns", `{"ids":["key-a"]}`, 400, "unknown_field", "ids"},
		{"POST", "resilience/cooldowns", `{"all":"yes"}`, 400, "invalid_field", "all"},
		{"POST", "resilience/cooldowns", `{"all":false}`, 400, "missing_field", "connectionIds"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["key-z"]}`, 400, "unknown_connection", "connectionIds"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"openai"}`, 400, "missing_field", "model"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"azure","model":"gpt-4o"}`, 400, "unknown_provider", "provider"},
		{"POST", "resilience/reset", `{"provider":42}`, 400, "invalid_field", "provider"},
		{"POST", "resilience/reset", `{"provider":"x"}` + strings.Repeat(" ", 70<<10), 413, "request_too_large", ""},
		{"GET", "resilience/cooldowns?provider=%zz", "", 400, "invalid_query", "provider"},
		{"GET", "resilience/reset", "", 405, "method_not_allowed", ""},
		{"GET", "resilience/nothing", "", 404, "not_found", ""},
	} {
		resp, b := w.admin(i%2, tc.method, tc.path, tc.body)
		if resp.StatusCode != tc.status || b.Get("error.code").Str != tc.code || b.Get("error.param").Str != tc.param {
			t.Errorf("%s %s %.40q: %d %s, want %d %s %s", tc.method, tc.path, tc.body, resp.StatusCode, b.Raw, tc.status, tc.code, tc.param)
		}
		if tc.status == 405 && header(resp.Headers, "allow") != "POST" {
			t.Errorf("405 without Allow: %v", resp.Headers)
		}
	}
	if n := resetLogs(w); n != 0 {
		t.Fatalf("%d reset log lines for refused calls", n)
	}
	w.noStreamsLeft()
}

// No log line and no admin reply ever holds a credential or the admin token.
func TestAdminScenarioNoSecretInRepliesOrLogs(t *testing.T) {
	w := newWorld(t, adminPolicy, 2)
	w.rateLimitKeyA()
	expect(t, "traffic", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	var bodies []string
	for _, c := range [][3]string{
		{"GET", "monitoring/health", ""}, {"GET", "resilience/cooldowns", ""}, {"GET", "resilience/model-cooldowns", ""},
		{"POST", "resilience/cooldowns", `{"all":true}`}, {"DELETE", "resilience/model-cooldowns", `{"all":true}`},
		{"POST", "resilience/reset", `{"provider":"openai"}`},
	} {
		resp, _ := w.admin(1, c[0], c[1], c[2])
		bodies = append(bodies, string(resp.Body), fmt.Sprint(resp.Headers))
	}
	for _, e := range w.host.Host.Logs() {
		bodies = append(bodies, e.Message)
	}
	all := strings.Join(bodies, "\n")
	for _, secret := range []string{adminToken, "sk-a", "sk-b", "sk-backup", "sk-ant"} {
		if strings.Contains(all, secret) {
			t.Fatalf("%q appears in a reply or log:\n%s", secret, all)
		}
	}
	if resetLogs(w) != 3 {
		t.Fatalf("want 3 reset log lines: %v", w.host.Host.LogsAt(hostsim.LogInfo))
	}
}

// A held admin body on a proxy without allow_on_headers_stop_iteration is reported, never a
// hang, as for LLM requests.
func TestAdminScenarioWithoutTheOption(t *testing.T) {
	w := newWorld(t, adminPolicy, 1, hostsim.WithoutAllowOnHeadersStopIteration())
	ex := w.start(0, adminReq("POST", "resilience/reset", "Bearer "+adminToken, `{}`))
	w.advance(11 * time.Second)
	resp := w.wait(ex)
	if resp.StatusCode != 500 || errorCode(resp) != "spillway_misconfigured" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Body)
	}
	// A GET needs no body: answered at once.
	if _, h := w.admin(0, "GET", "monitoring/health", ""); h.Get("status").Str != "healthy" {
		t.Fatalf("health %s", h.Raw)
	}
}

// countLogs counts info lines containing s.
func countLogs(w *world, s string) int {
	n := 0
	for _, m := range w.host.Host.LogsAt(hostsim.LogInfo) {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// resetLogs counts the admin API's reset log lines.
func resetLogs(w *world) int {
	return countLogs(w, "spillway: admin POST ") + countLogs(w, "spillway: admin DELETE ")
}

// lookalikePaths spell the admin prefix /spillway/api/ otherwise: each canonicalises under
// it (plugin/internal/admin CanonicalPath) without being under it byte for byte.
var lookalikePaths = []string{
	"/SPILLWAY/api/monitoring/health",
	"/spillway%2Fapi/monitoring/health",
	"//spillway/api/monitoring/health",
	"/x/../spillway/api/monitoring/health",
	"/spillway%5Capi/monitoring/health",
	"/x/%2e%2e/spillway/api/monitoring/health",
	"/spillway%2fAPI/resilience/cooldowns?provider=openai", // mixed case, in the escape too
	"/spillway/x/../api/.",                                 // a trailing dot segment
}

// adminScenarios are the differential suite's admin API scenarios (differential_test.go):
// the glue must answer the same natively and in wasm. They avoid replies with a timestamp
// (proxytest's clock is the wall clock, hostsim's virtual).
func adminScenarios(demo []byte) []scenario {
	const token = "Bearer spillway-demo-admin-token" // the demo policy's default
	call := func(r *recorder, method, path, auth string, chunks ...string) {
		id := r.e.InitializeHttpContext()
		hs := [][2]string{{":method", method}, {":path", "/spillway/api/" + path}, {":authority", "spillway.local"}}
		if auth != "" {
			hs = append(hs, [2]string{"authorization", auth})
		}
		r.act("admin headers", r.e.CallOnRequestHeaders(id, hs, len(chunks) == 0))
		for i, c := range chunks {
			if r.local(id) != "" {
				break // refused at its headers: Envoy delivers no more of the body
			}
			r.act("admin body", r.e.CallOnRequestBody(id, []byte(c), i == len(chunks)-1))
		}
		r.snapshot(id)
		r.e.CompleteHttpContext(id)
	}
	return []scenario{
		{name: "admin API refuses a missing or wrong token", config: demo, run: func(r *recorder) {
			call(r, "GET", "monitoring/health", "")
			call(r, "POST", "resilience/reset", "Bearer wrong-token", `{}`)
		}},
		{name: "admin lookalikes and the admin token elsewhere are answered 404", config: demo, run: func(r *recorder) {
			refuse := func(step string, hs [][2]string, eos bool) {
				id := r.e.InitializeHttpContext()
				r.act(step, r.e.CallOnRequestHeaders(id, hs, eos))
				r.snapshot(id)
				r.e.CompleteHttpContext(id)
			}
			for _, path := range lookalikePaths {
				refuse("lookalike "+path, [][2]string{{":method", "GET"}, {":path", path}, {":authority", "spillway.local"},
					{"authorization", token}}, true)
			}
			for _, cred := range [][2]string{{"authorization", token}, {"x-api-key", strings.TrimPrefix(token, "Bearer ")}} {
				refuse("pass-through with the token", [][2]string{{":method", "GET"}, {":path", "/v1/models"},
					{":authority", "spillway.local"}, cred}, true)
				refuse("routed with the token", append(chatHeadersOf("/v1/chat/completions")[:4], cred), false)
			}
			call(r, "GET", "resilience/model-cooldowns", token) // the API itself still answers
		}, check: func(t *testing.T, o observation) {
			n := len(lookalikePaths) + 4
			if len(o.LocalResponses) != n+1 {
				t.Fatalf("%d streams, want %d", len(o.LocalResponses), n+1)
			}
			for i, lr := range o.LocalResponses[:n] {
				if !strings.HasPrefix(lr, `404 {"error":{"message":"not found"`) || strings.Contains(lr, "spillway-demo-admin-token") {
					t.Errorf("stream %d (%s): %q, want the lookalike 404", i, o.Actions[i], lr)
				}
			}
			if !strings.HasPrefix(o.LocalResponses[n], "200 ") {
				t.Errorf("the admin API: %q", o.LocalResponses[n])
			}
		}},
		{name: "admin API answers with held bodies and logs its resets", config: demo, run: func(r *recorder) {
			call(r, "GET", "resilience/model-cooldowns", token)
			call(r, "POST", "resilience/reset", token, `{"provi`, `der":"openai"}`)
			call(r, "POST", "resilience/cooldowns", token, `{"all":true}`)
			call(r, "DELETE", "resilience/model-cooldowns", token, `{"provider":"openai","model":"gpt-4o"}`)
			call(r, "POST", "resilience/cooldowns", token, `{"connectionIds":["nope"]}`)
			call(r, "POST", "resilience/reset", token) // no body at all
		}},
	}
}
