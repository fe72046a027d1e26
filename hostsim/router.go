package hostsim

import (
	"errors"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/retry"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
)

// The router's model is hostsim/internal/envoy/router: the upstream request's state, its
// timers and the replies the router makes itself; the stream idle timer is
// hostsim/internal/envoy/connmgr's. This file is the exchange's side of those seams (and of
// the HTTP stream's Driver), the router's public names, and the upstream's side of the
// exchange: what passed the filter goes to the upstream, its answer comes back through the
// filter. The client's side is downstream.go, the API over both exchange.go.

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
// connection manager's Stream and the HTTP stream's Driver, methods kept off Exchange's
// API. Each try is the router's Stream itself (tryStream, tries.go).
type modelStream Exchange

func (ms *modelStream) After(d time.Duration, f func()) {
	(*Exchange)(ms).after(d, func(*Exchange) error { f(); return nil })
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
	ex.envoyReplyWith(code, body, flag, details, nil)
}

// routerReply is the router answering itself (Filter::onUpstreamAbort, onResponseTimeout,
// decodeData's 507): with a retry policy its modify_headers_ add x-envoy-attempt-count when
// the route includes it in responses, and x-envoy-overloaded: true for a reset by a
// circuit breaker (Filter::onUpstreamReset's dropped, suppress_envoy_headers not modelled).
func (ex *Exchange) routerReply(r router.Reply, overloaded bool) {
	var extra [][2]string
	if overloaded {
		extra = append(extra, [2]string{"x-envoy-overloaded", "true"})
	}
	if rs := ex.vm.host.retries; rs != nil && rs.policy.IncludeAttemptCountInResponse && ex.routed {
		extra = append(extra, [2]string{retry.HeaderAttemptCount, strconv.FormatUint(uint64(ex.upTry.n), 10)})
	}
	ex.envoyReplyWith(r.Code, r.Body, r.Flag, r.Details, extra)
}

func (ex *Exchange) envoyReplyWith(code int, body string, flag ResponseFlags, details string, headers [][2]string) {
	if ex.done {
		return
	}
	s := ex.s
	s.Flags |= flag
	ex.abandonUpstream()
	lr := &LocalResponse{StatusCode: uint32(code), StatusCodeDetail: details, Data: []byte(body), Headers: headers, GRPCStatus: -1}
	s.SendLocalReply(lr, details)
	ex.vm.settle()
	ex.step()
}

// ---------------------------------------------------------------------------------------
// The upstream's side of the exchange: the router (Router::Filter) over its tries.

// stepRequest passes what the filter let through on to the router: at the request headers
// it routes (the route resolver, the retry policy with the request's x-envoy-* overrides,
// which it reads and removes from the shared header map — RetryStateImpl::create) and starts
// the first try; body chunks are buffered for retries while the retry state wants them
// (Filter::decodeData) and go to the try in flight; the request's end arms the route
// timeout (Filter::onRequestComplete).
func (ex *Exchange) stepRequest() {
	s, h := ex.s, ex.vm.host
	if s.Local != nil || s.Final != nil || s.ResetDetails != "" {
		// The stream is answered (or gone): Envoy's router never proceeds, or is reset.
		ex.abandonUpstream()
		return
	}
	d := &s.Req
	if !d.ForwardedHeaders || d.Halted {
		return
	}
	if !ex.routed {
		ex.routed = true
		if !ex.pickCluster() {
			return
		}
		if resolve := h.cfg.routeResolver; resolve != nil {
			var cluster string
			if ex.routeEntry != nil {
				cluster = ex.routeEntry.Cluster()
			}
			if err := resolve(cluster, abi.ClonePairs(d.Headers)); err != nil {
				ex.up.Failed(err)
				return
			}
		}
		if rs := h.retries; rs != nil {
			ex.hasPolicy = true
			ex.retryReq, d.Headers = rs.policy.ForRequest(d.Headers)
			if ex.retryReq.Enabled() {
				ex.retry = retry.NewState(ex.retryReq, rs.breaker, rs.rnd)
			}
		}
		ex.startTry(ex.upTry)
		if ex.done {
			return
		}
	}
	if len(d.ForwardedBody) > ex.reqSent {
		chunk := append([]byte(nil), d.ForwardedBody[ex.reqSent:]...)
		ex.reqSent = len(d.ForwardedBody)
		if !ex.record {
			d.ForwardedBody, ex.reqSent = d.ForwardedBody[:0], 0
		}
		aliased := d.ReleasedBuffer
		d.ReleasedBuffer = false
		ex.routerData(chunk, d.Complete && d.ForwardedTrailers == nil, aliased)
		if ex.done {
			return
		}
	}
	if d.Complete && !ex.reqEnded {
		ex.reqEnded = true
		ex.fwdTrailers = abi.ClonePairs(d.ForwardedTrailers)
		ex.armRouteTimeout()
		if t := ex.upTry; !ex.waiting && !t.ended && !t.inEnded {
			if ex.fwdTrailers != nil {
				ex.tryTrailers(t, ex.fwdTrailers)
			} else {
				ex.tryData(t, nil, true)
			}
		}
	}
}

