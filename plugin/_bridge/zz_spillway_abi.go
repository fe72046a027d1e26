// Spillway's proxy-wasm ABI bridge for the standard Go toolchain.
//
// This file is added into github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/internal
// at build time with `go build -overlay` (see plugin/wasmbuild). It is never compiled
// natively: the build tag keeps it out of `go test`, where the SDK's proxytest host is
// registered instead.
//
// Why it is needed: the SDK v0.24.0 declares its host imports and callback exports with
// TinyGo's `//export` comments, which the gc toolchain ignores. Under gc the SDK compiles
// abi_hostcalls_mock.go, whose Proxy* functions forward to whatever ProxyWasmHost was
// registered with RegisterMockWasmHost. This file registers a host that forwards each call
// to the real `env.proxy_*` import (sizes narrowed to the ABI's i32, `**byte` out-params
// read back from a u32 address), and wraps the SDK's lowercase callbacks with
// `//go:wasmexport` so Envoy can call them.
//
// Rules this file keeps:
//   - no `//go:noescape` on any import: the host may call back into the guest
//     (proxy_on_memory_allocate) during an import and the goroutine stack can move;
//   - buffers the host asks for are pinned until the guest has read their address back,
//     so a GC that runs inside a nested allocation cannot free them (plugin/hostabi), and
//     an address the host writes back that the allocator did not hand out is refused;
//   - no goroutines, no timers, no allocation beyond the buffers the host asks for (and a
//     panic's report);
//   - no panic leaves an export: a panic traps the VM, and under Envoy's WASI the Go
//     runtime's report of it dies in poll_oneoff ("fatal error: ... poll_oneoff"), hiding
//     the panic. Every export recovers (see "Panics at the ABI edge" below).
//
// Besides the ABI it exports two names of its own: the bridge marker and a heap-allocation
// counter for benchmarks (spillway_heap_allocs).

//go:build wasip1

package internal

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
)

func init() {
	// The SDK's registration takes a mutex that is meant to be released by tests; on wasm
	// there is a single thread and nothing else registers a host, so it stays held.
	RegisterMockWasmHost(abiHost{})
}

// spillwayBridgeMarker is exported so a built module can be checked for the bridge: a build
// that silently lost the overlay still links, but exports only _initialize.
//
//go:wasmexport spillway_abi_bridge_v1
func spillwayBridgeMarker() uint32 { return 1 }

// heapStats receives the runtime's statistics for spillwayHeapAllocs: a package-level
// variable, so reading them allocates nothing.
var heapStats runtime.MemStats

// spillwayHeapAllocs is benchmark instrumentation (hostsim's GuestHeapAllocs; Envoy never
// calls it): the cumulative number of heap objects this VM's Go runtime has allocated, tiny
// allocations included — runtime.MemStats.Mallocs, what `go test -benchmem` reports as
// allocs/op. The difference of two readings is the allocations made in between, exactly:
// ReadMemStats flushes every allocation cache first, whereas runtime/metrics'
// /gc/heap/allocs:objects counts a cached span's allocations only when the span leaves the
// cache, so a per-request difference could be off by a span's worth. Reading stops the
// world (a single goroutine here, so the pause is short), allocates nothing and makes no
// proxy-wasm host call; the runtime reads the monotonic clock (WASI clock_time_get) to time
// the pause.
//
//go:wasmexport spillway_heap_allocs
func spillwayHeapAllocs() uint64 {
	runtime.ReadMemStats(&heapStats)
	return heapStats.Mallocs
}

// ---------------------------------------------------------------------------------------
// Memory handed to the host: proxy_on_memory_allocate and the pins that keep what it hands
// out alive until the guest reads the address back live in Spillway's plugin/hostabi,
// which also serves the filter's own host calls out of a reused arena; hostabi.Claim turns
// an address the host wrote back into a pointer, or refuses it.
// ---------------------------------------------------------------------------------------

// Out-params written by the host. Package-level, not stack slots: the goroutine stack may
// move during a nested proxy_on_memory_allocate, and a global costs no allocation.
var (
	retAddr uint32
	retSize int32
)

