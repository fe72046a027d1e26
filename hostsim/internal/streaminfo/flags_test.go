package streaminfo

import "testing"

// ResponseFlags prints like Envoy's %RESPONSE_FLAGS%.
func TestResponseFlagsString(t *testing.T) {
	for _, c := range []struct {
		f    ResponseFlags // the flags
		want string        // how %RESPONSE_FLAGS% prints them
	}{
		{0, "-"},
		{FlagUpstreamConnectionFailure, "UF"},
		{FlagUpstreamConnectionFailure | FlagUpstreamRetryLimitExceeded, "UF,URX"},
		{FlagNoClusterFound, "NC"},
		{FlagDownstreamRemoteReset | FlagFailedLocalHealthCheck, "LH,DR"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("%#x: %q, want %q", uint64(c.f), got, c.want)
		}
	}
	// Bit positions as envoy/stream_info/stream_info.h's CoreResponseFlag enum.
	if FlagNoHealthyUpstream != 0x2 || FlagDownstreamConnectionTermination != 0x4000 ||
		FlagNoClusterFound != 0x1000000 || FlagDownstreamRemoteReset != 0x10000000 {
		t.Fatal("flag bit positions differ from Envoy's")
	}
}
