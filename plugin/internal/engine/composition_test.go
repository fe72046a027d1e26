package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// acmePolicy is a two-provider policy for the composition tests: acme-a serves m1 and, as a
// second target, m2 (the same connection under another model); acme-b has a cap of 1 with a
// 2 s queue budget; backup-a is the other provider. Its resilience block is the argument.
func acmePolicy(resilience string) []byte {
	return []byte(`
providers:
  - id: acme
    profile: apikey
    cluster: acme
    connections:
      - id: acme-a
        credential: {header: authorization, value: "Bearer a"}
      - id: acme-b
        credential: {header: authorization, value: "Bearer b"}
        maxConcurrent: 1
        rateLimitOverrides: {maxWaitMs: 2000}
  - id: backup
    profile: apikey
    cluster: backup
    connections:
      - id: backup-a
        credential: {header: authorization, value: "Bearer c"}
routes:
  - model: m1
    targets:
      - {provider: acme, connection: acme-a, model: m1}
      - {provider: acme, connection: acme-a, model: m2}
      - {provider: acme, connection: acme-b, model: m1}
      - {provider: backup, model: m1}
  - model: spread
    strategy: least-used
    targets:
      - {provider: acme, connection: acme-a, model: m1}
      - {provider: backup, model: m1}
  - model: pair
    strategy: p2c
    targets:
      - {provider: acme, connection: acme-a, model: m1}
      - {provider: backup, model: m1}
  - model: acme-only
    targets:
      - {provider: acme, connection: acme-a, model: m1}
      - {provider: acme, connection: acme-b, model: m1}
` + resilience)
}

