// Command envoycheck is the probe half of `make envoy-check`: it runs envoycheck's probe
// scenarios in the Envoy at -envoy (default $ENVOY_BIN) and in hostsim, and writes each
// run's trace in hostsim's golden format, with the diff between them, under -out
// (build/envoy-check): see e2e/README.md. Without an Envoy it says so and exits 2.
//
//	go run ./e2e/cmd/envoycheck -envoy /usr/local/bin/envoy
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/spillwayproxy/spillway/e2e/envoycheck"
	"github.com/spillwayproxy/spillway/internal/modroot"
)

func main() {
	bin := flag.String("envoy", os.Getenv("ENVOY_BIN"), "the Envoy binary (Envoy >= 1.36; default $ENVOY_BIN)")
	out := flag.String("out", "build/envoy-check", "where the traces and diffs go, relative to the module root")
	flag.Parse()
	code, err := run(*bin, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

func run(bin, out string) (int, error) {
	version, err := envoycheck.Version(bin)
	if errors.Is(err, envoycheck.ErrNoEnvoy) {
		return 2, err
	}
	root, err := modroot.Dir()
	if err != nil {
		return 1, err
	}
	probePath := filepath.Join(root, "build", "guests", "probe.wasm")
	probe, err := os.ReadFile(probePath)
	if err != nil {
		return 1, fmt.Errorf("%w (run make build)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1, err
	}
	srv := &http.Server{Handler: envoycheck.Upstream()}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	dir := filepath.Join(root, out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 1, err
	}
	results := map[string]bool{}
	var errs []error
	for _, s := range envoycheck.Scenarios {
		host, err := envoycheck.RunHostsim(probe, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		env, log, err := envoycheck.RunEnvoy(context.Background(), bin, version, probePath, l.Addr().String(), dir, s)
		if log != nil {
			_ = os.WriteFile(filepath.Join(dir, s.Name+".envoy.log"), log, 0o644)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		differs, err := envoycheck.Write(dir, env, host)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		results[s.Name] = differs
	}
	summary := envoycheck.Summary(results)
	_ = os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(version+"\n"+summary), 0o644)
	fmt.Printf("envoycheck: %s\n%s(traces and diffs in %s)\n", version, summary, out)
	if err := errors.Join(errs...); err != nil {
		return 1, err
	}
	return 0, nil
}
