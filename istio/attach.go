package istio

import (
	"fmt"
	"slices"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	typeapi "istio.io/api/type/v1beta1"

	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

const (
	ociScheme = "oci://"
	// wasmRuntime is the runtime Istio's proxies run Wasm in (pilot/pkg/model/extensions.go,
	// defaultRuntime).
	wasmRuntime = "envoy.wasm.runtime.v8"
	// agentFetchCluster is the placeholder cluster of a remote module istio-agent fetches
	// itself before Envoy sees the configuration (pilot/pkg/model/extensions.go,
	// buildDataSource; pkg/wasm/convert.go, rewriteVMConfig rewrites it to a local file).
	agentFetchCluster = "_"
	// fetchTimeout bounds one module download by istio-agent (Istio's WasmPlugin uses the
	// same 30 s: pilot/pkg/model/extensions.go, buildDataSource).
	fetchTimeout     = 30 * time.Second
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	routerFilterName = "envoy.filters.http.router"
	// bootstrapOverrideKey is the ConfigMap key istio-proxy reads a bootstrap override from
	// (manifests/charts/istio-control/istio-discovery/files/injection-template.yaml:
	// ISTIO_BOOTSTRAP_OVERRIDE=/etc/istio/custom-bootstrap/custom_bootstrap.json).
	bootstrapOverrideKey = "custom_bootstrap.json"
)

var (
	wasmTypeURL = "type.googleapis.com/" + string(proto.MessageName(&wasmfilterv3.Wasm{}))
	// patchJSON writes Envoy configuration the way EnvoyFilter patches are usually
	// written: proto field names (snake_case).
	patchJSON = protojson.MarshalOptions{UseProtoNames: true}
)

// filterName is the Envoy HTTP filter's name and its ECDS resource name.
func (b *builder) filterName() string { return "spillway/" + b.s.Namespace + "/" + b.s.Name }

// attachment returns the resources that attach the filter in the chosen mode.
func (b *builder) attachment(providerHosts []string) ([]Object, error) {
	switch b.s.Mode {
	case ModeWasmPlugin, ModeTrafficExtension:
		buffers, err := b.bufferEnvoyFilter(providerHosts)
		if err != nil {
			return nil, err
		}
		plugin, err := b.wasmPluginObject()
		if err != nil {
			return nil, err
		}
		return []Object{buffers, plugin}, nil
	}
	ef, err := b.fullEnvoyFilter(providerHosts)
	if err != nil {
		return nil, err
	}
	return []Object{ef}, nil
}

func (b *builder) patchContext() networking.EnvoyFilter_PatchContext {
	if b.s.Attach == AttachSidecar {
		return networking.EnvoyFilter_SIDECAR_OUTBOUND
	}
	return networking.EnvoyFilter_GATEWAY
}

// wasmFilterConfig is the filter's typed configuration with the option a WasmPlugin
// cannot set.
func (b *builder) wasmFilterConfig() *wasmfilterv3.Wasm {
	env := &wasmv3.EnvironmentVariables{HostEnvKeys: b.hostEnv}
	if len(b.s.InlineEnv) > 0 {
		env.KeyValues = b.s.InlineEnv
	}
	if len(env.HostEnvKeys) == 0 && len(env.KeyValues) == 0 {
		env = nil
	}
	return &wasmfilterv3.Wasm{Config: &wasmv3.PluginConfig{
		Name: b.s.Name,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			Runtime: wasmRuntime,
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
				HttpUri: &corev3.HttpUri{
					Uri:              ociScheme + b.s.imageRef,
					HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: agentFetchCluster},
					Timeout:          durationpb.New(fetchTimeout),
				},
				// For an oci:// module istio-agent compares this with the image's manifest
				// digest (pkg/wasm/imagefetcher.go, PrepareFetch; cache.go, getOrFetch).
				Sha256: b.s.digestHex,
			}}},
			EnvironmentVariables: env,
		}},
		Configuration:               mustAny(wrapperspb.String(string(b.pluginConfig))),
		FailurePolicy:               envoyFailurePolicy(b.s.FailurePolicy),
		AllowOnHeadersStopIteration: wrapperspb.Bool(true),
	}}
}

