package hostsim

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/stream"
)

// Option configures a Host.
type Option func(*config)

type config struct {
	runtime        *Runtime
	wasi           WASIMode
	workers        int
	noCanary       bool
	pluginConfig   []byte
	vmConfig       []byte
	vmID           string
	rootID         string
	pluginName     string
	env            []string
	properties     map[string][]byte
	failurePolicy  FailurePolicy
	clock          Clock
	realtime       bool
	clusters       map[string]bool
	calloutHandler CalloutHandler
	upstream       UpstreamFunc
	streamUpstream UpstreamStreamFunc
	routeResolver  func(cluster string, headers [][2]string) error
	foreign        map[string]func([]byte) ([]byte, error)
	logWriter      io.Writer
	logLevel       LogLevel
	logRetention   int
	process        *Process
	random         io.Reader
	maxVirtualWait time.Duration
	bufferLimit    int

	// requestBodyBufferLimit raises the stream's buffer limit (0: not set) ...
	requestBodyBufferLimit int
	// ... from the request headers on, or (routeBufferLimitAtRouter) once they reach the
	// router.
	routeBufferLimitAtRouter bool
	streamIdleTimeout        time.Duration

	routeTimeout        time.Duration
	upstreamIdleTimeout time.Duration

	allowHeadersStopIteration bool
	foreignAddresses          bool

	// The router's retries (retrypolicy.go) and the upstream HTTP filter (WithUpstreamFilter).
	retryPolicy    *RetryPolicy
	maxRetries     *uint32
	retryRandom    RetryRandom
	upstreamFilter *pluginSpec
	// plugins are WithPlugin's plugin configurations, in the order given.
	plugins []*pluginSpec
	// upstreamNoStopIteration: the upstream filter lacks allow_on_headers_stop_iteration.
	upstreamNoStopIteration bool
	// routeCluster is the route's cluster specifier (WithRouteCluster; nil: none).
	routeCluster *RouteCluster
	// respHeadersToRemove is the route's response_headers_to_remove
	// (WithRouteResponseHeadersToRemove), lower-cased.
	respHeadersToRemove []string
}

// pluginSpec is a plugin configuration on the module's vm_config beyond the first (cpp-host
// PluginBase: name, root_id, configuration): a WithPlugin filter or the upstream HTTP filter.
type pluginSpec struct {
	name, rootID string
	config       []byte
	upstream     bool // the cluster's upstream HTTP filter (WithUpstreamFilter)
}

// PluginConfig is one more Wasm filter configuration (Envoy's PluginConfig) on the module's
// vm_config: WithPlugin.
type PluginConfig struct {
	// Name is the plugin's name (plugin_name), which Request.Plugin selects it by; it must
	// be unique among the plugins added.
	Name string
	// RootID is its root_id (plugin_root_id): it may repeat another plugin's, as two filters
	// whose root_id is empty do.
	RootID        string
	Configuration []byte
}

// WithUpstreamFilter adds a second plugin on the same vm_config, as the provider cluster's
// upstream HTTP filter (HttpProtocolOptions.http_filters = [wasm, upstream_codec], Envoy ≥
// 1.31): each VM starts it after the first plugin with a root context of its own (cpp-host
// WasmBase::start: proxy_on_context_create and proxy_on_vm_start for the new root, then
// proxy_on_configure with configuration), a canary of its own first (WasmHandleBase::canary
// is per plugin), and plugin_root_id and plugin_name answer rootID in its contexts. Every
// try of an exchange gets a new stream context in it (UpstreamRequest's own filter chain).
func WithUpstreamFilter(rootID string, configuration []byte) Option {
	return func(c *config) {
		c.upstreamFilter = &pluginSpec{name: rootID, rootID: rootID, config: append([]byte(nil), configuration...), upstream: true}
	}
}

