package load

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Memory level-off bounds. A VM's linear memory only grows (Go's heap never gives wasm
// pages back), in steps, as the peak heap reaches a new GC target; without a leak the steps
// come ever more rarely, with one they keep coming with the requests. So over the second
// half of the run a VM may grow by at most half of what it grew over the first half, or
// memGrowthPages, whichever is more: 4 MiB, the Go GC's minimum heap goal, which a heap
// fills before its first collection however slowly it allocates (the main-thread VM takes
// no requests and allocates about once per two, draining wake-ups; it still grew late in
// a ten-minute soak, by 16 pages over its second half). Shared data may gain at most sharedKeyGrowth keys over the second
// half: its state is per provider and connection, bounded by the policy, and Envoy's shared
// data never deletes a key, so a key per request would be a leak.
const (
	memGrowthPages  = 64 // 4 MiB
	sharedKeyGrowth = 0
)

// samples is how many memory samples a run takes, evenly over its progress.
const samples = 8

// TestLoad drives the load policy through serve with the seeded mix at -load.concurrency
// over -load.workers VMs (-load.requests of them, or for -load.duration), while one 5xx
// storm opens the stormy provider's breaker; then it checks every answer, the access log,
// the fakes' counts, the filter's counters, what is left behind and the memory levels.
func TestLoad(t *testing.T) {
	p := startProxy(t, "build/spillway.wasm", *flagWorkers)
	host := p.Server.Host()
	tg := targetsOf(p.Policy.Resolved)
	c := newClient(*flagConcurrency + stormClients)
	r := &loadRun{p: p, host: host, tg: tg, c: c, seed: *flagSeed, total: *flagRequests, duration: *flagDuration}
	if r.duration > 0 {
		r.total = 0
	}

	storm := newStorm(t, p, tg)
	start := time.Now()
	var stormDone sync.WaitGroup
	stormDone.Go(func() { storm.run(c) })
	r.drive(*flagConcurrency)
	stormDone.Wait()
	elapsed := time.Since(start)
	r.sample(1, true) // the last sample, once every request ended

	sent := len(r.outcomes)
	t.Logf("%d requests in %v at concurrency %d over %d worker VMs: %.0f requests/s (and %d storm requests)",
		sent, elapsed.Round(time.Millisecond), *flagConcurrency, *flagWorkers, float64(sent)/elapsed.Seconds(), len(storm.outcomes))
	r.report(t)

	// Every answer was one its kind may get.
	if r.stuck.Load() {
		t.Fatalf("requests got no answer within %v: the run stopped; the first failures:\n%s", answerLimit, strings.Join(r.errs, "\n"))
	}
	if r.failed > 0 {
		t.Errorf("%d of %d answers were not what their kind may get; the first ones:\n%s", r.failed, sent, strings.Join(r.errs, "\n"))
	}

	// Every request, the storm's included, has exactly one access line, which agrees with
	// its answer.
	ids := append(r.ids(), storm.ids()...)
	if missing := p.access.await(ids); len(missing) > 0 {
		t.Errorf("%d requests have no access line, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	mismatches := 0
	for _, id := range ids {
		o := r.outcomeOf(id, storm)
		lines := p.access.lines(id)
		if len(lines) == 0 {
			continue
		}
		if err := agrees(lines, o); err != nil {
			if mismatches++; mismatches <= 10 {
				t.Errorf("request %d: %v", id, err)
			}
		}
	}
	numbered, _, bad := p.access.counts()
	if numbered != len(ids) || len(bad) > 0 {
		t.Errorf("access lines of %d numbered requests for %d sent; unparsable lines: %q", numbered, len(ids), bad)
	}

	// Nothing is left behind: no stream in any VM...
	for _, vm := range host.VMs() {
		if n := vm.LiveStreams(); n != 0 {
			t.Errorf("%s holds %d live streams after every request ended", vm.Name(), n)
		}
	}
	// ...no slot taken and no request queued anywhere...
	health, err := p.admin(c, "monitoring/health")
	if err != nil {
		t.Fatal(err)
	}
	checkNoSlots(t, health)
	storm.check(t, health)
	// ...and no request in flight at a fake (a fake's handler returns once it sees its
	// client gone, just after the cancelled request ended at the proxy).
	if !eventually(func() bool {
		for _, f := range p.Fakes {
			if f.TotalStats().InFlight != 0 {
				return false
			}
		}
		return true
	}) {
		for name, f := range p.Fakes {
			t.Errorf("fake %s: %+v in flight after every request ended", name, f.TotalStats())
		}
	}

	// Nothing lost, nothing duplicated: the fakes received exactly the attempts the answers
	// report (abortable's requests may end before reaching it; the storm is checked apart).
	var wantAttempts, abortable int
	for id := range sent {
		o := &r.outcomes[id]
		switch {
		case kinds[o.kind].abort != abortNone && o.aborted:
			abortable++ // it reached the fake, or not
		case kinds[o.kind].abort != abortNone:
			abortable += o.attempts // answered before its client left
		default:
			wantAttempts += o.attempts
		}
	}
	got := 0
	for _, cluster := range []string{"fake-openai", "fake-openrouter", "fake-anthropic", "fake-limited", "fake-flaky"} {
		got += p.fake(t, cluster).TotalStats().Requests
	}
	if got != wantAttempts {
		t.Errorf("the fakes received %d requests; the answers report %d upstream attempts", got, wantAttempts)
	}
	if n := p.fake(t, "fake-abort").TotalStats().Requests; n > abortable {
		t.Errorf("fake-abort received %d requests; at most %d can have reached it (one per aborted request, the attempts of the others)", n, abortable)
	}

	// The filter counted every stream once, and none ended in a panic, a truncation or a
	// misconfiguration.
	streams := float64(len(ids) + int(p.adminCalls.Load()))
	var series map[string]float64
	eventually(func() bool { // each VM adds its counts on its next tick after the stream ended
		series = p.prometheus(t, c)
		return series["spillway_requests_total"] >= streams &&
			sumSeries(series, "spillway_route_requests_total") >= float64(len(ids))
	})
	if n := series["spillway_requests_total"]; n != streams {
		t.Errorf("spillway_requests_total = %v, want %v (every request and admin call once)", n, streams)
	}
	// Each routed request is counted once, under the outcome its client saw.
	wantOutcomes := map[string]float64{}
	for _, id := range ids {
		wantOutcomes[r.outcomeOf(id, storm).filterOutcome()]++
	}
	for outcome, want := range wantOutcomes {
		if n := sumSeries(series, "spillway_route_requests_total", `spillway_outcome="`+outcome+`"`); n != want {
			t.Errorf("spillway_route_requests_total{spillway_outcome=%q} adds up to %v; the clients saw %v", outcome, n, want)
		}
	}
	if n := sumSeries(series, "spillway_route_requests_total"); n != float64(len(ids)) {
		t.Errorf("spillway_route_requests_total adds up to %v, want %v routed requests", n, len(ids))
	}
	for _, m := range []string{"spillway_panics_total", "spillway_abi_panics_total", "spillway_truncated_streams_total", "spillway_misconfigured_total"} {
		if n := series[m]; n != 0 {
			t.Errorf("%s = %v, want 0", m, n)
		}
	}
	// No admission step met a shared-data error: the CAS loop's bound is never reached.
	if n := sumSeries(series, "spillway_admission_store_errors_total"); n != 0 {
		t.Errorf("spillway_admission_store_errors_total adds up to %v, want 0", n)
	}
	var counters []string
	for k, v := range series {
		if !strings.Contains(k, "{") && v != 0 {
			counters = append(counters, fmt.Sprintf("%s %v", k, v))
		}
	}
	sort.Strings(counters)
	t.Logf("the filter's counters: %s", strings.Join(counters, ", "))
	if levels, serious := p.guest.report(); len(serious) > 0 {
		t.Errorf("serious log lines (levels %v):\n%s", levels, strings.Join(serious, "\n"))
	} else {
		t.Logf("guest log lines by level: %v", levels)
	}

	r.checkMemory(t)
}

// loadRun is one run of the mix.
type loadRun struct {
	p        *proxy
	host     *hostsim.Host
	tg       target
	c        *http.Client
	seed     uint64
	total    int           // requests to send; 0: for duration
	duration time.Duration // how long to send them, with total 0

	start time.Time
	done  atomic.Int64 // requests answered
	stuck atomic.Bool  // a request got no answer within answerLimit: the run stops

	mu       sync.Mutex
	outcomes []result // by request number
	failed   int
	errs     []string
	samples  []memSample
}

// result is what the checks keep of an outcome.
type result struct {
	kind                 int // index into kinds (-1 for the storm's)
	status               int
	aborted              bool
	attempts             int
	provider, connection string
	code                 string // error.code of Spillway's own reply
	latency              time.Duration
}

// filterOutcome is the spillway_outcome the filter must have counted the request under:
// success for a 2xx (aborted mid-stream or not: the client had its answer), client_gone
// for a client that left before it, upstream_failure for a provider's error, and the code
// of Spillway's own reply.
func (o result) filterOutcome() string {
	switch {
	case o.aborted && o.status == 0:
		return "client_gone"
	case o.status < 300:
		return "success"
	case o.attempts > 0:
		return "upstream_failure"
	}
	return o.code
}

// maxErrs bounds the errors a run keeps to print.
const maxErrs = 20

// drive sends the mix from concurrency clients until the run is over.
func (r *loadRun) drive(concurrency int) {
	r.start = time.Now()
	r.sample(0, false)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for {
				id, ok := r.take()
				if !ok {
					return
				}
				k := kindFor(r.seed, id)
				o := send(context.Background(), r.c, r.p.URL(), id, &kinds[k], r.tg)
				r.record(id, k, &o)
			}
		})
	}
	wg.Wait()
}

