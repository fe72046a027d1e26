package filter

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// testPolicy: two OpenAI keys, an OpenAI-compatible backup with a mapped model, Anthropic.
const testPolicy = `
providers:
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}
      - {id: key-b, credential: {header: authorization, value: "Bearer sk-b"}}
  - id: backup
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
  - model: mapped
    targets:
      - {provider: backup, model: openai/gpt-4o-mini}
  - model: "claude-*"
    targets:
      - {provider: anthropic}
`

func policyJSON(t testing.TB, yaml string) []byte {
	t.Helper()
	data, err := policyfile.ToJSON([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// newHost starts a proxytest host with the given plugin configuration. proxytest keeps
// package-level state, so these tests do not run in parallel.
func newHost(t *testing.T, config []byte, hook func(string)) (proxytest.HostEmulator, types.OnPluginStartStatus) {
	h, _, st := newClockedHost(t, config, hook)
	return h, st
}

func newClockedHost(t testing.TB, config []byte, hook func(string)) (proxytest.HostEmulator, *manualclock.Clock, types.OnPluginStartStatus) {
	t.Helper()
	clk := manualclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	opt := proxytest.NewEmulatorOption().WithVMContext(&vmContext{beforeCallback: hook, timeNow: clk.Now}).WithPluginConfiguration(config)
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	return host, clk, host.StartPlugin()
}

func header(hs [][2]string, name string) (string, bool) {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1], true
		}
	}
	return "", false
}

// chatHeaders are a client's request headers for path.
func chatHeaders(path string, extra ...[2]string) [][2]string {
	return append([][2]string{{":method", "POST"}, {":path", path}, {":authority", "spillway.local"},
		{"content-type", "application/json"}}, extra...)
}

