package e2etest

import (
	"context"
	"io"
	"testing"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/hostsim/serve"
)

// StartServe is a Starter running the filter in `hostsim serve`, in-process, on
// 127.0.0.1:0 with its admin listener, as `hostsim serve -cluster NAME=URL...` would
// (serve's defaults otherwise: two workers, the Envoy the generated bootstrap describes),
// for the oldest Envoy the policy runs on (-envoy-version; envoy.RequiredEnvoy: 1.36 unless
// the policy's own holdTries or crossCluster need 1.37 or 1.39, as EnvoyStarter skips an
// older binary), so a failover switch the policy leaves unset is chosen as for 1.36.
// Its fakes are the harness's (startFakes), one per cluster, so a Target under Envoy has
// the very same ones.
func StartServe(t testing.TB, policy string) *Target {
	t.Helper()
	return StartServeWith(t, policy, nil)
}

// StartServeWith is StartServe with change adjusting serve's options first.
func StartServeWith(t testing.TB, policy string, change func(*serve.Options)) *Target {
	t.Helper()
	path, p := loadPolicy(t, policy)
	tg := &Target{Kind: "hostsim", Policy: p, Fakes: startFakes(t, p),
		Logs: &hostsimtest.Lines{}, Access: &hostsimtest.Lines{}}
	opts := ServeOptions(t, "build/spillway.wasm")
	opts.PolicyPath = path
	opts.Env = append(opts.Env, serve.EnvVar{Key: EnvAdminToken, Value: AdminToken})
	for _, name := range sortedKeys(tg.Fakes) {
		opts.Clusters = append(opts.Clusters, serve.Cluster{Name: name, URL: tg.Fakes[name].URL})
	}
	opts.EnvoyMinor, _ = envoy.RequiredEnvoy(p)
	if change != nil {
		change(&opts)
	}
	inst := StartInstance(t, opts, tg.Access, tg.Logs)
	tg.Serve, tg.URL, tg.AdminURL = inst, inst.URL(), "http://"+inst.AdminAddr
	return tg
}

// ServeOptions are serve's defaults for a test: both listeners on 127.0.0.1:0, the tests'
// shared wazero runtime (one compilation cache) and module, a path under build/ that must be
// built and fresh (a missing or stale one fails the test with "run make build"). Without
// clusters, serve starts its built-in fakes.
func ServeOptions(t testing.TB, module string) serve.Options {
	t.Helper()
	opts := serve.DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	opts.Admin = "127.0.0.1:0"
	opts.WasmPath = modulePath(t, module)
	opts.Runtime = hostsimtest.Runtime(t)
	return opts
}

// StartInstance starts serve in-process with opts, its access lines going to access and the
// filter's log to logs, and shuts it down gracefully when the test ends (a shutdown that
// fails, or outlasts serve.ShutdownGrace, fails the test).
func StartInstance(t testing.TB, opts serve.Options, access, logs io.Writer) *serve.Instance {
	t.Helper()
	inst, err := serve.Start(opts, access, logs)
	if err != nil {
		t.Fatalf("e2etest: serve.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), serve.ShutdownGrace)
		defer cancel()
		if err := inst.Shutdown(ctx); err != nil {
			t.Errorf("e2etest: serve shutdown: %v", err)
		}
	})
	return inst
}
