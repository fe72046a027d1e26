package main

// Benchmarks of the filter's request paths: build/spillway.wasm against build/noop.wasm (the
// do-nothing filter built the same way), both in hostsim on Envoy's request path with
// allow_on_headers_stop_iteration, driven identically.
//
// How the figures are measured (README "Benchmarks"):
//
//   - Each module runs on its own Host, fresh for every benchmark run and warmed with
//     benchWarmup requests first.
//   - Speed: the two modules take turns, round by round (benchRounds rounds of b.N/rounds
//     requests each, after benchRoundWarmup unmeasured ones; the order flips every round so
//     neither always runs first), and each round's ratio is spillway's time per request
//     over noop's in that round. x-noop-median is the median of those ratios: a machine
//     that slows down for a while slows both sides of a round. ns/op and noop-ns/op are the
//     medians of the rounds' mean times per request. Only the requests are timed; the
//     checks and a path's idle time between requests (failover: the virtual clock moves
//     past the cooldown) are not.
//   - Counts, which do not depend on the machine: a separate pass of benchCounted requests
//     per module reads, around each request, hostsim's host-call counters (every proxy_* and
//     WASI call the guest makes, on all its VMs), the guest Go heap's allocation count (the
//     ABI bridge's spillway_heap_allocs export) and the benchmark process's own allocations.
//     host-calls/op, shared-data/op (proxy_get_shared_data + proxy_set_shared_data) and
//     guest-allocs/op are spillway's means per request, each also as "-over-noop" (minus
//     noop's). allocs/op and B/op are replaced by the host side's (hostsim's) allocations per
//     spillway request, measured the same way: the framework's own figures would mix both
//     modules and the checks.
//   - The success paths add a third module, build/guests/floor.wasm (plugin/floor): a
//     filter that makes spillway's host calls and nothing else, checked call for call
//     against spillway's counting pass before anything is timed. floor-x-noop-median is
//     its per-round ratio over noop (what the host calls alone cost in hostsim),
//     x-floor-median spillway's over it (what spillway's own work adds); the three take
//     turns going first.
//   - Every request is checked: status, actions, the x-spillway-connection and
//     x-spillway-attempts headers, the callout or queue it must have gone through, so a
//     filter that took another path fails the benchmark instead of looking fast.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/plugin/internal/filter"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

const (
	benchRounds = 15 // timed rounds per run (odd: the median is one round's ratio)
	// benchWarmup requests per module run before anything is measured: enough for hostsim
	// to reuse its stream structs (it keeps 64 finished streams for its getters) and for the
	// guest's heap to reach its steady size (spillway's memory grows for about the first 900
	// failovers; wazero copies the memory on each growth, which is host allocation).
	benchWarmup = 1000
	// benchRoundWarmup requests run unmeasured at the start of each module's turn in a
	// round: the first requests after the other module ran pay for its cache footprint.
	benchRoundWarmup = 5
	benchCounted     = 50 // requests per module in the counting pass
)

