package hostsim_test

import (
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

var (
	chatHeaders = hdrs(":method", "POST", ":path", "/v1/chat/completions", ":authority", "spillway.local",
		":scheme", "http", "content-type", "application/json", "x-request-id", "bench")
	chatBody     = []byte(`{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hello"}]}`)
	chatResp     = hdrs(":status", "200", "content-type", "application/json")
	chatRespBody = []byte(`{"id":"x","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
)

// chatLifecycle runs one chat completion through a worker, Envoy's way.
func chatLifecycle(tb testing.TB, w *hostsim.VM) {
	id := w.InitializeHttpContext()
	_, err1 := w.CallOnRequestHeaders(id, chatHeaders, false)
	_, err2 := w.CallOnRequestBody(id, chatBody, true)
	_, err3 := w.CallOnResponseHeaders(id, chatResp, false)
	_, err4 := w.CallOnResponseBody(id, chatRespBody, true)
	err5 := w.CompleteHttpContext(id)
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// filterHost starts a built filter with the demo policy on one worker, with
// allow_on_headers_stop_iteration (the filter routes on the body).
func filterHost(tb testing.TB, rel string) *hostsimtest.Host {
	cfg, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		tb.Fatal(err)
	}
	h := hostsimtest.New(tb, hostsimtest.ReadModule(tb, rel), hostsim.WithPluginConfiguration(cfg))
	if !h.StartPlugin() {
		tb.Fatalf("%s did not start", rel)
	}
	return h
}

// BenchmarkLifecycle is one request lifecycle through a worker (8 callbacks), for each
// built module: with noop.wasm it is hostsim's own per-request cost, with spillway.wasm a
// routed chat completion. The filter's cost relative to noop.wasm, interleaved in one run
// with the median per-round ratio and the host-call and allocation counts, is plugin's
// BenchmarkSuccessPath (plugin/bench_test.go).
func BenchmarkLifecycle(b *testing.B) {
	for _, name := range []string{"noop", "spillway"} {
		b.Run(name, func(b *testing.B) {
			h := filterHost(b, "build/"+name+".wasm")
			w := h.Host.Worker(0)
			chatLifecycle(b, w) // warm up, and prove the request passes
			if st, _ := w.StreamState(2); st.Replaced != nil || w.GetSentLocalResponse(2) != nil || !st.RequestComplete {
				b.Fatalf("%s did not pass the benchmark request upstream", name)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				chatLifecycle(b, w)
			}
			b.StopTimer()
			b.ReportMetric(float64(w.MemoryPages()), "pages")
		})
	}
}

// BenchmarkCompile is wazero's compile time for the built filters (no cache).
func BenchmarkCompile(b *testing.B) {
	for _, name := range []string{"noop", "spillway"} {
		b.Run(name, func(b *testing.B) {
			wasm := hostsimtest.ReadModule(b, "build/"+name+".wasm")
			b.ReportMetric(float64(len(wasm)), "module-bytes")
			for i := 0; i < b.N; i++ {
				rt, err := hostsim.NewRuntime()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rt.Compile(wasm, hostsim.WASIEnvoy133); err != nil {
					b.Fatal(err)
				}
				rt.Close()
			}
		})
	}
}

// BenchmarkInstantiate is the start of a plugin on a compiled module: base, canary, main
// and one worker VM, each instantiated and initialized, the three clones started.
func BenchmarkInstantiate(b *testing.B) {
	for _, name := range []string{"noop", "spillway"} {
		b.Run(name, func(b *testing.B) {
			wasm := hostsimtest.ReadModule(b, "build/"+name+".wasm")
			cfg, _ := policyfile.ToJSON(examples.Demo())
			rt := hostsimtest.Runtime(b)
			if _, err := rt.Compile(wasm, hostsim.WASIEnvoy133); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h, err := hostsim.New(wasm, hostsim.WithRuntime(rt), hostsim.WithPluginConfiguration(cfg))
				if err != nil {
					b.Fatal(err)
				}
				if ok, err := h.StartPlugin(); !ok || err != nil {
					b.Fatal(ok, err)
				}
				b.StopTimer()
				h.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4/1e6, "ms/VM")
		})
	}
}
