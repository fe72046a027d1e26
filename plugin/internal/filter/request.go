package filter

import (
	"errors"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/admission"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/combo"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/policies"
)

// OnHttpRequestHeaders implements types.HttpContext. A client-sent cluster header and the
// session headers never reach the upstream. A POST to one of the policy's LLM API paths is
// held (Pause) until its body has arrived; every other request passes through untouched.
func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) (action types.Action) {
	defer h.failOpen("request headers", &action)
	h.enter("request headers")
	p := h.plugin
	if err := hostabi.ReadPairs(hostabi.RequestHeaders, &h.bufs.reqPairs); err != nil {
		proxywasm.LogDebugf("spillway: request headers: %v", err)
		return types.ActionContinue
	}
	hdrs := h.bufs.reqPairs.All()
	var path, method string
	for _, kv := range hdrs {
		n := p.reqHeaders.lookup(kv[0])
		if n == nil {
			continue
		}
		switch n.kind {
		case reqPath:
			path = kv[1]
		case reqMethod:
			method = kv[1]
		case reqAcceptEncoding:
			h.present |= hasAcceptEncoding
		case reqContentLength:
			h.present |= hasContentLength
		case reqRequestID:
			h.requestID = kv[1]
		case reqCluster:
			h.present |= hasClusterHeader
		case reqSession:
			h.present |= sessionBit(int(n.index))
			if h.session == "" {
				h.session = kv[1]
			}
		case reqCredential:
			h.present |= credentialBit(int(n.index))
		}
	}
	if h.present&hasClusterHeader != 0 {
		removeRequestHeader(p.res.Routing.ClusterHeader) // a client never chooses a cluster
	}
	if h.present&sessionHeaders != 0 {
		for i, name := range policies.SessionAffinityHeaders {
			if h.present&sessionBit(i) != 0 {
				removeRequestHeader(name) // correlation ids for Spillway only
			}
		}
	}
	if h.adminRequest(hdrs, method, path, endOfStream) { // admin.go: answered or held for its body
		return types.ActionPause
	}
	api, routed := p.apiOf(path)
	if !routed || method != "POST" {
		return types.ActionContinue
	}
	h.api, h.reqHeaders = api, hdrs
	if p.res.Routing.HeaderRouted() {
		return h.headerRoutedRequest(endOfStream) // routing.mode: headers (headermode.go)
	}
	if !p.optionProven {
		h.heldAt = p.clock() // the missing-option detector's start (else no clock read here)
	}
	if endOfStream {
		h.reply(replies.InvalidRequest("request has no body"))
		return types.ActionPause
	}
	h.phase = phaseBody
	if !p.optionProven {
		p.watch(h)
	}
	return types.ActionPause
}

// OnHttpRequestBody implements types.HttpContext: a routed request's body is buffered
// (Pause) until its end, then routed.
func (h *httpContext) OnHttpRequestBody(bodySize int, endOfStream bool) (action types.Action) {
	defer h.failOpen("request body", &action)
	if h.hm.active {
		return h.headerRoutedBody(bodySize, endOfStream)
	}
	if h.phase != phaseBody {
		return types.ActionContinue
	}
	h.enter("request body")
	p := h.plugin
	if !h.sawBody {
		h.sawBody = true
		if !p.optionProven {
			p.optionProven = true // the body reached a held request: the option is set
			p.unwatch(h)
		}
	}
	h.bodySize = bodySize
	if limit := p.res.MaxRequestBodyBytes; int64(bodySize) > limit {
		h.reply(replies.RequestTooLarge(limit))
		return types.ActionPause
	}
	if !endOfStream {
		return types.ActionPause
	}
	return h.requestAction(h.endOfRequest(bodySize))
}

// OnHttpRequestTrailers implements types.HttpContext: trailers end a routed request's body.
func (h *httpContext) OnHttpRequestTrailers(int) (action types.Action) {
	defer h.failOpen("request trailers", &action)
	if h.hm.active {
		return h.headerRoutedTrailers()
	}
	if h.phase != phaseBody {
		return types.ActionContinue
	}
	h.enter("request trailers")
	return h.requestAction(h.endOfRequest(h.bodySize))
}

