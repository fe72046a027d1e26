package main

// Router-mode failover (resilience.failover.via: router, the default) against the callout
// path, per request and in the same run: the issue's "failover path per request vs the
// callout path", and what the default costs a request that never fails over
// (BenchmarkRouterSuccessPath: key A answers 200, one try, on each side).
//
// Unlike bench_test.go's paths, which call the guest's callbacks one by one, these drive
// whole exchanges through hostsim (VM.RunHTTP): the connection manager, the filter, the
// router with its retry policy and, for the router path, the upstream HTTP filter on every
// try. The same request and the same fake upstream go through three modules, each on a Host
// of its own:
//
//   - callout: spillway with failover.via callout. Key A's 429 reaches the downstream
//     instance, which fails over to key B with proxy_http_call and answers the client with
//     the callout's (whole) answer as a local reply.
//   - router: spillway with failover.via router, the upstream filter on the cluster and the
//     route's retry policy as the Envoy generator writes it (routerRetries). The upstream
//     instance marks key A's 429 and the router retries on key B, whose answer streams to
//     the client.
//   - noop: build/noop.wasm on the callout side's Host options, for context: one plain
//     exchange in which key A's 429 (the answer to any credential but key B's) passes
//     through.
//
// Measured as in bench_test.go (its file comment): fresh Hosts warmed with benchWarmup
// requests, a counting pass of benchCounted requests per module (host calls, shared-data
// operations, guest heap allocations, hostsim's allocations, read around each request),
// then benchRounds rounds in which the three take turns going first, each turn after
// benchRoundWarmup unmeasured requests. router-x-callout-median is the median over the
// rounds of the router path's time per request over the callout path's in the same round;
// router-x-noop-median and callout-x-noop-median are each over noop. ns/op is the router
// path's median time per request, callout-ns/op and noop-ns/op the others'. Between
// requests the virtual clock moves past the Retry-After (unmeasured), so every request
// starts on key A again. Virtual time within a request costs nothing here: the router's
// back-off is 0 ms at the generator's 1 ms base, and time to first byte, a virtual-clock
// property, is asserted by the router scenarios, not timed here.
//
// Every request is checked: the client's status and body (key B's), x-spillway-connection
// openai-b and x-spillway-attempts 2, no retry marker; the router path's two tries (key A,
// then key B, on fake-openai) and no callout; the callout path's one try (key A) and one
// callout to fake-openai with key B's credential, answered as a local reply; and per round
// the plugin's counters (routed, attempts, failovers, router retries, unlinked, panics).

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
)

const (
	routerBenchKeyA = "Bearer demo-key-a" // the demo's openai-a
	routerBenchKeyB = "Bearer demo-key-b" // the demo's openai-b
)

// routerBenchPath is one request, run through the three modules: a failover, or with
// success a request key A answers.
type routerBenchPath struct {
	req *hostsim.Request
	// keyB is key B's answer; wantBody is its whole body, what the client must get.
	keyB     func() *hostsim.UpstreamResponse
	wantBody []byte
	// success: key A answers as key B would (keyB), so nothing fails over.
	success bool
}

// BenchmarkRouterFailoverPath: a chat completion for gpt-4o (not streamed) on the demo
// policy with model lockout off (as BenchmarkFailoverPath); openai-a answers 429 with
// Retry-After: 1, openai-b a 200 chat completion.
func BenchmarkRouterFailoverPath(b *testing.B) {
	runRouterBench(b, routerBenchPath{
		req: &hostsim.Request{Headers: benchReqHeaders, Body: benchReqBody},
		keyB: func() *hostsim.UpstreamResponse {
			return &hostsim.UpstreamResponse{Headers: benchOK, Body: benchOKBody}
		},
		wantBody: benchOKBody,
	})
}

