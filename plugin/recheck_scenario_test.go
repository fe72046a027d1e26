package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// The opt-in re-check of expired connections (resilience.terminalRecheck, issue 19) through
// the built module: key A of the scenario policy is revoked and expires the guide's way
// (§2: three revoked-key 401s, EXPIRED_RETRY_MAX = 3), then the key is fixed at the provider
// (its models endpoint, like its chat endpoint, starts answering 200). With the re-check on,
// a check a minute after the expiry (intervalMs) restores it and the next chat request uses
// it; with it off the key stays out.

const recheckPolicy = scenarioPolicy + `
resilience:
  terminalRecheck: {enabled: true, intervalMs: 60000}
`

// revocableKey is a provider key that answers 401 on every path until fix is set, and then
// what the provider answers for a working key: its model list on GET /v1/models, a chat
// completion otherwise.
type revocableKey struct{ fixed atomic.Bool }

func (k *revocableKey) answer(call upstreamCall) *hostsim.UpstreamResponse {
	if !k.fixed.Load() {
		return jsonError(401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}
	if header(call.headers, ":path") == "/v1/models" {
		return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "200"}, {"content-type", "application/json"}},
			Body: []byte(`{"object":"list","data":[{"id":"gpt-4o","object":"model","owned_by":"openai"}]}`)}
	}
	return chatOK(call)
}

// modelsCalls are the checks a credential received: GET /v1/models, each with its time.
func (w *world) modelsCalls(credential string) []upstreamCall {
	var out []upstreamCall
	for _, c := range w.fakes.received() {
		if c.credential == credential && header(c.headers, ":path") == "/v1/models" {
			out = append(out, c)
		}
	}
	return out
}

