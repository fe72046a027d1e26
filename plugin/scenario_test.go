package main

// The scenario suite: build/spillway.wasm in hostsim with several worker VMs on the virtual
// clock, hosted the way Envoy ≥ 1.36 with allow_on_headers_stop_iteration hosts it, against
// fake providers that answer per cluster and credential. Each scenario drives whole
// requests (filter → router → upstream, or a failover callout → filter → client) and
// asserts what the client got and what every fake credential received.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// scenarioPolicy: two OpenAI keys, an OpenAI-compatible backup gateway with a mapped model,
// and Anthropic.
const scenarioPolicy = `
providers:
  - id: openai
    api: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
  - id: backup
    api: openai
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
  - model: "claude-*"
    targets:
      - {provider: anthropic}
`

// upstreamCall is one request a fake provider received.
type upstreamCall struct {
	cluster, credential, model string
	viaCallout                 bool
	body                       []byte
	headers                    [][2]string
	at                         time.Time
}

// fakes answers for every cluster: by default a 200 chat completion; a test sets a
// behaviour per credential.
type fakes struct {
	mu      sync.Mutex
	clock   func() time.Time
	calls   []upstreamCall
	answers map[string]func(call upstreamCall) *hostsim.UpstreamResponse // by credential
	// routerErrs makes the router, not the provider, answer a credential's requests: an
	// UpstreamFunc error (hostsim.ErrNoHealthyUpstream, *hostsim.UpstreamReset, ...).
	routerErrs map[string]error
}

func (f *fakes) failRouter(credential string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routerErrs[credential] = err
}

func (f *fakes) set(credential string, fn func(upstreamCall) *hostsim.UpstreamResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[credential] = fn
}

func header(hs [][2]string, name string) string {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

func credentialOf(hs [][2]string) string {
	if v := header(hs, "authorization"); v != "" {
		return strings.TrimPrefix(v, "Bearer ")
	}
	return header(hs, "x-api-key")
}

func (f *fakes) answer(call upstreamCall) *hostsim.UpstreamResponse {
	f.mu.Lock()
	call.at = f.clock()
	f.calls = append(f.calls, call)
	fn := f.answers[call.credential]
	f.mu.Unlock()
	if fn != nil {
		return fn(call)
	}
	return chatOK(call)
}

// chatOK is a provider's 200 chat completion naming the credential that answered.
func chatOK(call upstreamCall) *hostsim.UpstreamResponse {
	body := fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi from %s"},"finish_reason":"stop"}]}`,
		call.model, call.credential)
	return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "200"}, {"content-type", "application/json"}}, Body: []byte(body)}
}

// jsonError is a provider's error response.
// rateLimited answers OpenAI's 429 for a request-rate limit with the given Retry-After.
func rateLimited(retryAfter string) func(upstreamCall) *hostsim.UpstreamResponse {
	return func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(429, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`,
			[2]string{"retry-after", retryAfter})
	}
}

func jsonError(status int, body string, extra ...[2]string) *hostsim.UpstreamResponse {
	hs := append([][2]string{{":status", strconv.Itoa(status)}, {"content-type", "application/json"}}, extra...)
	return &hostsim.UpstreamResponse{Headers: hs, Body: []byte(body)}
}

// sse is a 200 event stream of the given events.
func sse(events ...string) *hostsim.UpstreamResponse {
	chunks := make([][]byte, len(events))
	for i, e := range events {
		chunks[i] = []byte(e)
	}
	return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, BodyChunks: chunks}
}

// calls returns what each credential received, in order.
func (f *fakes) received() []upstreamCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]upstreamCall(nil), f.calls...)
}

func (f *fakes) count(credential string) int {
	n := 0
	for _, c := range f.received() {
		if c.credential == credential {
			n++
		}
	}
	return n
}

// world is one simulated Envoy process running spillway.wasm.
type world struct {
	t     *testing.T
	host  *hostsimtest.Host
	fakes *fakes
}

// worldClusters are the world's provider clusters, and unroutedCluster the stand-in for
// the bootstrap's default cluster, where a request without the filter's filter state goes.
var worldClusters = []string{"openai", "backup", "anthropic", "flaky", "agentrouter"}

const unroutedCluster = "unrouted"

// worldRoute is the generated bootstrap's route (envoy.Bootstrap) for a policy (its JSON):
// the matcher cluster specifier on the filter state the filter names its cluster in, each of
// the policy's provider clusters (and the world's) to itself, anything else to the default
// cluster. A test may give its own (a later WithRouteCluster replaces it).
func worldRoute(config []byte) hostsim.Option {
	m := &hostsim.ClusterMatcher{FilterState: routerretry.TargetFilterStateKey, Clusters: map[string]string{}, OnNoMatch: unroutedCluster}
	for _, c := range worldClusters {
		m.Clusters[c] = c
	}
	for _, c := range gjson.GetBytes(config, "providers.#.cluster").Array() {
		m.Clusters[c.Str] = c.Str
	}
	return hostsim.WithRouteCluster(hostsim.RouteCluster{Matcher: m})
}

func newWorld(t *testing.T, policyYAML string, workers int, opts ...hostsim.Option) *world {
	t.Helper()
	wasm := hostsimtest.ReadModule(t, "build/spillway.wasm")
	config, err := policyfile.ToJSON([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, fakes: &fakes{answers: map[string]func(upstreamCall) *hostsim.UpstreamResponse{},
		routerErrs: map[string]error{}}}
	upstream := func(_ context.Context, req *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		// The route's pick (worldRoute): the cluster the filter named in filter state, or
		// the stand-in for the default cluster, which answers 404.
		cluster := req.Cluster
		if cluster == unroutedCluster {
			return jsonError(404, `{"error":"no route"}`), nil
		}
		call := upstreamCall{cluster: cluster, credential: credentialOf(req.Headers),
			model: gjson.GetBytes(req.Body, "model").Str, body: req.Body, headers: req.Headers}
		w.fakes.mu.Lock()
		err := w.fakes.routerErrs[call.credential]
		w.fakes.mu.Unlock()
		if err != nil {
			w.fakes.answer(call) // counted: the attempt was made
			return nil, err
		}
		return w.fakes.answer(call), nil
	}
	callout := func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
		r := w.fakes.answer(upstreamCall{cluster: c.Upstream, credential: credentialOf(c.Headers),
			model: gjson.GetBytes(c.Body, "model").Str, viaCallout: true, body: c.Body, headers: c.Headers})
		body := r.Body
		if r.BodyChunks != nil {
			body = nil
			for _, ch := range r.BodyChunks {
				body = append(body, ch...)
			}
		}
		// The host's async client answers a callout once its response is whole: after its
		// headers and every chunk's delay. A response without headers is a callout that
		// fails (a reset: zero counts).
		delay := r.Delay
		for _, d := range r.ChunkDelays {
			delay += d
		}
		return &hostsim.CalloutResponse{Headers: r.Headers, Body: body, Delay: delay, Fail: r.Headers == nil}
	}
	all := append([]hostsim.Option{hostsim.WithWorkers(workers), hostsim.WithPluginConfiguration(config),
		hostsim.WithUpstream(upstream), hostsim.WithCalloutHandler(callout),
		hostsim.WithCluster(append(slices.Clone(worldClusters), unroutedCluster)...), worldRoute(config)}, opts...)
	w.host = hostsimtest.New(t, wasm, all...)
	w.fakes.clock = w.host.Clock().Now
	if st := w.host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("plugin did not start: %v", w.host.Logs())
	}
	return w
}

// chatRequest is a client's chat completion for model (its body in two chunks).
func chatReq(model string, extra ...[2]string) *hostsim.Request {
	return llmRequest("/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hello"}]}`, extra...)
}

