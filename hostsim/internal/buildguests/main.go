// Command buildguests builds hostsim's test guests into build/guests/<name>.wasm: small raw
// Go guests with the plain wasip1 toolchain, SDK guests with plugin/wasmbuild (with and
// without the poll_oneoff runtime fix, and without the ABI bridge). Run it from the module
// root; `make build` does:
//
//	go run ./hostsim/internal/buildguests
//
// A guest whose .wasm is newer than its sources is skipped (-f rebuilds everything).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

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
		srcs := []string{filepath.Join(root, g.pkg)}
		if g.sdk {
			srcs = append(srcs, filepath.Join(root, "plugin", "_bridge"), filepath.Join(root, "plugin", "wasmbuild"))
		}
		if !force && upToDate(dst, srcs) {
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

func build(root string, g guest, dst string) error {
	var cmd *exec.Cmd
	if g.sdk {
		args := append([]string{"run", "./plugin/wasmbuild", "-work", "build/.wasmbuild-guests", "-o", dst}, g.flags...)
		cmd = exec.Command("go", append(args, "./"+g.pkg)...)
	} else {
		args := []string{"build", "-buildmode=c-shared", "-trimpath", "-o", dst}
		if g.tags != "" {
			args = append(args, "-tags", g.tags)
		}
		cmd = exec.Command("go", append(args, "./"+g.pkg)...)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	}
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("buildguests: %s: %s: %w", g.name, strings.Join(cmd.Args, " "), err)
	}
	return nil
}

// upToDate reports whether dst is newer than every file under srcs.
func upToDate(dst string, srcs []string) bool {
	st, err := os.Stat(dst)
	if err != nil {
		return false
	}
	newer := errors.New("newer")
	for _, src := range srcs {
		err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if info, err := d.Info(); err == nil && !d.IsDir() && info.ModTime().After(st.ModTime()) {
				return newer
			}
			return nil
		})
		if err != nil {
			return false
		}
	}
	return true
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("buildguests: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("buildguests: run from inside the spillway module")
	}
	return filepath.Dir(gomod), nil
}
