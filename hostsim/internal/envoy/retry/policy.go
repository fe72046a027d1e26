package retry

import (
	"errors"
	"fmt"
	"time"
)

// Defaults Envoy applies when the configuration leaves a value out.
const (
	// DefaultNumRetries: route_components.proto RetryPolicy.num_retries "is optional and
	// defaults to 1" (RetryPolicyImpl: PROTOBUF_GET_WRAPPED_OR_DEFAULT(..., num_retries, 1)).
	DefaultNumRetries = 1
	// DefaultBaseInterval: the runtime key upstream.base_retry_backoff_ms, default 25 ms
	// (RetryStateImpl's constructor).
	DefaultBaseInterval = 25 * time.Millisecond
	// DefaultMaxIntervalFactor: without a max_interval the back-off is capped at 10× the
	// base interval (RetryStateImpl's constructor).
	DefaultMaxIntervalFactor = 10
	// DefaultMaxRetries: a cluster's circuit breaker allows 3 concurrent retries unless
	// max_retries says otherwise (circuit_breaker.proto Thresholds.max_retries).
	DefaultMaxRetries = 3
	// DefaultBufferLimit: the listener's per_connection_buffer_limit_bytes default, 1 MiB,
	// the router's retry buffer limit when no route limit applies (see BufferLimit).
	DefaultBufferLimit = 1 << 20
)

// MatchKind is what a HeaderMatcher checks of its header.
type MatchKind int

// The kinds of header match hostsim models (envoy.config.route.v3.HeaderMatcher).
const (
	// MatchPresent: the header is present — present_match: true, or a matcher with no
	// match specifier at all, which Envoy treats as presence.
	MatchPresent MatchKind = iota
	// MatchAbsent: the header is absent (present_match: false).
	MatchAbsent
	// MatchExact: the header is present with exactly Value (exact_match, or
	// string_match.exact); an empty Value matches any value of a present header.
	MatchExact
)

// HeaderMatcher is one of a route's retriable_headers (or retriable_request_headers): a
// header name and what its value must be. A header given more than once is matched on its
// values joined with "," (HeaderUtility::getAllOfHeaderAsString).
//
// From Envoy's HeaderDataBaseImpl / HeaderDataPresentMatch (source/common/http/
// header_utility.h) as its documentation describes them; the matchers' source itself was not
// among what could be read, in particular how invert_match combines with a missing header
// (modelled: a value match of a missing header fails, inverted or not; a presence match is
// inverted like any other).
type HeaderMatcher struct {
	// Name is the header's name; Envoy lower-cases it (LowerCaseString).
	Name string
	// Kind is what the header must be.
	Kind MatchKind
	// Value is MatchExact's value.
	Value string
	// Invert is invert_match: the match's result is negated.
	Invert bool
}

// Policy is a route's retry policy (envoy.config.route.v3.RetryPolicy) with the route and
// virtual host options the retry path reads. Pointer fields are protobuf wrappers: nil is
// "not set", and the default applies.
type Policy struct {
	// RetryOn is retry_on; a Policy without conditions never retries, unless
	// x-envoy-retry-on adds some.
	RetryOn Condition
	// NumRetries is num_retries, the retries one request may make; nil: 1.
	NumRetries *uint32
	// RetriableStatusCodes is retriable_status_codes, used with OnRetriableStatusCodes.
	RetriableStatusCodes []uint32
	// RetriableHeaders is retriable_headers, matched against each try's response headers
	// with OnRetriableHeaders.
	RetriableHeaders []HeaderMatcher
	// RetriableRequestHeaders is retriable_request_headers: if set, a request matching none
	// of them has its retries turned off (RetryStateImpl's constructor sets retry_on_ = 0).
	RetriableRequestHeaders []HeaderMatcher
	// PerTryTimeout is per_try_timeout (0: none). The router ignores it when it is not
	// shorter than a non-zero route timeout (FilterUtility::finalTimeout): see
	// Request.EffectivePerTryTimeout.
	PerTryTimeout time.Duration
	// BaseInterval is retry_back_off.base_interval (0: the 25 ms default). Envoy rounds it
	// down to whole milliseconds and up to at least 1 ms (RetryPolicyImpl).
	BaseInterval time.Duration
	// MaxInterval is retry_back_off.max_interval (0: 10× the base interval), rounded like
	// BaseInterval; it needs a BaseInterval, as retry_back_off requires base_interval.
	MaxInterval time.Duration
	// BufferLimit is the router's retry buffer limit for this route in bytes
	// (Filter::retry_shadow_buffer_limit_, see BufferLimit for how Envoy computes it);
	// nil: DefaultBufferLimit. 0 buffers nothing, so any request body turns retries off.
	BufferLimit *uint64
	// IncludeAttemptCountInRequest is include_request_attempt_count (route or virtual host):
	// the router sets x-envoy-attempt-count on each try's request headers.
	IncludeAttemptCountInRequest bool
	// IncludeAttemptCountInResponse is include_attempt_count_in_response: the router sets
	// x-envoy-attempt-count on the response it sends downstream.
	IncludeAttemptCountInResponse bool
}

// Uint32 returns a pointer to v, for Policy's wrapper fields.
func Uint32(v uint32) *uint32 { return &v }

// Uint64 returns a pointer to v, for Policy's wrapper fields.
func Uint64(v uint64) *uint64 { return &v }

