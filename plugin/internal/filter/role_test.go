package filter

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// newRootHost starts a proxytest host whose plugin_root_id property is rootID (proxytest
// cannot answer an empty property; no property at all is what newHost gives).
func newRootHost(t *testing.T, rootID string, config []byte) (proxytest.HostEmulator, types.OnPluginStartStatus) {
	t.Helper()
	clk := manualclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	opt := proxytest.NewEmulatorOption().WithVMContext(&vmContext{timeNow: clk.Now}).
		WithPluginConfiguration(config).WithProperty([]string{"plugin_root_id"}, []byte(rootID))
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	return host, host.StartPlugin()
}

func TestRoleOfRootID(t *testing.T) {
	cases := []struct {
		rootID string // the plugin's root_id
		want   role   // the role it starts in
	}{
		{rootid.Upstream, roleUpstream},
		{rootid.Downstream, roleDownstream},
		{"", roleDownstream},                     // Envoy's answer when the plugin sets no root_id
		{"spillway.upstream.v2", roleDownstream}, // only the exact id
		{"SPILLWAY.UPSTREAM", roleDownstream},    // root ids are case-sensitive
		{"my-gateway", roleDownstream},           // any other root id keeps the downstream role
	}
	for _, c := range cases {
		if got := roleOf(c.rootID); got != c.want {
			t.Errorf("roleOf(%q) = %d, want %d", c.rootID, got, c.want)
		}
	}
}

func TestUpstreamRolePassesATryThroughUntouched(t *testing.T) {
	// A policy with a warning: the upstream role leaves warnings to the downstream plugin.
	// It fails over by callout (said explicitly: an unset via is router), so every try
	// passes through.
	mixed := testPolicy + `
  - model: mixed
    targets:
      - {provider: openai}
      - {provider: anthropic}
resilience:
  failover: {via: callout}
`
	host, status := newRootHost(t, rootid.Upstream, policyJSON(t, mixed))
	if status != types.OnPluginStartStatusOK {
		t.Fatalf("start: %v %v", status, host.GetCriticalLogs())
	}
	infos := host.GetInfoLogs()
	if len(infos) != 1 || !strings.Contains(infos[0], "upstream filter") || !strings.Contains(infos[0], "passes through") {
		t.Fatalf("info logs %q, want the one upstream role line", infos)
	}
	if w := host.GetWarnLogs(); len(w) != 0 {
		t.Errorf("warn logs %q: the downstream plugin logs the policy's warnings", w)
	}
	// Nothing per VM was started: no tick, no metric, no shared data (the creation guard, the
	// VM directory).
	if p := host.GetTickPeriod(); p != 0 {
		t.Errorf("tick period %d ms, want none", p)
	}
	if _, err := host.GetCounterMetric("spillway_requests_total"); err == nil {
		t.Error("the upstream role defined spillway_requests_total")
	}
	for _, key := range []string{state.KeyGuard.Key(), admission.DirectoryKey} {
		if _, _, err := proxywasm.GetSharedData(key); !errors.Is(err, types.ErrorStatusNotFound) {
			t.Errorf("shared data %s: %v, want not found", key, err)
		}
	}

	// A try: every callback continues and nothing it sees is changed.
	id := host.InitializeHttpContext()
	reqHeaders := chatHeaders("/v1/chat/completions", [2]string{"authorization", "Bearer client-key"},
		[2]string{"x-spillway-cluster", "openai"}, [2]string{"x-session-id", "s-1"})
	if a := host.CallOnRequestHeaders(id, reqHeaders, false); a != types.ActionContinue {
		t.Fatalf("request headers action %v, want Continue", a)
	}
	if got := host.GetCurrentRequestHeaders(id); !slices.Equal(got, reqHeaders) {
		t.Errorf("request headers %q, want %q", got, reqHeaders)
	}
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	if a := host.CallOnRequestBody(id, body, true); a != types.ActionContinue {
		t.Fatalf("request body action %v, want Continue", a)
	}
	if got := host.GetCurrentRequestBody(id); !bytes.Equal(got, body) {
		t.Errorf("request body %q, want the try's own", got)
	}
	respHeaders := [][2]string{{":status", "429"}, {"content-type", "application/json"}, {"retry-after", "5"}}
	if a := host.CallOnResponseHeaders(id, respHeaders, false); a != types.ActionContinue {
		t.Fatalf("response headers action %v, want Continue", a)
	}
	if got := host.GetCurrentResponseHeaders(id); !slices.Equal(got, respHeaders) {
		t.Errorf("response headers %q, want %q (no x-spillway-* on a try)", got, respHeaders)
	}
	respBody := []byte(`{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`)
	if a := host.CallOnResponseBody(id, respBody, true); a != types.ActionContinue {
		t.Fatalf("response body action %v, want Continue", a)
	}
	if got := host.GetCurrentResponseBody(id); !bytes.Equal(got, respBody) {
		t.Errorf("response body %q, want the provider's", got)
	}
	if r := host.GetSentLocalResponse(id); r != nil {
		t.Errorf("local reply %+v on a try", r)
	}
	host.CompleteHttpContext(id)
	host.Tick()
	if !host.FinishVM() {
		t.Error("plugin done: not finished")
	}
	if _, _, err := proxywasm.GetSharedData(state.KeyGuard.Key()); !errors.Is(err, types.ErrorStatusNotFound) {
		t.Errorf("shared data written by the end: %v", err)
	}
}

