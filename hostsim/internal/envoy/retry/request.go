package retry

import (
	"strconv"
	"strings"
	"time"
)

// The request headers the router reads for its retry state and removes, so that they do
// not reach the upstream (Http::Headers in source/common/http/headers.h). The connection
// manager strips them from a client it does not trust, but a value an earlier HTTP filter
// sets is honoured: that is how a downstream filter gives one request its own policy.
const (
	HeaderRetryOn               = "x-envoy-retry-on"
	HeaderRetryGrpcOn           = "x-envoy-retry-grpc-on"
	HeaderMaxRetries            = "x-envoy-max-retries"
	HeaderRetriableStatusCodes  = "x-envoy-retriable-status-codes"
	HeaderRetriableHeaderNames  = "x-envoy-retriable-header-names"
	HeaderPerTryTimeoutMs       = "x-envoy-upstream-rq-per-try-timeout-ms"
	HeaderHedgeOnPerTryTimeout  = "x-envoy-hedge-on-per-try-timeout"
	HeaderAttemptCount          = "x-envoy-attempt-count"
	HeaderRateLimited           = "x-envoy-ratelimited"
	HeaderEarlyData             = "early-data"
	headerStatus                = ":status"
	consumedRequestHeaderPrefix = "x-envoy-"
)

// consumed are the headers RetryStateImpl::create (and, for the per-try timeout and hedging,
// FilterUtility::finalTimeout and finalHedgingParams before it) removes from the request,
// whether or not the request gets a retry state.
var consumed = [...]string{
	HeaderRetryOn, HeaderRetryGrpcOn, HeaderMaxRetries, HeaderHedgeOnPerTryTimeout,
	HeaderRetriableHeaderNames, HeaderRetriableStatusCodes, HeaderPerTryTimeoutMs,
}

// Request is the retry policy of one request: the route's Policy with what the request's
// headers added (RetryStateImpl's constructor), made by Policy.ForRequest.
type Request struct {
	retryOn       Condition
	numRetries    uint32
	statusCodes   []uint32
	headers       []HeaderMatcher
	perTryTimeout time.Duration
	base, limit   time.Duration
	bufferLimit   uint64
	earlyData     bool
	attemptReq    bool
	attemptResp   bool
}

// ForRequest is RetryStateImpl::create over the request headers h (lower-case names, as
// hostsim keeps them): it merges the retry headers into the policy and returns h without
// them (a new slice; h is not modified). Only the names Envoy reads are removed, also when
// their values are invalid and whether or not the request ends up with retries:
//
//   - x-envoy-retry-on: its conditions are added to the route's (ParseRetryOn; unknown names
//     ignored).
//   - x-envoy-max-retries: replaces num_retries, if the request has any condition by then
//     and the value is an unsigned integer (absl::SimpleAtoi into uint64, then stored in
//     Envoy's uint32 retries_remaining_, so it wraps modulo 2³²).
//   - x-envoy-retriable-status-codes: comma-separated codes added to the route's; those that
//     are not unsigned integers are skipped.
//   - x-envoy-retriable-header-names: comma-separated names added to the route's
//     retriable_headers as presence matchers (Envoy supports only names here).
//   - x-envoy-upstream-rq-per-try-timeout-ms: replaces per_try_timeout if it is an unsigned
//     integer (FilterUtility::finalTimeout).
//   - x-envoy-retry-grpc-on and x-envoy-hedge-on-per-try-timeout: removed, not modelled.
//
// Then retriable_request_headers: if the route has some and none matches h, the request has
// no retry conditions. A header given more than once is read as Envoy's inline header
// accessors read it, by its first value; an empty value counts as absent where Envoy reads
// it with get*Value (max retries, status codes, per-try timeout).
func (p Policy) ForRequest(h [][2]string) (Request, [][2]string) {
	base, limit, _ := p.intervals()
	r := Request{
		retryOn:       p.RetryOn,
		numRetries:    p.numRetries(),
		statusCodes:   append([]uint32(nil), p.RetriableStatusCodes...),
		headers:       append([]HeaderMatcher(nil), p.RetriableHeaders...),
		perTryTimeout: p.PerTryTimeout,
		base:          base,
		limit:         limit,
		bufferLimit:   p.bufferLimit(),
		attemptReq:    p.IncludeAttemptCountInRequest,
		attemptResp:   p.IncludeAttemptCountInResponse,
	}
	if v, ok := first(h, HeaderPerTryTimeoutMs); ok && v != "" {
		if ms, ok := simpleAtoi(v, 64); ok {
			r.perTryTimeout = millis(ms)
		}
	}
	if v, ok := first(h, HeaderRetryOn); ok {
		c, _ := ParseRetryOn(v)
		r.retryOn |= c
	}
	if len(p.RetriableRequestHeaders) > 0 && !anyMatch(p.RetriableRequestHeaders, h) {
		r.retryOn = 0
	}
	if v, ok := first(h, HeaderMaxRetries); ok && v != "" && r.retryOn != 0 {
		if n, ok := simpleAtoi(v, 64); ok {
			r.numRetries = uint32(n) // retries_remaining_ is a uint32_t
		}
	}
	if v, ok := first(h, HeaderRetriableStatusCodes); ok && v != "" {
		for tok := range strings.SplitSeq(v, ",") {
			if tok == "" {
				continue
			}
			if code, ok := simpleAtoi(tok, 32); ok {
				r.statusCodes = append(r.statusCodes, uint32(code))
			}
		}
	}
	if v, ok := first(h, HeaderRetriableHeaderNames); ok {
		for tok := range strings.SplitSeq(v, ",") {
			if name := trimASCIISpace(tok); name != "" {
				r.headers = append(r.headers, HeaderMatcher{Name: name, Kind: MatchPresent})
			}
		}
	}
	_, r.earlyData = first(h, HeaderEarlyData)
	rest := make([][2]string, 0, len(h))
	for _, kv := range h {
		if !isConsumed(kv[0]) {
			rest = append(rest, kv)
		}
	}
	return r, rest
}