// expireKeyA revokes key A and sends the three requests that expire it (each fails over to
// key B), the cooldowns between them (3 s, 6 s) left to run out; it returns the key and the
// time of the expiry.
func (w *world) expireKeyA() (*revocableKey, time.Time) {
	w.t.Helper()
	key := &revocableKey{}
	w.fakes.set("sk-a", key.answer)
	for i := range 3 {
		expect(w.t, "revoked key A", w.run(i%2, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
		if i < 2 {
			w.advance(10 * time.Second)
		}
	}
	expiredAt := w.host.Clock().Now()
	w.advance(10 * time.Second)
	expect(w.t, "key A expired", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	return key, expiredAt
}

// The key is still revoked at the first check (a minute after the expiry: refused, it stays
// out), fixed before the second, which comes two minutes after the first (the interval
// doubled by the refusal) and restores it: the next chat request, on the other worker, uses
// key A. The check is GET /v1/models with key A's credential and the provider's :authority,
// once per check across both workers; the restore is logged at info and counted.
func TestScenarioARevokedKeyThatIsFixedComesBack(t *testing.T) {
	w := newWorld(t, recheckPolicy, 2)
	key, expiredAt := w.expireKeyA()
	w.advance(expiredAt.Add(59 * time.Second).Sub(w.host.Clock().Now()))
	if n := len(w.modelsCalls("sk-a")); n != 0 {
		t.Fatalf("%d checks within the interval", n)
	}
	w.advance(2 * time.Second)
	checks := w.modelsCalls("sk-a")
	if len(checks) != 1 {
		t.Fatalf("%d checks a minute after the expiry, want 1", len(checks))
	}
	first := checks[0]
	if d := first.at.Sub(expiredAt); d < time.Minute || d > 61*time.Second {
		t.Fatalf("the first check came %v after the expiry, want a minute (the next tick)", d)
	}
	if !first.viaCallout || first.cluster != "openai" || header(first.headers, ":method") != "GET" ||
		header(first.headers, ":authority") != "api.openai.com" || header(first.headers, "authorization") != "Bearer sk-a" {
		t.Fatalf("the check: cluster %q callout %v headers %v", first.cluster, first.viaCallout, first.headers)
	}
	expect(t, "after a refused check", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")

	key.fixed.Store(true)
	w.advance(first.at.Add(119 * time.Second).Sub(w.host.Clock().Now()))
	if n := len(w.modelsCalls("sk-a")); n != 1 {
		t.Fatalf("%d checks within twice the interval of a refused one, want still 1", n)
	}
	w.advance(2 * time.Second)
	if n := len(w.modelsCalls("sk-a")); n != 2 {
		t.Fatalf("%d checks two minutes after the refused one, want 2", n)
	}
	expect(t, "after the passing check, worker 1", w.run(1, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	expect(t, "and worker 0", w.run(0, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	w.wantCount("restored", 1, &stats.ConnectionRechecks, "openai", "key-a", stats.RecheckRestored)
	w.wantCount("refused", 1, &stats.ConnectionRechecks, "openai", "key-a", stats.RecheckRefused)
	if n := countLogs(w, "spillway: terminal re-check: provider=openai connection=key-a status=200: the credential works again, expired state cleared"); n != 1 {
		t.Fatalf("%d restore log lines at info, want 1: %v", n, w.host.Host.LogsAt(hostsim.LogInfo))
	}
	for _, e := range w.host.Host.Logs() {
		if strings.Contains(e.Message, "sk-a") {
			t.Fatalf("a log line holds the credential: %s", e.Message)
		}
	}
	w.advance(10 * time.Minute)
	if n := len(w.modelsCalls("sk-a")); n != 2 {
		t.Fatalf("%d checks after the restore, want none more", n)
	}
	w.noStreamsLeft()
}

// An Anthropic provider's check carries the connection's x-api-key and anthropic-version.
func TestScenarioAnAnthropicKeyIsCheckedInItsAPI(t *testing.T) {
	w := newWorld(t, recheckPolicy, 2)
	key := &revocableKey{}
	w.fakes.set("sk-ant", key.answer)
	req := func() *hostsim.Request {
		return llmRequest("/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	}
	for i := range 3 {
		if r := w.run(i%2, req()); r.StatusCode != 401 {
			t.Fatalf("revoked: %d, want the provider's 401", r.StatusCode)
		}
		w.advance(10 * time.Second)
	}
	key.fixed.Store(true)
	w.advance(time.Minute)
	checks := w.modelsCalls("sk-ant")
	if len(checks) != 1 {
		t.Fatalf("%d checks, want 1", len(checks))
	}
	if c := checks[0]; c.cluster != "anthropic" || header(c.headers, "x-api-key") != "sk-ant" ||
		header(c.headers, "anthropic-version") != "2023-06-01" || header(c.headers, "authorization") != "" {
		t.Fatalf("the check: cluster %q headers %v", c.cluster, c.headers)
	}
	if r := w.run(0, req()); r.StatusCode != 200 || header(r.Headers, "x-spillway-connection") != "ant-a" {
		t.Fatalf("after the check: %d via %s, want 200 from ant-a", r.StatusCode, spillway(r))
	}
	w.noStreamsLeft()
}

// Without the terminalRecheck block a fixed key stays expired: nothing is checked, and key B
// serves every request, ten minutes on.
func TestScenarioWithoutTheRecheckAFixedKeyStaysOut(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	key, _ := w.expireKeyA()
	key.fixed.Store(true)
	w.advance(10 * time.Minute)
	if n := len(w.modelsCalls("sk-a")); n != 0 {
		t.Fatalf("%d checks with the re-check off", n)
	}
	expect(t, "ten minutes on", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	w.noStreamsLeft()
}

// What the re-check costs the ticks, over two idle minutes of every VM (the main-thread VM
// and two workers): with it on and nothing expired, each VM looks once a second, and a look
// is one shared-data read (its cache's generation; the connections' records are cached) and no
// write. (With the block off the ticks make exactly the calls they made before the re-check
// existed: 300 reads and 180 writes here, measured against the module built from the commit
// before it.)
func TestScenarioTheRecheckCostsAnIdleTickOneRead(t *testing.T) {
	shared := func(policy string) (gets, sets uint64, vms int) {
		w := newWorld(t, policy, 2)
		w.advance(10 * time.Second)
		before := w.host.Host.HostCalls()
		w.advance(2 * time.Minute)
		after := w.host.Host.HostCalls()
		vms = len(w.host.Host.Workers()) + 1 // and the main-thread VM
		return after["env.proxy_get_shared_data"] - before["env.proxy_get_shared_data"],
			after["env.proxy_set_shared_data"] - before["env.proxy_set_shared_data"], vms
	}
	offGets, offSets, _ := shared(scenarioPolicy)
	onGets, onSets, vms := shared(recheckPolicy)
	if want := offGets + uint64(vms*120); onGets != want || onSets != offSets {
		t.Fatalf("two idle minutes: %d reads and %d writes with the re-check on, %d and %d off; want %d reads (one per VM per second) and no write more",
			onGets, onSets, offGets, offSets, want)
	}
}
