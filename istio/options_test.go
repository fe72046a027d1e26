package istio

import (
	"errors"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// TestRenderRejects: options and policies Render cannot turn into working mesh routes fail
// with a message that says what to change.
func TestRenderRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string         // the mistake
		policy []byte         // nil: the demo policy
		edit   func(*Options) // applied to the gateway example's options
		want   string         // in the error
	}{
		{"no namespace", nil, func(o *Options) { o.Namespace = "" }, "Namespace: required"},
		{"unknown mode", nil, func(o *Options) { o.Mode = "lua" }, `Mode: "lua": want one of`},
		{"unknown failure policy", nil, func(o *Options) { o.FailurePolicy = "retry" }, `FailurePolicy: "retry"`},
		{"gateway without hosts", nil, func(o *Options) { o.Hosts = nil }, "Hosts: a gateway needs"},
		{"host is no host name", nil, func(o *Options) { o.Hosts = []string{"llm_example.com"} }, "not a host name"},
		{"sidecar without selector", nil, func(o *Options) { o.Attach = AttachSidecar; o.Hosts = nil }, "a sidecar must name its workload"},
		{"image over https", nil, func(o *Options) { o.Image = "https://example.com/spillway.wasm" }, "want oci://"},
		{"image without digest", nil, func(o *Options) { o.ImageDigest = "" }, "ImageDigest: required"},
		{"image digest disagrees", nil, func(o *Options) {
			o.Image = "oci://ghcr.io/spillwayproxy/spillway@sha256:" + strings.Repeat("1", 64)
		}, "differs from the image's"},
		{"image digest form", nil, func(o *Options) { o.ImageDigest = "sha256:XYZ" }, "want sha256:<64"},
		{"pull secret in Full mode", nil, func(o *Options) { o.ImagePullSecret = "regcred" }, "an EnvoyFilter cannot name one"},
		{"existing gateway not ns/name", nil, func(o *Options) { o.Gateway = "gw" }, "want namespace/name"},
		{"gateway options on a sidecar", nil, func(o *Options) {
			o.Attach, o.Selector, o.Hosts, o.GatewayCredential = AttachSidecar, map[string]string{"app": "a"}, nil, "tls"
		}, "only for a gateway attachment"},
		{"cluster without upstream", nil, func(o *Options) {
			o.Upstreams = map[string]string{"fake-openai": "https://api.openai.com", "fake-anthropic": "https://api.anthropic.com"}
		}, `cluster "fake-openrouter" has no upstream`},
		{"upstream for no cluster", nil, func(o *Options) {
			o.Upstreams = map[string]string{"fake-openai": "https://api.openai.com", "fake-anthropic": "https://api.anthropic.com", "fake-openrouter": "https://openrouter.ai", "fake-azure": "https://x.example.com"}
		}, `Upstreams["fake-azure"]: no provider has this cluster`},
		{"upstream scheme", nil, func(o *Options) {
			o.Upstreams = map[string]string{"fake-openai": "grpc://api.openai.com", "fake-anthropic": "https://api.anthropic.com", "fake-openrouter": "https://openrouter.ai"}
		}, `scheme "grpc"`},
		{"upstream with a path", nil, func(o *Options) {
			o.Upstreams = map[string]string{"fake-openai": "https://api.openai.com/v1", "fake-anthropic": "https://api.anthropic.com", "fake-openrouter": "https://openrouter.ai"}
		}, "want https://host[:port]"},
		{"in-mesh upstream on another port from a sidecar", nil, func(o *Options) {
			o.Attach, o.Selector, o.Hosts = AttachSidecar, map[string]string{"app": "a"}, nil
			o.Upstreams = map[string]string{"fake-openai": "https://api.openai.com", "fake-anthropic": "https://api.anthropic.com", "fake-openrouter": "http://litellm.llm.svc.cluster.local:4000"}
		}, "only on Port 80"},
		{"authority is not the upstream host", []byte(strings.Replace(string(examples.Demo()), "cluster: fake-openai", "cluster: fake-openai\n    authority: openai.example.com", 1)), func(*Options) {}, "must be its upstream's host"},
		{"cluster from the environment", []byte(strings.Replace(string(examples.Demo()), "cluster: fake-anthropic", "cluster: ${ANTHROPIC_CLUSTER:-fake-anthropic}", 1)), func(*Options) {}, "must be literal in a mesh"},
		{"provider host is a frontend host", nil, func(o *Options) { o.Hosts = []string{"api.openai.com"} }, `Hosts: "api.openai.com" is also a provider's upstream host`},
		{"invalid policy", []byte("providers: []\nroutes: []\n"), func(*Options) {}, "istio: policy:"},
		{"cross-cluster router retries", []byte(strings.Replace(string(examples.Demo()), "\nresilience:\n", "\nresilience:\n  failover: {via: router, crossCluster: true}\n", 1)),
			func(*Options) {}, "resilience.failover.crossCluster: not rendered for Istio"},
		{"WasmPlugin with a body-routed policy", nil, func(o *Options) { o.Mode = ModeWasmPlugin }, "needs a policy with routing.mode: headers"},
		{"TrafficExtension with a body-routed policy", nil, func(o *Options) { o.Mode = ModeTrafficExtension }, "needs a policy with routing.mode: headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := exampleOptions(exampleManifests[0].opts)
			tc.edit(&o)
			policy := tc.policy
			if policy == nil {
				policy = examples.Demo()
			}
			_, err := Render(policy, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// TestRenderOptions: the options that change the resources change them as documented.
func TestRenderOptions(t *testing.T) {
	o := exampleOptions(exampleManifests[0].opts)
	o.GatewayCredential = "llm-example-com-tls"
	o.FailurePolicy = FailClosed
	o.InlineEnv = map[string]string{"RATE_LIMIT_MAX_WAIT_MS": "3000"}
	o.StatsTags = []StatsTag{{Name: "spillway_provider", Regex: `^wasmcustom\.spillway_provider\.((.+?)\.)`}}
	m, err := Render(examples.Demo(), o)
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"protocol: HTTPS", "credentialName: llm-example-com-tls", "number: 443", // the Gateway terminates TLS
		"name: llm.example.com:443",                                     // and the virtual hosts are on its port
		"failure_policy: FAIL_CLOSED",                                   // the failure policy reaches Envoy
		"RATE_LIMIT_MAX_WAIT_MS: \"3000\"",                              // inline env is in the resource
		"kind: ConfigMap", "custom_bootstrap.json", "spillway_provider", // the stats tags
	} {
		if !strings.Contains(string(y), want) {
			t.Errorf("the manifests lack %q", want)
		}
	}
	for _, name := range m.HostEnv {
		if name == "RATE_LIMIT_MAX_WAIT_MS" {
			t.Error("an inline variable is also read from the host")
		}
	}
	// Without a failure policy the filter gets the one the standalone bootstrap ships
	// (FAIL_RELOAD: a fresh VM for the next request, README "Deploying on standalone Envoy").
	unset := exampleOptions(exampleManifests[0].opts)
	unset.FailurePolicy = ""
	if m, err = Render(examples.Demo(), unset); err != nil {
		t.Fatal(err)
	}
	if y, _ = m.YAML(); !strings.Contains(string(y), "failure_policy: FAIL_RELOAD") {
		t.Error("a render without a failure policy does not ship FAIL_RELOAD")
	}
	pinned := exampleOptions(exampleManifests[0].opts)
	pinned.Image = "oci://ghcr.io/spillwayproxy/spillway@" + exampleDigest
	pinned.ImageDigest = ""
	m, err = Render(examples.Demo(), pinned)
	if err != nil {
		t.Fatal(err)
	}
	if y, _ = m.YAML(); !strings.Contains(string(y), "uri: oci://ghcr.io/spillwayproxy/spillway@"+exampleDigest) {
		t.Error("an image named by digest alone lost the digest from its url (istio-agent would fetch :latest)")
	}
	// istioctl's istio-ingressgateway listens on 8080 for the Service's port 80: the
	// listener patch follows GatewayListenerPort, the virtual hosts stay on GatewayPort.
	istioctl := exampleOptions(exampleManifests[0].opts)
	istioctl.GatewayListenerPort = 8080
	m, err = Render(examples.Demo(), istioctl)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range m.Objects {
		ef, ok := obj.Spec.(*networking.EnvoyFilter)
		if !ok {
			continue
		}
		for _, cp := range ef.ConfigPatches {
			if l := cp.Match.GetListener(); cp.ApplyTo == networking.EnvoyFilter_LISTENER && l.GetPortNumber() != 8080 {
				t.Errorf("listener patch on port %d, want GatewayListenerPort 8080", l.GetPortNumber())
			}
			if rc := cp.Match.GetRouteConfiguration(); rc != nil && rc.GetPortNumber() != 80 {
				t.Errorf("virtual host patch on port %d, want GatewayPort 80", rc.GetPortNumber())
			}
		}
	}
	existing := exampleOptions(exampleManifests[0].opts)
	existing.Gateway = "istio-ingress/public"
	m, err = Render(examples.Demo(), existing)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range m.Objects {
		if obj.Kind == "Gateway" {
			t.Error("a Gateway was emitted although Options.Gateway names an existing one")
		}
	}
	if y, _ = m.YAML(); !strings.Contains(string(y), "- istio-ingress/public") {
		t.Error("the VirtualServices do not bind to the existing Gateway")
	}
}

// TestRenderReportsEveryProblemTyped: Render reports every problem at once, each its own
// error: an OptionError naming the Options field (and the map key), or a
// policies.FieldError at the policy's path, so a caller (the spillway CLI) can say which
// flag or which policy field to change.
func TestRenderReportsEveryProblemTyped(t *testing.T) {
	for _, tc := range []struct {
		name string         // the mistakes
		edit func(*Options) // applied to the gateway example's options
		want []string       // every problem, as its Error()
	}{
		{"several options", func(o *Options) {
			o.Namespace, o.Image, o.Hosts, o.Mode = "", "ghcr.io/x/spillway:1", nil, "lua"
		}, []string{
			`Mode: "lua": want one of "full", "wasmplugin", "trafficextension"`,
			"Namespace: required",
			"Hosts: a gateway needs the hosts clients call it on",
			`Image: "ghcr.io/x/spillway:1": want oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`,
		}},
		{"gateway options on a sidecar", func(o *Options) {
			o.Attach, o.Selector, o.Hosts = AttachSidecar, map[string]string{"app": "a"}, nil
			o.Gateway, o.GatewayPort, o.GatewayListenerPort, o.GatewayCredential = "istio-ingress/public", 8080, 8080, "tls"
		}, []string{
			"Gateway: only for a gateway attachment",
			"GatewayPort: only for a gateway attachment",
			"GatewayListenerPort: only for a gateway attachment",
			"GatewayCredential: only for a gateway attachment",
		}},
		{"ports out of range", func(o *Options) { o.GatewayPort, o.GatewayListenerPort = 65536, 70000 }, []string{
			"GatewayPort: 65536: not a port number",
			"GatewayListenerPort: 70000: not a port number",
		}},
		{"upstreams and the policy", func(o *Options) {
			o.Upstreams = map[string]string{"fake-openai": "ftp://api.openai.com", "fake-azure": "https://x.example.com"}
		}, []string{
			`Upstreams["fake-azure"]: no provider has this cluster`,
			`Upstreams["fake-openai"]: "ftp://api.openai.com": scheme "ftp": want https (external, TLS originated) or http (a Service in the mesh)`,
			`providers[1].cluster: cluster "fake-openrouter" has no upstream: give it one in Upstreams (-upstream fake-openrouter=https://host) or set the provider's authority`,
			`providers[2].cluster: cluster "fake-anthropic" has no upstream: give it one in Upstreams (-upstream fake-anthropic=https://host) or set the provider's authority`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := exampleOptions(exampleManifests[0].opts)
			tc.edit(&o)
			_, err := Render(examples.Demo(), o)
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) {
				t.Fatalf("err = %v, want a list of problems", err)
			}
			var got []string
			for _, e := range joined.Unwrap() {
				var oe OptionError
				var fe policies.FieldError
				if !errors.As(e, &oe) && !errors.As(e, &fe) {
					t.Errorf("problem %q (%T) is neither an OptionError nor a policies.FieldError", e, e)
				}
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestRenderPassesOnThePolicyWarnings: a valid policy with doubtful values renders, and
// its warnings come back with their field paths.
func TestRenderPassesOnThePolicyWarnings(t *testing.T) {
	doc := "providers: [{id: p, cluster: c, authority: api.example.com, connections: [{id: a}]}]\n" +
		"routes: [{model: m, targets: [{provider: p}]}]\nresilience: {modelLockout: {baseCooldownMs: 5}}\n"
	m, err := Render([]byte(doc), Options{Namespace: "istio-ingress", Hosts: []string{"llm.example.com"},
		Image: "oci://ghcr.io/spillwayproxy/spillway:0.1.0", ImageDigest: exampleDigest})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Warnings) != 1 || m.Warnings[0].Path != "resilience.modelLockout.baseCooldownMs" {
		t.Errorf("warnings %v, want one at resilience.modelLockout.baseCooldownMs", m.Warnings)
	}
	if m := renderDemo(t, exampleManifests[0].opts); len(m.Warnings) != 0 {
		t.Errorf("the demo policy has warnings: %v", m.Warnings)
	}
}
