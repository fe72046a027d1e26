package envoycheck

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

func hostTrace(t *testing.T, s Scenario) Trace {
	t.Helper()
	tr, err := RunHostsim(hostsimtest.Guest(t, "probe"), s, hostsim.WithRuntime(hostsimtest.Runtime(t)))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func scenario(t *testing.T, name string) Scenario {
	t.Helper()
	for _, s := range Scenarios {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no scenario %q", name)
	return Scenario{}
}

// Every scenario's bootstrap passes Envoy's schema as go-control-plane has it, survives the
// YAML written for Envoy, and hands the probe the scenario's script as its configuration.
func TestBootstrapValidates(t *testing.T) {
	for _, s := range Scenarios {
		b, err := Bootstrap(s, "/build/guests/probe.wasm", Addrs{Listen: "127.0.0.1:10000", Admin: "127.0.0.1:9901", Upstream: "127.0.0.1:8080"})
		if err != nil {
			t.Fatal(err)
		}
		if err := envoy.Validate(b); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		yaml, err := envoy.MarshalYAML(b)
		if err != nil {
			t.Fatal(err)
		}
		var back bootstrapv3.Bootstrap
		if err := envoy.UnmarshalYAML(yaml, &back); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if !proto.Equal(b, &back) {
			t.Fatalf("%s: the YAML does not read back as the bootstrap", s.Name)
		}
		var hcm hcmv3.HttpConnectionManager
		if err := back.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
			t.Fatal(err)
		}
		var w wasmfilterv3.Wasm
		if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&w); err != nil {
			t.Fatal(err)
		}
		var cfg wrapperspb.StringValue
		if err := w.GetConfig().GetConfiguration().UnmarshalTo(&cfg); err != nil || cfg.GetValue() != strings.TrimSpace(s.Script) {
			t.Fatalf("%s: plugin configuration %q (%v)", s.Name, cfg.GetValue(), err)
		}
		if w.GetConfig().GetRootId() != rootID || w.GetConfig().GetAllowOnHeadersStopIteration() != nil {
			t.Fatalf("%s: plugin %+v", s.Name, w.GetConfig())
		}
	}
}

// hostsim's trace of a scenario holds what the probe read of the request sent, and reads
// back from the golden format unchanged.
func TestHostsimTraceRoundTrip(t *testing.T) {
	tr := hostTrace(t, scenario(t, "headers"))
	for _, want := range []string{"cb request_headers ctx=2", "op get_header 0 :path -> Ok /probe?x=1",
		"op get_header 0 user-agent -> Ok " + userAgent, "op get_header 2 :status -> Ok 200", "cb delete ctx=2"} {
		if !hostsimtest.ContainsLine(tr.Lines, want) {
			t.Errorf("no %q in\n  %s", want, strings.Join(tr.Lines, "\n  "))
		}
	}
	back, err := ParseTrace(tr.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if back.Scenario != tr.Scenario || back.Source != "hostsim" || Diff(back, tr) != "" || len(back.Lines) != len(tr.Lines) {
		t.Fatalf("read back as %+v", back)
	}
	for _, bad := range []string{"", "cb x\n", "# envoy-check headers\n", "# envoy-check headers hostsim\nwasm log: x\n"} {
		if _, err := ParseTrace([]byte(bad)); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseTrace(%q) = %v, want ErrFormat", bad, err)
		}
	}
}

// envoyLog writes lines as Envoy logs them with EnvoyLogFormat: "[thread] wasm log <name>
// <root_id> <vm_id>: message" (Context::log, PluginBase::makeLogPrefix).
func envoyLog(thread int, lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "[%d] wasm log %s %s %s: %s\n", thread, pluginName, rootID, pluginName, l)
	}
	return b.String()
}

