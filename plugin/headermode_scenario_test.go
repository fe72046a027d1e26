package main

// Header-routed mode (routing.mode: headers) on build/spillway.wasm, hosted as Envoy hosts a
// Wasm filter that cannot set allow_on_headers_stop_iteration (Istio's WasmPlugin): a headers
// Pause stops all iteration and no body callback arrives until the filter continues. Each
// scenario drives whole requests through the filter, the router and the fakes of
// scenario_test.go, and ends with no stream left in any VM: nothing hangs.

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// headerPolicy is scenarioPolicy's providers with routes for header routing: gpt-4o (two
// keys, then a mapping backup), gpt-4o-mini (the keys), mini-alias (the backup, mapped) and
// claude-* (Anthropic).
const headerPolicy = `
providers:
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
  - id: backup
    cluster: backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer sk-backup"}}
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
      - {provider: backup, model: openai/gpt-4o}
  - model: gpt-4o-mini
    targets:
      - {provider: openai}
  - model: mini-alias
    targets:
      - {provider: backup, model: openai/gpt-4o-mini}
  - model: "claude-*"
    targets:
      - {provider: anthropic}
routing:
  mode: headers
`

// noOption is a proxy without allow_on_headers_stop_iteration (Istio's WasmPlugin).
var noOption = hostsim.WithoutAllowOnHeadersStopIteration()

// modelHeader names the model for header routing.
func modelHeader(model string) [2]string { return [2]string{"x-spillway-request-model", model} }

// headerChat is a chat completion whose header names headerModel and whose body bodyModel.
func headerChat(headerModel, bodyModel string, extra ...[2]string) *hostsim.Request {
	return chatReq(bodyModel, append([]([2]string){modelHeader(headerModel)}, extra...)...)
}

// chatBody is chatReq's body for model.
func chatBody(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
}

// routerLog records what reached Envoy's router, and when (hostsim.WithRouteResolver: the
// moment the request headers pass the filter).
type routerLog struct {
	mu    sync.Mutex
	clock func() time.Time
	seen  []routed
}

type routed struct {
	at      time.Time
	headers [][2]string
}

func (l *routerLog) option() hostsim.Option {
	return hostsim.WithRouteResolver(func(_ string, headers [][2]string) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.seen = append(l.seen, routed{at: l.clock(), headers: headers})
		return nil
	})
}

func (l *routerLog) all() []routed {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]routed(nil), l.seen...)
}

// newRouterWorld is a world whose router records what reaches it.
func newRouterWorld(t *testing.T, policy string, workers int, opts ...hostsim.Option) (*world, *routerLog) {
	t.Helper()
	log := &routerLog{}
	w := newWorld(t, policy, workers, append(opts, log.option())...)
	log.clock = w.host.Clock().Now
	return w, log
}

// viaCallouts counts the fakes' calls that came by callout.
func (w *world) viaCallouts() int {
	n := 0
	for _, c := range w.fakes.received() {
		if c.viaCallout {
			n++
		}
	}
	return n
}

