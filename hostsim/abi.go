package hostsim

import (
	"fmt"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/internal/failurepolicy"
)

// The ABI's vocabulary that the public API speaks, from hostsim/internal/abi.

// Status is a proxy-wasm host status code (proxy_wasm_common.h), as Host.SetSharedData and
// Host.EnqueueSharedQueue answer.
type Status = abi.Status

// The status codes Host.SetSharedData and Host.EnqueueSharedQueue answer.
const (
	StatusOK          = abi.StatusOK
	StatusNotFound    = abi.StatusNotFound
	StatusCasMismatch = abi.StatusCasMismatch
)

// LogLevel is a proxy_log level (LogEntry.Level, WithLogLevel, Host.LogsAt).
type LogLevel = abi.LogLevel

// Log levels, trace to critical as Envoy maps them: all of them, as WithLogLevel takes any.
const (
	LogTrace    = abi.LogTrace
	LogDebug    = abi.LogDebug
	LogInfo     = abi.LogInfo
	LogWarn     = abi.LogWarn
	LogError    = abi.LogError
	LogCritical = abi.LogCritical
)

// MetricType is a proxy_define_metric type (MetricValue.Type).
type MetricType = abi.MetricType

// Metric types.
const (
	MetricCounter   = abi.MetricCounter
	MetricGauge     = abi.MetricGauge
	MetricHistogram = abi.MetricHistogram
)

// ABIVersion is the proxy-wasm ABI a module declares with its marker export (Module.ABI).
type ABIVersion = abi.ABIVersion

// ABI versions cpp-host recognises, by their marker exports: what Module.ABI can be.
const (
	ABI010 = abi.ABI010
	ABI020 = abi.ABI020
	ABI021 = abi.ABI021
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

// DefaultFailurePolicy is the failure policy a Host models unless WithFailurePolicy says
// otherwise: the one the Envoy configuration Spillway generates sets
// (internal/failurepolicy.Default, FAIL_RELOAD), as hostsim models that configuration
// elsewhere too (allow_on_headers_stop_iteration on).
var DefaultFailurePolicy = func() FailurePolicy {
	for p := FailClosed; p <= FailReload; p++ {
		if p.String() == failurepolicy.Default {
			return p
		}
	}
	panic("hostsim: unknown failure policy " + failurepolicy.Default)
}()

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