// take returns the next request's number, or false once the run is over: the numbers
// handed out are 0 to n-1 without a gap.
func (r *loadRun) take() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := len(r.outcomes)
	if (r.total > 0 && id >= r.total) || (r.total == 0 && time.Since(r.start) >= r.duration) || r.stuck.Load() {
		return 0, false
	}
	r.outcomes = append(r.outcomes, result{kind: -1})
	return id, true
}

// record keeps request id's outcome and takes a memory sample when the run passed the
// next milestone.
func (r *loadRun) record(id, k int, o *outcome) {
	res := result{kind: k, status: o.status, aborted: o.aborted, code: o.code, latency: o.latency}
	if o.header != nil {
		res.attempts = o.attempts()
		res.provider, res.connection = o.header.Get("x-spillway-provider"), o.header.Get("x-spillway-connection")
	}
	r.mu.Lock()
	r.outcomes[id] = res
	if o.err != nil {
		if errors.Is(o.err, errStuck) {
			r.stuck.Store(true) // more of the same would only make the failure slower
		}
		r.failed++
		if len(r.errs) < maxErrs {
			r.errs = append(r.errs, fmt.Sprintf("request %d (%s): %v", id, kinds[k].name, o.err))
		}
	}
	r.mu.Unlock()
	done := r.done.Add(1)
	var progress float64
	if r.total > 0 {
		progress = float64(done) / float64(r.total)
	} else {
		progress = float64(time.Since(r.start)) / float64(r.duration)
	}
	r.sample(progress, false)
}

