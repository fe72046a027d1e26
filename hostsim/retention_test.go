package hostsim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// A long-running Host (hostsim serve) keeps nothing of an exchange once it ended: its
// stream idle timer, whose check lies up to the timeout ahead, must not hold it, so the
// memory a Host holds does not grow with the requests it served. The oracle is the garbage
// collector: every exchange whose caller let go of it is collected, whatever the idle
// timeout still had to run.
func TestFinishedExchangesAreReleased(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []hostsim.Option // the clock
	}{
		{"virtual clock", nil},
		{"real clock", []hostsim.Option{hostsim.WithRealClock()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 200 // exchanges driven
			h := probe(t, "", append(tc.opts, hostsim.WithStreamIdleTimeout(8*time.Minute),
				hostsim.WithUpstream(echoUpstream(nil)))...)
			var freed atomic.Int64
			for i := 0; i < n; i++ {
				if err := oneExchange(h.Host.Worker(0), &freed); err != nil {
					t.Fatalf("exchange %d: %v", i, err)
				}
			}
			// Cleanups run after the cycle that found the object unreachable; a few cycles let
			// them all run.
			for i := 0; i < 10 && freed.Load() < n; i++ {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
			if got := freed.Load(); got < n {
				t.Fatalf("%d of %d ended exchanges are still referenced by the Host", n-got, n)
			}
		})
	}
}

// oneExchange runs a GET through vm to its end and marks the Exchange to count its release.
func oneExchange(vm *hostsim.VM, freed *atomic.Int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ex, err := vm.StartStream(ctx, getReq, true)
	if err != nil {
		return err
	}
	// AddCleanup, unlike a finalizer, runs for an object inside a cycle (the exchange and
	// its stream reference each other).
	runtime.AddCleanup(ex, func(c *atomic.Int64) { c.Add(1) }, freed)
	for {
		ev, err := ex.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if ev.Kind == hostsim.ClientReset {
			return fmt.Errorf("reset: %s", ev.Reset)
		}
	}
	if r := ex.Response(); r == nil || r.StatusCode != 200 {
		return fmt.Errorf("response %+v", r)
	}
	return nil
}

// The Host keeps the last WithLogRetention log lines and counts the others: a guest that
// logs on every request cannot grow the Host's memory with the requests served.
func TestLogRetentionKeepsTheLastLines(t *testing.T) {
	const keep = 50
	h := probe(t, "request_headers log 2 line", hostsim.WithLogRetention(keep), hostsim.WithUpstream(echoUpstream(nil)))
	const n = 40 // requests; the probe also logs a "cb ..." line per callback
	for i := 0; i < n; i++ {
		if r := h.RunHTTP(&hostsim.Request{Headers: getReq}); r.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, r.StatusCode)
		}
	}
	logs := h.Logs()
	if len(logs) != keep {
		t.Fatalf("kept %d lines, want the retention %d", len(logs), keep)
	}
	// The probe's own line and its callback trace, counted whether kept or not.
	if got := h.LogCount(hostsim.LogInfo); got < n {
		t.Fatalf("LogCount(info) = %d, want at least the %d lines logged", got, n)
	}
	var total uint64
	for l := hostsim.LogTrace; l <= hostsim.LogCritical; l++ {
		total += h.LogCount(l)
	}
	if dropped := h.LogsDropped(); dropped != total-keep {
		t.Fatalf("LogsDropped = %d, want the %d lines logged less the %d kept", dropped, total, keep)
	}
	// The kept lines are the newest: the last request's trace ends them.
	if last := logs[len(logs)-1].Message; !strings.HasPrefix(last, "cb delete") {
		t.Fatalf("last kept line %q, want the last request's proxy_on_delete", last)
	}
}
