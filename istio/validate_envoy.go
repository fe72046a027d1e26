package istio

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

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
	"github.com/spillwayproxy/spillway/internal/rootid"
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

// standIn is the least istiod could have built for a MERGE patch value of the type to land
// on: the fields Envoy's protoc-gen-validate rules require of it. istiod merges the value
// with proto.Merge semantics (pkg/proto/merge/merge.go; a map entry replaces the one it
// names, as in proto.Merge), so once the value is merged into its stand-in, every rule that
// fails is the value's. A MERGE value alone is a fragment (a virtual host without a name,
// say) that Envoy's rules would refuse for what it leaves to istiod.
func standIn(applyTo networking.EnvoyFilter_ApplyTo) proto.Message {
	const name = "stand-in"
	m := patchType(applyTo)
	switch m := m.(type) {
	case *clusterv3.Cluster:
		m.Name = name
	case *hcmv3.HttpFilter:
		m.Name = name
	case *listenerv3.Filter:
		m.Name = name
	case *listenerv3.ListenerFilter:
		m.Name = name
	case *routev3.VirtualHost:
		m.Name, m.Domains = name, []string{name}
	case *routev3.Route:
		m.Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
		m.Action = &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: name}}}
	case *corev3.TypedExtensionConfig:
		m.Name, m.TypedConfig = name, mustAny(&wasmfilterv3.Wasm{})
	}
	return m
}

// envoyFilter checks an EnvoyFilter: scoped to named workloads, and each patch (configPatch);
// then the buffer limits it raises (bufferLimits).
func (v *validator) envoyFilter(ef *networking.EnvoyFilter) {
	v.scoped(ef.WorkloadSelector.GetLabels(), ef.WorkloadSelector != nil, len(ef.TargetRefs) > 0)
	v.ef = envoyFilterPatches{vhosts: len(v.vhostPatches)}
	for i, cp := range ef.ConfigPatches {
		v.configPatch(fmt.Sprintf("spec.configPatches[%d]", i), cp)
	}
	v.bufferLimits(v.vhostPatches[v.ef.vhosts:])
}

// envoyFilterPatches is what bufferLimits needs of the EnvoyFilter being checked.
type envoyFilterPatches struct {
	vhosts    int             // its first entry in validator.vhostPatches
	listeners []listenerPatch // its LISTENER MERGEs of per_connection_buffer_limit_bytes
	holds     bool            // it adds a Wasm filter that holds request headers
}

type listenerPatch struct {
	path  string
	ctx   networking.EnvoyFilter_PatchContext
	port  uint32
	limit uint64
}

// configPatch decodes a patch value the way istiod does (decodeIstiod), holds it to Envoy's
// protoc-gen-validate rules (an added or inserted value alone, a MERGE value merged into its
// stand-in), and checks what Spillway's patches of its type promise. A patch istiod's own
// validation refuses (no applyTo, operation or value; a match that does not fit applyTo) is
// left to istioctl.
func (v *validator) configPatch(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch) {
	if cp.GetMatch().GetContext() == networking.EnvoyFilter_WAYPOINT {
		v.fail(path+".match.context", "WAYPOINT: waypoints are not supported (Spillway runs in gateways and sidecars; istiod does not validate a waypoint's patches)")
		return
	}
	obj := patchType(cp.GetApplyTo())
	if obj == nil || cp.GetPatch().GetValue() == nil {
		return
	}
	if err := decodeIstiod(cp.Patch.Value, obj); err != nil {
		v.fail(path+".patch.value", "does not decode as %s: %v", proto.MessageName(obj), err)
		return
	}
	switch op := cp.Patch.Operation; {
	case op == networking.EnvoyFilter_Patch_MERGE:
		merged := standIn(cp.ApplyTo)
		proto.Merge(merged, obj)
		v.failErr(path+".patch.value", validateEnvoy(merged))
	case op != networking.EnvoyFilter_Patch_REMOVE:
		v.failErr(path+".patch.value", validateEnvoy(obj))
	}
	switch m := obj.(type) {
	case *corev3.TypedExtensionConfig:
		v.extensionConfig(path, cp, m)
	case *hcmv3.HttpFilter:
		v.httpFilter(path, cp, m)
	case *clusterv3.Cluster:
		v.clusterPatch(path, cp, m)
	case *routev3.VirtualHost:
		v.perFilterConfigs(path+".patch.value.typed_per_filter_config", m.GetTypedPerFilterConfig())
		rc := cp.GetMatch().GetRouteConfiguration()
		v.vhostPatches = append(v.vhostPatches, vhostPatch{object: v.cur, path: path, ctx: cp.GetMatch().GetContext(),
			port: rc.GetPortNumber(), name: rc.GetVhost().GetName(), vh: m})
	case *listenerv3.Listener:
		if cp.Patch.Operation != networking.EnvoyFilter_Patch_MERGE || m.GetPerConnectionBufferLimitBytes() == nil {
			break
		}
		l := listenerPatch{path: path, ctx: cp.GetMatch().GetContext(), port: cp.GetMatch().GetListener().GetPortNumber(),
			limit: uint64(m.GetPerConnectionBufferLimitBytes().GetValue())}
		if l.port == 0 {
			v.fail(path+".match.listener.portNumber", "required: without it the connection buffer limit rises on every listener of the workload; name the listener Spillway's virtual hosts are served on")
		}
		v.ef.listeners = append(v.ef.listeners, l)
	case *routev3.Route:
		v.perFilterConfigs(path+".patch.value.typed_per_filter_config", m.GetTypedPerFilterConfig())
		vh := cp.GetMatch().GetRouteConfiguration().GetVhost()
		if v.routePatches == nil {
			v.routePatches = map[string]routePatch{}
		}
		v.routePatches[vh.GetName()+"/"+vh.GetRoute().GetName()] = routePatch{object: v.cur, path: path, route: m}
	}
}

