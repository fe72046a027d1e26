package hostsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/retry"
)

// RetryPolicy is the route's retry policy (envoy.config.route.v3.RetryPolicy, with the
// route and virtual host options the retry path reads) for WithRetryPolicy. The router asks
// a per-request retry state (RetryStateImpl) on every try's outcome, as
// hostsim/internal/envoy/retry models it.
type RetryPolicy struct {
	// RetryOn is retry_on: comma-separated condition names as Envoy spells them ("5xx",
	// "gateway-error", "connect-failure", "envoy-ratelimited", "retriable-4xx",
	// "refused-stream", "retriable-status-codes", "retriable-headers", "reset",
	// "reset-before-request"). An unknown name is an error from New.
	RetryOn string
	// NumRetries is num_retries; nil: Envoy's default, 1 (RetryCount makes the pointer).
	NumRetries *uint32
	// RetriableStatusCodes is retriable_status_codes (with "retriable-status-codes").
	RetriableStatusCodes []uint32
	// RetriableHeaders is retriable_headers, matched against each try's response headers
	// after the upstream filters (with "retriable-headers").
	RetriableHeaders []RetryHeaderMatcher
	// RetriableRequestHeaders is retriable_request_headers: a request matching none of them
	// is not retried.
	RetriableRequestHeaders []RetryHeaderMatcher
	// PerTryTimeout is per_try_timeout (0: none): armed when a try's whole request went
	// upstream, ignored when not shorter than a non-zero route timeout (FilterUtility::
	// finalTimeout); on fire the try is reset and the outcome is a LocalReset
	// (retriable with 5xx, gateway-error, reset), else 504 "upstream request timeout" (UT,
	// details upstream_per_try_timeout).
	PerTryTimeout time.Duration
	// BaseInterval and MaxInterval are retry_back_off (0: 25 ms and 10× the base).
	BaseInterval, MaxInterval time.Duration
	// BufferLimit is the router's retry buffer limit in bytes; nil: what Envoy ≥ 1.36
	// computes from the connection's limit (WithBufferLimit) and the route's
	// request_body_buffer_limit (WithRequestBodyBufferLimit) — retry.BufferLimit.
	BufferLimit *uint64
	// IncludeAttemptCount is include_request_attempt_count: the router sets
	// x-envoy-attempt-count on each try's request headers.
	IncludeAttemptCount bool
	// IncludeAttemptCountInResponse is include_attempt_count_in_response: the router sets
	// x-envoy-attempt-count on the response it sends downstream.
	IncludeAttemptCountInResponse bool
	// RefreshClusterOnRetry is refresh_cluster_on_retry (Envoy ≥ 1.39,
	// envoyproxy/envoy#44719): before each retry the router refreshes the route's cluster
	// (WithRouteCluster): a matcher re-evaluates on the current request headers and filter
	// state, so the retry may go to another cluster; cluster_header never changes.
	RefreshClusterOnRetry bool
}

// RetryHeaderMatcher is a header matcher of a retry policy (envoy.config.route.v3.
// HeaderMatcher as hostsim models it: presence, absence or an exact value, inverted or not).
type RetryHeaderMatcher = retry.HeaderMatcher

// The kinds of RetryHeaderMatcher.
const (
	RetryHeaderPresent = retry.MatchPresent
	RetryHeaderAbsent  = retry.MatchAbsent
	RetryHeaderExact   = retry.MatchExact
)

// RetryCount returns a pointer to n, for RetryPolicy.NumRetries.
func RetryCount(n uint32) *uint32 { return &n }

// RetryRandom is the random source the router's retry back-off draws from
// (JitteredExponentialBackOffStrategy: uniform in [0, interval) ms); *math/rand/v2.Rand
// satisfies it.
type RetryRandom = retry.Random

// ErrInvalidRetryPolicy is wrapped by New's error for a RetryPolicy Envoy (or hostsim)
// would reject.
var ErrInvalidRetryPolicy = retry.ErrInvalidPolicy

// WithRetryPolicy gives the route a retry policy: the router retries a try whose outcome
// the policy retries (its response headers after the upstream filters, a reset, a per-try
// timeout), after a jittered back-off on the host's clock, replaying the buffered request
// body to a new try; x-envoy-retry-on, x-envoy-max-retries, x-envoy-retriable-status-codes,
// x-envoy-retriable-header-names and x-envoy-upstream-rq-per-try-timeout-ms set by the
// filter override it and are removed before the first try (RetryStateImpl::create). Without
// it the router has no retry policy and leaves those headers alone.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *config) { pp := p; c.retryPolicy = &pp }
}

