package selection

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// TestSessionAffinityFlow runs the request flow the filter uses: key from headers, lookup,
// ordered with the pin, record the dispatched connection.
func TestSessionAffinityFlow(t *testing.T) {
	store := state.NewMemStore()
	e := newEnv(t, store, 1, 0)
	table, err := affinity.New(store, e.clock, affinity.Config{TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	combo := mustCombo(t, "route", RoundRobin, 3)
	all := list("a", "b", "c")
	headers := map[string]string{"x-codex-session-id": "agent-7"}

	route := func(eligible []Candidate) string {
		t.Helper()
		key, err := affinity.KeyFromHeaders("route", func(n string) (string, bool) { v, ok := headers[n]; return v, ok })
		if err != nil || key.IsZero() {
			t.Fatalf("key: %v", err)
		}
		pin, err := table.Lookup(key)
		if err != nil {
			t.Fatal(err)
		}
		got, d := order(t, e.sel, combo, eligible, Pin{Provider: pin.Provider, Connection: pin.Connection})
		if d.Pinned != (!pin.IsZero() && got[0].Connection == pin.Connection) {
			t.Fatalf("Pinned = %v for pin %+v and pick %s", d.Pinned, pin, got[0].Connection)
		}
		if _, err := table.Record(key, got[0].Provider, got[0].Connection, pin); err != nil {
			t.Fatal(err)
		}
		return got[0].Connection
	}

	first := route(all)
	for i := 0; i < 5; i++ { // round-robin would rotate; the session stays
		e.clock.Advance(time.Minute)
		if got := route(all); got != first {
			t.Fatalf("request %d went to %s, want pinned %s", i, got, first)
		}
	}
	// The pinned connection becomes ineligible: select normally and re-pin.
	var without []Candidate
	for _, c := range all {
		if c.Connection != first {
			without = append(without, c)
		}
	}
	second := route(without)
	if second == first {
		t.Fatalf("routed to excluded %s", first)
	}
	// Back to eligible: the session stays on the new pin.
	if got := route(all); got != second {
		t.Fatalf("after re-pin went to %s, want %s", got, second)
	}
	// Idle past the TTL: the pin lapses and the rotation decides again.
	e.clock.Advance(10 * time.Minute)
	key, _ := affinity.NewKey("route", "agent-7")
	if pin, _ := table.Lookup(key); !pin.IsZero() {
		t.Fatalf("pin %+v survived the TTL", pin)
	}
}
