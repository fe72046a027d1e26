package envoy

import (
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// bufferHeadroom is what Envoy may buffer beyond the policy's maxRequestBodyBytes. Spillway
// answers 413 request_too_large itself once the body it holds passes the policy's limit;
// Envoy must let it see that chunk, or Envoy's own untyped 413 (filter manager,
// requestDataTooLarge) answers first. One MiB covers the largest read Envoy hands a filter
// in one callback (a connection's read buffer, per_connection_buffer_limit_bytes, 1 MiB
// by default).
const bufferHeadroom = 1 << 20

// requestBodyBufferLimit is the virtual host's request_body_buffer_limit: the bytes Envoy
// buffers for a request whose filter holds it. It is set on the virtual host, not the LLM
// route alone, because the filter starts holding a request before it has chosen a cluster,
// while the request still matches the default route.
func requestBodyBufferLimit(res *policies.Resolved) uint64 {
	return uint64(res.MaxRequestBodyBytes) + bufferHeadroom
}

// idleSlack is how long Envoy's idle timer outlives the filter's own bounds: the filter
// answers with its typed reply first, Envoy's timer is the backstop.
const idleSlack = 30 * time.Second

// idleTimeout is the route's idle_timeout and the connection manager's
// stream_idle_timeout: the longest a request may go without a byte in either direction
// under the policy's own bounds, plus idleSlack. A request can be silent while it waits
// for its body (routing.bodyWaitMs), then in a connection's queue (requestQueue.maxWaitMs
// or a connection's override), then waiting out short cooldowns (comboCooldownWait's
// budget), then on its attempts: each bounded by the connection's executionMaxWaitMs (a
// non-streaming answer from a reasoning model can take minutes before its first byte), all
// of them by failover.budgetMs. Envoy's 15 s route timeout covers the whole response
// instead, which a long stream outlives, so the generated route turns it off and relies on
// this.
func idleTimeout(res *policies.Resolved) time.Duration {
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
	return max(res.Routing.BodyWait, queueWait+comboWait+attempts) + idleSlack
}
