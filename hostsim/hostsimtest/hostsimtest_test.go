package hostsimtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/buildstamp"
)

// A module is loaded only while its build stamp matches its sources; otherwise the test
// is told to run make build.
func TestReadModuleRefusesAMissingOrStaleModule(t *testing.T) {
	tests := []struct {
		name   string                  // what happened after the build
		change func(root string) error // the change
		want   string                  // the error, "" when the module loads
	}{
		{"nothing", func(string) error { return nil }, ""},
		{"a source edited", func(root string) error {
			return os.WriteFile(filepath.Join(root, "cmd", "main.go"), []byte("package main\n\nfunc main() { println() }\n"), 0o644)
		}, "build/m.wasm is stale (cmd/main.go changed): run make build"},
		{"no stamp", func(root string) error { return os.Remove(filepath.Join(root, "build", "m.wasm.stamp")) },
			"build/m.wasm is stale (it has no build stamp (m.wasm.stamp)): run make build"},
		{"no module", func(root string) error { return os.Remove(filepath.Join(root, "build", "m.wasm")) },
			"build/m.wasm is missing: run make build"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, content := range map[string]string{
				"go.mod":       "module example.com/m\n\ngo 1.22\n",
				"go.sum":       "",
				"cmd/main.go":  "package main\n\nfunc main() {}\n",
				"build/m.wasm": "\x00asm",
			} {
				path := filepath.Join(root, filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := buildstamp.Compute(buildstamp.Inputs{Root: root, Packages: []string{"./cmd"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := buildstamp.Write(filepath.Join(root, "build", "m.wasm"), s); err != nil {
				t.Fatal(err)
			}
			if err := tt.change(root); err != nil {
				t.Fatal(err)
			}
			b, err := readModule(root, "build/m.wasm")
			if tt.want == "" {
				if err != nil || string(b) != "\x00asm" {
					t.Fatalf("readModule: %q, %v", b, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("readModule: %v, want %q", err, tt.want)
			}
		})
	}
}
