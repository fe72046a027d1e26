// Package modroot finds the spillway module's root directory (where go.mod is) from the
// working directory, for the build tools and the test helpers; it imports nothing of the
// module, so every layer may use it.
package modroot

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dir returns the directory of the nearest go.mod at or above the working directory: the
// main module's root, as the go command finds it (without GOFLAGS=-modfile).
func Dir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("modroot: %w", err)
	}
	return From(wd)
}

// From returns the directory of the nearest go.mod at or above dir.
func From(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("modroot: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && fi.Mode().IsRegular() {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("modroot: no go.mod in %s or above it: run inside the spillway module", dir)
		}
	}
}
