package filter

import (
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/plugin/internal/restate"
	"github.com/spillwayproxy/spillway/policies"
)

// Header-routed mode (routing.mode: headers) runs where the proxy cannot set
// allow_on_headers_stop_iteration (Istio's WasmPlugin and TrafficExtension): there a Pause
// from on_request_headers or on_response_headers is StopAllIterationAndWatermark
// (proxy-wasm-cpp-host src/context.cc, ContextBase::convertVmCallResultToFilterHeadersStatus),
// and no body callback reaches the filter until it continues. So the target is chosen at the
// request headers, from the model header (routing.modelHeader, else routing.defaultModel),
// and the headers go on with it at once, or once admission lets them.
//
// What Envoy does with a stop-all Pause makes the rest safe:
//   - While stopped, Envoy buffers the body under flow control: the filter manager moves each
//     chunk into the filter's buffer (FilterManager::handleDataIfStopAll in
//     source/common/http/filter_manager.cc), and past the buffer limit it stops reading the
//     client (ActiveStreamDecoderFilter::requestDataTooLarge: the watermark, not a 413, while
//     the filter is StopAllWatermark). On continue, commonContinue sends the headers on and
//     delivers the whole buffered body to this same filter (iterate_from_current_filter_),
//     in a body callback. A request queued at its headers therefore resumes from a tick or a
//     wake-up with nothing lost, on every Envoy version: the body-chunk loss fixed in Envoy
//     1.40.0 (filter_manager_forward_added_data_on_continue) needs the single-iteration stop
//     that only the option gives.
//   - The body callbacks that follow the headers hold the body (StopIterationAndBuffer) until
//     its end, so it is read whole before it goes upstream: the target's model is written
//     into it and h.body is kept for failover callouts. The headers already went on, so
//     their content-length cannot follow a rewrite: it is removed at the headers when the
//     target maps the model (Envoy's HTTP/1 codec then sends the body chunked,
//     StreamEncoderImpl::encodeHeadersBase in source/common/http/http1/codec_impl.cc).
//   - A body whose model the chosen target does not serve (another model than the header
//     said, unless the route maps every model to its own) never goes to it: the attempt is
//     given back unrecorded, the body's own model is planned, and its attempts go by callout
//     (proxy_http_call), their answer a local reply. The router's request to the first
//     target, headers without a body, is reset when the stream ends; whatever it answers
//     meanwhile is held and replaced by the reply.
//   - On the response side a headers Pause is stop-all too, so an error body or a stream's
//     first event cannot be read while the response is held: Envoy buffers the held body
//     under flow control (ActiveStreamEncoderFilter::responseDataTooLarge: the watermark
//     while StopAllWatermark, no 500) and hands it over only on continue, with the headers
//     already gone. A failed response is decided from its status and headers (Retry-After,
//     rate-limit reset headers): when that verdict fails over and a candidate is left, the
//     response is held while the failover callout runs, as in body mode, and the callout's
//     answer replaces it; otherwise it goes to the client, restated where a rule matches the
//     status alone, and its error body is read as it passes and recorded with it. A 200 event
//     stream goes to the client at once and is watched for its first event: an error there is
//     recorded as the attempt's failure, but the client has the stream.
// README "Header-routed mode" lists what the mode cannot do.

// headerRouted is a header-routed request's state (streamState.hm).
type headerRouted struct {
	active          bool          // the request is header-routed
	modelHeaderSent bool          // the client sent routing.modelHeader (removed with the target)
	lengthFree      bool          // the request headers carry no content-length: the body may change length
	heldBody        bool          // a body callback reached the request while its headers were held: the proxy has the option
	bodyDone        bool          // the whole body was read: h.body, bodyModel
	bodyModel       string        // the body's model (aliases h.body or bufs.parser's text)
	viaCallout      bool          // the body ruled the header's target out: attempts go by callout
	respHeld        bool          // a response of the given-up header attempt is held (viaCallout)
	ttfb            time.Duration // the watched error response's time to its headers
}

