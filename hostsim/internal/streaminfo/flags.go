// Package streaminfo is Envoy's stream info as a plugin reads it: the legacy response-flag
// bitmask (response.flags), the reset reasons the router maps to flags, and how Envoy
// writes the details it is given (response.code_details).
package streaminfo

import "strings"

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