// step is what routing did with a request.
type step uint8

const (
	stepProceed  step = iota // a target is set on the request: let it go upstream
	stepWait                 // waiting for a slot or a cooldown: stay paused
	stepAnswered             // Spillway replied itself
)

// requestAction turns a step into the request callback's action.
func (h *httpContext) requestAction(s step) types.Action {
	if s == stepProceed {
		return types.ActionContinue
	}
	return types.ActionPause
}

// resumeRequest carries a step out from a root callback (tick, queue wake-up): a request
// that got its target continues.
func (h *httpContext) resumeRequest(s step) {
	if h.hm.active {
		h.headerRoutedResume(s)
		return
	}
	if s != stepProceed {
		return
	}
	if err := hostabi.ContinueStream(hostabi.StreamRequest); err != nil {
		proxywasm.LogWarnf("spillway: resume request: %v", err)
	}
}

// endOfRequest reads and checks the whole body, then routes the request.
func (h *httpContext) endOfRequest(bodySize int) step {
	if h.admin.path != "" {
		return h.endOfAdminRequest(bodySize) // admin.go
	}
	p := h.plugin
	if cap(h.bufs.body) < bodySize {
		h.bufs.body = make([]byte, 0, bodySize) // the host writes the body straight in
	}
	body, err := hostabi.ReadBuffer(hostabi.RequestBody, 0, bodySize, h.bufs.body)
	h.bufs.body = body
	if err != nil || len(body) == 0 {
		h.reply(replies.InvalidRequest("request has no body"))
		return stepAnswered
	}
	req, err := h.bufs.parser.Parse(body) // every error is the client's: llmapi's Err* (never quoting the body)
	if err != nil {
		h.reply(replies.InvalidRequest(err.Error()))
		return stepAnswered
	}
	h.body, h.model, h.stream, h.modelAt = body, p.intern(req.Model), req.Stream, req.ModelAt
	h.started = p.clock() // the failover budget runs from here
	return h.planAndDispatch()
}

// planAndDispatch plans the request's targets and dispatches the first one that can go.
func (h *httpContext) planAndDispatch() step {
	p := h.plugin
	rr, ri, ok := p.engine.RouteIndex(h.model)
	if !ok {
		h.reply(replies.ModelNotFound(h.model))
		return stepAnswered
	}
	h.route = ri + 1
	var key affinity.Key
	if h.session != "" && p.res.SessionAffinityTTL > 0 {
		var err error
		if key, err = affinity.NewKey(rr.Model, h.session); err != nil {
			proxywasm.LogDebugf("spillway: session id ignored: %v", err)
		}
	}
	p.refreshCache()
	h.sessionKey = key
	h.planTargets()
	h.refusal = nil
	return h.dispatchRequest()
}

// planTargets plans the request's model (its API and session key) on the cache as it
// stands, and starts over at the plan's first target.
func (h *httpContext) planTargets() {
	plan, err := h.plugin.engine.Plan(h.model, h.api, h.sessionKey, &h.bufs.plan)
	if err != nil && !errors.Is(err, engine.ErrNoRoute) {
		proxywasm.LogWarnf("spillway: plan %q: %v", h.model, err)
	}
	if plan.Degraded != nil {
		proxywasm.LogDebugf("spillway: plan %q degraded: %v", h.model, plan.Degraded)
	}
	h.plan, h.next = plan, 0
}

