package hostsim

import "github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"

// Envoy's stream info as the plugin reads it and hostsim sets it (hostsim/internal/
// streaminfo holds the definitions, with their sources).

// ResponseFlags is Envoy's legacy response-flag bitmask, what the CEL attribute
// response.flags holds (8-byte little endian through proxy_get_property); String prints it
// as %RESPONSE_FLAGS% does.
type ResponseFlags = streaminfo.ResponseFlags

// The core response flags, in Envoy's CoreResponseFlag order.
const (
	FlagFailedLocalHealthCheck           = streaminfo.FlagFailedLocalHealthCheck
	FlagNoHealthyUpstream                = streaminfo.FlagNoHealthyUpstream
	FlagUpstreamRequestTimeout           = streaminfo.FlagUpstreamRequestTimeout
	FlagLocalReset                       = streaminfo.FlagLocalReset
	FlagUpstreamRemoteReset              = streaminfo.FlagUpstreamRemoteReset
	FlagUpstreamConnectionFailure        = streaminfo.FlagUpstreamConnectionFailure
	FlagUpstreamConnectionTermination    = streaminfo.FlagUpstreamConnectionTermination
	FlagUpstreamOverflow                 = streaminfo.FlagUpstreamOverflow
	FlagNoRouteFound                     = streaminfo.FlagNoRouteFound
	FlagDelayInjected                    = streaminfo.FlagDelayInjected
	FlagFaultInjected                    = streaminfo.FlagFaultInjected
	FlagRateLimited                      = streaminfo.FlagRateLimited
	FlagUnauthorizedExternalService      = streaminfo.FlagUnauthorizedExternalService
	FlagRateLimitServiceError            = streaminfo.FlagRateLimitServiceError
	FlagDownstreamConnectionTermination  = streaminfo.FlagDownstreamConnectionTermination
	FlagUpstreamRetryLimitExceeded       = streaminfo.FlagUpstreamRetryLimitExceeded
	FlagStreamIdleTimeout                = streaminfo.FlagStreamIdleTimeout
	FlagInvalidEnvoyRequestHeaders       = streaminfo.FlagInvalidEnvoyRequestHeaders
	FlagDownstreamProtocolError          = streaminfo.FlagDownstreamProtocolError
	FlagUpstreamMaxStreamDurationReached = streaminfo.FlagUpstreamMaxStreamDurationReached
	FlagResponseFromCacheFilter          = streaminfo.FlagResponseFromCacheFilter
	FlagNoFilterConfigFound              = streaminfo.FlagNoFilterConfigFound
	FlagDurationTimeout                  = streaminfo.FlagDurationTimeout
	FlagUpstreamProtocolError            = streaminfo.FlagUpstreamProtocolError
	FlagNoClusterFound                   = streaminfo.FlagNoClusterFound
	FlagOverloadManager                  = streaminfo.FlagOverloadManager
	FlagDNSResolutionFailed              = streaminfo.FlagDNSResolutionFailed
	FlagDropOverload                     = streaminfo.FlagDropOverload
	FlagDownstreamRemoteReset            = streaminfo.FlagDownstreamRemoteReset
	FlagUnconditionalDropOverload        = streaminfo.FlagUnconditionalDropOverload
)

// Response code details Envoy sets for the replies and resets hostsim models
// (response.code_details).
const (
	DetailsViaUpstream               = streaminfo.DetailsViaUpstream
	DetailsClusterNotFound           = streaminfo.DetailsClusterNotFound
	DetailsNoHealthyUpstream         = streaminfo.DetailsNoHealthyUpstream
	DetailsResponseTimeout           = streaminfo.DetailsResponseTimeout
	DetailsUpstreamPerTryIdleTimeout = streaminfo.DetailsUpstreamPerTryIdleTimeout
	DetailsStreamIdleTimeout         = streaminfo.DetailsStreamIdleTimeout
	DetailsRequestPayloadTooLarge    = streaminfo.DetailsRequestPayloadTooLarge
	DetailsResponsePayloadTooLarge   = streaminfo.DetailsResponsePayloadTooLarge
	DetailsWasmFailStream            = streaminfo.DetailsWasmFailStream
	DetailsWasmCloseStream           = streaminfo.DetailsWasmCloseStream
	DetailsEarlyUpstreamReset        = streaminfo.DetailsEarlyUpstreamReset
	DetailsLateUpstreamReset         = streaminfo.DetailsLateUpstreamReset
)

// ResetReason is why an upstream stream ended in a reset (Http::StreamResetReason).
type ResetReason = streaminfo.ResetReason

// The reset reasons, as envoy/http/stream_reset_handler.h names them.
const (
	ResetLocalConnectionFailure   = streaminfo.ResetLocalConnectionFailure
	ResetRemoteConnectionFailure  = streaminfo.ResetRemoteConnectionFailure
	ResetConnectionTimeout        = streaminfo.ResetConnectionTimeout
	ResetConnectionTermination    = streaminfo.ResetConnectionTermination
	ResetLocalReset               = streaminfo.ResetLocalReset
	ResetLocalRefusedStreamReset  = streaminfo.ResetLocalRefusedStreamReset
	ResetOverflow                 = streaminfo.ResetOverflow
	ResetRemoteReset              = streaminfo.ResetRemoteReset
	ResetRemoteRefusedStreamReset = streaminfo.ResetRemoteRefusedStreamReset
	ResetConnectError             = streaminfo.ResetConnectError
	ResetProtocolError            = streaminfo.ResetProtocolError
	ResetOverloadManager          = streaminfo.ResetOverloadManager
)

// setDetails is StreamInfo::setResponseCodeDetails: the last writer wins.
func (s *httpStream) setDetails(d string) {
	s.details, s.hasDetails = d, true
}
