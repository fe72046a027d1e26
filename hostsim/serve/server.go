// Package serve is `hostsim serve`'s server: an HTTP/1.1 and h2c (prior knowledge) front end
// that streams each request through a proxy-wasm module in hostsim's worker VMs on a real
// clock, chunk by chunk as Envoy's filter manager does, to the upstream cluster the filter
// chose, and streams the answer back the same way (an SSE stream reaches the client event by
// event).
//
// Routing follows the generated bootstrap's route (package envoy): the matcher cluster
// specifier on the filter state the filter names the chosen cluster in
// (routerretry.TargetFilterStateKey), each of Config.Clusters to itself, anything else to
// Config.DefaultCluster (the policy's first provider's), as hostsim's route model resolves
// it (hostsim.WithRouteCluster: matched before the filter runs, again at the router once
// the filter cleared the route cache). No request header names a cluster, so a request the
// filter never saw (a VM failed under FAIL_OPEN) goes to the default cluster whatever it
// carries; the route removes a client's HeaderCluster before forwarding. A request Spillway
// does not route goes to the default cluster, as the bootstrap's. The router's own replies
// are Envoy's, with its
// response flags and code details, and pass the filter's response path: an unknown cluster
// is 503 with an empty body (NC, cluster_not_found), a cluster without endpoints 503 "no
// healthy upstream" (UH), an upstream that cannot be reached 503 "upstream connect error or
// disconnect/reset before headers. reset reason: ..." (UF), the connect, route and idle
// timeouts 503 or 504 (UF, UT), the connection manager's stream idle timeout 408 or 504
// "stream timeout" (SI); an upstream reset once the response went downstream resets the
// client's stream. A client that goes away resets the stream (DC for a closed
// connection, DR for an HTTP/2 stream reset) and cancels the upstream call.
//
// Start models, unless its Options say otherwise, the Envoy that the bootstrap generated
// from the same policy describes: the connection and request body buffer limits and the
// stream idle timeout that policies/envoylimits derives from the policy, no route or
// per-try idle timeout, and for a policy that fails over through the router
// (resilience.failover.via: router) the upstream filter, retry policy and max_retries the
// bootstrap writes (RouterFailover). A Server built with New takes Config's values as they
// are.
package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/policies"
)

// Headers serve reads or writes.
const (
	// HeaderCluster is the request header the route removes before forwarding, as the
	// generated bootstrap's request_headers_to_remove does (envoy.ClientClusterHeader): the
	// header a policy routing by header names the cluster in, never a client's to send on.
	HeaderCluster = policies.RoutingClusterHeader
	// HeaderRequestID is set on every request, as Envoy does, and forwarded upstream.
	HeaderRequestID = "x-request-id"
)

// ResetTimeout is the reset details of a stream serve gave up on at its Timeout (it
// answers 504 itself when nothing went to the client yet).
const ResetTimeout = "hostsim_timeout"

// MaxRequestBytes bounds the request body `hostsim run` reads from -d; serve itself streams
// request bodies without a size limit, as Envoy does when no filter buffers them.
const MaxRequestBytes = 256 << 20

// earlyEndGrace is how long a stream that ended before its request body was read waits for
// the body pump to stop on its own, which keeps the connection reusable.
const earlyEndGrace = 200 * time.Millisecond

// readChunk is how much of a request or response body serve reads at a time (one body
// callback at most).
const readChunk = 64 << 10

// accessLogHeaders are the response headers the access log shows, in order.
var accessLogHeaders = [...]struct{ header, label string }{
	{"x-spillway-provider", "provider"},
	{"x-spillway-connection", "connection"},
	{"x-spillway-model", "model"},
	{"x-spillway-attempts", "attempts"},
}

