package serve

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// Defaults of the serve flags.
const (
	DefaultWasm    = "build/spillway.wasm"
	DefaultListen  = "127.0.0.1:10000"
	DefaultWorkers = 2
	DefaultTimeout = 10 * time.Minute
	// DefaultConnectTimeout is Envoy's cluster connect_timeout default.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultBufferLimit is Envoy's per_connection_buffer_limit_bytes default (1 MiB), a
	// Config's when it sets none; the generated bootstrap raises it (see
	// envoylimits.ConnectionBufferLimit), and so does serve by default.
	DefaultBufferLimit = envoylimits.DefaultConnectionBufferLimit
	// MaxWorkers bounds -workers (each worker is a VM with its own Go heap).
	MaxWorkers = 64
	// MaxBufferLimit bounds -buffer-limit and MaxRequestBufferLimit -request-buffer-limit:
	// above what any policy derives (maxRequestBodyBytes is at most 256 MiB, plus
	// envoylimits.BufferHeadroom).
	MaxBufferLimit        = 512 << 20
	MaxRequestBufferLimit = 512 << 20
)

// FromPolicy, as Options.BufferLimit, Options.RequestBufferLimit or
// Options.StreamIdleTimeout (the default), takes the value from the policy as the generated
// Envoy bootstrap does (package policies/envoylimits): the listener's
// per_connection_buffer_limit_bytes, the virtual host's request_body_buffer_limit, and the
// connection manager's stream_idle_timeout and the routes' idle_timeout.
const FromPolicy = -1

// Cluster is an upstream cluster: a name the policy and the filter use, and the base URL
// requests for it are sent to.
type Cluster struct {
	Name string
	URL  string // scheme://host[:port], no path; "" for a cluster without endpoints
}

// EnvVar is one VM environment variable.
type EnvVar struct{ Key, Value string }

