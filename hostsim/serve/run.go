package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// ShutdownGrace is how long a graceful shutdown waits for requests in flight.
const ShutdownGrace = 10 * time.Second

// Instance is a started serve: the policy, the fakes, the Server and its listeners.
type Instance struct {
	// Server runs requests through the filter.
	Server *Server
	// Policy is the policy the plugin runs.
	Policy *Policy
	// Clusters are the upstream clusters, sorted by name.
	Clusters []Cluster
	// Fakes are the built-in fake providers by cluster name (none when -cluster was given).
	Fakes map[string]*fakeprovider.Server
	// Addr is the address the front end listens on ("" without a listener); AdminAddr the
	// admin listener's ("" without one).
	Addr, AdminAddr string
	// Limits are the buffer limits and timeouts the Server models.
	Limits Limits

	opts   Options
	http   *http.Server
	admin  *http.Server
	ready  atomic.Bool
	served chan error
}

// Limits are the buffer limits and timeouts of the Envoy serve models: the flags', or, by
// default, the generated bootstrap's (package envoy), derived from the policy by package
// policies/envoylimits.
type Limits struct {
	// BufferLimit is the connection buffer limit (per_connection_buffer_limit_bytes): where
	// a stream's buffer limit starts.
	BufferLimit int
	// RequestBufferLimit is what a stream may buffer once the route's limit applies
	// (request_body_buffer_limit, never below BufferLimit).
	RequestBufferLimit int
	// StreamIdleTimeout ends a stream silent both ways this long (stream_idle_timeout and
	// the routes' idle_timeout; 0: none).
	StreamIdleTimeout time.Duration
	// RouteTimeout and IdleTimeout are the route timeout and the upstream's per-try idle
	// timeout (0: none).
	RouteTimeout, IdleTimeout time.Duration
	// BufferFromPolicy, RequestBufferFromPolicy and StreamIdleFromPolicy say the value was
	// derived from the policy rather than given by a flag.
	BufferFromPolicy, RequestBufferFromPolicy, StreamIdleFromPolicy bool
	// Router is the router failover the policy asks for (failover.via: router): the
	// upstream filter, the retry policy and the clusters' max_retries of the generated
	// bootstrap; nil for callout. No flag changes it: the policy is the switch.
	Router *RouterFailover
}

// limitsFor resolves the options' limits against the policy: FromPolicy takes the
// generated bootstrap's value.
func limitsFor(o Options, p *Policy) Limits {
	l := Limits{BufferLimit: o.BufferLimit, RequestBufferLimit: o.RequestBufferLimit,
		StreamIdleTimeout: o.StreamIdleTimeout, RouteTimeout: o.RouteTimeout, IdleTimeout: o.IdleTimeout}
	if l.RequestBufferLimit == FromPolicy {
		l.RequestBufferLimit, l.RequestBufferFromPolicy = int(envoylimits.RequestBodyBufferLimit(p.Resolved)), true
	}
	if l.BufferLimit == FromPolicy {
		// The bootstrap's rule: the listener's limit is the request limit.
		l.BufferLimit, l.BufferFromPolicy = l.RequestBufferLimit, true
		if l.RequestBufferFromPolicy {
			l.BufferLimit = int(envoylimits.ConnectionBufferLimit(p.Resolved))
		}
	}
	if l.StreamIdleTimeout == FromPolicy {
		l.StreamIdleTimeout, l.StreamIdleFromPolicy = envoylimits.IdleTimeout(p.Resolved), true
	}
	// Envoy only ever raises a stream's buffer limit.
	l.RequestBufferLimit = max(l.RequestBufferLimit, l.BufferLimit)
	l.Router = routerFailoverFor(p.Resolved)
	return l
}

