// Package envoylimits derives from a resolved policy the limits Envoy must allow a request
// that Spillway handles: the request body buffer limit and the stream idle timeout. The
// generated Envoy bootstrap (package envoy) and hostsim serve both take them from here, so
// the proxy Spillway ships and the one it is tested under cannot drift apart.
package envoylimits

import (
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// BufferHeadroom is what Envoy may buffer beyond the policy's maxRequestBodyBytes. Spillway
// answers 413 request_too_large itself once the body it holds passes the policy's limit;
// Envoy must let it see that chunk, or Envoy's own untyped 413 (filter manager,
// ActiveStreamDecoderFilter::requestDataTooLarge) answers first. One MiB covers the largest
// read Envoy hands a filter in one callback (a connection's read buffer,
// per_connection_buffer_limit_bytes, 1 MiB by default).
const BufferHeadroom = 1 << 20

// RequestBodyBufferLimit is the request_body_buffer_limit for every route a request
// Spillway holds can match: the bytes Envoy buffers for a request whose filter holds it.
// The bootstrap sets it on the virtual host, not the LLM route alone, because the filter
// starts holding a request before it has chosen a cluster, while the request still matches
// the default route.
func RequestBodyBufferLimit(res *policies.Resolved) uint64 {
	return uint64(res.MaxRequestBodyBytes) + BufferHeadroom
}

// IdleSlack is how long Envoy's idle timer outlives the filter's own bounds: the filter
// answers with its typed reply first, Envoy's timer is the backstop.
const IdleSlack = 30 * time.Second

// IdleTimeout is the route's idle_timeout and the connection manager's
// stream_idle_timeout: the longest a request may go without a byte in either direction
// under the policy's own bounds, plus IdleSlack. A request can be silent while it waits
// for its body (routing.bodyWaitMs), then in a connection's queue (requestQueue.maxWaitMs
// or a connection's override), then waiting out short cooldowns (comboCooldownWait's
// budget), then on its attempts: each bounded by the connection's executionMaxWaitMs (a
// non-streaming answer from a reasoning model can take minutes before its first byte), all
// of them by failover.budgetMs. Envoy's 15 s route timeout covers the whole response
// instead, which a long stream outlives, so the generated route turns it off and relies on
// this.
func IdleTimeout(res *policies.Resolved) time.Duration {
	var queueWait, execWait time.Duration
	for i := range res.Providers {
		for _, c := range res.Providers[i].Connections {
			queueWait = max(queueWait, c.QueueMaxWait)
			execWait = max(execWait, c.ExecutionMaxWait)
		}
	}
	attempts := min(res.Failover.Budget, time.Duration(res.Failover.MaxAttempts)*execWait)
	var comboWait time.Duration
	if res.ComboCooldownWait.Enabled {
		comboWait = res.ComboCooldownWait.Budget
	}
	return max(res.Routing.BodyWait, queueWait+comboWait+attempts) + IdleSlack
}