// Out of an Envoy log, the worker's probe lines: not the main thread's (canary, main-thread
// plugin), not Envoy's own lines; compared with hostsim's trace they agree when the lines do,
// a callout's token aside.
func TestFromEnvoyLog(t *testing.T) {
	host := hostTrace(t, scenario(t, "callout"))
	log := "[10] initializing epoch 0\n" + envoyLog(10, "cb context_create ctx=1 0", "cb vm_start ctx=1 0", "cb configure ctx=1 1") +
		"[10] all clusters initialized\n"
	var worker []string
	for _, l := range host.Lines {
		worker = append(worker, strings.ReplaceAll(l, "token=", "token=9")) // Envoy's own numbering
	}
	log += envoyLog(12, worker[:3]...) + "[12] wasm log envoycheck: not a probe line\n" + envoyLog(10, "cb tick ctx=1") + envoyLog(12, worker[3:]...)
	got, err := FromEnvoyLog([]byte(log))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(worker, "\n") {
		t.Fatalf("worker lines\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(worker, "\n  "))
	}
	if d := Diff(Trace{Lines: got}, host); d != "" {
		t.Fatalf("the same run differs after normalizing:\n%s", d)
	}
	if _, err := FromEnvoyLog([]byte(envoyLog(10, "cb context_create ctx=1 0"))); err == nil {
		t.Fatal("a log without request_headers gave a trace")
	}
}

// A difference shows as the lines that differ, and Write keeps a diff only then.
func TestDiffAndWrite(t *testing.T) {
	host := hostTrace(t, scenario(t, "headers"))
	env := Trace{Scenario: host.Scenario, Source: "envoy test", Lines: append([]string(nil), host.Lines...)}
	dir := t.TempDir()
	if differs, err := Write(dir, env, host); err != nil || differs {
		t.Fatalf("identical traces: differs %v, %v", differs, err)
	}
	for i, l := range env.Lines {
		if strings.HasPrefix(l, "cb request_headers ") {
			env.Lines[i] = "cb request_headers ctx=2 6 1" // Envoy added two headers
		}
	}
	d := Diff(env, host)
	if !strings.Contains(d, "cb request_headers ctx=2 6 1") {
		t.Fatalf("diff does not name the line:\n%s", d)
	}
	if differs, err := Write(dir, env, host); err != nil || !differs {
		t.Fatalf("differing traces: differs %v, %v", differs, err)
	}
	for _, f := range []string{"headers.envoy.trace", "headers.hostsim.trace", "headers.diff"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "headers.envoy.trace"))
	if back, err := ParseTrace(b); err != nil || back.Source != "envoy test" {
		t.Fatalf("written trace %+v, %v", back, err)
	}
	if s := Summary(map[string]bool{"headers": true, "body": false}); !strings.Contains(s, "headers      differs (headers.diff)") ||
		!strings.Contains(s, "body         same") || !strings.Contains(s, "callout      not run") {
		t.Fatalf("summary:\n%s", s)
	}
}

// Every scenario runs to the stream's end in hostsim, so envoy-check compares whole streams.
func TestScenariosRunInHostsim(t *testing.T) {
	for _, s := range Scenarios {
		if tr := hostTrace(t, s); !hostsimtest.ContainsLine(tr.Lines, "cb delete ctx=2") {
			t.Errorf("%s: the stream did not end:\n  %s", s.Name, strings.Join(tr.Lines, "\n  "))
		}
	}
}

// Without an Envoy, the check says what to set, and so does `make envoy-check`.
func TestWithoutEnvoy(t *testing.T) {
	if _, err := Version(""); !errors.Is(err, ErrNoEnvoy) || !strings.Contains(err.Error(), "ENVOY_BIN") {
		t.Fatalf("Version(\"\") = %v", err)
	}
	if _, err := Version(filepath.Join(t.TempDir(), "no-envoy")); !errors.Is(err, ErrNoEnvoy) {
		t.Fatalf("a missing binary: %v", err)
	}
	cmd := exec.Command("make", "-s", "envoy-check", "ENVOY_BIN=")
	cmd.Dir = hostsimtest.ModuleRoot(t)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "ENVOY_BIN") {
		t.Fatalf("make envoy-check without ENVOY_BIN: %v\n%s", err, out)
	}
}
