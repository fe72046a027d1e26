package streaminfo

import "strconv"

// ResetReason is why an upstream stream ended in a reset (Http::StreamResetReason).
type ResetReason int

// The reset reasons, as envoy/http/stream_reset_handler.h names them.
const (
	ResetLocalConnectionFailure ResetReason = iota
	ResetRemoteConnectionFailure
	ResetConnectionTimeout
	ResetConnectionTermination
	ResetLocalReset
	ResetLocalRefusedStreamReset
	ResetOverflow
	ResetRemoteReset
	ResetRemoteRefusedStreamReset
	ResetConnectError
	ResetProtocolError
	ResetOverloadManager
)

var resetReasonNames = [...]string{"local connection failure", "remote connection failure", "connection timeout",
	"connection termination", "local reset", "local refused stream reset", "overflow", "remote reset",
	"remote refused stream reset", "remote error with CONNECT request", "protocol error", "overload manager reset"}

// String is Http::Utility::resetReasonToString.
func (r ResetReason) String() string {
	if r >= 0 && int(r) < len(resetReasonNames) {
		return resetReasonNames[r]
	}
	return "reset reason " + strconv.Itoa(int(r))
}

// ResetFlag is Router::Filter::streamResetReasonToResponseFlag: the flag the router sets
// for an upstream reset.
func ResetFlag(r ResetReason) ResponseFlags {
	switch r {
	case ResetLocalConnectionFailure, ResetRemoteConnectionFailure, ResetConnectionTimeout:
		return FlagUpstreamConnectionFailure
	case ResetConnectionTermination:
		return FlagUpstreamConnectionTermination
	case ResetLocalReset, ResetLocalRefusedStreamReset:
		return FlagLocalReset
	case ResetOverflow:
		return FlagUpstreamOverflow
	case ResetRemoteReset, ResetRemoteRefusedStreamReset, ResetConnectError:
		return FlagUpstreamRemoteReset
	case ResetProtocolError:
		return FlagUpstreamProtocolError
	case ResetOverloadManager:
		return FlagOverloadManager
	}
	return FlagUpstreamRemoteReset
}
