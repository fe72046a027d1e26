package envoy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"

	"github.com/spillwayproxy/spillway/internal/failurepolicy"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/policies"
)

// Names the generated configuration uses. ExtensionConfigName is also the ECDS resource
// name: the bootstrap's HTTP filter and the control plane must agree on it.
const (
	ExtensionConfigName = "spillway"
	// RootID is the root_id of the plugin in the HTTP connection manager's filter chain. The
	// module reads its root id (property plugin_root_id) to know its role: any root id but
	// UpstreamRootID is this one, and naming it keeps the plugin key stable and readable in
	// Envoy's logs.
	RootID = rootid.Downstream
	// UpstreamRootID is the root_id under which the module runs per try as each provider
	// cluster's upstream HTTP filter (HttpProtocolOptions.http_filters, Envoy ≥ 1.31), on the
	// same vm_config so that both plugins share each worker's VM. The bootstrap attaches it
	// exactly when the policy fails over through the router (resilience.failover.via:
	// router); see the package doc, "Failover through the router".
	UpstreamRootID = rootid.Upstream
	// VMID is the Wasm VM's vm_id: Spillway's shared data lives in this namespace
	// (proxy-wasm-cpp-host shared_data.cc keys the store by vm_id), kept apart from other
	// Wasm plugins in the same Envoy.
	VMID = "spillway"
	// XDSCluster is the cluster of the control plane in an ECDS bootstrap.
	XDSCluster = "spillway_xds"
	// ModuleFetchCluster is the cluster a remote module is fetched through.
	ModuleFetchCluster = "spillway_wasm_fetch"
	// WasmRuntime is the runtime official Envoy builds carry.
	WasmRuntime = "envoy.wasm.runtime.v8"
)

// Defaults of Options.
const (
	DefaultListen = "127.0.0.1:10000"
	DefaultAdmin  = "127.0.0.1:9901"
	DefaultNodeID = "spillway"
	// DefaultCAFile is where Debian-based images, Envoy's official image among them, keep
	// the system's trusted CAs.
	DefaultCAFile = "/etc/ssl/certs/ca-certificates.crt"
	// DefaultModulePath is where the module sits in the documented deployment.
	DefaultModulePath = "/etc/envoy/spillway.wasm"
	// DefaultConnectTimeout bounds connecting to a provider (as hostsim serve's default).
	DefaultConnectTimeout = 5 * time.Second
)

// DefaultFailurePolicy is the plugin's failure_policy when Options set none: the one
// Spillway ships, internal/failurepolicy.Default (FAIL_RELOAD), which hostsim models too.
var DefaultFailurePolicy = wasmv3.FailurePolicy(wasmv3.FailurePolicy_value[failurepolicy.Default])

// Options say how the configuration is deployed: what the policy does not know.
type Options struct {
	// Module is where Envoy loads build/spillway.wasm from. Default: the local file
	// DefaultModulePath.
	Module Module
	// Upstreams map a provider cluster name to its URL, scheme://host[:port] (http or
	// https, no path). A cluster without one defaults to https://<authority> of the first
	// provider naming it; a cluster with neither is an error.
	Upstreams map[string]string
	// DefaultCluster receives the requests Spillway does not route (other paths such as
	// GET /v1/models): the cluster of the policy's first provider when empty, as hostsim
	// serve does.
	DefaultCluster string
	// Listen is the listener's address (default DefaultListen).
	Listen string
	// Admin is Envoy's admin address (default DefaultAdmin). Keep it on loopback: the
	// admin interface can stop the server.
	Admin string
	// NodeID is the bootstrap's node id (default DefaultNodeID); a control plane sees it.
	NodeID string
	// FailurePolicy is the plugin's failure_policy (default DefaultFailurePolicy;
	// UNSPECIFIED is refused: its meaning changed between releases).
	FailurePolicy wasmv3.FailurePolicy
	// CAFile is the PEM bundle TLS upstreams are verified against (default DefaultCAFile).
	CAFile string
	// ConnectTimeout bounds connecting to a provider (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// StatsTags turn Spillway's metric names into tagged stats (Envoy's stats_tags).
	StatsTags []StatsTag
	// EnvoyMinor is the Envoy release the configuration is for, 1.EnvoyMinor (flag
	// -envoy-version). The failover switches the policy leaves unset are chosen for it and
	// the ones it sets are checked against it (Policy.For: holdTries from 1.37, crossCluster
	// from 1.39). Default SupportedEnvoyMinor, the oldest supported release: a bootstrap for
	// it runs on every supported Envoy, and nothing a newer one allows is switched on
	// unasked (refresh_cluster_on_retry is a field 1.36–1.38 refuse, and a held try
	// released for a retry is undefined behaviour there).
	EnvoyMinor int
	// XDS, when set (host:port), makes the bootstrap take the filter's configuration from
	// a control plane over ECDS (see package envoy/xds) instead of inline. A policy that
	// fails over through the router (resilience.failover.via: router) is refused with it:
	// the upstream filter's configuration is inline and would keep the bootstrap's policy
	// while the control plane pushes new ones.
	XDS string
}

