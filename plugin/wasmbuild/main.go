// Command wasmbuild builds proxy-wasm filters of this module to wasip1 reactor modules with
// the standard Go toolchain, adding Spillway's ABI bridge to the proxy-wasm Go SDK and the
// Envoy poll_oneoff fix to the Go runtime at build time.
//
// Usage (from the module root; `make build` runs it):
//
//	go run ./plugin/wasmbuild -o build/spillway.wasm ./plugin
//	go run ./plugin/wasmbuild -o build/noop.wasm ./plugin/noop
//
// What it does, and why (README "How the build works"):
//
//  1. Copies github.com/tetratelabs/proxy-wasm-go-sdk out of the module cache into
//     build/.wasmbuild/sdk (git-ignored). `go build -overlay` refuses to replace files under
//     GOMODCACHE, so the bridge cannot be overlaid onto the cached copy.
//  2. Writes build/.wasmbuild/wasm.mod: this module's go.mod plus a replace of the SDK by that
//     copy, used with -modfile so the root go.mod, go.sum and native `go test` stay untouched.
//  3. Derives a patched runtime/netpoll_wasip1.go from GOROOT (see runtimepatch.go).
//  4. Writes an overlay that adds plugin/_bridge/zz_spillway_abi.go into the SDK's
//     proxywasm/internal package and swaps in the patched runtime file, then runs
//     GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false.
//  5. Writes OUT.wasm.stamp, the digests of every input (hostsim/buildstamp): the tests
//     refuse a module whose sources changed since ("stale: run make build").
//
// The module's bytes do not depend on where the checkout is (README "How the build works").
//
// Nothing third-party is committed: the SDK copy and the patched runtime file are derived
// on every machine from the module cache and GOROOT.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	var opts Options
	flag.StringVar(&opts.Output, "o", "", "output .wasm path (required)")
	flag.StringVar(&opts.WorkDir, "work", "build/.wasmbuild", "folder for the SDK copy, the modfile and the overlay")
	flag.BoolVar(&opts.NoRuntimePatch, "no-runtime-patch", false,
		"build without the poll_oneoff runtime fix (for demonstrating the Envoy crash)")
	flag.BoolVar(&opts.NoBridge, "no-bridge", false,
		"build without the ABI bridge (the module then exports only _initialize; for tests of the export check)")
	flag.StringVar(&opts.LDFlags, "ldflags", "", "extra -ldflags for go build")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: wasmbuild -o OUT.wasm [flags] PACKAGE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if opts.Output == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	opts.Package = flag.Arg(0)
	out, err := filepath.Abs(opts.Output) // -o is relative to the working directory
	if err == nil {
		opts.Output = out
		err = Build(opts)
	} else {
		err = fmt.Errorf("wasmbuild: %w", err)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // Build's errors say "wasmbuild: ..."
		os.Exit(1)
	}
}