// headerRoutedRequest routes a request at its headers: the model from routing.modelHeader
// (else routing.defaultModel), then the plan, admission and the target's headers as in body
// mode. The headers go on at once when a target takes the request; a request that must wait
// is paused (stop-all without the option), to go on from a tick or a wake-up.
func (h *httpContext) headerRoutedRequest(endOfStream bool) types.Action {
	p := h.plugin
	h.hm.active = true
	h.hm.lengthFree = h.present&hasContentLength == 0
	if endOfStream {
		h.reply(replies.InvalidRequest("request has no body"))
		return types.ActionPause
	}
	name := p.res.Routing.ModelHeader
	model, sent := "", false
	for _, kv := range h.reqHeaders {
		if kv[0] == name {
			model, sent = kv[1], true
			break
		}
	}
	// A model header in Spillway's namespace went with the other x-spillway-* headers
	// (reqheaders.go); one named outside it is removed with the target.
	h.hm.modelHeaderSent = sent && !isSpillwayHeader(name)
	switch {
	case sent && !llmapi.ValidModel(model):
		h.reply(replies.InvalidRequest("header " + name + " is empty, longer than " +
			strconv.Itoa(llmapi.MaxModelLength) + " bytes or holds control characters"))
		return types.ActionPause
	case !sent && p.res.Routing.DefaultModel == "":
		h.reply(replies.InvalidRequest("header-routed mode: name the model in the " + name + " request header"))
		return types.ActionPause
	case !sent:
		model = p.res.Routing.DefaultModel
	}
	h.model = p.intern(model)
	h.started = p.clock() // the failover budget runs from here
	return h.requestAction(h.planAndDispatch())
}

// headerRoutedTarget sets the attempt's target on the request: at its headers, or, once the
// body ruled the header's target out, as a callout. It reports false as applyTarget does.
func (h *httpContext) headerRoutedTarget() bool {
	if h.hm.viaCallout {
		h.calloutAttempt()
		return true
	}
	if !h.setTargetHeaders() {
		return false
	}
	if h.hm.modelHeaderSent {
		removeRequestHeader(h.plugin.res.Routing.ModelHeader) // Spillway's, not the provider's
		h.hm.modelHeaderSent = false
	}
	if !h.hm.lengthFree && h.d.Target.Model != h.model {
		// The body will be rewritten after the headers went on (see above).
		removeRequestHeader("content-length")
		h.hm.lengthFree = true
	}
	return true
}

// calloutAttempt sends the attempt by callout (the request's body ruled its header target
// out); when the host refuses it, the next candidates are tried as failover attempts.
func (h *httpContext) calloutAttempt() {
	p := h.plugin
	if h.callout(p.res.Failover.Budget - p.clock().Sub(h.started)) {
		h.phase = phaseCallout
		return
	}
	h.abandon()
	if !h.startFailover() {
		h.finalAnswer() // nothing answered: 502 upstream_error
	}
}

// headerRoutedResume lets a request that got its target from a root callback (a tick, a
// wake-up) go on: its headers continue. With the option (a body callback reached the held
// headers) the body is held here too, and the headers go on only once it has ended and was
// checked (never before end of stream, as in body mode).
func (h *httpContext) headerRoutedResume(s step) {
	if s != stepProceed || h.hm.viaCallout {
		return
	}
	if h.hm.heldBody {
		if !h.hm.bodyDone {
			return // the body's end continues the request
		}
		if h.checkBody() != stepProceed {
			return
		}
	}
	if err := hostabi.ContinueStream(hostabi.StreamRequest); err != nil {
		proxywasm.LogWarnf("spillway: resume request: %v", err)
	}
}

// headerRoutedBody holds a header-routed request's body until its end, then checks it
// against the target. A body that arrives after the response began passes untouched.
func (h *httpContext) headerRoutedBody(bodySize int, endOfStream bool) types.Action {
	switch h.phase {
	case phaseUpstream, phaseQueued, phaseComboWait:
	default:
		return types.ActionContinue // answered, passed through, or the response has begun
	}
	h.enter("request body")
	if h.phase != phaseUpstream {
		h.hm.heldBody = true // the body reached held headers: the proxy has the option
	}
	h.bodySize = bodySize
	if limit := h.plugin.res.MaxRequestBodyBytes; int64(bodySize) > limit {
		h.reply(replies.RequestTooLarge(limit))
		return types.ActionPause
	}
	if !endOfStream {
		return types.ActionPause
	}
	return h.endOfHeaderRoutedBody(bodySize)
}

// headerRoutedTrailers: trailers end the body.
func (h *httpContext) headerRoutedTrailers() types.Action {
	switch h.phase {
	case phaseUpstream, phaseQueued, phaseComboWait:
	default:
		return types.ActionContinue
	}
	h.enter("request trailers")
	if h.phase != phaseUpstream {
		h.hm.heldBody = true
	}
	return h.endOfHeaderRoutedBody(h.bodySize)
}

