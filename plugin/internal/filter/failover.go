package filter

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/policies"
)

// Same-request failover. When an attempt fails retriably before anything reached the
// client, the next candidate is tried with proxy_http_call to its cluster (the buffered
// body, that target's credential and model) while the failed response stays held; the final
// result replaces it with a local reply (README, "How Spillway handles a request"). The host's
// async client buffers the whole answer, so a failover attempt's response is not streamed:
// the client gets it in one piece when it is complete.

// startFailover dispatches the next candidate that can go now as a callout. It reports
// false when there is none (or the attempt count or time budget is spent).
func (h *httpContext) startFailover() bool {
	// The dispatch re-checks every layer against what other workers recorded meanwhile.
	h.plugin.refreshCache()
	return h.dispatchFailover()
}

// dispatchFailover is startFailover on a cache refreshed already.
func (h *httpContext) dispatchFailover() bool {
	p := h.plugin
	for h.next < len(h.plan.Targets) {
		if !h.budgetLeft() {
			return false
		}
		t := h.plan.Targets[h.next]
		h.next++
		d, ok := h.dispatchNow(t)
		if !ok {
			continue
		}
		h.startAttempt(d)
		if h.callout(p.res.Failover.Budget - p.clock().Sub(h.started)) {
			h.phase = phaseCallout
			return true
		}
		// The host refused the call (an unknown cluster): give the attempt back, go on.
		h.abandon()
	}
	return false
}

// budgetLeft reports whether the request may make another attempt: resilience.failover's
// attempts and time are not spent.
func (h *httpContext) budgetLeft() bool {
	b := h.plugin.res.Failover
	return h.attempts < b.MaxAttempts && h.plugin.clock().Sub(h.started) < b.Budget
}

// dispatchNow dispatches t for an attempt that goes now or not at all: a failover attempt
// (a callout, or the router's retry). ok is false when t cannot take it — its provider's
// probe is taken, its queue is full, or it would queue, which a failover attempt never does
// (the client has waited already): the caller tries the next target. A shared-data failure
// fails open: the attempt goes (counted, spillway_admission_store_errors_total).
func (h *httpContext) dispatchNow(t engine.Target) (d engine.Dispatch, ok bool) {
	p := h.plugin
	d, err := p.engine.Dispatch(t)
	if d.Wake.Any() {
		p.vm.wake(p, d.Wake)
	}
	switch {
	case errors.Is(err, engine.ErrTargetUnavailable), isRefusal(err):
		return d, false
	case err != nil:
		// A failover attempt never waits (the client has waited already), so its store
		// error fails open at once.
		p.metrics.storeErrors.count(storeFailedOpen)
		proxywasm.LogWarnf("spillway: admission: %v; the attempt goes without a slot", err)
	case d.Waiting:
		h.abandonDispatch(d)
		return d, false
	}
	return d, true
}

// afterRateLimit is comboCooldownWait after a failed attempt (guide §4): when the request's
// candidates are spent and its last failure was a rate limit or a concurrency limit, the
// request is planned again. A target that can go now is tried at once (a failover
// attempt); when every target is excluded by a short rate-limit-class lock, the failed
// response stays held while the lock runs out (the engine's comboCooldownWait decision:
// maxWaitMs, maxAttempts, budgetMs), then the request is planned again. It reports
// stepWait when an attempt or a wait started, stepProceed when the failed response is the
// answer. The failover bounds (resilience.failover) hold across the waits.
func (h *httpContext) afterRateLimit() step {
	p := h.plugin
	budget := p.res.Failover
	if !h.budgetLeft() {
		return stepProceed
	}
	p.refreshCache()
	h.planTargets()
	if len(h.plan.Targets) > 0 {
		if h.dispatchFailover() {
			return stepWait
		}
		return stepProceed
	}
	dec := p.engine.AllExcluded(&h.plan, h.progress)
	if dec.Outcome != combo.OutcomeWait || p.clock().Add(dec.Wait).Sub(h.started) >= budget.Budget {
		return stepProceed
	}
	h.phase, h.waitUntil, h.waitStart = phaseFailureWait, p.clock().Add(dec.Wait), p.clock()
	p.unwatch(h)
	p.watch(h) // at the busy tick
	return stepWait
}

// retryAfterWait plans the request again once a wait after a rate limit ran out: it fails
// over to a target that can go now, waits again, or answers with the held failure.
func (h *httpContext) retryAfterWait() step {
	if s := h.afterRateLimit(); s == stepWait {
		return s
	}
	return h.finalAnswer()
}