// llmRequest is a client's request to path with body, sent in three chunks.
func llmRequest(path, body string, extra ...[2]string) *hostsim.Request {
	hs := append([][2]string{{":method", "POST"}, {":path", path}, {":authority", "spillway.local"},
		{":scheme", "http"}, {"content-type", "application/json"}, {"authorization", "Bearer client-key"},
		{"content-length", strconv.Itoa(len(body))}}, extra...)
	third := len(body) / 3
	return &hostsim.Request{Headers: hs, BodyChunks: [][]byte{[]byte(body[:third]), []byte(body[third : 2*third]), []byte(body[2*third:])}}
}

// run sends a request through worker i and waits for the client's response.
func (w *world) run(worker int, req *hostsim.Request) *hostsim.Response {
	w.t.Helper()
	return w.host.Worker(worker).RunHTTP(req)
}

// start sends a request through worker i without waiting.
func (w *world) start(worker int, req *hostsim.Request) *hostsim.Exchange {
	w.t.Helper()
	ex, err := w.host.Host.Worker(worker).StartHTTP(req)
	if err != nil {
		w.t.Fatal(err)
	}
	return ex
}

// wait moves the virtual clock until the exchange is done.
func (w *world) wait(ex *hostsim.Exchange) *hostsim.Response {
	w.t.Helper()
	resp, err := ex.Wait(context.Background())
	if err != nil {
		w.t.Fatalf("exchange: %v", err)
	}
	return resp
}

