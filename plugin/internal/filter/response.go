package filter

import (
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
)

// maxErrorBody bounds how much of an error response Spillway reads to classify it; the
// signals (error type, code, message, retry hints) sit at its start.
const maxErrorBody = 64 << 10

// viaUpstream is Envoy's response code details of a response that came from the upstream
// (StreamInfo::ResponseCodeDetails::ViaUpstream, set by the router before it encodes the
// upstream's headers).
const viaUpstream = "via_upstream"

// propResponseCodeDetails is the path of Envoy's response.code_details attribute.
var propResponseCodeDetails = hostabi.JoinPath(nil, "response", "code_details")

// property reads a stream property into buf (false when absent).
func property(path, buf []byte) ([]byte, bool) {
	v, err := hostabi.GetProperty(path, buf)
	if err != nil {
		return v, false
	}
	return v, true
}

// containsDownstream reports whether response code details blame the downstream (the
// client reset or closed the stream).
func containsDownstream(details string) bool { return strings.Contains(details, "downstream") }

// OnHttpResponseHeaders implements types.HttpContext.
func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) (action types.Action) {
	defer h.failOpen("response headers", &action)
	if h.hm.active {
		if a, handled := h.headerRoutedResponseHeaders(endOfStream); handled {
			return a
		}
	}
	if h.phase != phaseUpstream {
		return types.ActionContinue // passed through, or Spillway's own reply
	}
	h.enter("response headers")
	p := h.plugin
	if h.rt.link != 0 {
		h.responseAfterTries() // router.go
	}
	if err := hostabi.ReadPairs(hostabi.ResponseHeaders, &h.bufs.respPairs); err != nil {
		return types.ActionContinue
	}
	hdrs := h.bufs.respPairs.All()
	h.respHdrs = hdrs
	status, contentType := statusAndType(hdrs)
	h.status = status
	if status >= 200 && status < 300 {
		if isEventStream(contentType) && !endOfStream {
			h.freeStreamLength(hdrs) // streamcut.go
			h.eventStream = true
			// A stream its try held already (router.go) is held from the try's headers: the
			// first-event bound is the request's, not each instance's.
			h.phase, h.holdStart = phaseHoldFirst, p.clock()
			if !h.rt.heldSince.IsZero() {
				h.holdStart = h.rt.heldSince
				if p.clock().Sub(h.holdStart) >= p.res.FirstEvent.Timeout {
					h.commitHeldStream(nil) // its try was let go at the bound
					h.respEnded = endOfStream
					return types.ActionContinue
				}
			}
			h.bufs.respBody = h.bufs.respBody[:0] // what the hold reads (passed on if a tick ends it)
			p.watch(h)
			return types.ActionPause
		}
		var ttfb time.Duration // read only by latency sampling: no clock read (a host call) without it
		if p.engine.SamplesLatency() {
			ttfb = p.clock().Sub(h.dispatchedAt)
		}
		h.recordSuccess(ttfb)
		h.setSpillwayHeaders()
		h.phase, h.respEnded = phaseStreaming, endOfStream
		return types.ActionContinue
	}
	details, ok := property(propResponseCodeDetails, h.bufs.prop)
	h.bufs.prop = details
	if ok && len(details) > 0 && string(details) != viaUpstream {
		h.envoyReply = string(details)
	}
	if endOfStream {
		return h.responseAction(h.attemptFailed(nil))
	}
	h.phase = phaseHoldError
	return types.ActionPause
}

