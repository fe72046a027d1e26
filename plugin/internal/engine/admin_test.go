package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// connHealth finds one connection in a health snapshot.
func connHealth(t testing.TB, h Health, id string) ConnectionHealth {
	t.Helper()
	for _, p := range h.Providers {
		for _, c := range p.Connections {
			if c.ID == id {
				return c
			}
		}
	}
	t.Fatalf("no connection %q in the snapshot", id)
	return ConnectionHealth{}
}

func providerHealth(t testing.TB, h Health, id string) ProviderHealth {
	t.Helper()
	for _, p := range h.Providers {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no provider %q in the snapshot", id)
	return ProviderHealth{}
}

func (f *fixture) health(t testing.TB, provider string) Health {
	t.Helper()
	h, err := f.e.Health(provider)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Errors) > 0 {
		t.Fatalf("health read errors: %v", JoinLayerErrors(h.Errors))
	}
	return h
}

// serverErrors records n provider-level failures (503, a trip status) on acme-a.
func (f *fixture) serverErrors(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), overloaded)
	}
}

// The health snapshot shows the breaker at the guide's numbers (§1): an API-key provider
// degrades at 7 failures, opens at 12 for 30 s, and is HALF_OPEN (one probe may go) after.
func TestHealthShowsEveryLayerAtTheGuidesNumbers(t *testing.T) {
	for _, tc := range []struct {
		name     string        // the case
		failures int           // 503s recorded on the acme provider
		after    time.Duration // clock moved afterwards
		state    breaker.State // the breaker state the snapshot must show
		failed   int           // its failure count
		retry    time.Duration // its retry-after
	}{
		{name: "quiet", failures: 0, state: breaker.Closed},
		{name: "below the degradation threshold", failures: 6, state: breaker.Closed, failed: 6},
		{name: "degraded at 7", failures: 7, state: breaker.Degraded, failed: 7},
		{name: "open at 12", failures: 12, state: breaker.Open, failed: 12, retry: 30 * time.Second},
		{name: "open, 10 s later", failures: 12, after: 10 * time.Second, state: breaker.Open, failed: 12, retry: 20 * time.Second},
		{name: "half-open after the reset timeout", failures: 12, after: 31 * time.Second, state: breaker.HalfOpen, failed: 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(""))
			f.serverErrors(t, tc.failures)
			f.clock.Advance(tc.after)
			b := providerHealth(t, f.health(t, ""), "acme").Breaker
			if b.State != tc.state || b.Failures != tc.failed || b.RetryAfter != tc.retry {
				t.Fatalf("breaker %s failures %d retry %v, want %s %d %v", b.State, b.Failures, b.RetryAfter,
					tc.state, tc.failed, tc.retry)
			}
			if other := providerHealth(t, f.health(t, ""), "backup").Breaker; other.State != breaker.Closed || other.Failures != 0 {
				t.Fatalf("the other provider's breaker moved: %+v", other)
			}
		})
	}
}