func TestStartRefusesInvalidPolicyWithFieldPath(t *testing.T) {
	cases := []struct {
		name     string   // what is wrong
		config   string   // plugin configuration
		wantLogs []string // fragments the critical log must contain
	}{
		{"no configuration", ``, []string{"no policy configured"}},
		{"not JSON", `{providers:`, []string{"invalid policy"}},
		{"unknown field", `{"providers":[],"routes":[],"resilience":{"modelLockout":{"baseCoolDownMs":1}}}`,
			[]string{"resilience.modelLockout.baseCoolDownMs"}},
		{"unknown provider in a route", `{"providers":[{"id":"openai","profile":"apikey","cluster":"c","connections":[{"id":"a","credential":{"header":"authorization","value":"Bearer k"}}]}],
			"routes":[{"model":"gpt-4o","targets":[{"provider":"azur"}]}]}`,
			[]string{`routes[0].targets[0].provider`, `"azur"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, status := newHost(t, []byte(c.config), nil)
			if status != types.OnPluginStartStatusFailed {
				t.Fatalf("start status %v, want failed", status)
			}
			logs := strings.Join(host.GetCriticalLogs(), "\n")
			for _, want := range c.wantLogs {
				if !strings.Contains(logs, want) {
					t.Errorf("critical log %q does not mention %q", logs, want)
				}
			}
		})
	}
}

func TestStartNeverLogsCredentials(t *testing.T) {
	// A policy whose only problem is elsewhere must not echo a credential in its errors.
	config := `{"providers":[{"id":"openai","profile":"nope","cluster":"c","connections":[{"id":"a","credential":{"header":"authorization","value":"Bearer sk-secret-123"}}]}],"routes":[]}`
	host, status := newHost(t, []byte(config), nil)
	if status != types.OnPluginStartStatusFailed {
		t.Fatalf("start status %v, want failed", status)
	}
	for _, l := range append(host.GetCriticalLogs(), host.GetErrorLogs()...) {
		if strings.Contains(l, "sk-secret-123") {
			t.Fatalf("log leaks the credential: %q", l)
		}
	}
}

func TestStartLogsPolicyWarnings(t *testing.T) {
	// A route whose targets speak two APIs is valid but doubtful: the plugin starts and says so.
	mixed := testPolicy + `
  - model: mixed
    targets:
      - {provider: openai}
      - {provider: anthropic}
`
	host, status := newHost(t, policyJSON(t, mixed), nil)
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v %v", status, host.GetCriticalLogs())
	}
	if logs := strings.Join(host.GetWarnLogs(), "\n"); !strings.Contains(logs, "policy warning") || !strings.Contains(logs, "routes[3]") {
		t.Fatalf("warn logs %q do not carry the policy warning", logs)
	}
}

func TestRoutedRequestGetsItsTarget(t *testing.T) {
	host, status := newHost(t, policyJSON(t, testPolicy), nil)
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v, logs %v", status, host.GetCriticalLogs())
	}
	id := host.InitializeHttpContext()
	hs := chatHeaders("/v1/chat/completions?x=1",
		[2]string{"authorization", "Bearer client-key"}, [2]string{"x-api-key", "client-other-key"},
		[2]string{"x-spillway-cluster", "attacker-chosen"}, [2]string{"accept-encoding", "gzip"},
		[2]string{"x-session-id", "s-1"}, [2]string{"x-codex-session-id", "s-2"}, [2]string{"x-omniroute-session", "s-3"})
	if a := host.CallOnRequestHeaders(id, hs, false); a != types.ActionPause {
		t.Fatalf("request headers action %v, want Pause (held until the body is read)", a)
	}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	if a := host.CallOnRequestBody(id, []byte(body[:10]), false); a != types.ActionPause {
		t.Fatalf("first body chunk action %v, want Pause (buffered)", a)
	}
	if a := host.CallOnRequestBody(id, []byte(body[10:]), true); a != types.ActionContinue {
		t.Fatalf("last body chunk action %v, want Continue; local reply %+v", a, host.GetSentLocalResponse(id))
	}
	req := host.GetCurrentRequestHeaders(id)
	for name, want := range map[string]string{"authorization": "Bearer sk-a", ":authority": "api.openai.com"} {
		if got, _ := header(req, name); got != want {
			t.Errorf("upstream %s = %q, want %q", name, got, want)
		}
	}
	// The cluster is named in filter state, which the route's matcher reads; no header
	// names it (the client's is removed).
	if got, err := host.GetProperty([]string{"spillway_target"}); err != nil || string(got) != "openai" {
		t.Errorf("filter state spillway_target = %q, %v; want openai", got, err)
	}
	for _, name := range []string{"x-spillway-cluster", "x-api-key", "accept-encoding", "x-session-id", "x-codex-session-id", "x-omniroute-session"} {
		if v, ok := header(req, name); ok {
			t.Errorf("%s=%q reaches the upstream", name, v)
		}
	}
	if a := host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false); a != types.ActionContinue {
		t.Fatalf("response headers action %v", a)
	}
	resp := host.GetCurrentResponseHeaders(id)
	for name, want := range map[string]string{HeaderProvider: "openai", HeaderConnection: "key-a", HeaderModel: "gpt-4o", HeaderAttempts: "1"} {
		if got, _ := header(resp, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	host.CallOnResponseBody(id, []byte(`{"id":"x"}`), true)
	host.CompleteHttpContext(id)
	host.Tick() // a VM's counts reach Envoy's counters on its tick
	for name, want := range map[string]uint64{"spillway_requests_total": 1, "spillway_routed_total": 1, "spillway_attempts_total": 1} {
		if n, err := host.GetCounterMetric(name); err != nil || n != want {
			t.Errorf("%s = %d, %v; want %d", name, n, err, want)
		}
	}
}

// A policy that routes by header (routing.clusterHeader, as istio.Render writes it for
// Istio's VirtualServices) names the cluster in that header and writes no filter state:
// one host call either way.
func TestClusterByHeaderWhenThePolicyNamesOne(t *testing.T) {
	host, status := newHost(t, policyJSON(t, testPolicy+"routing: {clusterHeader: X-Route-To}\n"), nil)
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v %v", status, host.GetCriticalLogs())
	}
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions", [2]string{"x-route-to", "anthropic"}), false)
	if a := host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o","messages":[]}`), true); a != types.ActionContinue {
		t.Fatalf("body action %v; local reply %+v", a, host.GetSentLocalResponse(id))
	}
	if got, _ := header(host.GetCurrentRequestHeaders(id), "x-route-to"); got != "openai" {
		t.Errorf("x-route-to = %q, want openai (the client's anthropic replaced)", got)
	}
	if got, err := host.GetProperty([]string{"spillway_target"}); err == nil {
		t.Errorf("filter state spillway_target = %q, want none when routing by header", got)
	}
}

// A target with neither an authority nor a credential edits no request header, so nothing
// would clear the route cache the connection manager filled before the filter ran: the
// filter clears it itself (clear_route_cache), and only then.
func TestTargetWithoutHeadersClearsTheRouteCache(t *testing.T) {
	const local = `
providers:
  - id: ollama
    profile: local
    cluster: ollama
    connections: [{id: local}]
  - id: openai
    cluster: openai
    authority: api.openai.com
    connections: [{id: key-a, credential: {header: authorization, value: "Bearer sk-a"}}]
routes:
  - {model: llama3, targets: [{provider: ollama}]}
  - {model: gpt-4o, targets: [{provider: openai}]}
`
	host, status := newHost(t, policyJSON(t, local), nil)
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v %v", status, host.GetCriticalLogs())
	}
	clears := 0
	host.RegisterForeignFunction("clear_route_cache", func([]byte) []byte { clears++; return nil })
	for _, tc := range []struct {
		model, cluster string
		clears         int // clear_route_cache calls after the request
	}{
		{"llama3", "ollama", 1}, // no header written: the filter clears the cache
		{"gpt-4o", "openai", 1}, // the credential write clears it: no call of its own
	} {
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), false)
		if a := host.CallOnRequestBody(id, []byte(`{"model":"`+tc.model+`","messages":[]}`), true); a != types.ActionContinue {
			t.Fatalf("%s: body action %v; local reply %+v", tc.model, a, host.GetSentLocalResponse(id))
		}
		if got, _ := host.GetProperty([]string{"spillway_target"}); string(got) != tc.cluster {
			t.Errorf("%s: spillway_target %q, want %q", tc.model, got, tc.cluster)
		}
		if clears != tc.clears {
			t.Errorf("%s: clear_route_cache called %d times in all, want %d", tc.model, clears, tc.clears)
		}
		host.CompleteHttpContext(id)
	}
}