func TestHeaderModeRoutesAtTheHeadersWithoutTheOption(t *testing.T) {
	w, router := newRouterWorld(t, headerPolicy, 2, noOption)
	start := w.host.Clock().Now()
	// The body trickles in over two seconds: the headers reach the router at once.
	req := headerChat("gpt-4o", "gpt-4o", [2]string{"x-session-id", "s"}, [2]string{"x-spillway-cluster", "anthropic"},
		[2]string{"accept-encoding", "gzip"})
	req.ChunkDelays = []time.Duration{0, time.Second, time.Second}
	resp := w.run(0, req)
	expect(t, "chat", resp, 200, "openai/key-a/gpt-4o/1")
	seen := router.all()
	if len(seen) != 1 || !seen[0].at.Equal(start) {
		t.Fatalf("the router saw %d requests (first at %v after the start): the headers must go on at once", len(seen),
			seen[0].at.Sub(start))
	}
	body := chatBody("gpt-4o")
	if c := resp.Upstream.Cluster; c != "openai" {
		t.Errorf("upstream cluster %q, want openai (not the client's anthropic)", c)
	}
	for name, want := range map[string]string{"x-spillway-cluster": "", "authorization": "Bearer sk-a",
		":authority": "api.openai.com", "content-length": strconv.Itoa(len(body)),
		"x-spillway-request-model": "", "x-session-id": "", "accept-encoding": ""} {
		if got := header(seen[0].headers, name); got != want {
			t.Errorf("router got %s = %q, want %q", name, got, want)
		}
	}
	if string(resp.Upstream.Body) != body {
		t.Errorf("upstream body %q, want the client's byte for byte", resp.Upstream.Body)
	}

	// A target that maps the model: the body gets its model, the headers lose the
	// content-length they could no longer match.
	resp = w.run(1, headerChat("mini-alias", "mini-alias"))
	expect(t, "mapped", resp, 200, "backup/backup-a/openai/gpt-4o-mini/1")
	if want := chatBody("openai/gpt-4o-mini"); string(resp.Upstream.Body) != want {
		t.Errorf("mapped upstream body %q, want %q", resp.Upstream.Body, want)
	}
	if v := header(resp.Upstream.Headers, "content-length"); v != "" {
		t.Errorf("mapped request kept content-length %s for a body it rewrote", v)
	}

	// Anthropic's API by its path, with its own credential header.
	resp = w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[]}`,
		modelHeader("claude-sonnet-4")))
	expect(t, "anthropic", resp, 200, "anthropic/ant-a/claude-sonnet-4/1")
	if got, gone := header(resp.Upstream.Headers, "x-api-key"), header(resp.Upstream.Headers, "authorization"); got != "sk-ant" || gone != "" {
		t.Errorf("anthropic upstream x-api-key %q, authorization %q", got, gone)
	}
	if n := w.metric("spillway_misconfigured_total"); n != 0 {
		t.Errorf("misconfigured = %d: header mode never waits for a body at its headers", n)
	}
	w.noStreamsLeft()
}

func TestHeaderModeAnswersWhatItCannotRoute(t *testing.T) {
	tests := []struct {
		name   string           // the request
		req    *hostsim.Request // what the client sends
		status int              // Spillway's reply
		code   string           // its error code
		routed bool             // the headers reached the router first (the body is the problem)
	}{
		{"no model header and no default", chatReq("gpt-4o"), 400, "invalid_request", false},
		{"a model header with a control byte", headerChat("gpt\x01", "gpt-4o"), 400, "invalid_request", false},
		{"a model no route serves", headerChat("llama-3", "llama-3"), 404, "model_not_found", false},
		{"no body", &hostsim.Request{Headers: headerChat("gpt-4o", "gpt-4o").Headers}, 400, "invalid_request", false},
		{"a body that is not JSON", &hostsim.Request{Headers: headerChat("gpt-4o", "gpt-4o").Headers,
			Body: []byte(`{"model":`)}, 400, "invalid_request", true},
		{"a body for a model no route serves", headerChat("gpt-4o", "llama-3"), 404, "model_not_found", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, router := newRouterWorld(t, headerPolicy, 1, noOption)
			resp := w.run(0, tt.req)
			if resp.StatusCode != tt.status || errorCode(resp) != tt.code {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, resp.Body, tt.status, tt.code)
			}
			if got := len(router.all()) == 1; got != tt.routed {
				t.Fatalf("router saw the request: %v, want %v", got, tt.routed)
			}
			if n := len(w.fakes.received()); n != 0 {
				t.Fatalf("%d upstream calls", n)
			}
			w.noStreamsLeft()
		})
	}
}

func TestHeaderModeDefaultModelServesBodiesOfAnyModel(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
routes:
  - model: "*"
    targets:
      - {provider: openai, model: gpt-4o-mini}
routing:
  mode: headers
  defaultModel: default
`
	w := newWorld(t, policy, 1, noOption)
	for _, model := range []string{"gpt-4o", "anything-at-all", "gpt-4o-mini"} {
		resp := w.run(0, chatReq(model)) // no model header
		expect(t, model, resp, 200, "openai/key-a/gpt-4o-mini/1")
		if want := chatBody("gpt-4o-mini"); string(resp.Upstream.Body) != want {
			t.Errorf("%s: upstream body %q, want %q", model, resp.Upstream.Body, want)
		}
	}
	if n := w.viaCallouts(); n != 0 {
		t.Errorf("%d callouts: a route that names every model keeps the target for any body", n)
	}
	w.noStreamsLeft()
}