// A model lockout (§3: with lockout on, a 429 locks the model on the connection and spares
// the connection), a 503's lockout, and a terminal state (§2) as the snapshot shows them.
func TestHealthShowsCooldownLockoutAndTerminalState(t *testing.T) {
	f := newFixture(t, acmePolicy("resilience: {modelLockout: {enabled: true}}\n"))
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), rateLimited)     // locks m1 on acme-a for 20 s
	failOn(t, f.e, f.target(t, "acme", "acme-b", "m1"), overloaded)      // cools acme-b (503 is a trip status and a lockout code)
	failOn(t, f.e, f.target(t, "backup", "backup-a", "m1"), creditsGone) // terminal
	f.clock.Advance(2 * time.Second)
	h := f.health(t, "")
	if !h.ModelLockoutEnabled || h.ProviderCooldownEnabled || !h.At.Equal(start.Add(2*time.Second)) {
		t.Fatalf("snapshot header %+v", h)
	}
	a := connHealth(t, h, "acme-a")
	if len(a.Lockouts) != 1 || a.Lockouts[0].Model != "m1" || a.Lockouts[0].Reason != failure.ReasonRateLimit ||
		a.Lockouts[0].Status != 429 || !a.Lockouts[0].ExpiresAt.Equal(start.Add(20*time.Second)) {
		t.Fatalf("acme-a lockouts %+v, want m1 rate_limit until +20 s", a.Lockouts)
	}
	if a.Cooldown.Status != conncooldown.StatusAvailable {
		t.Fatalf("acme-a: a locked model must not cool the connection: %+v", a.Cooldown)
	}
	b := connHealth(t, h, "acme-b")
	if len(b.Lockouts) != 1 || b.Lockouts[0].Status != 503 {
		t.Fatalf("acme-b lockouts %+v, want the 503's", b.Lockouts)
	}
	c := connHealth(t, h, "backup-a")
	if c.Cooldown.Status != conncooldown.StatusCreditsExhausted || c.Cooldown.TerminalSince.IsZero() ||
		c.Cooldown.ErrorCode != 400 || c.Cooldown.LastErrorType != failure.ReasonCreditsExhausted {
		t.Fatalf("backup-a %+v, want terminal credits_exhausted with its last error", c.Cooldown)
	}
	// Filtered by provider: that provider alone.
	only := f.health(t, "backup")
	if len(only.Providers) != 1 || only.Providers[0].ID != "backup" {
		t.Fatalf("filtered snapshot %+v", only.Providers)
	}
	var unknown *UnknownError
	if _, err := f.e.Health("azure"); !errors.As(err, &unknown) || unknown.What != "provider" || unknown.ID != "azure" {
		t.Fatalf("unknown provider: %v", err)
	}
}

// With model lockout off a Retry-After 20 cools the connection for 20 s, its last error
// recorded (§2).
func TestHealthCooldownWithoutLockout(t *testing.T) {
	f := newFixture(t, acmePolicy(""))
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), rateLimited)
	f.clock.Advance(5 * time.Second)
	a := connHealth(t, f.health(t, "acme"), "acme-a")
	cd := a.Cooldown
	if cd.Status != conncooldown.StatusUnavailable || cd.CooldownRemaining != 15*time.Second ||
		!cd.RateLimitedUntil.Equal(start.Add(20*time.Second)) || cd.LastErrorType != failure.ReasonRateLimit ||
		cd.ErrorCode != 429 || !cd.LastFailureAt.Equal(start) {
		t.Fatalf("cooldown %+v, want the Retry-After's 20 s, 15 s left, last error rate_limit 429", cd)
	}
	if len(a.Lockouts) != 0 {
		t.Fatalf("lockouts with model lockout off: %+v", a.Lockouts)
	}
}

// Caps in use and queue depths: the demo's openai-a has maxConcurrent 4 and gpt-4o 2; a
// dispatched attempt holds one of each, every worker's leases count, and a connection
// without caps has nothing in shared data to show.
func TestHealthShowsCapsInUseAndQueues(t *testing.T) {
	f := newFixture(t, examples.Demo())
	p := f.plan(t, "gpt-4o", affinity.Key{})
	d, err := f.e.Dispatch(p.Targets[0])
	if err != nil || !d.Lease.Held() {
		t.Fatalf("dispatch: %v held=%v", err, d.Lease.Held())
	}
	other := f.peer(t, examples.Demo()) // a second worker's attempt on the same key
	p2, err := other.Plan("gpt-4o-mini", "openai", affinity.Key{}, &Buffers{})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := other.Dispatch(p2.Targets[0])
	if err != nil || !d2.Lease.Held() || other.res.Providers[d2.Target.Provider].Connections[d2.Target.Connection].ID != "openai-a" {
		t.Fatalf("peer dispatch: %v", err)
	}
	c := connHealth(t, f.health(t, ""), "openai-a").Concurrency
	want := Concurrency{MaxConcurrent: 4, MaxQueueDepth: 16, InFlight: 2,
		Models: []ModelConcurrency{{Model: "gpt-4o", Limit: 2, InFlight: 1}}}
	if fmt.Sprint(c) != fmt.Sprint(want) || !c.Capped() {
		t.Fatalf("openai-a concurrency %+v, want %+v", c, want)
	}
	if r := connHealth(t, f.health(t, ""), "openrouter-a").Concurrency; r.Capped() || r.InFlight != 0 {
		t.Fatalf("uncapped connection %+v", r)
	}
	f.e.Finish(d, Outcome{Status: 200}, &p)
	other.Finish(d2, Outcome{Status: 200}, &p2)
	if c := connHealth(t, f.health(t, ""), "openai-a").Concurrency; c.InFlight != 0 || c.Models[0].InFlight != 0 {
		t.Fatalf("after both finished: %+v", c)
	}
}