// dispatchRequest tries the plan's targets in order and sends the request to the first one
// that grants a slot. A target whose queue would make the request wait is passed over for a
// later one that can go now; when none can, the request waits in the first such queue.
func (h *httpContext) dispatchRequest() step {
	p := h.plugin
	var waiting engine.Dispatch
	hasWaiting := false
	for h.next < len(h.plan.Targets) {
		t := h.plan.Targets[h.next]
		h.next++
		d, err := p.engine.Dispatch(t)
		if d.Wake {
			p.peers.wakeAll(p)
		}
		switch {
		case errors.Is(err, engine.ErrTargetUnavailable):
			continue
		case isRefusal(err):
			if h.refusal == nil {
				h.refusal, h.d = err, d
			}
			continue
		case err != nil:
			// Shared data failed: admission fails open for this request.
			proxywasm.LogWarnf("spillway: admission: %v", err)
		case d.Waiting:
			if !hasWaiting {
				waiting, hasWaiting = d, true
			} else if _, err := p.engine.Abandon(d); err != nil {
				proxywasm.LogWarnf("spillway: cancel queue ticket: %v", err)
			}
			continue
		}
		if hasWaiting {
			if _, err := p.engine.Abandon(waiting); err != nil {
				proxywasm.LogWarnf("spillway: cancel queue ticket: %v", err)
			}
		}
		h.startAttempt(d)
		h.applyTarget()
		return stepProceed
	}
	if hasWaiting {
		h.d, h.phase, h.queuedAt = waiting, phaseQueued, p.clock()
		p.metrics.queued.Increment(1)
		p.watch(h)
		return stepWait
	}
	return h.noTarget()
}

// isRefusal reports a typed admission refusal (queue full, wait budget spent). It is a
// function of its own so the success path, which never calls it, allocates no target for
// errors.As.
func isRefusal(err error) bool {
	if err == nil {
		return false
	}
	var refusal *admission.Error
	return errors.As(err, &refusal)
}

// startAttempt makes d the attempt in flight.
func (h *httpContext) startAttempt(d engine.Dispatch) {
	p := h.plugin
	if d.FailedOpen {
		p.metrics.failedOpen.Increment(1)
	}
	h.d, h.inFlight, h.holding = d, true, true
	h.attempts++
	h.dispatchedAt = p.clock()
	h.phase = phaseUpstream
	p.metrics.attempts.Increment(1)
	p.metrics.attempt(d.Target)
	if h.attempts == 1 {
		p.metrics.routed.Increment(1)
	} else {
		p.metrics.failovers.Increment(1)
	}
	p.watch(h) // execution timeout, lease renewal
}

// noTarget answers a request none of whose targets can go now: an admission refusal, a
// combo cooldown wait, or the engine's reply for an all-excluded plan.
func (h *httpContext) noTarget() step {
	p := h.plugin
	if h.refusal != nil {
		if r, ok := p.engine.AdmissionReply(h.d.Target, h.refusal); ok {
			h.reply(r)
			return stepAnswered
		}
	}
	dec := p.engine.AllExcluded(&h.plan, h.progress)
	if dec.Outcome == combo.OutcomeWait {
		h.phase, h.waitUntil, h.waitStart = phaseComboWait, p.clock().Add(dec.Wait), p.clock()
		p.watch(h)
		return stepWait
	}
	r, ok := dec.Reply(h.model, h.plan.Excluded)
	if !ok {
		r = replies.NoExecutableTargets(h.model)
	}
	h.reply(r)
	return stepAnswered
}

// endQueueWait counts the end of the request's wait in h.d's queue, if it was waiting.
func (h *httpContext) endQueueWait() {
	if h.queuedAt.IsZero() {
		return
	}
	h.plugin.metrics.queueWait(h.d.Target, h.plugin.clock().Sub(h.queuedAt))
	h.queuedAt = time.Time{}
}

// onWake retries a queued request after a wake-up.
func (h *httpContext) onWake() {
	defer h.failOpenOutside("queue wake-up")
	h.retryAdmission()
}

