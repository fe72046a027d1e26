package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/envoy"
)

var update = flag.Bool("update", false, "rewrite envoy/envoy.yaml and envoy/envoy-ecds.yaml")

// exampleArgs render the demo policy for real providers: OpenAI and Anthropic over TLS,
// and the demo's OpenAI-compatible gateway on this machine (a LiteLLM, say, which names
// models openai/gpt-4o as the demo's fallback target does).
var exampleArgs = []string{
	"-cluster", "fake-openai=https://api.openai.com",
	"-cluster", "fake-anthropic=https://api.anthropic.com",
	"-cluster", "fake-openrouter=http://127.0.0.1:4000",
}

// generated are the files in envoy/ and the flags that render them.
var generated = []struct {
	file string
	args []string
}{
	{"envoy.yaml", exampleArgs},
	{"envoy-ecds.yaml", append([]string{"-xds", "127.0.0.1:18000"}, exampleArgs...)},
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestExamplesAreUpToDate regenerates envoy/envoy.yaml and envoy/envoy-ecds.yaml with the
// commands their headers print, and compares (go test ./envoy/cmd/spillway -update
// rewrites them).
func TestExamplesAreUpToDate(t *testing.T) {
	for _, ex := range generated {
		t.Run(ex.file, func(t *testing.T) {
			golden := filepath.Join("..", "..", ex.file)
			out := filepath.Join(t.TempDir(), ex.file)
			code, _, stderr := runCLI(t, append([]string{"render", "envoy", "-o", out}, ex.args...)...)
			if code != exitOK {
				t.Fatalf("render exited %d: %s", code, stderr)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), "spillway render envoy "+strings.Join(ex.args, " ")+"\n") {
				t.Errorf("the header does not give the command that renders the file")
			}
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./envoy/cmd/spillway -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("envoy/%s is stale: go test ./envoy/cmd/spillway -update rewrites it", ex.file)
			}
		})
	}
}

// TestRenderSaysWhichEnvoyAPolicyNeeds: -envoy-version chooses the failover switches a
// policy leaves unset and checks the ones it sets; the bootstrap's header names the oldest
// Envoy it runs on, each feature that raises it above the supported 1.36 (held tries:
// 1.37, envoyproxy/envoy#41879; cross-cluster retries: 1.39, refresh_cluster_on_retry) and
// what streams. The default release is the oldest supported, so a default bootstrap never
// asks for more than 1.36.
func TestRenderSaysWhichEnvoyAPolicyNeeds(t *testing.T) {
	demoClusters := []string{"-cluster", "fake-openai=https://api.openai.com", "-cluster", "fake-openrouter=https://openrouter.ai",
		"-cluster", "fake-anthropic=https://api.anthropic.com"}
	routerClusters := []string{"-policy", routerExample, "-cluster", "fake-openai=https://api.openai.com", "-cluster", "fake-openrouter=https://openrouter.ai"}
	tests := []struct {
		name string
		args []string // after render envoy -o FILE
		code int
		want []string // in the header (exit 0) or in stderr
		not  []string // not in the header
	}{
		{"the demo by default: 1.36, retries on status and headers to the same cluster", demoClusters, exitOK,
			[]string{"# Envoy (>= 1.36) bootstrap", "# Failover: rendered for Envoy 1.36 (-envoy-version), through the router",
				"a fallback to another provider or model fail over by callout and arrive whole"},
			[]string{"# Needs Envoy"}},
		{"the demo for 1.37: held tries", append([]string{"-envoy-version", "1.37"}, demoClusters...), exitOK,
			[]string{"# Envoy (>= 1.37) bootstrap", "# Needs Envoy 1.37 for a try held by the upstream filter",
				"rendered for Envoy 1.37", "a fallback to another provider or model fails over by callout and arrives whole"},
			[]string{"refresh_cluster_on_retry"}},
		{"the demo for 1.39: cross-cluster retries too", append([]string{"-envoy-version", "1.39.2"}, demoClusters...), exitOK,
			[]string{"# Envoy (>= 1.39) bootstrap", "# Needs Envoy 1.37 for a try held by the upstream filter",
				"# Needs Envoy 1.39 for RetryPolicy.refresh_cluster_on_retry", "is retried on any target, another provider or model included, and the retry streams."},
			[]string{"arrive"}},
		{"the router example's switches refused for 1.36", routerClusters, exitProblem,
			[]string{"resilience.failover.holdTries: needs Envoy ≥ 1.37", "resilience.failover.crossCluster: needs Envoy ≥ 1.39",
				"give -envoy-version for the release you run"}, nil},
		{"the router example for 1.39", append([]string{"-envoy-version", "1.39"}, routerClusters...), exitOK,
			[]string{"# Envoy (>= 1.39) bootstrap", "# Needs Envoy 1.39 for RetryPolicy.refresh_cluster_on_retry"}, nil},
		{"an unsupported release", append([]string{"-envoy-version", "1.35"}, demoClusters...), exitUsage,
			[]string{"is not supported (1.36 or newer)"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "envoy.yaml")
			code, _, stderr := runCLI(t, append([]string{"render", "envoy", "-o", out}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("render exited %d, want %d: %s", code, tt.code, stderr)
			}
			text := stderr
			if code == exitOK {
				data, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				text = string(data[:bytes.Index(data, []byte("\nnode:"))])
			}
			for _, want := range tt.want {
				if !strings.Contains(text, want) {
					t.Errorf("lacks %q:\n%s", want, text)
				}
			}
			for _, not := range tt.not {
				if strings.Contains(text, not) {
					t.Errorf("has %q:\n%s", not, text)
				}
			}
		})
	}
}

