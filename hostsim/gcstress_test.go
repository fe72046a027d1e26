package hostsim_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// lifecycle runs one request through a worker with the proxytest-shaped API.
func lifecycle(w *hostsim.VM, req, resp [][2]string) error {
	id := w.InitializeHttpContext()
	if _, err := w.CallOnRequestHeaders(id, req, true); err != nil {
		return err
	}
	if _, err := w.CallOnResponseHeaders(id, resp, true); err != nil {
		return err
	}
	return w.CompleteHttpContext(id)
}

// The GC stress of the issue: ≥ 100,000 request lifecycles across 2 worker VMs in Envoy
// 1.33's WASI, each allocating 4 KiB, one in 10,000 allocating 8 MiB (a big body: it gives
// the runtime's background scavenger memory to return, so it arms a timer and the netpoller
// comes up), and a forced GC every 500 requests. The module built with wasmbuild's runtime
// fix survives and its memory levels off; the same filter built without the fix dies with
// "poll_oneoff failed", as it does in Envoy.
func TestGCStress(t *testing.T) {
	const (
		total    = 100_000
		workers  = 2
		gcEvery  = 500
		bigEvery = 10_000
	)
	req := hdrs(":method", "GET", ":path", "/", ":authority", "a", "x-alloc", "4096")
	reqGC := append(hdrs("x-gc", "1"), req...)
	reqBig := hdrs(":method", "POST", ":path", "/", ":authority", "a", "x-alloc", strconv.Itoa(8<<20))
	pick := func(i int) [][2]string {
		switch n := i / workers; {
		case n%bigEvery == 0:
			return reqBig
		case n%gcEvery == gcEvery-1:
			return reqGC
		}
		return req
	}
	resp := hdrs(":status", "200")

	t.Run("with runtime fix", func(t *testing.T) {
		h := hostsimtest.New(t, hostsimtest.Guest(t, "gcstress"), hostsim.WithWorkers(workers))
		h.StartPlugin()
		start := time.Now()
		pages := map[int][]uint32{}
		for i := 0; i < total; i++ {
			w := h.Host.Worker(i % workers)
			if err := lifecycle(w, pick(i), resp); err != nil {
				t.Fatalf("request %d trapped: %v", i, err)
			}
			if (i+1)%(total/10) == 0 {
				for k := 0; k < workers; k++ {
					pages[k] = append(pages[k], h.Host.Worker(k).MemoryPages())
				}
			}
		}
		elapsed := time.Since(start)
		last := h.Host.Worker(0).GetCurrentResponseHeaders(uint32(total/workers + 1))
		if v, _ := headerOf(last, "x-seen"); v != strconv.Itoa(total/workers) {
			t.Fatalf("worker-0 counted %q requests, want %d (Go globals are per VM)", v, total/workers)
		}
		for k := 0; k < workers; k++ {
			p := pages[k]
			t.Logf("worker-%d memory pages at each 10%% of the run: %v", k, p)
			if p[len(p)-1] > p[len(p)/2] {
				t.Fatalf("worker-%d memory still growing in the second half: %v", k, p)
			}
		}
		t.Logf("%d lifecycles in %v (%v each)", total, elapsed.Round(time.Millisecond), elapsed/total)
	})

	t.Run("without runtime fix dies like in Envoy", func(t *testing.T) {
		h := hostsimtest.New(t, hostsimtest.Guest(t, "gcstress-nopatch"), hostsim.WithWorkers(workers))
		h.StartPlugin()
		for i := 0; i < total; i++ {
			w := h.Host.Worker(i % workers)
			err := lifecycle(w, pick(i), resp)
			if err == nil {
				continue
			}
			var te *hostsim.TrapError
			if !errors.As(err, &te) || te.Fatal != "fatal error: poll_oneoff failed" {
				t.Fatalf("request %d: want the poll_oneoff crash, got %v", i, err)
			}
			t.Logf("died at request %d as in Envoy 1.33: %v", i, te)
			return
		}
		t.Fatalf("the build without the runtime fix survived %d requests with forced GCs", total)
	})
}
