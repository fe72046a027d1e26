package hostsim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/filtermanager"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/retry"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/stream"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// The router's tries (source/common/router/router.cc Filter, upstream_request.cc
// UpstreamRequest): one upTry per try, with its own upstream request, its own upstream
// HTTP filter stream (WithUpstreamFilter: a new Wasm context per try, built with the try),
// the request headers it reads from the router's shared header map, the body the router
// replays to it, and its response, which goes through the upstream filter and then to the
// retry decision (hostsim/internal/envoy/retry) before anything reaches the downstream
// filter. Every retried, reset or finished try's filter context gets on_done and on_delete
// right after the try ends (UpstreamRequest::cleanUp → destroyFilters), never on_log.

// upTry is one try of an exchange's request (VM locked).
type upTry struct {
	ex *Exchange
	n  uint32 // the attempt count (1 for the first try)
	// cluster is the try's cluster (WithRouteCluster; "": none configured).
	cluster string
	u       *httpStream // the upstream filter's stream (nil: no upstream filter)

	upReq     *UpstreamRequest // what reached the upstream (nil until the headers did)
	upStarted bool             // the upstream was called
	upCtx     context.Context
	upCancel  context.CancelFunc
	call      *UpstreamCall   // streaming upstream
	up        router.Upstream // the router's upstream request

	// A buffered upstream response being played.
	play       *UpstreamResponse
	playChunks [][]byte
	playNext   int
	playDue    bool

	inEnded    bool // the router sent the try the end of the request
	outHeaders bool // the request headers left the upstream filter
	outSent    int  // bytes of u.Req.ForwardedBody taken
	outEnded   bool // the end of the request went upstream

	decided   bool // the router decided on the try's response headers
	passed    bool // the try's response goes downstream
	respSent  int  // bytes of u.Resp.ForwardedBody passed downstream
	respEnded bool // the end of the try's response went downstream

	local        *filtermanager.LocalReply // a local reply the upstream filter sent
	localDetails string
	final        bool // the upstream filter's reply or reset was handed downstream
	ended        bool // the try is over: reset, retried, or its response done
}

// newTry is the exchange's next try, not started.
func (ex *Exchange) newTry() *upTry {
	t := &upTry{ex: ex, n: uint32(len(ex.tries) + 1)}
	t.upCtx, t.upCancel = context.WithCancel(ex.ctx)
	t.up = router.New((*tryStream)(t), ex.vm.host.cfg.upstreamIdleTimeout)
	ex.tries = append(ex.tries, t)
	return t
}

// startTry starts try t (Filter::decodeHeaders for the first, Filter::doRetry for a retry):
// the router writes the attempt count into the shared request headers when the route asks
// for it, builds the try's upstream filter chain, and sends it the headers — for a retry
// also the body buffered so far and, if the request ended, its end (later chunks follow
// from routerData).
func (ex *Exchange) startTry(t *upTry) {
	h, s := ex.vm.host, ex.s
	ex.upTry = t
	if e := ex.routeEntry; e != nil {
		t.cluster = e.Cluster()
	}
	if rs := h.retries; rs != nil && rs.policy.IncludeAttemptCountInRequest {
		s.Req.Headers = abi.SetHeader(s.Req.Headers, retry.HeaderAttemptCount, strconv.FormatUint(uint64(t.n), 10))
	}
	if h.cfg.upstreamFilter != nil {
		t.u = ex.vm.newUpstreamStream(ex, t)
	}
	d := &s.Req
	if t.n == 1 {
		ex.tryHeaders(t, d.Complete && len(d.ForwardedBody) == 0 && d.ForwardedTrailers == nil)
		return
	}
	body := append([]byte(nil), ex.rbody...)
	ex.tryHeaders(t, ex.reqEnded && len(body) == 0 && ex.fwdTrailers == nil)
	if !ex.current(t) {
		return
	}
	if len(body) > 0 {
		ex.tryData(t, body, ex.reqEnded && ex.fwdTrailers == nil)
	}
	if ex.current(t) && ex.reqEnded && ex.fwdTrailers != nil {
		ex.tryTrailers(t, ex.fwdTrailers)
	}
}