// pinnedCalloutAnswer is the answer callback of a callout dispatched from a root callback
// (a wait after a rate limit ends on a tick; header mode re-routes from a tick or a queue
// wake-up). The SDK files a callout under the context whose callback was running
// (proxy-wasm-go-sdk proxywasm/internal/vmstate.go, registerHttpCallOut: activeContextID;
// proxy_set_effective_context does not change it), which is then the root;
// proxyOnHttpCallResponse makes that context effective and calls back even once the stream
// is gone. The answer would run with the root effective — a local reply or a continue
// silently does nothing there (Envoy Context::sendLocalResponse without decoder callbacks),
// and the request hangs — or reach the stream this context serves next. So the callback pins
// its stream: the answer of a stream that ended is dropped (the context's serial moved on),
// and the stream is made effective first. It allocates, on these rare paths only.
func (h *httpContext) pinnedCalloutAnswer() func(numHeaders, bodySize, numTrailers int) {
	serial := h.serial
	return func(numHeaders, bodySize, numTrailers int) {
		if h.serial != serial {
			return // the stream ended: its context is recycled or serves another stream
		}
		h.effective()
		// The answer runs in a root callback as well: a failover attempt it dispatches is
		// filed under the root too, so that attempt's answer must be pinned in turn.
		h.onRoot = true
		h.onCalloutResponse(numHeaders, bodySize, numTrailers)
		h.onRoot = false
	}
}

// callout sends the request to the attempt's target with proxy_http_call.
func (h *httpContext) callout(budgetLeft time.Duration) bool {
	p := h.plugin
	pv, cn := h.provider(), h.connection()
	body := h.body
	if model := h.d.Target.Model; model != h.model {
		body = h.bodyFor(model) // request.go
	}
	timeout := cn.ExecutionMaxWait
	if budgetLeft < timeout {
		timeout = budgetLeft
	}
	ms := uint32(max(timeout.Milliseconds(), 1))
	if h.bufs.onCallout == nil {
		h.bufs.onCallout = h.onCalloutResponse // bound once per context, not per callout
	}
	answer := h.bufs.onCallout
	if h.onRoot || h.hm.viaCallout {
		answer = h.pinnedCalloutAnswer() // dispatched from a tick or a wake-up
	}
	if _, err := proxywasm.DispatchHttpCall(pv.Cluster, h.calloutHeaders(pv, cn), body, nil, ms, answer); err != nil {
		proxywasm.LogWarnf("spillway: failover to %s (cluster %q): %v", h.targetName(), pv.Cluster, err)
		return false
	}
	p.unwatch(h)
	p.watch(h) // lease renewal while it runs
	return true
}

// calloutHeaders are the client's request headers as the target must get them: the
// provider's :authority, the connection's credential instead of any client credential, no
// session, cluster, model (header-routed mode), x-spillway-* (isSpillwayHeader), framing or
// hop-by-hop headers, no Accept-Encoding (the answer must be readable) — the request the
// router's attempts got, as OnHttpRequestHeaders and setConnectionHeaders left it.
func (h *httpContext) calloutHeaders(pv *policies.ResolvedProvider, cn *policies.ResolvedConnection) [][2]string {
	clusterHeader, modelHeader := h.plugin.res.Routing.ClusterHeader, h.plugin.res.Routing.ModelHeader
	out := h.bufs.replyHdrs[:0] // sent at once (the host copies them), then free again
	defer func() { h.bufs.replyHdrs = out[:0] }()
	for _, kv := range h.reqHeaders {
		k := kv[0]
		switch {
		case k == ":authority" && pv.Authority != "":
			out = append(out, [2]string{k, pv.Authority})
			continue
		case k == ":method" || k == ":path" || k == ":authority":
		case strings.HasPrefix(k, ":"), llmapi.IsHopByHop(k), llmapi.IsCredentialHeader(k),
			k == clusterHeader, k == modelHeader, k == "accept-encoding", isSessionHeader(k), k == cn.CredentialHeader,
			isSpillwayHeader(k):
			continue
		}
		out = append(out, kv)
	}
	if cn.CredentialHeader != "" {
		out = append(out, [2]string{cn.CredentialHeader, cn.CredentialValue.Reveal()})
	}
	return out
}

func isSessionHeader(name string) bool {
	for _, s := range policies.SessionAffinityHeaders {
		if name == s {
			return true
		}
	}
	return false
}

