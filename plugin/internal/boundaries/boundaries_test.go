package boundaries

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	module = "github.com/spillwayproxy/spillway"
	sdk    = "github.com/tetratelabs/proxy-wasm-go-sdk"
	wazero = "github.com/tetratelabs/wazero"
)

// pkg is what the rules read of one package of `go list -test -deps`.
type pkg struct {
	ImportPath   string
	ForTest      string   // set on a package recompiled for another's test
	Imports      []string // direct imports, test files excluded
	TestImports  []string
	XTestImports []string
	Deps         []string // transitive; of a "p.test" package: everything p's tests link
	GoFiles      []string
}

// list runs `go list -test -deps` over the whole module with env added, keyed by import
// path (the "p.test" entries are the test binaries).
func list(t *testing.T, env ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-test", "-deps",
		"-json=ImportPath,ForTest,Imports,TestImports,XTestImports,Deps,GoFiles", module+"/...")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.ForTest == "" {
			pkgs[p.ImportPath] = p
		}
	}
	return pkgs
}

// sorted returns the listing's import paths in order, for errors in a stable order.
func sorted(pkgs map[string]pkg) []string {
	paths := make([]string, 0, len(pkgs))
	for p := range pkgs {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// within reports whether path is prefix or a package under it.
func within(path, prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }

func own(rel string) string { return module + "/" + rel }

// isEngine is a package of the resilience engine: plugin/internal/* but the SDK glue.
func isEngine(p string) bool {
	return within(p, own("plugin/internal")) && !within(p, own("plugin/internal/filter"))
}

// isGuest is one of hostsim's test guests: a wasm program of its own, not hostsim's code.
func isGuest(p string) bool { return within(p, own("hostsim/testdata")) }

// isHostsim is hostsim's own code: the library, its helpers, serve and the command.
func isHostsim(p string) bool { return within(p, own("hostsim")) && !isGuest(p) }

// touchesWasm is what pure logic must not depend on: the SDK, the host side (wazero,
// hostsim) and the filter's ABI glue.
func touchesWasm(dep string) bool {
	return within(dep, sdk) || within(dep, wazero) || within(dep, own("hostsim")) ||
		within(dep, own("plugin/hostabi")) || within(dep, own("plugin/internal/filter"))
}

// The module's layers, as dependency rules: the engine is pure logic that runs the same
// natively and in wasm, the filter and hostsim meet only at the ABI (hostsim runs the
// built module, it links none of plugin/), and only the entry points and the glue speak
// to the SDK.
func TestBoundaries(t *testing.T) {
	native := list(t)
	rules := []struct {
		name      string            // the boundary
		applies   func(string) bool // the packages it constrains
		tests     bool              // whether what their tests link counts too
		forbidden func(string) bool // the dependencies it forbids
	}{
		{"the engine imports nothing wasm-specific", isEngine, true, touchesWasm},
		{"policies, shared by the filter and hostsim, import neither",
			func(p string) bool { return within(p, own("policies")) }, true,
			func(d string) bool { return touchesWasm(d) || within(d, own("plugin")) }},
		// plugin/stats is the one exception: the names and tag regexes of the filter's stats,
		// a contract like the policy, which hostsim serve's admin listener applies as the
		// shipped Envoy configuration does (it holds no filter code).
		{"hostsim imports no package of plugin/ (but the stats contract)", isHostsim, true,
			func(d string) bool { return within(d, own("plugin")) && !within(d, own("plugin/stats")) }},
		// hostsim's internal packages are its layers under the Envoy model (hostsim/doc.go):
		// each stands on abi at most, so none reaches sideways into another's ABI area.
		// buildguests is the guests' build tool, which reads the build stamp.
		{"hostsim's layers stand on hostsim/internal/abi alone",
			func(p string) bool {
				return within(p, own("hostsim/internal")) && !within(p, own("hostsim/internal/abi")) &&
					!within(p, own("hostsim/internal/buildguests")) && !within(p, own("hostsim/internal/envoy"))
			}, false,
			func(d string) bool {
				return within(d, own("hostsim")) && !within(d, own("hostsim/internal/abi"))
			}},
		// hostsim/internal/envoy/* is the Envoy model taken out of the package (the router,
		// ...): it stands on the layers below it but never on hostsim itself, so each piece
		// of the model is testable without a VM.
		{"hostsim's Envoy model stands on hostsim's internal layers alone",
			func(p string) bool { return within(p, own("hostsim/internal/envoy")) }, false,
			func(d string) bool {
				return within(d, own("hostsim")) && !within(d, own("hostsim/internal"))
			}},
		// hostsim/internal/envoy/retry is the router's retry decision as a pure model of
		// Envoy's source: it links no VM (wazero), no ABI (the SDK, or internal/abi, which
		// speaks wazero's types) and of hostsim only the stream info's vocabulary.
		{"hostsim's retry model links no VM and no ABI",
			func(p string) bool { return within(p, own("hostsim/internal/envoy/retry")) }, true,
			func(d string) bool {
				d, _, _ = strings.Cut(d, " ") // "p [p.test]": p recompiled for its own tests
				return within(d, wazero) || within(d, sdk) || (within(d, own("hostsim")) &&
					!within(d, own("hostsim/internal/streaminfo")) && !within(d, own("hostsim/internal/envoy/retry")))
			}},
		// ... and runs without a VM: neither it nor its tests link wazero or hostsim itself, so
		// the stream model (internal/envoy/stream) and the rest are tested with fakes of the
		// guest and of what drives them.
		{"hostsim's Envoy model and its tests link neither wazero nor hostsim",
			func(p string) bool { return within(p, own("hostsim/internal/envoy")) }, true,
			func(d string) bool { return within(d, wazero) || d == own("hostsim") }},
		// internal/ holds the module's neutral helpers (modroot, manualclock, pairs, rootid),
		// which the build tools, the engine's tests, the filter and its hostabi, hostsim and the
		// configuration generators share: importing no other package of the module
		// and nothing wasm-specific keeps them usable by each without joining the layers up.
		{"the neutral helpers under internal/ import no other package of the module",
			func(p string) bool { return within(p, own("internal")) }, true,
			func(d string) bool { return (within(d, module) && !within(d, own("internal"))) || touchesWasm(d) }},
		// plugin/wasmbuild is the native build tool, not filter code: it writes the stamp
		// (hostsim/buildstamp) the host's tests check, and links no runtime.
		{"the filter links no host: hostsim and wazero only in its tests",
			func(p string) bool { return within(p, own("plugin")) }, false,
			func(d string) bool {
				return (within(d, own("hostsim")) && d != own("hostsim/buildstamp")) || within(d, wazero)
			}},
	}
	checked := 0
	for _, r := range rules {
		for _, path := range sorted(native) {
			p := native[path]
			if !within(path, module) || strings.HasSuffix(path, ".test") || !r.applies(path) {
				continue
			}
			checked++
			deps := p.Deps
			if tp, ok := native[path+".test"]; ok && r.tests {
				deps = tp.Deps
			}
			for _, d := range deps {
				if r.forbidden(d) {
					t.Errorf("%s: %s depends on %s", r.name, path, d)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("the rules constrained only %d packages: the listing or the rules are wrong", checked)
	}
}

// The engine packages' shared test fixtures (plugin/internal/testfixture) are for tests:
// no package's own code imports them, so none of it reaches a module.
func TestOnlyTestsImportTheTestFixtures(t *testing.T) {
	native := list(t)
	fixtures, users := own("plugin/internal/testfixture"), 0
	for _, path := range sorted(native) {
		p := native[path]
		if !within(path, module) || strings.HasSuffix(path, ".test") {
			continue
		}
		if slices.Contains(p.Imports, fixtures) {
			t.Errorf("%s imports %s outside its tests", path, fixtures)
		}
		if slices.Contains(p.TestImports, fixtures) || slices.Contains(p.XTestImports, fixtures) {
			users++
		}
	}
	if users == 0 {
		t.Fatal("no test imports the fixtures: the listing is wrong")
	}
}

// Only the wasm entry points and the ABI glue import the SDK (the bridge, built into the
// SDK itself, is not a package of the module). hostsim shares the SDK's types package, the
// proxytest vocabulary of its API (Action, the start statuses), and nothing else of it; the
// tests of the entry points and the glue run them under the SDK's proxytest.
func TestOnlyTheEntryPointsAndTheGlueImportTheSDK(t *testing.T) {
	native := list(t)
	mayUseSDK := []string{own("plugin"), own("plugin/noop"), own("plugin/floor"), own("plugin/internal/filter"), own("plugin/hostabi")}
	found := 0
	for _, path := range sorted(native) {
		p := native[path]
		if !within(path, module) || strings.HasSuffix(path, ".test") {
			continue
		}
		for _, imps := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, imp := range imps {
				if !within(imp, sdk) {
					continue
				}
				found++
				switch {
				case slices.Contains(mayUseSDK, path), isGuest(path):
				case isHostsim(path) && imp == sdk+"/proxywasm/types":
				default:
					t.Errorf("%s imports %s: only the entry points and the glue use the SDK", path, imp)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no package imports the SDK: the listing is wrong")
	}
}

// The engine is pure logic: it compiles the same files natively and in wasm, so its native
// tests test what runs in Envoy.
func TestTheEngineIsTheSameInWasm(t *testing.T) {
	native, wasm := list(t), list(t, "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	n := 0
	for _, path := range sorted(native) {
		p := native[path]
		if !isEngine(path) || strings.HasSuffix(path, ".test") {
			continue
		}
		n++
		w, ok := wasm[path]
		if !ok {
			t.Errorf("%s does not build for wasip1", path)
			continue
		}
		if !slices.Equal(p.GoFiles, w.GoFiles) {
			t.Errorf("%s compiles %q natively but %q for wasip1", path, p.GoFiles, w.GoFiles)
		}
	}
	if n == 0 {
		t.Fatal("no engine package listed")
	}
}
