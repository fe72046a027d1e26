package istio

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
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
// a message that names the problem. These are the rules Validate keeps: the API server's
// that istioctl does not run, Envoy's, and Spillway's own invariants. istiod's own rules
// are TestIstiodRulesRefused's, judged by istioctl in make istio-check.
func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string                     // the rule
		base   int                        // index into exampleManifests of the manifests to break
		break_ func(*testing.T, []Object) // the mistake
		want   string                     // in the error
	}{
		// Kubernetes metadata (the API server's rules; istioctl does not check names).
		{"name is not a DNS subdomain", 0, func(t *testing.T, o []Object) { o[0].Name = "Spillway_SE" }, "metadata.name"},
		{"no namespace", 0, func(t *testing.T, o []Object) { o[0].Namespace = "" }, "metadata.namespace: required"},
		// TLS origination verifies the provider's name (istiod accepts it unverified).
		{"TLS origination without a name to verify", 0, func(t *testing.T, o []Object) {
			spec[*networking.DestinationRule](t, o, "api.openai.com").TrafficPolicy.PortLevelSettings[0].Tls.SubjectAltNames = nil
		}, "certificate's name is not verified"},
		// Every provider cluster is reached by its route, which turns Istio's retries off.
		{"catch-all before the provider route", 0, func(t *testing.T, o []Object) {
			vs := spec[*networking.VirtualService](t, o, "api.openai.com")
			vs.Http[0], vs.Http[1] = vs.Http[1], vs.Http[0]
		}, "unreachable"},
		{"provider route matches another header", 0, func(t *testing.T, o []Object) {
			m := spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Match[0]
			m.Headers = map[string]*networking.StringMatch{"x-other": m.Headers["x-spillway-cluster"]}
		}, `matches the header "x-other", but the filter names the cluster in "x-spillway-cluster"`},
		{"provider route with Istio's retries", 0, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.openai.com").Http[0].Retries = nil
		}, "retries: want attempts: 0"},
		{"provider route retrying", 1, func(t *testing.T, o []Object) {
			spec[*networking.VirtualService](t, o, "api.anthropic.com").Http[0].Retries = &networking.HTTPRetry{Attempts: 2}
		}, "retries: want attempts: 0"},
		// Attachments apply to named workloads (istiod takes none to mean every one), and
		// not by both a selector and targetRefs (the CRD's rule, not istiod's).
		{"workload selector and targetRefs", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw"}}
		}, "only one of targetRefs or selector"},
		{"selector without labels", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").WorkloadSelector.Labels = nil
		}, "without labels"},
		{"no selector", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Selector = nil
		}, "neither a selector nor targetRefs"},
		// Patch values as istiod decodes them, and Envoy's rules on them.
		{"extension config merged, not added", 0, func(t *testing.T, o []Object) {
			spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[0].Patch.Operation = networking.EnvoyFilter_Patch_MERGE
		}, "istiod serves only ADD extension configs"},
		{"unknown field in a patch value", 0, func(t *testing.T, o []Object) {
			v := spec[*networking.EnvoyFilter](t, o, "spillway").ConfigPatches[1].Patch.Value
			v.Fields["allow_on_headers_stop_iteration"] = structpb.NewBoolValue(true)
		}, "does not decode as envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter"},
		{"Envoy's own rules on an inserted filter", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, 1, new(hcmv3.HttpFilter), func(hf *hcmv3.HttpFilter) { hf.Name = "" })
		}, "invalid HttpFilter.Name"},
		// Spillway's rules on the buffer limits (Envoy 1.36 buffers a request held at its
		// headers under the listener's limit: envoyproxy/envoy#42607).
		{"no listener patch", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches = slices.Delete(ef.ConfigPatches, listenerPatchAt(t, ef), listenerPatchAt(t, ef)+1)
		}, "needs a LISTENER MERGE of per_connection_buffer_limit_bytes ≥ 9437184 in context GATEWAY"},
		{"listener limit below the virtual hosts'", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, listenerPatchAt(t, ef), new(listenerv3.Listener), func(l *listenerv3.Listener) {
				l.PerConnectionBufferLimitBytes = wrapperspb.UInt32(1 << 20)
			})
		}, "1048576 is below the virtual hosts' request_body_buffer_limit 9437184"},
		{"listener patch without a port", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[listenerPatchAt(t, ef)].Match.GetListener().PortNumber = 0
		}, "portNumber: required"},
		// istiod only warns that a filter match has no effect on a LISTENER patch; the
		// HTTP filter's match names no port, which Spillway's rule refuses.
		{"listener patch with a filter match", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[listenerPatchAt(t, ef)].Match.ObjectTypes = ef.ConfigPatches[1].Match.ObjectTypes
		}, "portNumber: required"},
		{"sidecar listener patch on another port", 1, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[listenerPatchAt(t, ef)].Match.GetListener().PortNumber = 8080
		}, "8080, but Spillway's virtual hosts are on port 80"},
		// The filter runs on exactly Spillway's virtual hosts, each buffering more than the
		// policy's maxRequestBodyBytes (8 MiB in the demo policy).
		{"filter enabled by default", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, 1, new(hcmv3.HttpFilter), func(hf *hcmv3.HttpFilter) { hf.Disabled = false })
		}, "want the filter disabled: true"},
		{"filter not enabled on a provider host", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, vhostPatchAt(t, ef, "api.openai.com:80"), new(routev3.VirtualHost), func(vh *routev3.VirtualHost) {
				vh.TypedPerFilterConfig = nil
			})
		}, "virtual host api.openai.com:80: no VIRTUAL_HOST patch enables the filter there"},
		{"virtual host patch on another host", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[vhostPatchAt(t, ef, "api.openai.com:80")].Match.GetRouteConfiguration().Vhost.Name = "other.example.com:80"
		}, `"other.example.com:80" is not one of Spillway's virtual hosts`},
		{"virtual host patch on another port", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			ef.ConfigPatches[vhostPatchAt(t, ef, "api.openai.com:80")].Match.GetRouteConfiguration().PortNumber = 8080
		}, "8080: Spillway's virtual hosts are on one port, 80"},
		{"body limit at maxRequestBodyBytes", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			patchValue(t, ef, vhostPatchAt(t, ef, "llm.example.com:80"), new(routev3.VirtualHost), func(vh *routev3.VirtualHost) {
				vh.RequestBodyBufferLimit = wrapperspb.UInt64(8 << 20)
			})
		}, "virtual host llm.example.com:80: request_body_buffer_limit 8388608 is not above maxRequestBodyBytes 8388608"},
		{"header-routed mode without a body limit", 2, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway-buffers")
			ef.ConfigPatches = slices.Delete(ef.ConfigPatches, vhostPatchAt(t, ef, "api.anthropic.com:80"), vhostPatchAt(t, ef, "api.anthropic.com:80")+1)
		}, "virtual host api.anthropic.com:80: request_body_buffer_limit 0 is not above"},
		// Failover through the router (the demo policy's default in the Full mode): the
		// patches routerPatches writes.
		{"no upstream instance", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			i := patchAt(t, ef, func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
				return cp.ApplyTo == networking.EnvoyFilter_EXTENSION_CONFIG && strings.Contains(cp.Patch.Value.String(), "spillway.upstream")
			})
			ef.ConfigPatches = slices.Delete(ef.ConfigPatches, i, i+1)
		}, "failover through the router needs Spillway's upstream instance"},
		{"upstream instance in another VM", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			i := patchAt(t, ef, func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
				return cp.ApplyTo == networking.EnvoyFilter_EXTENSION_CONFIG && strings.Contains(cp.Patch.Value.String(), "spillway.upstream")
			})
			patchValue(t, ef, i, new(corev3.TypedExtensionConfig), func(ec *corev3.TypedExtensionConfig) {
				w := new(wasmfilterv3.Wasm)
				if err := ec.TypedConfig.UnmarshalTo(w); err != nil {
					t.Fatal(err)
				}
				w.Config.GetVmConfig().VmId = "other"
				ec.TypedConfig = mustAny(w)
			})
		}, "vm_config: differs from spillway/istio-ingress/spillway's"},
		{"provider cluster without the upstream filter", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			i := patchAt(t, ef, func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
				return cp.Match.GetCluster().GetName() == "outbound|80||api.anthropic.com"
			})
			ef.ConfigPatches = slices.Delete(ef.ConfigPatches, i, i+1)
		}, `cluster "outbound|80||api.anthropic.com": no CLUSTER MERGE puts Spillway's upstream instance`},
		{"provider route without the retry policy", 0, func(t *testing.T, o []Object) {
			ef := spec[*networking.EnvoyFilter](t, o, "spillway")
			i := patchAt(t, ef, func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
				return cp.ApplyTo == networking.EnvoyFilter_HTTP_ROUTE && cp.Match.GetRouteConfiguration().GetVhost().GetName() == "api.openai.com:80"
			})
			ef.ConfigPatches = slices.Delete(ef.ConfigPatches, i, i+1)
		}, `cluster "outbound|80||api.openai.com": no HTTP_ROUTE MERGE on its route api.openai.com:80/spillway-api.openai.com`},
		{"router retrying on 5xx too", 0, func(t *testing.T, o []Object) {
			editRoutePatch(t, o, func(r *routev3.Route) { r.GetRoute().RetryPolicy.RetryOn = "retriable-headers,5xx" })
		}, "route.retry_policy: want the standalone bootstrap's"},
		// Twice the virtual hosts' 9 MiB (maxRequestBodyBytes + 1 MiB): Envoy counts a body a
		// filter resumed twice (envoylimits.RetryBufferLimit's reason).
		{"retried body not replayable", 0, func(t *testing.T, o []Object) {
			editRoutePatch(t, o, func(r *routev3.Route) { r.RequestBodyBufferLimit = wrapperspb.UInt64(8 << 20) })
		}, "request_body_buffer_limit: 8388608, below 18874368"},
		{"marker reaches the client", 0, func(t *testing.T, o []Object) {
			editRoutePatch(t, o, func(r *routev3.Route) { r.ResponseHeadersToRemove = nil })
		}, "response_headers_to_remove: must hold x-spillway-retry"},
		// Spillway's rules on the Full mode's Wasm config.
		{"option off", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) { pc.AllowOnHeadersStopIteration = nil })
		}, "allow_on_headers_stop_iteration: must be true"},
		{"failure policy left to the version's default", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) { pc.FailurePolicy = wasmv3.FailurePolicy_UNSPECIFIED })
		}, "set it explicitly"},
		{"fail-open", 0, func(t *testing.T, o []Object) {
			editWasm(t, o, func(pc *wasmv3.PluginConfig) { pc.FailurePolicy = wasmv3.FailurePolicy_FAIL_OPEN })
		}, "failure_policy: FAIL_OPEN: \"open\" (fail-open) is refused for Istio"},
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
		// WasmPlugin and TrafficExtension: Spillway's module and policy, the CRD's limits.
		{"plugin selector and targetRefs", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").TargetRefs = []*typeapi.PolicyTargetReference{{Kind: "Gateway", Group: "gateway.networking.k8s.io", Name: "gw"}}
		}, "only one of targetRefs or selector"},
		{"url digest and sha256 disagree", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Url = "oci://ghcr.io/spillwayproxy/spillway@sha256:" + strings.Repeat("1", 64)
		}, "differs from the digest the url names"},
		{"plugin sha256 form", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Sha256 = "sha256:00"
		}, "[a-f0-9]{64}"},
		{"plugin fail-open", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").FailStrategy = extensionsapi.FailStrategy_FAIL_OPEN
		}, "spec.failStrategy: FAIL_OPEN"},
		{"traffic extension fail-open", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").GetWasm().FailStrategy = extensionsapi.FailStrategy_FAIL_OPEN
		}, "spec.wasm.failStrategy: FAIL_OPEN"},
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
		{"network plugin", 2, func(t *testing.T, o []Object) {
			spec[*extensionsapi.WasmPlugin](t, o, "spillway").Type = extensionsapi.PluginType_NETWORK
		}, "spec.type: Spillway is an HTTP filter"},
		// istiod accepts a Lua TrafficExtension; Spillway is Wasm.
		{"traffic extension without wasm", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").FilterConfig = &extensionsapi.TrafficExtension_Lua{Lua: &extensionsapi.LuaConfig{InlineCode: "x"}}
		}, "spec.wasm: required: Spillway is a Wasm filter"},
		{"traffic extension without a policy", 3, func(t *testing.T, o []Object) {
			spec[*extensionsapi.TrafficExtension](t, o, "spillway").GetWasm().PluginConfig = nil
		}, "spec.wasm.pluginConfig"},
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
		// Disabled: Envoy and istiod accept it, but the filter would stay off on the host,
		// which Spillway's rule refuses (the filter runs on every Spillway virtual host).
		{"disabled", mustAny(&routev3.FilterConfig{Disabled: true}), "no VIRTUAL_HOST patch enables the filter there"},
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