// BenchmarkRouterSuccessPath is the success path of the default, failover through the
// router, against the callout path's: the demo's chat completion for gpt-4o (not streamed,
// model lockout off as in the failover paths) answered 200 by openai-a, as whole exchanges
// through the connection manager, the filter, the router and, for the router path, the
// upstream filter on the try. What router mode adds to a request that never fails over:
// the link to its tries (the filter state spillway.link) and the upstream instance's
// look at the try (its request headers and the link, its response status).
func BenchmarkRouterSuccessPath(b *testing.B) {
	runRouterBench(b, routerBenchPath{
		req: &hostsim.Request{Headers: benchReqHeaders, Body: benchReqBody},
		keyB: func() *hostsim.UpstreamResponse {
			return &hostsim.UpstreamResponse{Headers: benchOK, Body: benchOKBody}
		},
		wantBody: benchOKBody,
		success:  true,
	})
}

// benchStreamBody is a streamed chat completion request.
var benchStreamBody = []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hello"}]}`)

// BenchmarkRouterFailoverStreamPath is BenchmarkRouterFailoverPath with a streamed request:
// openai-b answers an event stream of three events, three body chunks, which the router
// path passes to the client as they come and the callout path as one local reply.
func BenchmarkRouterFailoverStreamPath(b *testing.B) {
	stream := sse(chatRoleEvent, chatContentEvent, chatDoneEvent)
	runRouterBench(b, routerBenchPath{
		req: &hostsim.Request{Headers: benchReqHeaders, Body: benchStreamBody},
		keyB: func() *hostsim.UpstreamResponse {
			return &hostsim.UpstreamResponse{Headers: stream.Headers, BodyChunks: stream.BodyChunks}
		},
		wantBody: []byte(chatRoleEvent + chatContentEvent + chatDoneEvent),
	})
}

// routerFakes is the provider behind both the router and the callout: key B's answer for
// key B's credential, key A's 429 for any other. It counts what it was asked.
type routerFakes struct {
	keyB func() *hostsim.UpstreamResponse
	// keyBWhole is key B's body in one piece, what the callout's answer carries (made once:
	// the fake's own allocations would count as hostsim's)
	keyBWhole []byte
	tries     atomic.Int64 // upstream requests through the router
	callouts  atomic.Int64
	success   bool // every key answers as key B (routerBenchPath.success)
	// the last callout's cluster and credential
	calloutCluster, calloutCredential atomic.Value // string
}

func (f *routerFakes) answer(credential string) *hostsim.UpstreamResponse {
	if credential == routerBenchKeyB || f.success {
		return f.keyB()
	}
	return &hostsim.UpstreamResponse{Headers: bench429, Body: bench429Body}
}

func (f *routerFakes) upstream(_ context.Context, req *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
	f.tries.Add(1)
	return f.answer(benchHeader(req.Headers, "authorization")), nil
}

// callout answers as the host's async client does: once the response is whole.
func (f *routerFakes) callout(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
	f.callouts.Add(1)
	credential := benchHeader(c.Headers, "authorization")
	f.calloutCluster.Store(c.Upstream)
	f.calloutCredential.Store(credential)
	r := f.answer(credential)
	body := r.Body
	if credential == routerBenchKeyB {
		body = f.keyBWhole
	}
	return &hostsim.CalloutResponse{Headers: r.Headers, Body: body}
}

// routerSide is one module on its own Host, driven through whole exchanges.
type routerSide struct {
	*benchSide
	via   string // "callout" or "router"; "" for noop
	fakes *routerFakes
}

