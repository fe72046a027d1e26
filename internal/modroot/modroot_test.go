package modroot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// From finds the nearest go.mod at or above a directory, and says so when there is none.
func TestFrom(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory named go.mod is not a module file.
	if err := os.Mkdir(filepath.Join(root, "a", "b", "go.mod"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := From(deep); err == nil || !strings.Contains(err.Error(), "no go.mod") {
		t.Fatalf("From without a go.mod: %v, want a no go.mod error", err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from string // the directory searched from
		want string // the module root found
	}{
		{deep, filepath.Join(root, "a")},
		{filepath.Join(root, "a"), filepath.Join(root, "a")},
	} {
		got, err := From(tc.from)
		if err != nil || got != tc.want {
			t.Errorf("From(%s) = %q, %v; want %q", tc.from, got, err, tc.want)
		}
	}
}

// Dir, from this package's directory, is the spillway module's root.
func TestDirIsTheSpillwayModule(t *testing.T) {
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(mod), "module github.com/spillwayproxy/spillway\n") {
		t.Fatalf("%s/go.mod is not the spillway module's:\n%.80s", dir, mod)
	}
	if wd, _ := os.Getwd(); wd != filepath.Join(dir, "internal", "modroot") {
		t.Fatalf("Dir() = %s, but this package is at %s", dir, wd)
	}
}