// hopByHop are the connection-level headers a proxy never forwards (RFC 9110 §7.6.1).
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// Config configures a Server.
type Config struct {
	// Wasm is the proxy-wasm module.
	Wasm []byte
	// PluginConfig is the plugin configuration, passed to the module as is.
	PluginConfig []byte
	// Clusters are the upstream clusters; the filter's callouts may only use these names.
	Clusters []Cluster
	// DefaultCluster takes requests the filter did not name a cluster for (the route's
	// on_no_match).
	DefaultCluster string
	// RouteClusters are the cluster names the route's matcher maps to themselves: the
	// policy's provider clusters, as the bootstrap's matcher maps them (a name no cluster
	// has is the router's 503 NC). Nil: the names of Clusters.
	RouteClusters []string
	// Workers is the number of worker VMs (default 1).
	Workers int
	// Env is the VM environment.
	Env []EnvVar
	// WASI and FailurePolicy are passed to hostsim as they are: the zero FailurePolicy is
	// FAIL_CLOSED, Envoy's for an unset failure_policy; Start passes the generated
	// bootstrap's (hostsim.DefaultFailurePolicy) unless -failure-policy says otherwise.
	WASI          hostsim.WASIMode
	FailurePolicy hostsim.FailurePolicy
	// WithoutHeadersStopIteration models a proxy without allow_on_headers_stop_iteration
	// (a headers Pause stops all iteration); the zero value models the option on.
	WithoutHeadersStopIteration bool
	// BufferLimit is the connection buffer limit, where a stream's starts (default 1 MiB,
	// Envoy's).
	BufferLimit int
	// RequestBufferLimit raises the stream's buffer limit, the route's
	// request_body_buffer_limit (0: the connection's).
	RequestBufferLimit int
	// RouteBufferLimitAtRouter models Envoy before envoyproxy/envoy#42607: the route's
	// limit applies once the request headers reach the router, not when the route is
	// matched (hostsim.WithRouteBufferLimitAtRouter).
	RouteBufferLimitAtRouter bool
	// StreamIdleTimeout is the connection manager's stream idle timeout (0: off).
	StreamIdleTimeout time.Duration
	// RouterFailover, when set, runs the module as every cluster's upstream HTTP filter too
	// and retries as the generated bootstrap's routed route does (failover.via: router);
	// nil: failover by callout, no upstream filter, no retry policy.
	RouterFailover *RouterFailover
	// Timeout answers 504 when nothing went to the client by then, and resets a stream still
	// running (default DefaultTimeout).
	Timeout time.Duration
	// ConnectTimeout bounds connecting to an upstream (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// RouteTimeout and IdleTimeout are the route timeout and the upstream idle timeout
	// (0: off).
	RouteTimeout, IdleTimeout time.Duration
	// AccessLog gets one line per request; GuestLog gets the guest's log lines with their
	// level and VM, and serve's own errors. Nil discards.
	AccessLog, GuestLog io.Writer
	// Runtime compiles and runs the module; nil: a Runtime of the Server's own, keeping
	// compiled code in CacheDir when it is set.
	Runtime *hostsim.Runtime
	// CacheDir is the compilation cache of the Server's own Runtime ("" none).
	CacheDir string
}

// Server runs requests through the filter. It is an http.Handler.
type Server struct {
	cfg       Config
	host      *hostsim.Host
	rt        *hostsim.Runtime // owned, closed with the Server
	clusters  map[string]string
	transport *http.Transport
	access    *log.Logger
	guest     io.Writer

	rr   atomic.Uint64
	load []atomic.Int64 // requests in flight per worker
}

// authorityKey carries the downstream :authority in the exchange's context to the
// upstream call (for auto_host_rewrite).
type authorityKey struct{}

