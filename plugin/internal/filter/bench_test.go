package filter

import (
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// BenchmarkSuccessRequest is the success path of the plugin's BenchmarkSuccessPath, natively
// through proxytest: the demo policy, a chat completion for gpt-4o routed to openai-a (capped:
// a lease taken and given back), answered 200. It profiles the filter's and the engine's Go
// code per request without wasm; the figures include proxytest's own host emulation (maps,
// copies, allocations), which is not Envoy's nor hostsim's, so they are for pprof and for
// comparing the filter's code with itself, not for the goal's ratio.
func BenchmarkSuccessRequest(b *testing.B) {
	policy, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		b.Fatal(err)
	}
	host, _, st := newClockedHost(b, policy, nil)
	if st != types.OnPluginStartStatusOK {
		b.Fatalf("start: %v %v", st, host.GetCriticalLogs())
	}
	reqHeaders := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "spillway.local"},
		{":scheme", "http"}, {"content-type", "application/json"}, {"authorization", "Bearer client-key"},
		{"x-request-id", "bench"}}
	reqBody := []byte(`{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hello"}]}`)
	respHeaders := [][2]string{{":status", "200"}, {"content-type", "application/json"}}
	respBody := []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[]}`)
	request := func() {
		id := host.InitializeHttpContext()
		if a := host.CallOnRequestHeaders(id, reqHeaders, false); a != types.ActionPause {
			b.Fatalf("request headers: %v", a)
		}
		if a := host.CallOnRequestBody(id, reqBody, true); a != types.ActionContinue {
			b.Fatalf("request body: %v, local reply %+v", a, host.GetSentLocalResponse(id))
		}
		if a := host.CallOnResponseHeaders(id, respHeaders, false); a != types.ActionContinue {
			b.Fatalf("response headers: %v", a)
		}
		if got, _ := header(host.GetCurrentResponseHeaders(id), HeaderConnection); got != "openai-a" {
			b.Fatalf("%s = %q, want openai-a", HeaderConnection, got)
		}
		host.CallOnResponseBody(id, respBody, true)
		host.CompleteHttpContext(id)
	}
	for i := 0; i < 100; i++ {
		request()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		request()
	}
}