// metric reads a counter once every VM has flushed what it counted (on its tick).
func (w *world) metric(name string) uint64 {
	w.t.Helper()
	for _, vm := range w.host.Host.Workers() {
		if err := vm.Tick(); err != nil {
			w.t.Fatal(err)
		}
	}
	n, err := w.host.Host.GetCounterMetric(name)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// advance moves the virtual clock, firing ticks, deliveries and wake-ups.
func (w *world) advance(d time.Duration) { w.t.Helper(); w.host.Advance(d) }

// spillway returns the client response's x-spillway-* headers as provider/connection/model/attempts.
func spillway(r *hostsim.Response) string {
	return header(r.Headers, "x-spillway-provider") + "/" + header(r.Headers, "x-spillway-connection") + "/" +
		header(r.Headers, "x-spillway-model") + "/" + header(r.Headers, "x-spillway-attempts")
}

func errorCode(r *hostsim.Response) string { return gjson.GetBytes(r.Body, "error.code").Str }

// expect checks a response's status and x-spillway headers.
func expect(t *testing.T, what string, r *hostsim.Response, status int, via string) {
	t.Helper()
	if r.StatusCode != status || (via != "" && spillway(r) != via) {
		t.Fatalf("%s: %d via %s, want %d via %s; body %s", what, r.StatusCode, spillway(r), status, via, r.Body)
	}
}

// liveStreams fails the test if any VM still holds a stream.
func (w *world) noStreamsLeft() {
	w.t.Helper()
	if n := w.host.Host.LiveStreams(); n != 0 {
		w.t.Fatalf("%d streams left in the VMs", n)
	}
}

func TestScenarioRoutesWithTheConnectionsCredential(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	resp := w.run(0, chatReq("gpt-4o", [2]string{"x-session-id", "s"}, [2]string{"x-spillway-cluster", "anthropic"},
		[2]string{"accept-encoding", "gzip"}))
	expect(t, "chat", resp, 200, "openai/key-a/gpt-4o/1")
	up := resp.Upstream
	for name, want := range map[string]string{"authorization": "Bearer sk-a", ":authority": "api.openai.com"} {
		if got := header(up.Headers, name); got != want {
			t.Errorf("upstream %s = %q, want %q", name, got, want)
		}
	}
	// The client asked for anthropic's cluster: the route took the filter's openai.
	if up.Cluster != "openai" {
		t.Errorf("upstream cluster %q, want openai", up.Cluster)
	}
	for _, name := range []string{"x-session-id", "accept-encoding", "x-spillway-cluster"} {
		if v := header(up.Headers, name); v != "" {
			t.Errorf("upstream got %s=%q", name, v)
		}
	}
	want := `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`
	if string(up.Body) != want {
		t.Errorf("upstream body %q, want the client's, byte for byte", up.Body)
	}
	// Anthropic's API: /v1/messages with x-api-key.
	resp = w.run(1, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":10,"messages":[]}`))
	expect(t, "anthropic", resp, 200, "anthropic/ant-a/claude-sonnet-4/1")
	if got := header(resp.Upstream.Headers, "x-api-key"); got != "sk-ant" {
		t.Errorf("anthropic upstream x-api-key %q", got)
	}
	if got := header(resp.Upstream.Headers, "authorization"); got != "" {
		t.Errorf("the client's authorization reached Anthropic: %q", got)
	}
	w.noStreamsLeft()
}

func TestScenarioRetryAfterMovesTrafficToTheOtherKeyForItsDuration(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	w.fakes.set("sk-a", rateLimited("120"))
	// Key A answers 429 with Retry-After: 120: the same request is answered by key B.
	expect(t, "first", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	// For the next 120 s every worker sends straight to key B.
	for i := 0; i < 4; i++ {
		w.advance(25 * time.Second)
		expect(t, fmt.Sprintf("request at %ds", 25*(i+1)), w.run(i%2, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	}
	if n := w.fakes.count("sk-a"); n != 1 {
		t.Fatalf("key A got %d requests while cooling, want only the first", n)
	}
	// After 120 s key A is back.
	w.fakes.set("sk-a", nil)
	w.advance(21 * time.Second)
	expect(t, "after the cooldown", w.run(1, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	w.noStreamsLeft()
}

// flakyPolicy: twelve keys on one provider (its breaker opens at 12 failures, apikey
// profile) and a backup; no same-request failover, so each request is one attempt.
func flakyPolicy() string {
	var b strings.Builder
	b.WriteString("providers:\n  - id: flaky\n    cluster: flaky\n    connections:\n")
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&b, "      - {id: f%d, credential: {header: authorization, value: \"Bearer f%d\"}}\n", i, i)
	}
	b.WriteString(`  - id: backup
    cluster: backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer sk-backup"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: flaky}
      - {provider: backup}
resilience:
  failover: {maxAttempts: 1}
`)
	return b.String()
}

func TestScenarioServerErrorsOpenTheBreakerThenOneProbeClosesIt(t *testing.T) {
	w := newWorld(t, flakyPolicy(), 2)
	for i := 1; i <= 12; i++ {
		w.fakes.set(fmt.Sprintf("f%d", i), func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(503, `{"error":{"message":"upstream unavailable","type":"server_error"}}`)
		})
	}
	// Twelve provider failures, spread over both workers (each cools its key, so each
	// request lands on the next key).
	for i := 0; i < 12; i++ {
		expect(t, fmt.Sprintf("failure %d", i+1), w.run(i%2, chatReq("gpt-4o")), 503, "")
	}
	// The breaker is OPEN: the next request avoids the provider.
	expect(t, "while open", w.run(0, chatReq("gpt-4o")), 200, "backup/backup-a/gpt-4o/1")
	flakyCalls := 0
	for i := 1; i <= 12; i++ {
		flakyCalls += w.fakes.count(fmt.Sprintf("f%d", i))
	}
	if flakyCalls != 12 {
		t.Fatalf("the flaky provider got %d requests, want 12", flakyCalls)
	}
	// After the reset timeout (30 s) exactly one probe goes through: a request started
	// while it is in flight goes to the backup.
	for i := 1; i <= 12; i++ {
		w.fakes.set(fmt.Sprintf("f%d", i), func(c upstreamCall) *hostsim.UpstreamResponse {
			r := chatOK(c)
			r.Delay = 2 * time.Second
			return r
		})
	}
	w.advance(31 * time.Second)
	probe := w.start(0, chatReq("gpt-4o"))
	w.advance(500 * time.Millisecond)
	expect(t, "during the probe", w.run(1, chatReq("gpt-4o")), 200, "backup/backup-a/gpt-4o/1")
	resp := w.wait(probe)
	if resp.StatusCode != 200 || header(resp.Headers, "x-spillway-provider") != "flaky" {
		t.Fatalf("probe: %d via %s", resp.StatusCode, spillway(resp))
	}
	// Its success closed the breaker: traffic goes back to the provider.
	resp = w.run(1, chatReq("gpt-4o"))
	if resp.StatusCode != 200 || header(resp.Headers, "x-spillway-provider") != "flaky" {
		t.Fatalf("after the probe: %d via %s", resp.StatusCode, spillway(resp))
	}
	w.noStreamsLeft()
}

// agentrouterPolicy: one gateway that misreports quota exhaustion (guide §7).
const agentrouterPolicy = `
providers:
  - id: agentrouter
    api: anthropic
    cluster: agentrouter
    connections:
      - {id: ar-1, credential: {header: authorization, value: "Bearer ar"}}
routes:
  - model: "claude-*"
    targets:
      - {provider: agentrouter}
`

func TestScenarioAgentrouterQuotaIsRestatedTo429(t *testing.T) {
	w := newWorld(t, agentrouterPolicy, 2)
	w.fakes.set("ar", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(403, `{"error":{"message":"用户额度不足, 剩余额度: 0","type":"new_api_error"}}`)
	})
	resp := w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[]}`))
	if resp.StatusCode != 429 || header(resp.Headers, "retry-after") != "60" || header(resp.Headers, "x-spillway-restated-from") != "403" {
		t.Fatalf("got %d retry-after %q restated-from %q; want 429, 60, 403 (headers %v)", resp.StatusCode,
			header(resp.Headers, "retry-after"), header(resp.Headers, "x-spillway-restated-from"), resp.Headers)
	}
	if !strings.Contains(string(resp.Body), "额度不足") {
		t.Fatalf("the provider's body did not reach the client: %s", resp.Body)
	}
	// A permanent 无权访问模型 is never restated (the rule's exclude marker vetoes it).
	w.advance(time.Hour)
	w.fakes.set("ar", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(403, `{"error":{"message":"额度不足 无权访问模型 claude-opus","type":"new_api_error"}}`)
	})
	resp = w.run(1, llmRequest("/v1/messages", `{"model":"claude-opus","max_tokens":5,"messages":[]}`))
	if resp.StatusCode != 403 || header(resp.Headers, "x-spillway-restated-from") != "" {
		t.Fatalf("model-access denial: %d restated-from %q, want 403 unrestated", resp.StatusCode, header(resp.Headers, "x-spillway-restated-from"))
	}
}

// Streams as the providers send them.
const (
	chatRoleEvent    = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	chatContentEvent = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"
	chatDoneEvent    = "data: [DONE]\n\n"
	chatErrorEvent   = "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"rate_limit_error\"}}\n\n"
	antOverloaded    = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	antStart         = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"content\":[]}}\n\n"
	antDelta         = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	antStop          = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func TestScenarioAnErrorEventInA200StreamFailsOver(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return sse(chatRoleEvent, chatErrorEvent) })
	w.fakes.set("sk-b", func(upstreamCall) *hostsim.UpstreamResponse {
		return sse(chatRoleEvent, chatContentEvent, chatDoneEvent)
	})
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "stream", resp, 200, "openai/key-b/gpt-4o/2")
	if ct := header(resp.Headers, "content-type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q: a failover reply keeps the stream's type", ct)
	}
	if want := chatRoleEvent + chatContentEvent + chatDoneEvent; string(resp.Body) != want {
		t.Fatalf("client got %q, want key B's whole stream", resp.Body)
	}
	if strings.Contains(string(resp.Body), "Rate limit") {
		t.Fatal("key A's error event reached the client")
	}
	// Key A's in-stream rate limit cooled it: the next request goes to key B directly.
	expect(t, "next", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")

	// Anthropic's overloaded error as the first event, on a route without another target,
	// reaches the client as the provider sent it.
	w.fakes.set("sk-ant", func(upstreamCall) *hostsim.UpstreamResponse { return sse(antStart, antOverloaded) })
	resp = w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`))
	if resp.StatusCode != 200 || string(resp.Body) != antStart+antOverloaded {
		t.Fatalf("anthropic: %d %q", resp.StatusCode, resp.Body)
	}
	w.noStreamsLeft()
}

