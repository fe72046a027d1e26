// Package serve is `hostsim serve`'s server: an HTTP/1.1 front end that runs each request
// through a proxy-wasm module in hostsim's worker VMs on a real clock, then forwards it to
// the upstream cluster the filter chose (or answers the filter's local reply).
//
// Routing follows Envoy's route `cluster_header`: after the filter has run, the request
// header x-spillway-cluster names the upstream cluster (it is stripped before forwarding);
// without it the request goes to the default cluster (the policy's first provider's). An
// unknown cluster is answered 503 with a JSON body, like Envoy's "cluster not found", and an
// upstream that cannot be reached becomes Envoy's 503 "upstream connect error"; both go
// through the filter's response path like any upstream answer.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Headers serve reads or writes.
const (
	// HeaderCluster names the upstream cluster, like Envoy's route cluster_header.
	HeaderCluster = "x-spillway-cluster"
	// HeaderRequestID is set on every request, as Envoy does, and forwarded upstream.
	HeaderRequestID = "x-request-id"
)

// ResetTimeout is the reset details of a stream serve gave up on at its Timeout (it
// answers 504 itself); a client that went away resets with Envoy's
// hostsim.ResetDownstreamRemoteDisconnect.
const ResetTimeout = "hostsim_timeout"

// Limits on what the front end buffers (it is not streaming yet).
const (
	// MaxRequestBytes bounds a downstream request body: larger requests get 413 before the
	// filter sees them (the policy's own limit is at most 256 MiB).
	MaxRequestBytes = 256 << 20
	// MaxResponseBytes bounds an upstream response body; a larger one is an upstream failure.
	MaxResponseBytes = 256 << 20
)

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
	// DefaultCluster takes requests the filter did not name a cluster for.
	DefaultCluster string
	// Workers is the number of worker VMs (default 1).
	Workers int
	// Env is the VM environment.
	Env []EnvVar
	// WASI and FailurePolicy are passed to hostsim.
	WASI          hostsim.WASIMode
	FailurePolicy hostsim.FailurePolicy
	// Timeout answers 504 when the filter has not finished a request by then (default
	// DefaultTimeout); it also bounds the upstream call.
	Timeout time.Duration
	// AccessLog gets one line per request; GuestLog gets the guest's log lines with their
	// level and VM, and serve's own errors. Nil discards.
	AccessLog, GuestLog io.Writer
	// Runtime compiles and runs the module; nil: a Runtime of the Server's own, with
	// compiled code cached in the user cache directory.
	Runtime *hostsim.Runtime
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
	if cfg.AccessLog == nil {
		cfg.AccessLog = io.Discard
	}
	if cfg.GuestLog == nil {
		cfg.GuestLog = io.Discard
	}
	s := &Server{cfg: cfg, clusters: map[string]string{},
		access: log.New(&syncWriter{w: cfg.AccessLog}, "", log.LstdFlags|log.Lmicroseconds),
		guest:  &syncWriter{w: cfg.GuestLog},
		load:   make([]atomic.Int64, cfg.Workers),
		transport: &http.Transport{
			Proxy:               nil, // clusters are addressed directly, never through HTTP_PROXY
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
		}}
	names := make([]string, 0, len(cfg.Clusters))
	for _, c := range cfg.Clusters {
		s.clusters[c.Name] = c.URL
		names = append(names, c.Name)
	}
	rt := cfg.Runtime
	if rt == nil {
		var err error
		if rt, err = newRuntime(); err != nil {
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
		hostsim.WithUpstream(s.forward),
		hostsim.WithCalloutHandler(s.callout),
	}
	if len(names) > 0 {
		opts = append(opts, hostsim.WithCluster(names...))
	}
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

// newRuntime returns a Runtime that keeps compiled code in the user cache directory, so
// the next start skips compiling the same module.
func newRuntime() (*hostsim.Runtime, error) {
	var opts []hostsim.RuntimeOption
	if dir, err := os.UserCacheDir(); err == nil {
		d := filepath.Join(dir, "spillway-hostsim")
		if os.MkdirAll(d, 0o755) == nil {
			opts = append(opts, hostsim.WithCompilationCacheDir(d))
		}
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
	// Status is the HTTP status (0 when the stream was reset or the client went away).
	Status int
	// Header holds the response headers, pseudo-headers removed.
	Header http.Header
	Body   []byte
	// Reset holds the reset details when the filter (or hostsim) reset the stream.
	Reset string
	// Worker names the VM that served the request ("" if none did).
	Worker string
	// Duration is the time from receipt to the answer.
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
// headers dropped, x-forwarded-proto and a fresh x-request-id added.
func requestHeaders(r *http.Request, id string, bodyLen int) [][2]string {
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
		h = append(h, [2]string{"content-length", strconv.Itoa(bodyLen)})
	}
	return append(h, [2]string{"x-forwarded-proto", scheme}, [2]string{HeaderRequestID, id})
}

// Do runs one downstream request (its body already read) through the filter and the
// upstream, and returns what the client gets. The request's context cancels the wait; the
// Server's Timeout answers 504. Either way serve gives up on the stream and resets it, as
// Envoy resets a stream whose downstream went away: the VM runs on_log, on_done and
// on_delete and forgets it, whatever the filter was waiting for, and the upstream call (it
// runs under the exchange's context) is cancelled, so its late answer never races the 504.
func (s *Server) Do(r *http.Request, body []byte) *Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()

	wi := s.pickWorker()
	s.load[wi].Add(1)
	defer s.load[wi].Add(-1)
	vm := s.host.Worker(wi)
	res := &Result{Worker: vm.Name()}
	defer func() { res.Duration = time.Since(start) }()

	exCtx := context.WithValue(r.Context(), authorityKey{}, r.Host)
	ex, err := vm.StartHTTPContext(exCtx, &hostsim.Request{Headers: requestHeaders(r, newRequestID(), len(body)), Body: body})
	if ex == nil {
		s.logf("serve: %s %s: %v", r.Method, r.URL.Path, err)
		setLocal(res, http.StatusServiceUnavailable, "hostsim_unavailable", "hostsim could not start the request: the filter is not running")
		return res
	}
	resp, werr := ex.Wait(ctx)
	if resp == nil {
		details := ResetTimeout
		if r.Context().Err() != nil {
			details = hostsim.ResetDownstreamRemoteDisconnect
		}
		rerr := ex.Reset(details)
		if errors.Is(rerr, hostsim.ErrNoStream) && ex.Done() {
			resp, rerr = ex.Response(), nil // the filter finished just as serve gave up
		}
		werr = errors.Join(werr, rerr)
	}
	if err = errors.Join(err, werr); err != nil {
		s.logf("serve: %s %s on %s: %v", r.Method, r.URL.Path, vm.Name(), err)
	}
	for _, e := range s.host.AsyncErrors() {
		s.logf("serve: background event: %v", e)
	}
	switch {
	case resp == nil && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
	case resp == nil:
		setLocal(res, http.StatusGatewayTimeout, "hostsim_timeout",
			fmt.Sprintf("the filter did not finish the request within %v", s.cfg.Timeout))
	case resp.Reset != "":
		res.Reset = resp.Reset
	default:
		res.Status = resp.StatusCode
		res.Header = make(http.Header, len(resp.Headers))
		for _, kv := range resp.Headers {
			if strings.HasPrefix(kv[0], ":") || hopByHop[kv[0]] || kv[0] == "content-length" {
				continue
			}
			res.Header.Add(kv[0], kv[1])
		}
		res.Body = resp.Body
	}
	return res
}

// setLocal makes res one of serve's own JSON error replies (OpenAI's error shape).
func setLocal(res *Result, status int, code, msg string) {
	res.Status = status
	res.Header = http.Header{"Content-Type": {"application/json"}}
	res.Body = errorBody(code, msg)
}

func errorBody(code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "hostsim_error", "code": code}})
	return b
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	var res *Result
	switch {
	case err != nil:
		res = &Result{}
		setLocal(res, http.StatusBadRequest, "hostsim_bad_request", "could not read the request body")
	case len(body) > MaxRequestBytes:
		res = &Result{}
		setLocal(res, http.StatusRequestEntityTooLarge, "hostsim_body_too_large",
			fmt.Sprintf("request body larger than %d bytes", MaxRequestBytes))
	default:
		res = s.Do(r, body)
	}
	s.logRequest(r, res)
	if res.Status == 0 {
		// A reset stream, or a client that left: drop the connection, as Envoy resets it.
		panic(http.ErrAbortHandler)
	}
	h := w.Header()
	for k, vs := range res.Header {
		h[k] = vs
	}
	h.Set("Content-Length", strconv.Itoa(len(res.Body)))
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

// logRequest writes the access log line.
func (s *Server) logRequest(r *http.Request, res *Result) {
	var b strings.Builder
	status := strconv.Itoa(res.Status)
	switch {
	case res.Reset != "":
		status = "reset(" + res.Reset + ")"
	case res.Status == 0:
		status = "client-gone"
	}
	worker := res.Worker
	if worker == "" {
		worker = "-"
	}
	fmt.Fprintf(&b, "%s %s %s %s %s", r.Method, r.URL.RequestURI(), status,
		res.Duration.Round(10*time.Microsecond), worker)
	for _, h := range accessLogHeaders {
		v := res.Header.Get(h.header)
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(&b, " %s=%s", h.label, v)
	}
	s.access.Print(b.String())
}

// logf writes one of serve's own messages to the guest log stream.
func (s *Server) logf(format string, args ...any) {
	fmt.Fprintf(s.guest, format+"\n", args...)
}