// syncWriter serializes writes from concurrent VMs and handlers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// New loads the module into a hostsim Host on a real clock, starts the plugin in every VM,
// and returns a Server ready to handle requests. A plugin that refuses to start is an
// error carrying the guest's critical log.
func New(cfg Config) (*Server, error) {
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.BufferLimit <= 0 {
		cfg.BufferLimit = DefaultBufferLimit
	}
	if cfg.AccessLog == nil {
		cfg.AccessLog = io.Discard
	}
	if cfg.GuestLog == nil {
		cfg.GuestLog = io.Discard
	}
	s := &Server{cfg: cfg, clusters: map[string]string{},
		access:    log.New(&syncWriter{w: cfg.AccessLog}, "", log.LstdFlags|log.Lmicroseconds),
		guest:     &syncWriter{w: cfg.GuestLog},
		load:      make([]atomic.Int64, cfg.Workers),
		transport: newTransport(cfg.ConnectTimeout)}
	names := make([]string, 0, len(cfg.Clusters))
	for _, c := range cfg.Clusters {
		s.clusters[c.Name] = c.URL
		names = append(names, c.Name)
	}
	rt := cfg.Runtime
	if rt == nil {
		var err error
		if rt, err = newRuntime(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		s.rt = rt
	}
	opts := []hostsim.Option{
		hostsim.WithRuntime(rt),
		hostsim.WithRealClock(),
		hostsim.WithWorkers(cfg.Workers),
		hostsim.WithWASI(cfg.WASI),
		hostsim.WithFailurePolicy(cfg.FailurePolicy),
		hostsim.WithPluginConfiguration(cfg.PluginConfig),
		hostsim.WithPluginName("spillway"),
		hostsim.WithLogWriter(s.guest),
		hostsim.WithRouteResolver(s.resolveRoute),
		hostsim.WithStreamingUpstream(s.upstream),
		hostsim.WithCalloutHandler(s.callout),
		hostsim.WithBufferLimit(cfg.BufferLimit),
		hostsim.WithRequestBodyBufferLimit(cfg.RequestBufferLimit),
		hostsim.WithStreamIdleTimeout(cfg.StreamIdleTimeout),
		hostsim.WithRouteTimeout(cfg.RouteTimeout),
		hostsim.WithUpstreamIdleTimeout(cfg.IdleTimeout),
	}
	if cfg.WithoutHeadersStopIteration {
		opts = append(opts, hostsim.WithoutAllowOnHeadersStopIteration())
	}
	if cfg.RouteBufferLimitAtRouter {
		opts = append(opts, hostsim.WithRouteBufferLimitAtRouter())
	}
	if len(names) > 0 {
		opts = append(opts, hostsim.WithCluster(names...))
	}
	routed := cfg.RouteClusters
	if routed == nil {
		routed = names
	}
	if rc := routeCluster(routed, cfg.DefaultCluster); rc != nil {
		opts = append(opts, hostsim.WithRouteCluster(*rc))
	}
	opts = append(opts, cfg.RouterFailover.options(cfg.PluginConfig)...)
	for _, e := range cfg.Env {
		opts = append(opts, hostsim.WithEnv(e.Key, e.Value))
	}
	host, err := hostsim.New(cfg.Wasm, opts...)
	if err != nil {
		s.closeRuntime()
		return nil, fmt.Errorf("serve: load the module: %w", err)
	}
	s.host = host
	ok, err := host.StartPlugin()
	if err != nil || !ok {
		crit := host.GetCriticalLogs()
		_ = host.Close()
		s.closeRuntime()
		if err == nil || errors.Is(err, hostsim.ErrStartRefused) {
			return nil, &StartError{Critical: crit, Err: err}
		}
		return nil, fmt.Errorf("serve: start the plugin: %w", err)
	}
	return s, nil
}

// StartError is a plugin that refused its configuration: what it logged at critical level
// (Spillway logs every invalid policy field there) and hostsim's error.
type StartError struct {
	Critical []string
	Err      error // wraps hostsim.ErrStartRefused (nil if hostsim gave no error)
}

// Error shows the guest's critical log, or hostsim's error when the guest logged nothing.
func (e *StartError) Error() string {
	if len(e.Critical) > 0 {
		return "serve: the plugin refused to start:\n" + strings.Join(e.Critical, "\n")
	}
	if e.Err != nil {
		return "serve: " + e.Err.Error()
	}
	return "serve: the plugin refused to start (it logged nothing at critical level)"
}

// Unwrap returns hostsim's error.
func (e *StartError) Unwrap() error { return e.Err }

// newRuntime returns a Runtime that keeps compiled code in cacheDir, when set, so the next
// start skips compiling the same module.
func newRuntime(cacheDir string) (*hostsim.Runtime, error) {
	var opts []hostsim.RuntimeOption
	if cacheDir != "" {
		opts = append(opts, hostsim.WithCompilationCacheDir(cacheDir))
	}
	return hostsim.NewRuntime(opts...)
}

func (s *Server) closeRuntime() {
	if s.rt != nil {
		_ = s.rt.Close()
	}
}

// Host returns the hostsim Host running the module.
func (s *Server) Host() *hostsim.Host { return s.host }

// Close shuts the plugin down (proxy_on_done in every VM) and frees the VMs.
func (s *Server) Close() error {
	err := s.host.Close()
	s.transport.CloseIdleConnections()
	s.closeRuntime()
	if err != nil {
		return fmt.Errorf("serve: close: %w", err)
	}
	return nil
}

// Result is what a request through the filter produced.
type Result struct {
	// Status is the HTTP status the client got (0 when nothing reached it).
	Status int
	// Header holds the response headers, pseudo-headers removed.
	Header http.Header
	// Body is the response body (Do only; ServeHTTP streams it to the client).
	Body []byte
	// Reset holds the reset details when the stream was reset (by the filter, the router,
	// serve's timeout or the client).
	Reset string
	// ClientGone reports that the client went away before the end.
	ClientGone bool
	// Flags and Details are the stream's response flags and code details (what on_log saw).
	Flags   hostsim.ResponseFlags
	Details string
	// Worker names the VM that served the request ("" if none did).
	Worker string
	// Duration is the time from receipt to the end.
	Duration time.Duration
}

// pickWorker chooses the least busy worker, starting the search round-robin so equal loads
// spread evenly.
func (s *Server) pickWorker() int {
	n := len(s.load)
	start := int(s.rr.Add(1) % uint64(n))
	best := start
	for i := 1; i < n; i++ {
		j := (start + i) % n
		if s.load[j].Load() < s.load[best].Load() {
			best = j
		}
	}
	return best
}

// newRequestID returns a random x-request-id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestHeaders turns a downstream request into proxy-wasm headers, as Envoy's HTTP
// connection manager presents them: pseudo-headers first, lower-case names, hop-by-hop
// headers dropped, x-forwarded-proto and a fresh x-request-id added. bodyLen is the
// request's content length (-1 unknown, as for a chunked body).
func requestHeaders(r *http.Request, id string, bodyLen int64) [][2]string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h := make([][2]string, 0, len(r.Header)+6)
	h = append(h, [2]string{":authority", r.Host}, [2]string{":path", r.URL.RequestURI()},
		[2]string{":method", r.Method}, [2]string{":scheme", scheme})
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if hopByHop[lk] || lk == "content-length" || lk == HeaderRequestID || lk == "x-forwarded-proto" {
			continue
		}
		for _, v := range vs {
			h = append(h, [2]string{lk, v})
		}
	}
	if bodyLen > 0 {
		h = append(h, [2]string{"content-length", strconv.FormatInt(bodyLen, 10)})
	}
	return append(h, [2]string{"x-forwarded-proto", scheme}, [2]string{HeaderRequestID, id})
}