func TestScenarioAHealthyStreamPassesThroughWhole(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	w.fakes.set("sk-ant", func(upstreamCall) *hostsim.UpstreamResponse {
		return sse(antStart, "event: ping\ndata: {\"type\": \"ping\"}\n\n", antDelta, antDelta, antStop)
	})
	resp := w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`))
	expect(t, "anthropic stream", resp, 200, "anthropic/ant-a/claude-sonnet-4/1")
	if want := antStart + "event: ping\ndata: {\"type\": \"ping\"}\n\n" + antDelta + antDelta + antStop; string(resp.Body) != want {
		t.Fatalf("client got %q", resp.Body)
	}
}

func TestScenarioATruncatedStreamCountsAgainstItsConnection(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return sse(chatRoleEvent, chatContentEvent) })
	resp := w.run(0, chatReq("gpt-4o"))
	// The client got what there was, ended with an error event: nothing can be replayed once
	// content went out (streamcut_scenario_test.go has the shapes).
	expect(t, "truncated", resp, 200, "openai/key-a/gpt-4o/1")
	if added, ok := addedAfter(resp, chatRoleEvent, chatContentEvent); !ok || truncationErr("chat", added) != "" {
		t.Fatalf("client got %q", resp.Body)
	}
	// The truncation cooled key A: the next request goes to key B.
	expect(t, "next", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	logs := strings.Join(w.host.Host.LogsAt(hostsim.LogWarn), "\n")
	if !strings.Contains(logs, "ended without its terminal event") {
		t.Fatalf("the truncation is not logged: %s", logs)
	}
}

// cappedPolicy: one key that serves one request at a time, with a short queue budget.
const cappedPolicy = `
providers:
  - id: glm
    cluster: openai
    connections:
      - id: glm-1
        credential: {header: authorization, value: "Bearer glm"}
        maxConcurrent: 1
        modelConcurrency: {glm-4.7: 1}
        rateLimitOverrides: {maxWaitMs: 10000}
      - id: glm-2
        credential: {header: authorization, value: "Bearer glm2"}
        maxConcurrent: 4
        modelConcurrency: {glm-5: 1}
routes:
  - model: glm-4.7
    targets:
      - {provider: glm, connection: glm-1}
  - model: glm-5
    targets:
      - {provider: glm, connection: glm-2}
resilience:
  requestQueue: {maxQueueDepth: 1, executionMaxWaitMs: 60000}
`

func TestScenarioAQueuedRequestResumesWhenASlotFreesOnAnotherWorker(t *testing.T) {
	w := newWorld(t, cappedPolicy, 2)
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 3 * time.Second
		return r
	})
	first := w.start(0, chatReq("glm-4.7"))
	// A long body in several chunks: it must reach the upstream byte for byte after the wait.
	long := `{"model":"glm-4.7","messages":[{"role":"user","content":"` + strings.Repeat("ab", 5000) + `"}]}`
	second := w.start(1, llmRequest("/v1/chat/completions", long))
	w.advance(time.Second)
	if second.Done() || w.fakes.count("glm") != 1 {
		t.Fatalf("second request done=%v, upstream calls %d: it must wait for the slot", second.Done(), w.fakes.count("glm"))
	}
	r1 := w.wait(first)
	expect(t, "first", r1, 200, "glm/glm-1/glm-4.7/1")
	r2 := w.wait(second)
	expect(t, "second", r2, 200, "glm/glm-1/glm-4.7/1")
	calls := w.fakes.received()
	if len(calls) != 2 || string(calls[1].body) != long {
		t.Fatalf("the queued request reached the upstream with %d bytes, want its %d", len(calls[len(calls)-1].body), len(long))
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < 3*time.Second {
		t.Fatalf("second dispatched %v after the first: it did not wait for the slot", gap)
	}
	if n := w.metric("spillway_queued_total"); n != 1 {
		t.Errorf("queued = %d", n)
	}
	w.noStreamsLeft()
}

func TestScenarioQueueFullAndQueueTimeout(t *testing.T) {
	w := newWorld(t, cappedPolicy, 2)
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 30 * time.Second
		return r
	})
	busy := w.start(0, chatReq("glm-4.7"))
	queued := w.start(1, chatReq("glm-4.7"))
	// The queue holds one: the third is refused at once.
	full := w.run(0, chatReq("glm-4.7"))
	if full.StatusCode != 429 || errorCode(full) != "RATE_LIMIT_QUEUE_FULL" {
		t.Fatalf("third: %d %s", full.StatusCode, full.Body)
	}
	// The queued one waits its 10 s budget and is refused; it never reached the upstream.
	r := w.wait(queued)
	if r.StatusCode != 429 || errorCode(r) != "RATE_LIMIT_QUEUE_TIMEOUT" {
		t.Fatalf("queued: %d %s", r.StatusCode, r.Body)
	}
	if n := w.fakes.count("glm"); n != 1 {
		t.Fatalf("upstream got %d requests, want only the busy one", n)
	}
	expect(t, "busy", w.wait(busy), 200, "")
	w.noStreamsLeft()
}

func TestScenarioTheModelGateAnswersSemaphoreCodes(t *testing.T) {
	w := newWorld(t, cappedPolicy, 2)
	w.fakes.set("glm2", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 30 * time.Second
		return r
	})
	busy := w.start(0, chatReq("glm-5")) // glm-5 has a cap of 1; the connection has room for 4
	queued := w.start(1, chatReq("glm-5"))
	full := w.run(0, chatReq("glm-5"))
	if full.StatusCode != 429 || errorCode(full) != "SEMAPHORE_QUEUE_FULL" {
		t.Fatalf("third: %d %s", full.StatusCode, full.Body)
	}
	r := w.wait(queued)
	if r.StatusCode != 429 || errorCode(r) != "SEMAPHORE_TIMEOUT" {
		t.Fatalf("queued: %d %s", r.StatusCode, r.Body)
	}
	w.wait(busy)
}

func TestScenarioExecutionTimeout(t *testing.T) {
	w := newWorld(t, strings.Replace(cappedPolicy, "executionMaxWaitMs: 60000", "executionMaxWaitMs: 5000", 1), 1)
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = time.Minute
		return r
	})
	r := w.run(0, chatReq("glm-4.7"))
	if r.StatusCode != 504 || errorCode(r) != "RATE_LIMIT_EXECUTION_TIMEOUT" {
		t.Fatalf("got %d %s", r.StatusCode, r.Body)
	}
	// The timeout is the provider's failure: its connection cools (apikey base 3 s)...
	w.fakes.set("glm", nil)
	if r := w.run(0, chatReq("glm-4.7")); r.StatusCode != 503 || errorCode(r) != "all_targets_cooling_down" {
		t.Fatalf("right after the timeout: %d %s", r.StatusCode, r.Body)
	}
	// ...and its slot came back: once cooled, the next request is not queued behind it.
	w.advance(4 * time.Second)
	expect(t, "next", w.run(0, chatReq("glm-4.7")), 200, "glm/glm-1/glm-4.7/1")
	w.noStreamsLeft()
}

func TestScenarioAClientThatGoesAwayGivesItsSlotBack(t *testing.T) {
	w := newWorld(t, cappedPolicy, 2)
	w.fakes.set("glm", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 20 * time.Second
		return r
	})
	gone := w.start(0, chatReq("glm-4.7"))
	w.advance(time.Second)
	if err := gone.Reset(""); err != nil {
		t.Fatal(err)
	}
	w.fakes.set("glm", nil)
	next := w.start(1, chatReq("glm-4.7"))
	w.advance(10 * time.Millisecond)
	if !next.Done() {
		t.Fatal("the next request waits: the client that went away kept its slot")
	}
	expect(t, "next", w.wait(next), 200, "glm/glm-1/glm-4.7/1")
	w.noStreamsLeft()
}

func TestScenarioComboWaitResumesAfterAShortRateLimit(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
resilience:
  failover: {maxAttempts: 1}
`
	w := newWorld(t, policy, 2)
	w.fakes.set("sk-a", rateLimited("2"))
	first := w.run(0, chatReq("gpt-4o"))
	if first.StatusCode != 429 {
		t.Fatalf("first: %d", first.StatusCode)
	}
	w.fakes.set("sk-a", nil)
	// Every target is excluded by a 2 s rate limit: the request waits it out (comboCooldownWait)
	// and is answered, its three-chunk body intact.
	start := w.host.Clock().Now()
	resp := w.run(1, chatReq("gpt-4o"))
	expect(t, "after the wait", resp, 200, "openai/key-a/gpt-4o/1")
	if waited := w.host.Clock().Now().Sub(start); waited < 1500*time.Millisecond {
		t.Fatalf("answered after %v: it did not wait the rate limit out", waited)
	}
	if want := `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`; string(resp.Upstream.Body) != want {
		t.Fatalf("upstream body %q after the wait", resp.Upstream.Body)
	}
}