// A provider reset (POST resilience/reset) is the operator's: the circuit closes, the
// connections lose their cooldowns, lockouts and terminal states (guide §2: terminal "totdat
// ... een operator ze reset"), and the provider is planned again at once. Other providers are
// left alone.
func TestResetClearsEveryLayerOfTheProvider(t *testing.T) {
	f := newFixture(t, acmePolicy("resilience: {modelLockout: {enabled: true}}\n"))
	f.serverErrors(t, 12)                                                // acme OPEN (and acme-a locked for m1: 503 is a lockout code)
	failOn(t, f.e, f.target(t, "acme", "acme-b", "m1"), creditsGone)     // acme-b terminal
	failOn(t, f.e, f.target(t, "backup", "backup-a", "m1"), rateLimited) // the other provider: locked
	if p := f.plan(t, "acme-only", affinity.Key{}); len(p.Targets) != 0 {
		t.Fatalf("acme still planned: %v", f.names(p))
	}
	rep, err := f.e.Reset("acme")
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("reset: %v %v", err, rep.Errors)
	}
	if !slices.Equal(rep.Providers, []string{"acme"}) || rep.Breakers != 1 || !slices.Equal(rep.Connections, []string{"acme-b"}) ||
		!slices.Equal(rep.Terminal, []string{"acme-b"}) || rep.Lockouts != 1 {
		t.Fatalf("report %+v", rep)
	}
	h := f.health(t, "")
	if b := providerHealth(t, h, "acme").Breaker; b.State != breaker.Closed || b.Failures != 0 {
		t.Fatalf("breaker after reset %+v", b)
	}
	for _, id := range []string{"acme-a", "acme-b"} {
		if c := connHealth(t, h, id); c.Cooldown.Status != conncooldown.StatusAvailable || len(c.Lockouts) != 0 {
			t.Fatalf("%s after reset: %+v", id, c)
		}
	}
	if c := connHealth(t, h, "backup-a"); len(c.Lockouts) != 1 {
		t.Fatalf("reset of acme touched backup: %+v", c.Lockouts)
	}
	if p := f.plan(t, "m1", affinity.Key{}); len(p.Targets) != 3 {
		t.Fatalf("after the reset: %v (excluded %v)", f.names(p), p.Excluded)
	}
	// A second reset finds nothing left.
	rep, err = f.e.Reset("")
	if err != nil || rep.Breakers != 0 || len(rep.Connections) != 0 || rep.Lockouts != 1 || len(rep.Providers) != 2 {
		t.Fatalf("reset all: %+v %v (only backup's lockout was left)", rep, err)
	}
	var unknown *UnknownError
	if _, err := f.e.Reset("azure"); !errors.As(err, &unknown) {
		t.Fatalf("unknown provider: %v", err)
	}
}