var (
	benchReqHeaders = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "spillway.local"},
		{":scheme", "http"}, {"content-type", "application/json"}, {"authorization", "Bearer client-key"},
		{"x-request-id", "bench"}}
	benchReqBody   = []byte(`{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hello"}]}`)
	benchOK        = [][2]string{{":status", "200"}, {"content-type", "application/json"}}
	benchOKBody    = []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	bench429       = [][2]string{{":status", "429"}, {"content-type", "application/json"}, {"retry-after", "1"}}
	bench429Body   = []byte(`{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
	benchRetryWait = time.Second + time.Millisecond // past bench429's Retry-After
)

// benchPath is one request path, driven the same way through both modules.
type benchPath struct {
	policy []byte
	// prepare runs once on a fresh side, before the warm-up.
	prepare func(tb testing.TB, s *benchSide)
	// request runs one request, bracketing what is measured with m.start and m.stop, and
	// checks (on the spillway side) that it took the path.
	request func(tb testing.TB, s *benchSide, m *benchMeter)
	// idle, when set, runs after each request, unmeasured.
	idle func(tb testing.TB, s *benchSide)
	// perRound, when set, checks the spillway side's counters after n requests.
	perRound func(tb testing.TB, s *benchSide, before map[string]uint64, n int)
	// floor, when set, adds build/guests/floor.wasm (plugin/floor) with this plugin
	// configuration as a third module: it makes the host calls spillway's success path
	// makes and nothing else, which the benchmark checks before it measures.
	floor []byte
}

// benchSide is one module on its own Host.
type benchSide struct {
	name     string
	spillway bool
	host     *hostsimtest.Host
	w        *hostsim.VM // the raw VM: hostsimtest's wrappers cost a t.Helper per call
	callouts *benchCallouts
	prev     uint32 // queued path: the request in flight
}

// benchCallouts answers failover callouts with a 200 and remembers what they carried.
type benchCallouts struct {
	n          atomic.Int64
	upstream   atomic.Value // string
	credential atomic.Value // string
}

func (c *benchCallouts) handler() hostsim.CalloutHandler {
	return func(_ context.Context, co *hostsim.Callout) *hostsim.CalloutResponse {
		c.n.Add(1)
		c.upstream.Store(co.Upstream)
		c.credential.Store(benchHeader(co.Headers, "authorization"))
		return &hostsim.CalloutResponse{Headers: benchOK, Body: benchOKBody}
	}
}

func benchHeader(hs [][2]string, name string) string {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

func newBenchSide(tb testing.TB, name string, p benchPath) *benchSide {
	tb.Helper()
	s := &benchSide{name: name, spillway: name == "spillway", callouts: &benchCallouts{}}
	config, module := p.policy, "build/"+name+".wasm"
	if name == "floor" {
		config, module = p.floor, "build/guests/floor.wasm"
	}
	opts := []hostsim.Option{hostsim.WithPluginConfiguration(config),
		hostsim.WithCalloutHandler(s.callouts.handler()), hostsim.WithCluster("fake-openai", "fake-anthropic")}
	s.host = hostsimtest.New(tb, hostsimtest.ReadModule(tb, module), opts...)
	if s.host.StartPlugin() != types.OnPluginStartStatusOK {
		tb.Fatalf("%s did not start: %v", name, s.host.GetCriticalLogs())
	}
	s.w = s.host.Host.Worker(0)
	return s
}

func (s *benchSide) counters(tb testing.TB) map[string]uint64 {
	// A VM adds what it counted to Envoy's counters on its tick.
	if s.spillway {
		if err := s.w.Tick(); err != nil {
			tb.Fatal(err)
		}
	}
	out := map[string]uint64{}
	for _, n := range []string{"spillway_routed_total", "spillway_attempts_total", "spillway_failovers_total",
		"spillway_queued_total", "spillway_local_replies_total", "spillway_panics_total"} {
		v, err := s.host.GetCounterMetric(n)
		if err != nil {
			tb.Fatal(err)
		}
		out[n] = v
	}
	return out
}

// requireCounters fails unless each counter moved by exactly want[name], and no callback
// panicked.
func requireCounters(tb testing.TB, s *benchSide, before map[string]uint64, want map[string]uint64) {
	tb.Helper()
	want["spillway_panics_total"] = 0
	after := s.counters(tb)
	for name, d := range want {
		if got := after[name] - before[name]; got != d {
			tb.Fatalf("%s: %s moved by %d, want %d", s.name, name, got, d)
		}
	}
}

func requireAction(tb testing.TB, s *benchSide, step string, got, want types.Action) {
	tb.Helper()
	if got != want {
		tb.Fatalf("%s: %s: action %v, want %v", s.name, step, got, want)
	}
}

// requireRouted fails unless the response carries the connection and attempt count.
func requireRouted(tb testing.TB, s *benchSide, hs [][2]string, connection, attempts string) {
	tb.Helper()
	if got := benchHeader(hs, filter.HeaderConnection); got != connection {
		tb.Fatalf("%s: %s = %q, want %q (headers %v)", s.name, filter.HeaderConnection, got, connection, hs)
	}
	if got := benchHeader(hs, filter.HeaderAttempts); got != attempts {
		tb.Fatalf("%s: %s = %q, want %q", s.name, filter.HeaderAttempts, got, attempts)
	}
}

// benchMeter measures the requests of one module: the time between start and stop and,
// when counting, the host calls, guest heap allocations and host-side allocations.
type benchMeter struct {
	s        *benchSide
	counting bool
	t0       time.Time
	elapsed  time.Duration
	requests int

	calls0                hostsim.HostCallCounts
	guest0                uint64
	mem0, mem1            runtime.MemStats
	calls                 hostsim.HostCallCounts
	guestAllocs           uint64
	hostAllocs, hostBytes uint64
	// per request (counting pass): the range of host calls and guest allocations, and
	// this request's so far
	calls1, allocs1 benchRange
	curCalls        uint64
	curAllocs       uint64
}

// benchRange is the smallest and largest of per-request counts.
type benchRange struct {
	min, max uint64
	seen     bool
}

func (r *benchRange) add(v uint64) {
	if !r.seen || v < r.min {
		r.min = v
	}
	r.max = max(r.max, v)
	r.seen = true
}

func (r benchRange) String() string {
	if r.min == r.max {
		return fmt.Sprintf("every request %d", r.min)
	}
	return fmt.Sprintf("%d..%d", r.min, r.max)
}

func (m *benchMeter) start(tb testing.TB) {
	if m.counting {
		var err error
		if m.guest0, err = m.s.host.GuestHeapAllocs(); err != nil {
			tb.Fatalf("%s: guest allocations: %v", m.s.name, err)
		}
		m.calls0 = m.s.host.HostCalls()
		runtime.ReadMemStats(&m.mem0)
	}
	m.t0 = time.Now()
}

func (m *benchMeter) stop(tb testing.TB) {
	m.elapsed += time.Since(m.t0)
	if !m.counting {
		return
	}
	runtime.ReadMemStats(&m.mem1)
	d := m.s.host.HostCalls().Sub(m.calls0)
	g, err := m.s.host.GuestHeapAllocs()
	if err != nil {
		tb.Fatalf("%s: guest allocations: %v", m.s.name, err)
	}
	if m.calls == nil {
		m.calls = hostsim.HostCallCounts{}
	}
	for k, v := range d {
		m.calls[k] += v
	}
	m.curCalls += d.Total()
	m.curAllocs += g - m.guest0
	m.guestAllocs += g - m.guest0
	m.hostAllocs += m.mem1.Mallocs - m.mem0.Mallocs
	m.hostBytes += m.mem1.TotalAlloc - m.mem0.TotalAlloc
}

// done ends one request.
func (m *benchMeter) done() {
	if m.counting {
		m.calls1.add(m.curCalls)
		m.allocs1.add(m.curAllocs)
		m.curCalls, m.curAllocs = 0, 0
	}
	m.requests++
}

func (m *benchMeter) perRequest(v uint64) float64 { return float64(v) / float64(m.requests) }

func runRequests(tb testing.TB, p benchPath, s *benchSide, m *benchMeter, n int) {
	for i := 0; i < n; i++ {
		p.request(tb, s, m)
		m.done()
		if p.idle != nil {
			p.idle(tb, s)
		}
	}
}

// runBenchPath measures one path (see the file comment).
func runBenchPath(b *testing.B, p benchPath) {
	sides := []*benchSide{newBenchSide(b, "noop", p), newBenchSide(b, "spillway", p)}
	if p.floor != nil {
		sides = append(sides, newBenchSide(b, "floor", p))
	}
	counted := make([]*benchMeter, len(sides))
	for i, s := range sides {
		if p.prepare != nil {
			p.prepare(b, s)
		}
		runRequests(b, p, s, &benchMeter{s: s}, benchWarmup)
		counted[i] = &benchMeter{s: s, counting: true}
		runRequests(b, p, s, counted[i], benchCounted)
	}
	if p.floor != nil {
		requireSameCalls(b, counted[1], counted[2])
	}

	rounds := min(b.N, benchRounds)
	perRound := (b.N + rounds - 1) / rounds
	nsPerReq := make([][]float64, len(sides)) // per side, per round
	var ratios, floorRatios, overFloor []float64
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		elapsed := make([]time.Duration, len(sides))
		for k := range sides {
			i := (r + k) % len(sides) // each side goes first in turn
			s := sides[i]
			runRequests(b, p, s, &benchMeter{s: s}, benchRoundWarmup)
			var before map[string]uint64
			if s.spillway && p.perRound != nil {
				before = s.counters(b)
			}
			m := &benchMeter{s: s}
			runRequests(b, p, s, m, perRound)
			if before != nil {
				p.perRound(b, s, before, perRound)
			}
			elapsed[i] = m.elapsed
			nsPerReq[i] = append(nsPerReq[i], float64(m.elapsed.Nanoseconds())/float64(perRound))
		}
		ratios = append(ratios, float64(elapsed[1])/float64(elapsed[0]))
		if p.floor != nil {
			floorRatios = append(floorRatios, float64(elapsed[2])/float64(elapsed[0]))
			overFloor = append(overFloor, float64(elapsed[1])/float64(elapsed[2]))
		}
	}
	b.StopTimer()

	noop, spw := counted[0], counted[1]
	b.ReportMetric(median(nsPerReq[1]), "ns/op")
	b.ReportMetric(median(nsPerReq[0]), "noop-ns/op")
	b.ReportMetric(median(ratios), "x-noop-median")
	if p.floor != nil {
		b.ReportMetric(median(nsPerReq[2]), "floor-ns/op")
		b.ReportMetric(median(floorRatios), "floor-x-noop-median")
		b.ReportMetric(median(overFloor), "x-floor-median")
	}
	calls, noopCalls := spw.perRequest(spw.calls.Total()), noop.perRequest(noop.calls.Total())
	shared, noopShared := spw.perRequest(spw.calls.SharedData()), noop.perRequest(noop.calls.SharedData())
	allocs, noopAllocs := spw.perRequest(spw.guestAllocs), noop.perRequest(noop.guestAllocs)
	b.ReportMetric(calls, "host-calls/op")
	b.ReportMetric(calls-noopCalls, "host-calls-over-noop/op")
	b.ReportMetric(shared, "shared-data/op")
	b.ReportMetric(shared-noopShared, "shared-data-over-noop/op")
	b.ReportMetric(allocs, "guest-allocs/op")
	b.ReportMetric(allocs-noopAllocs, "guest-allocs-over-noop/op")
	b.ReportMetric(spw.perRequest(spw.hostAllocs), "allocs/op")
	b.ReportMetric(spw.perRequest(spw.hostBytes), "B/op")
	if b.N < benchRounds {
		return // a run that sizes b.N: its ratios are single requests
	}
	if _, done := benchLogged.LoadOrStore(b.Name(), true); !done {
		// Once per benchmark and process: the counts are the same in every run (the
		// ratios of each run are in its x-noop-median).
		b.Logf("per request (%d counted): host calls spillway %.1f (%v), noop %.1f (%v); guest allocations "+
			"spillway %.1f (%v), noop %.1f (%v); hostsim allocations spillway %.1f, noop %.1f",
			benchCounted, calls, spw.calls1, noopCalls, noop.calls1, allocs, spw.allocs1, noopAllocs, noop.allocs1,
			spw.perRequest(spw.hostAllocs), noop.perRequest(noop.hostAllocs))
		b.Logf("spillway host calls per request: %s", perRequestCalls(spw))
		b.Logf("noop host calls per request:     %s", perRequestCalls(noop))
	}
}

// requireSameCalls fails unless the floor made, per request, the very host calls spillway
// made (each function as often): a floor that drifted from spillway's success path would
// measure something else.
func requireSameCalls(tb testing.TB, spw, floor *benchMeter) {
	tb.Helper()
	if a, b := perRequestCalls(spw), perRequestCalls(floor); a != b {
		tb.Fatalf("floor.wasm no longer makes spillway's host calls (plugin/floor mirrors the success path):\n"+
			"  spillway: %s\n  floor:    %s", a, b)
	}
	if g := floor.perRequest(floor.guestAllocs); g != 0 {
		tb.Fatalf("floor.wasm allocates %.1f times per request in the guest, want 0", g)
	}
}

// benchLogged remembers the benchmarks whose breakdown was logged.
var benchLogged sync.Map

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// perRequestCalls lists a meter's calls per request by function, most frequent first.
func perRequestCalls(m *benchMeter) string {
	type fc struct {
		name string
		n    uint64
	}
	var fs []fc
	for k, v := range m.calls {
		fs = append(fs, fc{k, v})
	}
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].n != fs[j].n {
			return fs[i].n > fs[j].n
		}
		return fs[i].name < fs[j].name
	})
	if len(fs) == 0 {
		return "none"
	}
	parts := make([]string, len(fs))
	for i, f := range fs {
		v := m.perRequest(f.n)
		if v == math.Trunc(v) {
			parts[i] = fmt.Sprintf("%s %d", strings.TrimPrefix(f.name, "env."), int64(v))
		} else {
			parts[i] = fmt.Sprintf("%s %.2f", strings.TrimPrefix(f.name, "env."), v)
		}
	}
	return strings.Join(parts, ", ")
}

// benchPolicy is a policy for the benchmarks, edited by edit (when set), failing over by
// callout unless edit says otherwise: the paths here call one filter's callbacks, the
// downstream instance's, and a router-mode request (what an unset via is) without the
// upstream instance that sees its tries is the unlinked detector's path, not the default
// path of a deployment. The router paths, success and failover, are measured as whole
// exchanges with the upstream filter in routerbench_test.go.
func benchPolicy(tb testing.TB, yaml []byte, edit func(p map[string]any)) []byte {
	tb.Helper()
	data, err := policyfile.ToJSON(yaml)
	if err != nil {
		tb.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		tb.Fatal(err)
	}
	r, _ := p["resilience"].(map[string]any)
	if r == nil {
		r = map[string]any{}
		p["resilience"] = r
	}
	r["failover"] = map[string]any{"via": "callout"}
	if edit != nil {
		edit(p)
	}
	if data, err = json.Marshal(p); err != nil {
		tb.Fatal(err)
	}
	return data
}

// startRequest sends a chat completion's headers and body (one chunk).
func startRequest(s *benchSide, errs *benchErrs) (id uint32, headers, body types.Action) {
	id = s.w.InitializeHttpContext()
	headers = errs.action(s.w.CallOnRequestHeaders(id, benchReqHeaders, false))
	body = errs.action(s.w.CallOnRequestBody(id, benchReqBody, true))
	return id, headers, body
}

// benchErrs collects the guest traps of a measured stretch, checked after it.
type benchErrs []error

func (e *benchErrs) action(a types.Action, err error) types.Action {
	e.note(err)
	return a
}

func (e *benchErrs) note(err error) {
	if err != nil {
		*e = append(*e, err)
	}
}

func (e benchErrs) check(tb testing.TB, s *benchSide) {
	tb.Helper()
	if len(e) > 0 {
		tb.Fatalf("%s: %v", s.name, errors.Join(e...))
	}
}

// BenchmarkSuccessPath is the goal's success path: the demo policy (failing over by callout,
// see benchPolicy; BenchmarkRouterSuccessPath has the default's), one chat completion for
// gpt-4o routed to openai-a (capped, so it takes and frees a concurrency lease), a 200.
func BenchmarkSuccessPath(b *testing.B) {
	p := successPath(benchPolicy(b, examples.Demo(), nil))
	p.floor = []byte("capped")
	runBenchPath(b, p)
}

// BenchmarkSuccessPathUncapped is the success path on a connection without a concurrency
// cap (the demo's openai-a with its caps removed): no lease to take and give back, so the
// one shared-data operation left is the per-VM cache's generation read.
func BenchmarkSuccessPathUncapped(b *testing.B) {
	p := successPath(benchPolicy(b, examples.Demo(), func(p map[string]any) {
		conn := p["providers"].([]any)[0].(map[string]any)["connections"].([]any)[0].(map[string]any)
		delete(conn, "maxConcurrent")
		delete(conn, "modelConcurrency")
	}))
	p.floor = []byte("uncapped")
	runBenchPath(b, p)
}

// successPath is the demo's gpt-4o request answered 200 by openai-a.
func successPath(policy []byte) benchPath {
	return benchPath{
		policy: policy,
		request: func(tb testing.TB, s *benchSide, m *benchMeter) {
			var errs benchErrs
			m.start(tb)
			id, ah, ab := startRequest(s, &errs)
			rh := errs.action(s.w.CallOnResponseHeaders(id, benchOK, false))
			rb := errs.action(s.w.CallOnResponseBody(id, benchOKBody, true))
			errs.note(s.w.CompleteHttpContext(id))
			m.stop(tb)
			errs.check(tb, s)
			if lr := s.w.GetSentLocalResponse(id); lr != nil {
				tb.Fatalf("%s: local reply %d %s", s.name, lr.StatusCode, lr.Data)
			}
			if !s.spillway {
				return
			}
			requireAction(tb, s, "request headers", ah, types.ActionPause) // held for the body
			requireAction(tb, s, "request body", ab, types.ActionContinue)
			requireAction(tb, s, "response headers", rh, types.ActionContinue)
			requireAction(tb, s, "response body", rb, types.ActionContinue)
			req := s.w.GetCurrentRequestHeaders(id)
			c, _ := s.w.GetFilterState(id, []string{filter.TargetProperty})
			if a := benchHeader(req, "authorization"); string(c) != "fake-openai" || a != "Bearer demo-key-a" {
				tb.Fatalf("upstream request: cluster (filter state) %q, authorization %q", c, a)
			}
			resp := s.w.GetCurrentResponseHeaders(id)
			if st := benchHeader(resp, ":status"); st != "200" {
				tb.Fatalf("spillway: status %q", st)
			}
			requireRouted(tb, s, resp, "openai-a", "1")
		},
		perRound: func(tb testing.TB, s *benchSide, before map[string]uint64, n int) {
			requireCounters(tb, s, before, map[string]uint64{"spillway_routed_total": uint64(n),
				"spillway_attempts_total": uint64(n), "spillway_failovers_total": 0, "spillway_local_replies_total": 0})
		},
	}
}

// BenchmarkFailoverPath: openai-a answers 429 with Retry-After: 1; the request fails over
// to openai-b with a callout, which answers 200, and the client gets that answer as a
// local reply. The policy is the demo's with model lockout off: a locked-out model would
// keep openai-a out of the next requests' plans for 2 to 30 minutes, so only the first
// request would fail over. Between requests the virtual clock moves past the Retry-After
// (unmeasured), so every request starts on openai-a again.
func BenchmarkFailoverPath(b *testing.B) {
	runBenchPath(b, benchPath{
		policy: benchPolicy(b, examples.Demo(), func(p map[string]any) {
			p["resilience"].(map[string]any)["modelLockout"] = map[string]any{"enabled": false}
		}),
		request: func(tb testing.TB, s *benchSide, m *benchMeter) {
			calls := s.callouts.n.Load()
			var errs benchErrs
			m.start(tb)
			id, ah, ab := startRequest(s, &errs)
			rh := errs.action(s.w.CallOnResponseHeaders(id, bench429, false))
			rb := errs.action(s.w.CallOnResponseBody(id, bench429Body, true)) // the callout is answered in here
			errs.note(s.w.CompleteHttpContext(id))
			m.stop(tb)
			errs.check(tb, s)
			lr := s.w.GetSentLocalResponse(id)
			if !s.spillway {
				if lr != nil || rh != types.ActionContinue || rb != types.ActionContinue {
					tb.Fatalf("noop: actions %v %v, local reply %+v", rh, rb, lr)
				}
				return
			}
			requireAction(tb, s, "request headers", ah, types.ActionPause)
			requireAction(tb, s, "request body", ab, types.ActionContinue)
			requireAction(tb, s, "response headers", rh, types.ActionPause) // the error is held
			requireAction(tb, s, "response body", rb, types.ActionPause)
			if got := s.callouts.n.Load() - calls; got != 1 {
				tb.Fatalf("spillway: %d callouts, want 1", got)
			}
			if u, c := s.callouts.upstream.Load(), s.callouts.credential.Load(); u != "fake-openai" || c != "Bearer demo-key-b" {
				tb.Fatalf("callout to %v with %v, want fake-openai with openai-b's key", u, c)
			}
			if lr == nil || lr.StatusCode != 200 || string(lr.Data) != string(benchOKBody) {
				tb.Fatalf("spillway: want the callout's 200 as the reply, got %+v", lr)
			}
			requireRouted(tb, s, lr.Headers, "openai-b", "2")
		},
		idle: func(tb testing.TB, s *benchSide) {
			if err := s.host.Host.Advance(benchRetryWait); err != nil {
				tb.Fatalf("%s: %v", s.name, err)
			}
		},
		perRound: func(tb testing.TB, s *benchSide, before map[string]uint64, n int) {
			requireCounters(tb, s, before, map[string]uint64{"spillway_routed_total": uint64(n),
				"spillway_attempts_total": uint64(2 * n), "spillway_failovers_total": uint64(n)})
		},
	})
}

// queuedPolicy has one connection that takes one request at a time.
const queuedPolicy = `
providers:
  - id: openai
    profile: apikey
    cluster: fake-openai
    connections:
      - id: openai-a
        credential: {header: authorization, value: "Bearer demo-key-a"}
        maxConcurrent: 1
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
resilience:
  requestQueue: {maxWaitMs: 5000}
`

// BenchmarkQueuedPath: the connection's one slot is always busy, so every request waits in
// its queue and resumes when the request before it ends. One iteration sends request i
// (it queues), then answers request i-1 and ends it: its slot frees, request i is woken
// through the shared queue and goes upstream. Each iteration thus holds one whole request's
// callbacks, no virtual time passes and no tick runs.
func BenchmarkQueuedPath(b *testing.B) {
	runBenchPath(b, benchPath{
		policy: benchPolicy(b, []byte(queuedPolicy), nil),
		prepare: func(tb testing.TB, s *benchSide) {
			var errs benchErrs
			id, _, ab := startRequest(s, &errs)
			errs.check(tb, s)
			requireAction(tb, s, "first request", ab, types.ActionContinue)
			s.prev = id
		},
		request: func(tb testing.TB, s *benchSide, m *benchMeter) {
			var errs benchErrs
			m.start(tb)
			id, ah, ab := startRequest(s, &errs)
			m.stop(tb)
			errs.check(tb, s)
			if st, _ := s.w.StreamState(id); s.spillway && (ab != types.ActionPause || st.RequestHeadersForwarded) {
				tb.Fatalf("spillway: request %d went upstream (action %v) while the slot was busy", id, ab)
			}
			m.start(tb)
			rh := errs.action(s.w.CallOnResponseHeaders(s.prev, benchOK, false))
			rb := errs.action(s.w.CallOnResponseBody(s.prev, benchOKBody, true))
			errs.note(s.w.CompleteHttpContext(s.prev)) // frees the slot: request id resumes
			m.stop(tb)
			errs.check(tb, s)
			st, _ := s.w.StreamState(id)
			if !st.RequestHeadersForwarded || !st.RequestComplete {
				tb.Fatalf("%s: request %d did not go upstream after the slot freed", s.name, id)
			}
			if s.spillway {
				requireAction(tb, s, "request headers", ah, types.ActionPause)
				requireAction(tb, s, "response headers", rh, types.ActionContinue)
				requireAction(tb, s, "response body", rb, types.ActionContinue)
				resp := s.w.GetCurrentResponseHeaders(s.prev)
				if st := benchHeader(resp, ":status"); st != "200" {
					tb.Fatalf("spillway: status %q", st)
				}
				requireRouted(tb, s, resp, "openai-a", "1")
			}
			s.prev = id
		},
		perRound: func(tb testing.TB, s *benchSide, before map[string]uint64, n int) {
			requireCounters(tb, s, before, map[string]uint64{"spillway_queued_total": uint64(n),
				"spillway_routed_total": uint64(n), "spillway_local_replies_total": 0})
		},
	})
}