// ret copies the host-written (address, size) pair into the SDK's out-params. An address
// the allocator did not hand out with room for the size is refused: the call fails with
// InternalFailure (the SDK's types.ErrorInternalFailure) and a warning says why.
func ret(st Status, data **byte, size *int) Status {
	addr, n := retAddr, retSize
	retAddr, retSize = 0, 0
	if st != StatusOK {
		hostabi.Claim(0, 0)
		return st
	}
	p, ok := hostabi.Claim(addr, n)
	if !ok {
		logString(LogLevelWarn, fmt.Sprintf("spillway: bridge: refused the host's answer at 0x%x (%d bytes): "+
			"proxy_on_memory_allocate did not hand that memory out for it", addr, n))
		return StatusInternalFailure
	}
	*data, *size = p, int(n)
	return st
}

// logString logs msg through proxy_log. (The SDK's module says go 1.19, before
// unsafe.StringData: the copy is made on paths that report a fault, never on a hot one.)
func logString(level LogLevel, msg string) {
	if msg == "" {
		return
	}
	b := []byte(msg)
	hostLog(level, &b[0], int32(len(b)))
}

// ---------------------------------------------------------------------------------------
// Host imports: proxy-wasm ABI 0.2.x with i32 sizes.
// ---------------------------------------------------------------------------------------

//go:wasmimport env proxy_log
func hostLog(level LogLevel, msg *byte, msgSize int32) Status

//go:wasmimport env proxy_set_property
func hostSetProperty(path *byte, pathSize int32, value *byte, valueSize int32) Status

//go:wasmimport env proxy_get_property
func hostGetProperty(path *byte, pathSize int32, retData *uint32, retSize *int32) Status

//go:wasmimport env proxy_send_local_response
func hostSendLocalResponse(status uint32, details *byte, detailsSize int32, body *byte, bodySize int32,
	headers *byte, headersSize int32, grpcStatus int32) Status

//go:wasmimport env proxy_get_shared_data
func hostGetSharedData(key *byte, keySize int32, retData *uint32, retSize *int32, retCas *uint32) Status

//go:wasmimport env proxy_set_shared_data
func hostSetSharedData(key *byte, keySize int32, value *byte, valueSize int32, cas uint32) Status

//go:wasmimport env proxy_register_shared_queue
func hostRegisterSharedQueue(name *byte, nameSize int32, retID *uint32) Status

//go:wasmimport env proxy_resolve_shared_queue
func hostResolveSharedQueue(vmID *byte, vmIDSize int32, name *byte, nameSize int32, retID *uint32) Status

//go:wasmimport env proxy_dequeue_shared_queue
func hostDequeueSharedQueue(queueID uint32, retData *uint32, retSize *int32) Status

//go:wasmimport env proxy_enqueue_shared_queue
func hostEnqueueSharedQueue(queueID uint32, value *byte, valueSize int32) Status

//go:wasmimport env proxy_get_header_map_value
func hostGetHeaderMapValue(mapType MapType, key *byte, keySize int32, retData *uint32, retSize *int32) Status

//go:wasmimport env proxy_add_header_map_value
func hostAddHeaderMapValue(mapType MapType, key *byte, keySize int32, value *byte, valueSize int32) Status

//go:wasmimport env proxy_replace_header_map_value
func hostReplaceHeaderMapValue(mapType MapType, key *byte, keySize int32, value *byte, valueSize int32) Status

//go:wasmimport env proxy_remove_header_map_value
func hostRemoveHeaderMapValue(mapType MapType, key *byte, keySize int32) Status

//go:wasmimport env proxy_get_header_map_pairs
func hostGetHeaderMapPairs(mapType MapType, retData *uint32, retSize *int32) Status

//go:wasmimport env proxy_set_header_map_pairs
func hostSetHeaderMapPairs(mapType MapType, data *byte, size int32) Status

//go:wasmimport env proxy_get_buffer_bytes
func hostGetBufferBytes(bufferType BufferType, start int32, maxSize int32, retData *uint32, retSize *int32) Status

//go:wasmimport env proxy_set_buffer_bytes
func hostSetBufferBytes(bufferType BufferType, start int32, maxSize int32, data *byte, size int32) Status

//go:wasmimport env proxy_continue_stream
func hostContinueStream(streamType StreamType) Status

//go:wasmimport env proxy_close_stream
func hostCloseStream(streamType StreamType) Status

