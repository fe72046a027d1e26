package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// liveKey is the filter's choice of the records that bypass its per-VM cache (the Live
// kinds of state's key registry).
func liveKey(key string) bool { return state.IsLive(key) }

// worker is one VM of a test: an engine over its own per-VM cache of the shared store, as
// the filter builds it.
type worker struct {
	cache *state.Cache
	e     *Engine
	buf   Buffers
}

func newWorker(t testing.TB, yaml []byte, shared state.Store, clock state.Clock, seed uint64) *worker {
	t.Helper()
	p, err := policyfile.Parse(yaml, policies.ParseOptions{LookupEnv: func(name string) (string, bool) {
		return "test-value-of-" + name, true
	}})
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{cache: state.NewCache(shared, liveKey)}
	// A node with a fixed id gives the worker's admission lane a fixed id, so the records
	// two runs of one history write are byte for byte the same.
	node := admission.NewNode(shared, seed+1)
	if w.e, err = New(p, w.cache, clock, Options{Random: rand.NewPCG(seed, 7), Node: node}); err != nil {
		t.Fatal(err)
	}
	return w
}

// The filter's success path on the demo policy (one 200 for gpt-4o: refresh, plan, dispatch,
// record, release) on clean state, once the per-VM cache is warm, reads no remembered record
// and allocates nothing: its only cache traffic is the capped connection's admission record
// (acquire and release, each a read and a write), and its only other shared-data read is the
// cache's generation key. A cold cache reads each of the plan's records once.
func TestSuccessPathOnCleanStateCounts(t *testing.T) {
	shared := &testfixture.Store{MemStore: state.NewMemStore(), Log: true}
	w := newWorker(t, examples.Demo(), shared, manualclock.New(start), 1)
	type counts struct {
		lookups    uint64 // state.Cache reads of remembered keys (hits and misses)
		liveGets   uint64 // reads of live keys through the cache (admission)
		liveSets   uint64 // writes of live keys through the cache (admission)
		sharedGets int    // shared-data reads
		sharedSets int    // shared-data writes
	}
	request := func() counts {
		st0, g0, s0 := w.cache.Stats(), shared.Gets, shared.Sets
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		plan, err := w.e.Plan("gpt-4o", policies.APIOpenAI, affinity.Key{}, &w.buf)
		if err != nil || len(plan.Targets) != 3 {
			t.Fatalf("plan: %v, %d targets %v", err, len(plan.Targets), plan.Excluded)
		}
		d, err := w.e.Dispatch(plan.Targets[0])
		if err != nil || d.Waiting || !d.Lease.Held() {
			t.Fatalf("dispatch: %v waiting=%v held=%v", err, d.Waiting, d.Lease.Held())
		}
		if r := w.e.Record(d, Outcome{Status: 200, TTFB: time.Millisecond}, &plan); r.Errors != nil {
			t.Fatal(r.Errors)
		}
		if _, err := w.e.Release(d); err != nil {
			t.Fatal(err)
		}
		st := w.cache.Stats()
		return counts{lookups: st.Hits + st.Misses - st0.Hits - st0.Misses, liveGets: st.LiveGets - st0.LiveGets,
			liveSets: st.LiveSets - st0.LiveSets, sharedGets: shared.Gets - g0, sharedSets: shared.Sets - s0}
	}
	// Cold: the plan reads, for each of the route's 3 targets, its breaker, cooldown and
	// lockout index records, each from shared data once (openai-a and openai-b share their
	// provider's breaker: 8 keys).
	cold := request()
	if want := (counts{lookups: 9, liveGets: 2, liveSets: 2, sharedGets: 1 + 8 + 2, sharedSets: 2}); cold != want {
		t.Errorf("cold request: %+v, want %+v", cold, want)
	}
	for i := 0; i < 3; i++ {
		if got, want := request(), (counts{lookups: 0, liveGets: 2, liveSets: 2, sharedGets: 1 + 2, sharedSets: 2}); got != want {
			t.Errorf("warm request %d: %+v, want %+v", i, got, want)
		}
	}
}