func TestHeaderModeQueuedRequestResumesWithItsWholeBody(t *testing.T) {
	// The key's target maps the model, so the queued body must be read and rewritten
	// before it goes on, however the proxy held it.
	policy := strings.Replace(cappedPolicy, "{provider: glm, connection: glm-1}", "{provider: glm, connection: glm-1, model: glm-4.7-0414}", 1) +
		"routing: {mode: headers}\n"
	for _, tt := range []struct {
		name          string           // the proxy
		opts          []hostsim.Option // how it hosts the filter
		contentLength bool             // the upstream gets the rewritten body's exact content-length
	}{
		// Stop-all: Envoy holds the body and hands it over when the headers go on, which is
		// after they did: their content-length is removed.
		{"without the option", []hostsim.Option{noOption}, false},
		// The body reaches the filter while the headers wait: it is rewritten before they
		// go, with its exact length.
		{"with the option", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, policy, 2, tt.opts...)
			w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
				r := chatOK(c)
				r.Delay = 3 * time.Second
				return r
			})
			first := w.start(0, headerChat("glm-4.7", "glm-4.7"))
			long := `{"model":"glm-4.7","messages":[{"role":"user","content":"` + strings.Repeat("ab", 5000) + `"}]}`
			second := w.start(1, llmRequest("/v1/chat/completions", long, modelHeader("glm-4.7")))
			w.advance(time.Second)
			if second.Done() || w.fakes.count("glm") != 1 {
				t.Fatalf("second request done=%v, upstream calls %d: it must wait for the slot", second.Done(), w.fakes.count("glm"))
			}
			expect(t, "first", w.wait(first), 200, "glm/glm-1/glm-4.7-0414/1")
			r2 := w.wait(second)
			expect(t, "second", r2, 200, "glm/glm-1/glm-4.7-0414/1")
			want := strings.Replace(long, `"model":"glm-4.7"`, `"model":"glm-4.7-0414"`, 1)
			calls := w.fakes.received()
			if len(calls) != 2 || string(calls[1].body) != want {
				t.Fatalf("the queued request reached the upstream with %.60q (%d bytes), want its body with the target's model (%d bytes)",
					calls[len(calls)-1].body, len(calls[len(calls)-1].body), len(want))
			}
			cl := header(r2.Upstream.Headers, "content-length")
			if tt.contentLength && cl != strconv.Itoa(len(want)) || !tt.contentLength && cl != "" {
				t.Fatalf("upstream content-length %q for a %d-byte body", cl, len(want))
			}
			if gap := calls[1].at.Sub(calls[0].at); gap < 3*time.Second {
				t.Fatalf("second dispatched %v after the first: it did not wait for the slot", gap)
			}
			if n := w.metric("spillway_queued_total"); n != 1 {
				t.Errorf("queued = %d", n)
			}
			w.noStreamsLeft()
		})
	}
}

func TestHeaderModeQueueFullAndTimeout(t *testing.T) {
	w := newWorld(t, cappedPolicy+"routing: {mode: headers}\n", 2, noOption)
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 30 * time.Second
		return r
	})
	busy := w.start(0, headerChat("glm-4.7", "glm-4.7"))
	queued := w.start(1, headerChat("glm-4.7", "glm-4.7"))
	if full := w.run(0, headerChat("glm-4.7", "glm-4.7")); full.StatusCode != 429 || errorCode(full) != "RATE_LIMIT_QUEUE_FULL" {
		t.Fatalf("third: %d %s", full.StatusCode, full.Body)
	}
	if r := w.wait(queued); r.StatusCode != 429 || errorCode(r) != "RATE_LIMIT_QUEUE_TIMEOUT" {
		t.Fatalf("queued: %d %s", r.StatusCode, r.Body)
	}
	if n := w.fakes.count("glm"); n != 1 {
		t.Fatalf("upstream got %d requests, want only the busy one", n)
	}
	expect(t, "busy", w.wait(busy), 200, "")
	w.noStreamsLeft()
}

func TestHeaderModeWaitsOutAShortRateLimitAtTheHeaders(t *testing.T) {
	w := newWorld(t, singleKeyPolicy, 2, noOption)
	w.fakes.set("sk-a", rateLimited("2"))
	if first := w.run(0, headerChat("gpt-4o", "gpt-4o")); first.StatusCode != 429 {
		t.Fatalf("first: %d", first.StatusCode)
	}
	w.fakes.set("sk-a", nil)
	// The only target is out for 2 s (comboCooldownWait): the request waits at its headers
	// (stop-all) and goes on from a tick, its three-chunk body intact.
	start := w.host.Clock().Now()
	resp := w.run(1, headerChat("gpt-4o", "gpt-4o"))
	expect(t, "after the wait", resp, 200, "openai/key-a/gpt-4o/1")
	if waited := w.host.Clock().Now().Sub(start); waited < 1500*time.Millisecond {
		t.Fatalf("answered after %v: it did not wait the rate limit out", waited)
	}
	if string(resp.Upstream.Body) != chatBody("gpt-4o") {
		t.Fatalf("upstream body %q after the wait", resp.Upstream.Body)
	}
	w.noStreamsLeft()
}