func envoyFailurePolicy(f FailurePolicy) wasmv3.FailurePolicy {
	switch f {
	case FailClosed:
		return wasmv3.FailurePolicy_FAIL_CLOSED
	case FailOpen:
		return wasmv3.FailurePolicy_FAIL_OPEN
	}
	return wasmv3.FailurePolicy_FAIL_RELOAD
}

// fullEnvoyFilter is the Full mode: the filter's configuration is an ECDS extension config
// (EXTENSION_CONFIG ADD; istiod serves it over ECDS and istio-agent replaces its oci://
// module with the fetched file), the HTTP filter before the router reads it through
// config_discovery, and it is disabled by default and enabled on Spillway's virtual hosts
// alone, so other hosts of a shared gateway or of the sidecar's listener never run it.
// The same virtual hosts, and the listener they are served on, get a buffer limit above
// the policy's (see bufferPatches).
// ecdsFilter is an HTTP filter whose config comes over ECDS (ADS) as the extension config
// name. Its initial fetch timeout is 0: the listener (or, upstream, the try) waits for the
// extension config, so no request runs without Spillway (istio-agent answers a failed fetch
// with an RBAC filter per the failure policy: pkg/wasm/convert.go,
// MaybeConvertWasmExtensionConfig); whether a cluster warms on an upstream filter's was not
// verified.
func ecdsFilter(name string) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name: name,
		ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{ConfigDiscovery: &corev3.ExtensionConfigSource{
			ConfigSource: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
				ResourceApiVersion:    corev3.ApiVersion_V3,
				InitialFetchTimeout:   durationpb.New(0),
			},
			TypeUrls: []string{wasmTypeURL},
		}},
	}
}

func (b *builder) fullEnvoyFilter(providerHosts []string) (Object, error) {
	ext := &corev3.TypedExtensionConfig{Name: b.filterName(), TypedConfig: mustAny(b.wasmFilterConfig())}
	httpFilter := ecdsFilter(b.filterName())
	httpFilter.Disabled = true
	listener := &networking.EnvoyFilter_ListenerMatch{
		FilterChain: &networking.EnvoyFilter_ListenerMatch_FilterChainMatch{
			Filter: &networking.EnvoyFilter_ListenerMatch_FilterMatch{
				Name:      hcmFilterName,
				SubFilter: &networking.EnvoyFilter_ListenerMatch_SubFilterMatch{Name: routerFilterName},
			},
		},
	}
	if b.s.Attach == AttachSidecar {
		listener.PortNumber = b.s.Port
	}
	extValue, err := toStruct(ext)
	if err != nil {
		return Object{}, err
	}
	filterValue, err := toStruct(httpFilter)
	if err != nil {
		return Object{}, err
	}
	patches := []*networking.EnvoyFilter_EnvoyConfigObjectPatch{
		{
			ApplyTo: networking.EnvoyFilter_EXTENSION_CONFIG,
			Patch:   &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_ADD, Value: extValue},
		},
		{
			ApplyTo: networking.EnvoyFilter_HTTP_FILTER,
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{
				Context:     b.patchContext(),
				ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: listener},
			},
			Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_INSERT_BEFORE, Value: filterValue},
		},
	}
	buffers, err := b.bufferPatches(providerHosts, true)
	if err != nil {
		return Object{}, err
	}
	router, err := b.routerPatches(providerHosts)
	if err != nil {
		return Object{}, err
	}
	o := b.object("EnvoyFilter", b.s.Name)
	o.Spec = &networking.EnvoyFilter{
		WorkloadSelector: &networking.WorkloadSelector{Labels: b.s.Selector},
		ConfigPatches:    slices.Concat(patches, buffers, router),
	}
	return o, nil
}