// A model a glob route passes on is noted in its connection's served memory on success
// (issue 18's evidence for the lockout pool): in worker memory only, so the warm success path
// of a glob route costs the shared data it cost before — anthropic-a is capped like openai-a,
// so the same admission traffic as gpt-4o's — and allocates nothing.
func TestAGlobRoutesSuccessPathCostsNoMoreSharedData(t *testing.T) {
	shared := &testfixture.Store{MemStore: state.NewMemStore()}
	w := newWorker(t, examples.Demo(), shared, manualclock.New(start), 1)
	request := func() (gets, sets int) {
		g0, s0 := shared.Gets, shared.Sets
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		plan, err := w.e.Plan("claude-sonnet-4-5", policies.APIAnthropic, affinity.Key{}, &w.buf)
		if err != nil || len(plan.Targets) != 1 {
			t.Fatalf("plan: %v %v", err, plan.Excluded)
		}
		d, err := w.e.Dispatch(plan.Targets[0])
		if err != nil || !d.Lease.Held() {
			t.Fatalf("dispatch: %v held=%v", err, d.Lease.Held())
		}
		if r := w.e.Finish(d, Outcome{Status: 200, TTFB: time.Millisecond}, &plan); r.Errors != nil {
			t.Fatal(r.Errors)
		}
		return shared.Gets - g0, shared.Sets - s0
	}
	request()
	for i := 0; i < 3; i++ {
		if gets, sets := request(); gets != 1+2 || sets != 2 {
			t.Fatalf("warm request %d: %d shared-data reads and %d writes, want the generation key and the lease's 2 and 2", i, gets, sets)
		}
	}
	quiet := newWorker(t, examples.Demo(), newQuietStore(), manualclock.New(start), 1)
	w = quiet
	request()
	if allocs := testing.AllocsPerRun(100, func() { request() }); allocs != 0 {
		t.Fatalf("a warm request allocated %v times, want 0", allocs)
	}
}

// The warm success path allocates nothing in the engine, the cache or the mechanisms.
func TestSuccessPathOnCleanStateAllocatesNothing(t *testing.T) {
	w := newWorker(t, examples.Demo(), newQuietStore(), manualclock.New(start), 1)
	request := func() {
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		plan, err := w.e.Plan("gpt-4o", policies.APIOpenAI, affinity.Key{}, &w.buf)
		if err != nil || len(plan.Targets) == 0 {
			t.Fatalf("plan: %v %v", err, plan.Excluded)
		}
		d, err := w.e.Dispatch(plan.Targets[0])
		if err != nil || !d.Lease.Held() {
			t.Fatalf("dispatch: %v held=%v", err, d.Lease.Held())
		}
		if r := w.e.Finish(d, Outcome{Status: 200, TTFB: time.Millisecond}, &plan); r.Errors != nil {
			t.Fatal(r.Errors)
		}
	}
	request() // warms the cache and the buffers
	if allocs := testing.AllocsPerRun(100, request); allocs != 0 {
		t.Fatalf("a warm request allocated %v times, want 0", allocs)
	}
}

// quietStore is a Store with Envoy's CAS rules that allocates nothing once its keys exist
// (MemStore copies every value), so an allocation count sees only its callers.
type quietStore struct {
	entries map[string]*quietEntry
	nextCAS uint32
	guard   uint32
}

type quietEntry struct {
	value []byte
	cas   uint32
}

func newQuietStore() *quietStore {
	return &quietStore{entries: map[string]*quietEntry{}, nextCAS: 2, guard: 1}
}

func (s *quietStore) Get(key string) ([]byte, uint32, bool, error) {
	e, ok := s.entries[key]
	switch {
	case !ok:
		return nil, 0, false, nil
	case len(e.value) == 0:
		return nil, e.cas, false, nil
	}
	return e.value, e.cas, true, nil
}

func (s *quietStore) Set(key string, value []byte, cas uint32) error {
	e, ok := s.entries[key]
	if ok && cas != 0 && cas != e.cas {
		return state.ErrCasMismatch
	}
	if !ok {
		e = &quietEntry{}
		s.entries[key] = e
	}
	e.value = append(e.value[:0], value...)
	e.cas, s.nextCAS = s.nextCAS, s.nextCAS+1
	return nil
}

func (s *quietStore) CreateCAS() (uint32, error) { return s.guard, nil }

// world is a proxy of two workers over one shared store and clock, for the clean-memo
// differential test.
type world struct {
	models  []string // the models its clients ask for
	shared  *testfixture.Store
	clock   *manualclock.Clock
	workers [2]*worker
	pending []*request // requests whose attempt waits for its outcome
	held    []*request // requests whose outcome is recorded and whose slots are still held (streams)
	log     strings.Builder
}