func TestHeaderModeFailsOverFromARetryAfter429(t *testing.T) {
	w := newWorld(t, headerPolicy, 2, noOption)
	w.fakes.set("sk-a", rateLimited("120"))
	// Key A's 429 is decided from its status and Retry-After, held while the callout to key
	// B runs, and replaced by key B's answer.
	resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
	expect(t, "first", resp, 200, "openai/key-b/gpt-4o/2")
	if !strings.Contains(string(resp.Body), "hi from sk-b") {
		t.Fatalf("client got %s", resp.Body)
	}
	calls := w.fakes.received()
	if len(calls) != 2 || calls[0].viaCallout || !calls[1].viaCallout || string(calls[1].body) != chatBody("gpt-4o") ||
		header(calls[1].headers, "x-spillway-request-model") != "" || header(calls[1].headers, "authorization") != "Bearer sk-b" {
		t.Fatalf("upstream calls %+v: want key A by the router, then key B by callout with the client's body", calls)
	}
	// Retry-After: 120 keeps key A out on every worker for its duration.
	for i := 0; i < 4; i++ {
		w.advance(25 * time.Second)
		expect(t, "while key A cools", w.run(i%2, headerChat("gpt-4o", "gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	}
	w.fakes.set("sk-a", nil)
	w.advance(21 * time.Second)
	expect(t, "after the cooldown", w.run(1, headerChat("gpt-4o", "gpt-4o")), 200, "openai/key-a/gpt-4o/1")

	// Server errors on both keys: the backup answers, its model mapped in the callout body.
	for _, key := range []string{"sk-a", "sk-b"} {
		w.fakes.set(key, func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(503, `{"error":{"message":"overloaded","type":"server_error"}}`)
		})
	}
	resp = w.run(0, headerChat("gpt-4o", "gpt-4o"))
	expect(t, "backup", resp, 200, "backup/backup-a/openai/gpt-4o/3")
	last := w.fakes.received()[len(w.fakes.received())-1]
	if last.credential != "sk-backup" || last.model != "openai/gpt-4o" {
		t.Fatalf("backup got %+v", last)
	}
	w.noStreamsLeft()
}

// singleKeyPolicy: one key, no other target: a failure always reaches the client.
const singleKeyPolicy = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
routing:
  mode: headers
`

func TestHeaderModeRecordsAFailureItLetsThroughWithItsErrorBody(t *testing.T) {
	tests := []struct {
		name  string // the failure
		body  string // the 429's error body
		after bool   // a request 10 s later reaches the key again (else the key is still out)
	}{
		// A rate limit cools the key for the apikey base cooldown (3 s): back after 10 s.
		{"a rate limit", `{"error":{"message":"Rate limit reached","type":"requests"}}`, true},
		// The body says the credits are gone, which its status and headers do not: the key is
		// terminal. Only a record with the error body knows it.
		{"spent credits", `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, singleKeyPolicy, 1, noOption)
			w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return jsonError(429, tt.body) })
			resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
			if resp.StatusCode != 429 || string(resp.Body) != tt.body || spillway(resp) != "openai/key-a/gpt-4o/1" {
				t.Fatalf("client got %d via %s: %s; want the provider's 429 as it was", resp.StatusCode, spillway(resp), resp.Body)
			}
			w.fakes.set("sk-a", nil)
			w.advance(10 * time.Second)
			resp = w.run(0, headerChat("gpt-4o", "gpt-4o"))
			if got := w.fakes.count("sk-a") == 2; got != tt.after {
				t.Fatalf("10 s later: %d %s; the key was tried again: %v, want %v", resp.StatusCode, resp.Body, got, tt.after)
			}
			w.noStreamsLeft()
		})
	}
}

