package selection

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// BenchmarkOrder is one routing decision: 3 eligible targets of a route over 1,000
// configured connections, with the latency term on and every connection's window filled.
func BenchmarkOrder(b *testing.B) {
	const configured = 1000
	for _, s := range Strategies {
		b.Run(s.String(), func(b *testing.B) {
			store := state.NewMemStore()
			e := newEnv(b, store, 1, 10)
			for i := 0; i < configured; i++ {
				conn := fmt.Sprintf("conn-%04d", i)
				for k := 0; k < 20; k++ {
					e.tracker.Record("p", conn, "m", t0.Add(-time.Duration(k)*time.Second), time.Duration(80+i%50)*time.Millisecond, k%9 != 0)
				}
			}
			combo := mustCombo(b, "route", s, configured)
			eligible := []Candidate{
				{Provider: "p", Connection: "conn-0017", Model: "m", Index: 17, Weight: 5, InFlight: 1, MaxConcurrent: 4},
				{Provider: "p", Connection: "conn-0503", Model: "m", Index: 503, Weight: 3, InFlight: 0, MaxConcurrent: 4},
				{Provider: "p", Connection: "conn-0988", Model: "m", Index: 988, Weight: 2, InFlight: 2, MaxConcurrent: 4},
			}
			scratch := make([]Candidate, 0, 8)
			b.ReportAllocs()
			for b.Loop() {
				scratch = append(scratch[:0], eligible...)
				if _, err := e.sel.Order(Request{Combo: combo, Candidates: scratch}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOrderPinned is a decision for a session pinned to an eligible connection.
func BenchmarkOrderPinned(b *testing.B) {
	e := newEnv(b, state.NewMemStore(), 1, 0)
	combo := mustCombo(b, "route", P2C, 1000)
	eligible := []Candidate{
		{Provider: "p", Connection: "conn-0017", Index: 17},
		{Provider: "p", Connection: "conn-0503", Index: 503},
		{Provider: "p", Connection: "conn-0988", Index: 988},
	}
	pin := Pin{Provider: "p", Connection: "conn-0988"}
	scratch := make([]Candidate, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		scratch = append(scratch[:0], eligible...)
		if d, _ := e.sel.Order(Request{Combo: combo, Candidates: scratch, Pin: pin}); !d.Pinned {
			b.Fatal("pin not honoured")
		}
	}
}