// bufferEnvoyFilter gives Spillway's virtual hosts their body buffer limit when a WasmPlugin
// or TrafficExtension attaches the filter (neither can set it). The header-routed filter
// those modes run lets the request headers go on before it buffers the body, so the router
// has applied the virtual hosts' limit by then on Envoy 1.36 too, and the listener keeps
// its limit (see bufferPatches).
func (b *builder) bufferEnvoyFilter(providerHosts []string) (Object, error) {
	vhPatches, err := b.virtualHostPatches(providerHosts, false)
	if err != nil {
		return Object{}, err
	}
	o := b.object("EnvoyFilter", b.s.Name+"-buffers")
	o.Spec = &networking.EnvoyFilter{
		WorkloadSelector: &networking.WorkloadSelector{Labels: b.s.Selector},
		ConfigPatches:    vhPatches,
	}
	return o, nil
}

// bufferPatches are the virtual host patches (virtualHostPatches) and the listener patch
// (listenerBufferPatch) that let Envoy buffer a request the Full mode's filter holds at its
// headers while it reads the body: the virtual hosts' request_body_buffer_limit, which
// Envoy ≥ 1.37 applies when the route is matched, and the same limit as the listener's
// per_connection_buffer_limit_bytes, which such a request buffers under on Envoy 1.36
// (Istio 1.28), where the route's limit is applied only once the headers reach the router
// (envoyproxy/envoy#42607; see envoylimits.ConnectionBufferLimit).
func (b *builder) bufferPatches(providerHosts []string, enable bool) ([]*networking.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	patches, err := b.virtualHostPatches(providerHosts, enable)
	if err != nil {
		return nil, err
	}
	listener, err := b.listenerBufferPatch()
	if err != nil {
		return nil, err
	}
	return append(patches, listener), nil
}

// listenerBufferPatch MERGEs the connection buffer limit into the listener Spillway's
// virtual hosts are served on: the gateway's listener for GatewayPort (bound to
// GatewayListenerPort), or the sidecar's outbound listener for Port, where the outbound
// listener hands a connection to it (the listener that accepts it sets its buffer limits:
// source/common/listener_manager/active_tcp_listener.cc, ActiveTcpListener::
// newActiveConnection). Every connection of that listener gets the raised bound, other
// hosts' too.
func (b *builder) listenerBufferPatch() (*networking.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	value, err := toStruct(&listenerv3.Listener{
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(envoylimits.ConnectionBufferLimit(b.res))})
	if err != nil {
		return nil, err
	}
	port := b.s.Port
	if b.s.Attach == AttachGateway {
		port = b.s.GatewayListenerPort
	}
	return &networking.EnvoyFilter_EnvoyConfigObjectPatch{
		ApplyTo: networking.EnvoyFilter_LISTENER,
		Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{
			Context: b.patchContext(),
			ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_Listener{
				Listener: &networking.EnvoyFilter_ListenerMatch{PortNumber: port},
			},
		},
		Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE, Value: value},
	}, nil
}