// OnHttpResponseBody implements types.HttpContext.
func (h *httpContext) OnHttpResponseBody(bodySize int, endOfStream bool) (action types.Action) {
	defer h.failOpen("response body", &action)
	if h.hm.active { // header-routed mode (headermode.go)
		switch {
		case h.phase == phaseWatchFirst || h.phase == phaseWatchError:
			return h.watchedResponseBody(bodySize, endOfStream)
		case h.hm.respHeld && h.phase != phaseAnswered && h.phase != phasePass:
			return h.heldResponseBody(bodySize)
		}
	}
	switch h.phase {
	case phaseStreaming:
		if !h.eventStream {
			h.respEnded = endOfStream
			return types.ActionContinue
		}
		var chunk []byte
		read := bodySize == 0
		if bodySize > 0 {
			c, err := hostabi.ReadBuffer(hostabi.ResponseBody, 0, bodySize, h.bufs.respBody)
			h.bufs.respBody = c
			if read = err == nil; read {
				chunk = c
				h.tracker.Feed(chunk)
				if h.wd.on {
					h.watchChunk(chunk)
				}
			}
		}
		if endOfStream && read && h.phase == phaseStreaming { // not ended by a watchdog meanwhile
			h.endCutStream(chunk) // streamcut.go
		}
		h.respEnded = endOfStream
		return types.ActionContinue
	case phaseAborting:
		return h.abortingBody(bodySize, endOfStream)
	case phaseHoldFirst:
		h.enter("response body")
		p := h.plugin
		body, err := hostabi.ReadBuffer(hostabi.ResponseBody, 0, bodySize, h.bufs.respBody)
		h.bufs.respBody = body
		if err != nil {
			body = nil
		}
		fe := llmapi.ScanFirst(body, endOfStream)
		switch {
		case fe.Verdict == llmapi.NeedMore && bodySize < p.res.FirstEvent.MaxBytes:
			return types.ActionPause
		case fe.Verdict == llmapi.Failed:
			p.metrics.streamErrors.Increment(1)
			return h.responseAction(h.attemptFailedWith(fe.Status, wrapError(fe.Error), body))
		case fe.Verdict == llmapi.Empty:
			return h.responseAction(h.attemptFailedWith(502, emptyStreamError, body))
		}
		// Content, or past the byte bound: the stream goes on as it comes.
		h.commitHeldStream(body)
		if endOfStream && body != nil && h.phase == phaseStreaming {
			h.endCutStream(body) // the whole stream was held: it is this callback's to edit
		}
		h.respEnded = endOfStream
		return types.ActionContinue
	case phaseHoldError:
		h.enter("response body")
		if !endOfStream && bodySize < maxErrorBody {
			return types.ActionPause
		}
		body, err := hostabi.ReadBuffer(hostabi.ResponseBody, 0, min(bodySize, maxErrorBody), h.bufs.respBody)
		h.bufs.respBody = body
		if err != nil {
			body = nil
		}
		return h.responseAction(h.attemptFailed(body))
	case phaseCallout, phaseFailureWait:
		// The failed response stays held while a failover attempt runs (or a wait before
		// one): whatever more of it
		// arrives is not for the client unless it becomes the final answer. Envoy buffers it
		// against the stream's buffer limit (a 500 response_payload_too_large past it),
		// so past what Spillway kept of it the buffer is emptied, and a final answer from
		// this response is then a local reply of what was kept.
		if bodySize > maxErrorBody {
			if err := hostabi.ReplaceBuffer(hostabi.ResponseBody, nil); err != nil {
				proxywasm.LogDebugf("spillway: drop held response body: %v", err)
			} else {
				h.heldDropped = true
			}
		}
		return types.ActionPause
	}
	return types.ActionContinue
}

// emptyStreamError is the error of a 200 event stream that ended before any event.
var emptyStreamError = []byte(`{"error":{"message":"the event stream ended without content","type":"server_error"}}`)

// responseAction turns a step of the response path into the callback's action: the held
// response goes on (stepProceed) or stays held (a failover attempt runs, or Spillway
// replied).
func (h *httpContext) responseAction(s step) types.Action {
	if s == stepProceed {
		return types.ActionContinue
	}
	return types.ActionPause
}