func TestScenarioAllTargetsCoolingDownAndCircuitOpenReplies(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	for _, key := range []string{"sk-a", "sk-b", "sk-backup"} {
		w.fakes.set(key, func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(500, `{"error":{"message":"internal","type":"server_error"}}`)
		})
	}
	first := w.run(0, chatReq("gpt-4o"))
	if first.StatusCode != 500 || header(first.Headers, "x-spillway-attempts") != "3" {
		t.Fatalf("first: %d attempts %s", first.StatusCode, header(first.Headers, "x-spillway-attempts"))
	}
	// Every target cooled by a server error: not worth waiting for, answered at once.
	r := w.run(0, chatReq("gpt-4o"))
	if r.StatusCode != 503 || errorCode(r) != "all_targets_cooling_down" || header(r.Headers, "retry-after") == "" {
		t.Fatalf("second: %d %s %v", r.StatusCode, r.Body, r.Headers)
	}
	excluded := gjson.GetBytes(r.Body, "error.diagnostics.excluded").Array()
	if len(excluded) != 3 {
		t.Fatalf("diagnostics %s", r.Body)
	}
	for _, e := range excluded {
		if e.Get("reason").Str != "unavailable" || e.Get("retryAfterSeconds").Int() < 1 || e.Get("connection").Str == "" {
			t.Fatalf("diagnostics entry %s", e.Raw)
		}
	}
	// An Anthropic-shaped request for an OpenAI-only route: nothing can serve it.
	r = w.run(0, llmRequest("/v1/messages", `{"model":"gpt-4o","max_tokens":5,"messages":[]}`))
	if r.StatusCode != 404 || errorCode(r) != "no_executable_targets" {
		t.Fatalf("api mismatch: %d %s", r.StatusCode, r.Body)
	}
}