// tryHeaders sends the try its request headers, the router's shared map (UpstreamRequest::
// acceptHeadersFromRouter → the upstream filters' decodeHeaders on *parent_.downstreamHeaders()).
func (ex *Exchange) tryHeaders(t *upTry, eos bool) {
	t.inEnded = eos
	hdrs := abi.ClonePairs(ex.s.Req.Headers)
	if u := t.u; u != nil {
		_, err := u.OnHeaders(&u.Req, hdrs, eos)
		ex.note(err)
		ex.stepTry(t)
		return
	}
	ex.tryOutHeaders(t, hdrs)
	if eos {
		ex.tryOutEnd(t, nil)
	}
}

// tryData sends the try a request body chunk (its own copy: acceptDataFromRouter).
func (ex *Exchange) tryData(t *upTry, chunk []byte, eos bool) {
	t.inEnded = eos
	if u := t.u; u != nil {
		_, err := u.OnBody(&u.Req, chunk, eos)
		ex.note(err)
		ex.stepTry(t)
		return
	}
	ex.tryOutData(t, chunk)
	if eos {
		ex.tryOutEnd(t, nil)
	}
}

// tryTrailers sends the try the request trailers.
func (ex *Exchange) tryTrailers(t *upTry, trailers [][2]string) {
	t.inEnded = true
	if u := t.u; u != nil {
		_, err := u.OnTrailers(&u.Req, abi.ClonePairs(trailers))
		ex.note(err)
		ex.stepTry(t)
		return
	}
	ex.tryOutEnd(t, abi.ClonePairs(trailers))
}

// tryOutHeaders is the try's request headers going upstream: a streaming upstream is
// opened now, a buffered one once the try's whole request went (tryOutEnd).
func (ex *Exchange) tryOutHeaders(t *upTry, hdrs [][2]string) {
	h := ex.vm.host
	t.upReq = &UpstreamRequest{Attempt: t.n, Cluster: t.cluster, Headers: hdrs}
	if h.cfg.streamUpstream != nil && !t.upStarted {
		t.upStarted = true
		t.call = &UpstreamCall{ex: ex, t: t, ctx: t.upCtx, headers: abi.ClonePairs(hdrs), cluster: t.cluster}
		t.up.Activity()
		go h.cfg.streamUpstream(t.call)
	}
}

// tryOutData is a request body chunk going upstream on the try.
func (ex *Exchange) tryOutData(t *upTry, chunk []byte) {
	if len(chunk) == 0 || t.upReq == nil {
		return
	}
	chunk = append([]byte(nil), chunk...)
	t.upReq.BodyChunks = append(t.upReq.BodyChunks, chunk)
	if ex.record || t.call == nil {
		t.upReq.Body = append(t.upReq.Body, chunk...)
	}
	if t.call != nil {
		t.call.body.Push(chunk)
		t.up.Activity()
	}
}

// tryOutEnd is the end of the try's request going upstream: a buffered upstream is called,
// and the per-try timeout armed.
func (ex *Exchange) tryOutEnd(t *upTry, trailers [][2]string) {
	if t.outEnded || t.upReq == nil {
		return
	}
	t.outEnded = true
	t.upReq.Trailers = trailers
	if t.call != nil {
		t.call.body.End(trailers)
	}
	if !t.upStarted {
		t.upStarted = true
		t.up.Activity()
		ex.vm.host.post(event{kind: evUpstreamInvoke, ex: ex, try: t})
	}
	ex.armPerTryTimeout(t)
}

