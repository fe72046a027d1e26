package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// hostsim runs the command with args and returns its exit code and outputs.
func hostsim(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb hostsimtest.Lines
	code := run(t.Context(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func module(t *testing.T, rel string) string {
	t.Helper()
	hostsimtest.ReadModule(t, rel)
	return filepath.Join(hostsimtest.ModuleRoot(t), rel)
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string // substring of stdout
		wantErr  string // substring of stderr
	}{
		{[]string{"help"}, exitOK, "hostsim serve [flags]", ""},
		{[]string{"-h"}, exitOK, "hostsim run [flags] [PATH]", ""},
		{[]string{"help", "serve"}, exitOK, "-cluster name=http://host:port", ""},
		{[]string{"help", "run"}, exitOK, "-H \"Name: value\"", ""},
		{[]string{"serve", "-h"}, exitOK, "", "-failure-policy"},
		{[]string{}, exitUsage, "", "Usage:"},
		{[]string{"proxy"}, exitUsage, "", `unknown command "proxy"`},
		{[]string{"help", "proxy"}, exitUsage, "", `unknown command "proxy"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := hostsim(t, "", tt.args...)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
		})
	}
}

func TestBadFlagValuesExitWithUsage(t *testing.T) {
	tests := []struct {
		args []string // command line
		want string   // substring of stderr
	}{
		{[]string{"serve", "-cluster", "openai"}, `invalid value "openai" for flag -cluster: want name=http://host:port`},
		{[]string{"serve", "-workers", "0"}, `invalid value "0" for flag -workers: want a whole number of VMs from 1 to 64`},
		{[]string{"serve", "-wasi", "envoy"}, `invalid value "envoy" for flag -wasi`},
		{[]string{"serve", "-failure-policy", "open"}, `invalid value "open" for flag -failure-policy`},
		{[]string{"serve", "-env", "X"}, `invalid value "X" for flag -env: want KEY=VALUE`},
		{[]string{"serve", "-listen", "nowhere"}, `invalid value "nowhere" for flag -listen`},
		{[]string{"serve", "-timeout", "-1s"}, `invalid value "-1s" for flag -timeout`},
		{[]string{"serve", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "-H", "no colon"}, `invalid value "no colon" for flag -H`},
		{[]string{"run", "v1/models"}, `PATH "v1/models" must start with /`},
		{[]string{"run", "/a", "/b"}, "want at most one PATH"},
		{[]string{"run", "-d", "@/nonexistent/body.json"}, "-d: open /nonexistent/body.json"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := hostsim(t, "", tt.args...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant %q", code, errOut, tt.want)
			}
		})
	}
}

func TestInvalidPolicyFileFailsWithFieldPaths(t *testing.T) {
	p := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(p, []byte("providers:\n  - id: openai\n    connections: [{id: a}]\nroutes:\n  - model: gpt-4o\n    targets: [{provider: azure}]\nspeed: 11\n"), 0o644)
	// The module path does not exist: the policy is checked first.
	code, out, errOut := hostsim(t, "", "serve", "-policy", p, "-wasm", "/nonexistent.wasm")
	if code != exitError {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"invalid policy " + p, "\n  speed: ", "\n  providers[0].cluster: ", "\n  routes[0].targets[0].provider: "} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if out != "" {
		t.Errorf("stdout %q", out)
	}
}

// A module whose plugin refuses to start makes serve exit with the guest's critical log.
func TestModuleThatFailsToStart(t *testing.T) {
	probe := module(t, "build/guests/probe.wasm")
	code, _, errOut := hostsim(t, "", "serve", "-listen", "127.0.0.1:0", "-wasm", probe,
		"-env", "PROBE_INIT=configure log 5 probe: this configuration is unacceptable;configure ret 0")
	if code != exitError {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errOut, "hostsim: serve: the plugin refused to start:\nprobe: this configuration is unacceptable") {
		t.Errorf("stderr:\n%s", errOut)
	}
	// Guest logs carry their level and VM.
	if !strings.Contains(errOut, "[critical] canary: probe: this configuration is unacceptable") {
		t.Errorf("guest log line missing:\n%s", errOut)
	}
}

func TestRunOneRequest(t *testing.T) {
	wasm := module(t, "build/spillway.wasm")
	code, out, errOut := hostsim(t, `{"model":"text-embedding-3-small","input":"hi"}`, "run", "-wasm", wasm,
		"-workers", "1", "-H", "x-session-id: s1", "-d", "@-", "/v1/embeddings")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	// The demo routes text-embedding-* to the openai provider.
	for _, want := range []string{"HTTP/1.1 200 OK\n", "x-spillway-provider: openai\n", "x-spillway-connection: openai-a\n",
		"x-spillway-model: text-embedding-3-small\n", "x-spillway-attempts: 1\n", `"object":"embedding"`} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "content-length: "); n != 1 {
		t.Errorf("content-length printed %d times:\n%s", n, out)
	}
	// The default request is a gpt-4o chat completion.
	code, out, _ = hostsim(t, "", "run", "-wasm", wasm, "-workers", "1")
	if code != exitOK || !strings.Contains(out, `"object":"chat.completion"`) || !strings.Contains(out, "x-spillway-model: gpt-4o") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

// bannerURL finds the address serve listens on in its banner.
var bannerURL = regexp.MustCompile(`hostsim serve: \S+ on (http://\S+) `)

// serve runs until its context is cancelled (SIGINT/SIGTERM in main), logging the banner
// and one line per request, then shuts down cleanly. It listens on a port the system
// picks (-listen 127.0.0.1:0) and says which in its banner.
func TestServeUntilCancelled(t *testing.T) {
	wasm := module(t, "build/spillway.wasm")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb hostsimtest.Lines
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "-wasm", wasm, "-listen", "127.0.0.1:0"}, nil, &out, &errb) }()

	// The server is up once the banner is out (one write, ending in "try it:" and curls).
	out.Wait("try it:", 1)
	m := bannerURL.FindStringSubmatch(out.String())
	if m == nil {
		cancel()
		t.Fatalf("no banner with the address\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	resp, err := http.Post(m[1]+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		cancel()
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	_, _ = io.Copy(io.Discard, resp.Body) // read it all: closing early is a client that went away
	resp.Body.Close()
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d\n%s", code, errb.String())
		}
	case <-time.After(hostsimtest.WaitLimit):
		t.Fatal("serve did not stop")
	}
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	line := regexp.MustCompile(`POST /v1/chat/completions 200 \S+ worker-\d provider=\S+ connection=\S+ model=gpt-4o attempts=1`)
	if !line.MatchString(out.String()) || !strings.Contains(out.String(), "hostsim serve: shutting down") {
		t.Errorf("stdout:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "[info] worker-1: spillway: policy loaded") {
		t.Errorf("stderr lacks the guest's start-up log:\n%s", errb.String())
	}
}