func TestTargetModelIsWrittenIntoTheBody(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), nil)
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions", [2]string{"content-length", "52"}), false)
	body := `{"model":"mapped","messages":[],"note":"mapped"}`
	if a := host.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
		t.Fatalf("action %v, local reply %+v", a, host.GetSentLocalResponse(id))
	}
	sent := host.GetCurrentRequestBody(id)
	if got := gjson.GetBytes(sent, "model").Str; got != "openai/gpt-4o-mini" {
		t.Fatalf("upstream body model %q in %s", got, sent)
	}
	if got := gjson.GetBytes(sent, "note").Str; got != "mapped" {
		t.Fatalf("other fields changed: %s", sent)
	}
	if cl, _ := header(host.GetCurrentRequestHeaders(id), "content-length"); cl != strconv.Itoa(len(sent)) {
		t.Fatalf("content-length %q for a body of %d bytes", cl, len(sent))
	}
}

func TestOtherPathsPassThrough(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), nil)
	cases := []struct {
		name    string      // the request
		headers [][2]string // its headers
	}{
		{"models list", [][2]string{{":method", "GET"}, {":path", "/v1/models"}, {":authority", "a"}}},
		{"POST elsewhere", chatHeaders("/healthz")},
		{"GET on an LLM path", [][2]string{{":method", "GET"}, {":path", "/v1/responses"}, {":authority", "a"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := host.InitializeHttpContext()
			hs := append(c.headers, [2]string{"x-spillway-cluster", "chosen"}, [2]string{"x-session-id", "s"},
				[2]string{"authorization", "Bearer client"})
			if a := host.CallOnRequestHeaders(id, hs, false); a != types.ActionContinue {
				t.Fatalf("action %v, want Continue without a pause", a)
			}
			req := host.GetCurrentRequestHeaders(id)
			for _, name := range []string{"x-spillway-cluster", "x-session-id"} {
				if _, ok := header(req, name); ok {
					t.Errorf("%s reaches the upstream", name)
				}
			}
			if v, _ := header(req, "authorization"); v != "Bearer client" {
				t.Errorf("authorization of a pass-through request changed to %q", v)
			}
			if a := host.CallOnRequestBody(id, []byte("data"), true); a != types.ActionContinue {
				t.Fatalf("body action %v", a)
			}
			host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true)
			if _, ok := header(host.GetCurrentResponseHeaders(id), HeaderProvider); ok {
				t.Error("a pass-through response carries x-spillway headers")
			}
			host.CompleteHttpContext(id)
		})
	}
}

