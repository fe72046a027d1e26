package cachedir

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPruneRemovesTheOldestFirst(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	for _, f := range []struct {
		name string        // the file, under dir
		size int           // its size in bytes
		age  time.Duration // how long ago it was written
	}{
		{"v1/old", 40, 3 * time.Hour},
		{"v2/middle", 40, 2 * time.Hour},
		{"v2/new", 40, time.Hour},
		{"v2/writing.tmp", 40, time.Minute},   // being written: never pruned
		{"v2/stale.tmp", 1, 90 * time.Minute}, // an old leftover: counts like any entry
	} {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, f.size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	// 121 bytes count (the fresh .tmp does not); 80 fit: the two oldest go, and the 1-byte
	// leftover, younger, stays.
	Prune(dir, 80, now)
	var left []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, path)
			left = append(left, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(left)
	if want := []string{"v2/new", "v2/stale.tmp", "v2/writing.tmp"}; !slices.Equal(left, want) {
		t.Fatalf("left %q, want %q", left, want)
	}
}