// endOfHeaderRoutedBody reads the whole body; a request still waiting for a slot or a
// cooldown keeps it for its grant, one with its target is checked now.
func (h *httpContext) endOfHeaderRoutedBody(bodySize int) types.Action {
	if cap(h.bufs.body) < bodySize {
		h.bufs.body = make([]byte, 0, bodySize)
	}
	body, err := hostabi.ReadBuffer(hostabi.RequestBody, 0, bodySize, h.bufs.body)
	h.bufs.body = body
	if err != nil || len(body) == 0 {
		h.reply(replies.InvalidRequest("request has no body"))
		return types.ActionPause
	}
	req, err := h.bufs.parser.Parse(body) // as in body mode (request.go endOfRequest)
	if err != nil {
		h.reply(replies.InvalidRequest(err.Error()))
		return types.ActionPause
	}
	h.body, h.hm.bodyModel, h.stream, h.modelAt = body, req.Model, req.Stream, req.ModelAt
	h.hm.bodyDone = true
	if h.phase != phaseUpstream {
		return types.ActionPause // the grant checks it (headerRoutedResume)
	}
	return h.requestAction(h.checkBody())
}

// checkBody decides whether the body may go to the target chosen at the headers. It may
// when it names the model the target was chosen for, or another model of the same route
// when every target of that route names its own upstream model (the body's model then
// changes nothing but the text rewritten) and the body can be rewritten. The body then gets
// the target's model. Otherwise the body rules the target out: the request is planned
// again for its body's model and answered through a callout.
func (h *httpContext) checkBody() step {
	p := h.plugin
	bodyModel, target := h.hm.bodyModel, h.d.Target.Model
	if bodyModel != h.model {
		headerRoute, _ := p.engine.Route(h.model)
		bodyRoute, ok := p.engine.Route(bodyModel)
		rewritable := bodyModel == target || h.hm.lengthFree || h.hm.heldBody
		if !ok || bodyRoute != headerRoute || !namesEveryModel(bodyRoute) || !rewritable {
			return h.reroute()
		}
		h.model = p.intern(bodyModel)
	}
	length := len(h.body)
	if target != bodyModel {
		body := h.bodyFor(target)
		if err := hostabi.ReplaceBuffer(hostabi.RequestBody, body); err != nil {
			proxywasm.LogWarnf("spillway: replace request body: %v", err)
			return stepProceed
		}
		length = len(body)
	}
	if h.hm.heldBody && h.present&hasContentLength != 0 {
		// The headers are still held (the proxy has the option): they get the exact length
		// back, whether or not the target's headers removed it.
		replaceRequestHeader("content-length", strconv.Itoa(length))
	}
	return stepProceed
}

// namesEveryModel reports a route all of whose targets name their upstream model: which
// model a request names changes nothing about where and how it goes.
func namesEveryModel(r *policies.ResolvedRoute) bool {
	for i := range r.Targets {
		if r.Targets[i].Model == "" {
			return false
		}
	}
	return true
}

// reroute answers a request whose body ruled its header target out: the attempt is given
// back unrecorded (its upstream never gets the body), and the body's model is planned and
// dispatched by callout. Admission applies as to any request: the callout waits in a queue
// or a combo wait like the request would have.
func (h *httpContext) reroute() step {
	p := h.plugin
	proxywasm.LogDebugf("spillway: header-routed request for %q has a body for %q: answered through a callout",
		h.model, h.hm.bodyModel)
	h.abandon()
	h.hm.viaCallout = true
	h.model = p.intern(h.hm.bodyModel)
	if s := h.planAndDispatch(); s == stepAnswered {
		return s
	}
	return stepWait // a callout runs, or the request waits: the body stays held
}