// The cooldown manager's clear (POST resilience/cooldowns, guide §3): {cleared, unchanged,
// skippedTerminal, lockoutsCleared}; terminal states are shown, never cleared there.
func TestClearCooldowns(t *testing.T) {
	type setup func(t *testing.T, f *fixture)
	cool := func(conn, provider string) setup {
		return func(t *testing.T, f *fixture) { failOn(t, f.e, f.target(t, provider, conn, "m1"), rateLimited) }
	}
	terminal := func(conn, provider string) setup {
		return func(t *testing.T, f *fixture) { failOn(t, f.e, f.target(t, provider, conn, "m1"), creditsGone) }
	}
	lockedAndCooled := func(t *testing.T, f *fixture) {
		// 503 on acme-a with lockout on: m1 locked; a 401 then cools the connection itself.
		failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), overloaded)
		failOn(t, f.e, f.target(t, "acme", "acme-a", "m2"), Outcome{Status: 401, Body: []byte(`{"error":{"message":"invalid api key"}}`)})
	}
	for _, tc := range []struct {
		name     string
		lockout  bool               // model lockout on
		setup    []setup            // state recorded first
		sel      CooldownSelection  // what to clear
		want     string             // cleared|unchanged|skippedTerminal connection ids and lockoutsCleared
		eligible []string           // connections planned for m1 afterwards
		err      func(e error) bool // the selection is refused (nothing changes)
	}{
		{name: "one cooled connection", setup: []setup{cool("acme-a", "acme")},
			sel: CooldownSelection{ConnectionIDs: []string{"acme-a"}}, want: "[acme-a] [] [] 0",
			eligible: []string{"acme-a", "acme-b", "backup-a"}},
		{name: "a healthy connection is unchanged", sel: CooldownSelection{ConnectionIDs: []string{"acme-b", "acme-b"}},
			want: "[] [acme-b] [] 0", eligible: []string{"acme-a", "acme-b", "backup-a"}},
		{name: "terminal is skipped, never cleared", setup: []setup{terminal("acme-b", "acme"), cool("acme-a", "acme")},
			sel: CooldownSelection{All: true}, want: "[acme-a] [backup-a] [acme-b] 0", eligible: []string{"acme-a", "backup-a"}},
		{name: "all of one provider", setup: []setup{cool("acme-a", "acme"), cool("backup-a", "backup")},
			sel: CooldownSelection{All: true, Provider: "acme"}, want: "[acme-a] [acme-b] [] 0", eligible: []string{"acme-a", "acme-b"}},
		{name: "lockouts cleared with the cooldown", lockout: true, setup: []setup{lockedAndCooled},
			sel: CooldownSelection{ConnectionIDs: []string{"acme-a"}}, want: "[acme-a] [] [] 1",
			eligible: []string{"acme-a", "acme-b", "backup-a"}},
		{name: "lockouts cleared on an unchanged connection", lockout: true, setup: []setup{cool("acme-a", "acme")},
			sel: CooldownSelection{ConnectionIDs: []string{"acme-a"}}, want: "[] [acme-a] [] 1",
			eligible: []string{"acme-a", "acme-b", "backup-a"}},
		{name: "a terminal connection keeps its lockouts", lockout: true,
			setup: []setup{cool("acme-a", "acme"), terminal("acme-a", "acme")},
			sel:   CooldownSelection{ConnectionIDs: []string{"acme-a"}}, want: "[] [] [acme-a] 0",
			eligible: []string{"acme-b", "backup-a"}},
		{name: "unknown connection", setup: []setup{cool("acme-a", "acme")},
			sel: CooldownSelection{ConnectionIDs: []string{"acme-a", "acme-z"}},
			err: func(e error) bool { var u *UnknownError; return errors.As(e, &u) && u.ID == "acme-z" }, eligible: []string{"acme-b", "backup-a"}},
		{name: "connection of another provider", setup: []setup{cool("acme-a", "acme")},
			sel: CooldownSelection{ConnectionIDs: []string{"acme-a"}, Provider: "backup"},
			err: func(e error) bool { var u *UnknownError; return errors.As(e, &u) && u.Provider == "backup" }, eligible: []string{"acme-b", "backup-a"}},
		{name: "unknown provider", sel: CooldownSelection{All: true, Provider: "azure"},
			err: func(e error) bool { var u *UnknownError; return errors.As(e, &u) && u.What == "provider" }, eligible: []string{"acme-a", "acme-b", "backup-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := ""
			if tc.lockout {
				res = "resilience: {modelLockout: {enabled: true}}\n"
			}
			f := newFixture(t, acmePolicy(res))
			for _, s := range tc.setup {
				s(t, f)
			}
			rep, err := f.e.ClearCooldowns(tc.sel)
			switch {
			case tc.err != nil:
				if !tc.err(err) {
					t.Fatalf("error %v, want the selection refused", err)
				}
			case err != nil || len(rep.Errors) > 0:
				t.Fatalf("clear: %v %v", err, rep.Errors)
			default:
				if got := fmt.Sprint(rep.Cleared, rep.Unchanged, rep.SkippedTerminal, rep.LockoutsCleared); got != tc.want {
					t.Fatalf("report %s, want %s", got, tc.want)
				}
			}
			p := f.plan(t, "m1", affinity.Key{})
			var got []string
			for _, tg := range p.Targets {
				if tg.Model == "m1" {
					got = append(got, f.e.res.Providers[tg.Provider].Connections[tg.Connection].ID)
				}
			}
			if !slices.Equal(got, tc.eligible) {
				t.Fatalf("m1 planned on %v, want %v (excluded %v)", got, tc.eligible, p.Excluded)
			}
		})
	}
}