func TestHeaderModeRestatesOnlyByRulesThatReadNoBody(t *testing.T) {
	policy := singleKeyPolicy + `
resilience:
  statusRestatement:
    - {id: any-400, provider: openai, fromStatuses: [400], toStatus: 429, defaultRetryAfterMs: 30000}
    - {id: guarded-409, provider: openai, fromStatuses: [409], toStatus: 503, excludeMarkers: [permanent]}
`
	tests := []struct {
		name     string // the rule
		status   int    // the provider's status
		want     int    // the client's status
		restated string // x-spillway-restated-from
		retry    string // Retry-After
	}{
		{"a rule on the status alone restates at the headers", 400, 429, "400", "30"},
		// Its exclude markers are in a body header mode lets through unread.
		{"a rule with exclude markers does not", 409, 409, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, policy, 1, noOption)
			w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
				return jsonError(tt.status, `{"error":{"message":"nope","type":"invalid_request_error"}}`)
			})
			resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
			if resp.StatusCode != tt.want || header(resp.Headers, "x-spillway-restated-from") != tt.restated ||
				header(resp.Headers, "retry-after") != tt.retry {
				t.Fatalf("got %d restated-from %q retry-after %q, want %d %q %q", resp.StatusCode,
					header(resp.Headers, "x-spillway-restated-from"), header(resp.Headers, "retry-after"), tt.want, tt.restated, tt.retry)
			}
			if !strings.Contains(string(resp.Body), "nope") {
				t.Fatalf("the provider's body did not reach the client: %s", resp.Body)
			}
			w.noStreamsLeft()
		})
	}
	// agentrouter's built-in rule needs "额度不足" in the body: the client gets the 403.
	w := newWorld(t, agentrouterPolicy+"routing: {mode: headers}\n", 1, noOption)
	w.fakes.set("ar", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(403, `{"error":{"message":"用户额度不足, 剩余额度: 0","type":"new_api_error"}}`)
	})
	resp := w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[]}`, modelHeader("claude-sonnet-4")))
	if resp.StatusCode != 403 || header(resp.Headers, "x-spillway-restated-from") != "" {
		t.Fatalf("agentrouter: %d restated-from %q, want the 403 as sent", resp.StatusCode, header(resp.Headers, "x-spillway-restated-from"))
	}
	w.noStreamsLeft()
}

func TestHeaderModeAnswersABodyForAnotherModelByCallout(t *testing.T) {
	// One capped key serves both models: the re-routed attempt can only go if the header's
	// attempt gave its slot back.
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 1}
  - id: backup
    cluster: backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer sk-backup"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
  - model: gpt-4o-mini
    targets:
      - {provider: openai}
  - model: mini-alias
    targets:
      - {provider: backup, model: openai/gpt-4o-mini}
routing:
  mode: headers
`
	tests := []struct {
		name        string // what the header and the body say
		headerModel string
		bodyModel   string
		via         string // the x-spillway-* of the answer
		upstream    string // the model the callout asked for
	}{
		{"another model of another route", "gpt-4o", "gpt-4o-mini", "openai/key-a/gpt-4o-mini/2", "gpt-4o-mini"},
		{"a model the header's mapping target does not take", "mini-alias", "gpt-4o", "openai/key-a/gpt-4o/2", "gpt-4o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, router := newRouterWorld(t, policy, 1, noOption)
			resp := w.run(0, headerChat(tt.headerModel, tt.bodyModel))
			expect(t, "re-routed", resp, 200, tt.via)
			calls := w.fakes.received()
			if len(calls) != 1 || !calls[0].viaCallout || calls[0].model != tt.upstream || calls[0].credential != "sk-a" ||
				header(calls[0].headers, "x-spillway-request-model") != "" {
				t.Fatalf("upstream calls %+v: want one callout to key A for %s", calls, tt.upstream)
			}
			// The header's choice reached the router (headers only: its upstream never got
			// the body).
			if seen := router.all(); len(seen) != 1 {
				t.Fatalf("router saw %d requests", len(seen))
			}
			// The slot came back: the next request goes at once.
			next := w.start(0, headerChat("gpt-4o", "gpt-4o"))
			w.advance(10 * time.Millisecond)
			if !next.Done() {
				t.Fatal("the next request waits: the re-routed request kept a slot")
			}
			expect(t, "next", w.wait(next), 200, "openai/key-a/gpt-4o/1")
			w.noStreamsLeft()
		})
	}
}