// patchAt is the index of the EnvoyFilter's one patch that is.
func patchAt(t *testing.T, ef *networking.EnvoyFilter, is func(*networking.EnvoyFilter_EnvoyConfigObjectPatch) bool) int {
	t.Helper()
	at := -1
	for i, cp := range ef.ConfigPatches {
		if is(cp) {
			if at >= 0 {
				t.Fatalf("patches %d and %d both fit", at, i)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatal("no such patch")
	}
	return at
}

// editRoutePatch edits the Full mode's HTTP_ROUTE patch on OpenAI's provider route.
func editRoutePatch(t *testing.T, objs []Object, edit func(*routev3.Route)) {
	t.Helper()
	ef := spec[*networking.EnvoyFilter](t, objs, "spillway")
	i := patchAt(t, ef, func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
		return cp.ApplyTo == networking.EnvoyFilter_HTTP_ROUTE && cp.Match.GetRouteConfiguration().GetVhost().GetName() == "api.openai.com:80"
	})
	patchValue(t, ef, i, new(routev3.Route), edit)
}

// vhostPatchAt is the index of the EnvoyFilter's VIRTUAL_HOST patch on the named virtual host.
func vhostPatchAt(t *testing.T, ef *networking.EnvoyFilter, name string) int {
	t.Helper()
	for i, cp := range ef.ConfigPatches {
		if cp.ApplyTo == networking.EnvoyFilter_VIRTUAL_HOST && cp.Match.GetRouteConfiguration().GetVhost().GetName() == name {
			return i
		}
	}
	t.Fatalf("no VIRTUAL_HOST patch on %s", name)
	return -1
}

// listenerPatchAt is the index of the EnvoyFilter's one LISTENER patch (the listener's buffer
// limit), wherever the router patches of the default failover put it.
func listenerPatchAt(t *testing.T, ef *networking.EnvoyFilter) int {
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

// TestPatchValuesEnvoyRules: a patch value that breaks one of Envoy's protoc-gen-validate
// rules (go-control-plane's Validate, which istiod never runs: it only decodes the value)
// is refused, whether the value is added whole or is a MERGE fragment, and inside an Any.
// The oracle is the rule in Envoy's proto (route_components.proto: RetryBackOff.base_interval
// gt 0; base.proto: HeaderValue.key min_len 1; extension.proto: TypedExtensionConfig.name
// min_len 1; http_connection_manager.proto: HttpFilter.name min_len 1).
func TestPatchValuesEnvoyRules(t *testing.T) {
	negative := durationpb.New(-time.Second)
	for _, tc := range []struct {
		name  string                                                       // the rule broken
		patch func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool // which patch
		edit  func(t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch)
		want  string // in the error
	}{
		// A negative duration in a MERGE fragment (the virtual host Spillway enables the
		// filter on), where Envoy requires a positive one.
		{"negative back-off in a virtual host", isVhostPatch("llm.example.com:80"), func(t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
			editPatch(t, cp, new(routev3.VirtualHost), func(vh *routev3.VirtualHost) {
				vh.RetryPolicy = &routev3.RetryPolicy{RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: negative}}
			})
		}, "invalid RetryPolicy_RetryBackOff.BaseInterval: value must be greater than 0s"},
		// A missing required field in a MERGE fragment.
		{"header without a name in a virtual host", isVhostPatch("api.openai.com:80"), func(t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
			editPatch(t, cp, new(routev3.VirtualHost), func(vh *routev3.VirtualHost) {
				vh.RequestHeadersToAdd = []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Value: "x"}}}
			})
		}, "invalid HeaderValue.Key: value length must be at least 1 runes"},
		// A negative duration in a route's MERGE fragment.
		{"negative back-off in the router's retry policy", func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
			return cp.ApplyTo == networking.EnvoyFilter_HTTP_ROUTE && cp.Match.GetRouteConfiguration().GetVhost().GetName() == "api.openai.com:80"
		}, func(t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
			editPatch(t, cp, new(routev3.Route), func(r *routev3.Route) { r.GetRoute().RetryPolicy.RetryBackOff.MaxInterval = negative })
		}, "invalid RetryPolicy_RetryBackOff.MaxInterval: value must be greater than 0s"},
		// A missing required field in a value added whole.
		{"extension config without a name", func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
			return cp.ApplyTo == networking.EnvoyFilter_EXTENSION_CONFIG && !strings.Contains(cp.Patch.Value.String(), "spillway.upstream")
		}, func(t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
			editPatch(t, cp, new(corev3.TypedExtensionConfig), func(ec *corev3.TypedExtensionConfig) { ec.Name = "" })
		}, "invalid TypedExtensionConfig.Name: value length must be at least 1 runes"},
		// A missing required field inside an Any of a MERGE fragment (the cluster's
		// HttpProtocolOptions).
		{"upstream filter without a name", func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
			return cp.Match.GetCluster().GetName() == "outbound|80||api.openai.com"
		}, func(t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
			editPatch(t, cp, new(clusterv3.Cluster), func(c *clusterv3.Cluster) {
				p := new(httpv3.HttpProtocolOptions)
				if err := c.TypedExtensionProtocolOptions[httpProtocolOptionsKey].UnmarshalTo(p); err != nil {
					t.Fatal(err)
				}
				p.HttpFilters[1].Name = ""
				c.TypedExtensionProtocolOptions[httpProtocolOptionsKey] = mustAny(p)
			})
		}, "invalid HttpFilter.Name: value length must be at least 1 runes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderDemo(t, exampleManifests[0].opts).Objects
			ef := spec[*networking.EnvoyFilter](t, objs, "spillway")
			tc.edit(t, ef.ConfigPatches[patchAt(t, ef, tc.patch)])
			y, err := EncodeYAML(objs)
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(y); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}

// TestStandInsValid: every stand-in a MERGE value is merged into passes Envoy's rules alone,
// so a rule that fails once a value is merged in is the value's.
func TestStandInsValid(t *testing.T) {
	for applyTo := range networking.EnvoyFilter_ApplyTo_name {
		a := networking.EnvoyFilter_ApplyTo(applyTo)
		if patchType(a) == nil {
			continue
		}
		if err := validateEnvoy(standIn(a)); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}

func isVhostPatch(name string) func(*networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
	return func(cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) bool {
		return cp.ApplyTo == networking.EnvoyFilter_VIRTUAL_HOST && cp.Match.GetRouteConfiguration().GetVhost().GetName() == name
	}
}

// editPatch decodes a patch value into m, lets edit change it and writes it back.
func editPatch[M proto.Message](t *testing.T, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, m M, edit func(M)) {
	t.Helper()
	patchValue(t, &networking.EnvoyFilter{ConfigPatches: []*networking.EnvoyFilter_EnvoyConfigObjectPatch{cp}}, 0, m, edit)
}
