package filter

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/stats"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// A request whose callback panicked ends as failed_open, under no route when it panicked
// before its model was read.
func TestAPanickedRequestEndsFailedOpen(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), func(cb string) {
		if cb == "request body" {
			panic("boom")
		}
	})
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), false)
	host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o"}`), true)
	host.CompleteHttpContext(id)
	host.Tick()
	name := stats.RouteRequests.Stat(stats.NoRoute, stats.OutcomeFailedOpen)
	if n, err := host.GetCounterMetric(name); err != nil || n != 1 {
		t.Fatalf("%s = %d (%v), want 1", name, n, err)
	}
}

// WatchdogAbort counts on the stream's connection, under the watchdog's reason, and the
// count reaches Envoy with the next flush.
func TestWatchdogAbortCountsItsConnection(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), nil) // a host for the metric calls
	p, err := policyfile.Parse([]byte(testPolicy), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var m metrics
	m.define(p.Resolved())
	keyB := engine.Target{Provider: 0, Connection: 1}
	m.WatchdogAbort(keyB, watchdogStall)
	m.WatchdogAbort(keyB, watchdogStall)
	m.WatchdogAbort(keyB, watchdogSlowStream)
	m.WatchdogAbort(keyB, watchdogKinds) // not a kind: ignored
	m.flush()
	for reason, want := range map[string]uint64{stats.WatchdogStall: 2, stats.WatchdogSlowStream: 1} {
		name := stats.ConnectionWatchdogAborts.Stat("openai", "key-b", reason)
		if n, err := host.GetCounterMetric(name); err != nil || n != want {
			t.Errorf("%s = %d (%v), want %d", name, n, err, want)
		}
	}
	// Flushed counts are not sent again.
	m.flush()
	if n, _ := host.GetCounterMetric(stats.ConnectionWatchdogAborts.Stat("openai", "key-b", stats.WatchdogStall)); n != 2 {
		t.Errorf("after a second flush: %d", n)
	}
}

func TestOutcomesAndReasonsHaveTheirNames(t *testing.T) {
	for _, c := range replyCodes {
		if got := outcomeName(replyOutcome(c)); got != c {
			t.Errorf("reply code %s counts as %s", c, got)
		}
	}
	if got := outcomeName(replyOutcome("no_such_code")); got != "internal_error" {
		t.Errorf("an unknown code counts as %s", got)
	}
	if outcomeName(outcomeNone) != stats.OutcomeClientGone || outcomeName(outcomeSuccess) != stats.OutcomeSuccess {
		t.Error("outcome names")
	}
	for i, r := range failureReasons {
		if reasonIndex(r) != i {
			t.Errorf("reason %s at %d", r, reasonIndex(r))
		}
	}
	if failureReasons[reasonIndex("made_up")] != failure.ReasonUnknown {
		t.Error("an unknown reason is not counted as unknown")
	}
}

func TestDecisionLogEffectsAndDurations(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 400_000, time.UTC) // sub-millisecond: the layers store milliseconds
	at := now.Truncate(time.Millisecond)
	tests := []struct {
		fx   engine.Effects // what the failure left
		want string         // as the decision line says it
	}{
		{engine.Effects{}, "none"},
		{engine.Effects{BreakerCounted: true, Breaker: breaker.Closed}, "none"}, // counted, still closed
		{engine.Effects{BreakerCounted: true, Breaker: breaker.Open}, "breaker OPEN"},
		{engine.Effects{ConnectionRecorded: true, Connection: conncooldown.Availability{Status: conncooldown.StatusUnavailable,
			Until: at.Add(1500 * time.Millisecond)}}, "cooldown 1.5s"},
		{engine.Effects{ConnectionRecorded: true, Connection: conncooldown.Availability{Status: conncooldown.StatusBanned}}, "terminal banned"},
		{engine.Effects{ConnectionRecorded: true, Connection: conncooldown.Availability{Status: conncooldown.StatusAvailable}}, "none"},
		{engine.Effects{BreakerCounted: true, Breaker: breaker.Degraded, Locked: true,
			Lockout: lockout.Lock{Scope: failure.ScopeExact, Name: "gpt-4o", Until: at.Add(2 * time.Minute)}},
			"breaker DEGRADED, lockout exact:gpt-4o 120s"},
	}
	for _, tt := range tests {
		if got := string(appendEffects(nil, tt.fx, now)); got != tt.want {
			t.Errorf("effects %+v: %q, want %q", tt.fx, got, tt.want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 42 * time.Millisecond: "0.042s", 3 * time.Second: "3s",
		1500 * time.Millisecond: "1.5s", 120 * time.Second: "120s", -time.Second: "0s", 1234567 * time.Microsecond: "1.235s"} {
		if got := string(appendDuration(nil, d)); got != want {
			t.Errorf("appendDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
