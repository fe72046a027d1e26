// Package hostsim runs proxy-wasm modules in wazero the way Envoy ≥ 1.33 hosts them: worker,
// main-thread and canary VMs, the HTTP stream lifecycle, shared data and queues, ticks, HTTP
// callouts, properties, metrics, logs, Envoy's WASI surface and its failure policies.
//
// # Layers
//
// The package is the public API over the Envoy model and the VMs that run the guest. Below
// it are internal packages that know neither a VM nor a stream, each citing its sources
// where it models them:
//
//   - internal/abi: the proxy-wasm ABI's vocabulary — status codes, map/buffer/stream/log/
//     metric enums, the pairs serialization with cpp-host's limits (over internal/pairs)
//     and the header-list helpers — with no VM behind it; internal/abi/wasm: its side in
//     wazero, guest memory access (cpp-host's copyToPointerSize) and the shape of a host
//     function and its restricted phases.
//   - internal/wasi: the WASI surface per Envoy version (WASIMode): which functions exist
//     and what each answers, over a small Guest interface.
//   - internal/hostfn: the env module and which of its imports each ABI version links, one
//     file per ABI area (logging, properties, header maps, buffers, stream control, shared
//     data, queues, callouts, metrics, timers, foreign functions). Each function decodes its
//     arguments from guest memory, asks the model through that area's interface, and
//     encodes the answer.
//   - internal/process (shared data and queues, process-wide), internal/metrics (the
//     plugin's metric store) and internal/streaminfo (response flags, code details, reset
//     reasons): pieces of Envoy's model that need no VM.
//   - internal/sched (the event loop: posted events, timers in time order, virtual-time
//     Advance, the real-clock dispatcher), internal/hostcalls (the per-VM host-call
//     counters) and internal/cachedir (the compilation cache directory's size limit): the
//     host's machinery, which knows nothing of what it runs, counts or caches.
//
// Above them, internal/envoy holds the Envoy model, each package tested without wazero (a
// boundary test keeps wazero and package hostsim out of it and its tests) and citing the
// Envoy source it models:
//
//   - internal/envoy/stream: one HTTP stream's filter context (Stream) — the callback
//     runners and how a verdict applies to its two directions, the buffer limit and its
//     413/500, local replies (DownstreamFilterManager::sendLocalReply), resets that end
//     both directions, the continue/close/local-reply actions deferred until the callback
//     returns (cpp-host's DeferAfterCallActions, run per VM thread by Thread.Settle), the
//     maps and buffers visible in each phase, the failure policy, the end of the stream
//     (log → done → delete) and a downstream reset (ActiveStream::onResetStream). It
//     reaches the guest only through Guest (call a stream callback, get its result or trap)
//     and is moved from outside only through Driver (the exchange), so a request can hold
//     more than one stream.
//   - internal/envoy/filtermanager: how the filter manager reads a callback's status; one
//     direction of a stream (Direction: headers, body, trailers, where the iteration
//     stopped, what the filter manager holds while stopped at headers, what went on) and
//     its transitions — a verdict applied, continue (ActiveStreamFilterBase::
//     commonContinue), FAIL_OPEN's bypass — which call the filter's body and trailers
//     callbacks through a Filter interface; the local replies it makes itself
//     (FAIL_CLOSED's 503, 413/500 past the buffer limit), the headers of a local reply, and
//     what it records for a downstream reset.
//   - internal/envoy/router: one try's upstream request (response started, done or
//     abandoned, the request body a streaming upstream has not read), its per-try idle
//     timeout, and the replies the router makes itself when the upstream cannot answer (NC,
//     UH, resets — "retried and the latest reset reason" after retries —, UT), seeing the
//     stream only through a Stream interface (Reply, After, Debug).
//   - internal/envoy/retry: the router's retry decision (RetryStateImpl; Filter::
//     onUpstreamHeaders, onUpstreamReset, doRetry): a route's Policy and the x-envoy-*
//     request headers that override it, and per request the answer to each try's outcome
//     after the upstream filters — retry after a jittered back-off, pass the response
//     through, or let the router answer (URX, UO) — with the cluster's max_retries breaker,
//     the attempt count and the retry buffer limit. The exchanges ask it (tries.go; see
//     "Router retries and upstream filters" below).
//   - internal/envoy/route: the route's cluster specifier (cluster_header, the matcher
//     cluster specifier plugin over a request header or filter state), the per-request
//     pick and its refresh before a retry (HeaderClusterSpecifierPlugin::route,
//     MatcherRouteEntry::refreshRouteCluster). See "Route cluster" below.
//   - internal/envoy/connmgr: the connection manager's stream idle timer (ActiveStream::
//     resetIdleTimer, onIdleTimeout) and its 408/504 "stream timeout".
//   - internal/envoy/pathnorm: the connection manager's request path normalisation
//     (ConnectionManagerUtility::maybeNormalizePath, googleurl's canonical path), which
//     serve applies before the filter sees a request.
//   - internal/envoy/callout: what proxy_http_call accepts and sends (Context::httpCall),
//     the calls pending by token, what the plugin reads of an answer, and the async
//     client's 504 for a timeout.
//   - internal/envoy/attributes: what proxy_get_property answers (Context::getProperty):
//     plugin_*, the request.* and response.* attributes over a snapshot of the stream,
//     filter state, the host's properties.
//   - internal/envoy/foreign: Envoy's built-in foreign functions (foreign.cc) that hostsim
//     runs — compress and uncompress (zlib), set_envoy_filter_state's arguments and the
//     filter-state factories it looks up — and the names of those it does not.
//
// The package itself is where the VM and the model meet. It implements the lower layers'
// interfaces on the VM (guest.go, hostfn.go, wasi.go: unexported methods, outside VM's API)
// and wraps every host function once (wrapHostFunc: find the calling VM, count the call,
// enforce the restricted phases); it holds the process (Host, host.go: VMs, logs, what each
// event does), the VMs (vm.go: instances, callbacks, failure), a VM's side of its streams
// (stream.go: the stream's place in the VM, its stream.Guest, the maps, buffers and stream
// calls the host functions reach through the callback's frame; property.go, the stream's
// snapshot for attributes and its filter state), the callouts' scheduling and delivery
// (callout.go), and the exchanges that drive a stream from a client to an upstream: the API
// (exchange.go), the client's side (downstream.go), the router's side and the seams of
// the router, the connection manager and the stream's Driver (router.go), the router's
// tries with their upstream filter streams and retry decisions (tries.go, with the public
// RetryPolicy in retrypolicy.go), and the streaming upstream (upstreamcall.go). The clock of virtual time is the module's
// internal/manualclock, which the engine's tests share; the pairs serialization is the
// module's internal/pairs, which the filter's hostabi shares.
//
// The public API is what a test or a front end needs: New and the Options (options.go),
// Host and VM with the proxytest-shaped calls (api.go) and the exchanges (Request,
// Response, Upstream*, Exchange), Runtime and Module, the failure and WASI modes, the
// errors, and the vocabulary those speak, re-exported from the internal packages: Status
// (the codes the host-side calls answer), LogLevel, MetricType, ABIVersion, ResponseFlags
// (the flags hostsim sets), ResetReason, and the details a test compares
// (DetailsViaUpstream, DetailsWasmCloseStream, ResetDownstreamRemoteDisconnect).
//
// # Fidelity
//
// The host follows Envoy (source/extensions/common/wasm/context.cc, the HTTP filter manager
// and router) and proxy-wasm-cpp-host, cited by function where each behaviour is modelled:
//
//   - Load: the ABI marker is found among the exports (proxy_get_log_level is linked only
//     for 0.2.1); an allocator (malloc or proxy_on_memory_allocate) is required; an import
//     outside the WASI mode's set or the ABI's host functions fails the load.
//   - VMs: a base VM (initialize only), a canary (initialize, root start, then killed without
//     on_done/on_delete; its shared data and queue registrations stay), the main-thread VM
//     and N workers. `_initialize` (then `main`/`__main_void`) runs in each, so Go globals are
//     per VM. Restricted calls trap with "restricted_callback" (RestrictedCallError):
//     during start-up only cpp-host's allow-list, inside proxy_on_memory_allocate only
//     proxy_log, fd_write and clock_time_get.
//   - Streams: the context is created lazily at request headers (or at log); teardown is
//     log → done (result ignored) → delete. A response that comes without request headers
//     having created the context passes the filter without callbacks (Context::
//     encodeHeaders, encodeData, encodeTrailers: "if (!in_vm_context_created_ ||
//     failure_local_reply_sent_) return Continue;"; Envoy's AllHeadersAndTrailersNotStarted). A headers Pause is a true StopIteration by
//     default, as with allow_on_headers_stop_iteration (Envoy ≥ 1.35; Spillway ships it on):
//     the headers are held, stay editable from the body callbacks, and are what the router
//     routes on once the stream continues; a Continue from a body callback resumes them too.
//     WithoutAllowOnHeadersStopIteration models a proxy without the option: the Pause stops
//     all iteration (StopAllIterationAndWatermark), and body and trailers are held without
//     callbacks and delivered on continue. A body Pause buffers and reports the cumulative
//     size; past the buffer limit a request is answered 413 and a response 500 (or reset)
//     (ActiveStreamDecoderFilter::requestDataTooLarge, ActiveStreamEncoderFilter::
//     responseDataTooLarge). The limit, one for both directions, is the connection's
//     (WithBufferLimit, 1 MiB), raised by the route's request_body_buffer_limit
//     (WithRequestBodyBufferLimit) once the route is matched, or, modelling Envoy before
//     envoyproxy/envoy#42607 (WithRouteBufferLimitAtRouter), once the request headers reach
//     the router.
//     Maps and buffers are reachable only in their phase (BadArgument elsewhere, read-only in
//     on_log with NotFound for a missing map); proxy_continue_stream clears them. The request
//     headers go once the filter continues them (context.cc Context::decodeHeaders sets
//     request_headers_ to nullptr on Continue; getMap and getConstMap then answer nullptr,
//     and addHeaderMapValue, replaceHeaderMapValue, removeHeaderMapValue, setHeaderMapPairs
//     and getHeaderMapValue BadArgument), for the downstream filter and an upstream filter
//     alike: a request-header write from on_response_* is BadArgument. continue,
//     close and local replies are deferred until the callback returns; a local reply forces
//     stop. A close resets the stream before what its callback let through goes on (what
//     earlier callbacks let through has reached the client) and sets the details
//     wasm_close_stream only when none are set (Context::closeStream; cpp-host runs it in
//     DeferAfterCallActions at the end of the callback). A request-phase local reply runs the plugin's own response callbacks; a
//     response-phase one replaces the response (or resets the stream once headers went
//     downstream). All are no-ops from a root context. A downstream reset (ResetStream,
//     Exchange.Reset) still runs log → done → delete, as Envoy's doDeferredStreamDestroy
//     does, drops what was pending and forgets the stream; its callouts complete on the root.
//   - Stream info: response.flags (Envoy's legacy bitmask, ResponseFlags, 8-byte LE) and
//     response.code_details are readable in every stream callback and in on_log, with
//     Envoy's values: via_upstream for an upstream response (the router sets it before
//     encodeHeaders), the router's own flag and details for the replies it makes when the
//     upstream cannot answer (NC cluster_not_found, UH no_healthy_upstream, connection
//     failures UF and resets UC/UR upstream_reset_before/after_response_started{...},
//     UT response_timeout and upstream_per_try_idle_timeout), the connection manager's (SI
//     stream_idle_timeout, DC downstream_remote_disconnect for a client that went away), the
//     filter manager's (request_payload_too_large, response_payload_too_large), the Wasm
//     filter's (wasm_fail_stream, wasm_close_stream), and a plugin's own local reply details
//     with whitespace made '_' (Context::sendLocalResponse).
//   - The router (exchanges): request headers, body and trailers flow through the filter as
//     they arrive and what passes goes on to the upstream; the upstream's answer flows back
//     chunk by chunk and what passes reaches the client as it does. The router's own replies
//     go through Envoy's sendLocalReply: through the filter before any response, replacing
//     response headers the filter holds, a reset once headers went downstream.
//   - Shared data per vm_id with one process-global CAS counter (cas 0 unconditional, a
//     non-zero cas on a missing key succeeds); queues whose last registrant is notified,
//     asynchronously, once per enqueue; ticks per VM root; callouts owned by the root
//     context (:method, :path and :authority present — empty values are sent, as
//     Context::httpCall checks only headers().Path(), Method() and Host() against nullptr —,
//     0 = no timeout, failure = zero counts and BrokenConnection "reset", a timeout answers
//     the async client's 504).
//   - Properties (Context::getProperty): a path's segments are split on NUL and one
//     trailing NUL ends the path, so the C++ SDK's form, which terminates every segment
//     ("xds\0node\0metadata\0"), reads as the Go SDK's. Envoy ≥ 1.33's names: the
//     top-level xDS names (node, route_metadata, cluster_name, ...) are gone, under xds.*.
//   - Foreign functions (source/extensions/common/wasm/foreign.cc): compress and uncompress
//     are zlib (the bytes compress answers may differ from C zlib's; any zlib decoder reads
//     them); clear_route_cache clears a downstream stream's route cache (an upstream filter's
//     or a root context's call clears nothing, Ok); set_envoy_filter_state
//     (Context::setEnvoyFilterState) parses its SetEnvoyFilterStateArguments (BadArgument),
//     looks the key's ObjectFactory up (NotFound without one: hostsim registers only
//     envoy.network.upstream_server_name) and stores the object in the stream info's filter
//     state (NotFound from a root context). wasm.spillway_target, which Spillway's routes
//     read, has no factory in Envoy, so the filter writes it with proxy_set_property. Not
//     modelled (NotFound, as for an unregistered name, unless a test registers one with
//     WithForeignFunction, which takes precedence over the built-ins): declare_property,
//     expr_create/expr_evaluate/expr_delete (CEL) and verify_signature/sign.
//   - WASI: Envoy 1.33's set by default (poll_oneoff and fd_fdstat_set_flags answer ENOSYS,
//     so a Go runtime timer kills the guest with "poll_oneoff failed"), Envoy ≤ 1.32,
//     cpp-host head (#533) and wazero's full WASI.
//   - Memory handed over: the guest's allocator is called for every non-empty answer and
//     the data written at the address it returned; an allocator that returns 0 fails the
//     call with InvalidMemoryAccess (cpp-host include/proxy-wasm/wasm.h, allocMemory and
//     copyToPointerSize). WithForeignAddresses breaks this on purpose, for tests of a
//     guest's defences: the data goes 8 bytes past the block the allocator returned.
//   - Failure: a trap (or a Go fatal error) comes back as a *TrapError naming the VM and the
//     callback; the VM is failed and later streams follow the FailurePolicy, as do streams
//     still live on it at their next callback, which does not run (cpp-host
//     CHECK_FAIL_HTTP: FAIL_OPEN goes on without the filter, otherwise the stream fails
//     once, 503 wasm_fail_stream) — with an upstream filter the downstream stream and the
//     try's share the VM. The default policy is the one Spillway's generated Envoy
//     configuration sets, FAIL_RELOAD (DefaultFailurePolicy): the next stream on the VM
//     gets a fresh instance. VM.Health reports a VM's failure and counts its failures and
//     replacements.
//
// Known simplifications: plugins after the first (WithPlugin) share its VMs but each is the
// Wasm filter of a filter chain of its own — two Wasm filters in one chain are not modelled;
// no bootstrap (singleton) extensions; no gRPC calls or TCP filters;
// FAIL_RELOAD has no back-off (Envoy tries a replacement at most once per reload_config
// back-off, at least 1 s by default, answering 503 wasm_fail_stream in between and
// counting vm_reload_backoff); guest stdout/stderr are logged line by line (cpp-host logs
// each fd_write as it comes); a buffered upstream (WithUpstream) is called once the whole request
// has passed the filter (a streaming one, WithStreamingUpstream, as soon as the headers did,
// like Envoy's router); no hedging or shadowing; one route (one retry policy, one
// max_retries breaker per Host), whose cluster the upstream function picks unless
// WithRouteCluster models the route's cluster specifier.
//
// # Plugins sharing a VM
//
// WithPlugin adds another plugin configuration (PluginConfig: name, root_id, configuration)
// on the module's vm_config, as WithUpstreamFilter adds the upstream filter's: Envoy keeps one
// VM per worker per vm key (cpp-host makeVmKey: vm_id, VM configuration, code) and in it one
// root context per plugin key (PluginBase::key(): root_id and configuration; WasmBase::start
// keeps root_contexts_ by it), so two filters with the same root_id and different
// configurations get two roots. On every VM the first plugin starts first, then WithPlugin's
// in order, then the upstream filter, each with its own canary first; each root answers its
// own plugin_name and plugin_root_id and has its own ticks, callouts (answered on it) and
// queue registrations (notified on it). A Request whose Plugin names one goes through its
// filter; the proxytest-shaped calls and StartStream use the first plugin's.
//
// # Expectations written for a real Envoy
//
// The proxy-wasm Go SDK's end-to-end suite (its examples run in Envoy, asserting logs and
// responses) is replayed in sdkexamples_test.go, over a guest that does what each example
// does (testdata/guests/sdkexamples); its doc comment lists the examples covered, the
// assertions, and what is left out. Envoy's own Wasm filter tests
// (test/extensions/filters/http/wasm/wasm_filter_test.cc, with its C++ test guest) drive the
// filter through mocks; these of them hostsim cannot express:
//
//   - gRPC calls and streams (GrpcCall*, GrpcStream*): hostsim's proxy_grpc_* answer
//     Unimplemented.
//   - CEL: the Metadata case's expressions (expr_* foreign functions) and typed
//     declare_property state; VerifySignature (verify_signature, BoringSSL).
//   - METADATA frames: the decodeMetadata/encodeMetadata steps of AllHeadersAndTrailers and
//     AllHeadersAndTrailersNotStarted (hostsim's streams carry no METADATA frames).
//   - 1xx headers: encode1xxHeaders (HeadersOnlyRequestHeadersOnlyWithEnvVars); hostsim's
//     upstreams answer one final response.
//   - Stream-info and cluster state hostsim does not model: dynamic metadata, route,
//     cluster and upstream host metadata (Property, ClusterMetadata; hostsim answers
//     configured properties instead), the connection id, request duration.
//   - What only the mocks see: calls on the decoder and encoder callbacks the guest cannot
//     observe (beyond clearRouteCache's count, which routing reads here), a Context driven
//     outside a stream's lifecycle, the null VM and the Rust test guests.
//
// # Differences from the SDK's proxytest
//
// Where proxytest is not Envoy-faithful, hostsim follows Envoy: shared-data CAS values come
// from one process-global counter (proxytest counts per key and rejects cas 0 on an existing
// key); InitializeHttpContext only allocates the id (proxy_on_context_create runs with the
// request headers); maps and buffers outside their phase answer BadArgument or NotFound
// (proxytest answers from whatever it holds); body callbacks are held back while the headers
// are paused; CallOn* return the effective action (Pause after a local reply); a
// request-phase local reply runs the plugin's own response callbacks; queue notifications
// are asynchronous; callouts are answered on the root context; metric ids carry the metric
// type in their low bits.
//
// # Driving
//
// A Host is one simulated Envoy process. Tests call the proxytest-shaped methods
// (StartPlugin, InitializeHttpContext, CallOnRequestHeaders, ..., CompleteHttpContext,
// GetSentLocalResponse, CallOnHttpCallResponse, Tick, GetCounterMetric, GetInfoLogs, ...) on
// worker 0 through the Host, or on any VM; hostsimtest wraps them in testing.TB helpers with
// proxytest's exact signatures. Time is virtual by default: Advance moves it, firing ticks,
// callout deliveries, timeouts and scheduled stream parts in order, and drives the guest's
// time.Now(). WithRealClock makes the host run its own timers and answer callouts and
// upstreams on goroutines, for `hostsim serve`. A Host is safe for concurrent use: each VM
// is a "thread" whose calls are serialized, and process-wide state is locked. The library
// has no package-level state; share a Runtime to compile each module once.
//
// # Instrumentation
//
// Each VM counts the guest's host calls per function — every env.proxy_* function and
// every function of hostsim's WASI — with one atomic add per call: VM.HostCalls and
// Host.HostCalls (the sum over every VM the Host made, canary and base VM included) return
// HostCallCounts, whose SharedData, Proxy, WASI and Total add them up; ResetHostCalls zeroes
// them, and HostCallCounts.Sub gives a window without a reset. A call refused in a
// restricted phase counts; in the WASIWazero mode wazero's WASI functions are not counted.
// VM.CallExport calls a guest export outside the ABI like a root callback (proxy_*
// callbacks, the allocator and start-up functions are refused). VM.GuestHeapAllocs and
// Host.GuestHeapAllocs read the guest Go heap's cumulative allocation count from the
// spillway_heap_allocs export that Spillway's ABI bridge adds to every module it builds
// (runtime.MemStats.Mallocs, exact); a module without it gives an error wrapping
// ErrNoExport, never 0. The filter benchmarks (plugin/bench_test.go) are built on these.
//
// # Exchanges: whole requests through the filter and the router
//
// RunHTTP (or StartHTTP and Exchange.Wait) drives a Request through a worker, the upstream
// (WithUpstream's UpstreamFunc) and back. For scenario tests on the virtual clock:
//
//   - Request.BodyChunks with Request.ChunkDelays: the request body arrives in several
//     chunks at given virtual delays; UpstreamRequest.Body is what reached the upstream, byte
//     for byte, and UpstreamRequest.BodyChunks the chunks it passed the filter in.
//   - UpstreamResponse.BodyChunks with ChunkDelays: SSE pacing, each chunk delivered to the
//     filter at its virtual time; UpstreamResponse.Delay delays the headers.
//   - UpstreamResponse.Reset: an upstream reset after the chunks (UpstreamReset.After
//     later); an UpstreamFunc error of ErrClusterNotFound, ErrNoHealthyUpstream or an
//     *UpstreamReset is a failure before the response (the router's 503 with Envoy's body,
//     flag and details).
//   - WithRouteTimeout and WithUpstreamIdleTimeout: Envoy's route timeout and per-try idle
//     timeout (504 "upstream request timeout", flag UT, or a reset mid-stream).
//   - WithStreamIdleTimeout: the connection manager's stream idle timeout (stream_idle_timeout,
//     or the route's idle_timeout): after that long without an event either way, 408 (the
//     client's request incomplete) or 504 "stream timeout", flag SI, details
//     stream_idle_timeout, or a reset once response headers went out.
//   - Request.ResetAfter, or Exchange.Reset / ResetBy at any point: a client that goes
//     away mid-request or mid-response (flag DC, or DR for DownstreamStreamReset); the
//     upstream's context is cancelled.
//   - Response.Received: everything that reached the client, in order, with virtual
//     timestamps (ClientHeaders, ClientData, ClientTrailers, ClientEnd, ClientReset);
//     Response.TimeToFirstByte and TimeToFirstData; Response.Flags and Details, what on_log
//     read. Exchange.Next reads the same events one at a time, moving the virtual clock, so a
//     test can act between two SSE events.
//
// Callouts are answered by a CalloutHandler (WithCalloutHandler) or by the test
// (CallOnHttpCallResponse).
//
// # Router retries and upstream filters
//
// WithRetryPolicy gives the route a retry policy (RetryPolicy, converted to
// internal/envoy/retry's Policy and validated by New: an unknown retry_on name, a status
// outside 100–599 or a max_interval under the base is ErrInvalidRetryPolicy), WithMaxRetries
// the cluster's max_retries breaker (default 3, shared by the Host's requests), and
// WithUpstreamFilter runs the same module as the cluster's upstream HTTP filter too
// (HttpProtocolOptions.http_filters = [wasm, upstream_codec], Envoy ≥ 1.31). Without them
// the exchanges are as before: one try, no filter on it. With them:
//
//   - The second plugin shares each VM (one VM per worker per vm key) with a root context
//     of its own: cpp-host getOrCreateThreadLocalPlugin → WasmBase::start (a new root;
//     ContextBase::onStart runs proxy_on_context_create and proxy_on_vm_start for it, the
//     VM configuration again) → WasmBase::configure (ContextBase::onConfigure,
//     proxy_on_configure with its configuration), after a canary of its own
//     (WasmHandleBase::canary is cached per plugin key). Its contexts answer plugin_root_id
//     and plugin_name with its root id; its ticks, callouts and queue registrations belong
//     to its root. The downstream plugin starts first on each VM: the order Envoy loads a
//     listener's and a cluster's filters was not verified. allow_on_headers_stop_iteration
//     is per filter config (the Wasm filter's PluginConfig); WithoutUpstreamAllowOnHeadersStopIteration
//     takes it from the upstream filter alone, whose headers Pause is then stop-all.
//   - At the request headers the router reads and removes the x-envoy-* retry headers the
//     downstream filter set (RetryStateImpl::create, FilterUtility::finalTimeout) from the
//     shared request header map, and makes the request's retry state; every try then
//     (Filter::decodeHeaders, Filter::doRetry) gets a new upstream filter stream — a new Wasm
//     context, created at the try's request headers (UpstreamRequest's constructor builds
//     its UpstreamFilterManager) — that reads and edits the router's one request header map
//     (acceptHeadersFromRouter passes *parent_.downstreamHeaders(): its edits persist into
//     later tries, reach the upstream and are what the downstream filter's on_log reads),
//     with x-envoy-attempt-count written first when IncludeAttemptCount, and its own copy
//     of the buffered body (Filter::doRetry's Buffer::OwnedImpl copy: body edits do not
//     persist). The upstream (WithUpstream, WithStreamingUpstream) is called once per try
//     with what left the upstream filter; UpstreamRequest.Attempt numbers it, Response.Tries
//     lists every try's.
//   - A try's response goes through the upstream filter first (its encode path runs before
//     UpstreamRequest::decodeHeaders → Filter::onUpstreamHeaders), then the retry state
//     decides on the headers it let through — also when it held them and released them
//     later (the held body is then dropped with the try, as Envoy ≥ 1.37 does after
//     envoyproxy/envoy#41879; earlier releases' undefined behaviour is not modelled). A
//     retried try never reaches the downstream filter; its upstream request is reset (its
//     context cancelled) and its upstream filter gets on_done and on_delete at once
//     (UpstreamRequest::cleanUp → destroyFilters → Context::onDestroy), never on_log
//     (nothing in UpstreamRequest calls the upstream filter manager's log()). After the
//     back-off, drawn on the Host's clock (WithRetryRandom sets the source), the next try
//     starts. The try the router passes on streams to the downstream filter as before.
//   - Resets (an UpstreamFunc's *UpstreamReset or other error, UpstreamCall.Fail, a
//     response's Reset while the upstream filter still holds its headers) and per-try
//     timeouts (RetryPolicy.PerTryTimeout, armed once the try's whole request went; the
//     per-try idle timeout too) are outcomes the retry state may retry
//     (Filter::onUpstreamReset, onPerTryTimeoutCommon); not retried, the router answers 503
//     ("retried and the latest reset reason: ..." once it retried) or 504
//     upstream_per_try_timeout, with the retry state's URX or UO. A per-try timeout after the
//     response went downstream is ignored. The route timeout spans all tries and back-offs.
//   - The retry buffer limit (RetryPolicy.BufferLimit, else retry.BufferLimit over
//     WithBufferLimit and WithRequestBodyBufferLimit): past it the router gives up retrying
//     silently, or answers 507 if a back-off is running (Filter::decodeData); a body the
//     downstream filter buffered and released with a continue is counted twice
//     (envoyproxy/envoy#30613, open for 1.36; its fix envoyproxy/envoy#44346 not modelled).
//   - An upstream filter's local reply goes to the downstream filter manager
//     (upstream_request.cc UpstreamFilterManager::sendLocalReply → parent_.callbacks()->
//     sendLocalReply: "Local replies will not be seen by upstream filters"): final, never
//     retried, seen by the downstream filter as its own local reply would be; its failure
//     under FAIL_CLOSED (503 wasm_fail_stream) goes the same way — inferred, as is the
//     upstream chain's buffer overflow, which was not verified. proxy_close_stream from it
//     resets the downstream stream (UpstreamRequestFilterManagerCallbacks::resetStream: a
//     filter's LocalReset "should force reset the stream"), no retry.
//   - Properties of an upstream filter's stream read its own header maps but the
//     downstream stream's stream info (UpstreamFilterManager::streamInfo returns the
//     router's callbacks()->streamInfo()): response.flags, response.code_details and filter
//     state, so proxy_set_property from either filter is read by the other; its own details
//     (a close, a local reply) are mirrored onto the downstream stream when they end it.
//     upstream.request_attempt_count is the try's number (the router sets the attempt count
//     before each try), as an 8-byte little-endian integer like the other integer attributes
//     (its CEL type is inferred from expr/context.h's name only).
//
// # Route cluster and cross-cluster retries
//
// WithRouteCluster gives the route a cluster specifier (RouteCluster: cluster_header, or
// the matcher cluster specifier plugin with one exact_match_map over a request header or a
// filter-state key, and on_no_match); each try's UpstreamRequest.Cluster (UpstreamCall.
// Cluster) is its cluster. Modelled from Envoy's source:
//
//   - The first pick: the connection manager matches the route on the client's request
//     headers before any filter runs (ActiveStream::decodeHeaders → refreshCachedRoute), and
//     the router uses that route unless a filter cleared the route cache: a downstream Wasm
//     filter's request-header write (add, replace, remove, set pairs: context.cc
//     addHeaderMapValue and the others call onHeadersModified, which clears the route
//     cache; its body in context.h was not re-read for this model, nor whether ABI 0.1.0
//     differs) or clear_route_cache (foreign.cc). Then the router resolves it again on the
//     headers and filter state as they are when the headers reach it. Filter state alone
//     does not re-route. An upstream filter clears nothing (its callbacks have no
//     downstream callbacks).
//   - cluster_header: the header's first value (HeaderClusterSpecifierPlugin::route), held
//     in a DynamicRouteEntry whose name never changes. The matcher: MatcherRouteEntry
//     starts without a cluster and evaluates the tree (MatcherRouteEntry::
//     refreshRouteCluster); the request-header input joins a header's values with ","
//     (HttpHeadersDataInputBase::get), the filter-state input reads the object's
//     serializeAsString (FilterStateInput), and proxy_set_property(["name"], v) is key
//     "wasm.name" holding the raw v (Context::setProperty, CelState). No match keeps the
//     cluster, so a first pick without a match has none.
//   - A cluster is known when declared with WithCluster (the cluster manager's clusters,
//     the same list proxy_http_call checks), or, when none is declared, any non-empty
//     name. An unknown first pick is the router's 503 NC cluster_not_found
//     (Filter::decodeHeaders).
//   - RetryPolicy.RefreshClusterOnRetry (refresh_cluster_on_retry, Envoy ≥ 1.39,
//     envoyproxy/envoy#44719): Filter::doRetry refreshes the route's cluster
//     (downstreamCallbacks()->refreshRouteCluster()) on the router's request headers and the
//     downstream stream info's filter state, which the first try's upstream filter may have
//     written at its response; then the retry looks the cluster up, and a missing one is
//     sendNoHealthyUpstreamResponse (503 "no healthy upstream", UH), the request's end. The
//     order — the attempt count set on the stream info, the refresh, the lookup, then
//     x-envoy-attempt-count written into the headers, so a matcher on that header sees the
//     previous try's count — is the pre-1.39 doRetry's (attempt count, cluster lookup,
//     attempt header) with the refresh placed as PR #44719's review shows it; the merged
//     1.39 doRetry was not read, nor what it does for a missing cluster beyond the older
//     lookup's answer (a flag or stat of its own is not modelled). Without the flag, and
//     with cluster_header, every try goes to the first pick's cluster.
//   - What the retry keeps from the first cluster: the retry state and its max_retries
//     breaker (one per Host here; Envoy creates retry_state_ on the first cluster in
//     decodeHeaders, and whether 1.39 rebuilds it on a refresh was not verified), the
//     transport socket options and auto_sni (not modelled: no TLS). The body is a fresh copy
//     per try as for every retry. Every cluster runs the same upstream filter
//     (WithUpstreamFilter): per-cluster http_filters and plugin configurations are not
//     modelled, nor xds.cluster_name for the try.
//   - WithRouteResponseHeadersToRemove is the route's response_headers_to_remove: applied to
//     the response of the try the router passes on, after the retry decision read it and
//     before the downstream filter (router.cc Filter::onUpstreamHeaders: shouldRetryHeaders,
//     then route_entry_->finalizeResponseHeaders, then encodeHeaders). The router's own
//     replies (no healthy upstream, a reset) are not changed here; Envoy may apply the
//     route's response headers to them too (through the modify_headers callback it gives
//     sendLocalReply), which was not verified.
//
// Not modelled: hedging, retry host predicates and priorities (every try goes to the same
// upstream function), rate_limited_retry_back_off, auto_host_rewrite's per-try :authority,
// x-envoy-overloaded on the router's reply to an overflow reset, Envoy ≤ 1.36's
// envoyproxy/envoy#41879, the synchronous-overflow context without on_done
// (envoyproxy/envoy#47544), and a try's reset-before-request "sent" flag beyond "the
// upstream was called and the reset was not a connection failure".
//
// A front end (hostsim serve) uses StartStream instead: it sends the body with
// Exchange.SendData as the client does and reads what reaches the client with Next, and a
// streaming upstream (WithStreamingUpstream, an UpstreamCall per request) is opened as soon
// as the headers pass the filter. Both ways are flow-controlled like Envoy's watermarks: with
// a real clock SendData waits while the stream holds a buffer limit's worth of request data
// it cannot pass on (headers stopped without the option, an upstream not reading), and
// UpstreamCall.Data waits while the client has not taken that much, so a paused or slow
// stream is never read without bound.
//
// The self-tests' guests live in testdata/guests and are built into build/guests by
// `go run ./hostsim/internal/buildguests` (part of `make build`).
package hostsim