//go:wasmimport env proxy_http_call
func hostHttpCall(upstream *byte, upstreamSize int32, headers *byte, headersSize int32, body *byte, bodySize int32,
	trailers *byte, trailersSize int32, timeoutMs uint32, retToken *uint32) Status

//go:wasmimport env proxy_call_foreign_function
func hostCallForeignFunction(name *byte, nameSize int32, args *byte, argsSize int32, retData *uint32, retSize *int32) Status

//go:wasmimport env proxy_set_tick_period_milliseconds
func hostSetTickPeriodMilliseconds(periodMs uint32) Status

//go:wasmimport env proxy_set_effective_context
func hostSetEffectiveContext(contextID uint32) Status

//go:wasmimport env proxy_done
func hostDone() Status

//go:wasmimport env proxy_define_metric
func hostDefineMetric(metricType MetricType, name *byte, nameSize int32, retID *uint32) Status

//go:wasmimport env proxy_increment_metric
func hostIncrementMetric(metricID uint32, offset int64) Status

//go:wasmimport env proxy_record_metric
func hostRecordMetric(metricID uint32, value uint64) Status

//go:wasmimport env proxy_get_metric
func hostGetMetric(metricID uint32, retValue *uint64) Status

// ---------------------------------------------------------------------------------------
// The SDK's ProxyWasmHost, forwarding to the imports.
// ---------------------------------------------------------------------------------------

type abiHost struct{}

var _ ProxyWasmHost = abiHost{}

func (abiHost) ProxyLog(level LogLevel, msg *byte, msgSize int) Status {
	return hostLog(level, msg, int32(msgSize))
}

func (abiHost) ProxySetProperty(path *byte, pathSize int, value *byte, valueSize int) Status {
	return hostSetProperty(path, int32(pathSize), value, int32(valueSize))
}

func (abiHost) ProxyGetProperty(path *byte, pathSize int, data **byte, size *int) Status {
	return ret(hostGetProperty(path, int32(pathSize), &retAddr, &retSize), data, size)
}

func (abiHost) ProxySendLocalResponse(status uint32, details *byte, detailsSize int, body *byte, bodySize int,
	headers *byte, headersSize int, grpcStatus int32) Status {
	return hostSendLocalResponse(status, details, int32(detailsSize), body, int32(bodySize),
		headers, int32(headersSize), grpcStatus)
}

func (abiHost) ProxyGetSharedData(key *byte, keySize int, data **byte, size *int, cas *uint32) Status {
	return ret(hostGetSharedData(key, int32(keySize), &retAddr, &retSize, cas), data, size)
}

func (abiHost) ProxySetSharedData(key *byte, keySize int, value *byte, valueSize int, cas uint32) Status {
	return hostSetSharedData(key, int32(keySize), value, int32(valueSize), cas)
}

func (abiHost) ProxyRegisterSharedQueue(name *byte, nameSize int, id *uint32) Status {
	return hostRegisterSharedQueue(name, int32(nameSize), id)
}

func (abiHost) ProxyResolveSharedQueue(vmID *byte, vmIDSize int, name *byte, nameSize int, id *uint32) Status {
	return hostResolveSharedQueue(vmID, int32(vmIDSize), name, int32(nameSize), id)
}

func (abiHost) ProxyDequeueSharedQueue(queueID uint32, data **byte, size *int) Status {
	return ret(hostDequeueSharedQueue(queueID, &retAddr, &retSize), data, size)
}

func (abiHost) ProxyEnqueueSharedQueue(queueID uint32, value *byte, valueSize int) Status {
	return hostEnqueueSharedQueue(queueID, value, int32(valueSize))
}

func (abiHost) ProxyGetHeaderMapValue(mapType MapType, key *byte, keySize int, data **byte, size *int) Status {
	return ret(hostGetHeaderMapValue(mapType, key, int32(keySize), &retAddr, &retSize), data, size)
}

func (abiHost) ProxyAddHeaderMapValue(mapType MapType, key *byte, keySize int, value *byte, valueSize int) Status {
	return hostAddHeaderMapValue(mapType, key, int32(keySize), value, int32(valueSize))
}

func (abiHost) ProxyReplaceHeaderMapValue(mapType MapType, key *byte, keySize int, value *byte, valueSize int) Status {
	return hostReplaceHeaderMapValue(mapType, key, int32(keySize), value, int32(valueSize))
}