// commitHeldStream lets a held 200 event stream go: the attempt succeeded as far as the
// client can tell. body is what was held (fed to the terminal-event tracker and the
// stream watchdogs).
func (h *httpContext) commitHeldStream(body []byte) {
	h.recordSuccess(h.holdStart.Sub(h.dispatchedAt))
	h.setSpillwayHeaders()
	h.tracker.Feed(body)
	h.startWatchdog(body)
	h.phase = phaseStreaming
	h.plugin.unwatch(h)
	h.plugin.watch(h) // lease renewal only, at the idle tick
}

// recordSuccess records the attempt's success in every layer; its slots stay held until the
// stream ends.
func (h *httpContext) recordSuccess(ttfb time.Duration) {
	h.outcome = outcomeSuccess
	if !h.inFlight {
		return
	}
	h.inFlight = false
	r := h.plugin.engine.Record(h.d, engine.Outcome{Status: 200, TTFB: ttfb}, &h.plan)
	if r.Errors != nil {
		proxywasm.LogDebugf("spillway: record success on %s: %v", h.targetName(), r.Errors)
	}
}

// attemptFailed handles the router's held non-2xx response, body being (the start of) its
// error body.
func (h *httpContext) attemptFailed(body []byte) step {
	return h.afterFailure(h.recordFailure(engine.Outcome{Status: h.status, Headers: h.respHdrs, Body: body,
		TTFB: h.plugin.clock().Sub(h.dispatchedAt)}), &attemptFailure{status: h.status, headers: h.respHdrs, body: body})
}

// attemptFailedWith handles a held 200 event stream whose first event is an error: a failed
// attempt like an HTTP error with that status. held is the stream as held so far.
func (h *httpContext) attemptFailedWith(status int, errBody, held []byte) step {
	fr := h.recordFailure(engine.Outcome{Status: status, Body: errBody, TTFB: h.plugin.clock().Sub(h.dispatchedAt)})
	// The client would get the 200 stream with its error event as the provider sent it: a
	// restatement has no status to rewrite there.
	fr.restatedTo = 0
	h.eventStream = false // nothing to track if it goes on: it failed
	return h.afterFailure(fr, &attemptFailure{status: 200, headers: h.respHdrs, body: held})
}

// failureResult is what recording a failed attempt decided.
type failureResult struct {
	fallback   bool          // try the next candidate
	restatedTo int           // the restated status (0 = not restated)
	retryAfter time.Duration // the restatement's Retry-After for the client
	waitable   bool          // a rate-limit-class failure comboCooldownWait may wait out (guide §4)
	log        failureLog    // for the decision log
}

// recordFailure records a failed attempt (a provider's outcome; Envoy's own replies are
// not, see below) and releases its slots.
func (h *httpContext) recordFailure(o engine.Outcome) failureResult {
	p := h.plugin
	var fr failureResult
	fr.log.status = o.Status
	switch {
	case h.envoyReply == "":
		o.Sent = h.sent()
		r := p.engine.Record(h.d, o, &h.plan)
		h.inFlight = false
		if r.Errors != nil {
			proxywasm.LogDebugf("spillway: record failure on %s: %v", h.targetName(), r.Errors)
		}
		fr.fallback = r.Verdict.Fallback
		fr.waitable = r.Verdict.Terminal == failure.TerminalNone && r.Verdict.Reason.Waitable()
		if r.RequestOnly {
			p.metrics.requestOnly.Increment(1)
			proxywasm.LogDebugf("spillway: %s does not serve model %q", h.targetName(), h.d.Target.Model)
		}
		if r.Restatement.Restated {
			p.metrics.restated.Increment(1)
			p.metrics.connRestated.add(p.metrics.connIndex(h.d.Target), 1)
			fr.restatedTo, fr.retryAfter = r.Restatement.Status, r.Restatement.RetryAfter
		}
		h.noteFailure(&fr, r, "")
	case strings.HasPrefix(h.envoyReply, "upstream_reset_before_response_started"):
		// The provider could not be reached or reset the stream: a transport failure.
		r := p.engine.Record(h.d, engine.Outcome{Status: 0, Message: h.envoyReply}, &h.plan)
		h.inFlight = false
		fr.fallback = r.Verdict.Fallback
		fr.log.status = 0
		h.noteFailure(&fr, r, h.envoyReply)
	default:
		// Envoy answered itself (no healthy upstream, overflow, no route, its own timeout):
		// not the provider's outcome. The request still fails over: the client asked for
		// the model, not for that cluster.
		fr.fallback = !containsDownstream(h.envoyReply)
		fr.log.reason, fr.log.envoy = "envoy_reply", h.envoyReply
	}
	h.abandon()
	return fr
}