// request is one client request in flight on a worker.
type request struct {
	w        *worker
	id       int
	buf      Buffers // the stream's own buffers, as the filter keeps them
	plan     Plan
	next     int // the next target to try
	attempts int
	d        Dispatch
}

func newWorld(t *testing.T, yaml []byte, models []string, memos bool) *world {
	wd := &world{models: models, shared: &testfixture.Store{MemStore: state.NewMemStore(), Log: true}, clock: manualclock.New(start)}
	for i := range wd.workers {
		wd.workers[i] = newWorker(t, yaml, wd.shared, wd.clock, uint64(i))
		if !memos {
			wd.workers[i].e.cache = nil // the engine as it was: every check reads (through the cache)
		}
	}
	return wd
}

// outcomes an attempt may get in the differential test, drawn with their weights.
var drawnOutcomes = []struct {
	weight int
	o      Outcome
	stall  bool // a stream stall instead of an outcome
}{
	{weight: 14, o: Outcome{Status: 200, TTFB: 40 * time.Millisecond}},
	{weight: 2, o: rateLimited},
	{weight: 2, o: overloaded},
	{weight: 1, o: Outcome{Status: 500, Body: []byte(`internal error`)}},
	{weight: 1, o: Outcome{Status: 0, Message: "connection reset"}},
	{weight: 1, o: Outcome{Status: 404, Body: []byte(`{"error":{"message":"The model does not exist","code":"model_not_found"}}`)}},
	{weight: 1, o: Outcome{Status: 401, Body: []byte(`{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`)}},
	{weight: 1, stall: true},
}

func drawOutcome(rng *rand.Rand) (Outcome, bool) {
	total := 0
	for _, d := range drawnOutcomes {
		total += d.weight
	}
	n := rng.IntN(total)
	for _, d := range drawnOutcomes {
		if n < d.weight {
			return d.o, d.stall
		}
		n -= d.weight
	}
	panic("unreachable")
}

// start begins a request on w the way the filter does: refresh, plan, dispatch.
func (wd *world) start(t *testing.T, w *worker, id int, rng *rand.Rand) {
	model := wd.models[rng.IntN(len(wd.models))]
	api := policies.APIOpenAI
	if strings.HasPrefix(model, "claude") {
		api = policies.APIAnthropic
	}
	var session affinity.Key
	if rng.IntN(3) == 0 {
		session, _ = affinity.NewKey(model, fmt.Sprint("session-", rng.IntN(3)))
	}
	r := &request{w: w, id: id}
	if err := w.cache.Refresh(); err != nil {
		t.Fatal(err)
	}
	plan, err := w.e.Plan(model, api, session, &r.buf)
	r.plan = plan
	fmt.Fprintf(&wd.log, "request %d plans %s: %v targets", id, model, err)
	for _, tg := range plan.Targets {
		fmt.Fprintf(&wd.log, " %d/%d/%s", tg.Provider, tg.Connection, tg.Model)
	}
	fmt.Fprintf(&wd.log, " excluded %v pinned %v degraded %v\n", plan.Excluded, plan.Pinned, plan.Degraded)
	wd.dispatch(t, r)
}

// dispatch sends r to the next target that can go (at most 3 attempts), or ends it.
func (wd *world) dispatch(t *testing.T, r *request) {
	e := r.w.e
	for r.next < len(r.plan.Targets) && r.attempts < 3 {
		d, err := e.Dispatch(r.plan.Targets[r.next])
		fmt.Fprintf(&wd.log, "  request %d dispatch %d: %v waiting=%v held=%v failedOpen=%v wake=%v probe=%+v\n",
			r.id, r.next, err, d.Waiting, d.Lease.Held(), d.FailedOpen, d.Wake, d.probe)
		r.next++
		switch {
		case err != nil && d.Lease.Held():
			t.Fatalf("dispatch failed and holds a lease: %v", err)
		case err != nil:
			continue
		case d.Waiting:
			waiters, err := e.Abandon(d)
			fmt.Fprintf(&wd.log, "  request %d abandons its ticket: %v %v\n", r.id, waiters, err)
			continue
		}
		r.attempts++
		r.d = d
		wd.pending = append(wd.pending, r)
		return
	}
	if r.attempts == 0 {
		fmt.Fprintf(&wd.log, "  request %d all excluded: %+v\n", r.id, e.AllExcluded(&r.plan, combo.Progress{}))
	}
}