// Start loads and validates the policy, starts the built-in fakes if the policy wants
// them, loads the module into hostsim, starts the plugin and, when opts.Listen is set,
// listens and serves (HTTP/1.1 and h2c), with the admin listener when opts.Admin is set.
// Guest logs and serve's errors go to logs, access lines to access. A bad policy is a
// *PolicyError and is reported before the module is loaded.
func Start(opts Options, access, logs io.Writer) (_ *Instance, err error) {
	policy, err := LoadPolicy(opts.PolicyPath, opts.Env)
	if err != nil {
		return nil, err
	}
	if policy, err = policy.For(opts.EnvoyMinor); err != nil {
		return nil, err
	}
	inst := &Instance{Policy: policy, opts: opts, Fakes: map[string]*fakeprovider.Server{},
		Limits: limitsFor(opts, policy)}
	defer func() {
		if err != nil {
			inst.closeFakes()
		}
	}()
	if err := inst.setUpClusters(); err != nil {
		return nil, err
	}
	wasm, err := os.ReadFile(opts.WasmPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("serve: module %s not found: run make build, or give -wasm: %w", opts.WasmPath, err)
		}
		return nil, fmt.Errorf("serve: read the module: %w", err)
	}
	srv, err := New(Config{
		Wasm: wasm, PluginConfig: policy.JSON, Clusters: inst.Clusters, DefaultCluster: policy.DefaultCluster(),
		RouteClusters: policy.Clusters(), Workers: opts.Workers, Env: opts.Env, WASI: opts.WASI,
		FailurePolicy: opts.FailurePolicy, WithoutHeadersStopIteration: !opts.AllowOnHeadersStopIteration,
		BufferLimit: inst.Limits.BufferLimit, RequestBufferLimit: inst.Limits.RequestBufferLimit,
		RouteBufferLimitAtRouter: opts.RouteBufferLimitAtRouter,
		StreamIdleTimeout:        inst.Limits.StreamIdleTimeout, RouterFailover: inst.Limits.Router,
		Timeout: opts.Timeout, ConnectTimeout: opts.ConnectTimeout,
		RouteTimeout: inst.Limits.RouteTimeout, IdleTimeout: inst.Limits.IdleTimeout,
		AccessLog: access, GuestLog: logs, Runtime: opts.Runtime, CacheDir: opts.CacheDir,
	})
	if err != nil {
		return nil, err
	}
	inst.Server = srv
	if opts.Listen == "" {
		return inst, nil
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("serve: listen: %w", err)
	}
	var adminLn net.Listener
	if opts.Admin != "" {
		if adminLn, err = net.Listen("tcp", opts.Admin); err != nil {
			_ = ln.Close()
			_ = srv.Close()
			return nil, fmt.Errorf("serve: admin listener: %w", err)
		}
		inst.AdminAddr = adminLn.Addr().String()
	}
	inst.Addr = ln.Addr().String()
	inst.http = &http.Server{Handler: srv, Protocols: frontEndProtocols(), ReadHeaderTimeout: 30 * time.Second,
		ConnContext: withClientConn}
	inst.served = make(chan error, 2)
	inst.ready.Store(true)
	go func() { inst.served <- inst.http.Serve(clientListener{ln}) }()
	if adminLn != nil {
		inst.admin = &http.Server{Handler: &admin{host: srv.Host(), ready: &inst.ready}, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := inst.admin.Serve(adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				inst.served <- fmt.Errorf("admin: %w", err)
			}
		}()
	}
	return inst, nil
}

// frontEndProtocols are HTTP/1.1 and h2c (HTTP/2 without TLS, with prior knowledge), the
// standard library's own (golang.org/x/net/http2/h2c is deprecated in its favour).
func frontEndProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// setUpClusters decides the upstream clusters: the -cluster flags, or built-in fakes for
// the policy's fake-* clusters when none was given. Every cluster the policy uses must be
// defined.
func (inst *Instance) setUpClusters() error {
	known := map[string]bool{}
	fakes := len(inst.opts.Clusters) == 0
	if fakes {
		for _, name := range inst.Policy.Clusters() {
			kind, ok := inst.Policy.fakeKindFor(name)
			if !ok {
				continue
			}
			p, err := fakeprovider.New(kind, name)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			fs, err := fakeprovider.Start(p, "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("serve: start the built-in fake for %s: %w", name, err)
			}
			inst.Fakes[name] = fs
			inst.Clusters = append(inst.Clusters, Cluster{Name: name, URL: fs.URL})
			known[name] = true
		}
	} else {
		inst.Clusters = append(inst.Clusters, inst.opts.Clusters...)
		for _, c := range inst.Clusters {
			known[c.Name] = true
		}
	}
	sort.Slice(inst.Clusters, func(i, j int) bool { return inst.Clusters[i].Name < inst.Clusters[j].Name })
	return inst.Policy.missingClusters(known, fakes)
}