// noteFailure counts a recorded failure's classification and keeps what the decision log
// says of it (envoy: Envoy's response details, when Envoy reported the failure).
func (h *httpContext) noteFailure(fr *failureResult, r engine.Result, envoy string) {
	h.plugin.metrics.failure(h.d.Target, r.Verdict.Reason)
	fr.log = failureLog{status: fr.log.status, restatedTo: fr.restatedTo, reason: string(r.Verdict.Reason),
		effects: r.Effects, classified: true, verdict: r.Verdict, requestOnly: r.RequestOnly, envoy: envoy,
		ttfb: h.plugin.clock().Sub(h.dispatchedAt)}
}

// afterFailure fails over to the next candidate when the failure allows it, or answers with
// the last failure. f is the failed attempt's response (nil when it had none: a callout
// that failed to connect; the previous one then stays the answer).
func (h *httpContext) afterFailure(fr failureResult, f *attemptFailure) step {
	failed := h.d.Target
	fr.log.attempt = h.attempts
	if f != nil {
		f.restatedFrom, f.retryAfter, f.target = 0, fr.retryAfter, h.d.Target
		if fr.restatedTo != 0 && fr.restatedTo != f.status {
			f.restatedFrom, f.status = f.status, fr.restatedTo
		}
		h.last, h.hasLast = *f, true
	}
	h.envoyReply = ""
	if fr.fallback && h.startFailover() {
		h.failedOver(failed, &fr)
		return stepWait
	}
	if fr.waitable {
		switch s := h.afterRateLimit(); s {
		case stepWait:
			if h.phase == phaseCallout {
				h.failedOver(failed, &fr)
			} else {
				h.logFailure(failed, &fr.log, nextWait, nil, 0, "")
			}
			return s
		}
	}
	if h.hasLast {
		h.logFailure(failed, &fr.log, nextAnswer, nil, h.last.status, "")
	} else {
		h.logFailure(failed, &fr.log, nextAnswer, nil, 502, replies.CodeUpstreamError)
	}
	return h.finalAnswer()
}

// failedOver counts and logs the failed attempt on failed that the request failed over from,
// to the attempt now in flight (h.d).
func (h *httpContext) failedOver(failed engine.Target, fr *failureResult) {
	h.plugin.metrics.connFailovers.add(h.plugin.metrics.connIndex(failed), 1)
	h.logFailure(failed, &fr.log, nextFailover, &h.d.Target, 0, "")
}

// finalAnswer answers with the last failure: the router's held response (restated where a
// rule says so) goes on, or a failover attempt's response (or what was kept of the held one)
// replaces it.
func (h *httpContext) finalAnswer() step {
	if !h.hasLast {
		h.reply(replies.UpstreamFailed(h.attempts))
		return stepAnswered
	}
	f := &h.last
	h.answeredBy = &f.target
	h.outcome = outcomeUpstreamFailure
	if f.fromCallout || h.heldDropped {
		// A callout's answer, or the held response whose buffer was emptied: a local reply
		// of what Spillway kept replaces whatever Envoy holds.
		hdrs := replyHeaders(h.bufs.replyHdrs[:0], f.headers)
		h.bufs.replyHdrs = hdrs
		hdrs = appendRestatement(hdrs, f)
		h.sendLocal(f.status, hdrs, f.body)
		return stepAnswered
	}
	if f.restatedFrom != 0 {
		replaceResponseHeader(":status", strconv.Itoa(f.status))
		replaceResponseHeader(HeaderRestatedFrom, strconv.Itoa(f.restatedFrom))
		if s := replies.RetryAfterSeconds(f.retryAfter); s > 0 && !hasHeader(f.headers, "retry-after") {
			replaceResponseHeader("retry-after", strconv.FormatInt(s, 10))
		}
	}
	h.setSpillwayHeaders()
	h.phase = phaseStreaming
	h.respEnded = true
	return stepProceed
}

