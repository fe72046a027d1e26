package istio

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	//lint:ignore SA1019 the legacy decoder is the point: istiod reads patch values with it (decodeIstiod)
	"github.com/golang/protobuf/jsonpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// patchType is the Envoy message an EnvoyFilter patch value decodes into, by applyTo
// (istio pkg/config/xds/xds.go, BuildXDSObjectFromStruct).
func patchType(applyTo networking.EnvoyFilter_ApplyTo) proto.Message {
	switch applyTo {
	case networking.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{}
	case networking.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{}
	case networking.EnvoyFilter_FILTER_CHAIN:
		return &listenerv3.FilterChain{}
	case networking.EnvoyFilter_HTTP_FILTER:
		return &hcmv3.HttpFilter{}
	case networking.EnvoyFilter_NETWORK_FILTER:
		return &listenerv3.Filter{}
	case networking.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{}
	case networking.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{}
	case networking.EnvoyFilter_EXTENSION_CONFIG:
		return &corev3.TypedExtensionConfig{}
	case networking.EnvoyFilter_BOOTSTRAP:
		return &bootstrapv3.Bootstrap{}
	case networking.EnvoyFilter_LISTENER_FILTER:
		return &listenerv3.ListenerFilter{}
	}
	return nil
}

// strictProto reads Envoy JSON that Envoy itself parses (the bootstrap override), unknown
// fields being errors, resolving Any types from the linked Envoy protos. EnvoyFilter patch
// values are read as istiod reads them instead (decodeIstiod).
var strictProto = protojson.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}

// decodeIstiod reads an EnvoyFilter patch value into m as istiod does (pkg/config/xds/xds.go,
// StructToMessage, with pkg/util/protomarshal): the Struct written back to JSON by the legacy
// jsonpb marshaler with proto field names, then read by the legacy jsonpb unmarshaler, Any
// types resolved from the linked protos. That decoder is stricter than protojson in ways
// protojson does not report: it refuses an Any without "@type" (an empty Any, which protojson
// reads as {}), so a value protojson accepts can still be refused by istiod's webhook
// (pkg/config/validation/envoyfilter/envoyfilter.go, ValidateEnvoyFilter) and, without the
// webhook, dropped by istiod (pilot/pkg/model/envoyfilter.go, convertToEnvoyFilterWrapper).
// The webhook decodes twice: allowing unknown fields, an error refuses the resource; strictly,
// an error is a warning (the unknown field is dropped). Spillway refuses both.
//
// This mirrors istiod's ten lines rather than importing istio.io/istio/pkg/config/xds, which
// would bring istio.io/istio (its logging, and its go.mod raising shared dependencies such
// as k8s.io/apimachinery) into the root module; istio/istioctl runs istiod's own code over
// every rendering in CI (make istio-check).
func decodeIstiod(value *structpb.Struct, m proto.Message) error {
	var buf bytes.Buffer
	if err := (&jsonpb.Marshaler{OrigName: true}).Marshal(&buf, value); err != nil {
		return err
	}
	js := buf.Bytes()
	if err := (&jsonpb.Unmarshaler{AllowUnknownFields: true}).Unmarshal(bytes.NewReader(js), protoadapt.MessageV1Of(m)); err != nil {
		return fmt.Errorf("istiod refuses it: %w", err)
	}
	proto.Reset(m)
	if err := (&jsonpb.Unmarshaler{}).Unmarshal(bytes.NewReader(js), protoadapt.MessageV1Of(m)); err != nil {
		return fmt.Errorf("istiod drops what it does not know (its webhook warns): %w", err)
	}
	return nil
}