// onCalloutResponse is a failover attempt's answer (proxy_on_http_call_response, run with
// this stream as the effective context).
func (h *httpContext) onCalloutResponse(numHeaders, bodySize, _ int) {
	defer h.failOpenOutside("failover answer")
	if h.phase != phaseCallout {
		return
	}
	p := h.plugin
	p.readClock()
	ttfb := p.clock().Sub(h.dispatchedAt)
	if numHeaders == 0 {
		fr := h.recordFailure(engine.Outcome{Status: 0, Message: "failover attempt got no response", TTFB: ttfb})
		h.carryOut(h.afterFailure(fr, nil))
		return
	}
	var hdrs [][2]string
	if err := hostabi.ReadPairs(hostabi.HTTPCallResponseHeaders, &h.bufs.callPairs); err == nil {
		hdrs = h.bufs.callPairs.All()
	}
	body, err := hostabi.ReadBuffer(hostabi.HTTPCallResponseBody, 0, bodySize, h.bufs.callBody)
	h.bufs.callBody = body
	if err != nil {
		body = nil
	}
	status, contentType := statusAndType(hdrs)
	if status >= 200 && status < 300 {
		failedStatus, failedBody := 0, []byte(nil)
		if isEventStream(contentType) {
			switch fe := llmapi.ScanFirst(body, true); fe.Verdict {
			case llmapi.Failed:
				p.metrics.streamErrors.Increment(1)
				failedStatus, failedBody = fe.Status, wrapError(fe.Error)
			case llmapi.Empty:
				failedStatus = 502
			}
		}
		if failedStatus == 0 {
			h.recordSuccess(ttfb)
			if isEventStream(contentType) {
				body = h.endCalloutStream(status, body)
			}
			h.release()
			h.bufs.replyHdrs = replyHeaders(h.bufs.replyHdrs[:0], hdrs)
			h.sendLocal(status, h.bufs.replyHdrs, body)
			return
		}
		fr := h.recordFailure(engine.Outcome{Status: failedStatus, Body: failedBody, TTFB: ttfb})
		fr.restatedTo = 0
		h.carryOut(h.afterFailure(fr, &attemptFailure{status: status, headers: hdrs, body: body, fromCallout: true}))
		return
	}
	errBody := body
	if len(errBody) > maxErrorBody {
		errBody = errBody[:maxErrorBody]
	}
	fr := h.recordFailure(engine.Outcome{Status: status, Headers: hdrs, Body: errBody, TTFB: ttfb})
	h.carryOut(h.afterFailure(fr, &attemptFailure{status: status, headers: hdrs, body: body, fromCallout: true}))
}

// endCalloutStream checks a callout's 2xx event stream answer, body, for its end as a
// streamed response's end is checked (streamcut.go): the host's async client hands over the
// whole answer once the upstream ended it, so a stream the provider ended cleanly without its
// terminal event arrives here as a complete, successful body. It gets the same error event
// appended (appendCutEvent) and is recorded as the same truncation on the attempt's
// connection (recordTruncation), status being the answer's. It returns the body the reply
// carries. A stream that ended with its terminal event costs one pass of the tracker and no
// host call.
func (h *httpContext) endCalloutStream(status int, body []byte) []byte {
	h.tracker = llmapi.Tracker{} // an earlier attempt's stream may have been followed
	h.tracker.Feed(body)
	out, added := h.appendCutEvent(body)
	if added {
		h.bufs.callBody, h.cutEnded = out, true // kept for reuse, as the answer's read is
	}
	if h.truncated() {
		h.recordTruncation(status)
	}
	return out
}

// carryOut finishes a response-path step taken outside a response callback: the held
// response goes on when it is the answer.
func (h *httpContext) carryOut(s step) {
	if s != stepProceed {
		return
	}
	if err := hostabi.ContinueStream(hostabi.StreamResponse); err != nil {
		proxywasm.LogWarnf("spillway: resume response: %v", err)
	}
}

// executionTimeout answers an attempt that has had no response for executionMaxWaitMs:
// 504 RATE_LIMIT_EXECUTION_TIMEOUT (guide §5), recorded as the provider's timeout.
func (h *httpContext) executionTimeout(limit time.Duration) {
	p := h.plugin
	r := p.engine.Record(h.d, engine.Outcome{TimedOut: true, Message: "no response within executionMaxWaitMs (" +
		strconv.FormatInt(limit.Milliseconds(), 10) + " ms)"}, &h.plan)
	h.inFlight = false
	if r.Errors != nil {
		proxywasm.LogDebugf("spillway: record timeout on %s: %v", h.targetName(), r.Errors)
	}
	p.metrics.failure(h.d.Target, r.Verdict.Reason)
	rep, ok := p.engine.AdmissionReply(h.d.Target, admission.ErrExecutionTimeout)
	if !ok {
		return
	}
	h.logFailure(h.d.Target, &failureLog{reason: string(r.Verdict.Reason), effects: r.Effects, classified: true,
		verdict: r.Verdict, ttfb: p.clock().Sub(h.dispatchedAt)}, nextAnswer, nil, rep.Status, rep.Code)
	h.reply(rep)
}
