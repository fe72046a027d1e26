package main

// Router-mode failover (resilience.failover.via: router): the module also runs as the
// provider clusters' upstream HTTP filter, and a failed try fails over as one of the
// router's retries, whose response streams to the client like a first attempt's. hostsim
// runs the route's retry policy as the Envoy generator writes it (retriable-headers on the
// marker alone, num_retries = maxAttempts − 1, 1–10 ms back-off).

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/plugin/stats"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// routerPolicy is scenarioPolicy failing over through the router, with a cap of one on key
// B (so a leaked slot shows as a request that waits).
var routerPolicy = strings.Replace(scenarioPolicy,
	`- {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}`,
	`- {id: key-b, maxConcurrent: 1, credential: {header: authorization, value: "Bearer sk-b"}}`, 1) + `
resilience:
  failover: {via: router}
`

// routerRetries are the route's retry policy, its removal of the marker and the cluster's
// retry breaker as the Envoy generator writes them for a policy of maxAttempts attempts.
func routerRetries(maxAttempts uint32) []hostsim.Option {
	return append(routerRetriesKeepingTheMarker(maxAttempts), hostsim.WithRouteResponseHeadersToRemove(routerretry.MarkerHeader))
}

// routerRetriesKeepingTheMarker is routerRetries on a route without the marker's
// response_headers_to_remove (a hand-written configuration).
func routerRetriesKeepingTheMarker(maxAttempts uint32) []hostsim.Option {
	return []hostsim.Option{hostsim.WithRetryPolicy(routerRetryPolicy(maxAttempts)), hostsim.WithMaxRetries(1024)}
}

// routerRetryPolicy is the routed route's retry policy as the Envoy generator writes it for
// a policy of maxAttempts attempts (crossCluster adds RefreshClusterOnRetry).
func routerRetryPolicy(maxAttempts uint32) hostsim.RetryPolicy {
	return hostsim.RetryPolicy{
		RetryOn:          "retriable-headers",
		NumRetries:       hostsim.RetryCount(maxAttempts - 1),
		RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: routerretry.MarkerHeader, Kind: hostsim.RetryHeaderPresent}},
		BaseInterval:     time.Millisecond, MaxInterval: 10 * time.Millisecond,
	}
}