// WithPlugin adds another HTTP filter configuration on the same vm_config, sharing each VM
// with the first plugin as Envoy shares it: one VM per worker per vm key (cpp-host makeVmKey:
// vm_id, VM configuration, code), and in it a root context per plugin key (root_id and
// configuration: WasmBase::start keeps root_contexts_ by PluginBase::key()). Each VM starts it
// after the first plugin — getOrCreateThreadLocalPlugin: WasmBase::start (a new root:
// proxy_on_context_create, proxy_on_vm_start with the VM configuration again) then
// WasmBase::configure (proxy_on_configure with its configuration) — after a canary of its
// own (WasmHandleBase::canary is per plugin key). Its contexts answer plugin_name and
// plugin_root_id with its own; its ticks, callouts and queue registrations belong to its
// root. A Request with Plugin set to its Name goes through its filter instead of the first
// plugin's: each plugin is the Wasm filter of its own filter chain (a listener of its own,
// as in the SDK's http_body example); two Wasm filters in one chain are not modelled.
func WithPlugin(p PluginConfig) Option {
	return func(c *config) {
		c.plugins = append(c.plugins, &pluginSpec{name: p.Name, rootID: p.RootID,
			config: append([]byte(nil), p.Configuration...)})
	}
}

// morePlugins are the plugins every VM starts after the first: WithPlugin's in order, then
// the upstream filter. The order Envoy loads a listener's and a cluster's filters in was not
// verified.
func (c *config) morePlugins() ([]*pluginSpec, error) {
	var out []*pluginSpec
	names := map[string]bool{}
	for _, p := range c.plugins {
		if names[p.name] {
			return nil, fmt.Errorf("hostsim: WithPlugin: two plugins named %q", p.name)
		}
		names[p.name] = true
		out = append(out, p)
	}
	if c.upstreamFilter != nil {
		out = append(out, c.upstreamFilter)
	}
	return out, nil
}

// WithoutUpstreamAllowOnHeadersStopIteration models an upstream filter (WithUpstreamFilter)
// whose PluginConfig lacks allow_on_headers_stop_iteration while the connection manager's
// filter has it: the option is read per filter config (Envoy's Wasm filter Config, which
// proxy-wasm-cpp-host's convertVmCallResultToFilterHeadersStatus consults for its context),
// so only the upstream filter's headers Pause becomes StopAllIterationAndWatermark. Without
// WithUpstreamFilter it changes nothing.
func WithoutUpstreamAllowOnHeadersStopIteration() Option {
	return func(c *config) { c.upstreamNoStopIteration = true }
}

func defaultConfig() config {
	return config{
		workers:        1,
		properties:     map[string][]byte{},
		clusters:       map[string]bool{},
		foreign:        map[string]func([]byte) ([]byte, error){},
		maxVirtualWait: time.Hour,
		bufferLimit:    1 << 20,
		failurePolicy:  DefaultFailurePolicy,

		allowHeadersStopIteration: true,
	}
}

// WithRuntime compiles and runs on a shared Runtime (see hostsimtest.Runtime). Without it
// the Host creates, and closes, a Runtime of its own.
func WithRuntime(r *Runtime) Option { return func(c *config) { c.runtime = r } }

// WithWASI chooses the WASI surface (default WASIEnvoy133).
func WithWASI(m WASIMode) Option { return func(c *config) { c.wasi = m } }

// WithWorkers sets the number of worker VMs, like Envoy's --concurrency (default 1). The
// main-thread VM and the canary come on top.
func WithWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithoutCanary skips the canary VM (its start-up side effects then do not happen).
func WithoutCanary() Option { return func(c *config) { c.noCanary = true } }

// WithPluginConfiguration sets the plugin configuration (buffer 7 during on_configure).
func WithPluginConfiguration(b []byte) Option { return func(c *config) { c.pluginConfig = b } }

// WithVMConfiguration sets the VM configuration (buffer 6 during on_vm_start).
func WithVMConfiguration(b []byte) Option { return func(c *config) { c.vmConfig = b } }

// WithVMID sets vm_id, the shared data and queue namespace (Istio leaves it empty).
func WithVMID(id string) Option { return func(c *config) { c.vmID = id } }

// WithRootID sets the plugin's root_id (property plugin_root_id).
func WithRootID(id string) Option { return func(c *config) { c.rootID = id } }

// WithPluginName sets the plugin's name (property plugin_name).
func WithPluginName(name string) Option { return func(c *config) { c.pluginName = name } }

// WithEnv adds KEY=VALUE to the guest's environment (vm_config.environment_variables).
func WithEnv(key, value string) Option {
	return func(c *config) { c.env = append(c.env, key+"="+value) }
}

// WithProperty sets a property the guest can read with proxy_get_property. Integers must
// be 8-byte little endian (binary.LittleEndian.AppendUint64), as Envoy serializes them.
func WithProperty(path []string, value []byte) Option {
	return func(c *config) { c.properties[joinPath(path)] = value }
}