func TestHeaderModeHoldsWhatTheGivenUpAttemptAnswers(t *testing.T) {
	// The router's request to the header's target (headers, no body) is answered by its
	// upstream while the callout for the body's model runs: that answer is held, and the
	// callout's replaces it. The streaming upstream runs on its own goroutine (real clock);
	// channels order the events: callout sent, then the upstream's answer through the
	// filter, then the callout's answer.
	calloutSent, answered := make(chan struct{}), make(chan struct{})
	var upstreamErr error
	upstream := func(call *hostsim.UpstreamCall) {
		defer close(answered)
		bodyCame := make(chan struct{})
		go func() {
			if _, err := io.Copy(io.Discard, call.Body()); err == nil {
				close(bodyCame) // the header's target got the body: what must not happen
			}
		}()
		status := "400"
		select {
		case <-calloutSent:
		case <-bodyCame:
			status = "599" // fails the test below instead of hanging it
		case <-call.Context().Done():
			upstreamErr = call.Context().Err()
			return
		}
		upstreamErr = call.Respond([][2]string{{":status", status}, {"content-type", "application/json"}}, false)
		if upstreamErr == nil {
			upstreamErr = call.Data([]byte(`{"error":{"message":"incomplete body"}}`), true)
		}
	}
	var once sync.Once
	callout := func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
		once.Do(func() { close(calloutSent) })
		<-answered
		body := `{"object":"chat.completion","model":"` + gjson.GetBytes(c.Body, "model").Str + `","choices":[]}`
		return &hostsim.CalloutResponse{Headers: [][2]string{{":status", "200"}, {"content-type", "application/json"}},
			Body: []byte(body)}
	}
	w := newWorld(t, headerPolicy, 1, noOption, hostsim.WithRealClock(), hostsim.WithStreamingUpstream(upstream),
		hostsim.WithCalloutHandler(callout))
	resp := w.run(0, headerChat("gpt-4o", "gpt-4o-mini"))
	<-answered
	if upstreamErr != nil {
		t.Fatalf("the given-up attempt's upstream could not answer: %v", upstreamErr)
	}
	expect(t, "re-routed", resp, 200, "openai/key-a/gpt-4o-mini/2")
	if !strings.Contains(string(resp.Body), `"model":"gpt-4o-mini"`) {
		t.Fatalf("client got %s, want the callout's answer", resp.Body)
	}
	w.noStreamsLeft()
}

func TestHeaderModeWatchesA200StreamItCannotHold(t *testing.T) {
	t.Run("an error as the first event cools the key; the client has the stream", func(t *testing.T) {
		w := newWorld(t, headerPolicy, 2, noOption)
		w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return sse(chatRoleEvent, chatErrorEvent) })
		resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
		expect(t, "stream", resp, 200, "openai/key-a/gpt-4o/1")
		if string(resp.Body) != chatRoleEvent+chatErrorEvent {
			t.Fatalf("client got %q, want key A's stream as sent", resp.Body)
		}
		if n := w.viaCallouts(); n != 0 {
			t.Fatalf("%d callouts: a stream already with the client is not failed over", n)
		}
		expect(t, "next", w.run(1, headerChat("gpt-4o", "gpt-4o")), 200, "openai/key-b/gpt-4o/1")
		if n := w.metric("spillway_stream_error_events_total"); n != 1 {
			t.Errorf("stream errors = %d", n)
		}
		w.noStreamsLeft()
	})
	t.Run("a healthy stream is not held for its first content", func(t *testing.T) {
		w := newWorld(t, headerPolicy, 1, noOption)
		w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
			r := sse(chatRoleEvent, chatContentEvent, chatDoneEvent)
			r.ChunkDelays = []time.Duration{0, 2 * time.Second, 0}
			return r
		})
		resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
		expect(t, "stream", resp, 200, "openai/key-a/gpt-4o/1")
		if string(resp.Body) != chatRoleEvent+chatContentEvent+chatDoneEvent {
			t.Fatalf("client got %q", resp.Body)
		}
		ttfb, _ := resp.TimeToFirstByte()
		data, _ := resp.TimeToFirstData()
		if ttfb != 0 || data != 0 {
			t.Fatalf("headers after %v, first event after %v: nothing may wait for the content 2 s in", ttfb, data)
		}
		w.noStreamsLeft()
	})
	t.Run("a truncated stream counts against its key", func(t *testing.T) {
		w := newWorld(t, headerPolicy, 2, noOption)
		w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return sse(chatRoleEvent, chatContentEvent) })
		expect(t, "truncated", w.run(0, headerChat("gpt-4o", "gpt-4o")), 200, "openai/key-a/gpt-4o/1")
		expect(t, "next", w.run(1, headerChat("gpt-4o", "gpt-4o")), 200, "openai/key-b/gpt-4o/1")
		w.noStreamsLeft()
	})
}

