package load

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/policies"
)

// The storm: one request fails on every connection of the stormy provider, which opens
// its breaker; then stormClients clients ask for its model every stormPace until each got a
// 200, while the breaker refuses them, lets one probe through (which fails and reopens it
// for twice as long), then another (which closes it).
const (
	stormProvider = "stormy"
	stormCluster  = "fake-storm"
	stormClients  = 4
	stormPace     = 20 * time.Millisecond
	// stormBase is the storm's first request number (the mix's stay below it).
	stormBase = 1 << 30
	// clockSlack is how much earlier than its OPEN period allows a probe may seem to
	// arrive: the breaker keeps time in whole milliseconds of the guest's clock, the fake
	// in the host's.
	clockSlack = 5 * time.Millisecond
)

// stormKind is what a storm request may get: the storm's 500 (from the fakes), Spillway's
// 503 provider_circuit_open, or the fake's 200.
var stormKind = kind{name: "storm", path: "/v1/chat/completions", model: "storm-model",
	statuses: []int{200, 500, 503}, providers: []string{stormProvider}, upstream: map[int]bool{500: true}}

// storm is the breaker scenario, run alongside the mix.
type storm struct {
	p    *proxy
	tg   target
	fake *fakeprovider.Server
	// failures opens the breaker (the provider's failureThreshold); open1 is its first
	// OPEN period, open2 the one after a failed probe (doubled, up to
	// maxBackoffMultiplier): the policy's breaker settings for the last failure's kind.
	failures     int
	open1, open2 time.Duration
	credentials  map[string]string // the provider's connections' credentials, as the fake sees them -> connection id

	mu       sync.Mutex
	outcomes []result    // by request number - stormBase
	times    []stormTime // by request number - stormBase
	errs     []string
	state    string // the breaker's state in the health right after the opening request
}

// stormTime is when a storm request was sent and answered, and what it got.
type stormTime struct {
	sent, answered time.Time
	status         int
	refused        bool // Spillway's 503 provider_circuit_open
}

// newStorm reads the stormy provider's breaker settings and scripts its fake: the opening
// request's failures and the first probe's.
func newStorm(t testing.TB, p *proxy, tg target) *storm {
	t.Helper()
	var prov *policies.ResolvedProvider
	for i := range p.Policy.Resolved.Providers {
		if pr := &p.Policy.Resolved.Providers[i]; pr.ID == stormProvider {
			prov = pr
		}
	}
	if prov == nil {
		t.Fatalf("the load policy has no provider %q", stormProvider)
	}
	br := prov.Breaker
	s := &storm{p: p, tg: tg, fake: p.fake(t, stormCluster), failures: br.FailureThreshold,
		open1: br.OpenPeriod("server_error"), credentials: map[string]string{}}
	s.open2 = min(2*s.open1, time.Duration(br.MaxBackoffMultiplier)*s.open1)
	// One request must open the breaker: a failure on each connection, in one request's
	// failover attempts.
	if n := len(prov.Connections); n < s.failures || p.Policy.Resolved.Failover.MaxAttempts < s.failures || !br.Trips(500) {
		t.Fatalf("%s: %d connections and %d failover attempts cannot open a breaker at %d failures of 500 (trips %v)",
			stormProvider, n, p.Policy.Resolved.Failover.MaxAttempts, s.failures, br.TripStatuses)
	}
	for _, c := range prov.Connections {
		s.credentials[strings.TrimPrefix(c.CredentialValue.Reveal(), "Bearer ")] = c.ID
	}
	s.fake.Script(fakeprovider.Repeat(s.failures+1, fakeprovider.Fault{Status: http.StatusInternalServerError})...)
	return s
}