// virtualHostPatches MERGE into each of Spillway's virtual hosts the request body buffer
// limit (Envoy ≥ 1.36 VirtualHost.request_body_buffer_limit, which raises a stream's buffer
// limit above the listener's per_connection_buffer_limit_bytes) and, when enable is set,
// the per-filter config that enables the filter there (enableFilter).
func (b *builder) virtualHostPatches(providerHosts []string, enable bool) ([]*networking.EnvoyFilter_EnvoyConfigObjectPatch, error) {
	vh := &routev3.VirtualHost{RequestBodyBufferLimit: wrapperspb.UInt64(envoylimits.RequestBodyBufferLimit(b.res))}
	if enable {
		vh.TypedPerFilterConfig = map[string]*anypb.Any{b.filterName(): enableFilter()}
	}
	value, err := toStruct(vh)
	if err != nil {
		return nil, err
	}
	port, names := b.spillwayVirtualHosts(providerHosts)
	var patches []*networking.EnvoyFilter_EnvoyConfigObjectPatch
	for _, name := range names {
		patches = append(patches, &networking.EnvoyFilter_EnvoyConfigObjectPatch{
			ApplyTo: networking.EnvoyFilter_VIRTUAL_HOST,
			Match: &networking.EnvoyFilter_EnvoyConfigObjectMatch{
				Context: b.patchContext(),
				ObjectTypes: &networking.EnvoyFilter_EnvoyConfigObjectMatch_RouteConfiguration{
					RouteConfiguration: &networking.EnvoyFilter_RouteConfigurationMatch{
						PortNumber: port,
						Vhost:      &networking.EnvoyFilter_RouteConfigurationMatch_VirtualHostMatch{Name: name},
					},
				},
			},
			Patch: &networking.EnvoyFilter_Patch{Operation: networking.EnvoyFilter_Patch_MERGE, Value: proto.CloneOf(value)},
		})
	}
	return patches, nil
}

// enableFilter is the typed_per_filter_config entry that enables on a virtual host the
// filter the listener disables by default. Envoy enables a filter for every entry that does
// not disable it, but refuses a FilterConfig without a config ("Empty route/virtual host per
// filter configuration"), and for a typed config it looks up the filter factory of that type
// for a per-route config, refusing one it cannot build unless the entry is optional
// (source/common/router/per_filter_config.cc, PerFilterConfigs::PerFilterConfigs and
// createRouteSpecificFilterConfig). An empty Any would enable it with nothing else, but
// istiod reads patch values with the legacy jsonpb decoder (pkg/config/xds/xds.go,
// StructToMessage; pkg/util/protomarshal), which refuses an Any without "@type": its
// webhook rejects the EnvoyFilter, and without the webhook istiod drops the patch. So the
// config is an empty Wasm message, marked optional: the Wasm filter's factory has no virtual
// host configuration (it keeps HttpFilterConfigFactoryBase's createRouteSpecificFilterConfig,
// which returns nullptr: envoy/server/filter_config.h), and for an optional entry Envoy
// ignores that and records the filter as enabled, without a per-route config. The validator
// holds typed_per_filter_config to these rules (perFilterConfigs).
func enableFilter() *anypb.Any {
	return mustAny(&routev3.FilterConfig{Config: mustAny(&wasmfilterv3.Wasm{}), IsOptional: true})
}

