package hostsim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// Two HTTP filters on one vm_config share each VM, as Envoy shares it among the plugins of
// one vm key: a canary per plugin, then on every VM a root context per plugin (its own
// on_vm_start and on_configure), each answering its own plugin_root_id and plugin_name,
// ticking at its own period, and owning its callouts and queue registrations. A request
// for the second plugin's filter gets a stream context under the second root.
func TestPluginsShareTheVM(t *testing.T) {
	first := `
configure tick_period 100
tick get_property plugin_root_id
request_headers get_property plugin_name
request_headers enqueue $queue from-first
`
	second := `
configure register_queue q2
configure tick_period 250
tick get_property plugin_root_id
tick http_call svc 0 :method=GET,:path=/,:authority=svc -
http_call_response get_property plugin_root_id
queue_ready dequeue $queue
request_headers get_property plugin_name
request_headers local_response 200 - from-second -
`
	h := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithRootID("r1"), hostsim.WithPluginName("first"),
		hostsim.WithPluginConfiguration([]byte(strings.TrimSpace(first))),
		hostsim.WithPlugin(hostsim.PluginConfig{Name: "second", RootID: "r2", Configuration: []byte(strings.TrimSpace(second))}),
		hostsim.WithCalloutHandler(func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
			return &hostsim.CalloutResponse{Headers: hdrs(":status", "200")}
		}),
		hostsim.WithUpstream(echoUpstream(nil)))
	if !h.StartPlugin() {
		t.Fatalf("plugins did not start:\n%s", dump(h.Host))
	}
	var canaries int
	for _, l := range h.Logs() {
		if l.VM == "canary" && strings.HasPrefix(l.Message, "cb configure ctx=1") {
			canaries++ // each canary starts one plugin, as root context 1
		}
	}
	if canaries != 2 {
		t.Errorf("%d canaries configured a plugin, want one per plugin (2)", canaries)
	}
	for _, vm := range []string{"main", "worker-0"} {
		requireTrace(t, h.Host, vm,
			"cb context_create ctx=1 0", "cb vm_start ctx=1", "cb configure ctx=1",
			"cb context_create ctx=2 0", "cb vm_start ctx=2", "cb configure ctx=2", "op register_queue q2 -> Ok")
	}
	h.ResetLogs()
	h.Advance(250 * time.Millisecond)
	got := map[string]int{}
	for _, l := range trace(h.Host, "worker-0") {
		if strings.HasPrefix(l, "cb tick") {
			got[l]++
		}
	}
	if got["cb tick ctx=1"] != 2 || got["cb tick ctx=2"] != 1 {
		t.Errorf("ticks %v; want root 1 twice (100 ms) and root 2 once (250 ms)", got)
	}
	requireTrace(t, h.Host, "worker-0", "cb tick ctx=1", "op get_property plugin_root_id -> Ok r1")
	requireTrace(t, h.Host, "worker-0", "cb tick ctx=2", "op get_property plugin_root_id -> Ok r2",
		"op http_call svc 0", "cb http_call_response ctx=2", "op get_property plugin_root_id -> Ok r2")

	resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Plugin: "second"})
	if resp.StatusCode != 200 || string(resp.Body) != "from-second" || resp.Upstream != nil {
		t.Fatalf("second plugin's request: %d %q (upstream %v), want its local reply", resp.StatusCode, resp.Body, resp.Upstream != nil)
	}
	requireTrace(t, h.Host, "worker-0", "cb context_create ctx=3 2", "op get_property plugin_name -> Ok second")
	resp = h.RunHTTP(&hostsim.Request{Headers: getReq})
	if resp.StatusCode != 200 || resp.Upstream == nil {
		t.Fatalf("first plugin's request: %d, upstream %v", resp.StatusCode, resp.Upstream != nil)
	}
	requireTrace(t, h.Host, "worker-0", "cb context_create ctx=4 1", "op get_property plugin_name -> Ok first",
		"op enqueue", "cb queue_ready ctx=2", "op dequeue $queue -> Ok from-first")

	if _, err := h.Worker(0).StartHTTP(&hostsim.Request{Headers: getReq, Plugin: "third"}); !errors.Is(err, hostsim.ErrNoPlugin) {
		t.Fatalf("a request for an unknown plugin: %v, want ErrNoPlugin", err)
	}
}

// Two plugins of one name cannot be told apart by Request.Plugin: New refuses them.
func TestPluginNamesAreUnique(t *testing.T) {
	p := hostsim.PluginConfig{Name: "x"}
	if _, err := hostsim.New(hostsimtest.Guest(t, "probe"), hostsim.WithPlugin(p), hostsim.WithPlugin(p)); err == nil {
		t.Fatal("two plugins named x accepted")
	}
}