func (inst *Instance) closeFakes() {
	for _, f := range inst.Fakes {
		_ = f.Close()
	}
}

// URL is the front end's base URL ("" without a listener).
func (inst *Instance) URL() string {
	if inst.Addr == "" {
		return ""
	}
	return "http://" + inst.Addr
}

// Banner describes the running instance: where it listens, the clusters, the VMs, every
// policy warning and how to try it.
func (inst *Instance) Banner() string {
	var b strings.Builder
	o := inst.opts
	fmt.Fprintf(&b, "hostsim serve: %s on %s (HTTP/1.1 and h2c)\n", o.WasmPath, inst.URL())
	fmt.Fprintf(&b, "  policy:    %s (%d providers, %d routes)\n", inst.Policy.Source,
		len(inst.Policy.Parsed.Providers), len(inst.Policy.Parsed.Routes))
	for _, w := range inst.Policy.Parsed.Warnings {
		fmt.Fprintf(&b, "  warning:   %s\n", w.Error())
	}
	width := 0
	for _, c := range inst.Clusters {
		width = max(width, len(c.Name))
	}
	for i, c := range inst.Clusters {
		label := "clusters:"
		if i > 0 {
			label = ""
		}
		target := c.URL
		if target == "" {
			target = "(no endpoints)"
		}
		note := ""
		if f, ok := inst.Fakes[c.Name]; ok {
			note = fmt.Sprintf("  (built-in fake %s provider)", f.Kind())
		}
		if c.Name == inst.Policy.DefaultCluster() {
			note += "  (default)"
		}
		fmt.Fprintf(&b, "  %-10s %-*s -> %s%s\n", label, width, c.Name, target, note)
	}
	fmt.Fprintf(&b, "  routing:   the route takes the cluster Spillway names in filter state %s (no client header "+
		"names one; %s is removed); unrouted requests go to %s\n", routerretry.TargetFilterStateKey, HeaderCluster,
		inst.Policy.DefaultCluster())
	if len(inst.Fakes) > 0 {
		b.WriteString("  fakes:     misbehave on x-fake-* request headers (hostsim/cmd/hostsim/README.md)\n")
	}
	if a := inst.Policy.Resolved.Admin; a.Enabled {
		// Never the token itself: the policy may hold a real one.
		fmt.Fprintf(&b, "  admin API: %s%s (Authorization: Bearer <the policy's admin.token>; README.md, \"Admin API\")\n",
			inst.URL(), a.PathPrefix)
	}
	stop := "on"
	if !o.AllowOnHeadersStopIteration {
		stop = "off (a headers Pause stops all iteration)"
	}
	fmt.Fprintf(&b, "  workers:   %d VMs, WASI %s, %s, allow_on_headers_stop_iteration %s\n", o.Workers,
		WASIName(o.WASI), FailurePolicyName(o.FailurePolicy), stop)
	l := inst.Limits
	idleFrom, bufferFrom, connFrom := "flag", "flag", "flag"
	if l.StreamIdleFromPolicy {
		idleFrom = "the policy's longest silence + 30s, as the generated bootstrap"
	}
	if l.RequestBufferFromPolicy {
		bufferFrom = "maxRequestBodyBytes + 1 MiB, as the generated bootstrap"
	}
	if l.BufferFromPolicy {
		connFrom = "the request limit, as the generated bootstrap"
	}
	applied := "when the route is matched (Envoy ≥ 1.37)"
	if o.RouteBufferLimitAtRouter {
		applied = "in the router (Envoy 1.36, before envoyproxy/envoy#42607)"
	}
	fmt.Fprintf(&b, "  timeouts:  stream idle %s (%s), route %s, upstream idle %s, connect %v, overall %v\n",
		durationOrNone(l.StreamIdleTimeout), idleFrom, durationOrNone(l.RouteTimeout), durationOrNone(l.IdleTimeout),
		o.ConnectTimeout, o.Timeout)
	fmt.Fprintf(&b, "  buffers:   route %d bytes (%s), applied %s; connection %d bytes (%s)\n",
		l.RequestBufferLimit, bufferFrom, applied, l.BufferLimit, connFrom)
	fmt.Fprintf(&b, "  failover:  as the generated bootstrap for Envoy 1.%d (-envoy-version), %s\n", max(o.EnvoyMinor, envoyrelease.Oldest),
		envoyrelease.Streams(inst.Policy.Resolved.Failover))
	if r := l.Router; r != nil {
		fmt.Fprintf(&b, "             upstream filter %s, retry on %s, num_retries %d, back-off %v–%v, retry buffer %d bytes, "+
			"max_retries %d\n", rootid.Upstream, routerretry.MarkerHeader, *r.Retry.NumRetries, r.Retry.BaseInterval,
			r.Retry.MaxInterval, *r.Retry.BufferLimit, r.MaxRetries)
		if r.Retry.RefreshClusterOnRetry {
			fmt.Fprintf(&b, "             retries to any provider (failover.crossCluster): the route's cluster refreshed "+
				"before each retry (Envoy >= 1.39)\n")
		}
	}
	if inst.AdminAddr != "" {
		fmt.Fprintf(&b, "  admin:     http://%s (/stats/prometheus, /stats, /ready)\n", inst.AdminAddr)
	}
	model := "gpt-4o"
	if rs := inst.Policy.Parsed.Routes; len(rs) > 0 && !strings.ContainsAny(rs[0].Model, "*?[") {
		model = rs[0].Model
	}
	fmt.Fprintf(&b, "try it:\n  curl -si %s/v1/chat/completions -H 'content-type: application/json' \\\n"+
		"    -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n", inst.URL(), model)
	fmt.Fprintf(&b, "  curl -N %s/v1/chat/completions -H 'content-type: application/json' \\\n"+
		"    -d '{\"model\":\"%s\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n", inst.URL(), model)
	return b.String()
}

