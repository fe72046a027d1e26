package istio

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	typeapi "istio.io/api/type/v1beta1"
)

var refusedDir = flag.String("refused-dir", "", "TestIstiodRulesRefused also writes each broken rendering to this directory (make istio-check runs istioctl over them and requires each refused)")

// refusedHeader starts each file TestIstiodRulesRefused writes: what istioctl's output must
// contain when it refuses the file (istio/istioctl/check -refused reads it).
const refusedHeader = "# istioctl refuses: "

// TestIstiodRulesRefused breaks one of istiod's own rules at a time in a rendering: rules
// Validate no longer restates, since Istio's istioctl judges every rendering in CI. With
// -refused-dir it writes each broken rendering there, headed by the message istioctl must
// print refusing it; make istio-check runs istioctl validate and analyze over each and fails
// unless one of them exits with an error containing that message. The messages are
// istiod's (pkg/config/validation/validation.go and envoyfilter/envoyfilter.go, the
// function named per case). Without the flag the test only checks that every break applies.
func TestIstiodRulesRefused(t *testing.T) {
	if *refusedDir != "" {
		if err := os.MkdirAll(*refusedDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		file   string                     // the broken rendering's file name, without .yaml
		base   int                        // index into exampleManifests of the manifests to break
		break_ func(*testing.T, []Object) // the mistake
		want   string                     // in istioctl's error
	}{
		// ValidateServiceEntry.
		{"serviceentry-no-hosts", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Hosts = nil
		}, "service entry must have at least one host"},
		{"serviceentry-wildcard-dns", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Hosts = []string{"*.openai.com"}
		}, "hosts must be FQDN or contain only prefix wildcards if no endpoints are provided for resolution mode DNS"},
		{"serviceentry-duplicate-port", 0, func(t *testing.T, o []Object) {
			se := spec[*networking.ServiceEntry](t, o, "api.openai.com")
			se.Ports = append(se.Ports, &networking.ServicePort{Number: se.Ports[0].Number, Name: "other", Protocol: "HTTP"})
		}, "service entry port 80 already defined"},
		{"serviceentry-protocol", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Ports[0].Protocol = "QUIC"
		}, "unsupported protocol: QUIC"},
		{"serviceentry-target-port", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Ports[0].TargetPort = 70000
		}, "port number 70000 must be in the range 1..65535"},
		{"serviceentry-port-name", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Ports[0].Name = "HTTP_Spillway"
		}, "invalid port name: HTTP_Spillway"},
		{"serviceentry-export-to", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").ExportTo = []string{"*", "."}
		}, "cannot have both public (*) and non-public exportTo values for a resource"},
		// ValidateDestinationRule.
		{"destinationrule-no-port", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").TrafficPolicy.PortLevelSettings[0].Port = nil
		}, "portTrafficPolicy must have valid port"},
		{"destinationrule-mutual", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").TrafficPolicy.PortLevelSettings[0].Tls.Mode = networking.ClientTLSSettings_MUTUAL
		}, "client certificate required for mutual tls"},
		{"destinationrule-no-host", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").Host = ""
		}, "empty domain name not allowed"},
		// ValidateGateway.
		{"gateway-no-hosts", 0, func(t *testing.T, o []Object) {
			spec[*networking.Gateway](t, o, "spillway").Servers[0].Hosts = nil
		}, "server config must contain at least one host"},
		{"gateway-https-no-tls", 0, func(t *testing.T, o []Object) {
			spec[*networking.Gateway](t, o, "spillway").Servers[0].Port.Protocol = "HTTPS"
		}, "server must have TLS settings for HTTPS/TLS protocols"},
		{"gateway-host-namespace", 0, func(t *testing.T, o []Object) {
			spec[*networking.Gateway](t, o, "spillway").Servers[0].Hosts[0] = "Bad_NS/llm.example.com"
		}, "invalid namespace value \"Bad_NS\" in gateway"},
		// ValidateVirtualService.
		{"virtualservice-header-name", 0, func(t *testing.T, o []Object) {
			vs := spec[*networking.VirtualService](t, o, "api.openai.com")
			vs.Http[0].Match[0].Headers = map[string]*networking.StringMatch{"x spillway": vs.Http[0].Match[0].Headers["x-spillway-cluster"]}
		}, "header name x spillway is not a valid header name"},
		{"virtualservice-no-http", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Http = nil
		}, "http, tcp or tls must be provided in virtual service"},
		{"virtualservice-destination-host", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Route[0].Destination.Host = "api_openai.com"
		}, "domain name \"api_openai.com\" invalid"},
		{"virtualservice-route-and-direct-response", 0, func(t *testing.T, o []Object) {
			vs := spec[*networking.VirtualService](t, o, "api.openai.com")
			vs.Http[0].DirectResponse = vs.Http[1].DirectResponse
		}, "HTTP route cannot contain both route and direct_response"},
		{"virtualservice-remove-host", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Headers.Request.Remove = []string{"host"}
		}, "invalid header \"host\": cannot set Host header"},
		{"virtualservice-mesh-wildcard", 1, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Hosts = []string{"*"}
		}, "wildcard host * is not allowed for virtual services bound to the mesh gateway"},
		{"virtualservice-gateway-name", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Gateways = []string{"Bad_NS/spillway"}
		}, "invalid value for namespace: \"Bad_NS\""},
		{"virtualservice-direct-response-status", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Http[0].DirectResponse.Status = 42
		}, "HTTP status 42 is not in range 200-599"},
		{"virtualservice-negative-timeout", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Timeout = durationpb.New(-1)
		}, "duration must be greater than 1ms"},
		// ValidateEnvoyFilter.
		{"envoyfilter-no-applyto", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].ApplyTo = networking.EnvoyFilter_INVALID
		}, "Envoy filter: missing applyTo"},
		{"envoyfilter-wildcard-selector", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").WorkloadSelector.Labels = map[string]string{"istio": "ingress*"}
		}, "wildcard is not supported in selector: \"istio=ingress*\""},
		{"envoyfilter-subfilter-not-hcm", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Match.GetListener().FilterChain.Filter.Name = "envoy.filters.network.tcp_proxy"
		}, "Envoy filter: subfilter match requires filter match with envoy.filters.network.http_connection_manager"},
		{"envoyfilter-http-filter-route-match", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[1].Match.ObjectTypes = ef.ConfigPatches[2].Match.ObjectTypes
		}, "Envoy filter: applyTo for listener class objects cannot have non listener match"},
		{"envoyfilter-virtual-host-listener-match", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[2].Match.ObjectTypes = ef.ConfigPatches[1].Match.ObjectTypes
		}, "Envoy filter: applyTo for http route class objects cannot have non route configuration match"},
		{"envoyfilter-proxy-version", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Match.Proxy = &networking.EnvoyFilter_ProxyMatch{ProxyVersion: "1.28("}
		}, "Envoy filter: invalid regex for proxy version"},
		{"envoyfilter-no-patch-value", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Patch.Value = nil
		}, "Envoy filter: missing patch value for non-remove operation"},
		{"envoyfilter-no-operation", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Patch.Operation = networking.EnvoyFilter_Patch_INVALID
		}, "Envoy filter: missing patch operation"},
		// ValidateWasmPlugin.
		{"wasmplugin-selector-and-targetrefs", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw"}}
		}, "only one of targetRefs or workloadSelector can be set"},
		{"wasmplugin-targetref-namespace", 2, func(t *testing.T, o []Object) {
			wp := spec[*extensionsapi.WasmPlugin](t, o, "spillway")
			wp.Selector = nil
			wp.TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw", Namespace: "other"}}
		}, "targetRef namespace must not be set; cross namespace referencing is not supported"},
		{"wasmplugin-targetref-kind", 2, func(t *testing.T, o []Object) {
			wp := spec[*extensionsapi.WasmPlugin](t, o, "spillway")
			wp.Selector = nil
			wp.TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Deployment", Group: "apps", Name: "gw"}}
		}, "targetRef must be to one of"},
		{"wasmplugin-host-env-value", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig.Env[0].Value = "sk-inline"
		}, "value may only be set when valueFrom is INLINE"},
		{"wasmplugin-duplicate-env", 2, func(t *testing.T, o []Object) {
			env := spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig.Env
			env[1].Name = env[0].Name
		}, "duplicate env"},
		{"wasmplugin-env-name-length", 2, func(t *testing.T, o []Object) {
			vm := spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig
			vm.Env = append(vm.Env, &extensionsapi.EnvVar{Name: strings.Repeat("N", 257), Value: "x"})
		}, "env.name field must be less than 255 characters long"},
		{"wasmplugin-pull-secret-length", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").ImagePullSecret = strings.Repeat("s", 254)
		}, "imagePullSecret field must be less than 253 characters long"},
		{"wasmplugin-name-length", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").PluginName = strings.Repeat("p", 257)
		}, "pluginName field must be less than 255 characters long"},
		{"wasmplugin-match-port", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Match = []*extensionsapi.WasmPlugin_TrafficSelector{
				{Ports: []*typeapi.PortSelector{{Number: 8080}, {Number: 70000}}}}
		}, "spec.Match[0].Ports[1] is out of range: 70000"},
		// ValidateTrafficExtension.
		{"trafficextension-name-length", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").GetWasm().PluginName = strings.Repeat("p", 257)
		}, "pluginName field must be less than 256 characters long"},
		{"trafficextension-match-port", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").Match[0].Ports = []*typeapi.PortSelector{{Number: 0}}
		}, "spec.Match[0].Ports[0] is out of range: 0"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			objs := renderDemo(t, exampleManifests[tc.base].opts).Objects
			tc.break_(t, objs)
			y, err := EncodeYAML(objs)
			if err != nil {
				t.Fatal(err)
			}
			if *refusedDir != "" {
				out := fmt.Appendf(nil, "%s%s\n%s", refusedHeader, tc.want, y)
				if err := os.WriteFile(filepath.Join(*refusedDir, tc.file+".yaml"), out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