// WithFailurePolicy sets what happens to streams once a VM has failed (default
// DefaultFailurePolicy, the one the Envoy configuration Spillway generates sets).
func WithFailurePolicy(p FailurePolicy) Option { return func(c *config) { c.failurePolicy = p } }

// WithClock sets the clock. A SettableClock is virtual: time moves only with Advance.
// Without WithClock or WithRealClock the Host uses a manualclock.Clock at VirtualStart().
func WithClock(clk SettableClock) Option {
	return func(c *config) { c.clock, c.realtime = clk, false }
}

// WithRealClock uses the wall clock: ticks, callout timeouts and deliveries fire on their
// own (for `hostsim serve`).
func WithRealClock() Option { return func(c *config) { c.clock, c.realtime = realClock{}, true } }

// WithCluster declares an upstream cluster for proxy_http_call. When no cluster is
// declared every name is accepted; once one is, an unknown cluster is BadArgument as in Envoy.
func WithCluster(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.clusters[n] = true
		}
	}
}

// WithCalloutHandler answers proxy_http_call callouts. Without one, callouts stay pending
// until the test answers them (CallOnHttpCallResponse) or they time out.
func WithCalloutHandler(h CalloutHandler) Option { return func(c *config) { c.calloutHandler = h } }

// WithUpstream sets the upstream that exchanges (RunHTTP, StartHTTP, StartStream) forward
// requests to, once the whole request has passed the filter; its answer is played back
// through the filter, body chunk by body chunk at their ChunkDelays. With a retry policy
// (WithRetryPolicy) it is called once per try, with that try's headers and body
// (UpstreamRequest.Attempt numbers them).
func WithUpstream(f UpstreamFunc) Option { return func(c *config) { c.upstream = f } }

// WithStreamingUpstream sets an upstream that streams both ways instead (it takes precedence
// over WithUpstream): called as soon as the request headers passed the filter, it reads the
// body as it passes and answers part by part (see UpstreamCall). It needs WithRealClock.
// With a retry policy each try is a call of its own: a retried try's context is cancelled
// and the next call reads the buffered body again, then what the client sends after.
func WithStreamingUpstream(f UpstreamStreamFunc) Option {
	return func(c *config) { c.streamUpstream = f }
}

// WithRouteResolver sets what the router decides the moment the request headers pass the
// filter, before any body (Router::Filter::decodeHeaders looks up the route's cluster and
// a host there): f gets the route's cluster (WithRouteCluster's pick; "" without one) and
// the request headers; ErrClusterNotFound or ErrNoHealthyUpstream make the router answer at
// once (503, NC or UH), so the filter sees no request body; nil lets the request go on to
// the upstream. Without it the upstream itself may return those errors, later.
func WithRouteResolver(f func(cluster string, headers [][2]string) error) Option {
	return func(c *config) { c.routeResolver = f }
}

// WithRouteTimeout sets the route timeout (Envoy's route timeout, 15 s by default there;
// default here 0, off, as for streaming routes): armed when the whole request has passed the
// filter (Router::Filter::onRequestComplete) and disarmed when the upstream's response
// ends, it answers 504 "upstream request timeout" (flag UT, details response_timeout) or
// resets a response that already went downstream.
func WithRouteTimeout(d time.Duration) Option { return func(c *config) { c.routeTimeout = d } }

// WithUpstreamIdleTimeout sets how long the upstream may stay silent (retry policy
// per_try_idle_timeout; default 0, off): re-armed by every upstream event, it answers 504
// "upstream request timeout" (flag UT, details upstream_per_try_idle_timeout) or resets a
// response that already went downstream: what ends a stalled stream.
func WithUpstreamIdleTimeout(d time.Duration) Option {
	return func(c *config) { c.upstreamIdleTimeout = d }
}

// WithForeignFunction registers a function for proxy_call_foreign_function.
func WithForeignFunction(name string, f func(args []byte) ([]byte, error)) Option {
	return func(c *config) { c.foreign[name] = f }
}

// WithLogWriter also writes every guest log line to w ("[level] vm: message").
func WithLogWriter(w io.Writer) Option { return func(c *config) { c.logWriter = w } }

// WithLogRetention keeps the last n guest log lines for Logs and LogsAt (default
// DefaultLogRetention; n ≤ 0 keeps the default). Older lines are counted (LogCount,
// LogsDropped), not kept.
func WithLogRetention(n int) Option { return func(c *config) { c.logRetention = n } }