// routerData is Filter::decodeData: while the retry state buffers, the chunk is kept for a
// retry (past the retry buffer limit the router gives up retrying, or answers 507 while a
// retry's back-off runs), and a copy goes to the try in flight.
//
// aliased: the chunk is the connection manager's buffer the downstream filter buffered and
// released, which Envoy counts twice against the limit (retry.State.Body).
func (ex *Exchange) routerData(chunk []byte, eos, aliased bool) {
	if ex.retry != nil {
		switch ex.retry.Body(uint64(len(chunk)), aliased) {
		case retry.BodyTooLarge:
			ex.routerReply(router.Reply{Code: retry.TooLargeCode, Body: retry.TooLargeBody, Details: retry.TooLargeDetails}, false)
			return
		case retry.BodyBuffered:
			ex.rbody = append(ex.rbody, chunk...)
		case retry.BodyOverLimit:
			ex.rbody = nil
			ex.vm.host.log(ex.vm, LogDebug, "router: the request body exceeds the retry buffer limit: giving up on retries")
		}
	}
	if t := ex.upTry; !ex.waiting && !t.ended {
		ex.tryData(t, chunk, eos)
	}
}

// armRouteTimeout arms the route timeout once the whole request reached the router
// (Filter::onRequestComplete): it spans every try and back-off, and answers 504 "upstream
// request timeout" (UT, response_timeout) unless the response finished first.
func (ex *Exchange) armRouteTimeout() {
	rt := ex.vm.host.cfg.routeTimeout
	if rt <= 0 {
		return
	}
	ex.after(rt, func(ex *Exchange) error {
		if ex.done || (!ex.waiting && ex.up.Done()) {
			return nil
		}
		ex.routerReply(router.TimeoutReply(router.DetailsResponseTimeout), false)
		return nil
	})
}

// abandonUpstream stops taking the upstream's answer and cancels its context, as the
// router resets its upstream request (VM locked).
func (ex *Exchange) abandonUpstream() { ex.endTry(ex.upTry) }

// invokeUpstream calls the buffered upstream for try t outside the VM (on its own
// goroutine with a real clock).
func (h *Host) invokeUpstream(ex *Exchange, t *upTry) {
	h.runHandler(func() {
		var resp *UpstreamResponse
		err := errors.New("no upstream configured")
		if h.cfg.upstream != nil {
			resp, err = h.cfg.upstream(t.upCtx, t.upReq)
		}
		if err == nil && resp == nil {
			err = errors.New("upstream returned no response")
		}
		var delay time.Duration
		if err == nil {
			delay = resp.Delay
		}
		h.deliverAfter(delay, event{kind: evUpstreamDeliver, vm: ex.vm, gen: ex.gen, ex: ex, try: t, up: resp, upErr: err})
	})
}

// current reports whether t is the exchange's try in flight.
func (ex *Exchange) current(t *upTry) bool { return !ex.done && t == ex.upTry && !t.ended }