// stepTry moves try t's upstream filter stream on (VM locked): what it let through of the
// request goes upstream (its header edits written back into the router's shared map, as
// they are one object in Envoy), what it let through of the response goes to the router's
// decision and, once passed, downstream; its local reply or reset ends the request.
func (ex *Exchange) stepTry(t *upTry) {
	u := t.u
	if u == nil || !ex.current(t) || t.final {
		return
	}
	if t.local != nil || u.Final != nil {
		ex.upstreamLocalReply(t)
		return
	}
	if u.ResetDetails != "" {
		ex.upstreamClosed(t)
		return
	}
	s := ex.s
	q := &u.Req
	if q.ForwardedHeaders && !t.outHeaders {
		t.outHeaders = true
		s.Req.Headers = abi.ClonePairs(q.Headers)
		ex.tryOutHeaders(t, abi.ClonePairs(q.Headers))
	}
	if t.outHeaders && len(q.ForwardedBody) > t.outSent {
		chunk := append([]byte(nil), q.ForwardedBody[t.outSent:]...)
		q.ForwardedBody, t.outSent = q.ForwardedBody[:0], 0
		ex.tryOutData(t, chunk)
	}
	if t.outHeaders && q.Complete && !t.outEnded {
		ex.tryOutEnd(t, abi.ClonePairs(q.ForwardedTrailers))
	}
	r := &u.Resp
	if r.ForwardedHeaders && !t.decided {
		eos := r.Complete && len(r.ForwardedBody) == 0 && r.ForwardedTrailers == nil
		if eos {
			t.respEnded = true
		}
		ex.upstreamHeaders(t, abi.ClonePairs(r.Headers), eos)
		if !ex.current(t) {
			return
		}
	}
	if !t.passed || s.Resp.Halted {
		return
	}
	if len(r.ForwardedBody) > t.respSent {
		chunk := append([]byte(nil), r.ForwardedBody[t.respSent:]...)
		r.ForwardedBody, t.respSent = r.ForwardedBody[:0], 0
		eos := r.Complete && r.ForwardedTrailers == nil
		if eos {
			t.respEnded = true
		}
		_, err := s.OnBody(&s.Resp, chunk, eos)
		ex.note(err)
		if !ex.current(t) {
			return
		}
	}
	if r.Complete && !t.respEnded {
		t.respEnded = true
		var err error
		if r.ForwardedTrailers != nil {
			_, err = s.OnTrailers(&s.Resp, abi.ClonePairs(r.ForwardedTrailers))
		} else {
			_, err = s.OnBody(&s.Resp, nil, true)
		}
		ex.note(err)
	}
}

// upstreamHeaders is Filter::onUpstreamHeaders on try t's response headers as the upstream
// filters left them: the retry state decides (a retried try is reset and forgotten: nothing
// of it reaches the downstream filter), else the headers go downstream with details
// via_upstream, and no try is retried any more (downstream_response_started_).
func (ex *Exchange) upstreamHeaders(t *upTry, hdrs [][2]string, eos bool) {
	if t.decided {
		return
	}
	t.decided = true
	if d, ok := ex.decide(retry.Headers(hdrs)); ok && d.Action == retry.Retry {
		ex.retryAfter(t, d)
		return
	}
	t.passed, ex.respStarted = true, true
	s := ex.s
	if s.Resp.Halted || s.Resp.GotHeaders {
		return
	}
	if rs := ex.vm.host.retries; rs != nil && rs.policy.IncludeAttemptCountInResponse {
		hdrs = abi.SetHeader(hdrs, retry.HeaderAttemptCount, strconv.FormatUint(uint64(t.n), 10))
	}
	// finalizeResponseHeaders: the route's response_headers_to_remove.
	for _, name := range ex.vm.host.cfg.respHeadersToRemove {
		hdrs = abi.RemoveHeader(hdrs, name)
	}
	s.SetDetails(DetailsViaUpstream)
	_, err := s.OnHeaders(&s.Resp, hdrs, eos)
	ex.note(err)
}

// decide asks the request's retry state about the current try's outcome and sets the flags
// it decided (URX, UO); false when there is no retry state to ask.
func (ex *Exchange) decide(o retry.Outcome) (retry.Decision, bool) {
	if ex.retry == nil || ex.waiting {
		return retry.Decision{}, false
	}
	d, err := ex.retry.Decide(o)
	if err != nil {
		ex.note(fmt.Errorf("hostsim: router: %w", err))
		return d, false
	}
	ex.s.Flags |= d.Flags
	return d, true
}

// retryAfter ends try t and starts the next after the decision's back-off on the host's
// clock (RetryStateImpl's backoff timer; RetryImmediately: the next loop iteration).
func (ex *Exchange) retryAfter(t *upTry, d retry.Decision) {
	ex.endTry(t)
	ex.waiting = true
	ex.vm.host.log(ex.vm, LogDebug, fmt.Sprintf("router: retrying try %d in %v", t.n, d.Delay))
	ex.after(d.Delay, func(ex *Exchange) error {
		if !ex.waiting {
			return nil
		}
		ex.waiting = false
		if err := ex.retry.StartRetry(); err != nil {
			return fmt.Errorf("hostsim: router: %w", err)
		}
		next := ex.newTry() // the attempt count is set on the stream info
		if !ex.refreshCluster(next) {
			return nil
		}
		ex.startTry(next)
		return nil
	})
}