func durationOrNone(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

// Shutdown stops accepting requests (the admin's /ready turns 503), waits for those in
// flight (until ctx is done), then shuts the plugin down and stops the fakes.
func (inst *Instance) Shutdown(ctx context.Context) error {
	var errs []error
	inst.ready.Store(false)
	if inst.http != nil {
		if err := inst.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("serve: shutdown: %w", err))
			_ = inst.http.Close()
		}
	}
	if inst.admin != nil {
		_ = inst.admin.Close()
	}
	if err := inst.Server.Close(); err != nil {
		errs = append(errs, err)
	}
	inst.closeFakes()
	return errors.Join(errs...)
}

// Run starts serve with opts, prints the banner to access, and serves until ctx is done
// (SIGINT/SIGTERM in the command), then shuts down gracefully.
func Run(ctx context.Context, opts Options, access, logs io.Writer) error {
	if opts.Listen == "" {
		return errors.New("serve: no listen address")
	}
	inst, err := Start(opts, access, logs)
	if err != nil {
		return err
	}
	fmt.Fprint(access, inst.Banner())
	var serveErr error
	select {
	case <-ctx.Done():
		fmt.Fprintln(access, "hostsim serve: shutting down")
	case serveErr = <-inst.served:
		serveErr = fmt.Errorf("serve: %w", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	return errors.Join(serveErr, inst.Shutdown(sctx))
}
