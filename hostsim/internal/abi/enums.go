package abi

import "fmt"

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

// Stream types.
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
	// LogLevels is the number of levels: proxy_log refuses a level at or above it.
	LogLevels
)

var logLevelNames = [...]string{"trace", "debug", "info", "warn", "error", "critical"}

// String names the level.
func (l LogLevel) String() string {
	if l < LogLevels {
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

// ABIVersions are the versions in the order a host picks among several markers: cpp-host
// stops at the first marker in export order, which a compiled module does not keep, so the
// oldest wins.
var ABIVersions = []ABIVersion{ABI010, ABI020, ABI021}