func (abiHost) ProxyContinueStream(streamType StreamType) Status {
	return hostContinueStream(streamType)
}

func (abiHost) ProxyCloseStream(streamType StreamType) Status { return hostCloseStream(streamType) }

func (abiHost) ProxyRemoveHeaderMapValue(mapType MapType, key *byte, keySize int) Status {
	return hostRemoveHeaderMapValue(mapType, key, int32(keySize))
}

func (abiHost) ProxyGetHeaderMapPairs(mapType MapType, data **byte, size *int) Status {
	return ret(hostGetHeaderMapPairs(mapType, &retAddr, &retSize), data, size)
}

func (abiHost) ProxySetHeaderMapPairs(mapType MapType, data *byte, size int) Status {
	return hostSetHeaderMapPairs(mapType, data, int32(size))
}

func (abiHost) ProxyGetBufferBytes(bufferType BufferType, start int, maxSize int, data **byte, size *int) Status {
	return ret(hostGetBufferBytes(bufferType, int32(start), int32(maxSize), &retAddr, &retSize), data, size)
}

func (abiHost) ProxySetBufferBytes(bufferType BufferType, start int, maxSize int, data *byte, size int) Status {
	return hostSetBufferBytes(bufferType, int32(start), int32(maxSize), data, int32(size))
}

func (abiHost) ProxyHttpCall(upstream *byte, upstreamSize int, headers *byte, headersSize int, body *byte, bodySize int,
	trailers *byte, trailersSize int, timeoutMs uint32, token *uint32) Status {
	return hostHttpCall(upstream, int32(upstreamSize), headers, int32(headersSize), body, int32(bodySize),
		trailers, int32(trailersSize), timeoutMs, token)
}

func (abiHost) ProxyCallForeignFunction(name *byte, nameSize int, args *byte, argsSize int, data **byte, size *int) Status {
	return ret(hostCallForeignFunction(name, int32(nameSize), args, int32(argsSize), &retAddr, &retSize), data, size)
}

func (abiHost) ProxySetTickPeriodMilliseconds(periodMs uint32) Status {
	return hostSetTickPeriodMilliseconds(periodMs)
}

func (abiHost) ProxySetEffectiveContext(contextID uint32) Status {
	return hostSetEffectiveContext(contextID)
}

func (abiHost) ProxyDone() Status { return hostDone() }

func (abiHost) ProxyDefineMetric(metricType MetricType, name *byte, nameSize int, id *uint32) Status {
	return hostDefineMetric(metricType, name, int32(nameSize), id)
}

func (abiHost) ProxyIncrementMetric(metricID uint32, offset int64) Status {
	return hostIncrementMetric(metricID, offset)
}

func (abiHost) ProxyRecordMetric(metricID uint32, value uint64) Status {
	return hostRecordMetric(metricID, value)
}

func (abiHost) ProxyGetMetric(metricID uint32, value *uint64) Status {
	return hostGetMetric(metricID, value)
}

// ---------------------------------------------------------------------------------------
// Panics at the ABI edge. The filter recovers in its own callbacks; a panic that escapes
// them — in NewHttpContext, in the SDK's dispatch (a context it does not know), in code
// without a recover of its own — reaches the export, which recovers it: the panic's message
// and stack go to proxy_log at critical level, spillway_abi_panics_total counts it, and
// then
//   - a stream (HTTP or TCP context) passes through: this callback and every later one of
//     it continue without reaching the SDK, and proxy_on_log, proxy_on_done and
//     proxy_on_delete still reach it, under recovery, so what it held is given back;
//   - proxy_on_vm_start and proxy_on_configure report failure (the plugin does not start);
//   - a tick, a queue notification or a callout answer just ends; the stream a callout
//     answer was for passes through from then on. (Which direction a stream held paused
//     is the filter's to know: the filter's own recovers resume it, the bridge cannot.)
// ---------------------------------------------------------------------------------------

// passThrough holds the contexts a panic handed to the bridge; the value says whether the
// SDK still holds the context (it does unless its creation panicked), so that its end
// callbacks still reach the SDK.
var passThrough = map[uint32]bool{}

// panicMetric counts the panics recovered here (the filter counts its own in
// spillway_panics_total).
var panicMetric = []byte("spillway_abi_panics_total")

var (
	panicMetricID      uint32
	panicMetricDefined bool
)

