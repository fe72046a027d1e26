package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spillwayproxy/spillway/hostsim/buildstamp"
	"github.com/spillwayproxy/spillway/internal/modroot"
)

// sdkModule is the proxy-wasm Go SDK the bridge is written for.
const sdkModule = "github.com/tetratelabs/proxy-wasm-go-sdk"

// bridgeSource is the project-authored ABI bridge, relative to the module root.
const bridgeSource = "plugin/_bridge/zz_spillway_abi.go"

// ownSources are the builder's own source directories, relative to the module root: inputs
// of every module it builds (they decide the flags, the overlay and the runtime patch).
var ownSources = []string{"plugin/wasmbuild", "hostsim/buildstamp"}

// Options configures one build.
type Options struct {
	Root           string // module root; "" is the module of the working directory
	Output         string // .wasm file to write
	Package        string // package to build, e.g. ./plugin
	WorkDir        string // git-ignored folder for derived files, relative to Root
	NoRuntimePatch bool   // skip the poll_oneoff runtime fix
	NoBridge       bool   // skip the ABI bridge overlay
	LDFlags        string // extra linker flags
}

// Describe is how a build is recorded in its stamp (buildstamp.Stamp.Build): the builder,
// the flags that change the module, and the package. hostsim's guest builder compares it
// to decide whether a guest needs rebuilding.
func (o Options) Describe() []string {
	d := []string{"wasmbuild"}
	if o.NoRuntimePatch {
		d = append(d, "-no-runtime-patch")
	}
	if o.NoBridge {
		d = append(d, "-no-bridge")
	}
	if o.LDFlags != "" {
		d = append(d, "-ldflags="+o.LDFlags)
	}
	return append(d, o.Package)
}

// Build prepares the derived files, runs the wasip1 build and writes the module's stamp
// (Output + ".stamp", see hostsim/buildstamp), which the tests check before loading it.
//
// The module is byte-for-byte the same wherever the checkout is: -trimpath removes file
// paths, the SDK's replacement is written relative to the module root (the module's build
// info records it as written), and VCS stamping is off, so neither a checkout's commit
// time nor uncommitted changes reach the bytes; what went in is in the stamp.
func Build(opts Options) error {
	root := opts.Root
	if root == "" {
		var err error
		if root, err = moduleRoot(); err != nil {
			return err
		}
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	work, err := filepath.Abs(filepath.Join(root, opts.WorkDir))
	if err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	sdkDir, err := copySDK(root, work)
	if err != nil {
		return err
	}
	modfile, err := writeModfile(root, work, sdkDir)
	if err != nil {
		return err
	}
	overlay := map[string]string{}
	if !opts.NoBridge {
		overlay[filepath.Join(sdkDir, "proxywasm", "internal", filepath.Base(bridgeSource))] = filepath.Join(root, bridgeSource)
	}
	if !opts.NoRuntimePatch {
		from, to, err := patchRuntime(work)
		if err != nil {
			return err
		}
		overlay[from] = to
	}
	overlayPath := filepath.Join(work, "overlay.json")
	data, err := json.MarshalIndent(map[string]any{"Replace": overlay}, "", "  ")
	if err != nil {
		return fmt.Errorf("wasmbuild: overlay: %w", err)
	}
	if err := os.WriteFile(overlayPath, data, 0o644); err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	out := opts.Output
	if !filepath.IsAbs(out) {
		out = filepath.Join(root, out)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	_ = os.Remove(out + buildstamp.Suffix) // a failed build leaves no stamp that vouches for an old module
	// The stamp's inputs are hashed before the build: a file edited while the build runs then
	// no longer matches the stamp, and the next check says stale whichever version the
	// compiler read.
	selection := []string{"-modfile=" + modfile, "-overlay=" + overlayPath}
	env := []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=-mod=mod"}
	stamp, err := buildstamp.Compute(buildstamp.Inputs{Root: root, Packages: []string{opts.Package},
		Env: env, Flags: selection, Overlay: overlay, Extra: ownSources, Build: opts.Describe()})
	if err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	args := append([]string{"build"}, selection...)
	args = append(args, "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", out)
	if opts.LDFlags != "" {
		args = append(args, "-ldflags="+opts.LDFlags)
	}
	args = append(args, opts.Package)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("wasmbuild: go %s: %w", strings.Join(args, " "), err)
	}
	if err := buildstamp.Write(out, stamp); err != nil {
		return fmt.Errorf("wasmbuild: %w", err)
	}
	return nil
}

// moduleRoot is the directory holding this module's go.mod.
func moduleRoot() (string, error) {
	root, err := modroot.Dir()
	if err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	return root, nil
}

// goModDir returns the module cache directory and version of a dependency of the module.
func goModDir(root, module string) (dir, version string, err error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("wasmbuild: go mod download %s: %w", module, err)
	}
	var info struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", "", fmt.Errorf("wasmbuild: go mod download %s: %w", module, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", "", fmt.Errorf("wasmbuild: go mod download %s: %s", module, info.Error)
	}
	return info.Dir, info.Version, nil
}

// copySDK copies the SDK's proxywasm tree and go.mod out of the module cache, once per
// version. The copy is made writable so it can be removed with `make clean`.
func copySDK(root, work string) (string, error) {
	src, version, err := goModDir(root, sdkModule)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(work, "sdk", "proxy-wasm-go-sdk@"+version)
	stamp := filepath.Join(dst, ".complete")
	if _, err := os.Stat(stamp); err == nil {
		return dst, nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	copyTree := func(rel string) error {
		return filepath.WalkDir(filepath.Join(src, rel), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			r, err := filepath.Rel(src, path)
			if err != nil {
				return err
			}
			target := filepath.Join(dst, r)
			if d.IsDir() {
				return os.MkdirAll(target, 0o755)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		})
	}
	for _, rel := range []string{"go.mod", "LICENSE", "proxywasm"} {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", fmt.Errorf("wasmbuild: %w", err)
		}
		if err := copyTree(rel); err != nil {
			return "", fmt.Errorf("wasmbuild: copy SDK %s: %w", rel, err)
		}
	}
	if err := os.WriteFile(stamp, []byte(version+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	return dst, nil
}

// writeModfile writes the module's go.mod plus a replace of the SDK by its copy, and the
// matching go.sum, for `go build -modfile`.
func writeModfile(root, work, sdkDir string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	modfile := filepath.Join(work, "wasm.mod")
	// Relative to the module root, where the go command resolves a replacement's path even
	// under -modfile: the module's build info records the path as written, so an absolute
	// one would make every checkout's module differ.
	rel, err := filepath.Rel(root, sdkDir)
	if err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	replacement := filepath.ToSlash(rel)
	if !strings.HasPrefix(replacement, "../") {
		replacement = "./" + replacement
	}
	content := string(gomod) + fmt.Sprintf("\n// Added by plugin/wasmbuild: the SDK copy that receives the ABI bridge overlay.\nreplace %s => %s\n", sdkModule, replacement)
	if err := os.WriteFile(modfile, []byte(content), 0o644); err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	if err := os.WriteFile(strings.TrimSuffix(modfile, ".mod")+".sum", gosum, 0o644); err != nil {
		return "", fmt.Errorf("wasmbuild: %w", err)
	}
	return modfile, nil
}