// answer gives a pending request's attempt its outcome, the way the filter records it.
func (wd *world) answer(t *testing.T, r *request, rng *rand.Rand) {
	e := r.w.e
	o, stall := drawOutcome(rng)
	var res Result
	if stall {
		res = e.RecordStall(r.d)
	} else {
		res = e.Record(r.d, o, &r.plan)
	}
	fmt.Fprintf(&wd.log, "  request %d records %d stall=%v: %+v\n", r.id, o.Status, stall, res)
	ok := res.Verdict.Reason == "" && !stall
	if ok && rng.IntN(3) == 0 {
		wd.held = append(wd.held, r) // a stream: its slots stay held for now
		return
	}
	waiters, err := e.Release(r.d)
	fmt.Fprintf(&wd.log, "  request %d releases: %v %v\n", r.id, waiters, err)
	if ok || !res.Verdict.Fallback {
		return // answered: a failure that is not worth another target is the client's answer
	}
	if err := r.w.cache.Refresh(); err != nil { // the filter refreshes before failover
		t.Fatal(err)
	}
	wd.dispatch(t, r)
}

// take removes and returns a random element of *list.
func take(list *[]*request, rng *rand.Rand) *request {
	i := rng.IntN(len(*list))
	r := (*list)[i]
	*list = append((*list)[:i], (*list)[i+1:]...)
	return r
}

// step runs one random step of the world: requests starting on either worker, attempts
// answered in any order (so one request's writes fall between another's dispatch and its
// outcome), streams ending, time passing, an operator resetting a breaker.
func (wd *world) step(t *testing.T, id int, rng *rand.Rand) {
	switch n := rng.IntN(20); {
	case n < 8:
		wd.start(t, wd.workers[rng.IntN(2)], id, rng)
	case n < 15:
		if len(wd.pending) > 0 {
			wd.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			wd.answer(t, take(&wd.pending, rng), rng)
		}
	case n < 17:
		if len(wd.held) > 0 {
			r := take(&wd.held, rng)
			waiters, err := r.w.e.Release(r.d)
			fmt.Fprintf(&wd.log, "request %d's stream ends: %v %v\n", r.id, waiters, err)
		}
	case n < 19:
		wd.clock.Advance(time.Duration(rng.IntN(40_000)) * time.Millisecond)
	default:
		w := wd.workers[rng.IntN(2)]
		err := w.e.breakers.Reset(w.e.providers[rng.IntN(len(w.e.providers))].breaker)
		fmt.Fprintf(&wd.log, "an operator resets a breaker: %v\n", err)
	}
}

// The clean memos change nothing but the reads: two workers driven through the same random
// history — interleaved requests with every kind of outcome, failover, streams holding their
// slots, time passing, an operator resetting a breaker — make the same decisions and write
// the same shared data, byte for byte and CAS for CAS, with the memos as without them, and
// the memos read less.
func TestCleanMemosChangeOnlyTheReads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy []byte   // the proxy's policy
		models []string // what its clients ask for
	}{
		{name: "demo", policy: examples.Demo(), models: []string{"gpt-4o", "gpt-4o", "gpt-4o-mini", "claude-3-opus", "claude-3-haiku"}},
		// One connection serving a route under two models, model lockout off: a 404 for one
		// model is the request's own (it spends the connection, writing nothing).
		{name: "acme", policy: acmePolicy("resilience: {modelLockout: {enabled: false}}"),
			models: []string{"m1", "m1", "acme-only", "spread", "pair"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 10; seed++ {
				with, without := newWorld(t, tc.policy, tc.models, true), newWorld(t, tc.policy, tc.models, false)
				rngWith, rngWithout := rand.New(rand.NewPCG(seed, 99)), rand.New(rand.NewPCG(seed, 99))
				for i := 0; i < 400; i++ {
					with.step(t, i, rngWith)
					without.step(t, i, rngWithout)
				}
				if a, b := with.log.String(), without.log.String(); a != b {
					t.Fatalf("seed %d: decisions differ with the memos:\n%s", seed, firstDifference(a, b))
				}
				if a, b := strings.Join(with.shared.Writes, "\n"), strings.Join(without.shared.Writes, "\n"); a != b {
					t.Fatalf("seed %d: shared-data writes differ with the memos:\n%s", seed, firstDifference(a, b))
				}
				if log := with.log.String(); len(with.shared.Writes) == 0 || !strings.Contains(log, "records 200") ||
					!strings.Contains(log, "excluded [{") {
					t.Fatalf("seed %d: the history wrote nothing, or had no success or no exclusion: it tests nothing", seed)
				}
				reads := func(wd *world) (n uint64) {
					for _, w := range wd.workers {
						st := w.cache.Stats()
						n += st.Hits + st.Misses
					}
					return n
				}
				if r1, r0 := reads(with), reads(without); r1 >= r0 {
					t.Errorf("seed %d: %d cache reads with the memos, %d without: the memos saved nothing", seed, r1, r0)
				}
			}
		})
	}
}