// appendRestatement adds a restated failure's x-spillway-restated-from and Retry-After.
func appendRestatement(hdrs [][2]string, f *attemptFailure) [][2]string {
	if f.restatedFrom == 0 {
		return hdrs
	}
	hdrs = append(hdrs, [2]string{HeaderRestatedFrom, strconv.Itoa(f.restatedFrom)})
	if s := replies.RetryAfterSeconds(f.retryAfter); s > 0 && !hasHeader(hdrs, "retry-after") {
		hdrs = append(hdrs, [2]string{"retry-after", strconv.FormatInt(s, 10)})
	}
	return hdrs
}

// replaceResponseHeader and removeResponseHeader edit the held response headers; a failure
// (the map is gone) only logs.
func removeResponseHeader(name string) {
	if err := hostabi.RemoveHeader(hostabi.ResponseHeaders, name); err != nil {
		proxywasm.LogDebugf("spillway: remove %s: %v", name, err)
	}
}

func replaceResponseHeader(name, value string) {
	if err := hostabi.ReplaceHeader(hostabi.ResponseHeaders, name, value); err != nil {
		proxywasm.LogDebugf("spillway: set %s: %v", name, err)
	}
}

// statusAndType reads :status and content-type.
func statusAndType(hdrs [][2]string) (status int, contentType string) {
	for _, kv := range hdrs {
		switch kv[0] {
		case ":status":
			status = parseStatus(kv[1])
		case "content-type":
			contentType = kv[1]
		}
	}
	return status, contentType
}

// parseStatus reads a :status value: three digits, as Envoy sends it, without strconv's
// generality; anything else as strconv.Atoi reads it (0 when it is not a number).
func parseStatus(v string) int {
	if len(v) == 3 && v[0] >= '0' && v[0] <= '9' && v[1] >= '0' && v[1] <= '9' && v[2] >= '0' && v[2] <= '9' {
		return int(v[0]-'0')*100 + int(v[1]-'0')*10 + int(v[2]-'0')
	}
	n, _ := strconv.Atoi(v)
	return n
}

// isEventStream reports a text/event-stream content type (parameters ignored).
func isEventStream(contentType string) bool {
	ct := contentType
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

func hasHeader(hdrs [][2]string, name string) bool {
	for _, kv := range hdrs {
		if strings.EqualFold(kv[0], name) {
			return true
		}
	}
	return false
}

// wrapError makes an in-stream error object look like an HTTP error body
// ({"error":{...}}), the shape classification reads.
func wrapError(obj []byte) []byte {
	out := make([]byte, 0, len(obj)+10)
	out = append(out, `{"error":`...)
	out = append(out, obj...)
	return append(out, '}')
}

// replyHeaders keeps the headers of a failover attempt's response that belong in the reply
// that carries it to the client: everything end to end, without framing, pseudo headers
// and Spillway's own.
func replyHeaders(out, hdrs [][2]string) [][2]string {
	for _, kv := range hdrs {
		k := strings.ToLower(kv[0])
		if strings.HasPrefix(k, ":") || llmapi.IsHopByHop(k) || strings.HasPrefix(k, "x-spillway-") {
			continue
		}
		out = append(out, [2]string{k, kv[1]})
	}
	return out
}