// envoyFilter follows ValidateEnvoyFilter (pkg/config/validation/envoyfilter/envoyfilter.go)
// and, for the Wasm extension config, Spillway's rules.
func (v *validator) envoyFilter(ef *networking.EnvoyFilter) {
	if ef.WorkloadSelector != nil && len(ef.TargetRefs) > 0 {
		v.fail("spec", "only one of targetRefs or workloadSelector can be set")
	}
	if ef.WorkloadSelector == nil && len(ef.TargetRefs) == 0 {
		v.fail("spec", "neither workloadSelector nor targetRefs is set: the patches would apply to every workload of the namespace")
	}
	if ws := ef.WorkloadSelector; ws != nil {
		if len(ws.Labels) == 0 {
			v.fail("spec.workloadSelector", "workload selector specified without labels: it applies to every workload of the namespace")
		}
		for k, val := range ws.Labels {
			if k == "" || strings.Contains(k, "*") || strings.Contains(val, "*") {
				v.fail("spec.workloadSelector.labels", "%q=%q: empty keys and wildcards are not supported in selector", k, val)
			}
		}
	}
	if len(ef.ConfigPatches) == 0 {
		v.fail("spec.configPatches", "required")
	}
	for i, cp := range ef.ConfigPatches {
		v.configPatch(fmt.Sprintf("spec.configPatches[%d]", i), cp)
	}
	v.bufferLimits(ef)
}

// bufferLimits is Spillway's rule on the buffer limits an EnvoyFilter raises. Where the
// EnvoyFilter adds a Wasm filter that holds request headers (allow_on_headers_stop_iteration:
// the Full mode), a virtual host's request_body_buffer_limit above Envoy's 1 MiB
// connection default needs, in the same context, a LISTENER MERGE raising
// per_connection_buffer_limit_bytes at least as far: Envoy 1.36 (Istio 1.28) applies the
// virtual host's limit only in the router (envoyproxy/envoy#42607), after Spillway has
// buffered the body of a request it holds at its headers, which buffers under the
// listener's limit meanwhile (see envoylimits.ConnectionBufferLimit). A LISTENER patch
// must name its port (without one it changes every listener of the workload), and on a
// sidecar the port of the virtual hosts (the outbound listener for a port serves its
// routes; a gateway binds its Service's target port instead, which Render cannot check).
func (v *validator) bufferLimits(ef *networking.EnvoyFilter) {
	type raised struct {
		path  string
		limit uint64
		port  uint32
	}
	vhosts := map[networking.EnvoyFilter_PatchContext]raised{}    // the largest virtual host limit
	listeners := map[networking.EnvoyFilter_PatchContext]raised{} // the largest listener limit
	holds := false                                                // a filter that holds request headers
	for i, cp := range ef.ConfigPatches {
		if cp.GetPatch().GetValue() == nil {
			continue
		}
		path := fmt.Sprintf("spec.configPatches[%d]", i)
		ctx := cp.GetMatch().GetContext()
		// A value that does not decode is reported by configPatch.
		if cp.ApplyTo == networking.EnvoyFilter_EXTENSION_CONFIG {
			ec, w := new(corev3.TypedExtensionConfig), new(wasmfilterv3.Wasm)
			if decodeIstiod(cp.Patch.Value, ec) == nil && ec.GetTypedConfig().UnmarshalTo(w) == nil &&
				w.GetConfig().GetAllowOnHeadersStopIteration().GetValue() {
				holds = true
			}
			continue
		}
		if cp.Patch.Operation != networking.EnvoyFilter_Patch_MERGE {
			continue
		}
		switch cp.ApplyTo {
		case networking.EnvoyFilter_VIRTUAL_HOST:
			vh := new(routev3.VirtualHost)
			if decodeIstiod(cp.Patch.Value, vh) != nil || vh.GetRequestBodyBufferLimit() == nil {
				continue
			}
			r := raised{path + ".patch.value.request_body_buffer_limit", vh.GetRequestBodyBufferLimit().GetValue(),
				cp.GetMatch().GetRouteConfiguration().GetPortNumber()}
			if r.limit > vhosts[ctx].limit {
				vhosts[ctx] = r
			}
		case networking.EnvoyFilter_LISTENER:
			l := new(listenerv3.Listener)
			if decodeIstiod(cp.Patch.Value, l) != nil || l.GetPerConnectionBufferLimitBytes() == nil {
				continue
			}
			r := raised{path, uint64(l.GetPerConnectionBufferLimitBytes().GetValue()), cp.GetMatch().GetListener().GetPortNumber()}
			if r.port == 0 {
				v.fail(path+".match.listener.portNumber", "required: without it the connection buffer limit rises on every listener of the workload; name the listener Spillway's virtual hosts are served on")
			}
			if _, seen := listeners[ctx]; !seen || r.limit > listeners[ctx].limit {
				listeners[ctx] = r
			}
		}
	}
	if !holds {
		return
	}
	for _, ctx := range slices.Sorted(maps.Keys(vhosts)) {
		vh := vhosts[ctx]
		if vh.limit <= envoylimits.DefaultConnectionBufferLimit {
			continue
		}
		l, ok := listeners[ctx]
		switch {
		case !ok:
			v.fail(vh.path, "%d needs a LISTENER MERGE of per_connection_buffer_limit_bytes ≥ %d in context %s: Envoy 1.36 (Istio 1.28) applies a virtual host's limit only in the router, and a request Spillway holds at its headers buffers under the listener's limit (1 MiB by default) until then (envoyproxy/envoy#42607)", vh.limit, vh.limit, ctx)
		case l.limit < vh.limit:
			v.fail(l.path+".patch.value.per_connection_buffer_limit_bytes", "%d is below the virtual hosts' request_body_buffer_limit %d: Envoy 1.36 (Istio 1.28) would answer its own 413 for a held request between the two (envoyproxy/envoy#42607)", l.limit, vh.limit)
		case ctx == networking.EnvoyFilter_SIDECAR_OUTBOUND && l.port != 0 && l.port != vh.port:
			v.fail(l.path+".match.listener.portNumber", "%d, but Spillway's virtual hosts are on port %d: a sidecar serves them on its outbound listener for that port", l.port, vh.port)
		}
	}
}