// firstDifference shows the first line where a and b differ, with a little context.
func firstDifference(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d\n with:    %s\n without: %s\n(before: %s)", i, la[i], lb[i], la[max(i-1, 0)])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d and %d lines)", len(la), len(lb))
}

// A worker that saw a target clean sees another worker's failure there at its next refresh,
// and records its own success there in full: the memos accept the cache's staleness, no
// more.
func TestCleanMemosSeeOtherWorkersAtRefresh(t *testing.T) {
	openaiA := Target{Provider: 0, Connection: 0, Model: "gpt-4o"}
	for _, tc := range []struct {
		name   string
		fail   Outcome // what the other worker records on openai-a
		times  int     // how many times
		reason combo.Reason
	}{
		{name: "rate limit cools the connection", fail: rateLimited, times: 1, reason: combo.ReasonModelLockout},
		{name: "server errors open the breaker", fail: overloaded, times: 12, reason: combo.ReasonCircuitOpen},
		{name: "an auth failure cools the connection", fail: Outcome{Status: 401,
			Body: []byte(`{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`)}, times: 1,
			reason: combo.ReasonUnavailable},
		{name: "credits gone is terminal", fail: creditsGone, times: 1, reason: combo.ReasonTerminal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared, clock := state.NewMemStore(), manualclock.New(start)
			a, b := newWorker(t, examples.Demo(), shared, clock, 1), newWorker(t, examples.Demo(), shared, clock, 2)
			// a serves a request on clean state: its memos vouch for openai-a.
			if err := a.cache.Refresh(); err != nil {
				t.Fatal(err)
			}
			plan, err := a.e.Plan("gpt-4o", policies.APIOpenAI, affinity.Key{}, &a.buf)
			if err != nil || len(plan.Targets) != 3 || !a.e.stillClean(plan.Targets[0].clean) {
				t.Fatalf("plan on clean state: %v %v, first target clean=%v", err, plan.Targets, plan.Targets[0].clean)
			}
			inFlight, err := a.e.Dispatch(plan.Targets[0]) // answered after b's failures
			if err != nil {
				t.Fatal(err)
			}
			// b records its failures.
			if err := b.cache.Refresh(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < tc.times; i++ {
				failOn(t, b.e, openaiA, tc.fail)
			}
			// a's next request plans after a refresh: openai-a is excluded, as a fresh read says.
			if err := a.cache.Refresh(); err != nil {
				t.Fatal(err)
			}
			next, err := a.e.Plan("gpt-4o", policies.APIOpenAI, affinity.Key{}, &a.buf)
			if err != nil {
				t.Fatal(err)
			}
			if got := excludedReasons(next)["openai-a"]; got != tc.reason {
				t.Fatalf("openai-a after the other worker's failures: excluded %q (plan %v, excluded %v), want %q",
					got, next.Targets, next.Excluded, tc.reason)
			}
			// The request dispatched before then succeeds: its success is recorded in full, as
			// without memos — a breaker's failure count goes back to zero.
			if r := a.e.Finish(inFlight, Outcome{Status: 200}, &plan); r.Errors != nil {
				t.Fatal(r.Errors)
			}
			st, err := breaker.New(shared, clock).Status(a.e.providers[0].breaker)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reason != combo.ReasonCircuitOpen && st.Failures != 0 {
				t.Fatalf("breaker failures after the success: %d, want 0", st.Failures)
			}
		})
	}
}