func TestHeaderModeCannotFailOverWhatFailsBeforeTheBody(t *testing.T) {
	// Envoy's router finds no healthy host for key A's cluster at the headers, before any of
	// the body came: without the body there is nothing to send a failover attempt, so the
	// client gets the router's 503. It is Envoy's reply, not the provider's outcome: key A
	// is not cooled, and the next request goes to it.
	down := true
	var mu sync.Mutex
	resolver := hostsim.WithRouteResolver(func(_ string, headers [][2]string) error {
		mu.Lock()
		defer mu.Unlock()
		if down && header(headers, "authorization") == "Bearer sk-a" {
			return hostsim.ErrNoHealthyUpstream
		}
		return nil
	})
	w := newWorld(t, headerPolicy, 1, noOption, resolver)
	resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
	if resp.StatusCode != 503 || w.viaCallouts() != 0 {
		t.Fatalf("got %d with %d callouts; want the router's 503", resp.StatusCode, w.viaCallouts())
	}
	mu.Lock()
	down = false
	mu.Unlock()
	expect(t, "next", w.run(0, headerChat("gpt-4o", "gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	w.noStreamsLeft()
}

func TestHeaderModeNeedsNoOptionWhereBodyModeReportsItsAbsence(t *testing.T) {
	tests := []struct {
		name      string           // routing mode and proxy
		policy    string           // the policy
		opts      []hostsim.Option // the proxy
		bodyAfter time.Duration    // when the body starts after the headers
		status    int              // the client's status
		code      string           // Spillway's error code, if it answered
	}{
		// The missing-option detector stays the backstop of body mode.
		{"body mode without the option", scenarioPolicy, []hostsim.Option{noOption}, 0, 500, "spillway_misconfigured"},
		{"body mode with the option", scenarioPolicy, nil, 0, 200, ""},
		// Header mode has no body wait: a body 30 s late (three times routing.bodyWaitMs) is
		// no alarm.
		{"header mode without the option, a slow client", headerPolicy, []hostsim.Option{noOption}, 30 * time.Second, 200, ""},
		{"header mode with the option, a slow client", headerPolicy, nil, 30 * time.Second, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.policy, 1, tt.opts...)
			req := headerChat("gpt-4o", "gpt-4o")
			req.ChunkDelays = []time.Duration{tt.bodyAfter}
			resp := w.run(0, req)
			if resp.StatusCode != tt.status || errorCode(resp) != tt.code {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, resp.Body, tt.status, tt.code)
			}
			misconfigured := uint64(0)
			if tt.code == "spillway_misconfigured" {
				misconfigured = 1
			}
			if n := w.metric("spillway_misconfigured_total"); n != misconfigured {
				t.Errorf("misconfigured = %d, want %d", n, misconfigured)
			}
			w.noStreamsLeft()
		})
	}
}

func TestHeaderModeExamplePolicy(t *testing.T) {
	policy, err := examples.Get("header-routed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, string(policy), 1, noOption, hostsim.WithEnv("OPENAI_KEY_A", "sk-a"), hostsim.WithEnv("OPENAI_KEY_B", "sk-b"),
		hostsim.WithEnv("OPENROUTER_KEY", "sk-or"), hostsim.WithEnv("ANTHROPIC_KEY", "sk-ant"))
	// The header names the model.
	expect(t, "gpt-4o", w.run(0, headerChat("gpt-4o", "gpt-4o")), 200, "openai/openai-a/gpt-4o/1")
	// No header: defaultModel, whose catch-all route rewrites any body it serves.
	resp := w.run(0, chatReq("some-local-name"))
	expect(t, "no header", resp, 200, "openai/openai-a/gpt-4o-mini/1")
	if string(resp.Upstream.Body) != chatBody("gpt-4o-mini") {
		t.Fatalf("upstream body %q", resp.Upstream.Body)
	}
	// No header, a body for gpt-4o: its own route, by callout.
	expect(t, "no header, gpt-4o", w.run(0, chatReq("gpt-4o")), 200, "openai/openai-a/gpt-4o/2")
	if n := w.viaCallouts(); n != 1 {
		t.Fatalf("%d callouts, want the one for the header-less gpt-4o body", n)
	}
	w.noStreamsLeft()
}

// rerouteQueuePolicy: the body's model is served by a key with one slot, which another
// request holds: the re-routed request waits in its queue and gets its callout from a
// wake-up (a root callback).
const rerouteQueuePolicy = `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
  - id: mini
    cluster: backup
    connections:
      - {id: key-m, credential: {header: authorization, value: "Bearer sk-m"}, maxConcurrent: 1}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
  - model: gpt-4o-mini
    targets:
      - {provider: mini}
routing:
  mode: headers
`

