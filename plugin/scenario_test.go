package main

// The scenario suite: build/spillway.wasm in hostsim, several worker VMs on the virtual
// clock, the way Envoy ≥ 1.36 with allow_on_headers_stop_iteration hosts it, against fake
// providers that answer per cluster and credential. Each scenario drives whole requests
// (RunHTTP: filter → router → upstream or callout → filter → client) and asserts what the
// client got and what every fake credential received.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// scenarioPolicy: two OpenAI keys, an OpenAI-compatible backup gateway with a mapped model,
// and Anthropic.
const scenarioPolicy = `
providers:
  - id: openai
    api: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
  - id: backup
    api: openai
    cluster: backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer sk-backup"}}
  - id: anthropic
    api: anthropic
    cluster: anthropic
    connections:
      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}
routes:
  - model: gpt-4o
    targets:
      - {provider: openai}
      - {provider: backup, model: openai/gpt-4o}
  - model: "claude-*"
    targets:
      - {provider: anthropic}
`

// upstreamCall is one request a fake provider received.
type upstreamCall struct {
	cluster, credential, model string
	viaCallout                 bool
	body                       []byte
	headers                    [][2]string
}

// fakes answers for every cluster: by default a 200 chat completion; a test sets a
// behaviour per credential.
type fakes struct {
	mu      sync.Mutex
	calls   []upstreamCall
	answers map[string]func(call upstreamCall) *hostsim.UpstreamResponse // by credential
}

func newFakes() *fakes {
	return &fakes{answers: map[string]func(upstreamCall) *hostsim.UpstreamResponse{}}
}

func header(hs [][2]string, name string) string {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

func credentialOf(hs [][2]string) string {
	if v := header(hs, "authorization"); v != "" {
		return strings.TrimPrefix(v, "Bearer ")
	}
	return header(hs, "x-api-key")
}

func (f *fakes) answer(call upstreamCall) *hostsim.UpstreamResponse {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	fn := f.answers[call.credential]
	f.mu.Unlock()
	if fn != nil {
		return fn(call)
	}
	body := fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi from %s"},"finish_reason":"stop"}]}`,
		call.model, call.credential)
	return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "200"}, {"content-type", "application/json"}}, Body: []byte(body)}
}

func (f *fakes) byCredential() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, c := range f.calls {
		out[c.credential]++
	}
	return out
}

// world is one simulated Envoy process running spillway.wasm.
type world struct {
	t     *testing.T
	host  *hostsimtest.Host
	fakes *fakes
}

func newWorld(t *testing.T, policyYAML string, workers int, opts ...hostsim.Option) *world {
	t.Helper()
	wasm := hostsimtest.ReadModule(t, "build/spillway.wasm")
	config, err := policyfile.ToJSON([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, fakes: newFakes()}
	upstream := func(_ context.Context, req *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		cluster := header(req.Headers, "x-spillway-cluster")
		if cluster == "" {
			return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "404"}}}, nil
		}
		return w.fakes.answer(upstreamCall{cluster: cluster, credential: credentialOf(req.Headers),
			model: gjson.GetBytes(req.Body, "model").Str, body: req.Body, headers: req.Headers}), nil
	}
	callout := func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
		r := w.fakes.answer(upstreamCall{cluster: c.Upstream, credential: credentialOf(c.Headers),
			model: gjson.GetBytes(c.Body, "model").Str, viaCallout: true, body: c.Body, headers: c.Headers})
		return &hostsim.CalloutResponse{Headers: r.Headers, Body: r.Body, Delay: r.Delay}
	}
	all := append([]hostsim.Option{hostsim.WithWorkers(workers), hostsim.WithPluginConfiguration(config),
		hostsim.WithAllowOnHeadersStopIteration(), hostsim.WithUpstream(upstream), hostsim.WithCalloutHandler(callout),
		hostsim.WithCluster("openai", "backup", "anthropic")}, opts...)
	w.host = hostsimtest.New(t, wasm, all...)
	if st := w.host.StartPlugin(); st != types.OnPluginStartStatusOK {
		t.Fatalf("plugin did not start: %v", w.host.Logs())
	}
	return w
}

// chat sends one chat completion for model through worker i.
func (w *world) chat(worker int, model string, extra ...[2]string) *hostsim.Response {
	w.t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
	hs := append([][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "spillway.local"},
		{":scheme", "http"}, {"content-type", "application/json"}, {"authorization", "Bearer client-key"},
		{"content-length", strconv.Itoa(len(body))}}, extra...)
	return w.host.Worker(worker).RunHTTP(&hostsim.Request{Headers: hs, BodyChunks: [][]byte{[]byte(body[:9]), []byte(body[9:])}})
}

func TestScenarioSmoke(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	resp := w.chat(0, "gpt-4o")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d body %s logs %v", resp.StatusCode, resp.Body, w.host.Logs())
	}
	t.Logf("headers %v", resp.Headers)
	t.Logf("upstream %v", resp.Upstream.Headers)
	w.fakes.answers["sk-a"] = func(upstreamCall) *hostsim.UpstreamResponse {
		return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "429"}, {"retry-after", "120"}, {"content-type", "application/json"}},
			Body: []byte(`{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`)}
	}
	resp = w.chat(1, "gpt-4o")
	t.Logf("second: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	resp = w.chat(0, "gpt-4o")
	t.Logf("third: %d %v %s", resp.StatusCode, resp.Headers, resp.Body)
	t.Logf("calls %v", w.fakes.byCredential())
	_ = time.Second
}