func TestBadRequestsGetTypedReplies(t *testing.T) {
	cases := []struct {
		name   string // what is wrong
		body   string // request body ("" = none)
		status uint32 // expected status
		code   string // expected error.code
	}{
		{"no body", "", 400, "invalid_request"},
		{"not JSON", "{model", 400, "invalid_request"},
		{"no model", `{"messages":[]}`, 400, "invalid_request"},
		{"model not a string", `{"model":7}`, 400, "invalid_request"},
		{"CR LF in the model", `{"model":"gpt-4o\r\nx: y"}`, 400, "invalid_request"},
		{"no route", `{"model":"llama-3"}`, 404, "model_not_found"},
		{"too large", `{"model":"gpt-4o","pad":"` + strings.Repeat("x", 9<<20) + `"}`, 413, "request_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, _ := newHost(t, policyJSON(t, testPolicy), nil)
			id := host.InitializeHttpContext()
			host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), c.body == "")
			if c.body != "" {
				host.CallOnRequestBody(id, []byte(c.body), true)
			}
			lr := host.GetSentLocalResponse(id)
			if lr == nil {
				t.Fatal("no local reply")
			}
			if lr.StatusCode != c.status || gjson.GetBytes(lr.Data, "error.code").Str != c.code {
				t.Fatalf("reply %d %s, want %d %s", lr.StatusCode, lr.Data, c.status, c.code)
			}
			if ct, _ := header(lr.Headers, "content-type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			if v, _ := header(lr.Headers, HeaderAttempts); v != "0" {
				t.Errorf("%s = %q on a reply no attempt was made for", HeaderAttempts, v)
			}
		})
	}
}

func TestFailoverRetriesTheNextCandidateWithACallout(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), nil)
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), false)
	host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o","messages":[]}`), true)
	// key-a answers 429 with a long Retry-After: the response is held and key-b is tried.
	if a := host.CallOnResponseHeaders(id, [][2]string{{":status", "429"}, {"retry-after", "120"}, {"content-type", "application/json"}}, false); a != types.ActionPause {
		t.Fatalf("error response headers action %v, want Pause (held)", a)
	}
	if a := host.CallOnResponseBody(id, []byte(`{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`), true); a != types.ActionPause {
		t.Fatalf("error body action %v, want Pause (failing over)", a)
	}
	callouts := host.GetCalloutAttributesFromContext(id)
	if len(callouts) != 1 {
		t.Fatalf("%d callouts, want 1", len(callouts))
	}
	c := callouts[0]
	if c.Upstream != "openai" {
		t.Fatalf("callout to %q, want openai (key-b)", c.Upstream)
	}
	if v, _ := header(c.Headers, "authorization"); v != "Bearer sk-b" {
		t.Fatalf("callout credential %q, want key-b's", v)
	}
	host.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"x-request-id", "r"}},
		nil, []byte(`{"id":"from-b"}`))
	lr := host.GetSentLocalResponse(id)
	if lr == nil || lr.StatusCode != 200 || string(lr.Data) != `{"id":"from-b"}` {
		t.Fatalf("final reply %+v, want key-b's 200", lr)
	}
	for name, want := range map[string]string{HeaderConnection: "key-b", HeaderAttempts: "2", "content-type": "application/json", "x-request-id": "r"} {
		if got, _ := header(lr.Headers, name); got != want {
			t.Errorf("reply %s = %q, want %q", name, got, want)
		}
	}
	host.Tick()
	if n, _ := host.GetCounterMetric("spillway_failovers_total"); n != 1 {
		t.Errorf("failovers = %d", n)
	}
}

func TestMissingOptionIsDetectedNotHung(t *testing.T) {
	host, clk, _ := newClockedHost(t, policyJSON(t, testPolicy), nil)
	// Without allow_on_headers_stop_iteration the held request never gets a body callback.
	first, second := host.InitializeHttpContext(), host.InitializeHttpContext()
	host.CallOnRequestHeaders(first, chatHeaders("/v1/chat/completions"), false)
	host.CallOnRequestHeaders(second, chatHeaders("/v1/chat/completions"), false)
	clk.Advance(9 * time.Second)
	host.Tick()
	if lr := host.GetSentLocalResponse(first); lr != nil {
		t.Fatalf("answered before the bound: %+v", lr)
	}
	clk.Advance(2 * time.Second)
	host.Tick()
	for _, id := range []uint32{first, second} {
		lr := host.GetSentLocalResponse(id)
		if lr == nil || lr.StatusCode != 500 || gjson.GetBytes(lr.Data, "error.code").Str != "spillway_misconfigured" ||
			!strings.Contains(string(lr.Data), "allow_on_headers_stop_iteration") {
			t.Fatalf("stream %d: %+v, want 500 spillway_misconfigured naming the option", id, lr)
		}
	}
	if n := len(host.GetCriticalLogs()); n != 1 {
		t.Fatalf("%d critical logs, want the detection logged once per VM: %q", n, host.GetCriticalLogs())
	}
	if n, _ := host.GetCounterMetric("spillway_misconfigured_total"); n != 2 {
		t.Fatalf("misconfigured = %d, want 2", n)
	}
}