// client is where what passes the filter goes: the downstream connection (ServeHTTP) or a
// buffer (Do).
type client interface {
	headers(status int, h http.Header) error
	data(b []byte) error
	trailers(h http.Header) error
}

// exchange runs one request through the filter: the body from body (nil: none) chunk by
// chunk as it arrives, what passes the filter to the upstream, and what passes back to out,
// part by part. It returns when the stream ended (answered, reset, the client gone, or
// serve's Timeout); interrupt stops a body read still blocked then.
func (s *Server) exchange(r *http.Request, body io.Reader, out client, interrupt func()) *Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()

	wi := s.pickWorker()
	s.load[wi].Add(1)
	defer s.load[wi].Add(-1)
	vm := s.host.Worker(wi)
	res := &Result{Worker: vm.Name()}
	defer func() { res.Duration = time.Since(start) }()

	length := r.ContentLength
	if body == nil {
		length = 0
	}
	headers := requestHeaders(r, newRequestID(), length)
	if !s.normalizePath(headers, out, res) {
		return res // the connection manager's reply, before any filter (pathnorm.go)
	}
	exCtx := context.WithValue(r.Context(), authorityKey{}, r.Host)
	ex, err := vm.StartStream(exCtx, headers, length == 0)
	if ex == nil {
		s.logf("serve: %s %s: %v", r.Method, r.URL.Path, err)
		s.localReply(out, res, http.StatusServiceUnavailable, "hostsim_unavailable", "hostsim could not start the request: the filter is not running")
		return res
	}
	if err != nil {
		s.logf("serve: %s %s on %s: %v", r.Method, r.URL.Path, vm.Name(), err)
	}
	pumped := make(chan struct{})
	if length != 0 {
		go func() {
			defer close(pumped)
			s.sendBody(ctx, r, ex, body, length)
		}()
	} else {
		close(pumped)
	}
	s.receive(ctx, r, ex, out, res)
	// The stream may end before the client sent its whole body (an early answer, a reset).
	// The body pump then stops at its next chunk; a read still blocked after a grace is
	// interrupted, as Envoy stops reading such a request (the connection then closes).
	grace := time.NewTimer(earlyEndGrace)
	select {
	case <-pumped:
	case <-grace.C:
		if interrupt != nil {
			interrupt()
		}
		<-pumped
	}
	grace.Stop()
	if resp := ex.Response(); resp != nil {
		res.Flags, res.Details = resp.Flags, resp.Details
	}
	for _, e := range s.host.AsyncErrors() {
		s.logf("serve: background event: %v", e)
	}
	return res
}

