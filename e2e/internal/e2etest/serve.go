package e2etest

import (
	"context"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/hostsim/serve"
)

// StartServe is a Starter running the filter in `hostsim serve`, in-process, on
// 127.0.0.1:0 with its admin listener, as `hostsim serve -cluster NAME=URL...` would
// (serve's defaults otherwise: two workers, the Envoy the generated bootstrap describes).
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
	opts := serve.DefaultOptions()
	opts.Listen = "127.0.0.1:0"
	opts.Admin = "127.0.0.1:0"
	opts.WasmPath = WasmPath(t)
	opts.PolicyPath = path
	opts.Runtime = hostsimtest.Runtime(t)
	opts.Env = append(opts.Env, serve.EnvVar{Key: EnvAdminToken, Value: AdminToken})
	for _, name := range sortedKeys(tg.Fakes) {
		opts.Clusters = append(opts.Clusters, serve.Cluster{Name: name, URL: tg.Fakes[name].URL})
	}
	if change != nil {
		change(&opts)
	}
	inst, err := serve.Start(opts, tg.Access, tg.Logs)
	if err != nil {
		t.Fatalf("e2etest: serve.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := inst.Shutdown(ctx); err != nil {
			t.Errorf("e2etest: serve shutdown: %v", err)
		}
	})
	tg.Serve, tg.URL, tg.AdminURL = inst, inst.URL(), "http://"+inst.AdminAddr
	return tg
}