func (v *validator) configPatch(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
	switch {
	case cp == nil:
		v.fail(path, "null config patch")
		return
	case cp.Match != nil && cp.Match.Context == networking.EnvoyFilter_WAYPOINT:
		v.fail(path+".match.context", "WAYPOINT: Spillway runs in gateways and sidecars, which istiod validates; waypoints are not supported")
		return
	case cp.ApplyTo == networking.EnvoyFilter_INVALID:
		v.fail(path+".applyTo", "missing applyTo")
		return
	case cp.Patch == nil:
		v.fail(path+".patch", "missing patch")
		return
	case cp.Patch.Operation == networking.EnvoyFilter_Patch_INVALID:
		v.fail(path+".patch.operation", "missing patch operation")
		return
	case cp.Patch.Operation != networking.EnvoyFilter_Patch_REMOVE && cp.Patch.Value == nil:
		v.fail(path+".patch.value", "missing patch value for non-remove operation")
		return
	}
	if pv := cp.Match.GetProxy().GetProxyVersion(); pv != "" {
		if len(pv) > 1024 {
			v.fail(path+".match.proxy.proxyVersion", "longer than 1024 characters: istiod ignores it")
		} else if _, err := regexp.Compile(pv); err != nil {
			v.fail(path+".match.proxy.proxyVersion", "invalid regex for proxy version, [%v]", err)
		}
	}
	v.patchMatch(path, cp)
	if cp.Patch.Value == nil {
		return
	}
	obj := patchType(cp.ApplyTo)
	if obj == nil {
		v.fail(path+".applyTo", "unknown object type for applyTo %s", cp.ApplyTo)
		return
	}
	if err := decodeIstiod(cp.Patch.Value, obj); err != nil {
		v.fail(path+".patch.value", "does not decode as %s: %v", proto.MessageName(obj), err)
		return
	}
	op := cp.Patch.Operation
	complete := op == networking.EnvoyFilter_Patch_ADD || op == networking.EnvoyFilter_Patch_INSERT_BEFORE ||
		op == networking.EnvoyFilter_Patch_INSERT_AFTER || op == networking.EnvoyFilter_Patch_INSERT_FIRST || op == networking.EnvoyFilter_Patch_REPLACE
	if complete {
		// A MERGE value is a fragment (a virtual host without a name, say); what is added
		// or inserted must be a whole, valid Envoy object.
		v.failErr(path+".patch.value", validateEnvoy(obj))
	}
	switch m := obj.(type) {
	case *corev3.TypedExtensionConfig:
		v.extensionConfig(path, cp, m)
	case *hcmv3.HttpFilter:
		v.httpFilter(path, cp, m)
	case *clusterv3.Cluster:
		v.clusterPatch(path, m)
	case *routev3.VirtualHost:
		v.perFilterConfigs(path+".patch.value.typed_per_filter_config", m.GetTypedPerFilterConfig())
	case *routev3.Route:
		if rp := m.GetRoute().GetRetryPolicy(); rp != nil {
			v.failErr(path+".patch.value.route.retry_policy", validateEnvoy(rp))
		}
		v.perFilterConfigs(path+".patch.value.typed_per_filter_config", m.GetTypedPerFilterConfig())
	}
}