// WithLogLevel sets the level proxy_get_log_level reports (ABI 0.2.1).
func WithLogLevel(l LogLevel) Option { return func(c *config) { c.logLevel = l } }

// WithProcess shares shared data and queues with other Hosts on the same Process, as
// several plugins (modules) in one Envoy share them per vm_id.
func WithProcess(p *Process) Option { return func(c *config) { c.process = p } }

// WithRandSource feeds WASI random_get from r (default crypto/rand).
func WithRandSource(r io.Reader) Option { return func(c *config) { c.random = r } }

// WithMaxVirtualWait bounds how far RunHTTP moves a virtual clock waiting for a paused
// stream (default one hour).
func WithMaxVirtualWait(d time.Duration) Option { return func(c *config) { c.maxVirtualWait = d } }

// WithBufferLimit sets the connection buffer limit, Envoy's per_connection_buffer_limit_bytes
// (default 1 MiB, Envoy's default): a stream's buffer limit starts there
// (ConnectionManagerImpl::newStream takes the codec stream's, which over HTTP/1.1 is the
// connection's: http1/codec_impl.cc, StreamEncoderImpl::bufferLimit). A request body
// buffered beyond the stream's limit is answered 413, a response body 500 (or the stream
// reset). It is also the watermark that stops reading a side whose data cannot move on.
// hostsim models every stream so, HTTP/1.1's way; over HTTP/2 Envoy starts a stream at its
// initial window (initial_stream_window_size, 256 MiB by default) instead.
func WithBufferLimit(n int) Option { return func(c *config) { c.bufferLimit = n } }

// WithRequestBodyBufferLimit models the virtual host's or route's request_body_buffer_limit
// (Envoy ≥ 1.36): it raises the stream's buffer limit to n, never lowers it (a smaller n
// changes nothing; source/common/router/router.cc, Filter::decodeHeaders, calls
// setDecoderBufferLimit only for a larger limit). The filter manager keeps one limit for
// both directions (source/common/http/filter_manager.cc, FilterManager::setBufferLimit sets
// the request and the response buffer's watermarks; ActiveStreamEncoderFilter::createBuffer
// reads it), so a response body the filter buffers may grow as large. Every route gets the
// same limit, as the bootstrap Spillway generates sets it on the virtual host.
//
// When Envoy applies it: by default once the route is matched, before the filter sees the
// request headers (envoyproxy/envoy#42607, Envoy 1.37.0: "the route level body buffer
// limit is now applied to requests when the route is matched"). WithRouteBufferLimitAtRouter
// models the releases before.
func WithRequestBodyBufferLimit(n int) Option {
	return func(c *config) { c.requestBodyBufferLimit = n }
}

// WithRouteBufferLimitAtRouter models an Envoy without envoyproxy/envoy#42607 (1.36 and
// earlier): the route's request_body_buffer_limit (WithRequestBodyBufferLimit) is applied
// only when the request headers reach the router filter (source/common/router/router.cc,
// Filter::decodeHeaders, setDecoderBufferLimit). Until the filter lets the headers through,
// the stream buffers under the connection's limit (WithBufferLimit): a filter that holds
// the headers while it buffers the body, as Spillway does, gets Envoy's 413 for a body over
// the connection's limit, whatever the route says, unless the connection's limit is raised.
// Responses come after the router, so they get the raised limit either way.
func WithRouteBufferLimitAtRouter() Option {
	return func(c *config) { c.routeBufferLimitAtRouter = true }
}

// streamConfig is the filter manager's options for a VM's streams.
func (c *config) streamConfig() stream.Config {
	return stream.Config{AllowHeadersStopIteration: c.allowHeadersStopIteration,
		FailOpen: c.failurePolicy == FailOpen, BufferLimit: c.bufferLimit,
		RouteBufferLimit: c.routeBufferLimit(), RouteBufferLimitAtRouter: c.routeBufferLimitAtRouter}
}

// routeBufferLimit is the stream's buffer limit once the route's request_body_buffer_limit
// applies: the connection's, raised by the route's.
func (c *config) routeBufferLimit() int { return max(c.bufferLimit, c.requestBodyBufferLimit) }