// endTry ends try t from the router's side: the upstream request is reset (its context
// cancelled) and the try's upstream filter destroyed — on_done, on_delete, no on_log
// (stream.Stream.Destroy).
func (ex *Exchange) endTry(t *upTry) {
	if t == nil || t.ended {
		return
	}
	t.ended = true
	t.up.Abandon()
	t.upCancel() // also a try whose response had ended: Envoy resets it if its request had not
	t.play = nil
	if t.call != nil {
		t.call.body.Abandon()
	}
	if t.u != nil {
		ex.note(t.u.Destroy())
	}
}

// sent reports whether some of the request went upstream on try t, for
// reset-before-request: the upstream was called, unless the reset says the connection was
// never made (hostsim's upstreams do not say which bytes went; inferred).
func (t *upTry) sent(reason streaminfo.ResetReason) bool {
	switch reason {
	case streaminfo.ResetLocalConnectionFailure, streaminfo.ResetRemoteConnectionFailure,
		streaminfo.ResetConnectionTimeout, streaminfo.ResetOverflow:
		return false
	}
	return t.upStarted
}

// tryFailed is try t failing before its response (an upstream error): a reset the retry
// state may retry (Filter::onUpstreamReset → maybeRetryReset); no cluster and no healthy
// upstream are the router's own answers, never retried.
func (ex *Exchange) tryFailed(t *upTry, err error) {
	if ex.retry == nil || errors.Is(err, ErrClusterNotFound) || errors.Is(err, ErrNoHealthyUpstream) {
		t.up.Failed(err)
		return
	}
	var reset *router.Reset
	if !errors.As(err, &reset) {
		ex.vm.host.log(ex.vm, LogDebug, "upstream error: "+err.Error())
		reset = &router.Reset{Reason: streaminfo.ResetRemoteConnectionFailure}
	}
	ex.tryReset(t, reset)
}

// tryFailedAfterHeaders is try t failing once its response headers arrived.
func (ex *Exchange) tryFailedAfterHeaders(t *upTry, err error) {
	var reset *router.Reset
	if !errors.As(err, &reset) {
		ex.vm.host.log(ex.vm, LogDebug, "upstream failed after its headers: "+err.Error())
		reset = &router.Reset{Reason: streaminfo.ResetConnectionTermination}
	}
	ex.tryReset(t, reset)
}

// tryReset is try t's stream reset (Filter::onUpstreamReset): retried if the retry state
// says so and the response has not gone downstream; otherwise the router's 503 (saying
// "retried and the latest reset reason" once it retried), or a reset of the downstream
// stream once the response went.
func (ex *Exchange) tryReset(t *upTry, r *router.Reset) {
	if ex.retry == nil || ex.respStarted {
		t.up.Reset(r)
		return
	}
	d, ok := ex.decide(retry.Reset(r.Reason, t.sent(r.Reason)))
	if ok && d.Action == retry.Retry {
		ex.retryAfter(t, d)
		return
	}
	rep := router.ResetReply(r, t.up.ResponseStarted())
	if ex.retry.IsRetry() {
		rep = router.RetriedResetReply(r, t.up.ResponseStarted())
	}
	ex.routerReply(rep, d.Overloaded)
}

// armPerTryTimeout arms the policy's per-try timeout once the try's whole request went
// upstream (UpstreamRequest::setupPerTryTimeout, armed at pool ready when the downstream
// request is complete, else at its completion).
func (ex *Exchange) armPerTryTimeout(t *upTry) {
	if !ex.hasPolicy {
		return
	}
	d := ex.retryReq.EffectivePerTryTimeout(ex.vm.host.cfg.routeTimeout)
	if d <= 0 {
		return
	}
	ex.after(d, func(ex *Exchange) error {
		if ex.current(t) && !t.up.Done() {
			ex.perTryTimeout(t, router.DetailsUpstreamPerTryTimeout)
		}
		return nil
	})
}

