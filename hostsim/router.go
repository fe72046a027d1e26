package hostsim

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
)

// The router's model is hostsim/internal/envoy/router: the upstream request's state, its
// timers and the replies the router makes itself; the stream idle timer is
// hostsim/internal/envoy/connmgr's. This file is the exchange's side of those seams and the
// router's public names.

// ErrClusterNotFound, returned by an upstream, is the router finding no cluster for the
// route (Router::Filter::decodeHeaders): 503 with an empty body, flag NC, details
// cluster_not_found.
var ErrClusterNotFound = router.ErrClusterNotFound

// ErrNoHealthyUpstream, returned by an upstream, is a cluster without a host to send to
// (Router::Filter::sendNoHealthyUpstreamResponse): 503 "no healthy upstream", flag UH,
// details no_healthy_upstream.
var ErrNoHealthyUpstream = router.ErrNoHealthyUpstream

// UpstreamReset is an upstream stream that ended in a reset. Returned (or wrapped) as an
// UpstreamFunc's error, or passed to UpstreamCall.Fail, it is a reset before the response
// started; as UpstreamResponse.Reset it comes after the response's body chunks. The router
// answers it as Router::Filter::onUpstreamReset does: before the response went downstream a
// 503 (502 for a protocol error) "upstream connect error or disconnect/reset before headers.
// reset reason: ..." with details upstream_reset_before_response_started{...} (or
// ..._after_response_started once upstream headers arrived), after it a reset of the
// downstream stream.
type UpstreamReset = router.Reset

// modelStream is the exchange as the Envoy model's packages see it (VM locked): the
// router's Stream, the connection manager's and the HTTP stream's Driver, methods kept
// off Exchange's API.
type modelStream Exchange

func (ms *modelStream) Reply(r router.Reply) {
	(*Exchange)(ms).envoyReply(r.Code, r.Body, r.Flag, r.Details)
}

func (ms *modelStream) After(d time.Duration, f func()) {
	(*Exchange)(ms).after(d, func(*Exchange) error { f(); return nil })
}

func (ms *modelStream) Debug(msg string) {
	ex := (*Exchange)(ms)
	ex.vm.host.log(ex.vm, LogDebug, msg)
}

func (ms *modelStream) Now() time.Time { return ms.vm.host.clock.Now() }

func (ms *modelStream) IdleTimeout() { (*Exchange)(ms).streamIdleTimeout() }

// Activity is the stream's stream.Driver hearing of an event either way: it re-arms the
// connection manager's stream idle timer.
func (ms *modelStream) Activity() { (*Exchange)(ms).touchStreamIdle() }

// Settled moves the exchange on once the stream's deferred actions ran.
func (ms *modelStream) Settled() { (*Exchange)(ms).step() }

// ClientReset finishes the exchange of a stream the client reset (stream.Stream.
// ResetDownstream); finishing completes the stream.
func (ms *modelStream) ClientReset() error {
	ex := (*Exchange)(ms)
	n := len(ex.errs)
	ex.clientGone = true
	ex.finish()
	return errors.Join(ex.errs[n:]...)
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
	s.Flags |= flag
	ex.abandonUpstream()
	lr := &LocalResponse{StatusCode: uint32(code), StatusCodeDetail: details, Data: []byte(body), GRPCStatus: -1}
	s.SendLocalReply(lr, details)
	ex.vm.settle()
	ex.step()
}
