package envoylimits

import (
	"math"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// The router retries of failover.via: router (policies.FailoverSettings.ViaRouter): the
// routed route's retry policy and buffer limit and each provider cluster's retry circuit
// breaker, which the Envoy bootstrap, the Istio manifests and hostsim serve all write.

// ClusterMaxRetries is each provider cluster's max_retries circuit breaker: how many retries
// may be outstanding on the cluster at once. Envoy's default of 3 (cluster
// circuit_breaker.proto) is far too low for failover: when a provider fails, every stream in
// flight on it fails over at the same moment, and a retry the breaker refuses still consumes
// one of the request's retries and ends it with the failed try's response, flag UO
// (source/common/router/retry_state_impl.cc, RetryStateImpl::shouldRetry decrements
// retries_remaining_ before it checks resourceManager().retries().canCreate()). 1024 is the
// cluster's default max_requests: a request that may be sent may always be retried, and the
// request breaker, not the retry breaker, stays the cluster's bound. Spillway bounds retries
// per request itself (failover.maxAttempts and budgetMs), so the breaker only has to never
// get in its way.
const ClusterMaxRetries = 1024

// RetryBackOffBase and RetryBackOffMax are the routed route's retry back-off. Envoy always
// waits before a retry: a random time below an interval that starts at the base and doubles
// up to the max (source/common/common/backoff_strategy.cc,
// JitteredExponentialBackOffStrategy::nextBackOffMs, random() % next_interval_), 25 ms and
// 250 ms by default. Spillway has chosen the next connection before it sets the marker — one
// that is not cooling down — so waiting only delays the client's first byte: 1 ms is the
// smallest base Envoy keeps (RetryPolicyImpl rounds a smaller base_interval up to 1 ms,
// source/common/router/retry_policy_impl.cc, config_impl.cc before), the first retry then
// waits 0 ms (random() % 1), and the max of 10 ms caps later ones at under 10 ms.
const (
	RetryBackOffBase = time.Millisecond
	RetryBackOffMax  = 10 * time.Millisecond
)

// RetryNumRetries is the routed route's num_retries for a policy: failover.maxAttempts
// counts the first try, Envoy's num_retries does not (attempts = 1 + num_retries,
// route_components.proto RetryPolicy.num_retries). Never below 0.
func RetryNumRetries(res *policies.Resolved) uint32 {
	return uint32(max(res.Failover.MaxAttempts-1, 0))
}

// RetryBufferLimit is the routed route's request_body_buffer_limit when failover goes
// through the router: twice RequestBodyBufferLimit, so that every body the policy accepts
// stays replayable on a retry.
//
// Which field: request_body_buffer_limit, from Envoy 1.36 (envoyproxy/envoy#40254). The
// route's buffer limit wins over every other (route_components.proto,
// Route.request_body_buffer_limit, "Buffer limit precedence": this field if set, else
// min(per_request_buffer_limit_bytes, per_connection_buffer_limit_bytes), else the
// connection's), and the router takes it for its retry decisions (envoyproxy/envoy#42610's
// description of 1.36's Filter::decodeData; the 1.36 source itself was not read).
// per_request_buffer_limit_bytes, "the maximum bytes which will be buffered for retries and
// shadowing" before 1.36, is deprecated, may not be set next to request_body_buffer_limit,
// and is capped at the connection's limit. Set on the route, it overrides the virtual host's
// limit for routed requests only.
//
// Why twice: the router gives up retrying, silently (stat retry_or_shadow_abandoned), once
// the buffered body plus the incoming chunk passes the limit (source/common/router/
// router.cc, Filter::decodeData: getLength(decodingBuffer()) + data.length()). When an
// earlier filter buffered the whole body and resumes — the downstream Spillway instance does
// exactly that — the incoming data is that same buffer and is counted twice
// (envoyproxy/envoy#30613), so retries stop at half the limit. The fix
// (envoyproxy/envoy#44346) is not in 1.36 and the release that carries it was not pinned, so
// the double is kept for every release. It costs nothing for a body within the policy's
// limit: Spillway answers 413 itself past maxRequestBodyBytes, so Envoy never buffers much
// more than RequestBodyBufferLimit of one request.
func RetryBufferLimit(res *policies.Resolved) uint64 {
	limit := RequestBodyBufferLimit(res)
	if limit > math.MaxUint64/2 {
		return math.MaxUint64
	}
	return 2 * limit
}
