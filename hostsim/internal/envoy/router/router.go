// Package router is Envoy's router filter as far as hostsim's exchanges need it
// (source/common/router/router.cc): the state of the upstream request — response started,
// finished or abandoned, its per-try idle timer, the route timeout — and the replies the
// router makes itself when the upstream cannot answer, with the response flags and code
// details it sets first. It knows no VM and no filter: the stream it serves is a Stream.
//
// An Upstream is one try. Every way it ends badly comes through Upstream.Failed,
// Upstream.Reset or a timer here; with a retry policy the exchange asks the retry model
// (hostsim/internal/envoy/retry) first and comes here only for the reply.
package router

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// ErrClusterNotFound, returned by an upstream, is the router finding no cluster for the
// route (Router::Filter::decodeHeaders): 503 with an empty body, flag NC, details
// cluster_not_found.
var ErrClusterNotFound = errors.New("hostsim: cluster not found")

// ErrNoHealthyUpstream, returned by an upstream, is a cluster without a host to send to
// (Router::Filter::sendNoHealthyUpstreamResponse): 503 "no healthy upstream", flag UH,
// details no_healthy_upstream.
var ErrNoHealthyUpstream = errors.New("hostsim: no healthy upstream")

// Response code details the router sets (ResponseCodeDetailValues in
// envoy/stream_info/stream_info.h).
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
	// DetailsUpstreamPerTryTimeout: a try's per-try timeout fired and it was not retried
	// (Filter::onPerTryTimeoutCommon → onUpstreamAbort).
	DetailsUpstreamPerTryTimeout = "upstream_per_try_timeout"
	// DetailsEarlyUpstreamReset prefixes the details of an upstream reset before the response
	// started: upstream_reset_before_response_started{reason|transport failure}.
	DetailsEarlyUpstreamReset = "upstream_reset_before_response_started"
	// DetailsLateUpstreamReset prefixes the details of an upstream reset after it started.
	DetailsLateUpstreamReset = "upstream_reset_after_response_started"
)

// Bodies of the router's own replies.
const (
	resetBodyPrefix        = "upstream connect error or disconnect/reset before headers. reset reason: "
	retriedResetBodyPrefix = "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: "
	timeoutBody            = "upstream request timeout"
	noHealthyBody          = "no healthy upstream"
)

// Reset is an upstream stream that ended in a reset. Returned (or wrapped) as an upstream's
// error, it is a reset before the response started; as the end of a response it comes
// after the response's body chunks. The router answers it as Router::Filter::onUpstreamReset
// does: before the response went downstream a 503 (502 for a protocol error) "upstream
// connect error or disconnect/reset before headers. reset reason: ..." with details
// upstream_reset_before_response_started{...} (or ..._after_response_started once upstream
// headers arrived), after it a reset of the downstream stream.
type Reset struct {
	// Reason is the reset reason; its flag is Envoy's (UF for connection failures and
	// timeouts, UC for a terminated connection, UR for a remote reset, ...).
	Reason streaminfo.ResetReason
	// TransportFailure is the transport failure reason, e.g. "delayed connect error:
	// Connection refused" (Envoy's ConnectionImpl), or "" for none.
	TransportFailure string
	// After delays the reset past the last body chunk (a response's reset only; virtual
	// time with a virtual clock).
	After time.Duration
}

// Error implements error.
func (r *Reset) Error() string {
	msg := "hostsim: upstream reset: " + r.Reason.String()
	if r.TransportFailure != "" {
		msg += ", transport failure reason: " + r.TransportFailure
	}
	return msg
}

// Reply is an answer the router makes itself: the status, the body, the response flag it
// sets and the response code details.
type Reply struct {
	Code    int
	Body    string
	Flag    streaminfo.ResponseFlags
	Details string
}

// FailureReply is the router's answer to an upstream that failed before its response
// started: ErrClusterNotFound (NC), ErrNoHealthyUpstream (UH), a *Reset (ResetReply), and
// any other error a remote connection failure; known is false for the last, which the
// caller may want to log.
func FailureReply(err error, responseStarted bool) (r Reply, known bool) {
	var reset *Reset
	switch {
	case errors.Is(err, ErrClusterNotFound):
		return Reply{503, "", streaminfo.FlagNoClusterFound, DetailsClusterNotFound}, true
	case errors.Is(err, ErrNoHealthyUpstream):
		return Reply{503, noHealthyBody, streaminfo.FlagNoHealthyUpstream, DetailsNoHealthyUpstream}, true
	case errors.As(err, &reset):
		return ResetReply(reset, responseStarted), true
	default:
		return ResetReply(&Reset{Reason: streaminfo.ResetRemoteConnectionFailure}, responseStarted), false
	}
}

// ResetReply is Router::Filter::onUpstreamReset's answer (no retries): 503, or 502 for a
// protocol error, the reason's flag, and details naming the reason and transport failure,
// early or late by whether the upstream's response headers had arrived.
func ResetReply(r *Reset, responseStarted bool) Reply {
	code := 503
	if r.Reason == streaminfo.ResetProtocolError {
		code = 502
	}
	body := resetBodyPrefix + r.Reason.String()
	inner := r.Reason.String()
	if r.TransportFailure != "" {
		body += ", transport failure reason: " + r.TransportFailure
		inner += "|" + r.TransportFailure
	}
	basic := DetailsEarlyUpstreamReset
	if responseStarted {
		basic = DetailsLateUpstreamReset
	}
	return Reply{code, body, streaminfo.ResetFlag(r.Reason), streaminfo.ReplaceAllEmptySpace(basic + "{" + inner + "}")}
}