// routerExample is the router-failover example policy.
var routerExample = filepath.Join("..", "..", "..", "policies", "examples", "router.yaml")

// TestEnvoyAcceptsTheExamples runs a real Envoy's config check when ENVOY_BIN names one.
func TestEnvoyAcceptsTheExamples(t *testing.T) {
	bin := os.Getenv("ENVOY_BIN")
	if bin == "" {
		t.Log("ENVOY_BIN is not set: the generated bootstraps were NOT checked by a real Envoy (only by its protos' validators)")
		t.Skip("SKIPPED: set ENVOY_BIN=/path/to/envoy (>= 1.36) to run `envoy --mode validate` on the generated bootstraps")
	}
	module, err := filepath.Abs(filepath.Join("..", "..", "..", "build", "spillway.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(module); err != nil {
		t.Fatalf("%v: run make build", err)
	}
	for _, ex := range generated {
		t.Run(ex.file, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), ex.file)
			code, _, stderr := runCLI(t, append([]string{"render", "envoy", "-o", out, "-wasm", module}, ex.args...)...)
			if code != exitOK {
				t.Fatalf("render exited %d: %s", code, stderr)
			}
			cmd := exec.Command(bin, "--mode", "validate", "-c", out, "--log-level", "warn")
			cmd.Env = append(os.Environ(), "OPENAI_KEY_A=sk-test")
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("envoy --mode validate: %v\n%s", err, msg)
			}
		})
	}
	// The router example needs Envoy 1.39 (cross-cluster retries): checked only by one.
	t.Run("router.yaml", func(t *testing.T) {
		msg, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("envoy --version: %v\n%s", err, msg)
		}
		minor, err := envoy.VersionMinor(msg)
		if err != nil {
			t.Fatal(err)
		}
		if minor < 39 {
			t.Skipf("SKIPPED: %s is Envoy 1.%d; the router example needs 1.39 (refresh_cluster_on_retry)", bin, minor)
		}
		out := filepath.Join(t.TempDir(), "envoy-router.yaml")
		code, _, stderr := runCLI(t, "render", "envoy", "-o", out, "-wasm", module, "-policy", routerExample, "-envoy-version", "1."+strconv.Itoa(minor),
			"-cluster", "fake-openai=https://api.openai.com", "-cluster", "fake-openrouter=https://openrouter.ai")
		if code != exitOK {
			t.Fatalf("render exited %d: %s", code, stderr)
		}
		if msg, err := exec.Command(bin, "--mode", "validate", "-c", out, "--log-level", "warn").CombinedOutput(); err != nil {
			t.Fatalf("envoy --mode validate: %v\n%s", err, msg)
		}
	})
}

