package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// composeRender is the command compose/envoy.yaml was rendered with: the demo policy,
// its clusters at the compose fakes service, listening on every interface of the
// container (compose publishes the ports on the host's loopback only).
var composeRender = []string{"render", "envoy",
	"-cluster", "fake-openai=http://fakes:8081",
	"-cluster", "fake-openrouter=http://fakes:8082",
	"-cluster", "fake-anthropic=http://fakes:8083",
	"-listen", "0.0.0.0:10000", "-admin", "0.0.0.0:9901"}

// compose/envoy.yaml is what the renderer writes today, and compose.yaml's fakes
// service serves every cluster it names on the port it names.
func TestComposeBootstrapIsCurrent(t *testing.T) {
	root := hostsimtest.ModuleRoot(t)
	cmd := exec.Command("go", append([]string{"run", "./envoy/cmd/spillway"}, composeRender...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("spillway render envoy: %v\n%s", err, stderr.Bytes())
	}
	got, err := os.ReadFile(filepath.Join(root, "e2e", "compose", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("e2e/compose/envoy.yaml is stale; render it again:\n  go run ./envoy/cmd/spillway %s -o e2e/compose/envoy.yaml",
			strings.Join(composeRender, " "))
	}
	compose, err := os.ReadFile(filepath.Join(root, "e2e", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fake := range []string{"fake-openai=openai@0.0.0.0:8081", "fake-openrouter=openai@0.0.0.0:8082", "fake-anthropic=anthropic@0.0.0.0:8083"} {
		if !bytes.Contains(compose, []byte("- "+fake+"\n")) {
			t.Errorf("compose.yaml's fakes service does not serve %s", fake)
		}
	}
}