// definePanicMetric defines the counter once: at VM start, so it reads 0 before any panic,
// or at the first panic if that failed.
func definePanicMetric() {
	if panicMetricDefined {
		return
	}
	if hostDefineMetric(MetricTypeCounter, &panicMetric[0], int32(len(panicMetric)), &panicMetricID) == StatusOK {
		panicMetricDefined = true
	}
}

// reportPanic logs and counts the panic r recovered in callback for contextID. It runs in
// the deferred call, so the stack is the panicking one.
func reportPanic(r any, callback string, contextID uint32) {
	logString(LogLevelCritical, fmt.Sprintf("spillway: panic in %s (context %d), recovered at the ABI edge: %v\n%s",
		callback, contextID, r, debug.Stack()))
	definePanicMetric()
	if panicMetricDefined {
		hostIncrementMetric(panicMetricID, 1)
	}
}

// sdkHolds reports whether the SDK has a stream context for id.
func sdkHolds(id uint32) bool {
	_, http := currentState.httpContexts[id]
	_, tcp := currentState.tcpContexts[id]
	return http || tcp
}

// passing reports whether the stream passes through (no lookup while none does).
func passing(id uint32) bool {
	if len(passThrough) == 0 {
		return false
	}
	_, ok := passThrough[id]
	return ok
}

// failOpen recovers a panic in a stream callback: the stream passes through from now on.
// Deferred directly, so recover sees the panic.
func failOpen(callback string, contextID uint32, action *types.Action) {
	if r := recover(); r != nil {
		reportPanic(r, callback, contextID)
		passThrough[contextID] = sdkHolds(contextID)
		*action = types.ActionContinue
	}
}

// recoverRoot recovers a panic in a root callback; ok, when given, becomes 0 (failure).
func recoverRoot(callback string, contextID uint32, ok *uint32) {
	if r := recover(); r != nil {
		reportPanic(r, callback, contextID)
		if ok != nil {
			*ok = 0
		}
	}
}

// recoverEnd recovers a panic in a stream's end callbacks; done, when given, becomes 1.
func recoverEnd(callback string, contextID uint32, done *uint32) {
	if r := recover(); r != nil {
		reportPanic(r, callback, contextID)
		if done != nil {
			*done = 1
		}
	}
}

// ---------------------------------------------------------------------------------------
// Exports: the proxy-wasm 0.2.0 callbacks, wrapping the SDK's handlers. Booleans from the
// host arrive as i32 (non-zero is true); booleans to the host leave as i32 0/1.
// ---------------------------------------------------------------------------------------

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

//go:wasmexport proxy_abi_version_0_2_0
func abiVersion() { proxyABIVersion() }

//go:wasmexport proxy_on_vm_start
func abiOnVMStart(rootContextID uint32, vmConfigSize uint32) (ok uint32) {
	definePanicMetric()
	defer recoverRoot("proxy_on_vm_start", rootContextID, &ok)
	return boolU32(bool(proxyOnVMStart(rootContextID, int(vmConfigSize))))
}

//go:wasmexport proxy_on_configure
func abiOnConfigure(rootContextID uint32, pluginConfigSize uint32) (ok uint32) {
	defer recoverRoot("proxy_on_configure", rootContextID, &ok)
	return boolU32(bool(proxyOnConfigure(rootContextID, int(pluginConfigSize))))
}

//go:wasmexport proxy_on_context_create
func abiOnContextCreate(contextID uint32, parentID uint32) {
	defer func() {
		if r := recover(); r != nil {
			reportPanic(r, "proxy_on_context_create", contextID)
			if parentID != 0 { // a stream: it passes through
				passThrough[contextID] = sdkHolds(contextID)
			}
		}
	}()
	proxyOnContextCreate(contextID, parentID)
}

//go:wasmexport proxy_on_new_connection
func abiOnNewConnection(contextID uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_new_connection", contextID, &action)
	return proxyOnNewConnection(contextID)
}

//go:wasmexport proxy_on_downstream_data
func abiOnDownstreamData(contextID uint32, size uint32, endOfStream uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_downstream_data", contextID, &action)
	return proxyOnDownstreamData(contextID, int(size), endOfStream != 0)
}