// sendBody streams the request body into the exchange, as the connection manager's
// decodeData does: a content-length body ends with its last chunk, a chunked one with an
// empty end of stream (or its trailers). SendData waits at the buffer limit (flow control).
// A client that goes away mid-body resets the stream.
func (s *Server) sendBody(ctx context.Context, r *http.Request, ex *hostsim.Exchange, body io.Reader, length int64) {
	buf := make([]byte, readChunk)
	var read int64
	for {
		n, err := body.Read(buf)
		read += int64(n)
		known := length > 0 && read >= length
		if n > 0 || known {
			if serr := ex.SendData(ctx, buf[:n], known && (err == nil || errors.Is(err, io.EOF))); serr != nil {
				s.sendFailed(r, ex, serr)
				return
			}
			if known {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			var serr error
			if tr := trailerPairs(r.Trailer); len(tr) > 0 {
				serr = ex.SendTrailers(tr)
			} else {
				serr = ex.SendData(ctx, nil, true)
			}
			if serr != nil {
				s.sendFailed(r, ex, serr)
			}
			return
		case err != nil:
			// The client went away (or serve interrupted a read the exchange no longer wants).
			if rerr := ex.ResetBy(downstreamReset(r)); rerr != nil && !errors.Is(rerr, hostsim.ErrNoStream) {
				s.logf("serve: reset after a failed body read: %v", rerr)
			}
			return
		}
	}
}

// sendFailed logs a failed SendData unless the exchange simply ended first.
func (s *Server) sendFailed(r *http.Request, ex *hostsim.Exchange, err error) {
	if errors.Is(err, hostsim.ErrNoStream) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	s.logf("serve: %s %s: request body: %v", r.Method, r.URL.Path, err)
}

// trailerPairs turns Go's trailers into proxy-wasm pairs.
func trailerPairs(h http.Header) [][2]string {
	var out [][2]string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, [2]string{strings.ToLower(k), v})
		}
	}
	return out
}

