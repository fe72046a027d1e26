package main

// The differential suite: the same filter scenarios run natively under the SDK's proxytest
// (the Go code as a library) and compiled to wasm under hostsim (the module Envoy loads),
// and must be observably identical: actions, headers, local replies, metrics and logs. It
// catches what only the wasm build can get wrong — the ABI bridge, 32-bit sizes, memory
// handed across the boundary, the runtime — and where hostsim's Envoy semantics differ
// from proxytest's in a way the filter would notice.

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/plugin/internal/filter"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// emulator is what a scenario may do to a host: proxytest's method set, which hostsimtest
// mirrors.
type emulator interface {
	StartPlugin() types.OnPluginStartStatus
	InitializeHttpContext() uint32
	CallOnRequestHeaders(id uint32, headers [][2]string, eos bool) types.Action
	CallOnRequestBody(id uint32, body []byte, eos bool) types.Action
	CallOnResponseHeaders(id uint32, headers [][2]string, eos bool) types.Action
	CallOnResponseBody(id uint32, body []byte, eos bool) types.Action
	CompleteHttpContext(id uint32)
	GetCurrentRequestHeaders(id uint32) [][2]string
	GetCurrentResponseHeaders(id uint32) [][2]string
	GetCurrentResponseBody(id uint32) []byte
	GetCounterMetric(name string) (uint64, error)
	Tick()
	CallOnHttpCallResponse(calloutID uint32, headers, trailers [][2]string, body []byte)
}

// callout is a pending callout as either host shows it.
type callout struct {
	id       uint32
	upstream string
	headers  [][2]string
	body     []byte
}

// observation is everything a scenario can see of the filter.
type observation struct {
	Start           types.OnPluginStartStatus
	Actions         []string      // "step: action" in order
	RequestHeaders  [][][2]string // per stream in order (ids differ between hosts), after the filter ran
	ResponseHeaders [][][2]string
	LocalResponses  []string // status and body of local replies
	Metrics         map[string]uint64
	Logs            map[string][]string // by level
}

// recorder runs scenario steps against one emulator and records what happens.
type recorder struct {
	e        emulator
	local    func(id uint32) string    // the stream's local reply, "" if none
	callouts func(id uint32) []callout // the stream's pending callouts
	obs      observation
}

func (r *recorder) act(step string, a types.Action) {
	r.obs.Actions = append(r.obs.Actions, step+": "+map[types.Action]string{
		types.ActionContinue: "continue", types.ActionPause: "pause"}[a])
}

func (r *recorder) snapshot(id uint32) {
	r.obs.RequestHeaders = append(r.obs.RequestHeaders, sorted(r.e.GetCurrentRequestHeaders(id)))
	local := r.local(id)
	if local == "" {
		r.obs.ResponseHeaders = append(r.obs.ResponseHeaders, sorted(r.e.GetCurrentResponseHeaders(id)))
	} else {
		// A request-phase local reply runs through the plugin's own response callbacks in
		// Envoy (and hostsim), not in proxytest: compare the reply itself instead.
		r.obs.ResponseHeaders = append(r.obs.ResponseHeaders, nil)
	}
	r.obs.LocalResponses = append(r.obs.LocalResponses, local)
}

// calloutHeaders drops what the host adds to a callout (Envoy's async client sets
// content-length for a body; proxytest does not).
func calloutHeaders(hs [][2]string) [][2]string {
	var out [][2]string
	for _, kv := range sorted(hs) {
		if kv[0] != "content-length" {
			out = append(out, kv)
		}
	}
	return out
}

// hostileSpillwayHeaders are x-spillway-* request headers a hostile client sends, each
// with the value "evil": Spillway's own names and others.
var hostileSpillwayHeaders = [][2]string{{"x-spillway-cluster", "evil"}, {"x-spillway-provider", "evil"},
	{"x-spillway-connection", "evil"}, {"x-spillway-model", "evil"}, {"x-spillway-attempts", "evil"},
	{"x-spillway-retry", "evil"}, {"x-spillway-request-model", "evil"}, {"x-spillway-whatever", "evil"}}

