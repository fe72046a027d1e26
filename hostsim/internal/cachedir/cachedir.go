// Package cachedir keeps a compilation cache directory, which several processes may share,
// within a size limit.
package cachedir

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// tempGrace is how old a temporary file in the cache must be before pruning removes it:
// wazero writes an entry to a temporary file and renames it into place, and another
// process may be writing one now.
const tempGrace = time.Hour

// Prune removes the files written longest ago under dir until the rest take at most
// limit bytes. Every file counts, whichever wazero version wrote it (a version's entries
// live in a directory of their own, which an upgrade leaves behind). It is best effort:
// other processes may use the directory at the same time, and an entry removed under a
// reader is only compiled again.
func Prune(dir string, limit int64, now time.Time) {
	type entry struct {
		path string
		size int64
		mod  time.Time
	}
	var entries []entry
	var total int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasSuffix(d.Name(), ".tmp") && now.Sub(info.ModTime()) < tempGrace {
			return nil // being written
		}
		entries = append(entries, entry{path, info.Size(), info.ModTime()})
		total += info.Size()
		return nil
	})
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.mod.UnixNano(), b.mod.UnixNano()) })
	for _, e := range entries {
		if total <= limit {
			break
		}
		if err := os.Remove(e.path); err == nil || errors.Is(err, fs.ErrNotExist) {
			total -= e.size
		}
	}
}