// receive hands what reaches the client to out until the stream ends. serve's Timeout
// resets the stream (ResetTimeout) and answers 504 if nothing went out yet; a client that
// goes away (its context ends, or a write fails) resets it as a downstream disconnect.
func (s *Server) receive(ctx context.Context, r *http.Request, ex *hostsim.Exchange, out client, res *Result) {
	sent := false
	for {
		ev, err := ex.Next(ctx)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if r.Context().Err() != nil {
				res.ClientGone = true
				s.resetStream(ex, downstreamReset(r))
				return
			}
			s.resetStream(ex, hostsim.DownstreamReset{Details: ResetTimeout})
			if sent {
				res.Reset = ResetTimeout
				return
			}
			s.localReply(out, res, http.StatusGatewayTimeout, "hostsim_timeout",
				fmt.Sprintf("the filter did not finish the request within %v", s.cfg.Timeout))
			return
		}
		var werr error
		switch ev.Kind {
		case hostsim.ClientHeaders:
			status, h := responseHeaders(ev.Headers)
			res.Status, res.Header, sent = status, h, true
			werr = out.headers(status, h)
		case hostsim.ClientData:
			werr = out.data(ev.Data)
		case hostsim.ClientTrailers:
			werr = out.trailers(headerOf(ev.Headers))
		case hostsim.ClientReset:
			res.Reset = ev.Reset
		}
		if werr != nil {
			res.ClientGone = true
			s.resetStream(ex, downstreamReset(r))
			return
		}
	}
}

func (s *Server) resetStream(ex *hostsim.Exchange, reset hostsim.DownstreamReset) {
	if err := ex.ResetBy(reset); err != nil && !errors.Is(err, hostsim.ErrNoStream) {
		s.logf("serve: reset: %v", err)
	}
}

// responseHeaders splits proxy-wasm response headers into the status and Go headers,
// without pseudo-headers and hop-by-hop headers.
func responseHeaders(pairs [][2]string) (int, http.Header) {
	status := 0
	h := make(http.Header, len(pairs))
	for _, kv := range pairs {
		if kv[0] == ":status" {
			status, _ = strconv.Atoi(kv[1])
			continue
		}
		if strings.HasPrefix(kv[0], ":") || hopByHop[kv[0]] {
			continue
		}
		h.Add(kv[0], kv[1])
	}
	if status < 100 || status > 999 {
		status = http.StatusBadGateway // the filter removed or broke :status
	}
	return status, h
}

func headerOf(pairs [][2]string) http.Header {
	h := make(http.Header, len(pairs))
	for _, kv := range pairs {
		h.Add(kv[0], kv[1])
	}
	return h
}

// localReply sends one of serve's own JSON error replies (OpenAI's error shape), which do
// not pass the filter.
func (s *Server) localReply(out client, res *Result, status int, code, msg string) {
	body := errorBody(code, msg)
	h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(body))}}
	res.Status, res.Header = status, h
	if out.headers(status, h) == nil {
		_ = out.data(body)
	}
}

func errorBody(code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "hostsim_error", "code": code}})
	return b
}

// bufferClient collects the answer for Do.
type bufferClient struct {
	body []byte
	tail http.Header // the trailers
}

func (b *bufferClient) headers(int, http.Header) error { return nil }

func (b *bufferClient) data(p []byte) error {
	b.body = append(b.body, p...)
	return nil
}

func (b *bufferClient) trailers(h http.Header) error {
	b.tail = h
	return nil
}

// Do runs one downstream request with its whole body through the filter and the upstream,
// and returns what the client gets, body included, trailers among the headers under
// http.TrailerPrefix (hostsim run). The request's context cancels it; serve's Timeout
// answers 504.
func (s *Server) Do(r *http.Request, body []byte) *Result {
	out := &bufferClient{}
	r.ContentLength = int64(len(body))
	var src io.Reader
	if len(body) > 0 {
		src = bytes.NewReader(body)
	}
	res := s.exchange(r, src, out, nil)
	res.Body = out.body
	for k, vs := range out.tail {
		if res.Header == nil {
			res.Header = http.Header{}
		}
		res.Header[http.TrailerPrefix+k] = vs
	}
	return res
}

// responseClient streams the answer to the downstream connection, flushing every part.
type responseClient struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (c *responseClient) headers(status int, h http.Header) error {
	dst := c.w.Header()
	for k, vs := range h {
		dst[k] = vs
	}
	c.w.WriteHeader(status)
	return c.rc.Flush()
}