// chatHeadersOf are a chat completion's request headers for path.
func chatHeadersOf(path string) [][2]string {
	return [][2]string{{":method", "POST"}, {":path", path}, {":authority", "spillway.local"},
		{"content-type", "application/json"}, {"authorization", "Bearer client"}}
}

func sorted(hs [][2]string) [][2]string {
	out := append([][2]string(nil), hs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// scenario is one filter scenario: a policy and the steps run against a started plugin.
type scenario struct {
	name   string
	config []byte
	run    func(r *recorder)
	// check, when set, asserts what both hosts observed (they must agree first).
	check func(t *testing.T, o observation)
}

func chatRequest(r *recorder, path string, chunks ...string) uint32 {
	return chatExchange(r, path, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, `{"id":"x"}`, chunks...)
}

// chatExchange sends a request (headers, body chunks) and answers it with status headers
// and body, then records what the filter did.
func chatExchange(r *recorder, path string, respHeaders [][2]string, respBody string, chunks ...string) uint32 {
	id := r.e.InitializeHttpContext()
	hs := [][2]string{{":method", "POST"}, {":path", path}, {":authority", "spillway.local"},
		{"content-type", "application/json"}, {"authorization", "Bearer client"}, {"x-session-id", "sess-1"},
		{"x-omniroute-session", "sess-2"}}
	r.act("request headers", r.e.CallOnRequestHeaders(id, hs, len(chunks) == 0))
	for i, c := range chunks {
		r.act("request body", r.e.CallOnRequestBody(id, []byte(c), i == len(chunks)-1))
	}
	if r.local(id) == "" {
		r.act("response headers", r.e.CallOnResponseHeaders(id, respHeaders, false))
		r.act("response body", r.e.CallOnResponseBody(id, []byte(respBody), true))
	}
	r.snapshot(id)
	r.e.CompleteHttpContext(id)
	return id
}

// streamExchange sends a streamed request and answers it with a 200 event stream of chunks
// (the last ends it), recording the body the client gets of each chunk.
func streamExchange(r *recorder, path, body string, chunks ...string) {
	id := r.e.InitializeHttpContext()
	hs := [][2]string{{":method", "POST"}, {":path", path}, {":authority", "spillway.local"},
		{"content-type", "application/json"}}
	r.act("request headers", r.e.CallOnRequestHeaders(id, hs, false))
	r.act("request body", r.e.CallOnRequestBody(id, []byte(body), true))
	r.act("response headers", r.e.CallOnResponseHeaders(id, [][2]string{{":status", "200"},
		{"content-type", "text/event-stream"}, {"content-length", "1000"}}, false))
	for i, c := range chunks {
		r.act("response body", r.e.CallOnResponseBody(id, []byte(c), i == len(chunks)-1))
		r.obs.Actions = append(r.obs.Actions, fmt.Sprintf("client gets %q", r.e.GetCurrentResponseBody(id)))
	}
	r.snapshot(id)
	r.e.CompleteHttpContext(id)
}

// failoverByCallout sends a chat completion (with the extra request headers) whose response
// is a 429 and answers the failover callout it makes with a 200.
func failoverByCallout(r *recorder, body string, extra ...[2]string) {
	id := r.e.InitializeHttpContext()
	hs := append([][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "spillway.local"},
		{"content-type", "application/json"}}, extra...)
	r.act("request headers", r.e.CallOnRequestHeaders(id, hs, false))
	r.act("request body", r.e.CallOnRequestBody(id, []byte(body), true))
	r.act("response headers", r.e.CallOnResponseHeaders(id, [][2]string{{":status", "429"},
		{"retry-after", "30"}, {"content-type", "application/json"}}, false))
	r.act("response body", r.e.CallOnResponseBody(id, []byte(`{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`), true))
	for _, c := range r.callouts(id) {
		r.obs.Actions = append(r.obs.Actions, fmt.Sprintf("callout to %s: %q %s", c.upstream, calloutHeaders(c.headers), c.body))
		r.e.CallOnHttpCallResponse(c.id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, nil, []byte(`{"id":"b"}`))
	}
	r.snapshot(id)
	r.e.CompleteHttpContext(id)
}

func scenarios(t *testing.T) []scenario {
	demo, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	// The demo failing over through the router (the link is written to filter state; no
	// upstream filter runs here, so the request fails over by callout).
	router, err := sjson.SetBytes(demo, "resilience.failover.via", "router")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"héllo, 世界"}]}`
	return append([]scenario{
		{name: "chat completion passes through with spillway headers", config: demo, run: func(r *recorder) {
			chatRequest(r, "/v1/chat/completions", body[:17], body[17:40], body[40:])
		}},
		{name: "bodyless request", config: demo, run: func(r *recorder) {
			id := r.e.InitializeHttpContext()
			r.act("request headers", r.e.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/v1/models"},
				{":authority", "spillway.local"}, {"x-codex-session-id", "s"}}, true))
			r.act("response headers", r.e.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true))
			r.snapshot(id)
			r.e.CompleteHttpContext(id)
		}},
		{name: "body that is not JSON", config: demo, run: func(r *recorder) {
			chatRequest(r, "/v1/completions", "not json at all")
		}},
		{name: "several streams in a row", config: demo, run: func(r *recorder) {
			for i := 0; i < 5; i++ {
				chatRequest(r, "/v1/chat/completions", body)
			}
		}},
		{name: "unknown model gets 404 model_not_found", config: demo, run: func(r *recorder) {
			chatRequest(r, "/v1/chat/completions", `{"model":"llama-3","messages":[]}`)
		}},
		{name: "bodyless LLM request gets 400", config: demo, run: func(r *recorder) {
			chatRequest(r, "/v1/chat/completions")
		}},
		{name: "a 429 fails over with a callout", config: demo, run: func(r *recorder) { failoverByCallout(r, body) }},
		{name: "a stream cut without its terminal event ends with an error event, one with it does not", config: demo,
			run: func(r *recorder) {
				chat := `{"model":"gpt-4o","stream":true,"messages":[]}`
				role := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
				content := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
				streamExchange(r, "/v1/chat/completions", chat, role+content, content, content[:20])
				streamExchange(r, "/v1/chat/completions", chat, role+content, content+"data: [DONE]\n\n")
				ant := `{"model":"claude-sonnet-4","stream":true,"max_tokens":5,"messages":[]}`
				streamExchange(r, "/v1/messages", ant,
					"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"+
						"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n", "")
			}},
		{name: "router mode without an upstream filter fails over by callout", config: router, run: func(r *recorder) {
			failoverByCallout(r, body)
		}},
		{name: "a client's x-spillway-* headers reach no upstream", config: demo, run: func(r *recorder) {
			id := r.e.InitializeHttpContext()
			r.act("pass-through headers", r.e.CallOnRequestHeaders(id, append([][2]string{{":method", "GET"},
				{":path", "/v1/models"}, {":authority", "spillway.local"}}, hostileSpillwayHeaders...), true))
			r.snapshot(id)
			r.e.CompleteHttpContext(id)
			id = r.e.InitializeHttpContext()
			r.act("routed headers", r.e.CallOnRequestHeaders(id, append(chatHeadersOf("/v1/chat/completions"), hostileSpillwayHeaders...), false))
			r.act("routed body", r.e.CallOnRequestBody(id, []byte(body), true))
			r.snapshot(id)
			r.e.CompleteHttpContext(id)
			failoverByCallout(r, body, hostileSpillwayHeaders...)
		}, check: func(t *testing.T, o observation) {
			for i, hs := range o.RequestHeaders {
				for _, kv := range hs {
					if strings.HasPrefix(kv[0], "x-spillway-") && kv[0] != "x-spillway-cluster" || kv[1] == "evil" {
						t.Errorf("stream %d: %s=%q reaches the upstream", i, kv[0], kv[1])
					}
				}
			}
			callouts := 0
			for _, a := range o.Actions {
				if strings.HasPrefix(a, "callout to ") {
					callouts++
					if strings.Contains(a, "evil") {
						t.Errorf("a callout carries a client's x-spillway-* header: %s", a)
					}
				}
			}
			if callouts != 1 || len(o.RequestHeaders) != 3 {
				t.Fatalf("%d callouts and %d streams, want 1 and 3: %v", callouts, len(o.RequestHeaders), o.Actions)
			}
		}},
		{name: "invalid policy refuses to start", config: []byte(`{"providers":[{"id":"p","profile":"apikey","cluster":"c","connections":[{"id":"c1"}]}],` +
			`"routes":[{"model":"m","targets":[{"provider":"nope"}]}],"resilience":{"modelLockout":{"baseCoolDownMs":1}}}`)},
		{name: "no policy refuses to start", config: nil},
	}, adminScenarios(demo)...) // admin_scenario_test.go
}

// observe runs a scenario on one emulator.
func observe(sc scenario, e emulator, local func(uint32) string, callouts func(uint32) []callout,
	logs func(level string) []string) observation {
	r := &recorder{e: e, local: local, callouts: callouts, obs: observation{Metrics: map[string]uint64{}, Logs: map[string][]string{}}}
	r.obs.Start = e.StartPlugin()
	if r.obs.Start == types.OnPluginStartStatusOK && sc.run != nil {
		sc.run(r)
		e.Tick() // counters reach Envoy's stats on the VM's tick
	}
	for _, m := range []string{"spillway_requests_total", "spillway_panics_total", "spillway_routed_total",
		"spillway_attempts_total", "spillway_failovers_total", "spillway_local_replies_total"} {
		if v, err := e.GetCounterMetric(m); err == nil {
			r.obs.Metrics[m] = v
		}
	}
	for _, level := range []string{"debug", "info", "warn", "error", "critical"} {
		if l := logs(level); len(l) > 0 {
			r.obs.Logs[level] = l
		}
	}
	return r.obs
}

func TestDifferentialProxytestVersusHostsim(t *testing.T) {
	wasm := hostsimtest.ReadModule(t, "build/spillway.wasm")
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			// Native: the filter's Go code under proxytest.
			native, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().
				WithVMContext(filter.NewVMContext()).WithPluginConfiguration(sc.config))
			// Envoy's response.code_details of an upstream's response, which hostsim answers
			// for the responses a scenario hands the filter and proxytest knows nothing of.
			if err := native.SetProperty([]string{"response", "code_details"}, []byte("via_upstream")); err != nil {
				t.Fatal(err)
			}
			nativeLogs := map[string]func() []string{"debug": native.GetDebugLogs, "info": native.GetInfoLogs,
				"warn": native.GetWarnLogs, "error": native.GetErrorLogs, "critical": native.GetCriticalLogs}
			want := observe(sc, native, func(id uint32) string {
				if lr := native.GetSentLocalResponse(id); lr != nil {
					return fmt.Sprintf("%d %s %q", lr.StatusCode, lr.Data, sorted(lr.Headers))
				}
				return ""
			}, func(id uint32) (out []callout) {
				for _, c := range native.GetCalloutAttributesFromContext(id) {
					out = append(out, callout{c.CalloutID, c.Upstream, c.Headers, c.Body})
				}
				return out
			}, func(l string) []string { return nativeLogs[l]() })
			reset()

			// Wasm: build/spillway.wasm under hostsim, one worker VM (proxytest has one).
			h := hostsimtest.New(t, wasm, hostsim.WithWorkers(1), hostsim.WithPluginConfiguration(sc.config))
			got := observe(sc, h, func(id uint32) string {
				if lr := h.GetSentLocalResponse(id); lr != nil {
					return fmt.Sprintf("%d %s %q", lr.StatusCode, lr.Data, sorted(lr.Headers))
				}
				return ""
			}, func(id uint32) (out []callout) {
				for _, c := range h.GetCalloutAttributesFromContext(id) {
					out = append(out, callout{c.CalloutID, c.Upstream, c.Headers, c.Body})
				}
				return out
			}, func(level string) []string { return vmLogs(h.Host, level) })

			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("proxytest (-) and hostsim (+) disagree:\n%s", diff)
			}
			if sc.check != nil {
				sc.check(t, got)
			}
			if sc.run != nil && len(got.Actions) == 0 {
				t.Fatal("scenario ran no steps: the plugin did not start")
			}
		})
	}
}

// vmLogs returns one VM's log lines at a level, the VM proxytest's single one corresponds
// to: worker 0 once the plugin runs, or the canary when it refused to start (Envoy
// configures the canary first and rejects the plugin there, so no worker ever starts).
func vmLogs(h *hostsim.Host, level string) []string {
	vm := "worker-0"
	if len(h.Workers()) == 0 {
		vm = "canary"
	}
	var out []string
	for _, e := range h.Logs() {
		// hostsim's own report of the failed start is not the guest's log.
		if e.VM == vm && strings.EqualFold(e.Level.String(), level) && !strings.HasPrefix(e.Message, "VM failed: hostsim:") {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestDifferentialEnvironment checks ${ENV} expansion from the VM environment: natively the
// filter reads the test process's environment, in wasm the WASI environ that Envoy fills
// from vm_config.environment_variables (hostsim.WithEnv). Both must start with the variable
// set, both must refuse without it and name the field and variable, and neither may log the
// value.
func TestDifferentialEnvironment(t *testing.T) {
	wasm := hostsimtest.ReadModule(t, "build/spillway.wasm")
	const secret = "sk-test-do-not-log-1234"
	config := []byte(`{"providers":[{"id":"openai","cluster":"openai","connections":[{"id":"a",` +
		`"credential":{"header":"authorization","value":"Bearer ${SPILLWAY_DIFF_KEY}"}}]}],` +
		`"routes":[{"model":"gpt-4o","targets":[{"provider":"openai"}]}]}`)
	for _, set := range []bool{true, false} {
		t.Run(fmt.Sprintf("variable set=%v", set), func(t *testing.T) {
			// The process environment is the native filter's VM environment: it is set, or
			// unset, here whatever the environment the tests run in (t.Setenv restores it).
			var opts []hostsim.Option
			t.Setenv("SPILLWAY_DIFF_KEY", secret)
			if set {
				opts = append(opts, hostsim.WithEnv("SPILLWAY_DIFF_KEY", secret))
			} else if err := os.Unsetenv("SPILLWAY_DIFF_KEY"); err != nil {
				t.Fatal(err)
			}
			native, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().
				WithVMContext(filter.NewVMContext()).WithPluginConfiguration(config))
			nativeStart := native.StartPlugin()
			nativeLogs := append(native.GetInfoLogs(), native.GetCriticalLogs()...)
			reset()

			h := hostsimtest.New(t, wasm, append(opts, hostsim.WithWorkers(1), hostsim.WithPluginConfiguration(config))...)
			wasmStart := h.StartPlugin()
			wasmLogs := append(vmLogs(h.Host, "info"), vmLogs(h.Host, "critical")...)

			want := types.OnPluginStartStatusFailed
			if set {
				want = types.OnPluginStartStatusOK
			}
			if nativeStart != want || wasmStart != want {
				t.Fatalf("start: native %v, wasm %v, want %v (logs %q)", nativeStart, wasmStart, want, wasmLogs)
			}
			if diff := cmp.Diff(nativeLogs, wasmLogs); diff != "" {
				t.Fatalf("logs differ (-native +wasm):\n%s", diff)
			}
			all := strings.Join(wasmLogs, "\n")
			if strings.Contains(all, secret) {
				t.Fatalf("a log line contains the credential: %q", all)
			}
			if !set && !strings.Contains(all, "providers[0].connections[0].credential.value") ||
				!set && !strings.Contains(all, "SPILLWAY_DIFF_KEY") {
				t.Fatalf("the refusal does not name the field and the variable: %q", all)
			}
		})
	}
}