func TestScenarioSessionAffinityPinsTheConnectionAcrossWorkers(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
      - {id: key-c, credential: {header: authorization, value: "Bearer sk-c"}}
routes:
  - model: gpt-4o
    strategy: round-robin
    targets:
      - {provider: openai}
resilience:
  sessionAffinityTtlMs: 600000
`
	w := newWorld(t, policy, 3)
	pinned := ""
	for i := 0; i < 6; i++ {
		r := w.run(i%3, chatReq("gpt-4o", [2]string{"x-session-id", "agent-session-42"}))
		conn := header(r.Headers, "x-spillway-connection")
		if pinned == "" {
			pinned = conn
		}
		if r.StatusCode != 200 || conn != pinned {
			t.Fatalf("request %d of the session went to %q (%d), want the pinned %q", i, conn, r.StatusCode, pinned)
		}
		if v := header(r.Upstream.Headers, "x-session-id"); v != "" {
			t.Fatalf("the session header reached the upstream: %q", v)
		}
	}
	// Without a session the round-robin spreads over every key.
	seen := map[string]bool{}
	for i := 0; i < 6; i++ {
		seen[header(w.run(i%3, chatReq("gpt-4o")).Headers, "x-spillway-connection")] = true
	}
	if len(seen) != 3 {
		t.Fatalf("round-robin without a session used %v", seen)
	}
}

func TestScenarioALockedModelSparesTheConnectionsOtherModels(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
routes:
  - model: gpt-4o
    targets: [{provider: openai}]
  - model: gpt-4o-mini
    targets: [{provider: openai}]
resilience:
  modelLockout: {enabled: true}
`
	w := newWorld(t, policy, 2)
	w.fakes.set("sk-a", func(c upstreamCall) *hostsim.UpstreamResponse {
		if c.model == "gpt-4o" {
			return jsonError(429, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-1 on tokens per min (TPM)","type":"tokens","code":"rate_limit_exceeded"}}`)
		}
		return chatOK(c)
	})
	expect(t, "gpt-4o fails over", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	expect(t, "gpt-4o locked on key A", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	expect(t, "gpt-4o-mini still on key A", w.run(0, chatReq("gpt-4o-mini")), 200, "openai/key-a/gpt-4o-mini/1")
}

func TestScenarioALongStreamKeepsItsSlotPastTheLease(t *testing.T) {
	policy := strings.Replace(cappedPolicy, "executionMaxWaitMs: 60000", "executionMaxWaitMs: 5000", 1)
	w := newWorld(t, policy, 2)
	vm := w.host.Worker(0)
	id := vm.InitializeHttpContext()
	req := chatReq("glm-4.7")
	vm.CallOnRequestHeaders(id, req.Headers, false)
	for i, c := range req.BodyChunks {
		vm.CallOnRequestBody(id, c, i == len(req.BodyChunks)-1)
	}
	if a := vm.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false); a != types.ActionPause {
		t.Fatalf("stream headers: %v, want held until the first event", a)
	}
	if a := vm.CallOnResponseBody(id, []byte(chatRoleEvent+chatContentEvent), false); a != types.ActionContinue {
		t.Fatalf("first event: %v, want the stream to go on", a)
	}
	// The stream runs 20 s, four times the lease: ticks renew it.
	for i := 0; i < 20; i++ {
		w.advance(time.Second)
		vm.CallOnResponseBody(id, []byte(chatContentEvent), false)
	}
	second := w.start(1, chatReq("glm-4.7"))
	w.advance(time.Second)
	if second.Done() {
		t.Fatalf("a second request got the slot while the 20 s stream still runs: %d %s", second.Response().StatusCode, second.Response().Body)
	}
	vm.CallOnResponseBody(id, []byte(chatDoneEvent), true)
	vm.CompleteHttpContext(id)
	expect(t, "second after the stream ended", w.wait(second), 200, "glm/glm-1/glm-4.7/1")
	w.noStreamsLeft()
}

// TestScenarioMixedTrafficLeavesNothingBehind runs randomised traffic — successes, errors,
// streams, failovers, queueing, client aborts — over three workers and checks that every
// request got exactly one answer and nothing is left: no stream in any VM, no slot in use.
func TestScenarioMixedTrafficLeavesNothingBehind(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 2}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}, maxConcurrent: 2}
  - id: backup
    cluster: backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer sk-backup"}, maxConcurrent: 2}
routes:
  - model: gpt-4o
    targets: [{provider: openai}, {provider: backup}]
resilience:
  requestQueue: {maxWaitMs: 4000, maxQueueDepth: 8}