// BufferLimit is the retry buffer limit Envoy ≥ 1.36 applies to a request, from the
// connection's buffer limit (per_connection_buffer_limit_bytes; 0: none) and the route's
// (or virtual host's) request_body_buffer_limit and deprecated per_request_buffer_limit_bytes
// (nil: not set): request_body_buffer_limit when set; else the smaller of
// per_request_buffer_limit_bytes and the connection's limit; else the connection's limit;
// with neither set and no connection limit, no limit at all.
//
// The precedence is route_components.proto's comment on request_body_buffer_limit
// (envoyproxy/envoy#40254, 1.36); the 1.36 text of Filter::decodeHeaders and decodeData
// that applies it could not be read. Up to 1.35 the router latched the connection's limit
// in Filter::setDecoderFilterCallbacks and capped it with the route's
// per_request_buffer_limit_bytes in decodeHeaders, which is the second case.
func BufferLimit(connection uint64, perRequest *uint32, requestBody *uint64) uint64 {
	switch {
	case requestBody != nil:
		return *requestBody
	case connection == 0 && perRequest == nil:
		return ^uint64(0)
	case connection == 0:
		return uint64(*perRequest)
	case perRequest != nil:
		return min(connection, uint64(*perRequest))
	default:
		return connection
	}
}

// ErrInvalidPolicy is wrapped by every error Validate returns.
var ErrInvalidPolicy = errors.New("retry: invalid policy")

// PolicyError is a Policy field Validate rejects.
type PolicyError struct {
	Field  string // the field, as the proto names it (retry_back_off.max_interval, ...)
	Reason string // what is wrong with it
}

// Error implements error.
func (e *PolicyError) Error() string { return "retry: invalid policy: " + e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalidPolicy) hold.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

func invalid(field, format string, args ...any) error {
	return &PolicyError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate reports the first field Envoy would reject, and what hostsim rejects besides:
// conditions it does not know, status codes outside 100–599 (Envoy accepts any uint32, but
// none outside that range can be an HTTP status), header matchers without a name or with
// an unknown kind.
func (p Policy) Validate() error {
	if unknown := p.RetryOn &^ allConditions; unknown != 0 {
		return invalid("retry_on", "unknown condition bits %#x", uint32(unknown))
	}
	for _, code := range p.RetriableStatusCodes {
		if code < 100 || code > 599 {
			return invalid("retriable_status_codes", "%d is not an HTTP status", code)
		}
	}
	if err := validMatchers("retriable_headers", p.RetriableHeaders); err != nil {
		return err
	}
	if err := validMatchers("retriable_request_headers", p.RetriableRequestHeaders); err != nil {
		return err
	}
	if p.PerTryTimeout < 0 {
		return invalid("per_try_timeout", "negative (%v)", p.PerTryTimeout)
	}
	if p.BaseInterval < 0 {
		return invalid("retry_back_off.base_interval", "negative (%v)", p.BaseInterval)
	}
	if p.MaxInterval < 0 {
		return invalid("retry_back_off.max_interval", "negative (%v)", p.MaxInterval)
	}
	if p.MaxInterval > 0 && p.BaseInterval == 0 {
		// retry_back_off's base_interval is required (route_components.proto).
		return invalid("retry_back_off.base_interval", "required with max_interval")
	}
	if base, limit, ok := p.intervals(); ok && limit < base {
		// RetryPolicyImpl's constructor, after rounding both.
		return invalid("retry_back_off.max_interval", "must be greater than or equal to the base_interval (%v < %v)", limit, base)
	}
	return nil
}

func validMatchers(field string, ms []HeaderMatcher) error {
	for i, m := range ms {
		if m.Name == "" {
			return invalid(fmt.Sprintf("%s[%d].name", field, i), "empty")
		}
		if m.Kind < MatchPresent || m.Kind > MatchExact {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "unknown match kind %d", m.Kind)
		}
	}
	return nil
}

// intervals are the back-off's base and cap as RetryStateImpl's constructor takes them:
// the configured base (rounded as RetryPolicyImpl rounds it) or 25 ms, the configured cap
// (rounded) or 10× the base. ok is false when the policy configures no cap, for Validate.
func (p Policy) intervals() (base, limit time.Duration, ok bool) {
	base = DefaultBaseInterval
	if p.BaseInterval > 0 {
		base = roundMillis(p.BaseInterval)
	}
	if p.MaxInterval > 0 {
		return base, roundMillis(p.MaxInterval), true
	}
	return base, base * DefaultMaxIntervalFactor, false
}

// roundMillis is PROTOBUF_GET_MS_*: whole milliseconds, then at least 1 ms
// (RetryPolicyImpl: "if ((*base_interval_).count() < 1) base_interval_ = 1ms").
func roundMillis(d time.Duration) time.Duration {
	return max(d.Truncate(time.Millisecond), time.Millisecond)
}

// numRetries is num_retries or its default.
func (p Policy) numRetries() uint32 {
	if p.NumRetries != nil {
		return *p.NumRetries
	}
	return DefaultNumRetries
}

// bufferLimit is BufferLimit or its default.
func (p Policy) bufferLimit() uint64 {
	if p.BufferLimit != nil {
		return *p.BufferLimit
	}
	return DefaultBufferLimit
}