// RetriedResetReply is ResetReply for a request the router had retried (is_retry_):
// Filter::onUpstreamReset's body then says "retried and the latest reset reason: ...".
func RetriedResetReply(r *Reset, responseStarted bool) Reply {
	rep := ResetReply(r, responseStarted)
	rep.Body = retriedResetBodyPrefix + rep.Body[len(resetBodyPrefix):]
	return rep
}

// TimeoutReply is the route timeout (onResponseTimeout) or the per-try idle timeout
// (onPerTryIdleTimeout, details upstream_per_try_idle_timeout): 504 "upstream request
// timeout", flag UT.
func TimeoutReply(details string) Reply {
	return Reply{504, timeoutBody, streaminfo.FlagUpstreamRequestTimeout, details}
}

// Stream is what the router needs of the downstream stream it serves (the caller's lock
// held throughout).
type Stream interface {
	// Reply is the router giving up on the upstream and answering itself through the
	// connection manager's sendLocalReply, setting the flag first; it abandons the upstream.
	Reply(r Reply)
	// After runs f d from now on the host's clock, unless the stream ended before.
	After(d time.Duration, f func())
	// Debug logs a line about the upstream at debug level.
	Debug(msg string)
}

// Upstream is the router's upstream request for one stream. The zero value is not usable:
// make one with New.
type Upstream struct {
	s       Stream
	idle    time.Duration // the per-try idle timeout, 0 for none
	started bool          // response headers arrived: the router's downstream_response_started_
	done    bool          // the upstream finished, failed, or was abandoned
	idleGen uint64        // the per-try idle timer armed last
}

// New is the upstream request of s, with the route's per-try idle timeout (0: none).
func New(s Stream, perTryIdle time.Duration) Upstream { return Upstream{s: s, idle: perTryIdle} }

// Done reports whether the upstream request is over: it finished, failed, or the router
// abandoned it; what the upstream sends afterwards is not taken.
func (u *Upstream) Done() bool { return u.done }

// ResponseStarted reports whether the upstream's response headers arrived.
func (u *Upstream) ResponseStarted() bool { return u.started }

// Abandon ends the upstream request from the router's side, as it resets its upstream
// request; it reports whether the request was still going (the caller cancels it then).
func (u *Upstream) Abandon() bool {
	if u.done {
		return false
	}
	u.done = true
	return true
}

// Activity re-arms the per-try idle timeout after upstream activity (onPerTryIdleTimeout
// fires when none came for that long).
func (u *Upstream) Activity() {
	if u.idle <= 0 || u.done {
		return
	}
	u.idleGen++
	gen := u.idleGen
	u.s.After(u.idle, func() {
		if u.idleGen == gen && !u.done {
			u.s.Reply(TimeoutReply(DetailsUpstreamPerTryIdleTimeout))
		}
	})
}

// RequestComplete is Router::Filter::onRequestComplete: the whole request went upstream,
// and the route timeout (0: none) is armed.
func (u *Upstream) RequestComplete(routeTimeout time.Duration) {
	if routeTimeout <= 0 {
		return
	}
	u.s.After(routeTimeout, func() {
		if !u.done {
			u.s.Reply(TimeoutReply(DetailsResponseTimeout))
		}
	})
}

// Headers is the upstream's response headers arriving (onUpstreamHeaders); eos: a
// response without body. The caller then sets details via_upstream and encodes them.
func (u *Upstream) Headers(eos bool) {
	u.started = true
	u.Activity()
	if eos {
		u.done = true
	}
}

// Data is an upstream response body chunk arriving (onUpstreamData).
func (u *Upstream) Data(eos bool) {
	u.Activity()
	if eos {
		u.done = true
	}
}

// Trailers is the upstream's response trailers arriving, which end it (onUpstreamTrailers).
func (u *Upstream) Trailers() { u.done = true }

// Failed is the upstream failing before its response started: the router's own reply
// (FailureReply), an untyped error logged first.
func (u *Upstream) Failed(err error) {
	r, known := FailureReply(err, u.started)
	if !known {
		u.s.Debug("upstream error: " + err.Error())
	}
	u.s.Reply(r)
}

// FailedAfterHeaders is the upstream failing once its response headers arrived: a *Reset is
// that reset, any other error a terminated connection (UC), logged first.
func (u *Upstream) FailedAfterHeaders(err error) {
	var reset *Reset
	if !errors.As(err, &reset) {
		u.s.Debug("upstream failed after its headers: " + err.Error())
		reset = &Reset{Reason: streaminfo.ResetConnectionTermination}
	}
	u.Reset(reset)
}

// Reset is the upstream stream reset (Router::Filter::onUpstreamReset, no retries).
func (u *Upstream) Reset(r *Reset) { u.s.Reply(ResetReply(r, u.started)) }