// wasmPluginObject is the header-routed mode's WasmPlugin or TrafficExtension.
func (b *builder) wasmPluginObject() (Object, error) {
	cfg, err := policyStruct(b.pluginConfig)
	if err != nil {
		return Object{}, err
	}
	var env []*extensionsapi.EnvVar
	for _, name := range b.hostEnv {
		env = append(env, &extensionsapi.EnvVar{Name: name, ValueFrom: extensionsapi.EnvValueSource_HOST})
	}
	for _, name := range sortedKeys(b.s.InlineEnv) {
		env = append(env, &extensionsapi.EnvVar{Name: name, Value: b.s.InlineEnv[name], ValueFrom: extensionsapi.EnvValueSource_INLINE})
	}
	var vm *extensionsapi.VmConfig
	if len(env) > 0 {
		vm = &extensionsapi.VmConfig{Env: env}
	}
	selector := &typeapi.WorkloadSelector{MatchLabels: b.s.Selector}
	var ports []*typeapi.PortSelector
	if b.s.Attach == AttachSidecar {
		ports = []*typeapi.PortSelector{{Number: b.s.Port}}
	}
	url := ociScheme + b.s.imageRef
	if b.s.Mode == ModeTrafficExtension {
		o := b.object("TrafficExtension", b.s.Name)
		o.Spec = &extensionsapi.TrafficExtension{
			Selector: selector,
			Match:    []*extensionsapi.TrafficSelector{{Mode: typeapi.WorkloadMode_CLIENT, Ports: ports}},
			FilterConfig: &extensionsapi.TrafficExtension_Wasm{Wasm: &extensionsapi.WasmConfig{
				Url:             url,
				Sha256:          b.s.digestHex,
				ImagePullPolicy: extensionsapi.PullPolicy_IfNotPresent,
				ImagePullSecret: b.s.ImagePullSecret,
				PluginConfig:    cfg,
				FailStrategy:    istioFailStrategy(b.s.FailurePolicy),
				VmConfig:        vm,
				Type:            extensionsapi.PluginType_HTTP,
			}},
		}
		return o, nil
	}
	o := b.object("WasmPlugin", b.s.Name)
	o.Spec = &extensionsapi.WasmPlugin{
		Selector:        selector,
		Match:           []*extensionsapi.WasmPlugin_TrafficSelector{{Mode: typeapi.WorkloadMode_CLIENT, Ports: ports}},
		Url:             url,
		Sha256:          b.s.digestHex,
		ImagePullPolicy: extensionsapi.PullPolicy_IfNotPresent,
		ImagePullSecret: b.s.ImagePullSecret,
		PluginConfig:    cfg,
		FailStrategy:    istioFailStrategy(b.s.FailurePolicy),
		VmConfig:        vm,
		Type:            extensionsapi.PluginType_HTTP,
	}
	return o, nil
}

func istioFailStrategy(f FailurePolicy) extensionsapi.FailStrategy {
	switch f {
	case FailClosed:
		return extensionsapi.FailStrategy_FAIL_CLOSE
	case FailOpen:
		return extensionsapi.FailStrategy_FAIL_OPEN
	}
	return extensionsapi.FailStrategy_FAIL_RELOAD
}

// statsConfigMap holds the Envoy stats_tags for Spillway's metric names as a bootstrap
// override: istio-agent passes the file to Envoy with --config-yaml (pkg/envoy/proxy.go,
// args), which Envoy merges into the bootstrap, appending to Istio's own stats_tags.
func (b *builder) statsConfigMap() (Object, error) {
	var tags []*metricsv3.TagSpecifier
	for _, t := range b.s.StatsTags {
		tags = append(tags, &metricsv3.TagSpecifier{TagName: t.Name, TagValue: &metricsv3.TagSpecifier_Regex{Regex: t.Regex}})
	}
	js, err := patchJSON.Marshal(&bootstrapv3.Bootstrap{StatsConfig: &metricsv3.StatsConfig{StatsTags: tags}})
	if err != nil {
		return Object{}, fmt.Errorf("istio: stats tags: %w", err)
	}
	o := b.object("ConfigMap", b.s.Name+"-bootstrap")
	o.Data = map[string]string{bootstrapOverrideKey: string(js)}
	return o, nil
}

// toStruct turns an Envoy message into an EnvoyFilter patch value.
func toStruct(m proto.Message) (*structpb.Struct, error) {
	js, err := patchJSON.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("istio: %s: %w", proto.MessageName(m), err)
	}
	s := new(structpb.Struct)
	if err := protojson.Unmarshal(js, s); err != nil {
		return nil, fmt.Errorf("istio: %s: %w", proto.MessageName(m), err)
	}
	return s, nil
}

// policyStruct is the policy as a WasmPlugin's pluginConfig; istiod writes it back to
// JSON for the filter (pilot/pkg/model/extensions.go, buildWasmConfig).
func policyStruct(policyJSON []byte) (*structpb.Struct, error) {
	s := new(structpb.Struct)
	if err := protojson.Unmarshal(policyJSON, s); err != nil {
		return nil, fmt.Errorf("istio: plugin config: %w", err)
	}
	return s, nil
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic("istio: " + err.Error()) // a generated message always marshals
	}
	return a
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