`
	w := newWorld(t, policy, 3)
	var mu sync.Mutex
	n := 0
	behave := func(c upstreamCall) *hostsim.UpstreamResponse {
		mu.Lock()
		n++
		k := (n*7 + len(c.credential)) % 9
		mu.Unlock()
		var r *hostsim.UpstreamResponse
		switch k {
		case 0:
			r = jsonError(429, `{"error":{"message":"Rate limit reached","type":"requests"}}`, [2]string{"retry-after", "1"})
		case 1:
			r = jsonError(503, `{"error":{"message":"overloaded","type":"server_error"}}`)
		case 2:
			r = sse(chatRoleEvent, chatErrorEvent)
		case 3:
			r = sse(chatRoleEvent, chatContentEvent) // truncated
		case 4:
			r = sse(chatRoleEvent, chatContentEvent, chatDoneEvent)
		default:
			r = chatOK(c)
		}
		r.Delay = time.Duration(k*150) * time.Millisecond
		return r
	}
	for _, key := range []string{"sk-a", "sk-b", "sk-backup"} {
		w.fakes.set(key, behave)
	}
	type flight struct {
		ex    *hostsim.Exchange
		abort bool
	}
	var flights []flight
	for i := 0; i < 120; i++ {
		flights = append(flights, flight{ex: w.start(i%3, chatReq("gpt-4o")), abort: i%11 == 5})
		if i%4 == 3 {
			w.advance(200 * time.Millisecond)
		}
		for j := range flights {
			if f := &flights[j]; f.abort && !f.ex.Done() {
				if err := f.ex.Reset(""); err != nil {
					t.Fatal(err)
				}
				f.abort = false
			}
		}
	}
	statuses := map[int]int{}
	for _, f := range flights {
		r := w.wait(f.ex)
		switch {
		case r.Reset != "":
			statuses[-1]++
		case r.StatusCode >= 200 && r.StatusCode < 600:
			statuses[r.StatusCode]++
			if r.StatusCode == 200 && header(r.Headers, "x-spillway-connection") == "" {
				t.Fatalf("a 200 without x-spillway headers: %v", r.Headers)
			}
		default:
			t.Fatalf("malformed answer: %+v", r)
		}
	}
	t.Logf("answers by status (-1 = client reset): %v", statuses)
	if statuses[200] == 0 || statuses[-1] == 0 {
		t.Fatalf("the traffic did not mix: %v", statuses)
	}
	w.advance(time.Minute) // let every cooldown pass
	w.noStreamsLeft()
	// No slot is left in use: all six slots of the three keys can be taken at once, without
	// a single request queuing.
	for _, key := range []string{"sk-a", "sk-b", "sk-backup"} {
		w.fakes.set(key, func(c upstreamCall) *hostsim.UpstreamResponse {
			r := chatOK(c)
			r.Delay = 10 * time.Second
			return r
		})
	}
	queuedBefore := w.metric("spillway_queued_total")
	var held []*hostsim.Exchange
	for i := 0; i < 6; i++ {
		held = append(held, w.start(i%3, chatReq("gpt-4o")))
	}
	w.advance(time.Second)
	if queued := w.metric("spillway_queued_total"); queued != queuedBefore {
		t.Fatalf("%d of 6 requests queued on 6 free slots: slots leaked", queued-queuedBefore)
	}
	for _, ex := range held {
		expect(t, "final", w.wait(ex), 200, "")
	}
	w.noStreamsLeft()
}

func TestScenarioEnvoysOwnRepliesAreNotTheProvidersOutcome(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	// The router finds no healthy host for key A's attempts (503 UH, no_healthy_upstream):
	// Envoy's own reply, never the provider's outcome. Each request fails over to key B, and
	// key A is never cooled and its provider's breaker never opens (15 > the apikey
	// threshold of 12), so every request still tries it first.
	w.fakes.failRouter("sk-a", hostsim.ErrNoHealthyUpstream)
	for i := 0; i < 15; i++ {
		expect(t, fmt.Sprintf("request %d", i), w.run(i%2, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	}
	if n := w.fakes.count("sk-a"); n != 15 {
		t.Fatalf("key A was tried %d times in 15 requests: Envoy's own replies cooled it", n)
	}
	// A connection that fails before answering is the provider's transport failure: it
	// cools key A, and the next request goes straight to key B.
	w.fakes.failRouter("sk-a", &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteConnectionFailure,
		TransportFailure: "delayed connect error: Connection refused"})
	expect(t, "connection refused", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	expect(t, "after the transport failure", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
}

func TestScenarioAStreamIsHeldOnlyUntilItsFirstContent(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent, chatContentEvent, chatDoneEvent)
		// The role arrives at once, the first content after 2 s (a slow first token), then
		// one event every 100 ms.
		r.ChunkDelays = []time.Duration{10 * time.Millisecond, 2 * time.Second, 100 * time.Millisecond, 100 * time.Millisecond}
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "stream", resp, 200, "openai/key-a/gpt-4o/1")
	ttfb, ok := resp.TimeToFirstByte()
	if !ok || ttfb < 2*time.Second || ttfb > 2100*time.Millisecond {
		t.Fatalf("time to first byte %v: the headers wait for the first content event (2 s), no longer", ttfb)
	}
	var dataAt []time.Duration
	for _, e := range resp.Received {
		if e.Kind == hostsim.ClientData {
			dataAt = append(dataAt, e.At.Sub(resp.Start))
		}
	}
	if len(dataAt) < 3 || dataAt[len(dataAt)-1]-dataAt[0] < 150*time.Millisecond {
		t.Fatalf("data reached the client at %v: after the first content it must flow event by event", dataAt)
	}
	if string(resp.Body) != chatRoleEvent+chatContentEvent+chatContentEvent+chatDoneEvent {
		t.Fatalf("client got %q", resp.Body)
	}
}

func TestScenarioAHeartbeatOnlyStreamIsLetGoAtTheHoldBound(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		events := []string{chatRoleEvent}
		delays := []time.Duration{0}
		for i := 0; i < 15; i++ {
			events, delays = append(events, ": keep-alive\n\n"), append(delays, time.Second)
		}
		events, delays = append(events, chatContentEvent, chatDoneEvent), append(delays, time.Second, 0)
		r := sse(events...)
		r.ChunkDelays = delays
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	ttfb, _ := resp.TimeToFirstByte()
	// streamRecovery.firstEvent.timeoutMs (10 s): past it the stream goes on as it comes.
	if resp.StatusCode != 200 || ttfb < 10*time.Second || ttfb > 11*time.Second {
		t.Fatalf("%d after %v: a stream with no content is held for the 10 s bound, then let go", resp.StatusCode, ttfb)
	}
}

func TestScenarioAnUpstreamResetMidStreamCountsAClientResetDoesNot(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	// Key A's stream is reset by the upstream after some content.
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent)
		r.Reset = &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteReset, After: 100 * time.Millisecond}
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	if resp.Reset == "" {
		t.Fatalf("the client was not reset: %d %q", resp.StatusCode, resp.Body)
	}
	expect(t, "after the upstream reset", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")

	// A client that goes away mid-stream is not the provider's failure.
	w.advance(time.Minute)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent, chatContentEvent, chatDoneEvent)
		r.ChunkDelays = []time.Duration{0, 0, 5 * time.Second, 0}
		return r
	})
	req := chatReq("gpt-4o")
	req.ResetAfter = 2 * time.Second
	if resp := w.run(0, req); resp.Reset == "" {
		t.Fatalf("the client did not go away: %d", resp.StatusCode)
	}
	expect(t, "after the client went away", w.run(1, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")

	// Nor is an HTTP/2 client that resets its stream (RST_STREAM: flag DR, details as they
	// were, via_upstream).
	ex := w.start(0, chatReq("gpt-4o"))
	w.advance(2 * time.Second)
	if err := ex.ResetBy(hostsim.DownstreamStreamReset); err != nil {
		t.Fatal(err)
	}
	if resp := w.wait(ex); resp.Reset == "" || resp.Flags&hostsim.FlagDownstreamRemoteReset == 0 {
		t.Fatalf("the client's stream was not reset: %d %v", resp.StatusCode, resp.Flags)
	}
	w.fakes.set("sk-a", nil)
	expect(t, "after the client reset its stream", w.run(1, chatReq("gpt-4o")), 200, "openai/key-a/gpt-4o/1")
	if n := w.metric("spillway_truncated_streams_total"); n != 1 {
		t.Fatalf("truncated streams = %d, want only the upstream's reset", n)
	}
	w.noStreamsLeft()
}
func TestScenarioMissingOptionIsAnswered500NotHung(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2, hostsim.WithoutAllowOnHeadersStopIteration())
	start := w.host.Clock().Now()
	r := w.run(0, chatReq("gpt-4o"))
	if r.StatusCode != 500 || errorCode(r) != "spillway_misconfigured" {
		t.Fatalf("got %d %s", r.StatusCode, r.Body)
	}
	if waited := w.host.Clock().Now().Sub(start); waited < 10*time.Second || waited > 12*time.Second {
		t.Fatalf("answered after %v, want the 10 s body wait", waited)
	}
	if n := len(w.host.Host.LogsAt(hostsim.LogCritical)); n != 1 {
		t.Fatalf("%d critical logs", n)
	}
	if n := len(w.fakes.received()); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
	w.noStreamsLeft()
}

func TestScenarioAFailedStreamStaysHeldWhileTheFailoverAttemptRuns(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	// Key A's stream fails at its first event and goes on sending (and ends) while the
	// failover attempt to key B is in flight.
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatErrorEvent, chatContentEvent, chatDoneEvent)
		r.ChunkDelays = []time.Duration{0, 0, 200 * time.Millisecond, 200 * time.Millisecond}
		return r
	})
	w.fakes.set("sk-b", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent, chatDoneEvent)
		r.Delay = time.Second
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "stream", resp, 200, "openai/key-b/gpt-4o/2")
	if want := chatRoleEvent + chatContentEvent + chatDoneEvent; string(resp.Body) != want {
		t.Fatalf("client got %q, want only key B's stream", resp.Body)
	}
	w.noStreamsLeft()
}

func TestScenarioALargeHeldErrorIsDroppedNotOverflowedWhileFailingOver(t *testing.T) {
	// A 1 MiB buffer limit; key A's 500 is 2 MiB of error body, arriving in 64 KiB chunks
	// while the failover attempt to key B runs.
	const chunk = 64 << 10
	big := func() *hostsim.UpstreamResponse {
		r := jsonError(500, "")
		prefix := `{"error":{"message":"internal","type":"server_error","detail":"`
		r.BodyChunks = [][]byte{[]byte(prefix + strings.Repeat("x", chunk-len(prefix)))}
		for i := 1; i < 32; i++ {
			r.BodyChunks = append(r.BodyChunks, []byte(strings.Repeat("x", chunk)))
			r.ChunkDelays = append(r.ChunkDelays, 10*time.Millisecond)
		}
		r.ChunkDelays = append([]time.Duration{0}, r.ChunkDelays...)
		return r
	}
	t.Run("the failover attempt answers", func(t *testing.T) {
		w := newWorld(t, scenarioPolicy, 1)
		w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return big() })
		w.fakes.set("sk-b", func(c upstreamCall) *hostsim.UpstreamResponse {
			r := chatOK(c)
			r.Delay = time.Second
			return r
		})
		resp := w.run(0, chatReq("gpt-4o"))
		expect(t, "failover", resp, 200, "openai/key-b/gpt-4o/2")
		w.noStreamsLeft()
	})
	t.Run("the failover attempt gets no answer", func(t *testing.T) {
		w := newWorld(t, scenarioPolicy, 1)
		w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return big() })
		w.fakes.set("sk-b", func(upstreamCall) *hostsim.UpstreamResponse {
			return &hostsim.UpstreamResponse{Delay: time.Second} // no headers: the callout fails
		})
		w.fakes.set("sk-backup", func(upstreamCall) *hostsim.UpstreamResponse {
			return &hostsim.UpstreamResponse{Headers: nil, Delay: time.Second}
		})
		resp := w.run(0, chatReq("gpt-4o"))
		// Key A's failure is the answer: its status and error type, from what Spillway kept
		// of it (not Envoy's 500 response_payload_too_large).
		if resp.StatusCode != 500 || !strings.HasPrefix(string(resp.Body), `{"error":{"message":"internal"`) ||
			len(resp.Body) != chunk {
			t.Fatalf("client got %d, %d bytes %.80q; details %s", resp.StatusCode, len(resp.Body), resp.Body, resp.Details)
		}
		if header(resp.Headers, "x-spillway-connection") != "key-a" {
			t.Fatalf("answered via %s", spillway(resp))
		}
		w.noStreamsLeft()
	})
}

