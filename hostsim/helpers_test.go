package hostsim_test

import (
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// probe starts the probe guest with a script as its plugin configuration.
func probe(t *testing.T, script string, opts ...hostsim.Option) *hostsimtest.Host {
	t.Helper()
	all := append([]hostsim.Option{hostsim.WithPluginConfiguration([]byte(strings.TrimSpace(script)))}, opts...)
	h := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), all...)
	if !h.StartPlugin() {
		t.Fatalf("plugin did not start; logs:\n%s", dump(h.Host))
	}
	h.ResetLogs()
	return h
}

// trace returns the probe's "cb ..." and "op ..." lines logged by one VM, in order.
func trace(h *hostsim.Host, vm string) []string {
	var out []string
	for _, l := range h.Logs() {
		if l.VM == vm && (strings.HasPrefix(l.Message, "cb ") || strings.HasPrefix(l.Message, "op ")) {
			out = append(out, l.Message)
		}
	}
	return out
}

func dump(h *hostsim.Host) string {
	var b strings.Builder
	for _, l := range h.Logs() {
		b.WriteString(l.Level.String() + " " + l.VM + ": " + l.Message + "\n")
	}
	return b.String()
}

// requireTrace fails unless lines starting with each of want appear in vm's trace, in order.
func requireTrace(t *testing.T, h *hostsim.Host, vm string, want ...string) {
	t.Helper()
	got := trace(h, vm)
	i := 0
	for _, g := range got {
		if i < len(want) && strings.HasPrefix(g, want[i]) {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("%s: missing %q (in order) in trace:\n  %s", vm, want[i], strings.Join(got, "\n  "))
	}
}

// requireNoLine fails if some line of vm's trace contains substr.
func requireNoLine(t *testing.T, h *hostsim.Host, vm, substr string) {
	t.Helper()
	for _, g := range trace(h, vm) {
		if strings.Contains(g, substr) {
			t.Fatalf("%s: unexpected %q in trace:\n  %s", vm, g, strings.Join(trace(h, vm), "\n  "))
		}
	}
}

func hdrs(kv ...string) [][2]string {
	var out [][2]string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, [2]string{kv[i], kv[i+1]})
	}
	return out
}

var getReq = hdrs(":method", "GET", ":path", "/v1/models?x=1", ":authority", "api.example", ":scheme", "https")
