package streaminfo

import "strings"

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

// ReplaceAllEmptySpace is StringUtil::replaceAllEmptySpace, which Envoy applies to the details a
// plugin gives proxy_send_local_response (Context::sendLocalResponse) and to the reset
// details the router builds: every space, tab, form feed, vertical tab, newline and carriage
// return becomes '_'.
func ReplaceAllEmptySpace(s string) string {
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
