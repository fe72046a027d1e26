package istio

import (
	"strings"
	"testing"

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
		{"no namespace", nil, func(o *Options) { o.Namespace = "" }, "namespace: required"},
		{"unknown mode", nil, func(o *Options) { o.Mode = "lua" }, `mode "lua"`},
		{"unknown failure policy", nil, func(o *Options) { o.FailurePolicy = "retry" }, `failure policy "retry"`},
		{"gateway without hosts", nil, func(o *Options) { o.Hosts = nil }, "hosts: a gateway needs"},
		{"host is no host name", nil, func(o *Options) { o.Hosts = []string{"llm_example.com"} }, "not a host name"},
		{"sidecar without selector", nil, func(o *Options) { o.Attach = AttachSidecar; o.Hosts = nil }, "a sidecar must name its workload"},
		{"image over https", nil, func(o *Options) { o.Image = "https://example.com/spillway.wasm" }, "want oci://"},
		{"image without digest", nil, func(o *Options) { o.ImageDigest = "" }, "image digest: required"},
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
		}, `"fake-azure" is no provider's cluster`},
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
		{"provider host is a frontend host", nil, func(o *Options) { o.Hosts = []string{"api.openai.com"} }, "both a provider's upstream and one of Hosts"},
		{"invalid policy", []byte("providers: []\nroutes: []\n"), func(*Options) {}, "istio: policy:"},
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
	o.FailurePolicy = FailOpen
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
		"failure_policy: FAIL_OPEN",                                     // the failure policy reaches Envoy
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