// WithMaxRetries sets the cluster's max_retries circuit breaker (default 3): how many
// retries the Host's requests may have in progress at once (a retry holds it from its
// decision through its try). Past it a retriable outcome is not retried (flag UO).
func WithMaxRetries(n uint32) Option { return func(c *config) { c.maxRetries = &n } }

// WithRetryRandom sets the back-off's random source (default: a PCG with a fixed seed, so
// virtual-clock runs repeat). It is called under a lock.
func WithRetryRandom(r RetryRandom) Option { return func(c *config) { c.retryRandom = r } }

// retryPolicy converts p to the model's Policy and validates it.
func (p RetryPolicy) policy(c *config) (retry.Policy, error) {
	on, unknown := retry.ParseRetryOn(p.RetryOn)
	if len(unknown) > 0 {
		return retry.Policy{}, fmt.Errorf("hostsim: retry policy: %w: retry_on: unknown condition %q",
			ErrInvalidRetryPolicy, strings.Join(unknown, ","))
	}
	rp := retry.Policy{
		RetryOn: on, NumRetries: p.NumRetries,
		RetriableStatusCodes:    append([]uint32(nil), p.RetriableStatusCodes...),
		RetriableHeaders:        lowerMatchers(p.RetriableHeaders),
		RetriableRequestHeaders: lowerMatchers(p.RetriableRequestHeaders),
		PerTryTimeout:           p.PerTryTimeout, BaseInterval: p.BaseInterval, MaxInterval: p.MaxInterval,
		BufferLimit:                   p.BufferLimit,
		IncludeAttemptCountInRequest:  p.IncludeAttemptCount,
		IncludeAttemptCountInResponse: p.IncludeAttemptCountInResponse,
	}
	if rp.BufferLimit == nil {
		var route *uint64
		if c.requestBodyBufferLimit > 0 {
			route = retry.Uint64(uint64(c.requestBodyBufferLimit))
		}
		rp.BufferLimit = retry.Uint64(retry.BufferLimit(uint64(max(c.bufferLimit, 0)), nil, route))
	}
	if err := rp.Validate(); err != nil {
		return retry.Policy{}, fmt.Errorf("hostsim: retry policy: %w", err)
	}
	return rp, nil
}

// lowerMatchers copies ms with the names lower-cased, as Envoy's LowerCaseString does.
func lowerMatchers(ms []RetryHeaderMatcher) []RetryHeaderMatcher {
	out := make([]RetryHeaderMatcher, len(ms))
	for i, m := range ms {
		m.Name = strings.ToLower(m.Name)
		out[i] = m
	}
	return out
}

// lockedRandom makes a RetryRandom safe for the Host's workers.
type lockedRandom struct {
	mu sync.Mutex
	r  RetryRandom
}

func (l *lockedRandom) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Uint64()
}

// retrySetup is the Host's retry model: the route's policy, the cluster's breaker, the
// back-off's random source. Nil without WithRetryPolicy.
type retrySetup struct {
	policy  retry.Policy
	breaker *retry.Breaker
	rnd     RetryRandom
	// refreshCluster is RetryPolicy.RefreshClusterOnRetry.
	refreshCluster bool
}

func newRetrySetup(c *config) (*retrySetup, error) {
	if c.retryPolicy == nil {
		if c.maxRetries != nil {
			return nil, errors.New("hostsim: WithMaxRetries needs WithRetryPolicy")
		}
		return nil, nil
	}
	p, err := c.retryPolicy.policy(c)
	if err != nil {
		return nil, err
	}
	max := uint32(retry.DefaultMaxRetries)
	if c.maxRetries != nil {
		max = *c.maxRetries
	}
	var rnd RetryRandom = rand.New(rand.NewPCG(0x5eed, 0x7e57))
	if c.retryRandom != nil {
		rnd = c.retryRandom
	}
	return &retrySetup{policy: p, breaker: retry.NewBreaker(max), rnd: &lockedRandom{r: rnd},
		refreshCluster: c.retryPolicy.RefreshClusterOnRetry}, nil
}