// A worker's own writes void its memos at once, without a refresh: a success recorded after
// another request on the same worker failed on the same target is recorded in full, and a
// request's own failure that records nothing (a bare 404, model lockout off) still keeps its
// failover off that connection under every model.
func TestCleanMemosSeeThisWorkersOwnDoings(t *testing.T) {
	t.Run("another request's failure between dispatch and success", func(t *testing.T) {
		shared, clock := state.NewMemStore(), manualclock.New(start)
		w := newWorker(t, acmePolicy(""), shared, clock, 1)
		var first, second Buffers
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		plan, err := w.e.Plan("m1", policies.APIOpenAI, affinity.Key{}, &first)
		if err != nil || !w.e.stillClean(plan.Targets[0].clean) {
			t.Fatalf("plan on clean state: %v, first target clean=%v", err, plan.Targets[0].clean)
		}
		d1, err := w.e.Dispatch(plan.Targets[0]) // acme-a/m1, answered last
		if err != nil {
			t.Fatal(err)
		}
		// A second request on the same worker, planned in the same epoch, fails on acme-a with
		// a server error and gives up (its client went away): no refresh follows the write.
		plan2, err := w.e.Plan("m1", policies.APIOpenAI, affinity.Key{}, &second)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := w.e.Dispatch(plan2.Targets[0])
		if err != nil {
			t.Fatal(err)
		}
		if r := w.e.Finish(d2, Outcome{Status: 500, Body: []byte(`internal error`)}, &plan2); r.Errors != nil {
			t.Fatal(r.Errors)
		}
		acme := w.e.providers[0].breaker
		if st, _ := breaker.New(shared, clock).Status(acme); st.Failures != 1 {
			t.Fatalf("breaker failures after the 500: %d, want 1", st.Failures)
		}
		// The first request's success resets the breaker's count of failures in a row.
		if r := w.e.Finish(d1, Outcome{Status: 200}, &plan); r.Errors != nil {
			t.Fatal(r.Errors)
		}
		if st, _ := breaker.New(shared, clock).Status(acme); st.Failures != 0 {
			t.Fatalf("breaker failures after the first request's success: %d, want 0 (the success was skipped)", st.Failures)
		}
	})
	t.Run("a failure only the request keeps", func(t *testing.T) {
		w := newWorker(t, acmePolicy("resilience: {modelLockout: {enabled: false}}"), state.NewMemStore(),
			manualclock.New(start), 1)
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		plan, err := w.e.Plan("m1", policies.APIOpenAI, affinity.Key{}, &w.buf)
		if err != nil || len(plan.Targets) < 2 || plan.Targets[1].Model != "m2" || !w.e.stillClean(plan.Targets[1].clean) {
			t.Fatalf("plan on clean state: %v %v", err, plan.Targets)
		}
		d, err := w.e.Dispatch(plan.Targets[0])
		if err != nil {
			t.Fatal(err)
		}
		// A 404 that does not name the model: perhaps the connection's (a wrong base URL),
		// so the request moves off the connection, though no layer records it.
		notFound := Outcome{Status: 404, Body: []byte(`404 page not found`)}
		if r := w.e.Finish(d, notFound, &plan); !r.RequestOnly {
			t.Fatalf("the 404 was recorded somewhere (%+v): the case needs a failure only the request keeps", r)
		}
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		if !w.e.stillClean(plan.Targets[1].clean) {
			t.Fatal("the epoch moved: the case needs acme-a/m2's clean mark to stand")
		}
		_, err = w.e.Dispatch(plan.Targets[1]) // acme-a under m2
		assertExcluded(t, err, "acme-a", combo.ReasonUnavailable)
	})
}

// Attempts are sampled for latency when a p2c route weighs latency, and p2c then prefers
// the faster connection; without a latency weight nothing reads the samples, so none are
// kept.
func TestLatencySamplesOnlyWhenRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weight  int  // resilience.p2cLatency.weight
		sampled bool // attempts are sampled
	}{
		{name: "weighted", weight: 20, sampled: true},
		{name: "off", weight: 0, sampled: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(fmt.Sprintf("resilience: {p2cLatency: {weight: %d}}", tc.weight)))
			fast, slow := f.target(t, "acme", "acme-a", "m1"), f.target(t, "backup", "backup-a", "m1")
			for i := 0; i < 5; i++ {
				for _, a := range []struct {
					tg   Target
					ttfb time.Duration
				}{{fast, 10 * time.Millisecond}, {slow, 2 * time.Second}} {
					d, err := f.e.Dispatch(a.tg)
					if err != nil {
						t.Fatal(err)
					}
					f.e.Finish(d, Outcome{Status: 200, TTFB: a.ttfb}, nil)
				}
			}
			if got := f.e.latency.Tracked() > 0; got != tc.sampled {
				t.Fatalf("samples kept: %v, want %v", got, tc.sampled)
			}
			fastFirst := 0
			for i := 0; i < 200; i++ {
				if p := f.plan(t, "pair", affinity.Key{}); p.Targets[0] == (Target{Provider: fast.Provider,
					Connection: fast.Connection, Model: "m1", req: &f.buf}) {
					fastFirst++
				}
			}
			if tc.sampled && fastFirst != 200 {
				t.Fatalf("p2c put the faster connection first in %d of 200 plans, want all", fastFirst)
			}
			if !tc.sampled && (fastFirst < 50 || fastFirst > 150) {
				t.Fatalf("p2c without a latency weight put one connection first in %d of 200 plans: it must not see latency", fastFirst)
			}
		})
	}
}