// filterConfigTypeURL is the type of the per-filter config wrapper Envoy reads flags from.
var filterConfigTypeURL = "type.googleapis.com/" + string(proto.MessageName(&routev3.FilterConfig{}))

// perFilterConfigs holds a typed_per_filter_config to the rules Envoy loads it by
// (source/common/router/per_filter_config.cc, PerFilterConfigs::PerFilterConfigs and
// createRouteSpecificFilterConfig), for what Spillway can know: a FilterConfig that does not
// disable its filter needs a config ("Empty route/virtual host per filter configuration"),
// and a Wasm filter's config, which is no per-route config (the Wasm filter's factory builds
// none), is accepted only in a FilterConfig marked is_optional; anywhere else Envoy refuses
// the whole route configuration ("doesn't support virtual host or route specific
// configurations"). See enableFilter.
func (v *validator) perFilterConfigs(path string, configs map[string]*anypb.Any) {
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		a, p := configs[name], path+"["+name+"]"
		switch a.GetTypeUrl() {
		case wasmTypeURL:
			v.fail(p, "a Wasm filter's config is no per-route config: Envoy refuses it outside a FilterConfig with is_optional: true")
		case filterConfigTypeURL:
			fc := new(routev3.FilterConfig)
			if err := a.UnmarshalTo(fc); err != nil {
				v.fail(p, "%v", err)
				continue
			}
			switch {
			case fc.Disabled:
			case fc.Config == nil:
				v.fail(p+".config", "required unless disabled: Envoy refuses a FilterConfig without one")
			case fc.Config.TypeUrl == wasmTypeURL && !fc.IsOptional:
				v.fail(p+".is_optional", "must be true: the Wasm filter has no per-route config, and Envoy refuses a config it cannot build unless the entry is optional")
			}
		}
	}
}