// headerRoutedResponseHeaders handles the response headers of a header-routed request
// (handled=false: the body-mode path does). The response cannot be held to read its body,
// so a failure is decided from its status and headers.
func (h *httpContext) headerRoutedResponseHeaders(endOfStream bool) (action types.Action, handled bool) {
	if h.hm.viaCallout {
		if h.phase == phaseAnswered || h.phase == phasePass {
			return types.ActionContinue, false // Spillway's own reply, or passed through
		}
		// The given-up header attempt's upstream answered (it never got the body): held, and
		// replaced by the reply the callout's answer makes.
		h.hm.respHeld = true
		return types.ActionPause, true
	}
	if h.phase != phaseUpstream {
		return types.ActionContinue, false
	}
	h.enter("response headers")
	p := h.plugin
	if err := hostabi.ReadPairs(hostabi.ResponseHeaders, &h.bufs.respPairs); err != nil {
		return types.ActionContinue, true
	}
	hdrs := h.bufs.respPairs.All()
	h.respHdrs = hdrs
	status, contentType := statusAndType(hdrs)
	h.status = status
	ttfb := p.clock().Sub(h.dispatchedAt)
	if status >= 200 && status < 300 {
		h.setSpillwayHeaders()
		if isEventStream(contentType) && !endOfStream {
			// Watched, not held: its first event decides the attempt's outcome.
			h.freeStreamLength(hdrs) // streamcut.go
			h.eventStream = true
			h.phase, h.holdStart = phaseWatchFirst, p.clock()
			h.bufs.respBody = h.bufs.respBody[:0]
			return types.ActionContinue, true
		}
		h.recordSuccess(ttfb)
		h.phase, h.respEnded = phaseStreaming, endOfStream
		return types.ActionContinue, true
	}
	details, ok := property(propResponseCodeDetails, h.bufs.prop)
	h.bufs.prop = details
	if ok && len(details) > 0 && string(details) != viaUpstream {
		h.envoyReply = string(details)
	}
	o := engine.Outcome{Status: status, Headers: hdrs, TTFB: ttfb, Sent: h.sent()}
	// Envoy's own reply, or a response without a body: nothing more to read, so it is
	// decided as in body mode. Otherwise its status and headers decide.
	bodyless := h.envoyReply != "" || endOfStream
	var v failure.Verdict
	var rs restate.Result
	if !bodyless {
		v, rs = p.engine.Preview(h.d, o)
	}
	// A rule that reads the error body (text or exclude markers) cannot restate a body
	// header mode has not read.
	restated := rs.Restated && rs.Status != status && h.readsNoBody(rs.RuleID)
	if bodyless || (v.Fallback && h.hm.bodyDone && h.failoverLeft()) {
		fr := h.recordFailure(o)
		if !h.hm.bodyDone {
			fr.fallback = false // a failover attempt needs the whole body
		}
		if !bodyless && !restated {
			fr.restatedTo, fr.retryAfter = 0, 0
		}
		s := h.afterFailure(fr, &attemptFailure{status: status, headers: hdrs})
		if s == stepProceed {
			h.respEnded = endOfStream // finalAnswer let the response go: its body follows
		}
		return h.responseAction(s), true
	}
	// The response goes to the client now; its error body is recorded as it passes.
	if restated {
		p.metrics.restated.Increment(1)
		replaceResponseHeader(":status", strconv.Itoa(rs.Status))
		replaceResponseHeader(HeaderRestatedFrom, strconv.Itoa(status))
		if s := replies.RetryAfterSeconds(rs.RetryAfter); s > 0 && !hasHeader(hdrs, "retry-after") {
			replaceResponseHeader("retry-after", strconv.FormatInt(s, 10))
		}
	}
	h.setSpillwayHeaders()
	h.hm.ttfb = ttfb
	h.phase = phaseWatchError
	h.bufs.respBody = h.bufs.respBody[:0]
	return types.ActionContinue, true
}

// readsNoBody reports whether the attempt's provider's restatement rule id matches on the
// status alone: no text markers, no exclude markers. Built-in rules (not in the policy)
// read the body.
func (h *httpContext) readsNoBody(ruleID string) bool {
	for _, r := range h.provider().StatusRestatement {
		if r.ID == ruleID {
			return len(r.TextMarkers) == 0 && len(r.ExcludeMarkers) == 0
		}
	}
	return false
}

// failoverLeft reports whether a failover attempt may still be tried: a candidate, an
// attempt and time left in the budget (whether the candidate can take it is known only at
// its dispatch).
func (h *httpContext) failoverLeft() bool {
	return h.next < len(h.plan.Targets) && h.budgetLeft()
}

// heldResponseBody keeps the given-up header attempt's response held: its body only
// arrives here when the proxy has the option (without it the held headers stop it all).
// Past what a reply could need it is dropped, so Envoy's buffer limit never answers 500 for
// a response the client will not get (as in phaseCallout).
func (h *httpContext) heldResponseBody(bodySize int) types.Action {
	if bodySize > maxErrorBody {
		if err := hostabi.ReplaceBuffer(hostabi.ResponseBody, nil); err != nil {
			proxywasm.LogDebugf("spillway: drop held response body: %v", err)
		}
	}
	return types.ActionPause
}

