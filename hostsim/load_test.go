package hostsim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// What Envoy checks when it loads a module: the ABI marker, an allocator, and imports
// within its WASI set and the ABI's host functions.
func TestLoadChecks(t *testing.T) {
	for _, tc := range []struct {
		guest   string           // build/guests/<guest>.wasm
		mode    hostsim.WASIMode // WASI surface
		wantErr string           // substring of New's error; "" = loads
	}{
		{"tiny", hostsim.WASIEnvoy133, ""},
		{"tiny-nomarker", hostsim.WASIEnvoy133, "unknown Proxy-Wasm ABI version"},
		{"tiny-noalloc", hostsim.WASIEnvoy133, "missing malloc"},
		{"tiny-loglevel", hostsim.WASIEnvoy133, "env.proxy_get_log_level"}, // 0.2.1-only import under 0.2.0
		{"tiny-abi021", hostsim.WASIEnvoy133, ""},
		{"wasiextra", hostsim.WASIEnvoy133, "wasi_snapshot_preview1.fd_pread"},
		{"wasiextra", hostsim.WASICppHostHead, ""},
		{"probe", hostsim.WASIEnvoy132, "wasi_snapshot_preview1.poll_oneoff"}, // Go needs Envoy ≥ 1.33
		{"probe", hostsim.WASIEnvoy133, ""},
		{"probe", hostsim.WASIWazero, ""},
		{"noop-nobridge", hostsim.WASIEnvoy133, "unknown Proxy-Wasm ABI version"},
	} {
		t.Run(tc.guest+"/"+tc.mode.String(), func(t *testing.T) {
			h, err := hostsim.New(hostsimtest.Guest(t, tc.guest), hostsim.WithRuntime(hostsimtest.Runtime(t)), hostsim.WithWASI(tc.mode))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("load failed: %v", err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				h.Close()
				t.Fatalf("loaded; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

// proxy_get_log_level is linked for ABI 0.2.1 modules.
func TestLogLevelABI021(t *testing.T) {
	h := hostsimtest.New(t, hostsimtest.Guest(t, "tiny-abi021"), hostsim.WithLogLevel(hostsim.LogWarn))
	if h.Module().ABI != hostsim.ABI021 {
		t.Fatalf("ABI = %q", h.Module().ABI)
	}
	h.StartPlugin()
	if !hostsimtest.ContainsLine(h.GetInfoLogs(), "log level 3 status 0") {
		t.Fatalf("get_log_level not answered: %v", h.GetInfoLogs())
	}
}

// Restricted host calls trap like cpp-host's "restricted_callback": during _initialize only
// the start-up allow-list, inside proxy_on_memory_allocate only the malloc allow-list.
func TestRestrictedCalls(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     hostsim.WASIMode
		init     string // PROBE_INIT script run in the guest's init()
		script   string // plugin configuration
		wantFn   string // restricted function in the error; "" = no trap
		wantWhen string // phase in the error
	}{
		{"log in init is allowed", hostsim.WASIEnvoy133, "init log 2 hi;init now", "", "", ""},
		{"shared data in init traps", hostsim.WASIEnvoy133, "init set_shared k v 0", "", "env.proxy_set_shared_data", "start-up"},
		{"property in init traps", hostsim.WASIEnvoy133, "init get_property plugin_name", "", "env.proxy_get_property", "start-up"},
		{"tick period in init traps on head too", hostsim.WASICppHostHead, "init tick_period 10", "", "env.proxy_set_tick_period_milliseconds", "start-up"},
		{"log and clock in malloc are allowed", hostsim.WASIEnvoy133, "", "configure malloc_hook log\nconfigure get_property plugin_name\nconfigure malloc_hook now\nconfigure get_property plugin_name", "", ""},
		{"shared data in malloc traps", hostsim.WASIEnvoy133, "", "configure malloc_hook shared\nconfigure get_property plugin_name", "env.proxy_set_shared_data", "proxy_on_memory_allocate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []hostsim.Option{hostsim.WithRuntime(hostsimtest.Runtime(t)), hostsim.WithWASI(tc.mode),
				hostsim.WithPluginName("probe"), hostsim.WithPluginConfiguration([]byte(tc.script))}
			if tc.init != "" {
				opts = append(opts, hostsim.WithEnv("PROBE_INIT", tc.init))
			}
			h, err := hostsim.New(hostsimtest.Guest(t, "probe"), opts...)
			if err == nil {
				defer h.Close()
				_, err = h.StartPlugin()
			}
			if tc.wantFn == "" {
				if err != nil {
					t.Fatalf("unexpected trap: %v", err)
				}
				return
			}
			var re *hostsim.RestrictedCallError
			var te *hostsim.TrapError
			if !errors.As(err, &re) || !errors.As(err, &te) {
				t.Fatalf("want a TrapError wrapping a RestrictedCallError, got %v", err)
			}
			if re.Function != tc.wantFn || !strings.Contains(re.Phase, tc.wantWhen) {
				t.Fatalf("restricted %s during %s; want %s during %s", re.Function, re.Phase, tc.wantFn, tc.wantWhen)
			}
		})
	}
}