// clusterPatch checks a cluster patch's upstream HTTP filter chain (failover through the
// router): the HttpProtocolOptions it puts on the cluster are whole and valid (istiod's MERGE
// replaces the map entry: see routerPatches), name an upstream protocol (Envoy requires one),
// end with the codec (Envoy refuses any other terminal upstream filter), and every filter
// read over ECDS names an extension config an EnvoyFilter adds.
func (v *validator) clusterPatch(path string, c *clusterv3.Cluster) {
	a, ok := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey]
	if !ok {
		return
	}
	path += ".patch.value.typed_extension_protocol_options[" + httpProtocolOptionsKey + "]"
	protocol := new(httpv3.HttpProtocolOptions)
	if err := a.UnmarshalTo(protocol); err != nil {
		v.fail(path, "%v", err)
		return
	}
	v.failErr(path, validateEnvoy(protocol))
	if protocol.GetUpstreamProtocolOptions() == nil {
		v.fail(path, "no upstream protocol: the patch replaces the HttpProtocolOptions istiod set, so it must name one")
	}
	filters := protocol.GetHttpFilters()
	if len(filters) == 0 {
		return
	}
	if last := filters[len(filters)-1]; last.GetName() != envoy.UpstreamCodecFilter {
		v.fail(path+".http_filters", "the last upstream filter is %q: Envoy accepts only %s there", last.GetName(), envoy.UpstreamCodecFilter)
	}
	for i, f := range filters {
		cd := f.GetConfigDiscovery()
		if cd == nil {
			continue
		}
		fp := fmt.Sprintf("%s.http_filters[%d].config_discovery", path, i)
		v.filterRefs = append(v.filterRefs, filterRef{object: v.cur, path: fp, name: f.Name})
		if !slices.Contains(cd.TypeUrls, wasmTypeURL) {
			v.fail(fp+".type_urls", "must include %s", wasmTypeURL)
		}
		if cd.GetConfigSource().GetAds() == nil {
			v.fail(fp+".config_source", "want ads: {} (istiod serves extension configs on the proxy's ADS stream)")
		}
	}
}

// patchMatch checks that applyTo, match and patch line up (validateEnvoyFilter).
func (v *validator) patchMatch(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
	m := cp.Match
	if m == nil || m.ObjectTypes == nil {
		return
	}
	switch cp.ApplyTo {
	case networking.EnvoyFilter_LISTENER, networking.EnvoyFilter_FILTER_CHAIN, networking.EnvoyFilter_NETWORK_FILTER, networking.EnvoyFilter_HTTP_FILTER:
		l := m.GetListener()
		if l == nil {
			v.fail(path+".match", "applyTo for listener class objects cannot have non listener match")
			return
		}
		f := l.GetFilterChain().GetFilter()
		if f == nil {
			return
		}
		if cp.ApplyTo == networking.EnvoyFilter_LISTENER || cp.ApplyTo == networking.EnvoyFilter_FILTER_CHAIN {
			v.fail(path+".match.listener.filterChain.filter", "filter match has no effect when used with %v", cp.ApplyTo)
		}
		if f.Name == "" {
			v.fail(path+".match.listener.filterChain.filter.name", "filter match has no name to match on")
			return
		}
		if f.SubFilter != nil {
			switch {
			case cp.ApplyTo != networking.EnvoyFilter_HTTP_FILTER:
				v.fail(path+".match.listener.filterChain.filter.subFilter", "subfilter match can be used with applyTo HTTP_FILTER only")
			case f.Name != hcmFilterName && f.Name != "envoy.http_connection_manager":
				v.fail(path+".match.listener.filterChain.filter.subFilter", "subfilter match requires filter match with %s", hcmFilterName)
			case f.SubFilter.Name == "":
				v.fail(path+".match.listener.filterChain.filter.subFilter.name", "subfilter match has no name to match on")
			}
		}
	case networking.EnvoyFilter_ROUTE_CONFIGURATION, networking.EnvoyFilter_VIRTUAL_HOST, networking.EnvoyFilter_HTTP_ROUTE:
		if m.GetRouteConfiguration() == nil {
			v.fail(path+".match", "applyTo for http route class objects cannot have non route configuration match")
		}
	case networking.EnvoyFilter_CLUSTER:
		if m.GetCluster() == nil {
			v.fail(path+".match", "applyTo for cluster class objects cannot have non cluster match")
		}
	}
}