// perTryTimeout is UpstreamRequest::onPerTryTimeout (and the per-try idle timeout,
// onPerTryIdleTimeout) → Filter::onPerTryTimeoutCommon: ignored once the response went
// downstream; else the try is reset and the outcome is a LocalReset the retry state may
// retry; not retried, 504 "upstream request timeout" (UT) with the timeout's details.
func (ex *Exchange) perTryTimeout(t *upTry, details string) {
	if ex.respStarted {
		ex.vm.host.log(ex.vm, LogDebug, "router: ignored upstream per try timeout due to already started downstream response")
		return
	}
	if d, ok := ex.decide(retry.PerTryTimeout(t.upStarted)); ok && d.Action == retry.Retry {
		ex.retryAfter(t, d)
		return
	}
	ex.routerReply(router.TimeoutReply(details), false)
}

// upstreamLocalReply hands the upstream filter's local reply (or its failure's 503, or its
// chain's buffer overflow reply — the last unverified) to the downstream filter manager, as
// UpstreamFilterManager::sendLocalReply does (parent_.callbacks()->sendLocalReply): final,
// never retried, seen by the downstream filter like its own local reply; the router then
// resets its tries (Filter::onLocalReply → resetAll).
func (ex *Exchange) upstreamLocalReply(t *upTry) {
	t.final = true
	lr, details := t.local, t.localDetails
	if lr == nil {
		lr, details = t.u.Final, t.u.Details
	}
	if ex.retry != nil && !ex.waiting {
		_, _ = ex.retry.Decide(retry.LocalReply())
	}
	ex.respStarted = true
	ex.s.SendLocalReply(lr, details)
	ex.endTry(t)
}

// upstreamClosed is proxy_close_stream from the upstream filter: Context::closeStream
// resets through the upstream filter manager, whose UpstreamRequestFilterManagerCallbacks::
// resetStream turns a filter's LocalReset into a reset of the downstream stream (no retry).
// The details are the downstream stream info's (wasm_close_stream unless already set).
func (ex *Exchange) upstreamClosed(t *upTry) {
	t.final = true
	s := ex.s
	if !s.HasDetails {
		s.SetDetails(stream.DetailsWasmCloseStream)
	}
	ex.endTry(t)
	s.Req.Halted, s.Resp.Halted = true, true
	s.Resp.Complete = true
	if s.ResetDetails == "" {
		s.ResetDetails = stream.DetailsWasmCloseStream
	}
}

// tryDriver is try t as its upstream filter stream's stream.Driver.
type tryDriver upTry

// Activity re-arms the connection manager's stream idle timer.
func (d *tryDriver) Activity() { d.ex.touchStreamIdle() }

// Settled moves the exchange on once the upstream filter's deferred actions ran.
func (d *tryDriver) Settled() { d.ex.step() }

// ClientReset is a reset of the upstream filter's stream from outside (ResetStream on its
// context id): the downstream stream is reset with it.
func (d *tryDriver) ClientReset() error {
	ex := d.ex
	if ex.done {
		return nil
	}
	return ex.s.ResetDownstream(DownstreamDisconnect)
}

// ForwardLocalReply takes the upstream filter's local reply for the downstream filter
// manager (stream.LocalReplyForwarder).
func (d *tryDriver) ForwardLocalReply(lr *filtermanager.LocalReply, details string) bool {
	t := (*upTry)(d)
	if t.local == nil {
		t.local, t.localDetails = lr, details
	}
	return true
}

// tryStream is try t as its router.Upstream's router.Stream.
type tryStream upTry

// Reply is the router answering for the try: its per-try idle timeout is a per-try
// timeout the retry state may retry (onPerTryIdleTimeout → onPerTryTimeoutCommon).
func (ts *tryStream) Reply(r router.Reply) {
	t := (*upTry)(ts)
	ex := t.ex
	if !ex.current(t) {
		return
	}
	if r.Details == router.DetailsUpstreamPerTryIdleTimeout && ex.retry != nil && !ex.respStarted {
		ex.perTryTimeout(t, r.Details)
		return
	}
	ex.routerReply(r, false)
}

// After runs f d from now on the host's clock.
func (ts *tryStream) After(d time.Duration, f func()) {
	ts.ex.after(d, func(*Exchange) error { f(); return nil })
}

// Debug logs a line about the upstream at debug level.
func (ts *tryStream) Debug(msg string) { ts.ex.vm.host.log(ts.ex.vm, LogDebug, msg) }
