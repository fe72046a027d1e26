package hostsim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// A compilation cache directory is kept within its limit: the entries written longest ago
// go first, whichever wazero version wrote them; a temporary file another process may be
// writing now stays.
func TestCompilationCacheIsBounded(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	files := []struct {
		name string        // path under the cache directory
		age  time.Duration // how long ago it was written
		kept bool          // whether it survives a limit of 250 bytes
	}{
		{"wazero-v1.0.0-amd64-linux/old", 5 * time.Hour, false}, // an old wazero's entry
		{"wazero-v1.12.0-amd64-linux/a", 4 * time.Hour, false},
		{"wazero-v1.12.0-amd64-linux/stale.x.tmp", 3 * time.Hour, false}, // left by a crashed writer
		{"wazero-v1.12.0-amd64-linux/b", 2 * time.Hour, true},
		{"wazero-v1.12.0-amd64-linux/c", time.Hour - time.Minute, true},
		{"wazero-v1.12.0-amd64-linux/d.y.tmp", time.Minute, true}, // being written: not counted
	}
	for _, f := range files {
		path := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Repeat("x", 100)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := hostsim.NewRuntime(hostsim.WithCompilationCacheDir(dir), hostsim.WithCompilationCacheLimit(250))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.name)))
		if kept := err == nil; kept != f.kept {
			t.Errorf("%s: kept=%v, want %v", f.name, kept, f.kept)
		}
	}
}

// The shared test Runtime keeps compiled code under build/, where make clean removes it.
func TestTestRuntimeCachesUnderBuild(t *testing.T) {
	hostsimtest.New(t, hostsimtest.Guest(t, "tiny"))
	dir := filepath.Join(hostsimtest.ModuleRoot(t), filepath.FromSlash(hostsimtest.CacheDir))
	if !strings.HasPrefix(hostsimtest.CacheDir, "build/") {
		t.Errorf("hostsimtest.CacheDir = %q, want a directory under build/", hostsimtest.CacheDir)
	}
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if n == 0 {
		t.Fatalf("no compiled code in %s after compiling a guest", dir)
	}
}