// extensionConfig: istiod serves only EXTENSION_CONFIG patches whose operation is ADD
// (extension_configuration_patch.go, InsertedExtensionConfigurations ignores the rest);
// a Wasm one is Spillway's filter and must be complete.
func (v *validator) extensionConfig(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, ec *corev3.TypedExtensionConfig) {
	if cp.Patch.Operation != networking.EnvoyFilter_Patch_ADD {
		v.fail(path+".patch.operation", "%s: istiod serves only ADD extension configs", cp.Patch.Operation)
		return
	}
	if v.extensionConfigs == nil {
		v.extensionConfigs = map[string]bool{}
	}
	if v.extensionConfigs[ec.Name] {
		v.fail(path+".patch.value.name", "extension config %q added twice", ec.Name)
	}
	v.extensionConfigs[ec.Name] = true
	if ec.GetTypedConfig().GetTypeUrl() != wasmTypeURL {
		return
	}
	w := new(wasmfilterv3.Wasm)
	if err := ec.TypedConfig.UnmarshalTo(w); err != nil {
		v.fail(path+".patch.value.typed_config", "%v", err)
		return
	}
	v.wasmConfig(path+".patch.value.typed_config.config", w.GetConfig())
}

// wasmConfig checks the filter's PluginConfig: what Spillway needs to work in Envoy and
// what istio-agent needs to fetch the module.
func (v *validator) wasmConfig(path string, pc *wasmv3.PluginConfig) {
	if pc == nil {
		v.fail(path, "required")
		return
	}
	if !pc.GetAllowOnHeadersStopIteration().GetValue() {
		v.fail(path+".allow_on_headers_stop_iteration", "must be true: Spillway holds request headers while it reads the body, which without it hangs the request")
	}
	if pc.FailurePolicy == wasmv3.FailurePolicy_UNSPECIFIED {
		v.fail(path+".failure_policy", "set it explicitly (FAIL_RELOAD, FAIL_CLOSED or FAIL_OPEN): the default differs between Envoy versions")
	}
	vm := pc.GetVmConfig()
	if vm == nil {
		v.fail(path+".vm_config", "required")
		return
	}
	if vm.Runtime != wasmRuntime {
		v.fail(path+".vm_config.runtime", "%q: Istio's proxies run %s", vm.Runtime, wasmRuntime)
	}
	remote := vm.GetCode().GetRemote()
	if remote == nil {
		v.fail(path+".vm_config.code.remote", "required: the oci:// image istio-agent fetches (a local file exists in no istio-proxy image)")
	} else {
		v.wasmModule(path+".vm_config.code.remote", remote.GetHttpUri().GetUri(), remote.Sha256)
	}
	env := vm.GetEnvironmentVariables()
	names := append(slices.Clone(env.GetHostEnvKeys()), sortedKeys(env.GetKeyValues())...)
	if len(names) > 256 {
		v.fail(path+".vm_config.environment_variables", "at most 256 variables")
	}
	for _, n := range names {
		v.envVar(path+".vm_config.environment_variables["+n+"]", n, env.GetKeyValues()[n])
	}
	if dup := firstDuplicate(names); dup != "" {
		v.fail(path+".vm_config.environment_variables", "%q both from the host and inline", dup)
	}
	cfg := new(wrapperspb.StringValue)
	if pc.GetConfiguration() == nil || pc.Configuration.UnmarshalTo(cfg) != nil {
		v.fail(path+".configuration", "want a google.protobuf.StringValue holding the Spillway policy JSON")
		return
	}
	v.policy(path+".configuration.value", cfg.Value, names)
}

// httpFilter: a filter reading an extension config over ECDS must name one Spillway's
// EnvoyFilters add, ask for the Wasm type, and run before the router.
func (v *validator) httpFilter(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, hf *hcmv3.HttpFilter) {
	cd := hf.GetConfigDiscovery()
	if cd == nil {
		return
	}
	v.filterRefs = append(v.filterRefs, filterRef{object: v.cur, path: path + ".patch.value.config_discovery", name: hf.Name})
	if !slices.Contains(cd.TypeUrls, wasmTypeURL) {
		v.fail(path+".patch.value.config_discovery.type_urls", "must include %s", wasmTypeURL)
	}
	if cd.GetConfigSource().GetAds() == nil {
		v.fail(path+".patch.value.config_discovery.config_source", "want ads: {} (istiod serves extension configs on the proxy's ADS stream)")
	}
	sub := cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
	if cp.Patch.Operation != networking.EnvoyFilter_Patch_INSERT_BEFORE || sub != routerFilterName {
		v.fail(path, "insert the filter with INSERT_BEFORE the %s sub filter: it must run before the router", routerFilterName)
	}
	if ctx := cp.GetMatch().GetContext(); ctx != networking.EnvoyFilter_GATEWAY && ctx != networking.EnvoyFilter_SIDECAR_OUTBOUND {
		v.fail(path+".match.context", "%s: Spillway runs on a gateway (GATEWAY) or on a client's outbound traffic (SIDECAR_OUTBOUND)", ctx)
	}
}