// run sends the opening request, reads the breaker's state, then hammers until every
// client got a 200.
func (s *storm) run(c *http.Client) {
	s.send(c)
	health, err := s.p.admin(c, "monitoring/health")
	if err != nil {
		s.fail("%v", err)
	}
	s.mu.Lock()
	s.state = health.Get("providerHealth." + stormProvider + ".state").Str
	s.mu.Unlock()
	limit := time.Now().Add(s.open1 + s.open2 + hostsimtest.WaitLimit)
	var wg sync.WaitGroup
	for range stormClients {
		wg.Go(func() {
			tick := time.NewTicker(stormPace)
			defer tick.Stop()
			for time.Now().Before(limit) {
				if st := s.send(c); st == http.StatusOK {
					return
				}
				<-tick.C
			}
			s.fail("a storm client got no 200 within %v", hostsimtest.WaitLimit)
		})
	}
	wg.Wait()
}

// send sends one storm request and records it; it returns the status (0 for none).
func (s *storm) send(c *http.Client) int {
	s.mu.Lock()
	id := stormBase + len(s.outcomes)
	s.outcomes = append(s.outcomes, result{kind: -1})
	s.times = append(s.times, stormTime{})
	s.mu.Unlock()
	sent := time.Now()
	o := send(context.Background(), c, s.p.URL(), id, &stormKind, s.tg)
	answered := time.Now()
	res := result{kind: -1, status: o.status, code: o.code, latency: o.latency}
	if o.header != nil {
		res.attempts = o.attempts()
		res.provider, res.connection = o.header.Get("x-spillway-provider"), o.header.Get("x-spillway-connection")
	}
	s.mu.Lock()
	s.outcomes[id-stormBase] = res
	s.times[id-stormBase] = stormTime{sent: sent, answered: answered, status: o.status,
		refused: o.status == http.StatusServiceUnavailable && res.attempts == 0}
	s.mu.Unlock()
	if o.err != nil {
		s.fail("storm request %d: %v", id, o.err)
	}
	return o.status
}

func (s *storm) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < maxErrs {
		s.errs = append(s.errs, fmt.Sprintf(format, args...))
	}
}

// ids returns the storm's request numbers.
func (s *storm) ids() []int {
	out := make([]int, len(s.outcomes))
	for i := range out {
		out[i] = stormBase + i
	}
	return out
}