func TestLint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "providers: [{id: p, cluster: c, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: p}]}]\n")
	bad := write("bad.yaml", "providers: [{id: p, cluster: c, connections: [{id: a}]}]\nroutes: [{model: m, targets: [{provider: q}]}]\nresilience: {bogus: 1}\n")
	doubtful := write("doubtful.yaml", "providers:\n- {id: p, cluster: c, connections: [{id: a}]}\n- {id: unused, cluster: d, connections: [{id: b}]}\n"+
		"routes:\n- {model: '*', targets: [{provider: p}]}\n- {model: 'gpt-*', targets: [{provider: p}]}\nresilience: {modelLockout: {baseCooldownMs: 5}}\n")
	secret := write("secret.yaml", "providers: [{id: p, cluster: c, connections: [{id: a, credential: {header: authorization, value: \"Bearer ${SPILLWAY_TEST_UNSET_KEY}\"}}]}]\nroutes: [{model: m, targets: [{provider: p}]}]\n")

	tests := []struct {
		name string
		args []string
		code int      // exit status
		want []string // lines the output must contain
	}{
		// good.yaml leaves failover.via unset: a notice says it now goes through the router.
		{"good", []string{good}, exitOK, []string{"good.yaml: ok (1 providers, 1 routes)",
			"  notice: resilience.failover.via: unset, so failover goes through Envoy's router", "Set via: callout to keep the callout path"}},
		{"a notice never fails -strict", []string{"-strict", good}, exitOK, []string{"notice: resilience.failover.via"}},
		{"every problem with its path", []string{bad}, exitProblem, []string{
			"bad.yaml: 2 problem(s):", "  resilience.bogus: unknown field", "  routes[0].targets[0].provider: unknown provider \"q\""}},
		{"warnings and what is never served", []string{doubtful}, exitOK, []string{
			"warning: resilience.modelLockout.baseCooldownMs: clamped 5 ms",
			`routes[1]: never served: routes[0] ("*") comes first`,
			`providers[1]: never used`}},
		{"strict fails on them", []string{"-strict", doubtful}, exitProblem, []string{"never served"}},
		// Without -env a ${NAME} is a placeholder: the structure is checked.
		{"unset credential without -env", []string{secret}, exitOK, []string{"secret.yaml: ok"}},
		{"unset credential with -env", []string{"-env", secret}, exitProblem, []string{
			`providers[0].connections[0].credential.value: environment variable "SPILLWAY_TEST_UNSET_KEY" is not set`}},
		{"several files, the worst status", []string{good, bad}, exitProblem, []string{"good.yaml: ok", "bad.yaml: 2 problem(s)"}},
		{"missing file", []string{filepath.Join(dir, "nope.yaml")}, exitProblem, []string{"nope.yaml"}},
		{"no file", nil, exitUsage, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"lint"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestRenderRefusals(t *testing.T) {
	tests := []struct {
		name string
		args []string // after render envoy
		code int      // exit status
		want string   // in stderr
	}{
		{"a demo cluster without URL", []string{"-cluster", "fake-openai=https://api.openai.com"}, exitProblem,
			"providers[1].cluster: cluster \"fake-openrouter\" has no upstream URL"},
		{"bad failure policy", []string{"-failure-policy", "maybe"}, exitUsage, "want fail-reload, fail-closed or fail-open"},
		{"bad cluster flag", []string{"-cluster", "nourl"}, exitUsage, "want NAME=URL"},
		{"remote module without its sha256", append([]string{"-wasm-url", "https://example.com/spillway.wasm"}, exampleArgs...), exitProblem, "sha256"},
		{"stray argument", []string{"extra"}, exitUsage, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"render", "envoy"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d (want %d), stderr %q, want it to contain %q", code, tt.code, stderr, tt.want)
			}
		})
	}
}

func TestRenderWritesToStandardOutput(t *testing.T) {
	code, stdout, stderr := runCLI(t, append([]string{"render", "envoy", "-failure-policy", "fail-closed"}, exampleArgs...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, "# Envoy (>= 1.36) bootstrap for Spillway") || !strings.Contains(stdout, "failure_policy: FAIL_CLOSED") {
		t.Errorf("output:\n%.400s", stdout)
	}
}

func TestCommands(t *testing.T) {
	code, stdout, _ := runCLI(t, "help")
	if code != exitOK || !strings.Contains(stdout, "lint") || !strings.Contains(stdout, "render") || !strings.Contains(stdout, "xds") {
		t.Errorf("help: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ := runCLI(t, "render", "help"); code != exitOK || !strings.Contains(stdout, "  envoy ") || !strings.Contains(stdout, "  istio ") {
		t.Errorf("render help: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := runCLI(t, "deploy"); code != exitUsage || !strings.Contains(stderr, `unknown command "deploy"`) {
		t.Errorf("unknown command: exit %d, %s", code, stderr)
	}
	if code, _, _ := runCLI(t); code != exitUsage {
		t.Errorf("no command: exit %d", code)
	}
	if code, _, stderr := runCLI(t, "xds"); code != exitUsage || !strings.Contains(stderr, "-policy FILE is required") {
		t.Errorf("xds without a policy: exit %d, %s", code, stderr)
	}
}
