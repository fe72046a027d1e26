// Package buildstamp records what a built .wasm module was made from, in a stamp file next to
// it, and tells whether the sources still match, so a test never runs an old module.
//
// A stamp lists every input file with its SHA-256: the files of every package the build
// compiles (from `go list -deps`, through the build's overlay), the embedded files, go.mod
// and go.sum, and the builder's own sources; every package directory with the names of the
// Go files it holds (a new file counts even before anything imports it); the Go version;
// and how the module was built. Standard-library packages are covered by the Go version and
// packages from the module cache by go.sum, so neither is hashed file by file.
//
// Check needs no `go list`: it re-hashes the files the stamp names and re-lists their
// directories. A change that adds a new dependency edits some listed file first, so the set
// of inputs can grow as the code does without the stamp missing it.
package buildstamp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Suffix is appended to a module's path to name its stamp (build/spillway.wasm.stamp).
const Suffix = ".stamp"

// Stamp is what a module was built from.
type Stamp struct {
	// Module is the SHA-256 of the built .wasm, hex.
	Module string `json:"module"`
	// Go is the toolchain's version (`go env GOVERSION`).
	Go string `json:"go"`
	// Build says how the module was built (the builder and its arguments), for a builder
	// that decides whether to rebuild.
	Build []string `json:"build"`
	// Files are the input files, sorted by path.
	Files []File `json:"files"`
	// Dirs are the package directories, sorted by path, with the Go files each held.
	Dirs []Dir `json:"dirs"`
}

// File is one input file.
type File struct {
	// Path is slash-separated, relative to the module root when inside it.
	Path string `json:"path"`
	// SHA256 is the content's digest, hex.
	SHA256 string `json:"sha256"`
}

// Dir is one package directory and the names of its non-test Go files, sorted.
type Dir struct {
	Path    string   `json:"path"`
	GoFiles []string `json:"goFiles"`
}

// Inputs describes a build for Compute.
type Inputs struct {
	// Root is the module root (where go.mod is).
	Root string
	// Packages are the packages built, as `go list` takes them ("./plugin").
	Packages []string
	// Env is added to the environment of `go list` (GOOS=wasip1, GOARCH=wasm, ...).
	Env []string
	// Flags are the build's flags that change what is compiled (-tags, -modfile, -overlay).
	Flags []string
	// Overlay is the build's overlay: a listed file that is a key is read from its value.
	Overlay map[string]string
	// Extra are further inputs relative to Root: a file, or a directory standing for its
	// non-test Go files (the builder's own sources).
	Extra []string
	// Build is recorded as Stamp.Build.
	Build []string
}

// listed is the part of `go list -json` Compute reads.
type listed struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	CgoFiles   []string
	SFiles     []string
	HFiles     []string
	EmbedFiles []string
	Module     *struct {
		Main    bool
		Replace *struct{ Version string }
	}
}

