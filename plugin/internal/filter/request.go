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

// OnHttpRequestHeaders implements types.HttpContext. A client-sent cluster header, the
// session headers and every other x-spillway-* header never reach the upstream; with the
// admin API on, neither does a lookalike of it nor the admin token (admin.go). A POST to one
// of the policy's LLM API paths is held (Pause) until its body has arrived; every other
// request passes through untouched.
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
	tokenHeader := "" // a client credential header that holds the admin token
	for _, kv := range hdrs {
		n := p.reqHeaders.lookup(kv[0])
		if n == nil {
			if isSpillwayHeader(kv[0]) {
				removeRequestHeader(kv[0]) // Spillway's namespace: a client never writes in it
			}
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
			if p.admin.IsToken(kv[1]) {
				tokenHeader = n.name
			}
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
	api, routed := p.apiOf(path)
	if h.adminGate(hdrs, method, path, routed, endOfStream, tokenHeader) { // admin.go: answered, or held for its body
		return types.ActionPause
	}
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
// later one that can go now; when none can, the request waits in the first such queue (in
// its engine's queue line: VisitQueues polls it when its turn may have come). A store error
// puts the dispatch off to a later tick (admitRetry), and fails open once it persists.
func (h *httpContext) dispatchRequest() step {
	p := h.plugin
	var waiting engine.Dispatch
	hasWaiting := false
	for h.next < len(h.plan.Targets) {
		t := h.plan.Targets[h.next]
		h.next++
		d, err := p.engine.Dispatch(t)
		if d.Wake.Any() {
			p.vm.wake(p, d.Wake)
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
			if hasWaiting {
				h.abandonDispatch(waiting)
			}
			if h.storeError("admission", err) {
				h.phase = phaseAdmitRetry
				p.watch(h)
				return stepWait
			}
			// The store error persisted: admission fails open for this request.
		case d.Waiting:
			if !hasWaiting {
				waiting, hasWaiting = d, true
			} else {
				h.abandonDispatch(d)
			}
			continue
		default:
			h.admitRetry.Succeeded()
			if hasWaiting {
				h.abandonDispatch(waiting)
			}
		}
		h.startAttempt(d)
		if !h.applyTarget() {
			h.reply(replies.Internal())
			return stepAnswered
		}
		return stepProceed
	}
	if hasWaiting {
		h.admitRetry.Succeeded()
		h.d, h.phase, h.queuedAt = waiting, phaseQueued, p.clock()
		p.metrics.queued.Increment(1)
		p.engine.Park(waiting, h)
		p.setTick(busyTickMs)
		return stepWait
	}
	return h.noTarget()
}

// abandonDispatch gives back a dispatch the request does not take (its ticket or slots).
func (h *httpContext) abandonDispatch(d engine.Dispatch) {
	p := h.plugin
	w, err := p.engine.Abandon(d)
	if err != nil {
		proxywasm.LogWarnf("spillway: cancel queue ticket: %v", err)
	}
	if w.Any() {
		p.vm.wake(p, w)
	}
}

// storeError handles a shared-data error of an admission step (where names it for the log;
// the request is paused): it reports true when the step is to be tried again at a later tick
// (counted retried; h.admitRetry says when), false when the error persisted
// admission.MaxStoreRetries times and the request goes without a slot (counted failed_open).
func (h *httpContext) storeError(where string, err error) (retry bool) {
	p := h.plugin
	if _, open := h.admitRetry.Failed(p.clock(), busyTickMs*time.Millisecond, p.vm.node.Jitter()); open {
		p.metrics.storeErrors.count(storeFailedOpen)
		proxywasm.LogWarnf("spillway: %s: %v; the error persisted: the request goes without a slot", where, err)
		return false
	}
	p.metrics.storeErrors.count(storeRetried)
	proxywasm.LogDebugf("spillway: %s: %v; retried at a later tick", where, err)
	return true
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

// queueTurn polls a queued request's turn for a tick or a wake-up (where names it), unless a
// store error put its poll off to a later tick.
func (h *httpContext) queueTurn(where string) {
	defer h.failOpenOutside(where)
	p := h.plugin
	if where == "tick" && p.beforeCallback != nil {
		p.beforeCallback("tick")
	}
	if h.admitRetry.Waiting(p.clock()) {
		return
	}
	h.retryAdmission()
}

// retryAdmission checks a queued request's turn (a wake-up or a tick). The dispatch re-checks
// every layer, so the cache is refreshed first: the wait may have outlived what it read.
func (h *httpContext) retryAdmission() {
	p := h.plugin
	p.refreshCache()
	d, err := p.engine.TryDispatch(h.d)
	if d.Wake.Any() {
		p.vm.wake(p, d.Wake)
	}
	h.d = d
	if !d.Waiting {
		h.endQueueWait() // granted, refused, or its target is excluded now
	}
	switch {
	case errors.Is(err, engine.ErrTargetUnavailable):
		h.effective()
		h.resumeRequest(h.dispatchRequest())
	case errors.Is(err, admission.ErrNotWaiting):
		// Its ticket is gone from the lines (it cannot be: every way out cancels it): plan
		// the request again rather than wait for nothing.
		h.d.Waiting = false
		h.endQueueWait()
		h.effective()
		h.resumeRequest(h.planAndDispatch())
	case err != nil && isRefusal(err):
		h.effective()
		if r, ok := p.engine.AdmissionReply(d.Target, err); ok {
			h.reply(r)
			return
		}
		h.reply(replies.Internal())
	case err != nil:
		if h.storeError("admission", err) {
			return // still waiting; polled again once the retry is due
		}
		// The store error persisted: the request leaves the queue and goes without a slot.
		if d.Waiting {
			h.abandonDispatch(d)
			h.endQueueWait()
		}
		h.d.Waiting, h.d.Ticket = false, admission.Ticket{}
		h.effective()
		h.startAttempt(h.d)
		h.applyTarget()
		h.resumeRequest(stepProceed)
	case !d.Waiting:
		h.admitRetry.Succeeded()
		h.effective()
		h.startAttempt(d)
		if !h.applyTarget() {
			h.reply(replies.Internal())
			return
		}
		h.resumeRequest(stepProceed)
	default:
		h.admitRetry.Succeeded()
	}
}

// applyTarget sets the attempt's target on the held request: its headers (setTargetHeaders)
// and the target's model in the body. It reports false when the request must not go on
// (setTargetHeaders could not name its cluster); the caller answers it.
func (h *httpContext) applyTarget() bool {
	if h.hm.active {
		return h.headerRoutedTarget()
	}
	if !h.setTargetHeaders() {
		return false
	}
	sent := len(h.body)
	if model := h.d.Target.Model; model != h.model {
		n, ok := h.sendBodyFor(model)
		if !ok {
			return true
		}
		sent = n
	}
	if h.plugin.res.Failover.ViaRouter && h.rt.link == 0 {
		h.linkTries(sent) // router.go: later attempts may be the router's retries
	}
	return true
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

// setTargetHeaders sets the attempt's target on the request: its cluster, then
// setConnectionHeaders. The cluster is named in filter state (setTargetCluster: the
// standalone bootstrap's and hostsim serve's route read it with the matcher cluster
// specifier, and no client can write it), or, when the policy routes by header
// (routing.clusterHeader, which istio.Render sets: Istio's VirtualServices match a header),
// in the cluster header. It reports false when the host refused the filter state: the
// request must not go on, since the route would send it, with this connection's
// credential, to its default cluster.
//
// The route was matched before the filter ran (source/common/http/conn_manager_impl.cc,
// ActiveStream::decodeHeaders → refreshCachedRoute), without the filter state, and the
// router resolves it again (its matcher reading the filter state as it is then) only once
// the route cache was cleared. Every request-header edit clears it for Spillway's ABI 0.2.0
// (source/extensions/common/wasm/context.cc: addHeaderMapValue, replaceHeaderMapValue and
// removeHeaderMapValue call onHeadersModified; research §12), and nothing reads the route
// in between, so the filter state goes first and the connection's headers after it. A
// target that has neither an :authority nor a credential to set, whose attempt may edit no
// header at all, clears the cache itself (clearRouteCache).
func (h *httpContext) setTargetHeaders() bool {
	res := h.plugin.res
	pv := h.provider()
	if res.Routing.ClusterByHeader {
		replaceRequestHeader(res.Routing.ClusterHeader, pv.Cluster)
	} else if !h.setTargetCluster(pv.Cluster) {
		return false
	}
	h.setConnectionHeaders()
	if !res.Routing.ClusterByHeader && pv.Authority == "" && h.connection().CredentialHeader == "" {
		clearRouteCache()
	}
	return true
}

// clearRouteCache has Envoy resolve the route again when the request reaches the router
// (the foreign function clear_route_cache, which Envoy registers from 1.33:
// source/extensions/common/wasm/foreign.cc); a failure only logs.
func clearRouteCache() {
	if _, err := proxywasm.CallForeignFunction("clear_route_cache", nil); err != nil {
		proxywasm.LogWarnf("spillway: clear_route_cache: %v", err)
	}
}

// setConnectionHeaders sets the provider's :authority and the connection's credential in
// place of every client credential. Accept-Encoding is dropped so an error body comes back
// readable for classification. A router retry (router.go) sets these alone: its route and
// cluster were chosen with the first try (or, under crossCluster, by the filter state the
// failed try wrote).
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