func TestUpstreamRoleRefusesABadPolicyAsTheDownstreamDoes(t *testing.T) {
	cases := []struct {
		name   string // what is wrong
		config string // plugin configuration
	}{
		{"no configuration", ``},
		{"not JSON", `{providers:`},
		{"unknown provider in a route", `{"providers":[{"id":"openai","profile":"apikey","cluster":"c","connections":[{"id":"a","credential":{"header":"authorization","value":"Bearer k"}}]}],
			"routes":[{"model":"gpt-4o","targets":[{"provider":"azur"}]}]}`},
	}
	// start starts a plugin under rootID and returns its status and logs (proxytest is one
	// host at a time: each is reset before the next).
	start := func(t *testing.T, rootID, config string) (st types.OnPluginStartStatus, critical, infos []string) {
		clk := manualclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
		opt := proxytest.NewEmulatorOption().WithVMContext(&vmContext{timeNow: clk.Now}).
			WithPluginConfiguration([]byte(config)).WithProperty([]string{"plugin_root_id"}, []byte(rootID))
		host, reset := proxytest.NewHostEmulator(opt)
		defer reset()
		st = host.StartPlugin()
		return st, host.GetCriticalLogs(), host.GetInfoLogs()
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, want, _ := start(t, rootid.Downstream, c.config)
			if st != types.OnPluginStartStatusFailed {
				t.Fatalf("downstream start %v, want failed", st)
			}
			st, got, infos := start(t, rootid.Upstream, c.config)
			if st != types.OnPluginStartStatusFailed {
				t.Fatalf("upstream start %v, want failed", st)
			}
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("upstream critical logs %q, want the downstream's %q", got, want)
			}
			if len(infos) != 0 {
				t.Errorf("a refused upstream plugin logged %q", infos)
			}
		})
	}
}

func TestOtherRootIDsKeepTheDownstreamRole(t *testing.T) {
	for _, id := range []string{rootid.Downstream, "my-gateway"} {
		t.Run(id, func(t *testing.T) {
			host, status := newRootHost(t, id, policyJSON(t, testPolicy))
			if status != types.OnPluginStartStatusOK {
				t.Fatalf("start: %v %v", status, host.GetCriticalLogs())
			}
			if logs := strings.Join(host.GetInfoLogs(), "\n"); !strings.Contains(logs, "policy loaded") || strings.Contains(logs, "upstream filter") {
				t.Fatalf("info logs %q, want the downstream start", logs)
			}
			if p := host.GetTickPeriod(); p != idleTickMs {
				t.Errorf("tick period %d, want %d", p, idleTickMs)
			}
			stream := host.InitializeHttpContext()
			if a := host.CallOnRequestHeaders(stream, chatHeaders("/v1/chat/completions"), false); a != types.ActionPause {
				t.Fatalf("request headers action %v, want Pause (held for the body)", a)
			}
			host.CallOnRequestBody(stream, []byte(`{"model":"gpt-4o","messages":[]}`), true)
			if got, _ := host.GetProperty([]string{"spillway_target"}); string(got) != "openai" {
				t.Errorf("spillway_target %q, want openai", got)
			}
			host.CompleteHttpContext(stream)
		})
	}
}