func newRouterSide(tb testing.TB, via string, p routerBenchPath) *routerSide {
	tb.Helper()
	name, module := via, "build/spillway.wasm"
	if via == "" {
		name, module = "noop", "build/noop.wasm"
	}
	policy := benchPolicy(tb, examples.Demo(), func(p map[string]any) {
		r := p["resilience"].(map[string]any)
		r["modelLockout"] = map[string]any{"enabled": false}
		if via != "" {
			r["failover"] = map[string]any{"via": via}
		}
	})
	f := &routerFakes{keyB: p.keyB, keyBWhole: p.wantBody, success: p.success}
	// The generated bootstrap's route: the cluster from the filter's filter state, the
	// demo's first provider's cluster without it.
	route := &hostsim.ClusterMatcher{FilterState: routerretry.TargetFilterStateKey, OnNoMatch: "fake-openai",
		Clusters: map[string]string{"fake-openai": "fake-openai", "fake-openrouter": "fake-openrouter", "fake-anthropic": "fake-anthropic"}}
	opts := []hostsim.Option{hostsim.WithPluginConfiguration(policy), hostsim.WithUpstream(f.upstream),
		hostsim.WithCalloutHandler(f.callout), hostsim.WithCluster("fake-openai", "fake-openrouter", "fake-anthropic"),
		hostsim.WithRouteCluster(hostsim.RouteCluster{Matcher: route})}
	if via == "router" {
		opts = append(opts, hostsim.WithUpstreamFilter(rootid.Upstream, policy))
		// The demo sets no failover.maxAttempts: the generator's num_retries is the default's.
		opts = append(opts, routerRetries(policies.FailoverMaxAttempts)...)
	}
	host := hostsimtest.New(tb, hostsimtest.ReadModule(tb, module), opts...)
	if host.StartPlugin() != types.OnPluginStartStatusOK {
		tb.Fatalf("%s did not start: %v", name, host.GetCriticalLogs())
	}
	s := &routerSide{benchSide: &benchSide{name: name, spillway: via != "", host: host}, via: via, fakes: f}
	s.w = host.Host.Worker(0)
	return s
}

// request runs one exchange, measured between m.start and m.stop, and checks it.
func (s *routerSide) request(tb testing.TB, p routerBenchPath, m *benchMeter) {
	tries, callouts := s.fakes.tries.Load(), s.fakes.callouts.Load()
	m.start(tb)
	resp, err := s.w.RunHTTP(context.Background(), p.req)
	m.stop(tb)
	if err != nil {
		tb.Fatalf("%s: %v", s.name, err)
	}
	if resp.Reset != "" {
		tb.Fatalf("%s: stream reset (%s)", s.name, resp.Reset)
	}
	tries, callouts = s.fakes.tries.Load()-tries, s.fakes.callouts.Load()-callouts
	if int(tries) != len(resp.Tries) {
		tb.Fatalf("%s: the upstream got %d requests, the router made %d tries", s.name, tries, len(resp.Tries))
	}
	if s.via == "" && p.success {
		if resp.StatusCode != 200 || len(resp.Tries) != 1 || callouts != 0 || string(resp.Body) != string(p.wantBody) {
			tb.Fatalf("noop: %d after %d tries and %d callouts, body %s; want the 200 passed through", resp.StatusCode,
				len(resp.Tries), callouts, resp.Body)
		}
		return
	}
	if s.via == "" {
		if resp.StatusCode != 429 || len(resp.Tries) != 1 || callouts != 0 || string(resp.Body) != string(bench429Body) {
			tb.Fatalf("noop: %d after %d tries and %d callouts, body %s; want key A's 429 passed through", resp.StatusCode,
				len(resp.Tries), callouts, resp.Body)
		}
		return
	}
	if resp.StatusCode != 200 || string(resp.Body) != string(p.wantBody) {
		tb.Fatalf("%s: %d %q, want 200 with key B's body", s.name, resp.StatusCode, resp.Body)
	}
	if v := benchHeader(resp.Headers, routerretry.MarkerHeader); v != "" {
		tb.Fatalf("%s: the retry marker reached the client (%q)", s.name, v)
	}
	if p.success {
		requireRouted(tb, s.benchSide, resp.Headers, "openai-a", "1")
		if len(resp.Tries) != 1 || callouts != 0 || resp.LocalReply != nil {
			tb.Fatalf("%s: %d tries, %d callouts, local reply %v; want key A's one try through the router", s.name,
				len(resp.Tries), callouts, resp.LocalReply != nil)
		}
		if c, a := resp.Tries[0].Cluster, benchHeader(resp.Tries[0].Headers, "authorization"); c != "fake-openai" || a != routerBenchKeyA {
			tb.Fatalf("%s: the try went to cluster %q with %q, want fake-openai with key A's", s.name, c, a)
		}
		return
	}
	requireRouted(tb, s.benchSide, resp.Headers, "openai-b", "2")
	wantTries := []string{routerBenchKeyA}
	if s.via == "router" {
		wantTries = append(wantTries, routerBenchKeyB)
	}
	if len(resp.Tries) != len(wantTries) {
		tb.Fatalf("%s: %d tries through the router, want %d", s.name, len(resp.Tries), len(wantTries))
	}
	for i, t := range resp.Tries {
		if c, a := t.Cluster, benchHeader(t.Headers, "authorization"); c != "fake-openai" || a != wantTries[i] {
			tb.Fatalf("%s: try %d went to cluster %q with %q, want fake-openai with %q", s.name, i+1, c, a, wantTries[i])
		}
	}
	switch s.via {
	case "router":
		if callouts != 0 {
			tb.Fatalf("router: %d callouts, want none", callouts)
		}
		if resp.LocalReply != nil {
			tb.Fatalf("router: a local reply (%d), want key B's response through the router", resp.LocalReply.StatusCode)
		}
	case "callout":
		if callouts != 1 {
			tb.Fatalf("callout: %d callouts, want 1", callouts)
		}
		if u, c := s.fakes.calloutCluster.Load(), s.fakes.calloutCredential.Load(); u != "fake-openai" || c != routerBenchKeyB {
			tb.Fatalf("callout: to %v with %v, want fake-openai with openai-b's key", u, c)
		}
		if resp.LocalReply == nil || resp.LocalReply.StatusCode != 200 {
			tb.Fatalf("callout: local reply %+v, want the callout's 200", resp.LocalReply)
		}
	}
}