func TestScenarioComboWaitAfterAFailedAttemptRetriesOnceTheRateLimitRunsOut(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
`
	cases := []struct {
		name       string
		status     int           // key A's first answer
		retryAfter string        // its Retry-After
		want       int           // what the client gets
		attempts   int           // upstream attempts the request made
		minWait    time.Duration // virtual time the request took at least
	}{
		// A 2 s rate limit is waited out (guide §4), then the request goes again and succeeds.
		{name: "short rate limit", status: 429, retryAfter: "2", want: 200, attempts: 2, minWait: 1500 * time.Millisecond},
		// A rate limit longer than comboCooldownWait.maxWaitMs (65 s) is answered at once.
		{name: "long rate limit", status: 429, retryAfter: "600", want: 429, attempts: 1},
		// A server error is never waited out: the client gets it at once.
		{name: "server error", status: 503, retryAfter: "2", want: 503, attempts: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, policy, 2)
			var n int
			w.fakes.set("sk-a", func(c upstreamCall) *hostsim.UpstreamResponse {
				if n++; n == 1 {
					return jsonError(tc.status, `{"error":{"message":"Rate limit reached for requests","type":"requests"}}`,
						[2]string{"retry-after", tc.retryAfter})
				}
				return chatOK(c)
			})
			start := w.host.Clock().Now()
			resp := w.run(0, chatReq("gpt-4o"))
			took := w.host.Clock().Now().Sub(start)
			if resp.StatusCode != tc.want || w.fakes.count("sk-a") != tc.attempts {
				t.Fatalf("%d after %d attempts, want %d after %d; body %s", resp.StatusCode, w.fakes.count("sk-a"),
					tc.want, tc.attempts, resp.Body)
			}
			if took < tc.minWait || (tc.minWait == 0 && took > time.Second) {
				t.Fatalf("answered after %v", took)
			}
			if tc.want == 200 {
				expect(t, "after the wait", resp, 200, "openai/key-a/gpt-4o/2")
			}
			w.noStreamsLeft()
		})
	}
}

// A failover dispatched from the answer of a callout that was pinned to its stream (sent
// from the tick that ended a wait after a rate limit) is pinned in turn: its answer, the
// final 429, reaches the client. Before, the SDK filed that failover under the root, its
// answer ran with the root effective, the local reply did nothing and the request hung
// (found by e2e/load).
func TestScenarioAFailoverFromAPinnedCalloutAnswerIsAnsweredToo(t *testing.T) {
	policy := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
routes:
  - model: gpt-4o
    strategy: priority
    targets:
      - {provider: openai}
`
	w := newWorld(t, policy, 1)
	limited := rateLimited("2")
	w.fakes.set("sk-a", limited)
	var b int
	w.fakes.set("sk-b", func(c upstreamCall) *hostsim.UpstreamResponse {
		if b++; b == 1 {
			return chatOK(c)
		}
		return limited(c)
	})
	// Key A cools down for 2 s; key B answers.
	expect(t, "first request", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	before := len(w.fakes.received())
	// Key B fails too, with key A still cooling: the failed response stays held until the
	// rate limits run out; then key A is tried from the tick (a pinned callout), fails, and
	// the request fails over from that answer to key B, whose 429 is the answer.
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "second request", resp, 429, "openai/key-b/gpt-4o/3")
	var got []string
	for _, c := range w.fakes.received()[before:] {
		got = append(got, fmt.Sprintf("%s callout=%v", c.credential, c.viaCallout))
	}
	if want := []string{"sk-b callout=false", "sk-a callout=true", "sk-b callout=true"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("the second request's attempts: %v, want %v", got, want)
	}
	w.noStreamsLeft()
}
