package hostsim

import "fmt"

// Status is a proxy-wasm host status code (proxy_wasm_common.h).
type Status uint32

// Status codes returned by the host functions.
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusBadExpression        Status = 5
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusResultMismatch       Status = 9
	StatusInternalFailure      Status = 10
	StatusBrokenConnection     Status = 11
	StatusUnimplemented        Status = 12
)

var statusNames = [...]string{"Ok", "NotFound", "BadArgument", "SerializationFailure", "ParseFailure",
	"BadExpression", "InvalidMemoryAccess", "Empty", "CasMismatch", "ResultMismatch", "InternalFailure",
	"BrokenConnection", "Unimplemented"}

// String names the status as the spec does.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint32(s))
}

// MapType selects a header map (proxy_get_header_map_*).
type MapType uint32

// Header map types.
const (
	MapRequestHeaders           MapType = 0
	MapRequestTrailers          MapType = 1
	MapResponseHeaders          MapType = 2
	MapResponseTrailers         MapType = 3
	MapGrpcReceiveInitial       MapType = 4
	MapGrpcReceiveTrailing      MapType = 5
	MapHTTPCallResponseHeaders  MapType = 6
	MapHTTPCallResponseTrailers MapType = 7
)

// BufferType selects a buffer (proxy_get_buffer_bytes).
type BufferType uint32

// Buffer types.
const (
	BufferRequestBody          BufferType = 0
	BufferResponseBody         BufferType = 1
	BufferDownstreamData       BufferType = 2
	BufferUpstreamData         BufferType = 3
	BufferHTTPCallResponseBody BufferType = 4
	BufferGrpcReceive          BufferType = 5
	BufferVMConfiguration      BufferType = 6
	BufferPluginConfiguration  BufferType = 7
	BufferCallData             BufferType = 8
)

// StreamType selects a direction (proxy_continue_stream, proxy_close_stream).
type StreamType uint32

// httpStream types.
const (
	StreamRequest    StreamType = 0
	StreamResponse   StreamType = 1
	StreamDownstream StreamType = 2
	StreamUpstream   StreamType = 3
)

// LogLevel is a proxy_log level.
type LogLevel uint32

// Log levels, trace to critical as Envoy maps them.
const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
	logLevels
)

var logLevelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

// String names the level.
func (l LogLevel) String() string {
	if l < logLevels {
		return logLevelNames[l]
	}
	return fmt.Sprintf("LogLevel(%d)", uint32(l))
}

// MetricType is a proxy_define_metric type.
type MetricType uint32

// Metric types.
const (
	MetricCounter   MetricType = 0
	MetricGauge     MetricType = 1
	MetricHistogram MetricType = 2
)

// String names the metric type.
func (t MetricType) String() string {
	switch t {
	case MetricCounter:
		return "counter"
	case MetricGauge:
		return "gauge"
	case MetricHistogram:
		return "histogram"
	}
	return fmt.Sprintf("MetricType(%d)", uint32(t))
}

// ABIVersion is the proxy-wasm ABI a module declares with its marker export.
type ABIVersion string

// ABI versions cpp-host recognises, by their marker exports.
const (
	ABI010 ABIVersion = "proxy_abi_version_0_1_0"
	ABI020 ABIVersion = "proxy_abi_version_0_2_0"
	ABI021 ABIVersion = "proxy_abi_version_0_2_1"
)

// FailurePolicy is what Envoy does with streams once a VM has failed (PluginConfig.failure_policy).
type FailurePolicy int

// Failure policies. The zero value is FAIL_CLOSED, as Envoy maps UNSPECIFIED.
const (
	// FailClosed answers every later stream on the failed VM with a 503 local reply,
	// details "wasm_fail_stream".
	FailClosed FailurePolicy = iota
	// FailOpen skips the filter: streams pass through untouched.
	FailOpen
	// FailReload replaces the failed VM with a fresh one (new Go heap) at the next stream.
	FailReload
)

// String names the policy as the proto does.
func (p FailurePolicy) String() string {
	switch p {
	case FailClosed:
		return "FAIL_CLOSED"
	case FailOpen:
		return "FAIL_OPEN"
	case FailReload:
		return "FAIL_RELOAD"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}
