// Package retry is the router's retry decision (source/common/router/retry_state_impl.cc
// RetryStateImpl and the parts of source/common/router/router.cc Filter that drive it): a
// route's Policy, the request headers that override it (Policy.ForRequest, as
// RetryStateImpl::create reads and removes them), and a State per request that, given each
// try's outcome, answers retry (after a back-off), pass the response through, or let the
// router answer, with the response flags (URX, UO) and the cluster's concurrent-retry
// circuit breaker (Breaker). It knows no VM, no stream and no filter.
//
// The source read is Envoy's main-line router (retry_state_impl.cc in its 1.31+ shape with
// reset-before-request and RetryDecision, router.cc with upstream filters and
// request_buffer_overflowed_, retry_policy_impl.cc RetryPolicyImpl, backoff_strategy.cc);
// where a behaviour differs between versions, or was taken from a pull request or a proto
// comment rather than the code, the doc comment says so.
//
// Not modelled: gRPC retry conditions (retry_grpc_on, x-envoy-retry-grpc-on: read and
// removed, never matched), http3-post-connect-failure and the HTTP/3 0-RTT automatic
// retries, hedging (hedge_on_per_try_timeout, x-envoy-hedge-on-per-try-timeout: removed),
// rate_limited_retry_back_off (Retry-After back-off), retry host predicates and priorities,
// retry budgets (the breaker is the fixed max_retries), the runtime keys
// upstream.use_retry and upstream.base_retry_backoff_ms (their defaults are), and internal
// redirects and shadowing, which share the router's body buffer.
package retry
