package retry

import "strings"

// Condition is a set of retry_on conditions, Envoy's RetryPolicy::RETRY_ON_* bits
// (envoy/router/router.h), as a route's retry_on or x-envoy-retry-on names them.
type Condition uint32

// The conditions hostsim models, with the names RetryStateImpl::parseRetryOn accepts.
const (
	// On5xx ("5xx"): any 500–599 response, and any reset (wouldRetryFromReset counts a
	// reset as a 5xx), connection failures included.
	On5xx Condition = 1 << iota
	// OnGatewayError ("gateway-error"): 502, 503 and 504, and any reset, like On5xx.
	OnGatewayError
	// OnConnectFailure ("connect-failure"): a connection failure or timeout
	// (LocalConnectionFailure, RemoteConnectionFailure, ConnectionTimeout).
	OnConnectFailure
	// OnEnvoyRateLimited ("envoy-ratelimited"): a response carrying x-envoy-ratelimited,
	// which without this condition is never retried, whatever else matches.
	OnEnvoyRateLimited
	// OnRetriable4xx ("retriable-4xx"): 409 Conflict, and only that.
	OnRetriable4xx
	// OnRefusedStream ("refused-stream"): a reset with RemoteRefusedStreamReset (HTTP/2
	// REFUSED_STREAM).
	OnRefusedStream
	// OnRetriableStatusCodes ("retriable-status-codes"): a status among the policy's
	// retriable_status_codes and x-envoy-retriable-status-codes.
	OnRetriableStatusCodes
	// OnRetriableHeaders ("retriable-headers"): a response matching any of the policy's
	// retriable_headers or the names in x-envoy-retriable-header-names.
	OnRetriableHeaders
	// OnReset ("reset"): any reset but Overflow.
	OnReset
	// OnResetBeforeRequest ("reset-before-request", Envoy ≥ 1.31): a reset before any byte
	// of the request went upstream, on any try of the request so far.
	OnResetBeforeRequest

	allConditions = OnResetBeforeRequest<<1 - 1
)

// conditionNames are the names in bit order (Http::Headers EnvoyRetryOnValues).
var conditionNames = [...]string{
	"5xx", "gateway-error", "connect-failure", "envoy-ratelimited", "retriable-4xx",
	"refused-stream", "retriable-status-codes", "retriable-headers", "reset",
	"reset-before-request",
}

// String is the conditions' names in bit order, comma-separated, as retry_on writes them;
// bits hostsim does not know are left out.
func (c Condition) String() string {
	var b strings.Builder
	for i, name := range conditionNames {
		if c&(1<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(name)
	}
	return b.String()
}

// ParseRetryOn is RetryStateImpl::parseRetryOn: the comma-separated names, each trimmed of
// whitespace, empty ones skipped (StringUtil::splitToken with trim_whitespace), matched
// exactly (case-sensitive). unknown lists the names it did not recognise, which Envoy
// ignores (it reports only that not all were valid): a route's retry_on (RetryPolicyImpl)
// and x-envoy-retry-on alike. gRPC names (cancelled, deadline-exceeded, ...) and
// http3-post-connect-failure are among the unknown here: hostsim does not model them.
func ParseRetryOn(s string) (c Condition, unknown []string) {
	for tok := range strings.SplitSeq(s, ",") {
		tok = trimASCIISpace(tok)
		if tok == "" {
			continue
		}
		found := false
		for i, name := range conditionNames {
			if tok == name {
				c |= 1 << i
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, tok)
		}
	}
	return c, unknown
}

// trimASCIISpace is absl::StripAsciiWhitespace: ASCII whitespace only, unlike
// strings.TrimSpace.
func trimASCIISpace(s string) string {
	return strings.Trim(s, " \t\n\v\f\r")
}