func TestABodyCallbackProvesTheOption(t *testing.T) {
	host, clk, _ := newClockedHost(t, policyJSON(t, testPolicy), nil)
	proof := host.InitializeHttpContext()
	host.CallOnRequestHeaders(proof, chatHeaders("/v1/chat/completions"), false)
	host.CallOnRequestBody(proof, []byte(`{"model":`), false) // a slow upload: more to come
	slow := host.InitializeHttpContext()
	host.CallOnRequestHeaders(slow, chatHeaders("/v1/chat/completions"), false)
	clk.Advance(time.Minute)
	host.Tick()
	for _, id := range []uint32{proof, slow} {
		if lr := host.GetSentLocalResponse(id); lr != nil {
			t.Fatalf("stream %d answered %d after the option was proven: no false alarms on slow uploads", id, lr.StatusCode)
		}
	}
}

func TestPanicInCallbackFailsOpen(t *testing.T) {
	host, status := newHost(t, policyJSON(t, testPolicy), func(cb string) {
		if cb == "request body" {
			panic("boom")
		}
	})
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v", status)
	}
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), false)
	if a := host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o"}`), true); a != types.ActionContinue {
		t.Fatalf("action after panic = %v, want Continue (fail open)", a)
	}
	host.Tick()
	if n, _ := host.GetCounterMetric("spillway_panics_total"); n != 1 {
		t.Errorf("spillway_panics_total = %d, want 1", n)
	}
	if logs := strings.Join(host.GetErrorLogs(), "\n"); !strings.Contains(logs, "panic in request body") {
		t.Errorf("error logs %q do not report the panic", logs)
	}
	if a := host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, true); a != types.ActionContinue {
		t.Fatalf("response after the panic: %v", a)
	}
}

func TestLiveKeys(t *testing.T) {
	// The key layout table of the README's shared-state section: leases, tickets, pools,
	// turns, decks, pins and the directory are live; account and upstream facts and the
	// generation are cached; a key of the old layout is nothing of ours.
	const a, n = "0123456789abcdef", "fedcba9876543210" // an account and a namespace id
	for key, live := range map[string]bool{
		"spw2:adl:" + a: true, "spw2:adt:" + n + ":" + a: true, "spw2:adg:" + n: true, "spw2:adp:" + n + ":openai": true,
		"spw2:srr:" + n + ":gpt-4o": true, "spw2:sdk:" + n + ":gpt-4o": true, "spw2:aff:" + n + ":12": true,
		admission.DirectoryKey: true, "spw2:vms": true, "spw2:rck:" + a: true, "spw2:rct": true, "spw2:ccp:" + a: false,
		"spw2:brk:" + a: false, "spw2:pcw:" + a: false, "spw2:pcb:" + a: false, "spw2:ccd:" + a: false,
		"spw2:mli:" + a: false, "spw2:mlk:" + a + ":exact:gpt-4o": false, "spw2:gen": false, "spw2:": false,
		"spw1:adm:c:6:openai:a": false, "spw1:sel:rr:gpt-4o": false,
	} {
		if got := isLiveKey(key); got != live {
			t.Errorf("isLiveKey(%q) = %v, want %v", key, got, live)
		}
	}
}

func TestAPanicInATickPassesTheWaitingRequestThrough(t *testing.T) {
	capped := `
providers:
  - id: openai
    cluster: openai
    connections:
      - {id: key-a, credential: {header: authorization, value: "Bearer sk-a"}, maxConcurrent: 1}
routes:
  - model: gpt-4o
    targets: [{provider: openai}]
`
	var boom bool
	host, _, _ := newClockedHost(t, policyJSON(t, capped), func(cb string) {
		if boom && cb == "tick" {
			panic("tick boom")
		}
	})
	busy, waiting := host.InitializeHttpContext(), host.InitializeHttpContext()
	for _, id := range []uint32{busy, waiting} {
		host.CallOnRequestHeaders(id, chatHeaders("/v1/chat/completions"), false)
		host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o"}`), true)
	}
	if a := host.GetCurrentHttpStreamAction(waiting); a != types.ActionPause {
		t.Fatalf("second request %v, want it queued (paused)", a)
	}
	boom = true
	host.Tick()
	if a := host.GetCurrentHttpStreamAction(waiting); a != types.ActionContinue {
		t.Fatalf("after a panic in the tick the waiting request is %v: it must go on, not hang", a)
	}
	if logs := strings.Join(host.GetErrorLogs(), "\n"); !strings.Contains(logs, "panic in tick") {
		t.Fatalf("error logs %q", logs)
	}
}