// Options are the settings of `hostsim serve` (and `hostsim run`), one field per flag.
type Options struct {
	// WasmPath is the proxy-wasm module to run (-wasm).
	WasmPath string
	// PolicyPath is the policy file, YAML or JSON (-policy); empty: the embedded demo policy.
	PolicyPath string
	// Listen is the front end's address (-listen); empty: no HTTP listener (hostsim run).
	Listen string
	// Clusters are the upstream clusters (-cluster, repeatable). None: the demo's fake-*
	// clusters are served by built-in fake providers.
	Clusters []Cluster
	// Workers is the number of worker VMs (-workers), like Envoy's --concurrency.
	Workers int
	// Env is the VM environment (-env KEY=VALUE, repeatable).
	Env []EnvVar
	// WASI is the WASI surface (-wasi).
	WASI hostsim.WASIMode
	// FailurePolicy is what happens to streams once a VM failed (-failure-policy); by
	// default the generated bootstrap's (hostsim.DefaultFailurePolicy, FAIL_RELOAD).
	FailurePolicy hostsim.FailurePolicy
	// AllowOnHeadersStopIteration models Envoy's PluginConfig.allow_on_headers_stop_iteration
	// (-allow-on-headers-stop-iteration, default true: the configuration Spillway ships);
	// false models a proxy without it.
	AllowOnHeadersStopIteration bool
	// BufferLimit is the connection buffer limit in bytes (-buffer-limit): Envoy's
	// per_connection_buffer_limit_bytes, where a stream's buffer limit starts. FromPolicy
	// (the default): the request limit below, the generated bootstrap's rule.
	BufferLimit int
	// RequestBufferLimit is what a stream may buffer, in bytes (-request-buffer-limit): the
	// route's request_body_buffer_limit, which only ever raises the connection's. FromPolicy
	// (the default): the policy's maxRequestBodyBytes plus 1 MiB, as the generated bootstrap
	// sets it.
	RequestBufferLimit int
	// RouteBufferLimitAtRouter models an Envoy without envoyproxy/envoy#42607 (1.36)
	// (-route-buffer-limit-at-router): the route's limit applies only once the request
	// headers reach the router, so a request the filter holds at its headers buffers under
	// the connection's limit. Default false: Envoy ≥ 1.37, which applies it when the route
	// is matched.
	RouteBufferLimitAtRouter bool
	// EnvoyMinor is the Envoy release serve runs the policy as the generated bootstrap for,
	// 1.EnvoyMinor (-envoy-version, as `spillway render envoy -envoy-version`): the failover
	// switches the policy leaves unset are chosen for it and the ones it sets are checked
	// against it (Policy.For; holdTries from 1.37, crossCluster from 1.39). Default
	// envoyrelease.Oldest (1.36), render envoy's default. It models nothing else of that
	// release: -route-buffer-limit-at-router is 1.36's buffer limit.
	EnvoyMinor int
	// StreamIdleTimeout ends a stream silent both ways this long (-stream-idle-timeout, 0:
	// off): the connection manager's stream_idle_timeout and the route's idle_timeout.
	// FromPolicy (the default): the policy's longest silence plus 30 s, as the generated
	// bootstrap sets both.
	StreamIdleTimeout time.Duration
	// Timeout answers 504 when nothing went to the client by then, and resets a stream
	// still running (-timeout). serve's own safety net: the generated bootstrap has no
	// such cap.
	Timeout time.Duration
	// ConnectTimeout bounds connecting to an upstream (-connect-timeout).
	ConnectTimeout time.Duration
	// RouteTimeout is the route timeout (-route-timeout, 0: off, as the generated
	// bootstrap's timeout: 0s).
	RouteTimeout time.Duration
	// IdleTimeout is the upstream's per-try idle timeout (-idle-timeout, 0: off, as in the
	// generated bootstrap): the retry policy's per_try_idle_timeout, an upstream timer.
	IdleTimeout time.Duration
	// Admin is the Envoy-like admin listener's address (-admin; "" for none).
	Admin string
	// CacheDir keeps compiled machine code across starts (-cache-dir; "" compiles on every
	// start), bounded by hostsim.DefaultCompilationCacheLimit. `make serve` uses
	// build/.hostsim-cache, which `make clean` removes.
	CacheDir string
	// Runtime, when set, compiles and runs the module (not a flag: tests share one).
	Runtime *hostsim.Runtime
}

// DefaultOptions returns the flags' defaults.
func DefaultOptions() Options {
	return Options{WasmPath: DefaultWasm, Listen: DefaultListen, Workers: DefaultWorkers, Timeout: DefaultTimeout,
		ConnectTimeout: DefaultConnectTimeout, BufferLimit: FromPolicy, RequestBufferLimit: FromPolicy,
		StreamIdleTimeout: FromPolicy, AllowOnHeadersStopIteration: true, FailurePolicy: hostsim.DefaultFailurePolicy,
		EnvoyMinor: envoyrelease.Oldest}
}

