package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The Envoy poll_oneoff fix.
//
// Envoy 1.33–1.39 answer WASI poll_oneoff with ENOSYS (proxy-wasm-cpp-host before #533, which Envoy 1.40 pins first).
// Once the Go runtime has armed any timer — its own background scavenger does so after a GC
// that left memory to return — the network poller is initialised, and from then on every
// start-the-world and every scheduler pass calls netpoll(0), a non-blocking poll with only
// the clock subscription. netpoll treats ENOSYS as fatal: "poll_oneoff failed errno=52"
// (golang/go#78513). Inside proxy_on_memory_allocate, Envoy traps the call outright.
//
// A non-blocking poll with no file-descriptor subscriptions has nothing to report, so the
// fix returns before calling the host in exactly that case. Blocking polls (delay > 0 or
// < 0: time.Sleep, parked goroutines waiting on timers) still call poll_oneoff and still die
// on Envoy 1.33, which is why the plugin uses neither (README, "How the build works").
//
// The patch is applied to the GOROOT file at build time and fails loudly if the anchor is
// not found, so a Go upgrade that changes the file cannot silently drop the fix.

// runtimePatchAnchor is the line in netpoll after which the early return is inserted.
const runtimePatchAnchor = "\tif len(pollsubs) == 0 {\n\t\tunlock(&mtx)\n\t\treturn gList{}, 0\n\t}\n"

// runtimePatchInsert is the early return for a non-blocking poll with no fd subscriptions.
const runtimePatchInsert = "\t// spillway: a non-blocking poll with only the clock subscription has nothing to\n" +
	"\t// report; do not call poll_oneoff, which Envoy 1.33-1.39 answer with ENOSYS.\n" +
	"\tif delay == 0 && len(pollsubs) == 1 {\n\t\tunlock(&mtx)\n\t\treturn gList{}, 0\n\t}\n"

// patchRuntime writes the patched netpoll_wasip1.go and returns (GOROOT file, patched file).
func patchRuntime(work string) (from, to string, err error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", "", fmt.Errorf("wasmbuild: go env GOROOT: %w", err)
	}
	from = filepath.Join(strings.TrimSpace(string(out)), "src", "runtime", "netpoll_wasip1.go")
	src, err := os.ReadFile(from)
	if err != nil {
		return "", "", fmt.Errorf("wasmbuild: runtime patch: %w", err)
	}
	patched, err := applyRuntimePatch(string(src))
	if err != nil {
		return "", "", err
	}
	to = filepath.Join(work, "runtime", "netpoll_wasip1.go")
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return "", "", fmt.Errorf("wasmbuild: %w", err)
	}
	if err := os.WriteFile(to, []byte(patched), 0o644); err != nil {
		return "", "", fmt.Errorf("wasmbuild: %w", err)
	}
	return from, to, nil
}

// applyRuntimePatch inserts the early return after the anchor, exactly once.
func applyRuntimePatch(src string) (string, error) {
	if strings.Count(src, runtimePatchAnchor) != 1 {
		return "", fmt.Errorf("wasmbuild: runtime patch: anchor not found exactly once in netpoll_wasip1.go " +
			"(Go version changed?); update plugin/wasmbuild/runtimepatch.go")
	}
	return strings.Replace(src, runtimePatchAnchor, runtimePatchAnchor+runtimePatchInsert, 1), nil
}
