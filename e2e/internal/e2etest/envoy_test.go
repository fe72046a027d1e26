package e2etest

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bootstrap the Envoy runs are given points every cluster at its loopback fake over
// plain HTTP, loads the module from the given path, listens where the harness will send
// requests, lists SPILLWAY_ADMIN_TOKEN among the VM's environment keys, and carries the
// stats_tags the metrics scenario reads labels through. (No Envoy runs here: this is
// the part of the ENVOY_BIN path that can be checked without one.)
func TestRenderBootstrapPointsAtTheFakes(t *testing.T) {
	policy := `
providers:
  - {id: openai, cluster: fake-openai, connections: [{id: a, credential: {header: authorization, value: "Bearer k"}}]}
  - {id: anthropic, api: anthropic, cluster: fake-anthropic, connections: [{id: b, credential: {header: x-api-key, value: k}}]}
routes:
  - {model: gpt-4o, targets: [{provider: openai}]}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`
	_, p := loadPolicy(t, policy)
	tg := &Target{Policy: p, Fakes: startFakes(t, p)}
	if k := tg.Fakes["fake-anthropic"].Kind(); k != "anthropic" {
		t.Errorf("fake-anthropic speaks %s", k)
	}
	yaml := string(renderBootstrap(t, tg, "/tmp/module.wasm", "127.0.0.1:10555", "127.0.0.1:10556", 36))
	want := []string{
		"filename: /tmp/module.wasm",
		"- SPILLWAY_ADMIN_TOKEN",
		"allow_on_headers_stop_iteration: true",
		"port_value: 10555",
		"port_value: 10556",
		"tag_name: spillway_connection",
	}
	for name, f := range tg.Fakes {
		u, err := url.Parse(f.URL)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "cluster_name: "+name, "port_value: "+u.Port())
	}
	for _, w := range want {
		if !strings.Contains(yaml, w) {
			t.Errorf("the bootstrap lacks %q:\n%s", w, yaml)
		}
	}
	if strings.Contains(yaml, "transport_socket") {
		t.Errorf("a fake's cluster has TLS:\n%s", yaml)
	}
}

// A router-mode policy (resilience.failover.via: router) renders, through the same
// package envoy call, with the module as the upstream HTTP filter on every fake's
// cluster (before the upstream codec), the routed route's retry policy on the marker
// header alone, and the clusters' raised max_retries: what the router scenarios need from
// a real Envoy, checked here where none runs.
func TestRenderBootstrapRouterFailover(t *testing.T) {
	policy := `
providers:
  - {id: openai, cluster: fake-openai, connections: [{id: a, credential: {header: authorization, value: "Bearer k"}}, {id: b, credential: {header: authorization, value: "Bearer l"}}]}
  - {id: backup, cluster: fake-backup, connections: [{id: c, credential: {header: authorization, value: "Bearer m"}}]}
routes:
  - {model: gpt-4o, targets: [{provider: openai}, {provider: backup}]}
resilience:
  failover: {via: router, holdTries: true}
`
	_, p := loadPolicy(t, policy)
	tg := &Target{Policy: p, Fakes: startFakes(t, p)}
	// An Envoy 1.37 binary: the policy's holdTries is its to run (on 1.36 the policy is
	// refused, and EnvoyStarter skips the scenario before rendering).
	yaml := string(renderBootstrap(t, tg, "/tmp/module.wasm", "127.0.0.1:10555", "127.0.0.1:10556", 37))
	for w, n := range map[string]int{
		"root_id: spillway.upstream":              len(tg.Fakes), // one upstream filter per cluster
		"name: envoy.filters.http.upstream_codec": len(tg.Fakes),
		"retry_on: retriable-headers":             1,
		"- name: x-spillway-retry":                1, // the retriable header
		"- x-spillway-retry":                      1, // response_headers_to_remove
		"num_retries: 2":                          1,
		"max_retries: 1024":                       len(tg.Fakes),
		"allow_on_headers_stop_iteration: true":   1 + len(tg.Fakes),
	} {
		if got := strings.Count(yaml, w); got != n {
			t.Errorf("the bootstrap has %q %d times, want %d", w, got, n)
		}
	}
	if strings.Contains(yaml, "transport_socket") {
		t.Errorf("a fake's cluster has TLS:\n%s", yaml)
	}
	if t.Failed() {
		t.Logf("bootstrap:\n%s", yaml)
	}
}

// envoyMinor reads the release from `envoy --version` as Envoy prints it, and refuses
// output without one (a stand-in script plays the binary: no Envoy runs here).
func TestEnvoyMinor(t *testing.T) {
	for _, tt := range []struct {
		name   string // the case
		output string // what --version prints
		want   int    // the minor read (-1: an error)
	}{
		// Envoy's own format: <sha>/<release>/<status>/<build type>/<ssl>.
		{"release build", "envoy  version: 2d8a1ee0e0c3dc6dc7b8f8c6b9e3c8c2d8a1ee0e/1.39.1/Clean/RELEASE/BoringSSL", 39},
		// The supported floor.
		{"1.36", "envoy  version: 0123456789abcdef0123456789abcdef01234567/1.36.7/Clean/RELEASE/BoringSSL", 36},
		// Not Envoy's format at all.
		{"no release", "something else", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "envoy")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+tt.output+"'\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := EnvoyMinor(bin)
			switch {
			case tt.want < 0 && err == nil:
				t.Errorf("read 1.%d from %q, want an error", got, tt.output)
			case tt.want >= 0 && (err != nil || got != tt.want):
				t.Errorf("got 1.%d, %v; want 1.%d", got, err, tt.want)
			}
		})
	}
}
