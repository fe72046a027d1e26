package hostsim

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// This file is Envoy's router filter as far as an exchange needs it: what it answers itself
// when the upstream cannot (source/common/router/router.cc), with the response flags and
// code details it sets first.

// ErrClusterNotFound, returned by an upstream, is the router finding no cluster for the
// route (Router::Filter::decodeHeaders): 503 with an empty body, flag NC, details
// cluster_not_found.
var ErrClusterNotFound = errors.New("hostsim: cluster not found")

// ErrNoHealthyUpstream, returned by an upstream, is a cluster without a host to send to
// (Router::Filter::sendNoHealthyUpstreamResponse): 503 "no healthy upstream", flag UH,
// details no_healthy_upstream.
var ErrNoHealthyUpstream = errors.New("hostsim: no healthy upstream")

// UpstreamReset is an upstream stream that ended in a reset. Returned (or wrapped) as an
// UpstreamFunc's error, or passed to UpstreamCall.Fail, it is a reset before the response
// started; as UpstreamResponse.Reset it comes after the response's body chunks. The router
// answers it as Router::Filter::onUpstreamReset does: before the response went downstream a
// 503 (502 for a protocol error) "upstream connect error or disconnect/reset before headers.
// reset reason: ..." with details upstream_reset_before_response_started{...} (or
// ..._after_response_started once upstream headers arrived), after it a reset of the
// downstream stream.
type UpstreamReset struct {
	// Reason is the reset reason; its flag is Envoy's (UF for connection failures and
	// timeouts, UC for a terminated connection, UR for a remote reset, ...).
	Reason ResetReason
	// TransportFailure is the transport failure reason, e.g. "delayed connect error:
	// Connection refused" (Envoy's ConnectionImpl), or "" for none.
	TransportFailure string
	// After delays the reset past the last body chunk (UpstreamResponse.Reset only; virtual
	// time with a virtual clock).
	After time.Duration
}

// Error implements error.
func (r *UpstreamReset) Error() string {
	msg := "hostsim: upstream reset: " + r.Reason.String()
	if r.TransportFailure != "" {
		msg += ", transport failure reason: " + r.TransportFailure
	}
	return msg
}

// Bodies of the router's own replies.
const (
	resetBodyPrefix = "upstream connect error or disconnect/reset before headers. reset reason: "
	timeoutBody     = "upstream request timeout"
	noHealthyBody   = "no healthy upstream"
	// streamTimeoutBody is the connection manager's stream idle timeout reply
	// (ActiveStream::onIdleTimeout).
	streamTimeoutBody = "stream timeout"
)

// upstreamFailed answers an upstream that failed before its response started (VM locked).
// Any error but the typed ones is a remote connection failure.
func (ex *Exchange) upstreamFailed(err error) {
	var reset *UpstreamReset
	switch {
	case errors.Is(err, ErrClusterNotFound):
		ex.routerReply(503, "", FlagNoClusterFound, DetailsClusterNotFound)
	case errors.Is(err, ErrNoHealthyUpstream):
		ex.routerReply(503, noHealthyBody, FlagNoHealthyUpstream, DetailsNoHealthyUpstream)
	case errors.As(err, &reset):
		ex.upstreamReset(reset)
	default:
		ex.vm.host.log(ex.vm, LogDebug, "upstream error: "+err.Error())
		ex.upstreamReset(&UpstreamReset{Reason: ResetRemoteConnectionFailure})
	}
}

// upstreamReset is Router::Filter::onUpstreamReset (no retries).
func (ex *Exchange) upstreamReset(r *UpstreamReset) {
	code := 503
	if r.Reason == ResetProtocolError {
		code = 502
	}
	body := resetBodyPrefix + r.Reason.String()
	inner := r.Reason.String()
	if r.TransportFailure != "" {
		body += ", transport failure reason: " + r.TransportFailure
		inner += "|" + r.TransportFailure
	}
	basic := DetailsEarlyUpstreamReset
	if ex.upHeaders {
		basic = DetailsLateUpstreamReset
	}
	ex.routerReply(code, body, streaminfo.ResetFlag(r.Reason), streaminfo.ReplaceAllEmptySpace(basic+"{"+inner+"}"))
}

// routerTimeout is the route timeout (onResponseTimeout) or the per-try idle timeout
// (onPerTryIdleTimeout): 504 "upstream request timeout", flag UT.
func (ex *Exchange) routerTimeout(details string) {
	ex.routerReply(504, timeoutBody, FlagUpstreamRequestTimeout, details)
}

// routerReply is the router giving up on the upstream and answering itself (envoyReply).
func (ex *Exchange) routerReply(code int, body string, flag ResponseFlags, details string) {
	ex.envoyReply(code, body, flag, details)
}

// envoyReply is Envoy answering the stream itself, the router or the connection manager:
// it sets the flag, abandons the upstream call (cancelling its context), and calls
// sendLocalReply, which goes through the filter when no response has started, replaces
// response headers the filter holds, and resets the stream once headers went downstream
// (VM locked).
func (ex *Exchange) envoyReply(code int, body string, flag ResponseFlags, details string) {
	if ex.done {
		return
	}
	s := ex.s
	s.flags |= flag
	ex.abandonUpstream()
	lr := &LocalResponse{StatusCode: uint32(code), StatusCodeDetail: details, Data: []byte(body), GRPCStatus: -1}
	s.sendLocalReply(lr, details)
	ex.vm.settle()
	ex.step()
}
