package engine

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// The opt-in re-check of expired connections (resilience.terminalRecheck, issue 19), natively
// on a manual clock: the intervals are the policy's (60 s, doubled per refusal up to 240 s),
// the expiry the guide's (§2: the third revoked-key 401, EXPIRED_RETRY_MAX = 3).

const recheckOn = "resilience: {terminalRecheck: {enabled: true, intervalMs: 60000, maxIntervalMs: 240000}}\n"

var (
	revokedKey = Outcome{Status: 401, Body: []byte(`{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}`)}
	bannedAcct = Outcome{Status: 403, Body: []byte(`{"error":{"message":"Your account has been banned"}}`)}
)

// expire makes connection of acme expired the guide's way: three revoked-key 401s, each after
// the cooldown the one before set (3 s, then 6 s: well within a minute). The expiry is now.
func (f *fixture) expire(t *testing.T, e *Engine, connection string) {
	t.Helper()
	tg := f.target(t, "acme", connection, "m1")
	for i := range 3 {
		if i > 0 {
			f.clock.Advance(time.Minute)
		}
		failOn(t, e, tg, revokedKey)
	}
	if s := f.connGauges(t, tg.Provider, tg.Connection).Status; s != conncooldown.StatusExpired {
		t.Fatalf("%s after three revoked-key 401s: %s, want expired", connection, s)
	}
}

// tick is one worker's tick: the re-checks it claims.
func tick(t *testing.T, e *Engine) []Recheck {
	t.Helper()
	if !e.RecheckLook() {
		return nil
	}
	due, err := e.DueRechecks(nil)
	if err != nil {
		t.Fatal(err)
	}
	return due
}

// checked names the connections of a tick's re-checks.
func (f *fixture) checked(rs []Recheck) []string {
	var out []string
	for _, r := range rs {
		out = append(out, f.e.res.Providers[r.Provider].Connections[r.Connection].ID)
	}
	return out
}

// plans reports whether a request for m1 may go to connection.
func (f *fixture) plans(t *testing.T, connection string) bool {
	t.Helper()
	return slices.Contains(f.names(f.plan(t, "m1", affinity.Key{})), "acme/"+connection+"/m1")
}

// Each answer of the first check, which comes one interval (60 s) after the expiry: a 2xx
// restores the connection (the next request plans it, and nothing is checked any more); a 401
// or 403 keeps it expired and doubles the wait for the next check (120 s); a 5xx, a 429 or no
// answer changes nothing, and the next check comes a plain interval on.
func TestRecheckAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string              // the case
		status   int                 // the check's response status (0: none)
		want     RecheckOutcome      // what RecordRecheck reports
		after    conncooldown.Status // the connection's state afterwards
		nextWait time.Duration       // when the next check is due after the first (0: never)
	}{
		{name: "200 restores", status: 200, want: RecheckRestored, after: conncooldown.StatusAvailable},
		{name: "204 restores", status: 204, want: RecheckRestored, after: conncooldown.StatusAvailable},
		{name: "401 keeps it and backs off", status: 401, want: RecheckRefused, after: conncooldown.StatusExpired, nextWait: 120 * time.Second},
		{name: "403 keeps it and backs off", status: 403, want: RecheckRefused, after: conncooldown.StatusExpired, nextWait: 120 * time.Second},
		{name: "503 changes nothing", status: 503, want: RecheckInconclusive, after: conncooldown.StatusExpired, nextWait: 60 * time.Second},
		{name: "429 changes nothing", status: 429, want: RecheckInconclusive, after: conncooldown.StatusExpired, nextWait: 60 * time.Second},
		{name: "no answer changes nothing", status: 0, want: RecheckInconclusive, after: conncooldown.StatusExpired, nextWait: 60 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, acmePolicy(recheckOn))
			f.expire(t, f.e, "acme-a")
			a := f.target(t, "acme", "acme-a", "m1")
			f.clock.Advance(59 * time.Second)
			if got := f.checked(tick(t, f.e)); got != nil {
				t.Fatalf("59 s after the expiry: checked %v, want nothing before the interval", got)
			}
			f.clock.Advance(time.Second)
			due := tick(t, f.e)
			if got := f.checked(due); !slices.Equal(got, []string{"acme-a"}) {
				t.Fatalf("60 s after the expiry: checked %v, want [acme-a]", got)
			}
			if f.plans(t, "acme-a") {
				t.Fatal("acme-a planned while expired")
			}
			out, err := f.e.RecordRecheck(due[0], tc.status)
			if err != nil || out != tc.want {
				t.Fatalf("answer %d: %v, %v; want %v", tc.status, out, err, tc.want)
			}
			if s := f.connGauges(t, a.Provider, a.Connection).Status; s != tc.after {
				t.Fatalf("after the answer: %s, want %s", s, tc.after)
			}
			if got := f.plans(t, "acme-a"); got != (tc.after == conncooldown.StatusAvailable) {
				t.Fatalf("acme-a planned: %v, want %v", got, !got)
			}
			wait := tc.nextWait
			if wait == 0 {
				wait = time.Hour // restored: nothing is due, ever
			}
			for elapsed := time.Duration(0); elapsed < wait-time.Second; {
				step := min(10*time.Second, wait-time.Second-elapsed)
				f.clock.Advance(step)
				elapsed += step
				if got := f.checked(tick(t, f.e)); got != nil {
					t.Fatalf("%v after the first check: checked %v again, want the next check %v after it", elapsed, got, tc.nextWait)
				}
			}
			f.clock.Advance(time.Second)
			got := f.checked(tick(t, f.e))
			if want := []string{"acme-a"}; tc.nextWait == 0 {
				if got != nil {
					t.Fatalf("an hour after the restore: checked %v", got)
				}
			} else if !slices.Equal(got, want) {
				t.Fatalf("%v after the first check: checked %v, want %v", tc.nextWait, got, want)
			}
		})
	}
}

