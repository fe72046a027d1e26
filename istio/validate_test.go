package istio

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	typeapi "istio.io/api/type/v1beta1"
)

// spec returns the spec of the first object of type T whose name has the given suffix.
func spec[T proto.Message](t *testing.T, objs []Object, nameSuffix string) T {
	t.Helper()
	for i := range objs {
		if s, ok := objs[i].Spec.(T); ok && strings.HasSuffix(objs[i].Name, nameSuffix) {
			return s
		}
	}
	var zero T
	t.Fatalf("no %T named *%s", zero, nameSuffix)
	return zero
}

// patchValue decodes the value of an EnvoyFilter's i-th patch into m, lets edit change it
// and writes it back.
func patchValue[M proto.Message](t *testing.T, ef *networking.EnvoyFilter, i int, m M, edit func(M)) {
	t.Helper()
	js, err := ef.ConfigPatches[i].Patch.Value.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := strictProto.Unmarshal(js, m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	s, err := toStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	ef.ConfigPatches[i].Patch.Value = s
}

// editWasm edits the Full mode's Wasm plugin config (patch 0 is the EXTENSION_CONFIG).
func editWasm(t *testing.T, objs []Object, edit func(*wasmv3.PluginConfig)) {
	t.Helper()
	ef := spec[*networking.EnvoyFilter](t, objs, "spillway")
	patchValue(t, ef, 0, new(corev3.TypedExtensionConfig), func(ec *corev3.TypedExtensionConfig) {
		w := new(wasmfilterv3.Wasm)
		if err := ec.TypedConfig.UnmarshalTo(w); err != nil {
			t.Fatal(err)
		}
		edit(w.Config)
		ec.TypedConfig = mustAny(w)
	})
}

func editPolicy(t *testing.T, objs []Object, edit func(string) string) {
	t.Helper()
	editWasm(t, objs, func(pc *wasmv3.PluginConfig) {
		cfg := new(wrapperspb.StringValue)
		if err := pc.Configuration.UnmarshalTo(cfg); err != nil {
			t.Fatal(err)
		}
		pc.Configuration = mustAny(wrapperspb.String(edit(cfg.Value)))
	})
}

// TestValidateRules breaks one thing at a time in rendered manifests; each must fail with
// a message that names the problem.
func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string                     // the rule
		base   int                        // index into exampleManifests of the manifests to break
		break_ func(*testing.T, []Object) // the mistake
		want   string                     // in the error
	}{
		// Kubernetes metadata.
		{"name is not a DNS subdomain", 0, func(t *testing.T, o []Object) { o[0].Name = "Spillway_SE" }, "metadata.name"},
		{"no namespace", 0, func(t *testing.T, o []Object) { o[0].Namespace = "" }, "metadata.namespace: required"},
		// ServiceEntry (ValidateServiceEntry).
		{"service entry without hosts", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Hosts = nil
		}, "at least one host"},
		{"wildcard host with DNS resolution", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Hosts = []string{"*.openai.com"}
		}, "hosts must be FQDN"},
		{"duplicate port number", 0, func(t *testing.T, o []Object) {
			se := spec[*networking.ServiceEntry](t, o, "api.openai.com")
			se.Ports = append(se.Ports, &networking.ServicePort{Number: se.Ports[0].Number, Name: "other", Protocol: "HTTP"})
		}, "already defined"},
		{"unknown protocol", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Ports[0].Protocol = "QUIC"
		}, "unrecognized protocol"},
		{"target port out of range", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").Ports[0].TargetPort = 70000
		}, "must be 1-65535"},
		{"bad exportTo", 0, func(t *testing.T, o []Object) {
			spec[*networking.ServiceEntry](t, o, "api.openai.com").ExportTo = []string{"*", "."}
		}, "must be the only entry"},
		// DestinationRule (ValidateDestinationRule, validateTLS).
		{"TLS origination without a name to verify", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").TrafficPolicy.PortLevelSettings[0].Tls.SubjectAltNames = nil
		}, "certificate's name is not verified"},
		{"port level settings without a port", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").TrafficPolicy.PortLevelSettings[0].Port = nil
		}, "must specify port"},
		{"MUTUAL without certificates", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").TrafficPolicy.PortLevelSettings[0].Tls.Mode = networking.ClientTLSSettings_MUTUAL
		}, "client certificate and private key required"},
		// Gateway (ValidateGateway).
		{"HTTPS server without TLS", 0, func(t *testing.T, o []Object) {
			spec[*networking.Gateway](t, o, "spillway").Servers[0].Port.Protocol = "HTTPS"
		}, "must have TLS settings"},
		{"gateway host with a bad namespace", 0, func(t *testing.T, o []Object) {
			spec[*networking.Gateway](t, o, "spillway").Servers[0].Hosts[0] = "Bad_NS/llm.example.com"
		}, "namespace must be"},
		// VirtualService (ValidateVirtualService, validateHTTPRoute).
		{"catch-all before the provider route", 0, func(t *testing.T, o []Object) {
			vs := spec[*networking.VirtualService](t, o, "api.openai.com")
			vs.Http[0], vs.Http[1] = vs.Http[1], vs.Http[0]
		}, "unreachable"},
		{"upper-case header match", 0, func(t *testing.T, o []Object) {
			vs := spec[*networking.VirtualService](t, o, "api.openai.com")
			vs.Http[0].Match[0].Headers = map[string]*networking.StringMatch{"X-Spillway-Cluster": vs.Http[0].Match[0].Headers["x-spillway-cluster"]}
		}, "not a valid lower-case header name"},
		{"route and direct response together", 0, func(t *testing.T, o []Object) {
			vs := spec[*networking.VirtualService](t, o, "api.openai.com")
			vs.Http[0].DirectResponse = vs.Http[1].DirectResponse
		}, "both route and direct_response"},
		{"removing the Host header", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Headers.Request.Remove = []string{"host"}
		}, "cannot change Host"},
		{"wildcard host on the mesh", 1, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Hosts = []string{"*"}
		}, "wildcard host * is not allowed"},
		{"gateway not namespace/name", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Gateways = []string{"spillway"}
		}, "want <namespace>/<name>"},
		{"direct response status", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "spillway").Http[0].DirectResponse.Status = 42
		}, "must be 200-599"},
		// EnvoyFilter (ValidateEnvoyFilter).
		{"workload selector and targetRefs", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw"}}
		}, "only one of targetRefs or workloadSelector"},
		{"selector without labels", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").WorkloadSelector.Labels = nil
		}, "without labels"},
		{"wildcard selector", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").WorkloadSelector.Labels = map[string]string{"istio": "ingress*"}
		}, "wildcards are not supported"},
		{"extension config merged, not added", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[0].Patch.Operation = networking.EnvoyFilter_Patch_MERGE
		}, "istiod serves only ADD extension configs"},
		{"sub filter under a non-HCM filter", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Match.GetListener().FilterChain.Filter.Name = "envoy.filters.network.tcp_proxy"
		}, "subfilter match requires filter match"},
		{"HTTP filter with a route match", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[1].Match.ObjectTypes = ef.ConfigPatches[2].Match.ObjectTypes
		}, "cannot have non listener match"},
		{"virtual host patch with a listener match", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[2].Match.ObjectTypes = ef.ConfigPatches[1].Match.ObjectTypes
		}, "cannot have non route configuration match"},
		{"bad proxy version regex", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Match.Proxy = &networking.EnvoyFilter_ProxyMatch{ProxyVersion: "1.28("}
		}, "invalid regex for proxy version"},
		{"missing patch value", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Patch.Value = nil
		}, "missing patch value"},
		{"unknown field in a patch value", 0, func(t *testing.T, o []Object) {
			v := spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Patch.Value
			v.Fields["allow_on_headers_stop_iteration"] = structpb.NewBoolValue(true)
		}, "does not decode as envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"},
		{"Envoy's own rules on an inserted filter", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, 1, new(hcmv3.HttpFilter), func(hf *hcmv3.HttpFilter) { hf.Name = "" })
		}, "invalid HttpFilter.Name"},
		{"listener patch with a filter match", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[listenerPatch(t, ef)].Match.ObjectTypes = ef.ConfigPatches[1].Match.ObjectTypes
		}, "filter match has no effect when used with LISTENER"},
		// Spillway's rules on the buffer limits (Envoy 1.36 buffers a request held at its
		// headers under the listener's limit: envoyproxy/envoy#42607).
		{"no listener patch", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches = slices.Delete(ef.ConfigPatches, listenerPatch(t, ef), listenerPatch(t, ef)+1)
		}, "needs a LISTENER MERGE of per_connection_buffer_limit_bytes ≥ 9437184 in context GATEWAY"},
		{"listener limit below the virtual hosts'", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, listenerPatch(t, ef), new(listenerv3.Listener), func(l *listenerv3.Listener) {
				l.PerConnectionBufferLimitBytes = wrapperspb.UInt32(1 << 20)
			})
		}, "1048576 is below the virtual hosts' request_body_buffer_limit 9437184"},
		{"listener patch without a port", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[listenerPatch(t, ef)].Match.GetListener().PortNumber = 0
		}, "portNumber: required"},
		{"sidecar listener patch on another port", 1, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[listenerPatch(t, ef)].Match.GetListener().PortNumber = 8080
		}, "8080, but Spillway's virtual hosts are on port 80"},
		// Spillway's rules on the Full mode's Wasm config.
		{"option off", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) { pc.AllowOnHeadersStopIteration = nil })
		}, "allow_on_headers_stop_iteration: must be true"},
		{"failure policy left to the version's default", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) { pc.FailurePolicy = wasmv3.FailurePolicy_UNSPECIFIED })
		}, "set it explicitly"},
		{"module not pinned", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) { pc.GetVmConfig().GetCode().GetRemote().Sha256 = "ABC" })
		}, "[a-f0-9]{64}"},
		{"module over https", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) {
				pc.GetVmConfig().GetCode().GetRemote().HttpUri.Uri = "https://example.com/spillway.wasm"
			})
		}, "is an oci:// image"},
		{"ISTIO_META_ variable", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) {
				env := pc.GetVmConfig().EnvironmentVariables
				env.HostEnvKeys = append(env.HostEnvKeys, "ISTIO_META_OPENAI_KEY")
			})
		}, "istio-agent strips ISTIO_META_*"},
		{"policy reads a variable the VM lacks", 0, func(t *testing.T, o []Object) {
			editPolicy(t, o, func(p string) string {
				return strings.Replace(p, "${OPENAI_KEY_B:-demo-key-b}", "${UNDECLARED_KEY}", 1)
			})
		}, "UNDECLARED_KEY"},
		{"policy cluster is not Istio's", 0, func(t *testing.T, o []Object) {
			editPolicy(t, o, func(p string) string { return strings.Replace(p, "outbound|80||api.openai.com", "openai", 1) })
		}, "outbound|<port>||<host>"},
		{"policy authority is not the cluster's host", 0, func(t *testing.T, o []Object) {
			editPolicy(t, o, func(p string) string {
				return strings.Replace(p, `"authority": "api.openai.com"`, `"authority": "openai.example.com"`, 1)
			})
		}, "the cluster's host"},
		{"invalid policy", 0, func(t *testing.T, o []Object) {
			editPolicy(t, o, func(p string) string {
				return strings.Replace(p, `"provider": "anthropic"`, `"provider": "antropic"`, 1)
			})
		}, `unknown provider "antropic"`},
		// Cross-object rules.
		{"route header names another cluster", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Match[0].Headers["x-spillway-cluster"] =
				&networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "outbound|443||api.openai.com"}}
		}, `cluster "outbound|80||api.openai.com": no VirtualService`},
		{"HTTP filter reads an extension config nobody adds", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, 1, new(hcmv3.HttpFilter), func(hf *hcmv3.HttpFilter) { hf.Name = "spillway/other" })
		}, "which no EnvoyFilter EXTENSION_CONFIG ADD provides"},
		{"filter after the router", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Patch.Operation = networking.EnvoyFilter_Patch_INSERT_AFTER
		}, "must run before the router"},
		// WasmPlugin (ValidateWasmPlugin) and TrafficExtension (ValidateTrafficExtension).
		{"plugin selector and targetRefs", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw"}}
		}, "only one of targetRefs or selector"},
		{"cross-namespace targetRef", 2, func(t *testing.T, o []Object) {
			wp := spec[*extensionsapi.WasmPlugin](t, o, "spillway")
			wp.Selector = nil
			wp.TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw", Namespace: "other"}}
		}, "cross namespace referencing is not supported"},
		{"targetRef to an unsupported kind", 2, func(t *testing.T, o []Object) {
			wp := spec[*extensionsapi.WasmPlugin](t, o, "spillway")
			wp.Selector = nil
			wp.TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Deployment", Group: "apps", Name: "gw"}}
		}, "targetRef must be to a Gateway"},
		{"url digest and sha256 disagree", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Url = "oci://ghcr.io/spillwayproxy/spillway@sha256:" + strings.Repeat("1", 64)
		}, "differs from the digest the url names"},
		{"plugin sha256 form", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Sha256 = "sha256:00"
		}, "[a-f0-9]{64}"},
		{"host variable with a value", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig.Env[0].Value = "sk-inline"
		}, "value may only be set when valueFrom is INLINE"},
		{"duplicate env", 2, func(t *testing.T, o []Object) {
			env := spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig.Env
			env[1].Name = env[0].Name
		}, "duplicate env"},
		{"too many env variables", 2, func(t *testing.T, o []Object) {
			vm := spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig
			for i := range 257 {
				vm.Env = append(vm.Env, &extensionsapi.EnvVar{Name: fmt.Sprintf("EXTRA_%d", i), Value: "x"})
			}
		}, "at most 256 environment variables"},
		{"env value too long", 2, func(t *testing.T, o []Object) {
			vm := spec[*extensionsapi.WasmPlugin](t, o, "spillway").VmConfig
			vm.Env = append(vm.Env, &extensionsapi.EnvVar{Name: "LONG", Value: strings.Repeat("x", 2049)})
		}, "at most 2048 characters"},
		{"plugin without a policy", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").PluginConfig = nil
		}, "the Spillway policy"},
		{"traffic extension without wasm", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").FilterConfig = &extensionsapi.TrafficExtension_Lua{Lua: &extensionsapi.LuaConfig{InlineCode: "x"}}
		}, "exactly one of wasm or lua"},
		{"plugin image pull secret too long", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").ImagePullSecret = strings.Repeat("s", 254)
		}, "spec.imagePullSecret: must be at most 253 characters"},
		{"plugin name too long", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").PluginName = strings.Repeat("p", 257)
		}, "spec.pluginName: must be at most 256 characters"},
		{"plugin match port", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Match = []*extensionsapi.WasmPlugin_TrafficSelector{
				{Ports: []*typeapi.PortSelector{{Number: 8080}, {Number: 70000}}}}
		}, "spec.match[0].ports[1].number"},
		{"network plugin", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Type = extensionsapi.PluginType_NETWORK
		}, "spec.type: Spillway is an HTTP filter"},
		{"traffic extension name too long", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").GetWasm().PluginName = strings.Repeat("p", 257)
		}, "spec.wasm.pluginName: must be at most 256 characters"},
		{"traffic extension without a policy", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").GetWasm().PluginConfig = nil
		}, "spec.wasm.pluginConfig"},
		{"traffic extension match port", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").Match[0].Ports = []*typeapi.PortSelector{{Number: 0}}
		}, "must be 1-65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderDemo(t, exampleManifests[tc.base].opts).Objects
			if err := ValidateObjects(objs); err != nil {
				t.Fatalf("the rendered manifests are invalid before the change: %v", err)
			}
			tc.break_(t, objs)
			err := ValidateObjects(objs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tc.want)
			}
			// The broken manifests fail the same way when read back from YAML.
			y, yerr := EncodeYAML(objs)
			if yerr != nil {
				t.Fatal(yerr)
			}
			if err := Validate(y); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("from YAML: err = %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// TestPerFilterConfigForms: the typed_per_filter_config entries that could enable the
// filter on a virtual host, each put in the Full mode's first VIRTUAL_HOST patch, and what
// istiod and Envoy make of them. The oracles are their sources: istiod decodes a patch value
// with the legacy jsonpb decoder, which refuses an Any without "@type" (pkg/config/xds/xds.go,
// StructToMessage; the message is the one istioctl validate and analyze print for it), and
// Envoy loads the entry by source/common/router/per_filter_config.cc, PerFilterConfigs.
func TestPerFilterConfigForms(t *testing.T) {
	wasm := func() *anypb.Any { return mustAny(&wasmfilterv3.Wasm{}) }
	for _, tc := range []struct {
		name  string     // the form
		entry *anypb.Any // the virtual host's typed_per_filter_config entry for the filter
		want  string     // in the error; "" when both accept it
	}{
		// protojson reads "config: {}" as an empty Any; istiod's decoder refuses it, and its
		// webhook rejects the EnvoyFilter (without the webhook the patch is dropped).
		{"empty Any", mustAny(&routev3.FilterConfig{Config: &anypb.Any{}}), "Any JSON doesn't have '@type'"},
		// Envoy: "Empty route/virtual host per filter configuration".
		{"FilterConfig without config", mustAny(&routev3.FilterConfig{}), "required unless disabled"},
		// Envoy finds the Wasm filter's factory, which builds no per-route config: "doesn't
		// support virtual host or route specific configurations".
		{"Wasm config, not optional", mustAny(&routev3.FilterConfig{Config: wasm()}), "is_optional: must be true"},
		{"bare Wasm config", wasm(), "no per-route config"},
		// Envoy ignores the missing per-route config of an optional entry and enables the filter.
		{"Wasm config, optional", mustAny(&routev3.FilterConfig{Config: wasm(), IsOptional: true}), ""},
		// Disabled: Envoy ignores config (valid, though it would not enable Spillway).
		{"disabled", mustAny(&routev3.FilterConfig{Disabled: true}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := renderDemo(t, exampleManifests[0].opts)
			ef := spec[*networking.EnvoyFilter](t, m.Objects, "spillway")
			const vhPatch = 2 // the first VIRTUAL_HOST patch (after EXTENSION_CONFIG, HTTP_FILTER)
			if ef.ConfigPatches[vhPatch].ApplyTo != networking.EnvoyFilter_VIRTUAL_HOST {
				t.Fatalf("patch %d applies to %s", vhPatch, ef.ConfigPatches[vhPatch].ApplyTo)
			}
			patchValue(t, ef, vhPatch, new(routev3.VirtualHost), func(vh *routev3.VirtualHost) {
				if len(vh.TypedPerFilterConfig) != 1 {
					t.Fatalf("typed_per_filter_config has %d entries, want Spillway's one", len(vh.TypedPerFilterConfig))
				}
				for name := range vh.TypedPerFilterConfig {
					vh.TypedPerFilterConfig[name] = tc.entry
				}
			})
			y, err := EncodeYAML(m.Objects)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(y)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// TestDecodeStrict: what the istio.io/api types or the Kubernetes envelope do not know is
// an error naming the document, before any rule runs.
func TestDecodeStrict(t *testing.T) {
	good := "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: x\n  namespace: ns\nspec:\n  hosts: [api.openai.com]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: DNS\n"
	if _, err := DecodeYAML([]byte(good)); err != nil {
		t.Fatalf("the good document fails: %v", err)
	}
	for _, tc := range []struct {
		name string // the mistake
		doc  string // the document
		want string // in the error
	}{
		{"unknown spec field", strings.Replace(good, "resolution: DNS", "resolution: DNS\n  resolutoin: DNS", 1), "unknown field \"resolutoin\""},
		{"unknown metadata field", strings.Replace(good, "  name: x", "  name: x\n  nmae: y", 1), "unknown field \"nmae\""},
		{"duplicate key", strings.Replace(good, "  name: x", "  name: x\n  name: y", 1), "already set"},
		{"enum value", strings.Replace(good, "resolution: DNS", "resolution: DNSS", 1), "DNSS"},
		{"wrong apiVersion", strings.Replace(good, "networking.istio.io/v1", "networking.istio.io/v2", 1), "apiVersion"},
		{"unknown kind", strings.Replace(good, "kind: ServiceEntry", "kind: Sidecar", 1), "not a kind Spillway's Istio manifests use"},
		{"status", good + "status: {}\n", "unknown field \"status\""},
		{"no spec", "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: x, namespace: ns}\n", "spec: required"},
		{"second document", good + "---\n" + strings.Replace(good, "hosts:", "hostz:", 1), "document 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeYAML([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// listenerPatch is the index of the EnvoyFilter's one LISTENER patch (the listener's buffer
// limit), wherever the router patches of the default failover put it.
func listenerPatch(t *testing.T, ef *networking.EnvoyFilter) int {
	t.Helper()
	at := -1
	for i, cp := range ef.ConfigPatches {
		if cp.ApplyTo == networking.EnvoyFilter_LISTENER {
			if at >= 0 {
				t.Fatalf("LISTENER patches %d and %d", at, i)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatal("no LISTENER patch")
	}
	return at
}