// RegisterFlags defines the flags shared by serve and run on fs, writing into o (whose
// current values are the defaults shown). -listen is serve's own: see RegisterListenFlag.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.WasmPath, "wasm", o.WasmPath, "proxy-wasm module to run")
	fs.StringVar(&o.PolicyPath, "policy", o.PolicyPath,
		"policy file, YAML or JSON (default: the embedded demo policy, served by built-in fake providers)")
	fs.Var((*clusterFlag)(&o.Clusters), "cluster",
		"upstream cluster `name=http://host:port` (repeatable); none: start built-in fakes for the policy's fake-* clusters")
	fs.Var((*workersFlag)(&o.Workers), "workers", fmt.Sprintf("worker VMs, like Envoy's --concurrency (1-%d)", MaxWorkers))
	fs.Var((*envFlag)(&o.Env), "env", "VM environment variable `KEY=VALUE` (repeatable); ${KEY} in the policy expands from it")
	fs.Var((*wasiFlag)(&o.WASI), "wasi", "WASI surface: envoy133 | envoy132 | head | wazero")
	fs.Var((*failureFlag)(&o.FailurePolicy), "failure-policy", "after a VM fails: fail-closed | fail-open | fail-reload")
	fs.BoolVar(&o.AllowOnHeadersStopIteration, "allow-on-headers-stop-iteration", o.AllowOnHeadersStopIteration,
		"model Envoy's allow_on_headers_stop_iteration (false: a headers Pause stops all iteration, as without the option)")
	fs.Var((*bufferLimitFlag)(&o.BufferLimit), "buffer-limit",
		"connection buffer limit in `bytes` (Envoy's per_connection_buffer_limit_bytes); policy: the request limit (-request-buffer-limit), as the generated bootstrap")
	fs.Var((*bufferLimitFlag)(&o.RequestBufferLimit), "request-buffer-limit",
		"request body buffer limit in `bytes` (the route's request_body_buffer_limit); policy: maxRequestBodyBytes + 1 MiB, as the generated bootstrap")
	fs.Var((*releaseFlag)(&o.EnvoyMinor), "envoy-version",
		"the Envoy `release` (1.N) to run the policy as the generated bootstrap for: failover's holdTries (1.37) and crossCluster (1.39) on where it has them and the policy leaves them unset")
	fs.BoolVar(&o.RouteBufferLimitAtRouter, "route-buffer-limit-at-router", o.RouteBufferLimitAtRouter,
		"model Envoy 1.36, before envoyproxy/envoy#42607: the route's buffer limit applies only once the request headers reach the router")
	fs.Var((*policyTimeoutFlag)(&o.StreamIdleTimeout), "stream-idle-timeout",
		"end a stream silent both ways this long, 0 for none (stream_idle_timeout, route idle_timeout); policy: derived as the generated bootstrap")
	fs.Var((*timeoutFlag)(&o.Timeout), "timeout", "answer 504 when nothing reached the client by then (and reset a stream still running)")
	fs.Var((*timeoutFlag)(&o.ConnectTimeout), "connect-timeout", "upstream connect timeout (Envoy's cluster connect_timeout)")
	fs.Var((*optionalTimeoutFlag)(&o.RouteTimeout), "route-timeout", "route timeout, 0 for none (Envoy's route timeout; the generated bootstrap has none)")
	fs.Var((*optionalTimeoutFlag)(&o.IdleTimeout), "idle-timeout", "upstream idle timeout, 0 for none (Envoy's per_try_idle_timeout; the generated bootstrap has none)")
	fs.StringVar(&o.CacheDir, "cache-dir", o.CacheDir, "keep compiled machine code in this `directory` (bounded); none: compile on every start")
}

// RegisterListenFlag defines -listen and -admin on fs.
func (o *Options) RegisterListenFlag(fs *flag.FlagSet) {
	fs.Var((*listenFlag)(&o.Listen), "listen", "front end address `host:port` (HTTP/1.1 and h2c)")
	fs.Var((*listenFlag)(&o.Admin), "admin", "Envoy-like admin listener `host:port` (/stats/prometheus, /stats, /ready); none by default")
}

