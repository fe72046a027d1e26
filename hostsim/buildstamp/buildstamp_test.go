package buildstamp

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes files (slash paths relative to dir) with their contents.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fixture is a small module: cmd imports lib, lib embeds data.txt; tool/ is a builder's
// source given as an extra input; the overlay replaces lib/over.go by bridge/over.go.
func fixture(t *testing.T) (root string, in Inputs) {
	t.Helper()
	root = t.TempDir()
	writeFiles(t, root, map[string]string{
		"go.mod":          "module example.com/m\n\ngo 1.22\n",
		"go.sum":          "",
		"cmd/main.go":     "package main\n\nimport _ \"example.com/m/lib\"\n\nfunc main() {}\n",
		"lib/lib.go":      "package lib\n\nimport _ \"embed\"\n\n//go:embed data.txt\nvar Data string\n",
		"lib/native.go":   "//go:build ignore\n\npackage lib\n",
		"lib/lib_test.go": "package lib\n",
		"lib/data.txt":    "data\n",
		"lib/over.go":     "package lib\n",
		"bridge/over.go":  "package lib\n\nconst Bridged = true\n",
		"tool/tool.go":    "package main\n",
		"unused/u.go":     "package unused\n",
		"build/m.wasm":    "\x00asm",
	})
	in = Inputs{
		Root:     root,
		Packages: []string{"./cmd"},
		Overlay:  map[string]string{filepath.Join(root, "lib", "over.go"): filepath.Join(root, "bridge", "over.go")},
		Extra:    []string{"tool"},
		Build:    []string{"builder", "./cmd"},
	}
	// -overlay is what makes the go command list the overlaid file; the stamp reads the
	// file it stands for.
	overlay := filepath.Join(t.TempDir(), "overlay.json")
	writeFiles(t, filepath.Dir(overlay), map[string]string{filepath.Base(overlay): `{"Replace":{` +
		quote(filepath.Join(root, "lib", "over.go")) + ":" + quote(filepath.Join(root, "bridge", "over.go")) + "}}"})
	in.Flags = []string{"-overlay=" + overlay}
	return root, in
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `\`, `\\`) + `"` }

func TestComputeListsTheBuildsInputs(t *testing.T) {
	_, in := fixture(t)
	s, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range s.Files {
		paths = append(paths, f.Path)
	}
	// The compiled files, the embedded file, the overlay's source (not the file it
	// replaces), go.mod and go.sum, the extra directory's Go files; not tests, not files
	// the build constraints leave out, not packages nothing imports.
	want := "bridge/over.go cmd/main.go go.mod go.sum lib/data.txt lib/lib.go tool/tool.go"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("files %q, want %q", got, want)
	}
	var dirs []string
	for _, d := range s.Dirs {
		dirs = append(dirs, d.Path+":"+strings.Join(d.GoFiles, ","))
	}
	// Every Go file of each package directory, the build-ignored one included, is listed.
	if got, want := strings.Join(dirs, " "), "cmd:main.go lib:lib.go,native.go,over.go tool:tool.go"; got != want {
		t.Errorf("dirs %q, want %q", got, want)
	}
	if s.Go == "" || strings.Join(s.Build, " ") != "builder ./cmd" {
		t.Errorf("go %q, build %q", s.Go, s.Build)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string                          // what changed after the build
		change func(t *testing.T, root string) // the change
		stale  string                          // substring of the reason, "" for fresh
	}{
		{"nothing", func(*testing.T, string) {}, ""},
		{"a test file", func(t *testing.T, root string) {
			writeFiles(t, root, map[string]string{"lib/x_test.go": "package lib\n"})
		}, ""},
		{"a package nothing imports", func(t *testing.T, root string) {
			writeFiles(t, root, map[string]string{"unused/u.go": "package unused // x\n"})
		}, ""},
		{"a compiled file", func(t *testing.T, root string) { writeFiles(t, root, map[string]string{"lib/lib.go": "package lib\n"}) }, "lib/lib.go changed"},
		{"an embedded file", func(t *testing.T, root string) { writeFiles(t, root, map[string]string{"lib/data.txt": "other\n"}) }, "lib/data.txt changed"},
		{"the overlay's source", func(t *testing.T, root string) {
			writeFiles(t, root, map[string]string{"bridge/over.go": "package lib\n"})
		}, "bridge/over.go changed"},
		{"go.sum", func(t *testing.T, root string) { writeFiles(t, root, map[string]string{"go.sum": "x v1 h1:\n"}) }, "go.sum changed"},
		{"the builder's source", func(t *testing.T, root string) {
			writeFiles(t, root, map[string]string{"tool/tool.go": "package main // x\n"})
		}, "tool/tool.go changed"},
		{"a new file in a package", func(t *testing.T, root string) { writeFiles(t, root, map[string]string{"lib/new.go": "package lib\n"}) }, "the Go files in lib changed (lib.go native.go new.go over.go, were lib.go native.go over.go)"},
		{"a removed file", func(t *testing.T, root string) { os.Remove(filepath.Join(root, "cmd", "main.go")) }, "cmd/main.go is gone"},
		{"the module itself", func(t *testing.T, root string) { writeFiles(t, root, map[string]string{"build/m.wasm": "\x00asm\x01"}) }, "it is not the module its stamp describes"},
		{"the stamp removed", func(t *testing.T, root string) { os.Remove(filepath.Join(root, "build", "m.wasm"+Suffix)) }, "it has no build stamp (m.wasm.stamp)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, in := fixture(t)
			s, err := Compute(in)
			if err != nil {
				t.Fatal(err)
			}
			wasm := filepath.Join(root, "build", "m.wasm")
			if err := Write(wasm, s); err != nil {
				t.Fatal(err)
			}
			tt.change(t, root)
			got, err := Check(root, wasm)
			if tt.stale == "" {
				if err != nil {
					t.Fatalf("Check: %v, want fresh", err)
				}
				if strings.Join(got.Build, " ") != "builder ./cmd" {
					t.Errorf("the stamp read back has build %q", got.Build)
				}
				return
			}
			var se *StaleError
			if !errors.As(err, &se) || !strings.Contains(se.Reason, tt.stale) || se.Module != "build/m.wasm" {
				t.Fatalf("Check: %v, want stale build/m.wasm: %q", err, tt.stale)
			}
		})
	}
}

func TestCheckMissingModule(t *testing.T) {
	root := t.TempDir()
	_, err := Check(root, filepath.Join(root, "none.wasm"))
	var se *StaleError
	if !errors.Is(err, os.ErrNotExist) || errors.As(err, &se) {
		t.Fatalf("Check of a missing module: %v, want a not-exist error", err)
	}
}

func TestStampPath(t *testing.T) {
	root := filepath.FromSlash("/r/m")
	for in, want := range map[string]string{
		"/r/m/a/b.go":   "a/b.go",     // inside the root: relative
		"/r/mx/a.go":    "/r/mx/a.go", // a sibling sharing the prefix: absolute
		"/r/other.go":   "/r/other.go",
		"/r/m/..x/a.go": "..x/a.go", // a directory whose name starts with two dots is inside
	} {
		if got := stampPath(root, filepath.FromSlash(in)); got != want {
			t.Errorf("stampPath(%q) = %q, want %q", in, got, want)
		}
	}
}