// ids returns the mix's request numbers.
func (r *loadRun) ids() []int {
	out := make([]int, len(r.outcomes))
	for i := range out {
		out[i] = i
	}
	return out
}

// outcomeOf is the result of request id: the mix's, or the storm's after them.
func (r *loadRun) outcomeOf(id int, s *storm) result {
	if id >= stormBase {
		return s.outcomes[id-stormBase]
	}
	return r.outcomes[id]
}

// agrees reports how request o's access lines disagree with its answer: it must have one,
// "client-gone" if the client walked away, else its status and x-spillway-* headers.
func agrees(lines []accessLine, o result) error {
	if len(lines) != 1 {
		return fmt.Errorf("%d access lines, want 1: %+v", len(lines), lines)
	}
	l := lines[0]
	switch {
	case o.aborted && l.status != "client-gone":
		return fmt.Errorf("aborted by its client, but its access line says %+v", l)
	case o.aborted:
		return nil
	case l.status != strconv.Itoa(o.status) || l.provider != o.provider || l.connection != o.connection ||
		l.attempts != strconv.Itoa(o.attempts):
		return fmt.Errorf("answered %d by %s/%s after %d attempts, but its access line says %+v",
			o.status, o.provider, o.connection, o.attempts, l)
	}
	return nil
}

// checkNoSlots fails the test for any concurrency slot in use or request queued in the
// admin API's health: per connection and in rateLimitStatus (every worker's).
func checkNoSlots(t *testing.T, health gjson.Result) {
	t.Helper()
	conns := health.Get("connections").Array()
	if len(conns) == 0 {
		t.Fatalf("health lists no connections: %s", health.Raw)
	}
	for _, c := range conns {
		cc := c.Get("concurrency")
		if !cc.Exists() {
			continue // an uncapped connection holds no slots
		}
		if cc.Get("inFlight").Int() != 0 || cc.Get("queued").Int() != 0 {
			t.Errorf("connection %s: %s after every request ended", c.Get("id").Str, cc.Raw)
		}
		cc.Get("models").ForEach(func(model, m gjson.Result) bool {
			if m.Get("running").Int() != 0 {
				t.Errorf("connection %s model %s: %s running after every request ended", c.Get("id").Str, model.Str, m.Raw)
			}
			return true
		})
	}
	health.Get("rateLimitStatus").ForEach(func(key, s gjson.Result) bool {
		for _, f := range []string{"queued", "running", "executing"} {
			if s.Get(f).Int() != 0 {
				t.Errorf("rateLimitStatus %s: %s after every request ended", key.Str, s.Raw)
				break
			}
		}
		return true
	})
}

