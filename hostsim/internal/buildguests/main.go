// Command buildguests builds hostsim's test guests into build/guests/<name>.wasm: small raw
// Go guests with the plain wasip1 toolchain, SDK guests with plugin/wasmbuild (with and
// without the poll_oneoff runtime fix, and without the ABI bridge). Run it from the module
// root; `make build` does:
//
//	go run ./hostsim/internal/buildguests
//
// Every guest gets a build stamp next to it (hostsim/buildstamp), as plugin/wasmbuild
// writes for the modules it builds; a guest whose stamp still matches its sources and its
// build is skipped (-f rebuilds everything), and hostsimtest.Guest refuses one that does
// not ("stale: run make build").
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/buildstamp"
	"github.com/spillwayproxy/spillway/internal/modroot"
)

// ownSources are this builder's source directories: inputs of every plain guest (an SDK
// guest's stamp comes from plugin/wasmbuild, which names its own).
var ownSources = []string{"hostsim/internal/buildguests", "hostsim/buildstamp"}

// guest is one module to build.
type guest struct {
	name  string   // output name (build/guests/<name>.wasm)
	pkg   string   // package directory, relative to the module root
	tags  string   // build tags for plain builds
	sdk   bool     // build with plugin/wasmbuild
	flags []string // extra wasmbuild flags
}

const guestsDir = "hostsim/testdata/guests/"

var guests = []guest{
	{name: "probe", pkg: guestsDir + "probe"},
	{name: "tiny", pkg: guestsDir + "tiny"},
	{name: "tiny-nomarker", pkg: guestsDir + "tiny", tags: "nomarker"},
	{name: "tiny-noalloc", pkg: guestsDir + "tiny", tags: "noalloc"},
	{name: "tiny-abi021", pkg: guestsDir + "tiny", tags: "abi021"},
	{name: "tiny-loglevel", pkg: guestsDir + "tiny", tags: "loglevel"},
	{name: "wasiextra", pkg: guestsDir + "wasiextra"},
	{name: "gcstress", pkg: guestsDir + "gcstress", sdk: true},
	{name: "gcstress-nopatch", pkg: guestsDir + "gcstress", sdk: true, flags: []string{"-no-runtime-patch"}},
	{name: "noop-nobridge", pkg: "plugin/noop", sdk: true, flags: []string{"-no-bridge"}},
	{name: "panicky", pkg: guestsDir + "panicky", sdk: true},
	{name: "sdkexamples", pkg: guestsDir + "sdkexamples", sdk: true}, // the SDK's examples (sdkexamples_test.go)
	{name: "floor", pkg: "plugin/floor", sdk: true},                  // the success path's host-call floor (plugin's benchmarks)
}

func main() {
	out := flag.String("o", "build/guests", "output directory, relative to the module root")
	force := flag.Bool("f", false, "rebuild even when up to date")
	flag.Parse()
	if err := run(*out, *force); err != nil {
		fmt.Fprintln(os.Stderr, "buildguests:", err)
		os.Exit(1)
	}
}

func run(out string, force bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, out), 0o755); err != nil {
		return fmt.Errorf("buildguests: %w", err)
	}
	for _, g := range guests {
		dst := filepath.Join(root, out, g.name+".wasm")
		if !force && upToDate(root, dst, g.describe()) {
			continue
		}
		start := time.Now()
		if err := build(root, g, dst); err != nil {
			return err
		}
		fmt.Printf("buildguests: %s (%v)\n", filepath.Join(out, g.name+".wasm"), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// describe is how the guest's build is recorded in its stamp: plugin/wasmbuild's own
// description for an SDK guest (Options.Describe), the go build flags for a plain one.
func (g guest) describe() []string {
	if g.sdk {
		return append(append([]string{"wasmbuild"}, g.flags...), "./"+g.pkg)
	}
	d := []string{"go build"}
	if g.tags != "" {
		d = append(d, "-tags="+g.tags)
	}
	return append(d, "./"+g.pkg)
}

func build(root string, g guest, dst string) error {
	var cmd *exec.Cmd
	var stamp *buildstamp.Stamp
	if g.sdk { // wasmbuild writes the stamp
		args := append([]string{"run", "./plugin/wasmbuild", "-work", "build/.wasmbuild-guests", "-o", dst}, g.flags...)
		cmd = exec.Command("go", append(args, "./"+g.pkg)...)
	} else {
		var selection []string
		if g.tags != "" {
			selection = []string{"-tags", g.tags}
		}
		env := []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}
		var err error
		stamp, err = buildstamp.Compute(buildstamp.Inputs{Root: root, Packages: []string{"./" + g.pkg},
			Env: env, Flags: selection, Extra: ownSources, Build: g.describe()})
		if err != nil {
			return fmt.Errorf("buildguests: %s: %w", g.name, err)
		}
		_ = os.Remove(dst + buildstamp.Suffix)
		args := append([]string{"build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", dst}, selection...)
		cmd = exec.Command("go", append(args, "./"+g.pkg)...)
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("buildguests: %s: %s: %w", g.name, strings.Join(cmd.Args, " "), err)
	}
	if stamp != nil {
		if err := buildstamp.Write(dst, stamp); err != nil {
			return fmt.Errorf("buildguests: %s: %w", g.name, err)
		}
	}
	return nil
}

// upToDate reports whether dst's stamp still matches its sources and was made by the
// build the guest list now asks for.
func upToDate(root, dst string, build []string) bool {
	s, err := buildstamp.Check(root, dst)
	return err == nil && slices.Equal(s.Build, build)
}

func moduleRoot() (string, error) {
	root, err := modroot.Dir()
	if err != nil {
		return "", fmt.Errorf("buildguests: %w", err)
	}
	return root, nil
}