// bufferLimits is Spillway's rule on the buffer limits an EnvoyFilter raises. Where the
// EnvoyFilter adds a Wasm filter that holds request headers (allow_on_headers_stop_iteration:
// the Full mode), a virtual host's request_body_buffer_limit above Envoy's 1 MiB
// connection default needs, in the same context, a LISTENER MERGE raising
// per_connection_buffer_limit_bytes at least as far: Envoy 1.36 (Istio 1.28) applies the
// virtual host's limit only in the router (envoyproxy/envoy#42607), after Spillway has
// buffered the body of a request it holds at its headers, which buffers under the
// listener's limit meanwhile (see envoylimits.ConnectionBufferLimit). A LISTENER patch
// must name its port (configPatch: without one it changes every listener of the workload),
// and on a sidecar the port of the virtual hosts (the outbound listener for a port serves
// its routes; a gateway binds its Service's target port instead, which Render cannot check).
func (v *validator) bufferLimits(vhosts []vhostPatch) {
	if !v.ef.holds {
		return
	}
	largest := map[networking.EnvoyFilter_PatchContext]vhostPatch{} // the largest virtual host limit
	for _, vp := range vhosts {
		if vp.vh.GetRequestBodyBufferLimit().GetValue() > largest[vp.ctx].vh.GetRequestBodyBufferLimit().GetValue() {
			largest[vp.ctx] = vp
		}
	}
	for _, ctx := range slices.Sorted(maps.Keys(largest)) {
		vp := largest[ctx]
		limit := vp.vh.GetRequestBodyBufferLimit().GetValue()
		if limit <= envoylimits.DefaultConnectionBufferLimit {
			continue
		}
		var l *listenerPatch
		for i, lp := range v.ef.listeners {
			if lp.ctx == ctx && (l == nil || lp.limit > l.limit) {
				l = &v.ef.listeners[i]
			}
		}
		switch {
		case l == nil:
			v.fail(vp.path+".patch.value.request_body_buffer_limit", "%d needs a LISTENER MERGE of per_connection_buffer_limit_bytes ≥ %d in context %s: Envoy 1.36 (Istio 1.28) applies a virtual host's limit only in the router, and a request Spillway holds at its headers buffers under the listener's limit (1 MiB by default) until then (envoyproxy/envoy#42607)", limit, limit, ctx)
		case l.limit < limit:
			v.fail(l.path+".patch.value.per_connection_buffer_limit_bytes", "%d is below the virtual hosts' request_body_buffer_limit %d: Envoy 1.36 (Istio 1.28) would answer its own 413 for a held request between the two (envoyproxy/envoy#42607)", l.limit, limit)
		case ctx == networking.EnvoyFilter_SIDECAR_OUTBOUND && l.port != 0 && l.port != vp.port:
			v.fail(l.path+".match.listener.portNumber", "%d, but Spillway's virtual hosts are on port %d: a sidecar serves them on its outbound listener for that port", l.port, vp.port)
		}
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
// router): the HttpProtocolOptions it puts on the cluster name an upstream protocol (istiod's
// MERGE replaces the map entry, see routerPatches, and Envoy requires one), end with the
// codec (Envoy refuses any other terminal upstream filter), and read Spillway's upstream
// instance over ECDS (ecdsConfig).
func (v *validator) clusterPatch(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, c *clusterv3.Cluster) {
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
	if v.clusterPatches == nil {
		v.clusterPatches = map[string][]string{}
	}
	cluster := cp.GetMatch().GetCluster().GetName()
	for i, f := range filters {
		if f.GetConfigDiscovery() != nil {
			v.ecdsConfig(filterRef{object: v.cur, path: fmt.Sprintf("%s.http_filters[%d].config_discovery", path, i), name: f.Name}, f)
			v.clusterPatches[cluster] = append(v.clusterPatches[cluster], f.Name)
		}
	}
}

// ecdsConfig: a filter reading its config over ECDS names an extension config an
// EnvoyFilter adds (a cross check), asks for the Wasm type, and reads it from istiod on the
// proxy's ADS stream.
func (v *validator) ecdsConfig(ref filterRef, f *hcmv3.HttpFilter) {
	cd := f.GetConfigDiscovery()
	v.filterRefs = append(v.filterRefs, ref)
	if !slices.Contains(cd.TypeUrls, wasmTypeURL) {
		v.fail(ref.path+".type_urls", "must include %s", wasmTypeURL)
	}
	if cd.GetConfigSource().GetAds() == nil {
		v.fail(ref.path+".config_source", "want ads: {} (istiod serves extension configs on the proxy's ADS stream)")
	}
}

// extensionConfig: istiod serves only EXTENSION_CONFIG patches whose operation is ADD
// (extension_configuration_patch.go, InsertedExtensionConfigurations ignores the rest); a
// Wasm one is Spillway's filter and must be complete (wasmConfig).
func (v *validator) extensionConfig(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, ec *corev3.TypedExtensionConfig) {
	if cp.Patch.Operation != networking.EnvoyFilter_Patch_ADD {
		v.fail(path+".patch.operation", "%s: istiod serves only ADD extension configs", cp.Patch.Operation)
		return
	}
	if v.extensionConfigs == nil {
		v.extensionConfigs = map[string]extensionRef{}
	}
	if _, dup := v.extensionConfigs[ec.Name]; dup {
		v.fail(path+".patch.value.name", "extension config %q added twice", ec.Name)
	}
	ref := extensionRef{object: v.cur, path: path}
	if ec.GetTypedConfig().GetTypeUrl() == wasmTypeURL {
		w := new(wasmfilterv3.Wasm)
		if err := ec.TypedConfig.UnmarshalTo(w); err != nil {
			v.fail(path+".patch.value.typed_config", "%v", err)
			return
		}
		ref.wasm = w.GetConfig()
		v.ef.holds = v.ef.holds || w.GetConfig().GetAllowOnHeadersStopIteration().GetValue()
		v.wasmConfig(path+".patch.value.typed_config.config", w.GetConfig())
	}
	v.extensionConfigs[ec.Name] = ref
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
	switch pc.FailurePolicy {
	case wasmv3.FailurePolicy_UNSPECIFIED:
		v.fail(path+".failure_policy", "set it explicitly (FAIL_RELOAD or FAIL_CLOSED): the default differs between Envoy versions")
	case wasmv3.FailurePolicy_FAIL_OPEN:
		v.fail(path+".failure_policy", "FAIL_OPEN: %s", errFailOpen)
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
	for _, n := range names {
		v.envVar(path+".vm_config.environment_variables["+n+"]", n)
	}
	if dup := firstDuplicate(names); dup != "" {
		v.fail(path+".vm_config.environment_variables", "%q both from the host and inline", dup)
	}
	cfg := new(wrapperspb.StringValue)
	if pc.GetConfiguration() == nil || pc.Configuration.UnmarshalTo(cfg) != nil {
		v.fail(path+".configuration", "want a google.protobuf.StringValue holding the Spillway policy JSON")
		return
	}
	if ref := v.policy(path+".configuration.value", cfg.Value, names); ref != nil && pc.RootId != rootid.Upstream {
		// The upstream instance carries the downstream's policy; the cross checks read it once.
		v.policies = append(v.policies, *ref)
	}
}

// httpFilter: Spillway's HTTP filter reads its config over ECDS (ecdsConfig), runs before
// the router, on a gateway or on a client's outbound traffic.
func (v *validator) httpFilter(path string, cp *networking.EnvoyFilter_EnvoyConfigObjectPatch, hf *hcmv3.HttpFilter) {
	if hf.GetConfigDiscovery() == nil {
		return
	}
	v.ecdsConfig(filterRef{object: v.cur, path: path + ".patch.value.config_discovery", name: hf.Name,
		downstream: true, disabled: hf.Disabled}, hf)
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
// every provider's cluster must be an Istio cluster whose host is its authority. It returns
// the parsed policy for the cross checks, nil if it does not parse.
func (v *validator) policy(path, doc string, env []string) *policyRef {
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
		return nil
	}
	ref := &policyRef{object: v.cur, path: path, res: p.Resolved()}
	for i, pr := range ref.res.Providers {
		pp := fmt.Sprintf("%s: policy: providers[%d]", path, i)
		_, host, err := parseClusterName(pr.Cluster)
		if err != nil {
			v.fail(pp+".cluster", "%q: %v: in a mesh a provider's cluster is Istio's outbound|<port>||<host> (the cluster header's value and the failover callouts' target)", pr.Cluster, err)
			continue
		}
		if pr.Authority != host {
			v.fail(pp+".authority", "%q: must be %q, the cluster's host, whose virtual host the re-routed request is matched in", pr.Authority, host)
		}
	}
	return ref
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