func TestHeaderModeReroutedRequestWaitsForItsSlotThenCallsOut(t *testing.T) {
	w := newWorld(t, rerouteQueuePolicy, 2, noOption)
	w.fakes.set("sk-m", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 3 * time.Second
		return r
	})
	busy := w.start(0, headerChat("gpt-4o-mini", "gpt-4o-mini"))
	// The header names gpt-4o (key A), the body gpt-4o-mini (key M, busy): the callout
	// waits for key M's slot, freed on the other worker.
	ex := w.start(1, headerChat("gpt-4o", "gpt-4o-mini"))
	w.advance(time.Second)
	if ex.Done() || w.fakes.count("sk-m") != 1 {
		t.Fatalf("done=%v, key M calls %d: the re-routed request must wait for the slot", ex.Done(), w.fakes.count("sk-m"))
	}
	expect(t, "busy", w.wait(busy), 200, "mini/key-m/gpt-4o-mini/1")
	resp := w.wait(ex)
	expect(t, "re-routed", resp, 200, "mini/key-m/gpt-4o-mini/2")
	calls := w.fakes.received()
	if len(calls) != 2 || !calls[1].viaCallout || calls[1].at.Sub(calls[0].at) < 3*time.Second {
		t.Fatalf("upstream calls %+v: want key M's second request by callout once the first ended", calls)
	}
	if n := w.fakes.count("sk-a"); n != 0 {
		t.Fatalf("key A got %d requests: the header's target never gets the body", n)
	}
	w.noStreamsLeft()
}

func TestHeaderModeWithTheOptionHoldsTheGivenUpAttemptWhileItsCalloutQueues(t *testing.T) {
	// With the option the held response's body reaches the filter: the given-up header
	// attempt's answer must stay held while the body's own request waits in a queue, until
	// the callout (sent from the wake-up) answers and replaces it.
	ok := [][2]string{{":status", "200"}, {"content-type", "application/json"}}
	releaseBusy, answerGivenUp := make(chan struct{}), make(chan struct{})
	givenUpAnswered := make(chan error, 1)
	upstream := func(call *hostsim.UpstreamCall) {
		switch header(call.Headers(), "authorization") {
		case "Bearer sk-m": // the busy request holds key M's only slot until released
			if _, err := io.Copy(io.Discard, call.Body()); err != nil {
				return
			}
			select {
			case <-releaseBusy:
			case <-call.Context().Done():
				return
			}
			if call.Respond(ok, false) == nil {
				_ = call.Data([]byte(`{"object":"chat.completion","choices":[]}`), true)
			}
		case "Bearer sk-a": // the given-up header attempt answers while the callout waits
			select {
			case <-answerGivenUp:
			case <-call.Context().Done():
				givenUpAnswered <- call.Context().Err()
				return
			}
			err := call.Respond([][2]string{{":status", "400"}, {"content-type", "application/json"}}, false)
			if err == nil {
				err = call.Data([]byte(`{"error":{"message":"incomplete body"}}`), true)
			}
			givenUpAnswered <- err
		}
	}
	callout := func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
		body := `{"object":"chat.completion","model":"` + gjson.GetBytes(c.Body, "model").Str + `","choices":[]}`
		return &hostsim.CalloutResponse{Headers: ok, Body: []byte(body)}
	}
	w := newWorld(t, rerouteQueuePolicy, 1, hostsim.WithRealClock(), hostsim.WithStreamingUpstream(upstream),
		hostsim.WithCalloutHandler(callout))
	busy := w.start(0, headerChat("gpt-4o-mini", "gpt-4o-mini"))
	// The header names gpt-4o (key A), the body gpt-4o-mini: its callout waits for key M.
	ex := w.start(0, headerChat("gpt-4o", "gpt-4o-mini"))
	close(answerGivenUp)
	if err := <-givenUpAnswered; err != nil {
		t.Fatalf("the given-up attempt's upstream could not answer: %v", err)
	}
	if ex.Done() {
		t.Fatalf("the given-up attempt's answer reached the client: %d %s", w.wait(ex).StatusCode, w.wait(ex).Body)
	}
	close(releaseBusy)
	expect(t, "busy", w.wait(busy), 200, "mini/key-m/gpt-4o-mini/1")
	// A real clock: a regression that loses the callout's answer fails here, not by hanging.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := ex.Wait(ctx)
	if err != nil {
		t.Fatalf("the re-routed request: %v", err)
	}
	expect(t, "re-routed", resp, 200, "mini/key-m/gpt-4o-mini/2")
	if !strings.Contains(string(resp.Body), `"model":"gpt-4o-mini"`) {
		t.Fatalf("client got %s, want the callout's answer", resp.Body)
	}
	w.noStreamsLeft()
}