//go:wasmexport proxy_on_downstream_connection_close
func abiOnDownstreamConnectionClose(contextID uint32, peer types.PeerType) {
	if passing(contextID) {
		return
	}
	defer recoverEnd("proxy_on_downstream_connection_close", contextID, nil)
	proxyOnDownstreamConnectionClose(contextID, peer)
}

//go:wasmexport proxy_on_upstream_data
func abiOnUpstreamData(contextID uint32, size uint32, endOfStream uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_upstream_data", contextID, &action)
	return proxyOnUpstreamData(contextID, int(size), endOfStream != 0)
}

//go:wasmexport proxy_on_upstream_connection_close
func abiOnUpstreamConnectionClose(contextID uint32, peer types.PeerType) {
	if passing(contextID) {
		return
	}
	defer recoverEnd("proxy_on_upstream_connection_close", contextID, nil)
	proxyOnUpstreamConnectionClose(contextID, peer)
}

//go:wasmexport proxy_on_request_headers
func abiOnRequestHeaders(contextID uint32, count uint32, endOfStream uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_request_headers", contextID, &action)
	return proxyOnRequestHeaders(contextID, int(count), endOfStream != 0)
}

//go:wasmexport proxy_on_request_body
func abiOnRequestBody(contextID uint32, size uint32, endOfStream uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_request_body", contextID, &action)
	return proxyOnRequestBody(contextID, int(size), endOfStream != 0)
}

//go:wasmexport proxy_on_request_trailers
func abiOnRequestTrailers(contextID uint32, count uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_request_trailers", contextID, &action)
	return proxyOnRequestTrailers(contextID, int(count))
}

//go:wasmexport proxy_on_response_headers
func abiOnResponseHeaders(contextID uint32, count uint32, endOfStream uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_response_headers", contextID, &action)
	return proxyOnResponseHeaders(contextID, int(count), endOfStream != 0)
}

//go:wasmexport proxy_on_response_body
func abiOnResponseBody(contextID uint32, size uint32, endOfStream uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_response_body", contextID, &action)
	return proxyOnResponseBody(contextID, int(size), endOfStream != 0)
}

//go:wasmexport proxy_on_response_trailers
func abiOnResponseTrailers(contextID uint32, count uint32) (action types.Action) {
	if passing(contextID) {
		return types.ActionContinue
	}
	defer failOpen("proxy_on_response_trailers", contextID, &action)
	return proxyOnResponseTrailers(contextID, int(count))
}

//go:wasmexport proxy_on_http_call_response
func abiOnHttpCallResponse(rootContextID, token uint32, headers, bodySize, trailers uint32) {
	defer func() {
		if r := recover(); r != nil {
			reportPanic(r, "proxy_on_http_call_response", rootContextID)
			// The SDK made the caller's context the active one before its callback.
			if id := currentState.activeContextID; id != rootContextID && sdkHolds(id) {
				passThrough[id] = true
			}
		}
	}()
	proxyOnHttpCallResponse(rootContextID, token, int(headers), int(bodySize), int(trailers))
}

//go:wasmexport proxy_on_log
func abiOnLog(contextID uint32) {
	if held, ok := passThrough[contextID]; ok && !held {
		return
	}
	defer recoverEnd("proxy_on_log", contextID, nil)
	proxyOnLog(contextID)
}

//go:wasmexport proxy_on_done
func abiOnDone(contextID uint32) (done uint32) {
	if held, ok := passThrough[contextID]; ok && !held {
		return 1
	}
	defer recoverEnd("proxy_on_done", contextID, &done)
	return boolU32(proxyOnDone(contextID))
}

//go:wasmexport proxy_on_delete
func abiOnDelete(contextID uint32) {
	if held, ok := passThrough[contextID]; ok {
		delete(passThrough, contextID)
		if !held {
			return
		}
	}
	defer recoverEnd("proxy_on_delete", contextID, nil)
	proxyOnDelete(contextID)
}

//go:wasmexport proxy_on_queue_ready
func abiOnQueueReady(rootContextID, queueID uint32) {
	defer recoverRoot("proxy_on_queue_ready", rootContextID, nil)
	proxyOnQueueReady(rootContextID, queueID)
}

//go:wasmexport proxy_on_tick
func abiOnTick(rootContextID uint32) {
	defer recoverRoot("proxy_on_tick", rootContextID, nil)
	proxyOnTick(rootContextID)
}