// watchedResponseBody reads a watched response's body as it passes to the client.
func (h *httpContext) watchedResponseBody(bodySize int, endOfStream bool) types.Action {
	h.enter("response body")
	p := h.plugin
	h.respEnded = endOfStream
	// An error body is read up to maxErrorBody; a watched stream's chunks whole, since what
	// was watched goes on to the terminal-event tracker.
	want, limit := bodySize, p.res.FirstEvent.MaxBytes
	if h.phase == phaseWatchError {
		want, limit = min(bodySize, maxErrorBody-len(h.bufs.respBody)), maxErrorBody
	}
	read := want == 0 // this chunk is in seen
	if acc := h.bufs.respBody; want > 0 {
		tail, err := hostabi.ReadBuffer(hostabi.ResponseBody, 0, want, acc[len(acc):])
		if read = err == nil; read {
			h.bufs.respBody = append(acc, tail...)
		}
	}
	seen := h.bufs.respBody
	if h.phase == phaseWatchError {
		if endOfStream || len(seen) >= maxErrorBody {
			h.recordWatchedError()
		}
		return types.ActionContinue
	}
	switch fe := llmapi.ScanFirst(seen, endOfStream); {
	case fe.Verdict == llmapi.NeedMore && len(seen) < limit:
	case fe.Verdict == llmapi.Failed:
		p.metrics.streamErrors.Increment(1)
		h.watchedStreamFailed(fe.Status, wrapError(fe.Error))
	case fe.Verdict == llmapi.Empty:
		h.watchedStreamFailed(502, emptyStreamError)
	default:
		h.commitWatchedStream() // content, or past the byte bound
		if endOfStream && read && h.phase == phaseStreaming {
			// This callback's chunk is the end of what was watched (the rest went on before).
			h.endCutStream(seen[len(seen)-bodySize:]) // streamcut.go
		}
	}
	return types.ActionContinue
}

// recordWatchedError records the failed response that went to the client, with what passed
// of its error body (at most maxErrorBody), and gives its slots back.
func (h *httpContext) recordWatchedError() {
	p := h.plugin
	h.phase = phaseStreaming
	if !h.inFlight {
		return
	}
	r := p.engine.Record(h.d, engine.Outcome{Status: h.status, Headers: h.respHdrs, Body: h.bufs.respBody,
		TTFB: h.hm.ttfb, Sent: h.sent()}, &h.plan)
	h.inFlight = false
	if r.Errors != nil {
		proxywasm.LogDebugf("spillway: record failure on %s: %v", h.targetName(), r.Errors)
	}
	if r.RequestOnly {
		p.metrics.requestOnly.Increment(1)
	}
	h.outcome = outcomeUpstreamFailure
	p.metrics.failure(h.d.Target, r.Verdict.Reason)
	h.logFailure(h.d.Target, &failureLog{status: h.status, reason: string(r.Verdict.Reason), effects: r.Effects,
		classified: true, verdict: r.Verdict, requestOnly: r.RequestOnly, ttfb: h.hm.ttfb}, nextNone, nil, 0, "")
	h.abandon() // the outcome is recorded: this releases the slots
}

// watchedStreamFailed records a watched 200 stream whose first event is an error (or that
// ended empty) as its attempt's failure; the client has the stream as the provider sent it.
func (h *httpContext) watchedStreamFailed(status int, errBody []byte) {
	failed := h.d.Target
	fr := h.recordFailure(engine.Outcome{Status: status, Body: errBody, TTFB: h.holdStart.Sub(h.dispatchedAt)})
	fr.log.attempt = h.attempts
	h.logFailure(failed, &fr.log, nextNone, nil, 0, "")
	h.outcome = outcomeUpstreamFailure
	h.eventStream = false // failed: nothing to track
	h.phase = phaseStreaming
}

// commitWatchedStream records a watched stream's success once its first event carries
// content (or the watch's byte or time bound passed) and tracks it to its end.
func (h *httpContext) commitWatchedStream() {
	h.recordSuccess(h.holdStart.Sub(h.dispatchedAt))
	h.tracker.Feed(h.bufs.respBody)
	h.startWatchdog(h.bufs.respBody)
	h.phase = phaseStreaming
}

// headerRoutedTick moves a watched response on: a stream watched past its time bound is
// committed; every watched response keeps its slots renewed.
func (h *httpContext) headerRoutedTick() {
	if h.phase == phaseWatchFirst && h.plugin.clock().Sub(h.holdStart) >= h.plugin.res.FirstEvent.Timeout {
		h.commitWatchedStream()
	}
	h.renewLease()
}

// headerRoutedFailOpen lets a header-routed stream go on after a panic outside a callback
// (failOpenOutside), where it differs from body mode: a request answered by callout holds
// its body (and maybe the given-up attempt's response), not a response of its own.
func (h *httpContext) headerRoutedFailOpen(held phase) bool {
	if !h.hm.viaCallout {
		return false
	}
	switch held {
	case phaseQueued, phaseComboWait, phaseCallout, phaseUpstream:
		_ = hostabi.ContinueStream(hostabi.StreamRequest)
		if h.hm.respHeld {
			_ = hostabi.ContinueStream(hostabi.StreamResponse)
		}
		return true
	}
	return false
}