// newRetryWorld starts policyYAML with the upstream filter on every VM and the retries
// (numRetries: the route's num_retries).
func newRetryWorld(t *testing.T, policyYAML string, workers int, numRetries uint32, opts ...hostsim.Option) *world {
	t.Helper()
	config, err := policyfile.ToJSON([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	all := append([]hostsim.Option{hostsim.WithUpstreamFilter(rootid.Upstream, config)}, routerRetries(numRetries+1)...)
	return newWorld(t, policyYAML, workers, append(all, opts...)...)
}

// streamReq is a streamed chat completion.
func streamReq(model string) *hostsim.Request {
	return llmRequest("/v1/chat/completions", `{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
}

// slowStream is key B's stream: its headers after 300 ms, then three events 200 ms apart.
func slowStream(upstreamCall) *hostsim.UpstreamResponse {
	r := sse(chatRoleEvent, chatContentEvent, chatDoneEvent)
	r.Delay = 300 * time.Millisecond
	r.ChunkDelays = []time.Duration{200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}
	return r
}

// keyADelay is how long key A takes to answer its 429.
const keyADelay = 100 * time.Millisecond

func slowRateLimit(c upstreamCall) *hostsim.UpstreamResponse {
	r := rateLimited("30")(c)
	r.Delay = keyADelay
	return r
}

// criticalLines counts the critical log lines that contain s, on every VM.
func (w *world) criticalLines(s string) int {
	n := 0
	for _, l := range w.host.Host.GetCriticalLogs() {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// via lists what the fakes received: credential, and callout or router.
func (w *world) via() string {
	var out []string
	for _, c := range w.fakes.received() {
		how := "router"
		if c.viaCallout {
			how = "callout"
		}
		out = append(out, c.credential+"/"+how)
	}
	return strings.Join(out, " ")
}

// TestScenarioARateLimitedStreamFailsOverAsTheRoutersRetryAndStreams: the first
// proof. Key A answers 429; the request fails over to key B as the router's retry, and key
// B's stream reaches the client as it comes: its first event at key A's time plus key B's
// own time to its first event (the retry's back-off is 0 ms at the 1 ms base), where the
// callout path delivers nothing before key B's whole stream is in.
func TestScenarioARateLimitedStreamFailsOverAsTheRoutersRetryAndStreams(t *testing.T) {
	// Key B's headers, then its role event and its first content, which the downstream
	// instance holds the stream for.
	ownFirst := 300*time.Millisecond + 2*200*time.Millisecond
	for _, via := range []string{"router", "callout"} {
		t.Run(via, func(t *testing.T) {
			policy := routerPolicy
			if via == "callout" {
				policy = strings.Replace(routerPolicy, "failover: {via: router}", "failover: {via: callout}", 1)
			}
			w := newRetryWorld(t, policy, 2, 2)
			w.fakes.set("sk-a", slowRateLimit)
			w.fakes.set("sk-b", slowStream)
			resp := w.run(0, streamReq("gpt-4o"))
			expect(t, "stream", resp, 200, "openai/key-b/gpt-4o/2")
			if want := chatRoleEvent + chatContentEvent + chatDoneEvent; string(resp.Body) != want {
				t.Fatalf("client got %q, want key B's whole stream", resp.Body)
			}
			first, ok := resp.TimeToFirstData()
			if !ok {
				t.Fatal("no data reached the client")
			}
			t.Logf("%s: first event after %v (key A %v + key B's own %v)", via, first, keyADelay, ownFirst)
			switch via {
			case "router":
				if got := w.via(); got != "sk-a/router sk-b/router" {
					t.Fatalf("the providers received %s, want key A then key B, both through the router", got)
				}
				if len(resp.Tries) != 2 {
					t.Fatalf("%d tries, want 2", len(resp.Tries))
				}
				if lag := first - keyADelay - ownFirst; lag < 0 || lag > 10*time.Millisecond {
					t.Fatalf("first event after %v: %v past key A's time plus key B's own (want at most the 10 ms back-off cap)", first, lag)
				}
				if n := w.metric("spillway_router_retries_total"); n != 1 {
					t.Errorf("router retries %d, want 1", n)
				}
			case "callout":
				if got := w.via(); got != "sk-a/router sk-b/callout" {
					t.Fatalf("the providers received %s, want key A through the router, key B by callout", got)
				}
				if whole := keyADelay + 300*time.Millisecond + 600*time.Millisecond; first < whole {
					t.Fatalf("callout: first event after %v, before key B's stream was whole (%v)", first, whole)
				}
			}
			// Either way key A cooled: the next request goes to key B at once.
			w.fakes.set("sk-b", nil)
			expect(t, "next", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
			if n := w.metric("spillway_failovers_total"); n != 1 {
				t.Errorf("failovers %d, want 1", n)
			}
			if n := w.metric("spillway_router_unlinked_total"); n != 0 {
				t.Errorf("unlinked %d, want 0: the upstream filter saw every try", n)
			}
			w.noStreamsLeft()
		})
	}
}

// TestScenarioEveryTryIsRecordedOnce: key A and key B both fail; key B's failure reaches the
// downstream instance (no target left on the cluster), which fails over by callout to the
// backup gateway, on another cluster with another model. Each connection's failure is
// counted once, every attempt once.
func TestScenarioEveryTryIsRecordedOnce(t *testing.T) {
	w := newRetryWorld(t, routerPolicy, 1, 2)
	w.fakes.set("sk-a", rateLimited("30"))
	w.fakes.set("sk-b", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(503, `{"error":{"message":"overloaded","type":"server_error"}}`)
	})
	resp := w.run(0, streamReq("gpt-4o"))
	expect(t, "fallback", resp, 200, "backup/backup-a/openai/gpt-4o/3")
	if got := w.via(); got != "sk-a/router sk-b/router sk-backup/callout" {
		t.Fatalf("the providers received %s", got)
	}
	if len(resp.Tries) != 2 {
		t.Fatalf("%d router tries, want 2", len(resp.Tries))
	}
	for name, want := range map[string]uint64{
		"spillway_attempts_total": 3, "spillway_failovers_total": 2, "spillway_router_retries_total": 1,
		"spillway_routed_total": 1,
	} {
		if n := w.metric(name); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	for _, conn := range []string{"key-a", "key-b"} {
		attempts := w.metric(stats.ConnectionAttempts.Stat("openai", conn))
		var failures uint64
		for _, m := range w.host.Host.Metrics() {
			if strings.HasSuffix(m.Name, stats.ConnectionFailures.Name) && strings.Contains(m.Name, stats.TagConnection+"=.="+conn+";.;") {
				failures += m.Value
			}
		}
		if failures != 1 || attempts != 1 {
			t.Errorf("%s: %d failures over %d attempts, want 1 and 1", conn, failures, attempts)
		}
	}
	w.noStreamsLeft()
}

// TestScenarioAClientThatGoesAwayMidFailoverLeaksNoSlot: key A fails, the router retries on
// key B (capped at one), and the client goes away while key B's try runs. Key B's slot is
// given back: the next request is not queued.
func TestScenarioAClientThatGoesAwayMidFailoverLeaksNoSlot(t *testing.T) {
	w := newRetryWorld(t, routerPolicy, 2, 2)
	w.fakes.set("sk-a", rateLimited("30"))
	w.fakes.set("sk-b", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := chatOK(c)
		r.Delay = 20 * time.Second
		return r
	})
	gone := w.start(0, streamReq("gpt-4o"))
	w.advance(time.Second)
	if got := w.via(); got != "sk-a/router sk-b/router" {
		t.Fatalf("before the client went away the providers received %s", got)
	}
	if err := gone.Reset(""); err != nil {
		t.Fatal(err)
	}
	w.fakes.set("sk-b", nil)
	next := w.start(1, chatReq("gpt-4o"))
	w.advance(10 * time.Millisecond)
	if !next.Done() {
		t.Fatal("the next request waits: the client that went away kept key B's slot")
	}
	expect(t, "next", w.wait(next), 200, "openai/key-b/gpt-4o/1")
	w.noStreamsLeft()
}

// TestScenarioAMarkedTryTheRouterDoesNotRetryFailsOverByCallout: with num_retries 0 the
// router sends the marked 429 downstream; the target taken for the retry is given back
// unrecorded, and the downstream instance fails over by callout as without the router.
func TestScenarioAMarkedTryTheRouterDoesNotRetryFailsOverByCallout(t *testing.T) {
	w := newRetryWorld(t, routerPolicy, 1, 0)
	w.fakes.set("sk-a", rateLimited("30"))
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "failover", resp, 200, "openai/key-b/gpt-4o/2")
	if got := w.via(); got != "sk-a/router sk-b/callout" {
		t.Fatalf("the providers received %s", got)
	}
	if header(resp.Headers, routerretry.MarkerHeader) != "" {
		t.Fatal("the retry marker reached the client")
	}
	if n := w.metric("spillway_router_retries_total"); n != 0 {
		t.Errorf("router retries %d, want 0", n)
	}
	// Key B's slot (cap 1) was given back: a second request goes there at once.
	expect(t, "next", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
	w.noStreamsLeft()
}

// TestScenarioWithoutTheUpstreamFilterRouterModeFailsOverByCallout: the policy says router
// but the proxy runs no upstream instance. Failover still works, by callout; the request is
// counted and the misconfiguration logged at critical once per VM.
func TestScenarioWithoutTheUpstreamFilterRouterModeFailsOverByCallout(t *testing.T) {
	w := newWorld(t, routerPolicy, 1, routerRetries(3)...)
	w.fakes.set("sk-a", rateLimited("30"))
	for i := range 2 {
		w.fakes.set("sk-a", rateLimited("30"))
		resp := w.run(0, chatReq("gpt-4o"))
		if i == 0 {
			expect(t, "failover", resp, 200, "openai/key-b/gpt-4o/2")
		}
		w.advance(time.Minute)
	}
	if n := w.metric("spillway_router_unlinked_total"); n != 2 {
		t.Errorf("unlinked %d, want 2", n)
	}
	if n := w.criticalLines("no upstream instance saw a try"); n != 1 {
		t.Errorf("%d critical lines about the missing upstream filter, want 1", n)
	}
	w.noStreamsLeft()
}

// TestScenarioRouterModeRequestsAcrossWorkers: each worker's tries find their own requests
// (links are per VM), several requests in flight at once.
func TestScenarioRouterModeRequestsAcrossWorkers(t *testing.T) {
	policy := strings.Replace(routerPolicy, "maxConcurrent: 1, ", "", 1)
	w := newRetryWorld(t, policy, 2, 2)
	w.fakes.set("sk-a", func(c upstreamCall) *hostsim.UpstreamResponse {
		r := jsonError(500, `{"error":{"message":"boom","type":"server_error"}}`)
		r.Delay = 50 * time.Millisecond
		return r
	})
	w.fakes.set("sk-b", slowStream)
	var exs []*hostsim.Exchange
	for i := range 4 {
		exs = append(exs, w.start(i%2, streamReq("gpt-4o")))
	}
	for i, ex := range exs {
		resp := w.wait(ex)
		if resp.StatusCode != 200 || header(resp.Headers, "x-spillway-connection") != "key-b" {
			t.Fatalf("request %d: %d via %s: %s", i, resp.StatusCode, spillway(resp), resp.Body)
		}
	}
	if n := w.metric("spillway_router_unlinked_total"); n != 0 {
		t.Errorf("unlinked %d", n)
	}
	t.Log(w.via())
	w.noStreamsLeft()
}

// holdPolicy is routerPolicy with failover.holdTries (Envoy ≥ 1.37).
var holdPolicy = strings.Replace(routerPolicy, "failover: {via: router}", "failover: {via: router, holdTries: true}", 1)

// TestScenarioAnErrorEventFirstFailsOverAsTheRoutersRetryWithHeldTries: the second
// proof. Key A's 200 stream starts with an error event; with holdTries the upstream instance
// holds it until that event, marks it, and key B's stream reaches the client as it comes.
// Without holdTries the downstream instance sees the error and fails over by callout.
func TestScenarioAnErrorEventFirstFailsOverAsTheRoutersRetryWithHeldTries(t *testing.T) {
	errorFirst := func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatErrorEvent)
		r.Delay = keyADelay
		return r
	}
	ownFirst := 300*time.Millisecond + 2*200*time.Millisecond
	for _, hold := range []bool{true, false} {
		t.Run(fmt.Sprintf("holdTries=%v", hold), func(t *testing.T) {
			policy := routerPolicy
			if hold {
				policy = holdPolicy
			}
			w := newRetryWorld(t, policy, 2, 2)
			w.fakes.set("sk-a", errorFirst)
			w.fakes.set("sk-b", slowStream)
			resp := w.run(0, streamReq("gpt-4o"))
			expect(t, "stream", resp, 200, "openai/key-b/gpt-4o/2")
			if want := chatRoleEvent + chatContentEvent + chatDoneEvent; string(resp.Body) != want {
				t.Fatalf("client got %q, want key B's whole stream", resp.Body)
			}
			first, _ := resp.TimeToFirstData()
			t.Logf("holdTries=%v: first event after %v", hold, first)
			if hold {
				if got := w.via(); got != "sk-a/router sk-b/router" {
					t.Fatalf("the providers received %s", got)
				}
				if lag := first - keyADelay - ownFirst; lag < 0 || lag > 10*time.Millisecond {
					t.Fatalf("first event after %v, %v past key A's time plus key B's own", first, lag)
				}
			} else if got := w.via(); got != "sk-a/router sk-b/callout" {
				t.Fatalf("the providers received %s", got)
			}
			if n := w.metric("spillway_stream_error_events_total"); n != 1 {
				t.Errorf("stream error events %d, want 1 (counted by the instance that saw it)", n)
			}
			// Key A's in-stream rate limit cooled it.
			w.fakes.set("sk-b", nil)
			expect(t, "next", w.run(1, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/1")
			w.noStreamsLeft()
		})
	}
}

// TestScenarioHeldTriesReadTheErrorBody: a 400 is the client's own fault on its status
// alone, but GLM's "high-frequency non-compliant requests" body makes it a rate limit. With
// holdTries the upstream instance reads it and fails over by retry; a plain 400 is read and
// let through whole, not failed over.
func TestScenarioHeldTriesReadTheErrorBody(t *testing.T) {
	w := newRetryWorld(t, holdPolicy, 1, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(400, `{"error":{"message":"Detected high-frequency non-compliant requests from you","type":"invalid_request_error"}}`)
	})
	expect(t, "throttled", w.run(0, chatReq("gpt-4o")), 200, "openai/key-b/gpt-4o/2")
	if got := w.via(); got != "sk-a/router sk-b/router" {
		t.Fatalf("the providers received %s", got)
	}

	w.advance(time.Hour)
	const bad = `{"error":{"message":"messages: field required","type":"invalid_request_error"}}`
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return jsonError(400, bad) })
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "bad request", resp, 400, "openai/key-a/gpt-4o/1")
	if string(resp.Body) != bad {
		t.Fatalf("client got %q, want the provider's body", resp.Body)
	}
	w.noStreamsLeft()
}

// TestScenarioAHeldStreamGoesAtTheFirstEventBound: key A's 200 stream sends nothing for
// longer than the first-event bound; the downstream instance's tick lets the held try go,
// and the stream reaches the client from key A.
func TestScenarioAHeldStreamGoesAtTheFirstEventBound(t *testing.T) {
	policy := strings.Replace(holdPolicy, "failover: {via: router, holdTries: true}",
		"failover: {via: router, holdTries: true}\n  streamRecovery: {firstEvent: {timeoutMs: 1000}}", 1)
	w := newRetryWorld(t, policy, 1, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatContentEvent, chatDoneEvent)
		r.ChunkDelays = []time.Duration{5 * time.Second}
		return r
	})
	ex := w.start(0, streamReq("gpt-4o"))
	w.advance(1500 * time.Millisecond)
	if ex.Done() {
		t.Fatal("done early")
	}
	resp := w.wait(ex)
	expect(t, "slow start", resp, 200, "openai/key-a/gpt-4o/1")
	if string(resp.Body) != chatContentEvent+chatDoneEvent {
		t.Fatalf("client got %q", resp.Body)
	}
	got, ok := resp.TimeToFirstByte()
	if !ok || got < time.Second || got > 1200*time.Millisecond {
		t.Fatalf("headers reached the client after %v, want at the 1 s bound (the tick after it)", got)
	}
	w.noStreamsLeft()
}

// TestScenarioAnUpstreamFilterWithoutTheOptionIsDetected: the upstream filter lacks
// allow_on_headers_stop_iteration, so a held try gets no body callback. The downstream
// instance's tick lets it go after routing.bodyWaitMs, counts and logs it once; the request
// is answered with key A's failure (and fails over by callout from there).
func TestScenarioAnUpstreamFilterWithoutTheOptionIsDetected(t *testing.T) {
	w := newRetryWorld(t, holdPolicy, 1, 2, hostsim.WithoutUpstreamAllowOnHeadersStopIteration())
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		return jsonError(400, `{"error":{"message":"Detected high-frequency non-compliant requests from you"}}`)
	})
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "detected", resp, 200, "openai/key-b/gpt-4o/2")
	if got := w.via(); got != "sk-a/router sk-b/callout" {
		t.Fatalf("the providers received %s", got)
	}
	if n := w.metric("spillway_misconfigured_total"); n != 1 {
		t.Errorf("misconfigured %d, want 1", n)
	}
	if n := w.criticalLines("upstream filter lacks allow_on_headers_stop_iteration"); n != 1 {
		t.Errorf("%d critical lines about the upstream filter's missing option, want 1", n)
	}
	w.noStreamsLeft()
}

// TestScenarioEnvoysOwnReplyIsNoMissingUpstreamFilter: a reply Envoy makes before any try
// starts (no healthy upstream in the cluster) is no sign of a missing upstream filter: it is
// not counted as unlinked, and the request fails over by callout as any Envoy reply does.
func TestScenarioEnvoysOwnReplyIsNoMissingUpstreamFilter(t *testing.T) {
	w := newRetryWorld(t, routerPolicy, 1, 2, hostsim.WithRouteResolver(func(cluster string, _ [][2]string) error {
		if cluster == "openai" {
			return hostsim.ErrNoHealthyUpstream
		}
		return nil
	}))
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "failover", resp, 200, "openai/key-b/gpt-4o/2")
	if got := w.via(); got != "sk-b/callout" {
		t.Fatalf("the providers received %s", got)
	}
	if n := w.metric("spillway_router_unlinked_total"); n != 0 {
		t.Errorf("unlinked %d, want 0: no try started, so no upstream instance could see one", n)
	}
	if n := w.criticalLines("no upstream instance saw a try"); n != 0 {
		t.Errorf("%d critical lines for Envoy's own reply", n)
	}
	w.noStreamsLeft()
}

// crossPolicy fails over through the router to any cluster (failover.crossCluster, Envoy ≥
// 1.39): key A, then the backup gateway (another cluster, model openai/gpt-4o), then key B.
const crossPolicy = `
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
      - {id: backup-a, credential: {header: x-api-key, value: "sk-backup"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai, connection: key-a}
      - {provider: backup, model: openai/gpt-4o}
      - {provider: openai, connection: key-b}
resilience:
  failover: {via: router, crossCluster: true}
`

// newCrossWorld runs policyYAML with the route the Envoy generator writes for crossCluster:
// the matcher specifier on the filter's filter state, refreshed before each retry.
func newCrossWorld(t *testing.T, policyYAML string) *world {
	t.Helper()
	config, err := policyfile.ToJSON([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	retries := routerRetryPolicy(3)
	retries.RefreshClusterOnRetry = true
	return newWorld(t, policyYAML, 1,
		hostsim.WithUpstreamFilter(rootid.Upstream, config),
		hostsim.WithRouteCluster(hostsim.RouteCluster{Matcher: &hostsim.ClusterMatcher{
			FilterState: routerretry.TargetFilterStateKey,
			Clusters:    map[string]string{"openai": "openai", "backup": "backup", "anthropic": "anthropic"},
		}}),
		hostsim.WithRetryPolicy(retries), hostsim.WithMaxRetries(1024),
		hostsim.WithRouteResponseHeadersToRemove(routerretry.MarkerHeader))
}

// TestScenarioACrossProviderFallbackStreamsWithCrossCluster: the third proof. Key
// A answers 429, the backup gateway (another cluster) 503, key B streams: every failover is
// a router retry, each try reaches its own cluster with its own credential and a body for
// its own model with an exact content-length, and key B's stream flows.
func TestScenarioACrossProviderFallbackStreamsWithCrossCluster(t *testing.T) {
	w := newCrossWorld(t, crossPolicy)
	w.fakes.set("sk-a", slowRateLimit)
	w.fakes.set("sk-backup", func(upstreamCall) *hostsim.UpstreamResponse {
		r := jsonError(503, `{"error":{"message":"overloaded","type":"server_error"}}`)
		r.Delay = 50 * time.Millisecond
		return r
	})
	w.fakes.set("sk-b", slowStream)
	resp := w.run(0, streamReq("gpt-4o"))
	expect(t, "stream", resp, 200, "openai/key-b/gpt-4o/3")
	if want := chatRoleEvent + chatContentEvent + chatDoneEvent; string(resp.Body) != want {
		t.Fatalf("client got %q", resp.Body)
	}
	var got []string
	for _, c := range w.fakes.received() {
		cl := header(c.headers, "content-length")
		got = append(got, fmt.Sprintf("%s %s %s callout=%v length-exact=%v", c.cluster, c.credential, c.model, c.viaCallout,
			cl == strconv.Itoa(len(c.body))))
	}
	want := []string{
		"openai sk-a gpt-4o callout=false length-exact=true",
		"backup sk-backup openai/gpt-4o callout=false length-exact=true",
		"openai sk-b gpt-4o callout=false length-exact=true",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the providers received:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range w.fakes.received() {
		if c.cluster == "backup" && header(c.headers, "authorization") != "" {
			t.Errorf("the backup gateway got key A's authorization header: %v", c.headers)
		}
		if c.cluster == "openai" && header(c.headers, "x-api-key") != "" {
			t.Errorf("OpenAI got the backup gateway's x-api-key: %v", c.headers)
		}
	}
	first, _ := resp.TimeToFirstData()
	ownFirst := 300*time.Millisecond + 2*200*time.Millisecond
	if lag := first - keyADelay - 50*time.Millisecond - ownFirst; lag < 0 || lag > 20*time.Millisecond {
		t.Fatalf("first event after %v: %v past the failed tries' times plus key B's own", first, lag)
	}
	if n := w.metric("spillway_router_retries_total"); n != 2 {
		t.Errorf("router retries %d, want 2", n)
	}
	w.noStreamsLeft()
}

// TestScenarioAMarkedTryThatIsTheAnswerLosesItsMarker: a marked 429 the router does not
// retry becomes the client's answer when the failover callouts (key B, the backup) fail
// without a response; on a
// route that keeps the marker (no response_headers_to_remove) the filter removes it, so a
// client never sees it.
func TestScenarioAMarkedTryThatIsTheAnswerLosesItsMarker(t *testing.T) {
	config, err := policyfile.ToJSON([]byte(routerPolicy))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, routerPolicy, 1, append(routerRetriesKeepingTheMarker(1), hostsim.WithUpstreamFilter(rootid.Upstream, config))...)
	w.fakes.set("sk-a", rateLimited("30"))
	failed := func(upstreamCall) *hostsim.UpstreamResponse { return &hostsim.UpstreamResponse{} } // the callout fails
	w.fakes.set("sk-b", failed)
	w.fakes.set("sk-backup", failed)
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "answer", resp, 429, "openai/key-a/gpt-4o/3")
	if got := w.via(); got != "sk-a/router sk-b/callout sk-backup/callout" {
		t.Fatalf("the providers received %s", got)
	}
	if v := header(resp.Headers, routerretry.MarkerHeader); v != "" {
		t.Fatalf("the retry marker reached the client: %q", v)
	}
	w.noStreamsLeft()
}