// check asserts the breaker let only its probes through: the fake received the opening
// request's failures, nothing for the first OPEN period, one probe (which failed),
// nothing for the second OPEN period, one probe (which succeeded), and then only requests
// the clients got a 200 for; the clients were refused meanwhile; health ends CLOSED.
func (s *storm) check(t *testing.T, health gjson.Result) {
	t.Helper()
	for _, e := range s.errs {
		t.Error(e)
	}
	if len(s.outcomes) == 0 {
		t.Fatal("the storm sent nothing")
	}
	if o := s.outcomes[0]; o.status != http.StatusInternalServerError || o.attempts != s.failures {
		t.Errorf("the storm's first request: %d after %d attempts, want 500 after %d (one failure per connection)",
			o.status, o.attempts, s.failures)
	}
	if s.state != "OPEN" {
		t.Errorf("after the storm's first request the breaker is %q, want OPEN", s.state)
	}
	var oks, probeFailures int
	for _, o := range s.outcomes[1:] {
		switch {
		case o.status == http.StatusOK:
			oks++
		case o.status == http.StatusInternalServerError:
			probeFailures++
			if o.attempts != 1 {
				t.Errorf("the failed probe's answer says %d attempts, want 1 (the breaker reopened: nothing to fail over to)", o.attempts)
			}
		}
	}
	recs := s.fake.Requests()
	if n := s.fake.TotalStats().Requests; n != len(recs) {
		t.Fatalf("%s received %d requests but recorded %d (at most %d are kept)", stormCluster, n, len(recs), fakeprovider.MaxRecorded)
	}
	// Every request the fake received is accounted for: the opening failures, the failed
	// probe, and one per 200.
	if want := s.failures + probeFailures + oks; probeFailures != 1 || len(recs) != want {
		t.Fatalf("%s received %d requests; want %d: %d opening failures, 1 failed probe (got %d), %d answered 200\n"+
			"the storm's answers other than a refusal: %s\nthe fake's requests: %s",
			stormCluster, len(recs), want, s.failures, probeFailures, oks, s.unrefused(), s.received(recs))
	}
	seen := map[string]bool{}
	for _, r := range recs[:s.failures] {
		if s.credentials[r.Credential] == "" || seen[r.Credential] {
			t.Errorf("the opening failures came from connections %v; want each of %s's once", s.connectionsOf(recs[:s.failures]), stormProvider)
			break
		}
		seen[r.Credential] = true
	}
	lastFailure, probe1, probe2 := recs[s.failures-1].Start, recs[s.failures].Start, recs[s.failures+1].Start
	// A probe too early says which request it was: the answers and what the fake received
	// (a recurrence of the early probe seen once under full machine load needs them).
	if gap := probe1.Sub(lastFailure); gap < s.open1-clockSlack {
		t.Errorf("the first probe came %v after the failure that opened the breaker, within its OPEN period %v\n"+
			"the storm's answers other than a refusal: %s\nthe fake's requests: %s", gap, s.open1, s.unrefused(), s.received(recs))
	}
	if gap := probe2.Sub(probe1); gap < s.open2-clockSlack {
		t.Errorf("the second probe came %v after the first failed, within the reopened OPEN period %v\n"+
			"the storm's answers other than a refusal: %s\nthe fake's requests: %s", gap, s.open2, s.unrefused(), s.received(recs))
	}
	// The clients were refused in both OPEN periods: they did ask.
	var refused1, refused2 int
	for _, tm := range s.times[1:] {
		switch {
		case !tm.refused:
		case tm.sent.After(lastFailure) && tm.answered.Before(probe1):
			refused1++
		case tm.sent.After(probe1) && tm.answered.Before(probe2):
			refused2++
		}
	}
	if refused1 == 0 || refused2 == 0 {
		t.Errorf("refused while OPEN: %d before the first probe, %d before the second; want some in each", refused1, refused2)
	}
	if st := health.Get("providerHealth." + stormProvider + ".state").Str; st != "CLOSED" {
		t.Errorf("after the storm the breaker is %q, want CLOSED", st)
	}
	t.Logf("storm: the breaker opened after %d failures; %d requests refused in the first OPEN period (%v), %d in the second (%v); probes %v and %v after the failure before each; %d answered 200",
		s.failures, refused1, s.open1, refused2, s.open2, probe1.Sub(lastFailure).Round(time.Millisecond),
		probe2.Sub(probe1).Round(time.Millisecond), oks)
}

// unrefused lists the storm's answers that were not a refusal while OPEN, with when each
// request was sent (since the first), for a failure's message.
func (s *storm) unrefused() string {
	var b strings.Builder
	for i, o := range s.outcomes {
		if tm := s.times[i]; !tm.refused {
			fmt.Fprintf(&b, "\n  #%d sent +%v answered +%v: %d %q attempts %d via %s/%s", i,
				tm.sent.Sub(s.times[0].sent).Round(time.Millisecond), tm.answered.Sub(s.times[0].sent).Round(time.Millisecond),
				o.status, o.code, o.attempts, o.provider, o.connection)
		}
	}
	return b.String()
}

// received lists the fake's requests: when each started (since the first) and from which
// connection.
func (s *storm) received(recs []fakeprovider.Recorded) string {
	var b strings.Builder
	for i, r := range recs {
		fmt.Fprintf(&b, "\n  %d: +%v from %s", i, r.Start.Sub(recs[0].Start).Round(time.Millisecond), s.connectionsOf(recs[i : i+1])[0])
	}
	return b.String()
}

// connectionsOf names the connections whose credentials sent recs ("?" for another).
func (s *storm) connectionsOf(recs []fakeprovider.Recorded) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		if out[i] = s.credentials[r.Credential]; out[i] == "" {
			out[i] = "?"
		}
	}
	return out
}