// Module is where Envoy loads the Wasm module from: a local file (Path), or a remote URL
// whose sha256 Envoy checks before it loads the module.
type Module struct {
	Path   string
	URL    string
	SHA256 string // hex; required with URL
}

// StatsTag is one of Envoy's stats_tags: where Regex matches a stat's name, its first
// capture group is cut out of the name and its second (or else its first) is the value of
// tag Name (Envoy source/common/stats/tag_extractor_impl.cc,
// TagExtractorStdRegexImpl::extractTag).
type StatsTag struct {
	Name  string
	Regex string
}

// upstream is one provider cluster's endpoint.
type upstream struct {
	cluster string
	tls     bool
	host    string // DNS name or IP literal, no brackets
	port    uint32
	ip      bool
}

// hostHeader is the Host a request to this endpoint carries: the host, and the port
// unless it is the scheme's default.
func (u upstream) hostHeader() string {
	if u.tls && u.port == 443 || !u.tls && u.port == 80 {
		return u.host
	}
	return net.JoinHostPort(u.host, strconv.FormatUint(uint64(u.port), 10))
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// withDefaults fills unset options and checks them.
func (o Options) withDefaults() (Options, error) {
	if o.Module == (Module{}) {
		o.Module.Path = DefaultModulePath
	}
	o.Listen = or(o.Listen, DefaultListen)
	o.Admin = or(o.Admin, DefaultAdmin)
	o.NodeID = or(o.NodeID, DefaultNodeID)
	o.CAFile = or(o.CAFile, DefaultCAFile)
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.EnvoyMinor == 0 {
		o.EnvoyMinor = SupportedEnvoyMinor
	}
	if o.FailurePolicy == wasmv3.FailurePolicy_UNSPECIFIED {
		o.FailurePolicy = DefaultFailurePolicy
	}
	var errs []error
	m := o.Module
	switch {
	case m.Path != "" && m.URL != "":
		errs = append(errs, errors.New("module: a local path or a URL, not both"))
	case m.URL != "":
		if _, err := parseURL(m.URL, true); err != nil {
			errs = append(errs, fmt.Errorf("module URL: %w", err))
		}
		if !hexSHA256.MatchString(strings.ToLower(m.SHA256)) {
			errs = append(errs, errors.New("module: a remote module needs its sha256 (64 hex digits): Envoy refuses to load remote code without it"))
		}
	case m.SHA256 != "":
		if _, err := hex.DecodeString(m.SHA256); err != nil || len(m.SHA256) != 64 {
			errs = append(errs, errors.New("module: sha256 must be 64 hex digits"))
		}
	}
	if o.EnvoyMinor < SupportedEnvoyMinor {
		errs = append(errs, fmt.Errorf("envoy release 1.%d is not supported (Envoy 1.%d or newer)", o.EnvoyMinor, SupportedEnvoyMinor))
	}
	if _, ok := wasmv3.FailurePolicy_name[int32(o.FailurePolicy)]; !ok {
		errs = append(errs, fmt.Errorf("unknown failure policy %d", o.FailurePolicy))
	}
	for name, addr := range map[string]string{"listen": o.Listen, "admin": o.Admin} {
		if _, _, err := splitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s address: %w", name, err))
		}
	}
	if o.XDS != "" {
		if _, _, err := splitHostPort(o.XDS); err != nil {
			errs = append(errs, fmt.Errorf("xds address: %w", err))
		}
	}
	if o.ConnectTimeout < time.Millisecond {
		errs = append(errs, errors.New("connect timeout must be at least 1ms"))
	}
	for i, t := range o.StatsTags {
		if err := checkStatsTag(t); err != nil {
			errs = append(errs, fmt.Errorf("stats tag %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("envoy: options: %w", errors.Join(errs...))
	}
	return o, nil
}

// checkStatsTag checks what a tag extractor needs: a name, and a regex with a capture group
// to cut out. The regex is compiled with Go's regexp (RE2 syntax); Envoy compiles it with
// std::regex, which accepts every RE2 pattern a stat name needs.
func checkStatsTag(t StatsTag) error {
	if t.Name == "" {
		return errors.New("tag name is required")
	}
	re, err := regexp.Compile(t.Regex)
	if err != nil {
		return fmt.Errorf("tag %q: %w", t.Name, err)
	}
	if re.NumSubexp() < 1 {
		return fmt.Errorf("tag %q: regex %q has no capture group (the first group is the part cut out of the stat name)", t.Name, t.Regex)
	}
	return nil
}

// upstreams resolves every provider cluster's endpoint, in the order providers name them.
func upstreams(p *Policy, o Options) ([]upstream, error) {
	var out []upstream
	var errs policies.Errors
	seen := make(map[string]bool)
	for i := range p.Resolved.Providers {
		pr := &p.Resolved.Providers[i]
		if seen[pr.Cluster] {
			continue
		}
		seen[pr.Cluster] = true
		path := "providers[" + strconv.Itoa(i) + "].cluster"
		if reserved(pr.Cluster) {
			errs = append(errs, policies.FieldError{Path: path, Message: "cluster name " + strconv.Quote(pr.Cluster) + " is reserved for Spillway's own clusters"})
			continue
		}
		raw, ok := o.Upstreams[pr.Cluster]
		if !ok {
			if pr.Authority == "" {
				errs = append(errs, policies.FieldError{Path: path, Message: "cluster " + strconv.Quote(pr.Cluster) +
					" has no upstream URL: give one (-cluster " + pr.Cluster + "=https://host) or set the provider's authority"})
				continue
			}
			raw = "https://" + pr.Authority
		}
		u, err := parseURL(raw, false)
		if err != nil {
			errs = append(errs, policies.FieldError{Path: path, Message: "cluster " + strconv.Quote(pr.Cluster) + ": " + err.Error()})
			continue
		}
		u.cluster = pr.Cluster
		out = append(out, u)
	}
	var unknown []string
	for name := range o.Upstreams {
		if !seen[name] {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	slices.Sort(unknown)
	var all []error
	if len(errs) > 0 {
		all = append(all, errs)
	}
	if len(unknown) > 0 {
		all = append(all, fmt.Errorf("upstream URL given for %s, which no provider names", strings.Join(unknown, ", ")))
	}
	return out, errors.Join(all...)
}

func reserved(cluster string) bool {
	return cluster == XDSCluster || cluster == ModuleFetchCluster || cluster == UnknownCluster
}

// parseURL reads scheme://host[:port]; allowPath admits a path (a module URL).
func parseURL(raw string, allowPath bool) (upstream, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return upstream{}, fmt.Errorf("invalid URL %q", raw)
	}
	var up upstream
	switch u.Scheme {
	case "https":
		up.tls, up.port = true, 443
	case "http":
		up.port = 80
	default:
		return upstream{}, fmt.Errorf("URL %q: scheme must be http or https", raw)
	}
	switch {
	case u.User != nil:
		return upstream{}, fmt.Errorf("URL %q: no user info (credentials belong in the policy's connections)", raw)
	case !allowPath && (u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != ""):
		return upstream{}, fmt.Errorf("URL %q: scheme, host and port only (Spillway forwards the client's path as is, and failover callouts use it too)", raw)
	case u.Hostname() == "":
		return upstream{}, fmt.Errorf("URL %q: host is required", raw)
	}
	up.host = u.Hostname()
	if port := u.Port(); port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return upstream{}, fmt.Errorf("URL %q: invalid port", raw)
		}
		up.port = uint32(n)
	}
	if _, err := netip.ParseAddr(up.host); err == nil {
		up.ip = true
	}
	return up, nil
}

// splitHostPort reads host:port with a numeric port.
func splitHostPort(addr string) (string, uint32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want host:port", addr)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%q: invalid port", addr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q: host is required (0.0.0.0 listens everywhere)", addr)
	}
	return host, uint32(n), nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