// clusterNameRE is what a cluster name may look like (Envoy allows more; the policy's
// cluster names are plain identifiers).
var clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// envKeyRE is what an environment variable name may look like.
var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseCluster reads "name=http://host:port", or "name=" for a cluster without endpoints
// (the router answers its requests 503 "no healthy upstream").
func ParseCluster(s string) (Cluster, error) {
	name, raw, ok := strings.Cut(s, "=")
	if !ok {
		return Cluster{}, errors.New("want name=http://host:port (or name= for a cluster without endpoints)")
	}
	if !clusterNameRE.MatchString(name) {
		return Cluster{}, fmt.Errorf("cluster name %q: use letters, digits, '.', '_', ':' and '-'", name)
	}
	if raw == "" {
		return Cluster{Name: name}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Cluster{}, fmt.Errorf("cluster %s: bad URL: %w", name, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return Cluster{}, fmt.Errorf("cluster %s: URL %q must start with http:// or https://", name, raw)
	case u.Host == "" || u.Hostname() == "":
		return Cluster{}, fmt.Errorf("cluster %s: URL %q has no host", name, raw)
	case u.User != nil:
		return Cluster{}, fmt.Errorf("cluster %s: URL must not carry credentials (put them in the policy's connection credentials)", name)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return Cluster{}, fmt.Errorf("cluster %s: URL %q must be scheme://host:port only (the request's path is kept as is)", name, raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return Cluster{}, fmt.Errorf("cluster %s: bad port %q", name, p)
		}
	}
	return Cluster{Name: name, URL: u.Scheme + "://" + u.Host}, nil
}

// ParseEnv reads "KEY=VALUE".
func ParseEnv(s string) (EnvVar, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return EnvVar{}, errors.New("want KEY=VALUE")
	}
	if !envKeyRE.MatchString(k) {
		return EnvVar{}, fmt.Errorf("bad variable name %q: use letters, digits and '_', not starting with a digit", k)
	}
	return EnvVar{Key: k, Value: v}, nil
}

// wasiNames maps -wasi values to modes.
var wasiNames = map[string]hostsim.WASIMode{
	"envoy133": hostsim.WASIEnvoy133,
	"envoy132": hostsim.WASIEnvoy132,
	"head":     hostsim.WASICppHostHead,
	"wazero":   hostsim.WASIWazero,
}

// ParseWASI reads a -wasi value.
func ParseWASI(s string) (hostsim.WASIMode, error) {
	if m, ok := wasiNames[s]; ok {
		return m, nil
	}
	return 0, errors.New("want envoy133, envoy132, head or wazero")
}

// WASIName is the -wasi value of a mode.
func WASIName(m hostsim.WASIMode) string {
	for k, v := range wasiNames {
		if v == m {
			return k
		}
	}
	return m.String()
}

// failureNames maps -failure-policy values to policies.
var failureNames = map[string]hostsim.FailurePolicy{
	"fail-closed": hostsim.FailClosed,
	"fail-open":   hostsim.FailOpen,
	"fail-reload": hostsim.FailReload,
}

// ParseFailurePolicy reads a -failure-policy value.
func ParseFailurePolicy(s string) (hostsim.FailurePolicy, error) {
	if p, ok := failureNames[s]; ok {
		return p, nil
	}
	return 0, errors.New("want fail-closed, fail-open or fail-reload")
}

// FailurePolicyName is the -failure-policy value of a policy.
func FailurePolicyName(p hostsim.FailurePolicy) string {
	for k, v := range failureNames {
		if v == p {
			return k
		}
	}
	return p.String()
}

// The flag.Value types: each Set validates, so the flag package reports
// `invalid value "x" for flag -name: why` and the usage.

type clusterFlag []Cluster

func (f *clusterFlag) String() string {
	if f == nil {
		return ""
	}
	parts := make([]string, len(*f))
	for i, c := range *f {
		parts[i] = c.Name + "=" + c.URL
	}
	return strings.Join(parts, ",")
}

func (f *clusterFlag) Set(s string) error {
	c, err := ParseCluster(s)
	if err != nil {
		return err
	}
	for _, have := range *f {
		if have.Name == c.Name {
			return fmt.Errorf("cluster %s given twice", c.Name)
		}
	}
	*f = append(*f, c)
	return nil
}

// releaseFlag is Options.EnvoyMinor, given as 1.N or 1.N.P.
type releaseFlag int

func (f *releaseFlag) String() string {
	if f == nil || *f == 0 {
		return ""
	}
	return "1." + strconv.Itoa(int(*f))
}

func (f *releaseFlag) Set(s string) error {
	n, err := envoyrelease.ParseMinor(s, envoyrelease.Oldest)
	if err != nil {
		return err
	}
	*f = releaseFlag(n)
	return nil
}

