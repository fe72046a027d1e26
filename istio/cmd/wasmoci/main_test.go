package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func TestRunWritesLayout(t *testing.T) {
	dir := t.TempDir()
	wasm := filepath.Join(dir, "spillway.wasm")
	if err := os.WriteFile(wasm, []byte("\x00asm\x01\x00\x00\x00body"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "oci")
	var stdout bytes.Buffer
	if err := run([]string{"-wasm", wasm, "-layout", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`manifest digest: (sha256:[0-9a-f]{64})`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no manifest digest in the output:\n%s", stdout.String())
	}
	lp, err := layout.FromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest.String() != m[1] {
		t.Fatalf("layout holds %v, the output printed %s", im.Manifests, m[1])
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string   // the mistake
		args []string // the command line
		want string   // in the error
	}{
		{"missing module", []string{"-wasm", filepath.Join(dir, "none.wasm"), "-layout", filepath.Join(dir, "o")}, "run make build"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
		{"push without tag", []string{"-wasm", writeModule(t, dir), "-layout", filepath.Join(dir, "o2"), "-push", "localhost:1/spillway"}, "-push"},
	} {
		err := run(tc.args, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func writeModule(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(p, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
