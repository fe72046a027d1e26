package filter

import (
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// demoPolicyJSON is the embedded demo policy as the plugin receives it (JSON).
func demoPolicyJSON(t *testing.T) []byte {
	t.Helper()
	data, err := policyfile.ToJSON(examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// newHost starts a proxytest host with the given plugin configuration. proxytest keeps
// package-level state, so these tests do not run in parallel.
func newHost(t *testing.T, config []byte, hook func(string)) (proxytest.HostEmulator, types.OnPluginStartStatus) {
	t.Helper()
	opt := proxytest.NewEmulatorOption().WithVMContext(&vmContext{beforeCallback: hook}).WithPluginConfiguration(config)
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	return host, host.StartPlugin()
}

func header(hs [][2]string, name string) (string, bool) {
	for _, kv := range hs {
		if strings.EqualFold(kv[0], name) {
			return kv[1], true
		}
	}
	return "", false
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

func TestPassThroughAddsSpillwayHeaders(t *testing.T) {
	host, status := newHost(t, demoPolicyJSON(t), nil)
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v, logs %v", status, host.GetCriticalLogs())
	}
	id := host.InitializeHttpContext()
	reqHeaders := [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "localhost"},
		{"x-session-id", "s-1"}, {"x-codex-session-id", "s-2"}, {"x-omniroute-session", "s-3"}, {"content-type", "application/json"}}
	if a := host.CallOnRequestHeaders(id, reqHeaders, false); a != types.ActionContinue {
		t.Fatalf("request headers action %v", a)
	}
	for _, name := range []string{"x-session-id", "x-codex-session-id", "x-omniroute-session"} {
		if v, ok := header(host.GetCurrentRequestHeaders(id), name); ok {
			t.Errorf("session header %s=%q is forwarded upstream", name, v)
		}
	}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	if a := host.CallOnRequestBody(id, []byte(body[:10]), false); a != types.ActionContinue {
		t.Fatalf("body action %v", a)
	}
	host.CallOnRequestBody(id, []byte(body[10:]), true)
	if a := host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false); a != types.ActionContinue {
		t.Fatalf("response headers action %v", a)
	}
	resp := host.GetCurrentResponseHeaders(id)
	for name, want := range map[string]string{
		HeaderModel: "gpt-4o", HeaderProvider: unrouted, HeaderConnection: unrouted, HeaderAttempts: "1",
	} {
		if got, _ := header(resp, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	host.CompleteHttpContext(id)
	if n, err := host.GetCounterMetric("spillway_requests_total"); err != nil || n != 1 {
		t.Errorf("spillway_requests_total = %d, %v; want 1", n, err)
	}
}

func TestPanicInCallbackFailsOpen(t *testing.T) {
	host, status := newHost(t, demoPolicyJSON(t), func(cb string) {
		if cb == "request headers" {
			panic("boom")
		}
	})
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v", status)
	}
	id := host.InitializeHttpContext()
	if a := host.CallOnRequestHeaders(id, [][2]string{{":path", "/"}, {":method", "GET"}}, true); a != types.ActionContinue {
		t.Fatalf("action after panic = %v, want Continue (fail open)", a)
	}
	if n, _ := host.GetCounterMetric("spillway_panics_total"); n != 1 {
		t.Errorf("spillway_panics_total = %d, want 1", n)
	}
	if logs := strings.Join(host.GetErrorLogs(), "\n"); !strings.Contains(logs, "panic in request headers") {
		t.Errorf("error logs %q do not report the panic", logs)
	}
}

func TestUnsafeModelNamesAreNotEchoed(t *testing.T) {
	cases := []struct {
		name string // what is wrong with the body's model
		body string // request body
		want string // x-spillway-model
	}{
		{"ordinary", `{"model":"claude-sonnet-4"}`, "claude-sonnet-4"},
		{"unicode is fine", `{"model":"模型-1"}`, "模型-1"},
		{"CR LF injection", `{"model":"gpt-4o\r\nset-cookie: x=1"}`, unrouted},
		{"control byte", `{"model":"a\u0000b"}`, unrouted},
		{"too long", `{"model":"` + strings.Repeat("m", maxModelLength+1) + `"}`, unrouted},
		{"not a string", `{"model":{"a":1}}`, unrouted},
		{"missing", `{"messages":[]}`, unrouted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, status := newHost(t, demoPolicyJSON(t), nil)
			if status != types.OnPluginStartStatusOK {
				t.Fatal(status)
			}
			id := host.InitializeHttpContext()
			host.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}}, false)
			host.CallOnRequestBody(id, []byte(c.body), true)
			host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
			if got, _ := header(host.GetCurrentResponseHeaders(id), HeaderModel); got != c.want {
				t.Fatalf("%s = %q, want %q", HeaderModel, got, c.want)
			}
		})
	}
}
