package envoycheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spillwayproxy/spillway/envoy"
)

// Addrs are where an Envoy run listens and what it reaches, host:port each.
type Addrs struct {
	Listen, Admin, Upstream string
}

// Bootstrap is the Envoy configuration a scenario runs in: a listener whose connection
// manager (no generated x-request-id, so the probe sees only what the client sent and what
// Envoy adds on its own) has the probe as its Wasm filter — plugin name and root_id
// envoycheck, the scenario's script as its configuration, no allow_on_headers_stop_iteration
// — then the router to the upstream cluster; the callout cluster for proxy_http_call; both
// clusters at addrs.Upstream over HTTP/1.1.
func Bootstrap(s Scenario, probePath string, addrs Addrs) (*bootstrapv3.Bootstrap, error) {
	cfg, err := anypb.New(wrapperspb.String(strings.TrimSpace(s.Script)))
	if err != nil {
		return nil, fmt.Errorf("envoycheck: %w", err)
	}
	wasm, err := anypb.New(&wasmfilterv3.Wasm{Config: &wasmv3.PluginConfig{
		Name: pluginName, RootId: rootID, Configuration: cfg,
		Vm: &wasmv3.PluginConfig_VmConfig{VmConfig: &wasmv3.VmConfig{
			VmId: pluginName, Runtime: envoy.WasmRuntime,
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{
				Local: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: probePath}}}},
		}},
	}})
	if err != nil {
		return nil, fmt.Errorf("envoycheck: %w", err)
	}
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, fmt.Errorf("envoycheck: %w", err)
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix:        "envoycheck",
		GenerateRequestId: wrapperspb.Bool(false),
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: "envoycheck",
			VirtualHosts: []*routev3.VirtualHost{{Name: "envoycheck", Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: upstreamCluster}}},
				}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "envoy.filters.http.wasm", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: wasm}},
			{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("envoycheck: %w", err)
	}
	listen, err := address(addrs.Listen)
	if err != nil {
		return nil, err
	}
	admin, err := address(addrs.Admin)
	if err != nil {
		return nil, err
	}
	up, err := address(addrs.Upstream)
	if err != nil {
		return nil, err
	}
	cluster := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{
			Name:                 name,
			ConnectTimeout:       durationpb.New(time.Second),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
			LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name,
				Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: up}},
				}}}}},
		}
	}
	return &bootstrapv3.Bootstrap{
		Admin: &bootstrapv3.Admin{Address: admin},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: []*listenerv3.Listener{{Name: "envoycheck", Address: listen,
				FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
					Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
				}}}}}},
			Clusters: []*clusterv3.Cluster{cluster(upstreamCluster), cluster(calloutCluster)},
		},
	}, nil
}

func address(hostport string) (*corev3.Address, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("envoycheck: address %q: %w", hostport, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("envoycheck: address %q: %w", hostport, err)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}, nil
}

// ErrNoEnvoy is wrapped by RunEnvoy's error when bin names no Envoy.
var ErrNoEnvoy = errors.New("envoycheck: no Envoy binary")

// Version is bin's `--version` line.
func Version(bin string) (string, error) {
	if bin == "" {
		return "", fmt.Errorf("%w: set ENVOY_BIN=/path/to/envoy (Envoy >= 1.%d)", ErrNoEnvoy, envoy.SupportedEnvoyMinor)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %s --version: %v: %s", ErrNoEnvoy, bin, err, out)
	}
	if _, err := envoy.VersionMinor(out); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoEnvoy, bin, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RunEnvoy runs s in the Envoy at bin (--concurrency 1) on the probe at probePath, with the
// upstream at upstream (host:port, serving Upstream), in dir: it starts Envoy on free
// loopback ports, waits for /ready, sends the request, waits for the stream's end in the
// log (the probe's on_delete), stops Envoy and returns the worker's trace with Envoy's full
// log.
func RunEnvoy(ctx context.Context, bin, version, probePath, upstream, dir string, s Scenario) (Trace, []byte, error) {
	addrs := Addrs{Listen: freeAddr(), Admin: freeAddr(), Upstream: upstream}
	b, err := Bootstrap(s, probePath, addrs)
	if err != nil {
		return Trace{}, nil, err
	}
	yaml, err := envoy.MarshalYAML(b)
	if err != nil {
		return Trace{}, nil, err
	}
	cfg := filepath.Join(dir, s.Name+".envoy.yaml")
	if err := os.WriteFile(cfg, yaml, 0o644); err != nil {
		return Trace{}, nil, fmt.Errorf("envoycheck: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var log lockedBuffer
	cmd := exec.CommandContext(ctx, bin, "-c", cfg, "--concurrency", "1", "--disable-hot-restart",
		"--log-format", EnvoyLogFormat, "--component-log-level", "wasm:info")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		return Trace{}, nil, fmt.Errorf("envoycheck: start %s: %w", bin, err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	if err := waitFor(ctx, func() bool { return ready(addrs.Admin) }); err != nil {
		return Trace{}, log.Bytes(), fmt.Errorf("envoycheck: %s: Envoy never became ready: %w", s.Name, err)
	}
	if err := send(ctx, addrs.Listen, s); err != nil {
		return Trace{}, log.Bytes(), fmt.Errorf("envoycheck: %s: %w", s.Name, err)
	}
	ended := func() bool { return bytes.Contains(log.Bytes(), []byte("cb delete ctx=")) }
	if err := waitFor(ctx, ended); err != nil {
		return Trace{}, log.Bytes(), fmt.Errorf("envoycheck: %s: the stream did not end in the log: %w", s.Name, err)
	}
	lines, err := FromEnvoyLog(log.Bytes())
	if err != nil {
		return Trace{}, log.Bytes(), err
	}
	return Trace{Scenario: s.Name, Source: "envoy " + version, Lines: lines}, log.Bytes(), nil
}

// send is the client: s's request with the fixed headers hostsim's side gets too.
func send(ctx context.Context, listen string, s Scenario) error {
	var body io.Reader
	if s.Body != "" {
		body = strings.NewReader(s.Body)
	}
	req, err := http.NewRequestWithContext(ctx, s.Method, "http://"+listen+s.Path, body)
	if err != nil {
		return err
	}
	req.Host = authority
	req.Header.Set("user-agent", userAgent)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func ready(admin string) bool {
	resp, err := http.Get("http://" + admin + "/ready")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && strings.Contains(string(b), "LIVE")
}

func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// freeAddr is a loopback address free a moment ago (another process could take it first;
// Envoy then fails to start and says so in its log).
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

// lockedBuffer is Envoy's output, written by the process and read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}
