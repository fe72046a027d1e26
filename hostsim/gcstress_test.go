package hostsim_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
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

// The product module under the same load: 100,000 chat-completion lifecycles of
// build/spillway.wasm across 2 workers in Envoy 1.33's WASI, with request bodies between
// 1 KiB and 64 KiB so the filter's own allocations drive the garbage collector, and a 4 MiB
// body now and then in the first half (the filter buffers and reads whole bodies). Each
// request is routed (allow_on_headers_stop_iteration, as Spillway ships Envoy). No trap,
// and memory levels off. This is the steady-state check of the real filter; TestGCStress is
// the one that provokes the poll_oneoff crash (a burst big enough to wake the scavenger and
// forced GCs) and shows the runtime fix prevents it.
func TestGCStressSpillway(t *testing.T) {
	const (
		total    = 100_000
		workers  = 2
		bigEvery = 10_000
	)
	cfg, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	h := hostsimtest.New(t, hostsimtest.ReadModule(t, "build/spillway.wasm"), hostsim.WithWorkers(workers),
		hostsim.WithPluginConfiguration(cfg), hostsim.WithBufferLimit(8<<20))
	h.StartPlugin()
	req := hdrs(":method", "POST", ":path", "/v1/chat/completions", ":authority", "spillway.local",
		"content-type", "application/json", "x-session-id", "s-1")
	resp := hdrs(":status", "200", "content-type", "application/json")
	bodies := make([][]byte, 7)
	for k := range bodies {
		bodies[k] = []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` +
			strings.Repeat("a", (1<<10)<<k) + `"}]}`)
	}
	big := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("b", 4<<20) + `"}]}`)
	pages := map[int][]uint32{}
	start := time.Now()
	for i := 0; i < total; i++ {
		w := h.Host.Worker(i % workers)
		body := bodies[i%len(bodies)]
		// The big bodies come in the first half: the filter buffers a whole body to read its
		// model, so each grows the guest heap by its size the first time (Go never returns
		// memory), and the second half checks that memory has levelled off.
		if i < total/2 && (i/workers)%bigEvery == bigEvery-1 {
			body = big
		}
		id := w.InitializeHttpContext()
		for _, step := range []func() error{
			func() error { _, err := w.CallOnRequestHeaders(id, req, false); return err },
			func() error { _, err := w.CallOnRequestBody(id, body, true); return err },
			func() error { _, err := w.CallOnResponseHeaders(id, resp, false); return err },
			func() error { _, err := w.CallOnResponseBody(id, []byte(`{"id":"x"}`), true); return err },
			func() error { return w.CompleteHttpContext(id) },
		} {
			if err := step(); err != nil {
				t.Fatalf("request %d trapped: %v", i, err)
			}
		}
		if (i+1)%(total/10) == 0 {
			for k := 0; k < workers; k++ {
				pages[k] = append(pages[k], h.Host.Worker(k).MemoryPages())
			}
		}
	}
	if v, _ := headerOf(h.Host.Worker(1).GetCurrentResponseHeaders(uint32(total/workers+1)), "x-spillway-model"); v != "gpt-4o" {
		t.Fatalf("last response's x-spillway-model = %q, want gpt-4o", v)
	}
	for k := 0; k < workers; k++ {
		p := pages[k]
		t.Logf("spillway worker-%d memory pages at each 10%% of the run: %v", k, p)
		if p[len(p)-1] > p[len(p)/2] {
			t.Fatalf("worker-%d memory still growing in the second half: %v", k, p)
		}
	}
	t.Logf("%d spillway lifecycles in %v", total, time.Since(start).Round(time.Millisecond))
}
