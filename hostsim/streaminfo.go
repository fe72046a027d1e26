package hostsim

import (
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/connmgr"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/stream"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// Envoy's stream info as the plugin reads it and hostsim sets it: the flags and reset
// reasons are hostsim/internal/streaminfo's (with their sources), the details are defined
// here.

// ResponseFlags is Envoy's legacy response-flag bitmask, what the CEL attribute
// response.flags holds (8-byte little endian through proxy_get_property); String prints it
// as %RESPONSE_FLAGS% does.
type ResponseFlags = streaminfo.ResponseFlags

// The core response flags, in Envoy's CoreResponseFlag order.
const (
	FlagFailedLocalHealthCheck           = streaminfo.FlagFailedLocalHealthCheck           // LH
	FlagNoHealthyUpstream                = streaminfo.FlagNoHealthyUpstream                // UH
	FlagUpstreamRequestTimeout           = streaminfo.FlagUpstreamRequestTimeout           // UT
	FlagLocalReset                       = streaminfo.FlagLocalReset                       // LR
	FlagUpstreamRemoteReset              = streaminfo.FlagUpstreamRemoteReset              // UR
	FlagUpstreamConnectionFailure        = streaminfo.FlagUpstreamConnectionFailure        // UF
	FlagUpstreamConnectionTermination    = streaminfo.FlagUpstreamConnectionTermination    // UC
	FlagUpstreamOverflow                 = streaminfo.FlagUpstreamOverflow                 // UO
	FlagNoRouteFound                     = streaminfo.FlagNoRouteFound                     // NR
	FlagDelayInjected                    = streaminfo.FlagDelayInjected                    // DI
	FlagFaultInjected                    = streaminfo.FlagFaultInjected                    // FI
	FlagRateLimited                      = streaminfo.FlagRateLimited                      // RL
	FlagUnauthorizedExternalService      = streaminfo.FlagUnauthorizedExternalService      // UAEX
	FlagRateLimitServiceError            = streaminfo.FlagRateLimitServiceError            // RLSE
	FlagDownstreamConnectionTermination  = streaminfo.FlagDownstreamConnectionTermination  // DC
	FlagUpstreamRetryLimitExceeded       = streaminfo.FlagUpstreamRetryLimitExceeded       // URX
	FlagStreamIdleTimeout                = streaminfo.FlagStreamIdleTimeout                // SI
	FlagInvalidEnvoyRequestHeaders       = streaminfo.FlagInvalidEnvoyRequestHeaders       // IH
	FlagDownstreamProtocolError          = streaminfo.FlagDownstreamProtocolError          // DPE
	FlagUpstreamMaxStreamDurationReached = streaminfo.FlagUpstreamMaxStreamDurationReached // UMSDR
	FlagResponseFromCacheFilter          = streaminfo.FlagResponseFromCacheFilter          // RFCF
	FlagNoFilterConfigFound              = streaminfo.FlagNoFilterConfigFound              // NFCF
	FlagDurationTimeout                  = streaminfo.FlagDurationTimeout                  // DT
	FlagUpstreamProtocolError            = streaminfo.FlagUpstreamProtocolError            // UPE
	FlagNoClusterFound                   = streaminfo.FlagNoClusterFound                   // NC
	FlagOverloadManager                  = streaminfo.FlagOverloadManager                  // OM
	FlagDNSResolutionFailed              = streaminfo.FlagDNSResolutionFailed              // DF
	FlagDropOverload                     = streaminfo.FlagDropOverload                     // DO
	FlagDownstreamRemoteReset            = streaminfo.FlagDownstreamRemoteReset            // DR
	FlagUnconditionalDropOverload        = streaminfo.FlagUnconditionalDropOverload        // UDO
)

// Response code details Envoy sets for the replies and resets hostsim models, what
// response.code_details holds (ResponseCodeDetailValues in envoy/stream_info/stream_info.h).
const (
	// DetailsViaUpstream: the response came from the upstream (Router::Filter::onUpstreamHeaders
	// sets it before encodeHeaders).
	DetailsViaUpstream = router.DetailsViaUpstream
	// DetailsClusterNotFound: the route's cluster does not exist (router decodeHeaders).
	DetailsClusterNotFound = router.DetailsClusterNotFound
	// DetailsNoHealthyUpstream: the cluster has no host to send to (sendNoHealthyUpstreamResponse).
	DetailsNoHealthyUpstream = router.DetailsNoHealthyUpstream
	// DetailsResponseTimeout: the route timeout fired (onResponseTimeout).
	DetailsResponseTimeout = router.DetailsResponseTimeout
	// DetailsUpstreamPerTryIdleTimeout: the upstream was idle too long (onPerTryIdleTimeout).
	DetailsUpstreamPerTryIdleTimeout = router.DetailsUpstreamPerTryIdleTimeout
	// DetailsStreamIdleTimeout: the connection manager's stream idle timer fired
	// (ActiveStream::onIdleTimeout).
	DetailsStreamIdleTimeout = connmgr.DetailsStreamIdleTimeout
	// DetailsRequestPayloadTooLarge: a buffered request body passed the buffer limit.
	DetailsRequestPayloadTooLarge = filtermanager.DetailsRequestPayloadTooLarge
	// DetailsResponsePayloadTooLarge: a buffered response body passed the buffer limit.
	DetailsResponsePayloadTooLarge = filtermanager.DetailsResponsePayloadTooLarge
	// DetailsWasmFailStream: the VM failed and FAIL_CLOSED answers 503 (Context::failStream).
	DetailsWasmFailStream = filtermanager.DetailsWasmFailStream
	// DetailsWasmCloseStream: the plugin reset the stream with proxy_close_stream before
	// anything else set the details (Context::closeStream, CloseStreamResponseDetails).
	DetailsWasmCloseStream = stream.DetailsWasmCloseStream
	// DetailsEarlyUpstreamReset prefixes the details of an upstream reset before the response
	// started: upstream_reset_before_response_started{reason|transport failure}.
	DetailsEarlyUpstreamReset = router.DetailsEarlyUpstreamReset
	// DetailsLateUpstreamReset prefixes the details of an upstream reset after it started.
	DetailsLateUpstreamReset = router.DetailsLateUpstreamReset
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
