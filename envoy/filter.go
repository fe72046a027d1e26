package envoy

import (
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// moduleFetchTimeout bounds fetching a remote module (Spillway's module is about 6 MB).
const moduleFetchTimeout = 60 * time.Second

// WasmFilter returns the Wasm HTTP filter's configuration for a policy: the typed config of
// the bootstrap's inline filter, and of the ECDS resource.
func WasmFilter(p *Policy, opts Options) (*wasmfilterv3.Wasm, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return wasmFilter(p, o)
}

func wasmFilter(p *Policy, o Options) (*wasmfilterv3.Wasm, error) {
	config, err := anypb.New(wrapperspb.String(string(p.JSON)))
	if err != nil {
		return nil, fmt.Errorf("envoy: plugin configuration: %w", err)
	}
	vm := &wasmv3.VmConfig{
		VmId:    VMID,
		Runtime: WasmRuntime,
		Code:    moduleSource(o.Module),
		// The VM sees only these variables of Envoy's own environment; a key Envoy's
		// environment lacks is left out (wasm.proto, EnvironmentVariables.host_env_keys), and
		// the filter then applies the policy's ${NAME:-default} or refuses to start.
		EnvironmentVariables: &wasmv3.EnvironmentVariables{HostEnvKeys: p.EnvKeys},
	}
	return &wasmfilterv3.Wasm{Config: &wasmv3.PluginConfig{
		Name:   ExtensionConfigName,
		RootId: RootID,
		Vm:     &wasmv3.PluginConfig_VmConfig{VmConfig: vm},
		// A StringValue reaches the plugin as its raw bytes, the policy JSON as written
		// (Envoy source/common/protobuf/utility.cc, MessageUtil::knownAnyToBytes; anyToBytes
		// in source/extensions/common/wasm/wasm.cc before it).
		Configuration: config,
		FailurePolicy: o.FailurePolicy,
		// Spillway holds request headers while it reads the body's model (see the package
		// doc); without this the pause stops every body callback.
		AllowOnHeadersStopIteration: wrapperspb.Bool(true),
	}}, nil
}

// moduleSource is where the VM's code comes from.
func moduleSource(m Module) *corev3.AsyncDataSource {
	if m.URL == "" {
		return &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{
			Local: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: m.Path}}}}
	}
	return &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Remote{Remote: &corev3.RemoteDataSource{
		HttpUri: &corev3.HttpUri{
			Uri:              m.URL,
			HttpUpstreamType: &corev3.HttpUri_Cluster{Cluster: ModuleFetchCluster},
			Timeout:          durationpb.New(moduleFetchTimeout),
		},
		Sha256: m.SHA256,
		RetryPolicy: &corev3.RetryPolicy{
			NumRetries: wrapperspb.UInt32(3),
		},
	}}}
}

// ExtensionConfig returns the ECDS resource a control plane serves for a policy: the Wasm
// filter's configuration named ExtensionConfigName, as the bootstrap's config_discovery
// asks for it.
func ExtensionConfig(p *Policy, opts Options) (*corev3.TypedExtensionConfig, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkRouting(p); err != nil {
		return nil, err // the bootstrap's route reads filter state
	}
	// A bootstrap that takes the filter over ECDS has no upstream filter.
	if p, err = p.forECDS(o); err != nil {
		return nil, err
	}
	if err := errIfRouterWithoutFilter(p, Options{XDS: "ecds"}); err != nil {
		return nil, err
	}
	w, err := wasmFilter(p, o)
	if err != nil {
		return nil, err
	}
	typed, err := anypb.New(w)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	ext := &corev3.TypedExtensionConfig{Name: ExtensionConfigName, TypedConfig: typed}
	if err := Validate(ext); err != nil {
		return nil, err
	}
	return ext, nil
}
