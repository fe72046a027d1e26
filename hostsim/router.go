package hostsim

import (
	"errors"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
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

// ---------------------------------------------------------------------------------------
// The upstream's side of the exchange.

// stepRequest passes what the filter let through on to the upstream, calling it as Envoy's
// router would: a streaming upstream as soon as the headers passed (Router::Filter::
// decodeHeaders opens the upstream request), a buffered one once the whole request did.
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
	if ex.upReq == nil {
		ex.upReq = &UpstreamRequest{Headers: abi.ClonePairs(d.Headers)}
		if resolve := h.cfg.routeResolver; resolve != nil {
			if err := resolve(ex.upReq.Headers); err != nil {
				ex.up.Failed(err)
				return
			}
		}
	}
	if ex.up.Done() {
		return // the router answered or gave up
	}
	if h.cfg.streamUpstream != nil && !ex.upStarted {
		ex.upStarted = true
		ex.call = &UpstreamCall{ex: ex, ctx: ex.upCtx, headers: abi.ClonePairs(d.Headers)}
		ex.up.Activity()
		go h.cfg.streamUpstream(ex.call)
	}
	if len(d.ForwardedBody) > ex.reqSent {
		chunk := append([]byte(nil), d.ForwardedBody[ex.reqSent:]...)
		ex.upReq.BodyChunks = append(ex.upReq.BodyChunks, chunk)
		if ex.record || ex.call == nil {
			ex.upReq.Body = append(ex.upReq.Body, chunk...)
		}
		if ex.call != nil {
			ex.call.body.Push(chunk)
			ex.up.Activity()
		}
		ex.reqSent = len(d.ForwardedBody)
		if !ex.record {
			d.ForwardedBody, ex.reqSent = d.ForwardedBody[:0], 0
		}
	}
	if d.Complete && !ex.reqEnded {
		ex.reqEnded = true
		ex.upReq.Trailers = abi.ClonePairs(d.ForwardedTrailers)
		if ex.call != nil {
			ex.call.body.End(ex.upReq.Trailers)
		}
		if !ex.upStarted {
			ex.upStarted = true
			ex.up.Activity()
			h.post(event{kind: evUpstreamInvoke, ex: ex})
		}
		ex.up.RequestComplete(h.cfg.routeTimeout)
	}
}

// abandonUpstream stops taking the upstream's answer and cancels its context, as the
// router resets its upstream request (VM locked).
func (ex *Exchange) abandonUpstream() {
	if ex.up.Abandon() {
		ex.upCancel()
	}
	ex.play = nil
	if ex.call != nil {
		ex.call.body.Abandon()
	}
}

// invokeUpstream calls the buffered upstream outside the VM (on its own goroutine with a
// real clock).
func (h *Host) invokeUpstream(ex *Exchange) {
	run := func() {
		var resp *UpstreamResponse
		err := errors.New("no upstream configured")
		if h.cfg.upstream != nil {
			resp, err = h.cfg.upstream(ex.upCtx, ex.upReq)
		}
		if err == nil && resp == nil {
			err = errors.New("upstream returned no response")
		}
		ev := event{kind: evUpstreamDeliver, vm: ex.vm, gen: ex.gen, ex: ex, up: resp, upErr: err}
		if err == nil && resp.Delay > 0 {
			h.schedule(h.clock.Now().Add(resp.Delay), ev)
			return
		}
		h.post(ev)
	}
	if h.realtime {
		go run()
		return
	}
	run()
}

// deliverUpstream plays a buffered upstream's answer through the filter (VM locked): the
// headers now, each body chunk at its delay, then trailers, end of stream or a reset. An
// upstream error becomes the router's own reply.
func (ex *Exchange) deliverUpstream(resp *UpstreamResponse, upErr error) error {
	if ex.done || ex.up.Done() {
		return nil
	}
	n := len(ex.errs)
	if upErr != nil {
		ex.up.Failed(upErr)
	} else {
		ex.play, ex.playChunks, ex.playNext = resp, chunksOf(resp.Body, resp.BodyChunks), 0
		ex.responseHeaders(resp.Headers, len(ex.playChunks) == 0 && resp.Trailers == nil && resp.Reset == nil)
		ex.playUpstream()
	}
	ex.step()
	return errors.Join(ex.errs[n:]...)
}

// playUpstream delivers the buffered response's parts that are due (VM locked).
func (ex *Exchange) playUpstream() {
	for !ex.done && ex.play != nil && ex.playNext < len(ex.playChunks) {
		i := ex.playNext
		if d := delayAt(ex.play.ChunkDelays, i); d > 0 && !ex.playDue {
			ex.playDue = true
			ex.after(d, func(ex *Exchange) error { ex.playUpstream(); return nil })
			return
		}
		ex.playDue = false
		ex.playNext++
		last := i == len(ex.playChunks)-1
		ex.responseData(ex.playChunks[i], last && ex.play.Trailers == nil && ex.play.Reset == nil)
	}
	p := ex.play
	if ex.done || p == nil {
		return
	}
	if r := p.Reset; r != nil {
		if r.After > 0 && !ex.playDue {
			ex.playDue = true
			ex.after(r.After, func(ex *Exchange) error { ex.playUpstream(); return nil })
			return
		}
		ex.playDue, ex.play = false, nil
		ex.up.Reset(r)
		return
	}
	if p.Trailers != nil {
		ex.responseTrailers(p.Trailers)
	}
	ex.play = nil
}

// responseHeaders is the router's onUpstreamHeaders: details via_upstream, then the
// filter's encodeHeaders (VM locked).
func (ex *Exchange) responseHeaders(headers [][2]string, eos bool) {
	s := ex.s
	ex.up.Headers(eos)
	ex.touchStreamIdle() // FilterManager::encodeHeaders
	if s.Resp.Halted || s.Resp.GotHeaders {
		return
	}
	s.SetDetails(DetailsViaUpstream)
	_, err := s.OnHeaders(&s.Resp, headers, eos)
	ex.note(err)
}

// responseData passes an upstream body chunk to the filter (VM locked).
func (ex *Exchange) responseData(chunk []byte, eos bool) {
	ex.up.Data(eos)
	ex.touchStreamIdle() // FilterManager::encodeData
	if s := ex.s; !s.Resp.Halted {
		_, err := s.OnBody(&s.Resp, chunk, eos)
		ex.note(err)
	}
}

// responseTrailers passes the upstream's trailers to the filter (VM locked).
func (ex *Exchange) responseTrailers(trailers [][2]string) {
	ex.up.Trailers()
	ex.touchStreamIdle() // FilterManager::encodeTrailers
	if s := ex.s; !s.Resp.Halted {
		_, err := s.OnTrailers(&s.Resp, trailers)
		ex.note(err)
	}
}