// Enabled is RetryStateImpl::enabled: the request has a retry condition, so the router
// buffers its body for a retry and consults the state on each try's outcome.
func (r Request) Enabled() bool { return r.retryOn != 0 }

// RetryOn is the request's conditions.
func (r Request) RetryOn() Condition { return r.retryOn }

// NumRetries is the retries the request may make.
func (r Request) NumRetries() uint32 { return r.numRetries }

// BufferLimit is the bytes of request body the router buffers for a retry.
func (r Request) BufferLimit() uint64 { return r.bufferLimit }

// EffectivePerTryTimeout is the per-try timeout the router arms for the request under the
// route timeout routeTimeout (0: none): none when it is not shorter than a route timeout
// (FilterUtility::finalTimeout: "If it's >= global we just ignore it").
func (r Request) EffectivePerTryTimeout(routeTimeout time.Duration) time.Duration {
	if routeTimeout > 0 && r.perTryTimeout >= routeTimeout {
		return 0
	}
	return r.perTryTimeout
}

// Backoff is the request's back-off strategy over rnd (RetryStateImpl's constructor makes
// one per request).
func (r Request) Backoff(rnd Random) *Backoff { return NewBackoff(r.base, r.limit, rnd) }

// millis is a header's millisecond count as a Duration, saturating where Envoy's 64-bit
// milliseconds would not fit a Duration.
func millis(ms uint64) time.Duration {
	const maxMs = uint64(1<<63-1) / uint64(time.Millisecond)
	if ms > maxMs {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(ms) * time.Millisecond
}

// simpleAtoi is absl::SimpleAtoi into an unsigned integer of the given size: ASCII
// whitespace around the number is allowed, so is one leading '+'; anything else, a sign
// '-', or a value that does not fit fails.
func simpleAtoi(s string, bits int) (uint64, bool) {
	s = trimASCIISpace(s)
	s = strings.TrimPrefix(s, "+")
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, bits)
	return n, err == nil
}

// first is the first value of header k in h (names compared ASCII case-insensitively; Envoy
// keeps them lower-case).
func first(h [][2]string, k string) (string, bool) {
	for _, kv := range h {
		if strings.EqualFold(kv[0], k) {
			return kv[1], true
		}
	}
	return "", false
}

// all is every value of header k in h joined with "," (getAllOfHeaderAsString).
func all(h [][2]string, k string) (string, bool) {
	var b strings.Builder
	found := false
	for _, kv := range h {
		if !strings.EqualFold(kv[0], k) {
			continue
		}
		if found {
			b.WriteByte(',')
		}
		b.WriteString(kv[1])
		found = true
	}
	return b.String(), found
}

func isConsumed(name string) bool {
	if len(name) < len(consumedRequestHeaderPrefix) ||
		!strings.EqualFold(name[:len(consumedRequestHeaderPrefix)], consumedRequestHeaderPrefix) {
		return false
	}
	for _, c := range consumed {
		if strings.EqualFold(name, c) {
			return true
		}
	}
	return false
}

// matches reports whether m matches headers h (HeaderMatcher's doc says how).
func (m HeaderMatcher) matches(h [][2]string) bool {
	v, present := all(h, m.Name)
	var ok bool
	switch m.Kind {
	case MatchPresent:
		ok = present
	case MatchAbsent:
		ok = !present
	case MatchExact:
		if !present {
			return false
		}
		ok = m.Value == "" || v == m.Value
	}
	return ok != m.Invert
}

func anyMatch(ms []HeaderMatcher, h [][2]string) bool {
	for _, m := range ms {
		if m.matches(h) {
			return true
		}
	}
	return false
}