// DELETE resilience/model-cooldowns {provider, connection, model} re-enables that model there
// and nothing else (guide §3, Model Cooldowns-dashboard).
func TestClearModelLockout(t *testing.T) {
	f := newFixture(t, acmePolicy("resilience: {modelLockout: {enabled: true}}\n"))
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), rateLimited)
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m2"), rateLimited)
	failOn(t, f.e, f.target(t, "acme", "acme-b", "m1"), rateLimited)
	rep, err := f.e.ClearModelLockout("acme", "acme-a", "m1")
	if err != nil || len(rep.Errors) > 0 || rep.Removed != 1 {
		t.Fatalf("clear: %+v %v, want 1 removed", rep, err)
	}
	list, err := f.e.Lockouts("")
	if err != nil || len(list.Errors) > 0 || !list.At.Equal(start) {
		t.Fatal(err, list)
	}
	var left []string
	for _, l := range list.Lockouts {
		left = append(left, l.Connection+":"+l.Model)
	}
	if !slices.Equal(left, []string{"acme-a:m2", "acme-b:m1"}) {
		t.Fatalf("lockouts left %v", left)
	}
	// Again: nothing left to remove, no error.
	if rep, err := f.e.ClearModelLockout("acme", "acme-a", "m1"); err != nil || rep.Removed != 0 {
		t.Fatalf("second clear: %+v %v", rep, err)
	}
	// Without a connection: the model on every connection of the provider.
	if rep, err := f.e.ClearModelLockout("acme", "", "m1"); err != nil || rep.Removed != 1 {
		t.Fatalf("provider-wide clear: %+v %v", rep, err)
	}
	if rep, err := f.e.ClearAllModelLockouts(""); err != nil || rep.Removed != 1 {
		t.Fatalf("clear all: %+v %v (acme-a:m2 was left)", rep, err)
	}
	for _, bad := range [][2]string{{"azure", ""}, {"acme", "backup-a"}, {"acme", "nope"}} {
		var u *UnknownError
		if _, err := f.e.ClearModelLockout(bad[0], bad[1], "m1"); !errors.As(err, &u) {
			t.Fatalf("%v: %v, want an UnknownError", bad, err)
		}
	}
}

