package hostsim_test

import (
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// bridgeMarker is exported by plugin/_bridge; a build that lost the overlay lacks it.
const bridgeMarker = "spillway_abi_bridge_v1"

// checkFilterModule lists what is wrong with a built filter: missing exports, and imports
// outside Envoy 1.33's WASI set and the proxy-wasm ABI.
func checkFilterModule(t *testing.T, wasm []byte) (m *hostsim.Module, missing []string, importErr error) {
	t.Helper()
	m, err := hostsimtest.Runtime(t).Compile(wasm, hostsim.WASIEnvoy133)
	if err != nil {
		t.Fatal(err)
	}
	missing = m.Missing(append(hostsim.GoSDKExports(), bridgeMarker, hostsim.HeapAllocsExport)...)
	return m, missing, m.CheckImports(hostsim.WASIEnvoy133)
}

// Every module make build produces exports the whole ABI, the bridge marker and the
// bridge's heap-allocation counter (benchmarks read it), and imports only what Envoy 1.33
// provides.
func TestBuiltModuleExports(t *testing.T) {
	for _, rel := range []string{"build/spillway.wasm", "build/noop.wasm"} {
		t.Run(rel, func(t *testing.T) {
			m, missing, importErr := checkFilterModule(t, hostsimtest.ReadModule(t, rel))
			if len(missing) > 0 {
				t.Fatalf("%s lacks exports %v", rel, missing)
			}
			if importErr != nil {
				t.Fatal(importErr)
			}
			for _, imp := range m.Imports {
				if !strings.HasPrefix(imp, "env.proxy_") && !strings.HasPrefix(imp, "wasi_snapshot_preview1.") {
					t.Fatalf("unexpected import %s", imp)
				}
			}
			t.Logf("%s: %d bytes, ABI %s, %d imports", rel, m.Size, m.ABI, len(m.Imports))
		})
	}
}

// A -no-bridge build still links but exports only _initialize and memory: the check
// catches it.
func TestExportCheckCatchesMissingBridge(t *testing.T) {
	_, missing, _ := checkFilterModule(t, hostsimtest.Guest(t, "noop-nobridge"))
	for _, want := range []string{bridgeMarker, "proxy_abi_version_0_2_0", "proxy_on_request_headers"} {
		found := false
		for _, m := range missing {
			found = found || m == want
		}
		if !found {
			t.Fatalf("check did not report %s missing (reported %v)", want, missing)
		}
	}
}