// WithStreamIdleTimeout models the connection manager's stream_idle_timeout and the route's
// idle_timeout, which replaces it once the route is chosen (one value here, as Spillway's
// bootstrap sets both alike; default 0, off, where Envoy's connection manager defaults to
// 5 min): an exchange that goes that long without a headers, data or trailers event either
// way is ended by the connection manager (source/common/http/conn_manager_impl.cc,
// ActiveStream::onIdleTimeout): flag SI, details stream_idle_timeout, a local reply
// "stream timeout" through sendLocalReply with Http::Utility::maybeRequestTimeoutCode's
// status, 408 while the client's request is still incomplete and 504 once it was fully
// received; a reply that replaces response headers the filter holds; a reset once response
// headers went to the client. The timer is armed when the stream starts and re-armed by
// every request part the client sends (ActiveStream::decodeHeaders/decodeTrailers,
// FilterManager::decodeData), request data a continue releases (FilterManager::decodeData)
// and everything encoded towards the client: the upstream's headers, data and trailers and
// what a continue releases (FilterManager::encodeHeaders/encodeData/encodeTrailers). Time
// a filter spends paused on a callout, a queue or a tick re-arms nothing. Only exchanges
// (RunHTTP, StartHTTP, StartStream) have the timer.
func WithStreamIdleTimeout(d time.Duration) Option {
	return func(c *config) { c.streamIdleTimeout = d }
}

// WithoutAllowOnHeadersStopIteration models a proxy without
// PluginConfig.allow_on_headers_stop_iteration (Envoy 1.33–1.34, Istio's WasmPlugin): a
// Pause from on_request_headers or on_response_headers becomes StopAllIterationAndWatermark
// (cpp-host context.cc, convertVmCallResultToFilterHeadersStatus), so no body or trailers
// callback reaches the filter until it continues; the data waits in the filter manager,
// which stops reading at the buffer limit. By default hostsim models the configuration
// Spillway ships (Envoy ≥ 1.36 with the option on): a headers Pause is a true
// StopIteration and body callbacks keep arriving while the headers are held.
func WithoutAllowOnHeadersStopIteration() Option {
	return func(c *config) { c.allowHeadersStopIteration = false }
}

// WithAllowOnHeadersStopIteration turns allow_on_headers_stop_iteration on, which is already
// the default.
//
// Deprecated: the option is on by default; use WithoutAllowOnHeadersStopIteration to model a
// proxy that lacks it.
func WithAllowOnHeadersStopIteration() Option {
	return func(c *config) { c.allowHeadersStopIteration = true }
}

// WithForeignAddresses makes the host misbehave for tests of a guest's defences: every
// answer a host call hands over is written 8 bytes past the start of the block the guest's
// proxy_on_memory_allocate returned, and that address is what the guest is told, as a host
// with a pointer bug would. Envoy never does this (cpp-host's copyToPointerSize writes at
// the address the allocator returned); Spillway's bridge refuses such an address.
func WithForeignAddresses() Option { return func(c *config) { c.foreignAddresses = true } }

// CalloutHandler answers an HTTP callout. It runs outside the VM (never call back into the
// Host from it with a virtual clock; with a real clock it runs on its own goroutine).
type CalloutHandler func(ctx context.Context, c *Callout) *CalloutResponse

// UpstreamFunc answers a request an exchange forwards upstream. An error becomes the router's
// own reply: ErrClusterNotFound (503, NC), ErrNoHealthyUpstream (503, UH), an *UpstreamReset
// (503 "upstream connect error or disconnect/reset before headers. reset reason: ...", UF
// for connection failures and timeouts), any other error a remote connection failure (UF).
// ctx derives from the exchange's context (Exchange.Context): it carries the values of the
// context the exchange started with and is cancelled when the exchange ends or is reset, or
// the router gives up on the upstream, so the call can stop when nobody waits for its answer.
type UpstreamFunc func(ctx context.Context, req *UpstreamRequest) (*UpstreamResponse, error)

// WithRouteResponseHeadersToRemove gives the route response_headers_to_remove: the router
// removes these headers from an upstream's response before the downstream filters see it
// (source/common/router/router.cc, Filter::onUpstreamHeaders: the retry state decides on the
// try's headers first, then route_entry_->finalizeResponseHeaders applies the route's
// response header mutations, then callbacks_->encodeHeaders hands them downstream). So a
// header an upstream filter added to make the route retry a try never reaches the
// downstream filter or the client, whether the try is retried or not. Names are
// case-insensitive.
func WithRouteResponseHeadersToRemove(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.respHeadersToRemove = append(c.respHeadersToRemove, strings.ToLower(n))
		}
	}
}
