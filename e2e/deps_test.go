package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// sdkModules are the SDKs the end-to-end tests drive Spillway with.
var sdkModules = []string{"github.com/openai/openai-go/", "github.com/anthropics/anthropic-sdk-go/"}

// testDeps lists every package the tests of the packages matching pattern link.
func testDeps(t *testing.T, pattern string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", pattern)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, stderr.Bytes())
	}
	return strings.Fields(string(out))
}

// usesSDK returns the SDK packages among deps.
func usesSDK(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, m := range sdkModules {
			if strings.HasPrefix(d, m) {
				out = append(out, d)
			}
		}
	}
	return out
}

// The SDKs are the end-to-end tests' business: hostsim, a library, and its tests never
// link them (so a user of hostsim does not pull them in with its test dependencies).
// That e2e's own tests do link both shows the check looks for the right paths.
func TestHostsimTestsNeedNoSDK(t *testing.T) {
	const module = "github.com/spillwayproxy/spillway"
	if got := usesSDK(testDeps(t, module+"/hostsim/...")); len(got) != 0 {
		t.Errorf("hostsim's tests link the SDKs (move those tests to e2e): %v", got)
	}
	e2e := usesSDK(testDeps(t, module+"/e2e"))
	for _, m := range sdkModules {
		if !strings.Contains(strings.Join(e2e, " "), m) {
			t.Errorf("e2e's tests do not link %s: the check above would miss it", m)
		}
	}
}
