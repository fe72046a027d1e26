package hostsim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// Envoy's VMs: base (init only), canary (init + root start, then killed without
// on_done/on_delete), main-thread clone and N workers (full root lifecycle); init runs in
// each, so Go globals are per VM.
func TestVMTopology(t *testing.T) {
	h := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithWorkers(2),
		hostsim.WithEnv("PROBE_INIT", "init log 2 init ran"),
		hostsim.WithVMConfiguration([]byte("vm_start get_buffer 6 0 12\nvm_start get_buffer 7 0 9\nconfigure get_buffer 6 0 5")),
		hostsim.WithPluginConfiguration([]byte("configure get_buffer 7 0 9")))
	if !h.StartPlugin() {
		t.Fatal("start failed")
	}
	var inits []string
	for _, l := range h.Logs() {
		if l.Message == "init ran" {
			inits = append(inits, l.VM)
		}
	}
	if got, want := strings.Join(inits, ","), "base,canary,main,worker-0,worker-1"; got != want {
		t.Fatalf("init ran in %s, want %s", got, want)
	}
	for _, vm := range []string{"canary", "main", "worker-0", "worker-1"} {
		requireTrace(t, h.Host, vm,
			"cb context_create ctx=1 0",
			"cb vm_start ctx=1 79",
			"op get_buffer 6 0 12 -> Ok vm_start get",
			"op get_buffer 7 0 9 -> NotFound", // plugin config only during on_configure
			"cb configure ctx=1 26",
			"op get_buffer 6 0 5 -> NotFound", // VM config only during on_vm_start
			"op get_buffer 7 0 9 -> Ok configure")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	requireNoLine(t, h.Host, "canary", "cb done")
	requireNoLine(t, h.Host, "canary", "cb delete")
	for _, vm := range []string{"main", "worker-0", "worker-1"} {
		requireTrace(t, h.Host, vm, "cb done ctx=1", "cb delete ctx=1")
	}
}

// A root that refuses its configuration: the canary rejects the plugin, nothing else starts.
func TestStartRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string // VM and plugin configuration
		callback string // the callback that refused
	}{
		{"vm_start false", "vm_start ret 0", "proxy_on_vm_start"},
		{"configure false", "configure ret 0", "proxy_on_configure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hostsimtest.New(t, hostsimtest.Guest(t, "probe"), hostsim.WithVMConfiguration([]byte(tc.script)),
				hostsim.WithPluginConfiguration([]byte(tc.script)))
			if h.StartPlugin() {
				t.Fatal("plugin started")
			}
			raw, err := hostsim.New(hostsimtest.Guest(t, "probe"), hostsim.WithRuntime(hostsimtest.Runtime(t)),
				hostsim.WithVMConfiguration([]byte(tc.script)), hostsim.WithPluginConfiguration([]byte(tc.script)))
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			ok, err := raw.StartPlugin()
			if ok || !errors.Is(err, hostsim.ErrStartRefused) || !strings.Contains(err.Error(), "canary: "+tc.callback+" returned false") {
				t.Fatalf("start: %v, %v", ok, err)
			}
			if h.Host.Worker(0) != nil {
				t.Fatal("workers started after the canary refused")
			}
		})
	}
}