// policy checks the policy a filter attachment carries: it must parse (every ${NAME}
// without a default must be in the VM environment, or the filter refuses to start), and
// every provider's cluster must be an Istio cluster whose host is its authority.
func (v *validator) policy(path, doc string, env []string) {
	lookup := func(name string) (string, bool) {
		if slices.Contains(env, name) {
			return envPlaceholder, true
		}
		return "", false
	}
	p, err := policies.Parse([]byte(doc), policies.ParseOptions{LookupEnv: lookup})
	if err != nil {
		var fes policies.Errors
		if errors.As(err, &fes) {
			for _, fe := range fes {
				v.fail(path, "policy: %s", fe.Error())
			}
		} else {
			v.fail(path, "policy: %v", err)
		}
		return
	}
	ref := policyRef{object: v.cur, path: path}
	for i, pr := range p.Providers {
		pp := fmt.Sprintf("%s: policy: providers[%d]", path, i)
		_, host, err := parseClusterName(pr.Cluster)
		if err != nil {
			v.problems = append(v.problems, Problem{Object: v.cur, Path: pp + ".cluster",
				Message: fmt.Sprintf("%q: %v: in a mesh a provider's cluster is Istio's outbound|<port>||<host> (the cluster header's value and the failover callouts' target)", pr.Cluster, err)})
			continue
		}
		if pr.Authority != host {
			v.problems = append(v.problems, Problem{Object: v.cur, Path: pp + ".authority",
				Message: fmt.Sprintf("%q: must be %q, the cluster's host, whose virtual host the re-routed request is matched in", pr.Authority, host)})
		}
		ref.clusters = append(ref.clusters, pr.Cluster)
	}
	v.policies = append(v.policies, ref)
}

// validateBootstrapOverride reads a bootstrap override strictly and validates it.
func validateBootstrapOverride(raw string) error {
	b := new(bootstrapv3.Bootstrap)
	if err := strictProto.Unmarshal([]byte(raw), b); err != nil {
		return fmt.Errorf("not an Envoy bootstrap: %w", err)
	}
	if len(b.GetStatsConfig().GetStatsTags()) == 0 {
		return fmt.Errorf("no stats_config.stats_tags: nothing to override")
	}
	return validateEnvoy(b.StatsConfig)
}

// validateEnvoy runs Envoy's protoc-gen-validate rules on a message and on every message
// packed in an Any inside it (PGV does not look into Any fields).
func validateEnvoy(m proto.Message) error {
	if va, ok := m.(interface{ ValidateAll() error }); ok {
		if err := va.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", proto.MessageName(m), err)
		}
	}
	return validateAnys(m.ProtoReflect())
}

func validateAnys(m protoreflect.Message) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		visit := func(sub protoreflect.Message) bool {
			err = validateMessageValue(sub)
			return err == nil
		}
		switch {
		case fd.IsList():
			l := val.List()
			for i := 0; i < l.Len(); i++ {
				if !visit(l.Get(i).Message()) {
					return false
				}
			}
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				return true
			}
			val.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { return visit(mv.Message()) })
			return err == nil
		default:
			return visit(val.Message())
		}
		return true
	})
	return err
}

func validateMessageValue(sub protoreflect.Message) error {
	a, ok := sub.Interface().(*anypb.Any)
	if !ok {
		return validateAnys(sub)
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("%s: %w", a.TypeUrl, err)
	}
	return validateEnvoy(inner)
}