// Effects reach every worker: a cooldown recorded by worker 0 through its per-VM cache, read
// by worker 1's admin snapshot, cleared by worker 1, and worker 0's next plan (after its
// refresh, as the filter does before every routing decision) uses the connection again.
func TestAdminCallsReachEveryWorker(t *testing.T) {
	shared := state.NewMemStore()
	clock := manualclock.New(start)
	w0 := newWorker(t, acmePolicy(""), shared, clock, 1)
	w1 := newWorker(t, acmePolicy(""), shared, clock, 2)
	plan := func(w *worker) []string {
		t.Helper()
		if err := w.cache.Refresh(); err != nil {
			t.Fatal(err)
		}
		p, err := w.e.Plan("acme-only", "openai", affinity.Key{}, &w.buf)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tg := range p.Targets {
			out = append(out, w.e.res.Providers[tg.Provider].Connections[tg.Connection].ID)
		}
		return out
	}
	if got := plan(w0); !slices.Equal(got, []string{"acme-a", "acme-b"}) {
		t.Fatalf("fresh plan %v", got) // also warms worker 0's cache with the clean records
	}
	if got := plan(w1); len(got) != 2 {
		t.Fatalf("worker 1's fresh plan %v", got)
	}
	tg := Target{Provider: 0, Connection: 0, Model: "m1"}
	if r := w0.e.Record(Dispatch{Target: tg, Started: clock.Now()}, rateLimited, nil); r.Errors != nil {
		t.Fatal(r.Errors)
	}
	h, err := w1.e.Health("acme")
	if err != nil || len(h.Errors) > 0 {
		t.Fatal(err, h.Errors)
	}
	if c := connHealth(t, h, "acme-a"); c.Cooldown.Status != conncooldown.StatusUnavailable {
		t.Fatalf("worker 1 does not see worker 0's cooldown: %+v", c.Cooldown)
	}
	if got := plan(w0); !slices.Equal(got, []string{"acme-b"}) {
		t.Fatalf("worker 0 while cooling: %v", got)
	}
	rep, err := w1.e.ClearCooldowns(CooldownSelection{ConnectionIDs: []string{"acme-a"}})
	if err != nil || !slices.Equal(rep.Cleared, []string{"acme-a"}) {
		t.Fatalf("clear on worker 1: %+v %v", rep, err)
	}
	if got := plan(w0); !slices.Equal(got, []string{"acme-a", "acme-b"}) {
		t.Fatalf("worker 0 after worker 1's clear: %v, want acme-a back", got)
	}
	// The same for a reset of an OPEN breaker.
	for i := 0; i < 12; i++ {
		if r := w0.e.Record(Dispatch{Target: tg, Started: clock.Now()}, overloaded, nil); r.Errors != nil {
			t.Fatal(r.Errors)
		}
	}
	if got := plan(w0); len(got) != 0 {
		t.Fatalf("worker 0 with the breaker open: %v", got)
	}
	if _, err := w1.e.Reset("acme"); err != nil {
		t.Fatal(err)
	}
	if got := plan(w0); !slices.Equal(got, []string{"acme-a", "acme-b"}) {
		t.Fatalf("worker 0 after worker 1's reset: %v", got)
	}
}

// No snapshot or report holds a credential or its fingerprint, even printed with %+v.
func TestAdminSnapshotsHoldNoCredential(t *testing.T) {
	f := newFixture(t, acmePolicy("resilience: {modelLockout: {enabled: true}}\n"))
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), rateLimited)
	failOn(t, f.e, f.target(t, "acme", "acme-b", "m1"), creditsGone)
	h := f.health(t, "")
	list, _ := f.e.Lockouts("")
	rep, _ := f.e.Reset("")
	dump := fmt.Sprintf("%+v %#v %+v %#v %+v", h, h, list, list, rep)
	for i := range f.e.res.Providers {
		for _, c := range f.e.res.Providers[i].Connections {
			for _, secret := range []string{c.CredentialValue.Reveal(), fingerprint(&c)} {
				if strings.Contains(dump, secret) {
					t.Fatalf("snapshot holds %q of %s", secret, c.ID)
				}
			}
		}
	}
	if !strings.Contains(dump, "acme-b") || !strings.Contains(dump, "credits_exhausted") {
		t.Fatal("the dump is not the snapshot") // the search above must have looked at something
	}
}

// A store that fails reads: each layer that cannot be read is reported with its ids, and
// the rest of the snapshot is still built.
func TestHealthReportsUnreadableLayers(t *testing.T) {
	f := newFixture(t, acmePolicy(""))
	f.e.breakers = breaker.New(failingStore{f.store}, f.clock)
	h, err := f.e.Health("")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Providers) != 2 || providerHealth(t, h, "acme").Breaker.State != breaker.Closed {
		t.Fatalf("snapshot %+v", h.Providers)
	}
	var got []string
	for _, e := range h.Errors {
		got = append(got, e.Provider+"/"+e.Connection+"/"+string(e.Layer))
	}
	if !slices.Equal(got, []string{"acme//breaker", "backup//breaker"}) {
		t.Fatalf("errors %v", got)
	}
	if !errors.Is(JoinLayerErrors(h.Errors), errUnreadable) {
		t.Fatalf("the store's error is not kept: %v", JoinLayerErrors(h.Errors))
	}
}

var errUnreadable = errors.New("test: shared data unreadable")

// failingStore fails every read of a breaker key.
type failingStore struct{ *state.MemStore }

func (s failingStore) Get(key string) ([]byte, uint32, bool, error) {
	if strings.HasPrefix(key, state.KeyBreaker.Prefix()) {
		return nil, 0, false, errUnreadable
	}
	return s.MemStore.Get(key)
}
