package hostsim

import (
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

// The response flags hostsim sets (what Response.Flags and response.flags can hold), in
// Envoy's CoreResponseFlag order: the router's for its own replies and for upstream resets
// (streaminfo.ResetFlag), the connection manager's for idle timeouts and downstream resets,
// and DPE, which hostsim serve's front end sets on a request Envoy's HTTP/1 codec refuses.
// ResponseFlags.String prints any of Envoy's.
const (
	FlagNoHealthyUpstream               = streaminfo.FlagNoHealthyUpstream               // UH
	FlagUpstreamRequestTimeout          = streaminfo.FlagUpstreamRequestTimeout          // UT
	FlagLocalReset                      = streaminfo.FlagLocalReset                      // LR
	FlagUpstreamRemoteReset             = streaminfo.FlagUpstreamRemoteReset             // UR
	FlagUpstreamConnectionFailure       = streaminfo.FlagUpstreamConnectionFailure       // UF
	FlagUpstreamConnectionTermination   = streaminfo.FlagUpstreamConnectionTermination   // UC
	FlagUpstreamOverflow                = streaminfo.FlagUpstreamOverflow                // UO
	FlagUpstreamRetryLimitExceeded      = streaminfo.FlagUpstreamRetryLimitExceeded      // URX
	FlagDownstreamConnectionTermination = streaminfo.FlagDownstreamConnectionTermination // DC
	FlagStreamIdleTimeout               = streaminfo.FlagStreamIdleTimeout               // SI
	FlagDownstreamProtocolError         = streaminfo.FlagDownstreamProtocolError         // DPE
	FlagUpstreamProtocolError           = streaminfo.FlagUpstreamProtocolError           // UPE
	FlagNoClusterFound                  = streaminfo.FlagNoClusterFound                  // NC
	FlagOverloadManager                 = streaminfo.FlagOverloadManager                 // OM
	FlagDownstreamRemoteReset           = streaminfo.FlagDownstreamRemoteReset           // DR
)

// Response code details a test compares with Response.Details and the plugin reads as
// response.code_details; doc.go lists the others hostsim sets, each from Envoy's
// ResponseCodeDetailValues (envoy/stream_info/stream_info.h).
const (
	// DetailsViaUpstream: the response came from the upstream (Router::Filter::onUpstreamHeaders
	// sets it before encodeHeaders).
	DetailsViaUpstream = router.DetailsViaUpstream
	// DetailsWasmCloseStream: the plugin reset the stream with proxy_close_stream before
	// anything else set the details (Context::closeStream, CloseStreamResponseDetails).
	DetailsWasmCloseStream = stream.DetailsWasmCloseStream
)

// ResetReason is why an upstream stream ended in a reset (Http::StreamResetReason).
type ResetReason = streaminfo.ResetReason

// The reset reasons, as envoy/http/stream_reset_handler.h names them: all of them, as an
// UpstreamReset may carry any.
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