// report logs the outcomes per kind and the latency percentiles.
func (r *loadRun) report(t *testing.T) {
	type row struct {
		n        int
		outcomes map[string]int
		lat      []time.Duration
	}
	rows := make([]row, len(kinds))
	for i := range rows {
		rows[i].outcomes = map[string]int{}
	}
	for _, o := range r.outcomes {
		if o.kind < 0 {
			continue
		}
		rw := &rows[o.kind]
		rw.n++
		rw.outcomes[labelOf(o)]++
		if !o.aborted {
			rw.lat = append(rw.lat, o.latency)
		}
	}
	var b strings.Builder
	for i, rw := range rows {
		labels := make([]string, 0, len(rw.outcomes))
		for l, n := range rw.outcomes {
			labels = append(labels, fmt.Sprintf("%s: %d", l, n))
		}
		sort.Strings(labels)
		fmt.Fprintf(&b, "  %-16s %6d  p50 %-9v p99 %-9v %s\n", kinds[i].name, rw.n,
			percentile(rw.lat, 0.50).Round(10*time.Microsecond), percentile(rw.lat, 0.99).Round(10*time.Microsecond),
			strings.Join(labels, ", "))
	}
	t.Logf("outcomes by kind:\n%s", b.String())
}

// labelOf is a result's line in the report.
func labelOf(o result) string {
	switch {
	case o.aborted && o.status == 0:
		return "aborted before the answer"
	case o.aborted:
		return fmt.Sprintf("%d aborted mid-stream", o.status)
	case o.attempts == 0:
		return fmt.Sprintf("%d spillway", o.status)
	case o.attempts > 1:
		return fmt.Sprintf("%d after %d attempts", o.status, o.attempts)
	}
	return strconv.Itoa(o.status)
}

// percentile is the q-quantile of ds (nearest rank; 0 for none). It sorts ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// memSample is the memory of every VM at one point of the run.
type memSample struct {
	progress   float64
	requests   int64
	pages      map[string]uint32 // VM name -> linear memory pages (64 KiB)
	sharedKeys int
	allocs     uint64 // the guest Go heaps' cumulative allocations, every VM
	allocsErr  error
}

// sample takes the memory sample for progress (0 to 1) if it is the next one due; the
// last one (final) is taken once every request ended.
func (r *loadRun) sample(progress float64, final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	due := float64(len(r.samples)) / samples
	if (len(r.samples) >= samples) != final || progress < due {
		return
	}
	s := memSample{progress: progress, requests: r.done.Load(), pages: map[string]uint32{},
		sharedKeys: len(r.host.SharedDataKeys())}
	for _, vm := range r.host.VMs() {
		s.pages[vm.Name()] = vm.MemoryPages()
	}
	s.allocs, s.allocsErr = r.host.GuestHeapAllocs()
	r.samples = append(r.samples, s)
}

// checkMemory logs the samples and checks that memory levelled off over the second half.
func (r *loadRun) checkMemory(t *testing.T) {
	t.Helper()
	var b strings.Builder
	names := make([]string, 0)
	for name := range r.samples[0].pages {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, s := range r.samples {
		fmt.Fprintf(&b, "  %3.0f%% %7d requests  shared keys %4d  pages", 100*s.progress, s.requests, s.sharedKeys)
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%d", n, s.pages[n])
		}
		if i > 0 && s.allocsErr == nil && s.requests > r.samples[i-1].requests {
			fmt.Fprintf(&b, "  guest allocs/request %.1f", float64(s.allocs-r.samples[i-1].allocs)/float64(s.requests-r.samples[i-1].requests))
		}
		b.WriteString("\n")
	}
	t.Logf("memory samples:\n%s", b.String())
	if len(r.samples) != samples+1 {
		t.Fatalf("%d memory samples, want %d", len(r.samples), samples+1)
	}
	first, half, last := r.samples[0], r.samples[samples/2], r.samples[samples]
	for _, n := range names {
		before := int64(half.pages[n]) - int64(first.pages[n])
		bound := max(memGrowthPages, before/2)
		if grew := int64(last.pages[n]) - int64(half.pages[n]); grew > bound {
			t.Errorf("%s: linear memory grew %d pages (%d → %d) over the second half of the run, after %d over the first; more than %d",
				n, grew, half.pages[n], last.pages[n], before, bound)
		}
	}
	if grew := last.sharedKeys - half.sharedKeys; grew > sharedKeyGrowth {
		t.Errorf("shared data gained %d keys (%d → %d) over the second half of the run, more than %d",
			grew, half.sharedKeys, last.sharedKeys, sharedKeyGrowth)
	}
}