// Compute lists the build's packages and hashes its inputs.
func Compute(in Inputs) (*Stamp, error) {
	root, err := filepath.Abs(in.Root)
	if err != nil {
		return nil, fmt.Errorf("buildstamp: %w", err)
	}
	goVersion, err := GoVersion(root)
	if err != nil {
		return nil, err
	}
	args := append([]string{"list", "-deps",
		"-json=ImportPath,Dir,Standard,GoFiles,CgoFiles,SFiles,HFiles,EmbedFiles,Module"}, in.Flags...)
	cmd := exec.Command("go", append(args, in.Packages...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), in.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("buildstamp: go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, stderr.Bytes())
	}
	c := collector{root: root, files: map[string]string{}, dirs: map[string][]string{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("buildstamp: go list output: %w", err)
		}
		if p.Standard || p.Module == nil || !p.Module.Main && (p.Module.Replace == nil || p.Module.Replace.Version != "") {
			continue // the Go version pins the standard library, go.sum the module cache
		}
		if err := c.dir(p.Dir); err != nil {
			return nil, err
		}
		for _, names := range [][]string{p.GoFiles, p.CgoFiles, p.SFiles, p.HFiles, p.EmbedFiles} {
			for _, name := range names {
				path := filepath.Join(p.Dir, name)
				if src, ok := in.Overlay[path]; ok {
					path = src
				}
				if err := c.file(path); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, rel := range append([]string{"go.mod", "go.sum"}, in.Extra...) {
		path := filepath.Join(root, filepath.FromSlash(rel))
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("buildstamp: %w", err)
		}
		if !info.IsDir() {
			if err := c.file(path); err != nil {
				return nil, err
			}
			continue
		}
		if err := c.dir(path); err != nil {
			return nil, err
		}
		for _, name := range c.dirs[c.rel(path)] {
			if err := c.file(filepath.Join(path, name)); err != nil {
				return nil, err
			}
		}
	}
	s := &Stamp{Go: goVersion, Build: in.Build}
	for path, sum := range c.files {
		s.Files = append(s.Files, File{Path: path, SHA256: sum})
	}
	for path, names := range c.dirs {
		s.Dirs = append(s.Dirs, Dir{Path: path, GoFiles: names})
	}
	slices.SortFunc(s.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(s.Dirs, func(a, b Dir) int { return strings.Compare(a.Path, b.Path) })
	return s, nil
}

// collector gathers digests and directory listings, each once.
type collector struct {
	root  string
	files map[string]string   // stamp path -> digest
	dirs  map[string][]string // stamp path -> Go file names
}

// rel is the stamp's name for path: relative to the root when inside it.
func (c *collector) rel(path string) string { return stampPath(c.root, path) }

func (c *collector) file(path string) error {
	key := c.rel(path)
	if _, ok := c.files[key]; ok {
		return nil
	}
	sum, err := digest(path)
	if err != nil {
		return fmt.Errorf("buildstamp: %w", err)
	}
	c.files[key] = sum
	return nil
}

func (c *collector) dir(path string) error {
	key := c.rel(path)
	if _, ok := c.dirs[key]; ok {
		return nil
	}
	names, err := goFiles(path)
	if err != nil {
		return fmt.Errorf("buildstamp: %w", err)
	}
	c.dirs[key] = names
	return nil
}

// stampPath is path relative to root, slash-separated, when inside root; else absolute.
func stampPath(root, path string) string {
	if rel, err := filepath.Rel(root, path); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(path)
}

// osPath is where a stamp path is on disk.
func osPath(root, p string) string {
	if filepath.IsAbs(filepath.FromSlash(p)) {
		return filepath.FromSlash(p)
	}
	return filepath.Join(root, filepath.FromSlash(p))
}

// goFiles lists the names of a directory's Go files the go command would consider: not
// tests, not hidden or underscore-prefixed.
func goFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") &&
			!strings.HasPrefix(n, ".") && !strings.HasPrefix(n, "_") {
			names = append(names, n)
		}
	}
	return names, nil
}

func digest(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Write records s as the stamp of the module at wasm, with the module's digest.
func Write(wasm string, s *Stamp) error {
	sum, err := digest(wasm)
	if err != nil {
		return fmt.Errorf("buildstamp: %w", err)
	}
	s.Module = sum
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("buildstamp: %w", err)
	}
	if err := os.WriteFile(wasm+Suffix, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("buildstamp: %w", err)
	}
	return nil
}

// Read returns the stamp of the module at wasm.
func Read(wasm string) (*Stamp, error) {
	data, err := os.ReadFile(wasm + Suffix)
	if err != nil {
		return nil, fmt.Errorf("buildstamp: %w", err)
	}
	var s Stamp
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("buildstamp: %s: %w", wasm+Suffix, err)
	}
	return &s, nil
}

// StaleError says why a module no longer matches its sources.
type StaleError struct {
	Module string // the module's path
	Reason string // e.g. "plugin/internal/filter/stream.go changed"
}

func (e *StaleError) Error() string { return "buildstamp: " + e.Module + " is stale: " + e.Reason }

// Check reports whether the module at wasm (inside the module rooted at root) still
// matches its sources: nil, or a *StaleError naming the first difference found. A missing
// module is an fs.ErrNotExist error.
func Check(root, wasm string) (*Stamp, error) {
	sum, err := digest(wasm)
	if err != nil {
		return nil, fmt.Errorf("buildstamp: %w", err)
	}
	stale := func(format string, args ...any) error {
		return &StaleError{Module: stampPath(root, wasm), Reason: fmt.Sprintf(format, args...)}
	}
	s, err := Read(wasm)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, stale("it has no build stamp (%s)", filepath.Base(wasm)+Suffix)
	}
	if err != nil {
		return nil, err
	}
	if s.Module != sum {
		return s, stale("it is not the module its stamp describes (it was replaced after the build)")
	}
	v, err := GoVersion(root)
	if err != nil {
		return s, err
	}
	if v != s.Go {
		return s, stale("built with %s, the toolchain is now %s", s.Go, v)
	}
	for _, f := range s.Files {
		got, err := digest(osPath(root, f.Path))
		if errors.Is(err, fs.ErrNotExist) {
			return s, stale("%s is gone", f.Path)
		}
		if err != nil {
			return s, fmt.Errorf("buildstamp: %w", err)
		}
		if got != f.SHA256 {
			return s, stale("%s changed", f.Path)
		}
	}
	for _, d := range s.Dirs {
		names, err := goFiles(osPath(root, d.Path))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s, fmt.Errorf("buildstamp: %w", err)
		}
		if !slices.Equal(names, d.GoFiles) {
			return s, stale("the Go files in %s changed (%s, were %s)", d.Path, list(names), list(d.GoFiles))
		}
	}
	return s, nil
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// goVersions caches `go env GOVERSION` per module root: Check runs once per module a test
// loads.
var goVersions sync.Map // root -> string

// GoVersion is the version of the toolchain the go command runs in root (a go.mod
// toolchain line can change it).
func GoVersion(root string) (string, error) {
	if v, ok := goVersions.Load(root); ok {
		return v.(string), nil
	}
	cmd := exec.Command("go", "env", "GOVERSION")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("buildstamp: go env GOVERSION: %w", err)
	}
	v := strings.TrimSpace(string(out))
	goVersions.Store(root, v)
	return v, nil
}
