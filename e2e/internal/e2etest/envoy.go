package e2etest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// EnvEnvoyBin names the environment variable that points the real-Envoy runs at an
// Envoy binary (>= 1.36).
const EnvEnvoyBin = "ENVOY_BIN"

// EnvoyStarter returns a Starter running the filter in a real Envoy, the binary at bin:
// the harness starts the fakes on loopback, renders the bootstrap with package envoy
// (as `spillway render envoy` does, stats_tags included) with every cluster pointing at
// its fake over plain HTTP, the module build/spillway.wasm and loopback ports for the
// listener and the admin, and runs `bin -c bootstrap.yaml --concurrency 2
// --disable-hot-restart` with SPILLWAY_ADMIN_TOKEN in its environment, until Envoy's
// /ready answers LIVE.
//
// Unverified: this path compiles and is documented, but has not run against an Envoy
// here (the machine it was written on has none). The ports are picked by binding :0 and
// closing it, so another process could take one before Envoy does (the start then fails,
// with Envoy's log).
//
// A scenario whose policy needs a newer Envoy than bin (envoy.RequiredEnvoy: failover's
// holdTries 1.37, crossCluster 1.39) is skipped, saying so.
func EnvoyStarter(bin string) Starter {
	var once sync.Once
	var minor int
	var versionErr error
	return func(t testing.TB, policy string) *Target {
		t.Helper()
		_, p := loadPolicy(t, policy)
		once.Do(func() { minor, versionErr = EnvoyMinor(bin) })
		if versionErr != nil {
			t.Fatalf("e2etest: %v", versionErr)
		}
		if need, features := envoy.RequiredEnvoy(p); need > minor {
			t.Skipf("SKIPPED on %s: Envoy 1.%d; this scenario's policy needs 1.%d (%v)", bin, minor, need, features)
		}
		tg := &Target{Kind: "envoy", Policy: p, Fakes: startFakes(t, p), Logs: &hostsimtest.Lines{}}
		listen, admin := freeAddr(t), freeAddr(t)
		yaml := renderBootstrap(t, tg, WasmPath(t), listen, admin, minor)
		cfg := filepath.Join(t.TempDir(), "envoy.yaml")
		if err := os.WriteFile(cfg, yaml, 0o600); err != nil {
			t.Fatalf("e2etest: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "-c", cfg, "--concurrency", "2", "--disable-hot-restart", "--log-level", "info")
		cmd.Env = append(os.Environ(), EnvAdminToken+"="+AdminToken)
		cmd.Stdout, cmd.Stderr = tg.Logs, tg.Logs
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("e2etest: start %s: %v", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cancel()
				<-exited
			}
			cancel()
		})
		tg.URL, tg.AdminURL = "http://"+listen, "http://"+admin
		waitReady(t, tg, exited)
		return tg
	}
}

// EnvoyMinor reads bin's release from `envoy --version`: its minor number.
func EnvoyMinor(bin string) (int, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	minor, err := envoy.VersionMinor(out)
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", bin, err)
	}
	return minor, nil
}

// renderBootstrap renders the Envoy bootstrap for tg's policy as `spillway render envoy
// -envoy-version 1.<minor>` does (stats_tags included), every cluster pointing at its fake
// over plain HTTP, the module at wasm, the listener and the admin on the given addresses:
// the failover switches the policy leaves unset are chosen for the binary's release.
func renderBootstrap(t testing.TB, tg *Target, wasm, listen, admin string, minor int) []byte {
	t.Helper()
	upstreams := map[string]string{}
	for name, f := range tg.Fakes {
		upstreams[name] = f.URL
	}
	var tags []envoy.StatsTag
	for _, tag := range stats.Tags() {
		tags = append(tags, envoy.StatsTag{Name: tag.Name, Regex: tag.Regex})
	}
	b, err := envoy.Bootstrap(tg.Policy, envoy.Options{
		Module:     envoy.Module{Path: wasm},
		Upstreams:  upstreams,
		Listen:     listen,
		Admin:      admin,
		StatsTags:  tags,
		EnvoyMinor: minor,
	})
	if err != nil {
		t.Fatalf("e2etest: envoy.Bootstrap: %v", err)
	}
	yaml, err := envoy.MarshalYAML(b)
	if err != nil {
		t.Fatalf("e2etest: %v", err)
	}
	return yaml
}

// waitReady waits until Envoy's admin /ready answers 200 LIVE, bounded by
// hostsimtest.WaitLimit; an Envoy that exits first fails the test with its log.
func waitReady(t testing.TB, tg *Target, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(hostsimtest.WaitLimit)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("e2etest: envoy exited before it was ready (%v):\n%s", err, tg.Logs)
		default:
		}
		if resp, err := http.Get(tg.AdminURL + "/ready"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "LIVE") {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("e2etest: envoy not ready within %v:\n%s", hostsimtest.WaitLimit, tg.Logs)
}

// freeAddr returns a loopback address with a port nothing listened on a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("e2etest: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
