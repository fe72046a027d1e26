package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
)

// counter is one of the plugin's Envoy stats (Envoy files them under wasmcustom.*). A VM
// counts in its own memory and adds what it counted to Envoy's counter on each tick (at
// most a second later, see idleTickMs) and when asked to flush: a proxy_increment_metric
// per event would be a host call on every request.
type counter struct {
	id      uint32
	pending int64
}

// Increment counts n events.
func (c *counter) Increment(n int64) { c.pending += n }

func (c *counter) flush() {
	if c.pending == 0 {
		return
	}
	if err := hostabi.IncrementMetric(c.id, c.pending); err != nil {
		proxywasm.LogDebugf("spillway: increment metric: %v", err)
		return
	}
	c.pending = 0
}

// metrics are the plugin's counters.
type metrics struct {
	requests      counter // HTTP streams seen
	routed        counter // LLM requests Spillway chose a target for
	localReplies  counter // replies Spillway answered itself
	attempts      counter // upstream attempts, the first included
	failovers     counter // attempts after the first (same-request failover)
	restated      counter // upstream statuses restated
	streamErrors  counter // 200 event streams whose first event was an error
	truncated     counter // committed streams that ended without their terminal event
	queued        counter // requests that waited for a concurrency slot
	failedOpen    counter // attempts sent without a slot (quotaShareConcurrencyLimit)
	requestOnly   counter // failures that named a model the connection does not serve
	wakeups       counter // cross-worker wake-ups sent
	misconfigured counter // requests answered spillway_misconfigured
	panics        counter // callbacks that panicked and failed open
	aborted       counter // committed streams a stream watchdog ended (watchdog.go)
}

// all lists the counters with their names, for definition and flushing.
func (m *metrics) all() [15]struct {
	name string
	c    *counter
} {
	return [...]struct {
		name string
		c    *counter
	}{
		{"spillway_requests_total", &m.requests},
		{"spillway_routed_total", &m.routed},
		{"spillway_local_replies_total", &m.localReplies},
		{"spillway_attempts_total", &m.attempts},
		{"spillway_failovers_total", &m.failovers},
		{"spillway_restated_total", &m.restated},
		{"spillway_stream_error_events_total", &m.streamErrors},
		{"spillway_truncated_streams_total", &m.truncated},
		{"spillway_queued_total", &m.queued},
		{"spillway_admission_failed_open_total", &m.failedOpen},
		{"spillway_model_not_served_total", &m.requestOnly},
		{"spillway_wakeups_total", &m.wakeups},
		{"spillway_misconfigured_total", &m.misconfigured},
		{"spillway_panics_total", &m.panics},
		{"spillway_watchdog_aborts_total", &m.aborted},
	}
}

func (m *metrics) define() {
	for _, e := range m.all() {
		e.c.id = uint32(proxywasm.DefineCounterMetric(e.name))
	}
}

// flush adds every pending count to Envoy's counters.
func (m *metrics) flush() {
	for _, e := range m.all() {
		e.c.flush()
	}
}
