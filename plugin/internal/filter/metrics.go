package filter

import "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

// metrics are the plugin's Envoy stats (Envoy files them under wasmcustom.*).
type metrics struct {
	requests      proxywasm.MetricCounter // HTTP streams seen
	routed        proxywasm.MetricCounter // LLM requests Spillway chose a target for
	localReplies  proxywasm.MetricCounter // replies Spillway answered itself
	attempts      proxywasm.MetricCounter // upstream attempts, the first included
	failovers     proxywasm.MetricCounter // attempts after the first (same-request failover)
	restated      proxywasm.MetricCounter // upstream statuses restated
	streamErrors  proxywasm.MetricCounter // 200 event streams whose first event was an error
	truncated     proxywasm.MetricCounter // committed streams that ended without their terminal event
	queued        proxywasm.MetricCounter // requests that waited for a concurrency slot
	wakeups       proxywasm.MetricCounter // cross-worker wake-ups sent
	misconfigured proxywasm.MetricCounter // requests answered spillway_misconfigured
	panics        proxywasm.MetricCounter // callbacks that panicked and failed open
}

func defineMetrics() metrics {
	return metrics{
		requests:      proxywasm.DefineCounterMetric("spillway_requests_total"),
		routed:        proxywasm.DefineCounterMetric("spillway_routed_total"),
		localReplies:  proxywasm.DefineCounterMetric("spillway_local_replies_total"),
		attempts:      proxywasm.DefineCounterMetric("spillway_attempts_total"),
		failovers:     proxywasm.DefineCounterMetric("spillway_failovers_total"),
		restated:      proxywasm.DefineCounterMetric("spillway_restated_total"),
		streamErrors:  proxywasm.DefineCounterMetric("spillway_stream_error_events_total"),
		truncated:     proxywasm.DefineCounterMetric("spillway_truncated_streams_total"),
		queued:        proxywasm.DefineCounterMetric("spillway_queued_total"),
		wakeups:       proxywasm.DefineCounterMetric("spillway_wakeups_total"),
		misconfigured: proxywasm.DefineCounterMetric("spillway_misconfigured_total"),
		panics:        proxywasm.DefineCounterMetric("spillway_panics_total"),
	}
}
