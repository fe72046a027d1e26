package engine

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// Demo indexes: provider 0 openai (openai-a capped 4 / gpt-4o 2, openai-b capped 2),
// 1 openrouter (uncapped), 2 anthropic (capped 2).

func (f *fixture) connGauges(t *testing.T, p, c int) ConnectionGauges {
	t.Helper()
	g, err := f.e.ConnectionGauges(p, c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The gauges read what the layers hold, across workers, and write nothing.
func TestGaugesReadTheSharedState(t *testing.T) {
	f := newFixture(t, examples.Demo())
	if g := f.connGauges(t, 0, 1); g != (ConnectionGauges{Status: conncooldown.StatusAvailable, Capped: true}) {
		t.Fatalf("clean openai-b: %+v", g)
	}
	if g := f.connGauges(t, 1, 0); g.Capped {
		t.Fatalf("openrouter-a is uncapped: %+v", g)
	}
	// Two attempts hold openai-b's slots; a third waits in its queue.
	target := Target{Provider: 0, Connection: 1, Model: "gpt-4o-mini"}
	var held []Dispatch
	for i := 0; i < 3; i++ {
		d, err := f.e.Dispatch(target)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, d)
	}
	if g := f.connGauges(t, 0, 1); g.SlotsInUse != 2 || g.Queued != 1 {
		t.Fatalf("busy openai-b: %+v, want 2 slots and 1 queued", g)
	}
	for _, d := range held {
		if _, err := f.e.Abandon(d); err != nil {
			t.Fatal(err)
		}
	}
	if g := f.connGauges(t, 0, 1); g.SlotsInUse != 0 || g.Queued != 0 {
		t.Fatalf("after release: %+v", g)
	}

	// A 429 on gpt-4o: model lockout is on in the demo, so the model is locked, not the key.
	p := f.plan(t, "gpt-4o", affinity.Key{})
	r := f.attempt(t, p, Outcome{Status: 429, Body: []byte(`{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`)})
	if !r.Effects.Locked || r.Effects.ConnectionRecorded || r.Effects.BreakerCounted {
		t.Fatalf("429 effects %+v, want a lockout alone", r.Effects)
	}
	if g := f.connGauges(t, 0, 0); g.Lockouts != 1 || g.Status != conncooldown.StatusAvailable {
		t.Fatalf("openai-a after the lockout: %+v", g)
	}
	f.clock.Advance(r.Effects.Lockout.Until.Sub(f.clock.Now()) + time.Millisecond)
	if g := f.connGauges(t, 0, 0); g.Lockouts != 0 {
		t.Fatalf("after the lockout ended: %+v", g)
	}

	// A 500 (not among the lockout's codes) cools the connection and counts for the breaker.
	p = f.plan(t, "gpt-4o-mini", affinity.Key{})
	r = f.attempt(t, p, Outcome{Status: 500, Body: []byte(`internal error`)})
	fx := r.Effects
	if !fx.BreakerCounted || fx.Breaker != breaker.Closed || !fx.ConnectionRecorded ||
		fx.Connection.Status != conncooldown.StatusUnavailable || fx.Connection.RetryAfter <= 0 {
		t.Fatalf("500 effects %+v", fx)
	}
	cooled := p.Targets[0]
	if g := f.connGauges(t, cooled.Provider, cooled.Connection); g.Status != conncooldown.StatusUnavailable {
		t.Fatalf("cooled connection: %+v", g)
	}
	if g, err := f.e.ProviderGauges(0); err != nil || g.Breaker != breaker.Closed || g.Cooling {
		t.Fatalf("openai after one 500: %+v %v", g, err)
	}

	// Credits exhausted: terminal.
	p = f.plan(t, "claude-sonnet-4", affinity.Key{})
	r = f.attempt(t, p, Outcome{Status: 400, Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`)})
	if !r.Effects.ConnectionRecorded || !r.Effects.Connection.Status.Terminal() {
		t.Fatalf("credits effects %+v", r.Effects)
	}
	if g := f.connGauges(t, 2, 0); g.Status != conncooldown.StatusCreditsExhausted {
		t.Fatalf("anthropic-a: %+v", g)
	}
}

// Enough provider-level failures open the circuit, and the gauge says so.
func TestProviderGaugesShowTheOpenCircuit(t *testing.T) {
	f := newFixture(t, examples.Demo(), noLockout)
	var last Result
	for i := 0; i < 12; i++ { // apikey: open at 12
		f.clock.Advance(50 * time.Second)
		last = f.attempt(t, f.plan(t, "gpt-4o", affinity.Key{}), Outcome{Status: 503, Body: []byte(`overloaded`)})
	}
	if last.Effects.Breaker != breaker.Open {
		t.Fatalf("12th failure left the circuit %v", last.Effects.Breaker)
	}
	if g, err := f.e.ProviderGauges(0); err != nil || g.Breaker != breaker.Open {
		t.Fatalf("openai: %+v %v", g, err)
	}
	if f.e.GateEnabled() {
		t.Fatal("the demo does not turn the provider cooldown gate on")
	}
}