func (c *responseClient) data(p []byte) error {
	if _, err := c.w.Write(p); err != nil {
		return err
	}
	return c.rc.Flush()
}

func (c *responseClient) trailers(h http.Header) error {
	dst := c.w.Header()
	for k, vs := range h {
		for _, v := range vs {
			dst.Add(http.TrailerPrefix+k, v)
		}
	}
	return nil
}

// ServeHTTP implements http.Handler: the request streams in while the answer streams out
// (full duplex on HTTP/1.1 too), and a stream that ends in a reset drops the connection
// (HTTP/1.1) or resets the stream (HTTP/2), as Envoy does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ref := refusalOf(r); ref != nil {
		s.refuse(w, ref)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/2 is full duplex already
	var body io.Reader
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		body = r.Body
	}
	res := s.exchange(r, body, &responseClient{w: w, rc: rc}, func() { _ = rc.SetReadDeadline(time.Now()) })
	if body != nil {
		// A body the stream ended before reading is closed here, not by the server after
		// the handler: with full duplex on, the server's own close reads it to the end and
		// starts its background read after it stopped the last one, and then panics
		// peeking for the next request on the connection (golang/go#68560). Closing in the
		// handler reads the rest the same way (or gives up past the server's limit and
		// closes the connection), in time for the server to stop that read.
		_ = r.Body.Close()
	}
	s.logRequest(r.Method, r.URL.RequestURI(), res)
	if res.Reset != "" || res.ClientGone || res.Status == 0 {
		panic(http.ErrAbortHandler)
	}
}

// refuse answers a request Envoy's HTTP/1 codec refuses (h1frame) as its connection
// manager does: sendLocalReply with the status's text as the body, text/plain
// (Utility::sendLocalReply), "connection: close" on a 400
// (ConnectionManagerImpl::ActiveStream::onLocalReply), and the connection closed after it
// (handleCodecError; the framing ends what the server reads). The access log shows flag
// DPE (handleCodecError sets DownstreamProtocolError) and the codec's details, and no
// method or path: the headers never reached the connection manager. No filter runs; Envoy
// would run the filter chain's encoder side on the local reply, and its proxy_on_log
// (FilterManager::sendLocalReplyViaFilterChain creates the chain for it; cpp-host
// ContextBase::onResponseHeaders creates the stream's context), without the request.
func (s *Server) refuse(w http.ResponseWriter, ref *refusal) {
	body := http.StatusText(ref.Status)
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if ref.Status == http.StatusBadRequest {
		h.Set("Connection", "close")
	}
	w.WriteHeader(ref.Status)
	_, _ = io.WriteString(w, body)
	s.logRequest("-", "-", &Result{Status: ref.Status, Flags: hostsim.FlagDownstreamProtocolError, Details: ref.Details})
}

// logRequest writes the access log line, with Envoy's %RESPONSE_FLAGS% and
// %RESPONSE_CODE_DETAILS% at the end.
func (s *Server) logRequest(method, uri string, res *Result) {
	var b strings.Builder
	status := strconv.Itoa(res.Status)
	switch {
	case res.ClientGone:
		status = "client-gone"
	case res.Reset != "":
		status = "reset(" + res.Reset + ")"
	}
	worker := res.Worker
	if worker == "" {
		worker = "-"
	}
	fmt.Fprintf(&b, "%s %s %s %s %s", method, uri, status,
		res.Duration.Round(10*time.Microsecond), worker)
	for _, h := range accessLogHeaders {
		v := res.Header.Get(h.header)
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(&b, " %s=%s", h.label, v)
	}
	details := res.Details
	if details == "" {
		details = "-"
	}
	fmt.Fprintf(&b, " flags=%s details=%s", res.Flags, details)
	s.access.Print(b.String())
}

// logf writes one of serve's own messages to the guest log stream.
func (s *Server) logf(format string, args ...any) {
	fmt.Fprintf(s.guest, format+"\n", args...)
}