// deliverUpstream plays a buffered upstream's answer to try t (VM locked): the headers now,
// each body chunk at its delay, then trailers, end of stream or a reset. An upstream error
// is the try failing before its response.
func (ex *Exchange) deliverUpstream(t *upTry, resp *UpstreamResponse, upErr error) error {
	if !ex.current(t) || t.up.Done() {
		return nil
	}
	n := len(ex.errs)
	if upErr != nil {
		ex.tryFailed(t, upErr)
	} else {
		t.play, t.playChunks, t.playNext = resp, chunksOf(resp.Body, resp.BodyChunks), 0
		ex.responseHeaders(t, resp.Headers, len(t.playChunks) == 0 && resp.Trailers == nil && resp.Reset == nil)
		ex.playUpstream(t)
	}
	ex.step()
	return errors.Join(ex.errs[n:]...)
}

// playUpstream delivers the buffered response's parts that are due (VM locked).
func (ex *Exchange) playUpstream(t *upTry) {
	for ex.current(t) && t.play != nil && t.playNext < len(t.playChunks) {
		i := t.playNext
		if d := delayAt(t.play.ChunkDelays, i); d > 0 && !t.playDue {
			t.playDue = true
			ex.after(d, func(ex *Exchange) error { ex.playUpstream(t); return nil })
			return
		}
		t.playDue = false
		t.playNext++
		last := i == len(t.playChunks)-1
		ex.responseData(t, t.playChunks[i], last && t.play.Trailers == nil && t.play.Reset == nil)
	}
	p := t.play
	if !ex.current(t) || p == nil {
		return
	}
	if r := p.Reset; r != nil {
		if r.After > 0 && !t.playDue {
			t.playDue = true
			ex.after(r.After, func(ex *Exchange) error { ex.playUpstream(t); return nil })
			return
		}
		t.playDue, t.play = false, nil
		ex.tryReset(t, r)
		return
	}
	if p.Trailers != nil {
		ex.responseTrailers(t, p.Trailers)
	}
	t.play = nil
}

// responseHeaders is try t's response headers arriving from the upstream: through the
// upstream filter first, if there is one (its encodeHeaders), then the router's
// onUpstreamHeaders on what it let through (VM locked).
func (ex *Exchange) responseHeaders(t *upTry, headers [][2]string, eos bool) {
	t.up.Headers(eos)
	ex.touchStreamIdle() // FilterManager::encodeHeaders
	if u := t.u; u != nil {
		if !u.Resp.Halted && !u.Resp.GotHeaders {
			_, err := u.OnHeaders(&u.Resp, headers, eos)
			ex.note(err)
		}
		ex.stepTry(t)
		return
	}
	ex.upstreamHeaders(t, abi.ClonePairs(headers), eos)
}

// responseData passes an upstream body chunk of try t on (VM locked): to the upstream
// filter, or to the downstream filter once the try's response went downstream.
func (ex *Exchange) responseData(t *upTry, chunk []byte, eos bool) {
	t.up.Data(eos)
	ex.touchStreamIdle() // FilterManager::encodeData
	if u := t.u; u != nil {
		if !u.Resp.Halted {
			_, err := u.OnBody(&u.Resp, chunk, eos)
			ex.note(err)
		}
		ex.stepTry(t)
		return
	}
	if s := ex.s; t.passed && !s.Resp.Halted {
		_, err := s.OnBody(&s.Resp, chunk, eos)
		ex.note(err)
	}
}

// responseTrailers passes the upstream's trailers of try t on (VM locked).
func (ex *Exchange) responseTrailers(t *upTry, trailers [][2]string) {
	t.up.Trailers()
	ex.touchStreamIdle() // FilterManager::encodeTrailers
	if u := t.u; u != nil {
		if !u.Resp.Halted {
			_, err := u.OnTrailers(&u.Resp, trailers)
			ex.note(err)
		}
		ex.stepTry(t)
		return
	}
	if s := ex.s; t.passed && !s.Resp.Halted {
		_, err := s.OnTrailers(&s.Resp, trailers)
		ex.note(err)
	}
}