// idle moves the virtual clock past key A's Retry-After (unmeasured).
func (s *routerSide) idle(tb testing.TB) {
	if err := s.host.Host.Advance(benchRetryWait); err != nil {
		tb.Fatalf("%s: %v", s.name, err)
	}
}

func (s *routerSide) run(tb testing.TB, p routerBenchPath, m *benchMeter, n int) {
	for i := 0; i < n; i++ {
		s.request(tb, p, m)
		m.done()
		if !p.success {
			s.idle(tb)
		}
	}
}

// routerCounterNames are the counters a round checks: bench_test.go's and router mode's.
var routerCounterNames = []string{"spillway_router_retries_total", "spillway_router_unlinked_total"}

func (s *routerSide) counters(tb testing.TB) map[string]uint64 {
	out := s.benchSide.counters(tb) // ticks the worker: it flushes what it counted
	for _, n := range routerCounterNames {
		v, err := s.host.GetCounterMetric(n)
		if err != nil {
			tb.Fatal(err)
		}
		out[n] = v
	}
	return out
}

// checkRound fails unless n requests moved the counters as n requests of the path on this
// side's: n failovers, or n successes without one.
func (s *routerSide) checkRound(tb testing.TB, p routerBenchPath, before map[string]uint64, n int) {
	tb.Helper()
	retries, attempts, failovers := uint64(0), uint64(2*n), uint64(n)
	if s.via == "router" {
		retries = uint64(n)
	}
	if p.success {
		retries, attempts, failovers = 0, uint64(n), 0
	}
	want := map[string]uint64{"spillway_routed_total": uint64(n), "spillway_attempts_total": attempts,
		"spillway_failovers_total": failovers, "spillway_router_retries_total": retries,
		"spillway_router_unlinked_total": 0, "spillway_panics_total": 0}
	after := s.counters(tb)
	for name, d := range want {
		if got := after[name] - before[name]; got != d {
			tb.Fatalf("%s: %s moved by %d, want %d", s.name, name, got, d)
		}
	}
}

