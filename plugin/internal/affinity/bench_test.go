package affinity

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

var benchHeaders = map[string]string{"x-codex-session-id": "3f1c2a9e-7b2d-4c1e-9f00-0a1b2c3d4e5f"}

func benchLookupHeader(name string) (string, bool) { v, ok := benchHeaders[name]; return v, ok }

// BenchmarkKeyFromHeaders derives a session key (validation and SHA-256).
func BenchmarkKeyFromHeaders(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if k, err := KeyFromHeaders("route", benchLookupHeader); err != nil || k.IsZero() {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookup is one affinity lookup of a live pin in a table holding 1,000 sessions
// pinned across 1,000 connections, followed by the (rate-limited, so usually skipped)
// refresh.
func BenchmarkLookup(b *testing.B) {
	clock := manualclock.New(t0)
	tab, err := New(state.NewMemStore(), clock, Config{TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		k, _ := NewKey("route", fmt.Sprintf("session-%d", i))
		tab.Record(k, "p", fmt.Sprintf("conn-%04d", i), Pin{})
	}
	k, _ := NewKey("route", "session-500")
	b.ReportAllocs()
	for b.Loop() {
		pin, err := tab.Lookup(k)
		if err != nil || pin.Connection != "conn-0500" {
			b.Fatalf("pin %+v, %v", pin, err)
		}
		if _, err := tab.Record(k, pin.Provider, pin.Connection, pin); err != nil {
			b.Fatal(err)
		}
	}
}