type envFlag []EnvVar

func (f *envFlag) String() string {
	if f == nil {
		return ""
	}
	keys := make([]string, len(*f))
	for i, e := range *f {
		keys[i] = e.Key + "=…" // values may be secrets: never echo them
	}
	return strings.Join(keys, ",")
}

func (f *envFlag) Set(s string) error {
	e, err := ParseEnv(s)
	if err != nil {
		return err
	}
	for _, have := range *f {
		if have.Key == e.Key {
			return fmt.Errorf("variable %s given twice", e.Key)
		}
	}
	*f = append(*f, e)
	return nil
}

type workersFlag int

func (f *workersFlag) String() string {
	if f == nil {
		return ""
	}
	return strconv.Itoa(int(*f))
}

func (f *workersFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxWorkers {
		return fmt.Errorf("want a whole number of VMs from 1 to %d", MaxWorkers)
	}
	*f = workersFlag(n)
	return nil
}

type wasiFlag hostsim.WASIMode

func (f *wasiFlag) String() string {
	if f == nil {
		return ""
	}
	return WASIName(hostsim.WASIMode(*f))
}

func (f *wasiFlag) Set(s string) error {
	m, err := ParseWASI(s)
	*f = wasiFlag(m)
	return err
}

type failureFlag hostsim.FailurePolicy

func (f *failureFlag) String() string {
	if f == nil {
		return ""
	}
	return FailurePolicyName(hostsim.FailurePolicy(*f))
}

func (f *failureFlag) Set(s string) error {
	p, err := ParseFailurePolicy(s)
	*f = failureFlag(p)
	return err
}

type timeoutFlag time.Duration

func (f *timeoutFlag) String() string {
	if f == nil {
		return ""
	}
	return time.Duration(*f).String()
}

func (f *timeoutFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("want a positive duration such as 30s or 10m")
	}
	*f = timeoutFlag(d)
	return nil
}

type optionalTimeoutFlag time.Duration

func (f *optionalTimeoutFlag) String() string {
	if f == nil {
		return ""
	}
	return time.Duration(*f).String()
}

func (f *optionalTimeoutFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return errors.New("want 0 (none) or a positive duration such as 30s or 5m")
	}
	*f = optionalTimeoutFlag(d)
	return nil
}

// policyKeyword is what -buffer-limit, -request-buffer-limit and -stream-idle-timeout take
// (and show) for FromPolicy.
const policyKeyword = "policy"

type bufferLimitFlag int

func (f *bufferLimitFlag) String() string {
	if f == nil {
		return ""
	}
	if *f == FromPolicy {
		return policyKeyword
	}
	return strconv.Itoa(int(*f))
}

func (f *bufferLimitFlag) Set(s string) error {
	if s == policyKeyword {
		*f = FromPolicy
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1024 || n > MaxBufferLimit {
		return fmt.Errorf("want %s or a number of bytes from 1024 to %d", policyKeyword, MaxBufferLimit)
	}
	*f = bufferLimitFlag(n)
	return nil
}

type policyTimeoutFlag time.Duration

func (f *policyTimeoutFlag) String() string {
	if f == nil {
		return ""
	}
	if *f == FromPolicy {
		return policyKeyword
	}
	return time.Duration(*f).String()
}

func (f *policyTimeoutFlag) Set(s string) error {
	if s == policyKeyword {
		*f = FromPolicy
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want %s, 0 (none) or a positive duration such as 30s or 5m", policyKeyword)
	}
	*f = policyTimeoutFlag(d)
	return nil
}

type listenFlag string

func (f *listenFlag) String() string {
	if f == nil {
		return ""
	}
	return string(*f)
}

func (f *listenFlag) Set(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port, e.g. 127.0.0.1:10000 or :8080")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return fmt.Errorf("host %q is not an IP address (or localhost)", host)
	}
	*f = listenFlag(s)
	return nil
}
