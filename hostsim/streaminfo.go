package hostsim

import (
	"strings"
)

// ResponseFlags is Envoy's legacy response-flag bitmask, what the CEL attribute
// response.flags holds (StreamInfoImpl::legacyResponseFlags in
// source/common/stream_info/stream_info_impl.h): bit 1<<n for every core flag n that is set,
// n being the flag's position in enum CoreResponseFlag (envoy/stream_info/stream_info.h).
// proxy_get_property serializes it as an 8-byte little-endian integer.
type ResponseFlags uint64

// The core response flags, in CoreResponseFlag order (short names as %RESPONSE_FLAGS% prints
// them, source/common/stream_info/utility.h).
const (
	FlagFailedLocalHealthCheck           ResponseFlags = 1 << iota // LH
	FlagNoHealthyUpstream                                          // UH
	FlagUpstreamRequestTimeout                                     // UT
	FlagLocalReset                                                 // LR
	FlagUpstreamRemoteReset                                        // UR
	FlagUpstreamConnectionFailure                                  // UF
	FlagUpstreamConnectionTermination                              // UC
	FlagUpstreamOverflow                                           // UO
	FlagNoRouteFound                                               // NR
	FlagDelayInjected                                              // DI
	FlagFaultInjected                                              // FI
	FlagRateLimited                                                // RL
	FlagUnauthorizedExternalService                                // UAEX
	FlagRateLimitServiceError                                      // RLSE
	FlagDownstreamConnectionTermination                            // DC
	FlagUpstreamRetryLimitExceeded                                 // URX
	FlagStreamIdleTimeout                                          // SI
	FlagInvalidEnvoyRequestHeaders                                 // IH
	FlagDownstreamProtocolError                                    // DPE
	FlagUpstreamMaxStreamDurationReached                           // UMSDR
	FlagResponseFromCacheFilter                                    // RFCF
	FlagNoFilterConfigFound                                        // NFCF
	FlagDurationTimeout                                            // DT
	FlagUpstreamProtocolError                                      // UPE
	FlagNoClusterFound                                             // NC
	FlagOverloadManager                                            // OM
	FlagDNSResolutionFailed                                        // DF
	FlagDropOverload                                               // DO
	FlagDownstreamRemoteReset                                      // DR
	FlagUnconditionalDropOverload                                  // UDO
)

var flagNames = [...]string{"LH", "UH", "UT", "LR", "UR", "UF", "UC", "UO", "NR", "DI", "FI", "RL", "UAEX",
	"RLSE", "DC", "URX", "SI", "IH", "DPE", "UMSDR", "RFCF", "NFCF", "DT", "UPE", "NC", "OM", "DF", "DO", "DR", "UDO"}

// String is the flags as Envoy's %RESPONSE_FLAGS% prints them: short names joined by ",",
// "-" when none is set (ResponseFlagUtils::toShortString).
func (f ResponseFlags) String() string {
	if f == 0 {
		return "-"
	}
	var b strings.Builder
	for i, name := range flagNames {
		if f&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(name)
		}
	}
	return b.String()
}

// Response code details Envoy sets for the replies and resets hostsim models
// (ResponseCodeDetailValues in envoy/stream_info/stream_info.h).
const (
	// DetailsViaUpstream: the response came from the upstream (Router::Filter::onUpstreamHeaders
	// sets it before encodeHeaders).
	DetailsViaUpstream = "via_upstream"
	// DetailsClusterNotFound: the route's cluster does not exist (router decodeHeaders).
	DetailsClusterNotFound = "cluster_not_found"
	// DetailsNoHealthyUpstream: the cluster has no host to send to (sendNoHealthyUpstreamResponse).
	DetailsNoHealthyUpstream = "no_healthy_upstream"
	// DetailsResponseTimeout: the route timeout fired (onResponseTimeout).
	DetailsResponseTimeout = "response_timeout"
	// DetailsUpstreamPerTryIdleTimeout: the upstream was idle too long (onPerTryIdleTimeout).
	DetailsUpstreamPerTryIdleTimeout = "upstream_per_try_idle_timeout"
	// DetailsStreamIdleTimeout: the connection manager's stream idle timer fired
	// (ActiveStream::onIdleTimeout).
	DetailsStreamIdleTimeout = "stream_idle_timeout"
	// DetailsRequestPayloadTooLarge: a buffered request body passed the buffer limit.
	DetailsRequestPayloadTooLarge = "request_payload_too_large"
	// DetailsResponsePayloadTooLarge: a buffered response body passed the buffer limit.
	DetailsResponsePayloadTooLarge = "response_payload_too_large"
	// DetailsWasmFailStream: the VM failed and FAIL_CLOSED answers 503 (Context::failStream).
	DetailsWasmFailStream = "wasm_fail_stream"
	// DetailsWasmCloseStream: the plugin reset the stream with proxy_close_stream before
	// anything else set the details (Context::closeStream, CloseStreamResponseDetails).
	DetailsWasmCloseStream = "wasm_close_stream"
	// DetailsEarlyUpstreamReset prefixes the details of an upstream reset before the response
	// started: upstream_reset_before_response_started{reason|transport failure}.
	DetailsEarlyUpstreamReset = "upstream_reset_before_response_started"
	// DetailsLateUpstreamReset prefixes the details of an upstream reset after it started.
	DetailsLateUpstreamReset = "upstream_reset_after_response_started"
)

// envoyDetails is StringUtil::replaceAllEmptySpace, which Envoy applies to the details a
// plugin gives proxy_send_local_response (Context::sendLocalResponse) and to the reset
// details the router builds: every space, tab, form feed, vertical tab, newline and carriage
// return becomes '_'.
func envoyDetails(s string) string {
	if !strings.ContainsAny(s, " \t\f\v\n\r") {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\f', '\v', '\n', '\r':
			return '_'
		}
		return r
	}, s)
}

// setDetails is StreamInfo::setResponseCodeDetails: the last writer wins.
func (s *httpStream) setDetails(d string) {
	s.details, s.hasDetails = d, true
}