// retryAdmission checks a queued request's turn (a wake-up or a tick). The dispatch re-checks
// every layer, so the cache is refreshed first: the wait may have outlived what it read.
func (h *httpContext) retryAdmission() {
	p := h.plugin
	p.refreshCache()
	d, err := p.engine.TryDispatch(h.d)
	if d.Wake {
		p.peers.wakeAll(p)
	}
	h.d = d
	if !d.Waiting {
		h.endQueueWait() // granted, refused, or its target is excluded now
	}
	switch {
	case errors.Is(err, engine.ErrTargetUnavailable):
		h.effective()
		h.resumeRequest(h.dispatchRequest())
	case err != nil:
		h.effective()
		if isRefusal(err) {
			if r, ok := p.engine.AdmissionReply(d.Target, err); ok {
				h.reply(r)
				return
			}
		}
		proxywasm.LogWarnf("spillway: admission: %v", err)
		h.reply(replies.Internal())
	case !d.Waiting:
		h.effective()
		h.startAttempt(d)
		h.applyTarget()
		h.resumeRequest(stepProceed)
	}
}

// applyTarget sets the attempt's target on the held request: its headers (setTargetHeaders)
// and the target's model in the body.
func (h *httpContext) applyTarget() {
	if h.hm.active {
		h.headerRoutedTarget()
		return
	}
	h.setTargetHeaders()
	sent := len(h.body)
	if model := h.d.Target.Model; model != h.model {
		n, ok := h.sendBodyFor(model)
		if !ok {
			return
		}
		sent = n
	}
	if h.plugin.res.Failover.ViaRouter && h.rt.link == 0 {
		h.linkTries(sent) // router.go: later attempts may be the router's retries
	}
}

// bodyFor returns the client's body with model in its model's place: written into the
// span the body's parse found, so nothing else changes and its length is exact (the buffer
// is the context's, valid until the next bodyFor; the host copies what it is handed).
func (h *httpContext) bodyFor(model string) []byte {
	h.bufs.rewrite = llmapi.RewriteModel(h.bufs.rewrite[:0], h.body, h.modelAt, model)
	return h.bufs.rewrite
}

// sendBodyFor replaces the request body the stream holds with the client's body for model,
// and its content-length on the request headers the stream still holds; it returns the
// new body's length, ok false (logged) when the body could not be replaced.
func (h *httpContext) sendBodyFor(model string) (n int, ok bool) {
	body := h.bodyFor(model)
	if err := hostabi.ReplaceBuffer(hostabi.RequestBody, body); err != nil {
		proxywasm.LogWarnf("spillway: replace request body: %v", err)
		return 0, false
	}
	replaceRequestHeader("content-length", strconv.Itoa(len(body)))
	return len(body), true
}

// setTargetHeaders sets the attempt's target on the request headers: the cluster header,
// then setConnectionHeaders.
func (h *httpContext) setTargetHeaders() {
	replaceRequestHeader(h.plugin.res.Routing.ClusterHeader, h.provider().Cluster)
	h.setConnectionHeaders()
}

// setConnectionHeaders sets the provider's :authority and the connection's credential in
// place of every client credential. Accept-Encoding is dropped so an error body comes back
// readable for classification. A router retry (router.go) sets these alone: its route and
// cluster were chosen with the first try, and the route removed the cluster header then.
func (h *httpContext) setConnectionHeaders() {
	pv := h.provider()
	cn := h.connection()
	if pv.Authority != "" {
		replaceRequestHeader(":authority", pv.Authority)
	}
	for i, name := range llmapi.CredentialHeaders {
		if h.present&credentialBit(i) != 0 && name != cn.CredentialHeader {
			removeRequestHeader(name)
		}
	}
	if cn.CredentialHeader != "" {
		replaceRequestHeader(cn.CredentialHeader, cn.CredentialValue.Reveal())
	}
	if h.present&hasAcceptEncoding != 0 {
		removeRequestHeader("accept-encoding")
	}
}

// removeRequestHeader and replaceRequestHeader edit the held request headers; a failure
// (the map is gone) only logs.
func removeRequestHeader(name string) {
	if err := hostabi.RemoveHeader(hostabi.RequestHeaders, name); err != nil {
		proxywasm.LogDebugf("spillway: remove %s: %v", name, err)
	}
}

func replaceRequestHeader(name, value string) {
	if err := hostabi.ReplaceHeader(hostabi.RequestHeaders, name, value); err != nil {
		proxywasm.LogDebugf("spillway: set %s: %v", name, err)
	}
}
