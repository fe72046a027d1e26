package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestApplyRuntimePatchToThisGoroot(t *testing.T) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "src", "runtime", "netpoll_wasip1.go"))
	if err != nil {
		t.Fatal(err)
	}
	patched, err := applyRuntimePatch(string(src))
	if err != nil {
		t.Fatalf("the installed Go's netpoll_wasip1.go no longer matches the patch anchor: %v", err)
	}
	// The early return sits after the empty-subscription check and before poll_oneoff.
	insert := strings.Index(patched, "if delay == 0 && len(pollsubs) == 1")
	poll := strings.Index(patched, "errno := poll_oneoff(")
	if insert < 0 || poll < 0 || insert > poll {
		t.Fatalf("early return at %d, poll_oneoff call at %d: the fix must come first", insert, poll)
	}
	if len(patched) != len(src)+len(runtimePatchInsert) {
		t.Fatalf("patch changed %d bytes, want exactly the %d inserted", len(patched)-len(src), len(runtimePatchInsert))
	}
}

func TestApplyRuntimePatchRefusesUnknownSource(t *testing.T) {
	for _, src := range []string{
		"package runtime\n",                            // anchor missing (Go changed the file)
		runtimePatchAnchor + "\n" + runtimePatchAnchor, // anchor twice: ambiguous
	} {
		if _, err := applyRuntimePatch(src); err == nil {
			t.Errorf("patched %q, want an error", src[:min(len(src), 30)])
		}
	}
}