// peer is a second worker: an engine over the same shared store and clock.
func (f *fixture) peer(t testing.TB, yaml []byte) *Engine {
	t.Helper()
	p, err := policyfile.Parse(yaml, policies.ParseOptions{LookupEnv: func(name string) (string, bool) {
		return "test-value-of-" + name, true // newFixture's credentials: a worker of the same policy
	}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(p, f.store, f.clock, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// target names a configured connection of the fixture's policy by ids.
func (f *fixture) target(t testing.TB, provider, connection, model string) Target {
	t.Helper()
	pv, cn, ok := f.e.res.Connection(connection)
	if !ok || pv.ID != provider {
		t.Fatalf("no connection %s/%s", provider, connection)
	}
	return Target{Provider: pv.Index, Connection: cn.Index, Model: model}
}

// failOn records o for a hand-made attempt on t in e (another worker's failure).
func failOn(t testing.TB, e *Engine, tg Target, o Outcome) {
	t.Helper()
	if r := e.Record(Dispatch{Target: tg, Started: e.now()}, o, nil); r.Errors != nil {
		t.Fatal(r.Errors)
	}
}

var (
	rateLimited = Outcome{Status: 429, Headers: [][2]string{{"retry-after", "20"}},
		Body: []byte(`{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`)}
	creditsGone = Outcome{Status: 400,
		Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}`)}
	overloaded = Outcome{Status: 503, Body: []byte(`upstream overloaded`)}
)

// A target planned before another worker excluded it must not be dispatched: Dispatch
// re-checks every layer, not only the breaker.
func TestDispatchRechecksEveryLayer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resilience string       // the policy's resilience block
		fail       Outcome      // what the other worker records on acme-a
		dispatch   string       // the connection dispatched afterwards
		want       combo.Reason // the exclusion Dispatch must report
	}{
		{name: "cooled", resilience: "", fail: rateLimited, dispatch: "acme-a", want: combo.ReasonUnavailable},
		{name: "terminal", resilience: "", fail: creditsGone, dispatch: "acme-a", want: combo.ReasonTerminal},
		{name: "model locked", resilience: "resilience: {modelLockout: {enabled: true}}\n", fail: rateLimited,
			dispatch: "acme-a", want: combo.ReasonModelLockout},
		{name: "provider cooldown gate", resilience: "resilience: {providerCooldown: {enabled: true, apikey: {providerFailureThreshold: 1}}}\n",
			fail: overloaded, dispatch: "acme-b", want: combo.ReasonProviderCooldown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := acmePolicy(tc.resilience)
			f := newFixture(t, yaml)
			plan := f.plan(t, "m1", affinity.Key{})
			var tg Target
			for _, pt := range plan.Targets {
				if f.e.res.Providers[pt.Provider].Connections[pt.Connection].ID == tc.dispatch && pt.Model == "m1" {
					tg = pt
				}
			}
			failOn(t, f.peer(t, yaml), f.target(t, "acme", "acme-a", "m1"), tc.fail)
			d, err := f.e.Dispatch(tg)
			if !errors.Is(err, ErrTargetUnavailable) {
				t.Fatalf("dispatch after the other worker's failure: %v (waiting=%v), want the target excluded", err, d.Waiting)
			}
			assertExcluded(t, err, tc.dispatch, tc.want)
		})
	}
}

// assertExcluded checks that err is an *ExcludedError for connection with reason.
func assertExcluded(t *testing.T, err error, connection string, reason combo.Reason) {
	t.Helper()
	var x *ExcludedError
	if !errors.As(err, &x) {
		t.Fatalf("%v is not an *ExcludedError", err)
	}
	if x.Exclusion.Connection != connection || x.Exclusion.Reason != reason {
		t.Fatalf("exclusion %+v, want %s excluded for %s", x.Exclusion, connection, reason)
	}
}

// A request waiting in a connection's queue leaves it when the connection cools or its
// provider's circuit opens meanwhile, instead of being granted a slot on a call bound to
// fail.
func TestQueuedRequestLeavesAnExcludedConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exclude func(t *testing.T, f *fixture, peer *Engine, b Target) // another worker's doing
		want    combo.Reason                                           // the exclusion TryDispatch reports
		granted bool                                                   // the held slot is freed before the retry
	}{
		{name: "cooled", want: combo.ReasonUnavailable, granted: true,
			exclude: func(t *testing.T, f *fixture, peer *Engine, b Target) { failOn(t, peer, b, rateLimited) }},
		{name: "circuit opened", want: combo.ReasonCircuitOpen,
			exclude: func(t *testing.T, f *fixture, peer *Engine, b Target) {
				for i := 0; i < 12; i++ {
					if _, err := peer.breakers.RecordKind(peer.providers[b.Provider].breaker, breaker.KindServerError, breaker.Attempt{}); err != nil {
						t.Fatal(err)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := acmePolicy("")
			f := newFixture(t, yaml)
			b := f.target(t, "acme", "acme-b", "m1") // maxConcurrent 1
			held, err := f.e.Dispatch(b)
			if err != nil || held.Waiting {
				t.Fatalf("first: %v waiting=%v", err, held.Waiting)
			}
			queued, err := f.e.Dispatch(b)
			if err != nil || !queued.Waiting {
				t.Fatalf("second: %v waiting=%v, want queued", err, queued.Waiting)
			}
			f.clock.Advance(time.Second)
			tc.exclude(t, f, f.peer(t, yaml), b)
			if tc.granted {
				// The held request, sent before the failure, succeeds: it says nothing about
				// the connection after the failure, and frees the slot the queued one waits for.
				f.e.Finish(held, Outcome{Status: 200}, nil)
			}
			queued, err = f.e.TryDispatch(queued)
			if !errors.Is(err, ErrTargetUnavailable) {
				t.Fatalf("queued request on an excluded connection: %v waiting=%v, want excluded", err, queued.Waiting)
			}
			assertExcluded(t, err, "acme-b", tc.want)
			if queued.Waiting {
				t.Fatal("the excluded request still counts as waiting")
			}
			if u, err := f.e.admitter.Inspect(f.e.providers[b.Provider].conns[b.Connection].admit, "m1"); err != nil || u.Queued != 0 {
				t.Fatalf("queue after the exclusion: %+v %v, want the ticket gone", u, err)
			}
		})
	}
}

// Same-request failover skips the connection that just failed, whatever model the next
// target asks it for: a model lockout spares the connection's other models for other
// requests, not for the request that saw it fail.
func TestFailoverSkipsTheConnectionThatJustFailed(t *testing.T) {
	f := newFixture(t, acmePolicy("resilience: {modelLockout: {enabled: true}}\n"))
	plan := f.plan(t, "m1", affinity.Key{})
	if got := f.names(plan); len(got) != 4 || got[0] != "acme/acme-a/m1" || got[1] != "acme/acme-a/m2" {
		t.Fatalf("plan %v", got)
	}
	d, err := f.e.Dispatch(plan.Targets[0])
	if err != nil {
		t.Fatal(err)
	}
	if r := f.e.Finish(d, overloaded, &plan); !r.Verdict.Fallback {
		t.Fatalf("verdict %+v", r.Verdict) // 503: the exact model is locked, the connection is not cooled
	}
	_, err = f.e.Dispatch(plan.Targets[1]) // acme-a again, for m2
	if !errors.Is(err, ErrTargetUnavailable) {
		t.Fatalf("failover to the connection that just failed: %v, want it skipped", err)
	}
	assertExcluded(t, err, "acme-a", combo.ReasonUnavailable)
	if _, err := f.e.Dispatch(plan.Targets[2]); err != nil {
		t.Fatalf("failover to acme-b: %v", err)
	}
	// Another request still gets acme-a for m2: only the failing request skipped it.
	other := f.plan(t, "m1", affinity.Key{})
	if got := f.names(other); len(got) == 0 || got[0] != "acme/acme-a/m2" {
		t.Fatalf("next request: %v (excluded %v), want acme-a for m2 first", got, other.Excluded)
	}
	if _, err := f.e.Dispatch(other.Targets[0]); err != nil {
		t.Fatalf("next request on acme-a for m2: %v", err)
	}
}

// A stream stall records the error on the connection without cooling it and never counts
// for the breaker (guide §2 "Stilstanden in stream-content koelen het account niet af"),
// unless streamStallCooldown is on.
func TestStallIsRecordedWithoutCooldownOrBreaker(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resilience string // the policy's resilience block
		cooled     bool   // the stall cools the connection
	}{
		{name: "default", cooled: false},
		{name: "streamStallCooldown on", resilience: "resilience: {connectionCooldown: {streamStallCooldown: {enabled: true}}}\n", cooled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(tc.resilience))
			a := f.target(t, "acme", "acme-a", "m1")
			pv := &f.e.providers[a.Provider]
			for i := 0; i < 12; i++ { // as many stalls as open the apikey breaker
				d, err := f.e.Dispatch(a)
				if err != nil && !tc.cooled {
					t.Fatalf("stall %d: %v", i, err)
				}
				if err != nil {
					break
				}
				if r := f.e.RecordStall(d); r.Errors != nil {
					t.Fatal(r.Errors)
				}
				if _, err := f.e.Release(d); err != nil {
					t.Fatal(err)
				}
			}
			if st, _ := f.e.breakers.Status(pv.breaker); st.Failures != 0 || st.State != breaker.Closed {
				t.Fatalf("breaker after stalls: %+v, want untouched", st)
			}
			snap, err := pv.cooldown.Inspect(pv.conns[a.Connection].cooldown)
			if err != nil {
				t.Fatal(err)
			}
			if snap.LastErrorType != "stream_stall" {
				t.Fatalf("connection's last error %q, want stream_stall recorded", snap.LastErrorType)
			}
			if cooled := snap.Status != conncooldown.StatusAvailable; cooled != tc.cooled {
				t.Fatalf("connection status %s, want cooled=%v", snap.Status, tc.cooled)
			}
		})
	}
}

// least-used and p2c see the requests in flight on connections without a cap: the
// worker's own count, kept in memory by Dispatch and Release.
func TestLoadAwareStrategiesSeeUncappedLoad(t *testing.T) {
	for _, route := range []string{"spread", "pair"} {
		t.Run(route, func(t *testing.T) {
			f := newFixture(t, acmePolicy(""))
			busy := f.target(t, "acme", "acme-a", "m1")
			var held []Dispatch
			for i := 0; i < 3; i++ {
				d, err := f.e.Dispatch(busy)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, d)
			}
			for i := 0; i < 20; i++ {
				p := f.plan(t, route, affinity.Key{})
				if got := f.names(p); got[0] != "backup/backup-a/m1" {
					t.Fatalf("plan %d with 3 requests on acme-a: %v, want the idle backup-a first", i, got)
				}
			}
			for _, d := range held {
				f.e.Finish(d, Outcome{Status: 200}, nil)
			}
			first := map[string]bool{}
			for i := 0; i < 40; i++ {
				first[f.names(f.plan(t, route, affinity.Key{}))[0]] = true
			}
			if len(first) != 2 {
				t.Fatalf("with no load both connections should lead sometimes, got %v", first)
			}
		})
	}
}

// A request that loses the HALF_OPEN probe race to another worker is told the circuit is
// open (503 provider_circuit_open, Retry-After about a second), not 404.
func TestLosingTheProbeRaceAnswersCircuitOpen(t *testing.T) {
	yaml := acmePolicy("")
	f := newFixture(t, yaml)
	pv := &f.e.providers[0]
	for i := 0; i < 12; i++ {
		if _, err := f.e.breakers.RecordKind(pv.breaker, breaker.KindServerError, breaker.Attempt{}); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(31 * time.Second) // HALF_OPEN, no probe yet: both targets plan
	plan := f.plan(t, "acme-only", affinity.Key{})
	if len(plan.Targets) != 2 {
		t.Fatalf("HALF_OPEN plan %v excluded %v", f.names(plan), plan.Excluded)
	}
	peer := f.peer(t, yaml)
	if d, err := peer.Dispatch(f.target(t, "acme", "acme-a", "m1")); err != nil || !d.probe.Probe {
		t.Fatalf("other worker's probe: %v", err)
	}
	for _, tg := range plan.Targets {
		if _, err := f.e.Dispatch(tg); !errors.Is(err, ErrTargetUnavailable) {
			t.Fatalf("dispatch during the other worker's probe: %v", err)
		}
	}
	dec := f.e.AllExcluded(&plan, combo.Progress{})
	reply, ok := dec.Reply("acme-only", plan.Excluded)
	if !ok || reply.Status != 503 || !hasHeader(reply.Headers, "retry-after", "1") ||
		!strings.Contains(string(reply.Body), `"code":"provider_circuit_open"`) {
		t.Fatalf("decision %+v reply %d %s %v, want 503 provider_circuit_open with Retry-After 1", dec, reply.Status, reply.Body, reply.Headers)
	}
}

func hasHeader(hdrs [][2]string, name, value string) bool {
	for _, kv := range hdrs {
		if kv[0] == name && kv[1] == value {
			return true
		}
	}
	return false
}

// An operator rule with scope: provider blames the provider (its breaker), as declared, and
// leaves the connection alone.
func TestProviderScopedRuleBlamesTheBreaker(t *testing.T) {
	f := newFixture(t, acmePolicy(`resilience:
  providerErrorRules:
    - {id: pool-down, provider: acme, status: 400, textMarkers: ["upstream pool down"], reason: server_error, scope: provider}
`))
	a := f.target(t, "acme", "acme-a", "m1")
	pv := &f.e.providers[a.Provider]
	plan := f.plan(t, "m1", affinity.Key{})
	d, err := f.e.Dispatch(plan.Targets[0])
	if err != nil {
		t.Fatal(err)
	}
	r := f.e.Finish(d, Outcome{Status: 400, Body: []byte(`{"error":{"message":"upstream pool down"}}`)}, &plan)
	if r.Verdict.RuleID != "pool-down" {
		t.Fatalf("verdict %+v, want the operator rule", r.Verdict)
	}
	if st, _ := f.e.breakers.Status(pv.breaker); st.Failures != 1 {
		t.Fatalf("breaker %+v, want the provider blamed once", st)
	}
	if av, _ := pv.cooldown.Check(pv.conns[a.Connection].cooldown); !av.Available() {
		t.Fatalf("connection %+v cooled by a provider-scoped rule", av)
	}
	// The request fails over past the provider it blamed: acme-b is skipped, backup goes.
	for _, tg := range plan.Targets[1:] {
		_, err := f.e.Dispatch(tg)
		switch name := f.e.res.Providers[tg.Provider].ID; {
		case name == "acme" && !errors.Is(err, ErrTargetUnavailable):
			t.Fatalf("failover to %s/%d after a provider-scoped failure: %v, want it skipped", name, tg.Connection, err)
		case name == "backup" && err != nil:
			t.Fatalf("failover to backup: %v", err)
		}
	}
	// Another request still plans the provider's connections (its breaker decides).
	if next := f.plan(t, "m1", affinity.Key{}); len(next.Targets) != 4 {
		t.Fatalf("next request: %v excluded %v", f.names(next), next.Excluded)
	}
}

// A 404 (or 400) naming a missing model must not cool the connection when model lockout does
// not take it (guide, debugging: "only one model fails → model lockout, not connection
// cooldown"): a client probing model names through a glob route would take the connection
// out for every model.
func TestMissingModelDoesNotCoolTheConnection(t *testing.T) {
	notFound := Outcome{Status: 404, Body: []byte(`{"error":{"message":"The model 'm1' does not exist","code":"model_not_found"}}`)}
	badModel := Outcome{Status: 400, Body: []byte(`{"error":{"message":"invalid model: m1","type":"invalid_request_error"}}`)}
	for _, tc := range []struct {
		name       string
		resilience string  // the policy's resilience block
		outcome    Outcome // the failure on acme-a
	}{
		{name: "404, lockout off", outcome: notFound},
		{name: "400, lockout off", outcome: badModel},
		{name: "400, lockout on without 400 in errorCodes", resilience: "resilience: {modelLockout: {enabled: true}}\n", outcome: badModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(tc.resilience))
			a := f.target(t, "acme", "acme-a", "m1")
			pv := &f.e.providers[a.Provider]
			plan := f.plan(t, "m1", affinity.Key{})
			d, err := f.e.Dispatch(plan.Targets[0])
			if err != nil {
				t.Fatal(err)
			}
			r := f.e.Finish(d, tc.outcome, &plan)
			if r.Verdict.Reason != "not_found" {
				t.Fatalf("verdict %+v", r.Verdict)
			}
			if av, _ := pv.cooldown.Check(pv.conns[a.Connection].cooldown); !av.Available() {
				t.Fatalf("connection %+v cooled for a missing model", av)
			}
			next := f.plan(t, "m1", affinity.Key{})
			if got := f.names(next); len(got) != 4 {
				t.Fatalf("next request: %v excluded %v, want every target", got, next.Excluded)
			}
		})
	}
}

// The success path on clean state writes no shared data, and once the per-VM cache is warm a
// request reads nothing but the cache's generation key (and the live records its strategy
// needs): re-checking targets at dispatch reads nothing the plan did not.
func TestSuccessPathSharedDataBudget(t *testing.T) {
	for _, tc := range []struct {
		route string // the route requested
		reads int    // shared-data reads of a request on a warm cache: the generation key only
	}{
		{route: "m1", reads: 1},
		{route: "spread", reads: 1}, // least-used without caps reads no admission record
		{route: "pair", reads: 1},   // nor does p2c
	} {
		t.Run(tc.route, func(t *testing.T) {
			p, err := policyfile.Parse(acmePolicy(""), policies.ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			shared := testfixture.NewStore()
			cache := state.NewCache(shared, state.IsLive)
			clock := manualclock.New(start)
			e, err := New(p, cache, clock, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var buf Buffers
			request := func() (gets, sets int) {
				g0, s0 := shared.Gets, shared.Sets
				if err := cache.Refresh(); err != nil {
					t.Fatal(err)
				}
				plan, err := e.Plan(tc.route, policies.APIOpenAI, affinity.Key{}, &buf)
				if err != nil || len(plan.Targets) == 0 {
					t.Fatalf("plan: %v %v", err, plan.Excluded)
				}
				d, err := e.Dispatch(plan.Targets[0])
				if err != nil || d.Waiting {
					t.Fatalf("dispatch: %v", err)
				}
				if r := e.Finish(d, Outcome{Status: 200, TTFB: time.Millisecond}, &plan); r.Errors != nil {
					t.Fatal(r.Errors)
				}
				return shared.Gets - g0, shared.Sets - s0
			}
			request() // warms the cache
			for i := 0; i < 3; i++ {
				gets, sets := request()
				if sets != 0 {
					t.Fatalf("request %d wrote shared data %d times on clean state", i, sets)
				}
				if gets != tc.reads {
					t.Fatalf("request %d read shared data %d times on a warm cache, want %d", i, gets, tc.reads)
				}
			}
		})
	}
}

// With resilience.quotaShareConcurrencyLimit on, a connection's cap is fail-open (guide §4
// "Serialisatie van quota-share-requests"): a request whose wait for a slot ends — queue
// full or wait budget spent — is dispatched without a slot instead of refused. Off (the
// default) the request queue's codes answer (guide §5).
func TestQuotaShareFailOpen(t *testing.T) {
	for _, tc := range []struct {
		name        string
		resilience  string // the policy's resilience block
		wantFull    error  // Dispatch with the queue full (nil: dispatched without a slot)
		wantTimeout error  // TryDispatch past the wait budget (nil: dispatched without a slot)
	}{
		{name: "off", resilience: "resilience: {requestQueue: {maxQueueDepth: 1}}\n",
			wantFull: admission.ErrQueueFull, wantTimeout: admission.ErrQueueTimeout},
		{name: "on", resilience: "resilience: {requestQueue: {maxQueueDepth: 1}, quotaShareConcurrencyLimit: {enabled: true}}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(tc.resilience))
			b := f.target(t, "acme", "acme-b", "m1") // maxConcurrent 1, maxWaitMs 2000
			cn := &f.e.providers[b.Provider].conns[b.Connection]
			held, err := f.e.Dispatch(b)
			if err != nil || held.Waiting || held.FailedOpen || !held.Lease.Held() {
				t.Fatalf("first: %+v %v", held, err)
			}
			queued, err := f.e.Dispatch(b)
			if err != nil || !queued.Waiting {
				t.Fatalf("second: %v waiting=%v, want queued", err, queued.Waiting)
			}
			var open []Dispatch
			check := func(what string, d Dispatch, err, want error) {
				t.Helper()
				if want != nil {
					if !errors.Is(err, want) {
						t.Fatalf("%s: %v, want %v", what, err, want)
					}
					return
				}
				if err != nil || d.Waiting || !d.FailedOpen || d.Lease.Held() {
					t.Fatalf("%s: %+v %v, want dispatched without a slot", what, d, err)
				}
				open = append(open, d)
			}
			third, err := f.e.Dispatch(b)
			check("queue full", third, err, tc.wantFull)
			f.clock.Advance(3 * time.Second)
			late, err := f.e.TryDispatch(queued)
			check("wait budget spent", late, err, tc.wantTimeout)
			if cn.unleased != len(open) {
				t.Fatalf("%d attempts without a slot counted in memory, want %d", cn.unleased, len(open))
			}
			for _, d := range open {
				f.e.Finish(d, Outcome{Status: 200}, nil)
			}
			if u, err := f.e.admitter.Inspect(cn.admit, "m1"); err != nil || u.InFlight != 1 || cn.unleased != 0 {
				t.Fatalf("after the fail-open attempts: %+v %v, %d unleased; want only the first request's slot", u, err, cn.unleased)
			}
		})
	}
}

// TestConfiguredTripStatusesReachClassification: providerBreaker.tripStatuses decides which
// statuses count against the breaker (guide §1), added ones included: with 529 listed,
// twelve Anthropic 529s open the apikey breaker; with the default list they do not.
func TestConfiguredTripStatusesReachClassification(t *testing.T) {
	base := `
providers:
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
` + func() string {
		var b strings.Builder
		for i := 0; i < 12; i++ {
			fmt.Fprintf(&b, "      - {id: k%d, credential: {header: x-api-key, value: k%d}}\n", i, i)
		}
		return b.String()
	}() + `
routes:
  - model: "claude-*"
    targets: [{provider: anthropic}]
`
	overloaded := Outcome{Status: 529, Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}
	for _, c := range []struct {
		name  string // the policy's trip statuses
		extra string // appended policy
		open  bool   // twelve 529s open the breaker
	}{
		{"default list", "", false},
		{"529 added", "resilience:\n  providerBreaker:\n    tripStatuses: [408, 500, 502, 503, 504, 529]\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, []byte(base+c.extra))
			pv := &f.e.providers[0]
			for i := 0; i < 12; i++ {
				failOn(t, f.e, Target{Provider: 0, Connection: i, Model: "claude-sonnet-4"}, overloaded)
			}
			st, err := f.e.breakers.Status(pv.breaker)
			if err != nil {
				t.Fatal(err)
			}
			if open := st.State == breaker.Open; open != c.open {
				t.Fatalf("after twelve 529s the breaker is %v, want open=%v", st.State, c.open)
			}
		})
	}
}

// TestComboWaitsOnlyForRateLimitClassLocks: comboCooldownWait waits where the guide waits
// (§4 "Cooldown-bewuste retry voor combo's": a request that would answer a 429 waits a
// SHORT transient cooldown out, "nooit ... op quota_exhausted (vergrendeld tot middernacht)
// of op auth-/not-found-redenen"), and never on a breaker, a probe in flight or a 5xx
// (issue 8): each row sets one layer's lock on the only target, the next request's plan
// excludes it, and AllExcluded must wait only for the rate-limit class.
func TestComboWaitsOnlyForRateLimitClassLocks(t *testing.T) {
	single := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
routes:
  - model: gpt-4o
    targets: [{provider: openai}]
`
	lockoutOn := "resilience: {modelLockout: {enabled: true}}\n"
	serverError := Outcome{Status: 500, Body: []byte(`{"error":{"message":"internal","type":"server_error"}}`)}
	overloaded529 := Outcome{Status: 529, Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}
	busy := Outcome{Status: 429, Body: []byte(`{"error":{"message":"Too many concurrent requests for this account"}}`)}
	revoked := Outcome{Status: 401, Body: []byte(`{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`)}
	dailyQuota := Outcome{Status: 429, Body: []byte(`{"error":{"message":"You have reached your daily request limit for this model."}}`)}
	notFound := Outcome{Status: 404, Body: []byte(`{"error":{"message":"The model 'gpt-4o' does not exist","code":"model_not_found"}}`)}
	tg := Target{Provider: 0, Connection: 0, Model: "gpt-4o"}
	fail := func(o Outcome) func(*testing.T, *fixture) {
		return func(t *testing.T, f *fixture) { failOn(t, f.e, tg, o) }
	}
	openBreaker := func(t *testing.T, f *fixture) {
		for i := 0; i < 12; i++ { // apikey: OPEN at 12 provider-level failures
			if _, err := f.e.breakers.RecordKind(f.e.providers[0].breaker, breaker.KindServerError, breaker.Attempt{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name       string                     // the lock on the only target
		resilience string                     // the policy's resilience block
		lock       func(*testing.T, *fixture) // sets it (in this worker, or a peer)
		reason     combo.Reason               // the plan's exclusion
		retryAfter time.Duration              // the exclusion's time left (0: not checked)
		want       combo.Outcome              // what AllExcluded decides
	}{
		{"connection: rate limit, Retry-After 20", "", fail(rateLimited), combo.ReasonUnavailable, 20 * time.Second, combo.OutcomeWait},
		{"connection: concurrency limit, the fixed 1 s", "", fail(busy), combo.ReasonUnavailable, time.Second, combo.OutcomeWait},
		{"connection: server error", "", fail(serverError), combo.ReasonUnavailable, 3 * time.Second, combo.OutcomeCoolingDown},
		{"connection: overloaded model (529)", "", fail(overloaded529), combo.ReasonUnavailable, 3 * time.Second, combo.OutcomeCoolingDown},
		{"connection: revoked key (401)", "", fail(revoked), combo.ReasonUnavailable, 3 * time.Second, combo.OutcomeCoolingDown},
		{"connection: daily quota until UTC midnight", "", fail(dailyQuota), combo.ReasonUnavailable, 12 * time.Hour, combo.OutcomeCoolingDown},
		{"connection: credits exhausted (terminal)", "", fail(creditsGone), combo.ReasonTerminal, 0, combo.OutcomeNoExecutableTargets},
		{"breaker OPEN", "", openBreaker, combo.ReasonCircuitOpen, 30 * time.Second, combo.OutcomeCircuitOpen},
		// guide §1: a request meeting another worker's HALF_OPEN probe comes back in about a
		// second, not after the probe's 60 s timeout, and is not held for it either.
		{"breaker HALF_OPEN, another worker's probe in flight", "", func(t *testing.T, f *fixture) {
			openBreaker(t, f)
			f.clock.Advance(30 * time.Second)
			if d, err := f.peer(t, []byte(single)).Dispatch(tg); err != nil || !d.probe.Probe {
				t.Fatalf("the peer's probe: %+v %v", d, err)
			}
		}, combo.ReasonCircuitOpen, probeRetryAfter, combo.OutcomeCircuitOpen},
		{"model lockout: rate limit, locked for its 20 s hint", lockoutOn, fail(rateLimited), combo.ReasonModelLockout, 20 * time.Second, combo.OutcomeWait},
		{"model lockout on: a concurrency limit still cools the connection 1 s", lockoutOn, fail(busy), combo.ReasonUnavailable, time.Second, combo.OutcomeWait},
		{"model lockout: server error (503)", lockoutOn, fail(overloaded), combo.ReasonModelLockout, 120 * time.Second, combo.OutcomeCoolingDown},
		{"model lockout: not found", lockoutOn, fail(notFound), combo.ReasonModelLockout, 120 * time.Second, combo.OutcomeCoolingDown},
		{"model lockout: daily quota until UTC midnight", lockoutOn, fail(dailyQuota), combo.ReasonModelLockout, 12 * time.Hour, combo.OutcomeCoolingDown},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, []byte(single+c.resilience))
			c.lock(t, f)
			p := f.plan(t, "gpt-4o", affinity.Key{})
			if len(p.Targets) != 0 || len(p.Excluded) != 1 {
				t.Fatalf("plan %v excluded %+v, want the only target excluded", f.names(p), p.Excluded)
			}
			x := p.Excluded[0]
			if x.Reason != c.reason || (c.retryAfter != 0 && x.RetryAfter != c.retryAfter) {
				t.Fatalf("exclusion %+v, want %s for %v", x, c.reason, c.retryAfter)
			}
			d := f.e.AllExcluded(&p, combo.Progress{})
			if d.Outcome != c.want {
				t.Fatalf("decision %+v, want outcome %v", d, c.want)
			}
			if waits := c.want == combo.OutcomeWait; x.Transient != waits || (waits && d.Wait != x.RetryAfter) {
				t.Fatalf("exclusion %+v decision %+v: transient must be exactly the waited-out locks", x, d)
			}
			if c.want != combo.OutcomeWait && c.retryAfter != 0 && d.RetryAfter != c.retryAfter {
				t.Fatalf("decision %+v, want Retry-After %v", d, c.retryAfter)
			}
		})
	}
}

// TestProviderErrorsTheGuideLeavesOpen drives issue 19's provider errors through the engine
// (classified the way OmniRoute 3.7.9 does; the guide is silent): what the connection is left
// in (active, cooling for how long, terminal), whether the request falls back, whether the
// same request skips the connection afterwards, and whether the next request may use it.
func TestProviderErrorsTheGuideLeavesOpen(t *testing.T) {
	body := func(message string) []byte { return []byte(`{"error":{"message":"` + message + `"}}`) }
	const lockoutOn = "resilience: {modelLockout: {enabled: true}}\n"
	for _, tc := range []struct {
		name       string
		resilience string              // the policy's resilience block
		outcome    Outcome             // acme-a's answer for m1
		fallback   bool                // the request may go on to another target
		status     conncooldown.Status // acme-a afterwards
		retryAfter time.Duration       // its cooldown, when cooling
		locked     time.Duration       // how long m1 is locked on acme-a (0 = not)
		skipped    bool                // the same request skips acme-a (for m2) afterwards
	}{
		{"429 Alibaba free tier: credits exhausted, terminal", "", Outcome{Status: 429, Body: body("The free tier of the model has been exhausted")},
			true, conncooldown.StatusCreditsExhausted, 0, 0, true},
		{"403 Alibaba free tier: credits exhausted, terminal", lockoutOn, Outcome{Status: 403, Body: body("The free tier of the model has been exhausted")},
			true, conncooldown.StatusCreditsExhausted, 0, 0, true},
		{"403 payment required: credits exhausted, terminal", "", Outcome{Status: 403, Body: body("payment required")},
			true, conncooldown.StatusCreditsExhausted, 0, 0, true},
		// The clock stands at 12:00 UTC: a daily quota without a reset lasts until midnight.
		{"429 daily rate limit: the connection cools until midnight", "", Outcome{Status: 429, Body: body("daily rate limit exceeded")},
			true, conncooldown.StatusUnavailable, 12 * time.Hour, 0, true},
		{"429 daily rate limit, lockout on: the model is locked until midnight", lockoutOn, Outcome{Status: 429, Body: body("daily rate limit exceeded")},
			true, conncooldown.StatusAvailable, 0, 12 * time.Hour, true},
		{"418 teapot: falls back, the apikey base cooldown of 3 s", "", Outcome{Status: 418, Body: body("teapot")},
			true, conncooldown.StatusUnavailable, 3 * time.Second, 0, true},
		{"418 teapot, lockout on (418 is not among its errorCodes): the connection cools", lockoutOn, Outcome{Status: 418, Body: body("teapot")},
			true, conncooldown.StatusUnavailable, 3 * time.Second, 0, true},
		{"403 not authorized for this route: no fallback, nothing cooled", "", Outcome{Status: 403, Body: body("not authorized for this route")},
			false, conncooldown.StatusAvailable, 0, 0, false},
		{"403 not authorized for this route, lockout on: nothing locked", lockoutOn, Outcome{Status: 403, Body: body("not authorized for this route")},
			false, conncooldown.StatusAvailable, 0, 0, false},
		{"Gemini 403 API not used in project: falls back, the connection stays active", "",
			Outcome{Status: 403, Body: body("Generative Language API has not been used in project 123 before or it is disabled")},
			true, conncooldown.StatusAvailable, 0, 0, true},
		{"Gemini 403 API not used in project, lockout on: nothing locked", lockoutOn,
			Outcome{Status: 403, Body: body("Generative Language API has not been used in project 123 before or it is disabled")},
			true, conncooldown.StatusAvailable, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(tc.resilience))
			a := f.target(t, "acme", "acme-a", "m1")
			pv := &f.e.providers[a.Provider]
			cn := &pv.conns[a.Connection]
			plan := f.plan(t, "m1", affinity.Key{})
			if got := f.names(plan); len(got) != 4 || got[0] != "acme/acme-a/m1" || got[1] != "acme/acme-a/m2" {
				t.Fatalf("plan %v", got)
			}
			r := f.attempt(t, plan, tc.outcome)
			if r.Verdict.Fallback != tc.fallback {
				t.Fatalf("fallback %v, want %v (%+v)", r.Verdict.Fallback, tc.fallback, r.Verdict)
			}
			av, err := pv.cooldown.Check(cn.cooldown)
			if err != nil || av.Status != tc.status || av.RetryAfter != tc.retryAfter {
				t.Fatalf("acme-a %+v (%v), want %s for %v", av, err, tc.status, tc.retryAfter)
			}
			lock, locked, _ := pv.lockout.Locked(cn.lockout, "m1")
			if left := lock.Until.Sub(f.clock.Now()); locked != (tc.locked > 0) || (locked && left != tc.locked) {
				t.Fatalf("m1 locked %v for %v, want %v", locked, left, tc.locked)
			}
			d, err := f.e.Dispatch(plan.Targets[1]) // the same request, acme-a for m2
			if skipped := errors.Is(err, ErrTargetUnavailable); skipped != tc.skipped {
				t.Fatalf("the same request on acme-a for m2: %v, want skipped=%v", err, tc.skipped)
			}
			if err == nil {
				f.e.Abandon(d)
			}
			// Another request may use acme-a exactly when nothing cooled it or made it terminal.
			next := f.plan(t, "m1", affinity.Key{})
			uses := false
			for _, n := range f.names(next) {
				uses = uses || strings.HasPrefix(n, "acme/acme-a/")
			}
			if want := tc.status == conncooldown.StatusAvailable; uses != want {
				t.Fatalf("next request %v (excluded %+v): uses acme-a %v, want %v", f.names(next), next.Excluded, uses, want)
			}
		})
	}
	// The unknown 4xx's cooldown never climbs: the same 3 s after each.
	f := newFixture(t, acmePolicy(""))
	a := f.target(t, "acme", "acme-a", "m1")
	pv := &f.e.providers[a.Provider]
	for i := range 3 {
		failOn(t, f.e, a, Outcome{Status: 418, Body: body("teapot")})
		if av, _ := pv.cooldown.Check(pv.conns[a.Connection].cooldown); av.RetryAfter != 3*time.Second {
			t.Fatalf("418 number %d: cooling %v, want the 3 s base again", i+1, av.RetryAfter)
		}
		f.clock.Advance(3 * time.Second)
	}
}