// Refusal after refusal doubles the wait, up to maxIntervalMs (240 s): checks at 60 s after
// the expiry, then 120 s, 240 s and 240 s apart.
func TestRecheckRefusalsBackOffToTheCap(t *testing.T) {
	f := newFixture(t, acmePolicy(recheckOn))
	f.expire(t, f.e, "acme-a")
	var at []time.Duration
	for s := time.Second; s <= 12*time.Minute; s += time.Second {
		f.clock.Advance(time.Second)
		for _, r := range tick(t, f.e) {
			at = append(at, s)
			if out, err := f.e.RecordRecheck(r, 401); err != nil || out != RecheckRefused {
				t.Fatalf("401 at %v: %v, %v", s, out, err)
			}
		}
	}
	want := []time.Duration{60 * time.Second, 180 * time.Second, 420 * time.Second, 660 * time.Second}
	if !slices.Equal(at, want) {
		t.Fatalf("checks at %v after the expiry, want %v", at, want)
	}
}

// banned and credits_exhausted are never re-checked, however long they last; only expired is.
func TestRecheckOnlyExpired(t *testing.T) {
	f := newFixture(t, acmePolicy(recheckOn))
	failOn(t, f.e, f.target(t, "acme", "acme-a", "m1"), bannedAcct)
	failOn(t, f.e, f.target(t, "acme", "acme-b", "m1"), creditsGone)
	for _, c := range []struct {
		id   string
		want conncooldown.Status
	}{{"acme-a", conncooldown.StatusBanned}, {"acme-b", conncooldown.StatusCreditsExhausted}} {
		tg := f.target(t, "acme", c.id, "m1")
		if s := f.connGauges(t, tg.Provider, tg.Connection).Status; s != c.want {
			t.Fatalf("%s: %s, want %s", c.id, s, c.want)
		}
	}
	for range 360 { // six hours, a tick each minute
		f.clock.Advance(time.Minute)
		if got := f.checked(tick(t, f.e)); got != nil {
			t.Fatalf("checked %v: banned and credits_exhausted are never re-checked", got)
		}
	}
}