// runRouterBench measures one failover through the three modules (see the file comment).
func runRouterBench(b *testing.B, p routerBenchPath) {
	sides := []*routerSide{newRouterSide(b, "", p), newRouterSide(b, "callout", p), newRouterSide(b, "router", p)}
	const noop, callout, router = 0, 1, 2
	counted := make([]*benchMeter, len(sides))
	for i, s := range sides {
		s.run(b, p, &benchMeter{s: s.benchSide}, benchWarmup)
		counted[i] = &benchMeter{s: s.benchSide, counting: true}
		s.run(b, p, counted[i], benchCounted)
	}

	rounds := min(b.N, benchRounds)
	perRound := (b.N + rounds - 1) / rounds
	nsPerReq := make([][]float64, len(sides)) // per side, per round
	var routerOverCallout, routerOverNoop, calloutOverNoop []float64
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		elapsed := make([]time.Duration, len(sides))
		for k := range sides {
			i := (r + k) % len(sides) // each side goes first in turn
			s := sides[i]
			s.run(b, p, &benchMeter{s: s.benchSide}, benchRoundWarmup)
			var before map[string]uint64
			if s.spillway {
				before = s.counters(b)
			}
			m := &benchMeter{s: s.benchSide}
			s.run(b, p, m, perRound)
			if before != nil {
				s.checkRound(b, p, before, perRound)
			}
			elapsed[i] = m.elapsed
			nsPerReq[i] = append(nsPerReq[i], float64(m.elapsed.Nanoseconds())/float64(perRound))
		}
		routerOverCallout = append(routerOverCallout, float64(elapsed[router])/float64(elapsed[callout]))
		routerOverNoop = append(routerOverNoop, float64(elapsed[router])/float64(elapsed[noop]))
		calloutOverNoop = append(calloutOverNoop, float64(elapsed[callout])/float64(elapsed[noop]))
	}
	b.StopTimer()

	b.ReportMetric(median(nsPerReq[router]), "ns/op")
	b.ReportMetric(median(nsPerReq[callout]), "callout-ns/op")
	b.ReportMetric(median(nsPerReq[noop]), "noop-ns/op")
	b.ReportMetric(median(routerOverCallout), "router-x-callout-median")
	b.ReportMetric(median(routerOverNoop), "router-x-noop-median")
	b.ReportMetric(median(calloutOverNoop), "callout-x-noop-median")
	for i, s := range sides {
		m := counted[i]
		b.ReportMetric(m.perRequest(m.calls.Total()), s.name+"-host-calls/op")
		b.ReportMetric(m.perRequest(m.calls.SharedData()), s.name+"-shared-data/op")
		b.ReportMetric(m.perRequest(m.guestAllocs), s.name+"-guest-allocs/op")
	}
	// allocs/op and B/op: hostsim's per router-path request (bench_test.go's reasons).
	b.ReportMetric(counted[router].perRequest(counted[router].hostAllocs), "allocs/op")
	b.ReportMetric(counted[router].perRequest(counted[router].hostBytes), "B/op")
	b.ReportMetric(counted[callout].perRequest(counted[callout].hostAllocs), "callout-allocs/op")
	if b.N < benchRounds {
		return // a run that sizes b.N: its ratios are single requests
	}
	if _, done := benchLogged.LoadOrStore(b.Name(), true); !done {
		for i, s := range sides {
			m := counted[i]
			b.Logf("%s per request (%d counted): host calls %.1f (%v), guest allocations %.1f (%v), hostsim allocations %.1f, %.0f B",
				s.name, benchCounted, m.perRequest(m.calls.Total()), m.calls1, m.perRequest(m.guestAllocs), m.allocs1,
				m.perRequest(m.hostAllocs), m.perRequest(m.hostBytes))
			b.Logf("%s host calls per request: %s", s.name, perRequestCalls(m))
		}
	}
}
