package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/buildstamp"
)

// copyCheckout copies the module's sources at root into dst, as a second checkout would
// have them: everything but the build outputs and the git directory.
func copyCheckout(t *testing.T, root, dst string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "build" || rel == ".git" { // .git is a file in a worktree
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy the checkout: %v", err)
	}
}

// The same sources build to the same bytes wherever the checkout is (the sha256 goes into
// Istio manifests and OCI digests): the small noop module, built in two checkouts at paths
// of different lengths, is byte for byte the module `make build` made in this one, and
// names none of the three paths.
func TestBuildIsReproducibleAcrossCheckouts(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	const rel = "build/noop.wasm"
	if _, err := buildstamp.Check(root, filepath.Join(root, rel)); err != nil {
		t.Fatalf("%v: run make build", err)
	}
	here, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	checkouts := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "a", "much", "deeper", "checkout")}
	paths := append([]string{root}, checkouts...)
	for _, dir := range checkouts {
		copyCheckout(t, root, dir)
		if err := Build(Options{Root: dir, Output: rel, Package: "./plugin/noop", WorkDir: "build/.wasmbuild"}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		sumHere, sumThere := sha256.Sum256(here), sha256.Sum256(got)
		t.Logf("%s: sha256 %s", filepath.Join(dir, rel), hex.EncodeToString(sumThere[:]))
		if sumHere != sumThere {
			t.Errorf("built in %s: sha256 %x, in %s: %x", dir, sumThere, root, sumHere)
		}
		for _, p := range paths {
			if bytes.Contains(got, []byte(p)) {
				t.Errorf("the module built in %s contains the path %s", dir, p)
			}
		}
		// The copy's stamp vouches for the copy's module.
		if _, err := buildstamp.Check(dir, filepath.Join(dir, rel)); err != nil {
			t.Errorf("the stamp written in %s: %v", dir, err)
		}
	}
	sum := sha256.Sum256(here)
	t.Logf("%s: sha256 %s", filepath.Join(root, rel), hex.EncodeToString(sum[:]))
}

// A failed build leaves no stamp behind that would vouch for the module of an earlier one.
func TestFailedBuildRemovesTheStamp(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyCheckout(t, root, dir)
	out := filepath.Join(dir, "build", "noop.wasm")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out+buildstamp.Suffix, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A syntax error in the package: the go command lists it, the compiler refuses it.
	if err := os.WriteFile(filepath.Join(dir, "plugin", "noop", "broken.go"), []byte("package main\n\nfunc broken( {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Build(Options{Root: dir, Output: out, Package: "./plugin/noop", WorkDir: "build/.wasmbuild"}); err == nil {
		t.Fatal("the broken package built")
	}
	if _, err := os.Stat(out + buildstamp.Suffix); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the stamp is still there after a failed build (stat: %v)", err)
	}
}