// Two workers (two engines over one shared store) start at most maxPerTick checks per second
// between them, and each connection once per interval: three connections expired together,
// maxPerTick 1 and then 2, both workers ticking every second (taking turns at going first),
// the checks never answered.
func TestRecheckAtMostMaxPerTickAcrossWorkers(t *testing.T) {
	for _, perTick := range []int{1, 2} {
		policy := acmePolicy("resilience: {terminalRecheck: {enabled: true, intervalMs: 60000, maxPerTick: " +
			strconv.Itoa(perTick) + "}}\n")
		f := newFixture(t, policy)
		peer := f.peer(t, policy)
		// Expired in the same three minutes, by either worker's failures.
		a, b, bk := f.target(t, "acme", "acme-a", "m1"), f.target(t, "acme", "acme-b", "m1"), f.target(t, "backup", "backup-a", "m1")
		for range 3 {
			failOn(t, f.e, a, revokedKey)
			failOn(t, peer, b, revokedKey)
			failOn(t, peer, bk, revokedKey)
			f.clock.Advance(time.Minute)
		}
		perSecond := map[int]int{}
		perConn := map[string][]int{}
		for s := 1; s <= 300; s++ {
			f.clock.Advance(time.Second)
			order := []*Engine{f.e, peer}
			if s%2 == 0 {
				order = []*Engine{peer, f.e}
			}
			for _, e := range order {
				for _, r := range tick(t, e) {
					perSecond[s]++
					id := f.e.res.Providers[r.Provider].Connections[r.Connection].ID
					perConn[id] = append(perConn[id], s)
				}
			}
		}
		most := 0
		for s, n := range perSecond {
			if n > perTick {
				t.Errorf("maxPerTick %d: %d checks started in second %d", perTick, n, s)
			}
			most = max(most, n)
		}
		if most != perTick {
			t.Errorf("maxPerTick %d: at most %d checks in a second, want the bound reached with three due", perTick, most)
		}
		for _, c := range []string{"acme-a", "acme-b", "backup-a"} {
			at := perConn[c]
			if len(at) < 4 {
				t.Errorf("maxPerTick %d: %s checked at %v, want about every 60 s over 300 s", perTick, c, at)
			}
			for i := 1; i < len(at); i++ {
				if at[i]-at[i-1] < 60 {
					t.Errorf("maxPerTick %d: %s checked at %v: twice within the 60 s interval", perTick, c, at)
				}
			}
		}
	}
}

// A 2xx for an expiry that ended meanwhile (an operator reset it, and the key expired again
// with later failures) restores nothing: the later expiry is newer evidence than the check.
func TestRecheckPassForAnEndedExpiryRestoresNothing(t *testing.T) {
	f := newFixture(t, acmePolicy(recheckOn))
	f.expire(t, f.e, "acme-a")
	f.clock.Advance(time.Minute)
	due := tick(t, f.e)
	if len(due) != 1 {
		t.Fatalf("checked %v, want acme-a", f.checked(due))
	}
	if _, err := f.e.Reset("acme"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	f.expire(t, f.e, "acme-a")
	if out, err := f.e.RecordRecheck(due[0], 200); err != nil || out != RecheckInconclusive {
		t.Fatalf("the old check's 200: %v, %v; want inconclusive", out, err)
	}
	a := f.target(t, "acme", "acme-a", "m1")
	if s := f.connGauges(t, a.Provider, a.Connection).Status; s != conncooldown.StatusExpired {
		t.Fatalf("after the old check's 200: %s, want the new expiry kept", s)
	}
}

// Off by default: with no terminalRecheck block an expired connection is never checked, and
// a tick's re-check costs no shared-data operation at all.
func TestRecheckOffByDefault(t *testing.T) {
	p, err := policyfile.Parse(acmePolicy(""), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := testfixture.NewStore()
	clock := manualclock.New(start)
	e, err := New(p, store, clock, Options{Random: rand.NewPCG(1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if e.RecheckEnabled() {
		t.Fatal("re-check enabled without the block")
	}
	f := &fixture{e: e, store: store.MemStore, clock: clock}
	f.expire(t, e, "acme-a")
	gets, sets := store.Gets, store.Sets
	for range 120 {
		clock.Advance(time.Minute)
		if got := f.checked(tick(t, e)); got != nil {
			t.Fatalf("checked %v with the re-check off", got)
		}
		if due, err := e.DueRechecks(nil); err != nil || due != nil {
			t.Fatalf("DueRechecks with the re-check off: %v, %v", due, err)
		}
	}
	if store.Gets != gets || store.Sets != sets {
		t.Fatalf("ticks with the re-check off made %d reads and %d writes, want none", store.Gets-gets, store.Sets-sets)
	}
}