// Engine.Route answers as policies.Resolved.Route does, whatever was asked before it.
func TestRouteAnswersAsThePolicy(t *testing.T) {
	f := newFixture(t, examples.Demo())
	for _, model := range []string{"gpt-4o", "gpt-4o", "claude-3-opus", "nope", "gpt-4o", "claude-3-haiku", "gpt-4o-mini", "nope", "nope"} {
		got, gotOK := f.e.Route(model)
		want, wantOK := f.e.res.Route(model)
		if got != want || gotOK != wantOK {
			t.Fatalf("Route(%q) = %v %v, want %v %v", model, got, gotOK, want, wantOK)
		}
		if p, err := f.e.Plan(model, f.apiOf(model), affinity.Key{}, &f.buf); wantOK != (err == nil) ||
			(wantOK && &f.e.res.Routes[p.Route] != want) {
			t.Fatalf("Plan(%q) after Route: route %d, %v; want %v", model, p.Route, err, want)
		}
	}
}

// A priority route whose candidates are all vouched clean is planned without the selector
// (planInOrder); the plan is the one the full path makes, and a candidate that stops being
// clean sends the route back to the full path.
func TestInOrderPlanIsTheFullPlan(t *testing.T) {
	clock := manualclock.New(start)
	shared := state.NewMemStore()
	fast := newWorker(t, examples.Demo(), shared, clock, 1)
	full := newWorker(t, examples.Demo(), shared, clock, 1)
	for i := range full.e.routes {
		full.e.routes[i].inOrder = false
	}
	ri, _ := fast.e.route("gpt-4o")
	if !fast.e.routes[ri].inOrder {
		t.Fatal("the demo's gpt-4o route (priority) does not plan in order")
	}
	plan := func(w *worker) (Plan, bool) {
		t.Helper()
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		inOrder := w.e.planInOrder(&w.e.routes[ri], &Plan{Model: "gpt-4o", req: &Buffers{}}, w.e.epoch())
		p, err := w.e.Plan("gpt-4o", policies.APIOpenAI, affinity.Key{}, &w.buf)
		if err != nil {
			t.Fatal(err)
		}
		return p, inOrder
	}
	same := func(step string) bool {
		t.Helper()
		pf, inOrder := plan(fast)
		pu, _ := plan(full)
		show := func(p Plan) string {
			var b strings.Builder
			for _, t := range p.Targets {
				fmt.Fprintf(&b, "%d/%d/%s clean=%v ", t.Provider, t.Connection, t.Model, t.clean != 0)
			}
			return fmt.Sprint(b.String(), p.Excluded, p.Pinned, p.Degraded)
		}
		if got, want := show(pf), show(pu); got != want {
			t.Fatalf("%s: in-order plan %s, full plan %s", step, got, want)
		}
		if len(pf.Targets) > 0 && pf.Targets[0].req != &fast.buf {
			t.Fatalf("%s: the plan's targets do not carry the request's memory", step)
		}
		return inOrder
	}
	if same("cold cache") {
		t.Fatal("planned in order before any memo vouched")
	}
	if !same("warm cache") {
		t.Fatal("a clean route did not plan in order")
	}
	// openai-a's key fails: its connection cools down, the memos no longer vouch.
	d, err := fast.e.Dispatch(Target{Provider: 0, Connection: 0, Model: "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	fast.e.Finish(d, Outcome{Status: 401, Body: []byte(`{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`)}, nil)
	if same("after a failure") {
		t.Fatal("planned in order with a connection cooling down")
	}
}
