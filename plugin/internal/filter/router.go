package filter

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
)

// Router-mode failover (resilience.failover.via: router) keeps a failover attempt streaming:
// instead of a callout, whose answer the host buffers whole, the next attempt is one of
// Envoy's router retries, and its response streams to the client like a first attempt's.
// The module runs twice on each worker's VM (role.go): as the connection manager's filter
// (the downstream instance, this package's httpContext) and as each provider cluster's
// upstream HTTP filter, whose streams are the router's tries (upstreamTry). How it goes:
//
//   - The downstream instance routes the request as always and, when it sends it through
//     the router, links it: it files the stream under a VM-wide number (vmContext.linked)
//     and writes that number, with the VM's random token, to the filter state property
//     LinkProperty. An upstream filter's properties resolve against the router's stream
//     info, which is the downstream stream's (source/common/router/upstream_request.cc,
//     UpstreamFilterManager::streamInfo returns parent_.callbacks()->streamInfo()), so each
//     try reads the link, and a try on this VM finds the request's own state: one stream's
//     downstream and upstream callbacks run on one worker, in one VM (proxy-wasm-cpp-host
//     getOrCreateThreadLocalPlugin keys the thread's VM by vm_config, which the generators
//     make the same for both filters). A link with another VM's token — the upstream filter
//     on another vm_config — is ignored, and the try passes through untouched.
//   - A try's failed response (status 400 and up) is classified on its status and headers
//     alone (engine.Preview): the router decides on a try's headers before any of its body
//     is read (source/common/router/router.cc, Filter::onUpstreamHeaders calls
//     retry_state_->shouldRetryHeaders), and holding the headers to read the body first is
//     not safe before Envoy 1.37 (envoyproxy/envoy#41879). When the verdict fails over and a
//     next target of the plan can go now — on the same cluster (a retry goes to the route's
//     cluster: the router picks it once, in Filter::decodeHeaders) with the same upstream
//     model (the router replays the body the first try was sent with) — its slots are taken
//     and the marker header routerretry.MarkerHeader is added, on which alone the route retries.
//     The failed try's response then never reaches the client.
//   - The next try's request headers record the failed try (engine.Record, its slots given
//     back), make the taken target the attempt in flight and set its credential and
//     :authority on the router's request headers, which every try shares.
//   - A failure that fails over no further — not retriable, or no target left that a retry
//     can reach — is let through as it came, and the downstream instance handles it as it
//     handles any failure: it reads the error body, restates, records and fails over by
//     callout to a target on another cluster or with another model. So does a failure
//     whose body or first event decides (an error event first in a 200 stream), unless
//     failover.holdTries is on (Envoy ≥ 1.37): then a try whose headers do not fail over
//     but whose body might — a failed try's error body, a 200 event stream's first event —
//     is held (startHold) while a retry could still reach a target, decided on that body,
//     and released marked or not. The held try's first-event bound and the detector for an
//     upstream filter without allow_on_headers_stop_iteration run on the downstream
//     instance's tick (heldTryTick), which makes the try's context effective to let it go.
//   - A retry to another cluster (failover.crossCluster, Envoy ≥ 1.39): the route picks its
//     cluster with the matcher cluster specifier on the filter state TargetProperty, which
//     the downstream instance writes for the first try (setTargetHeaders), and
//     RetryPolicy.refresh_cluster_on_retry has Filter::doRetry re-run it before each retry
//     (MatcherRouteEntry::refreshRouteCluster); without it doRetry reuses the first try's
//     cluster. A failed try names its retry's cluster before it is marked
//     (proxy_set_property works from a response callback, where the request headers no
//     longer can be written: context.cc Context::decodeHeaders drops them). A try for
//     another model holds its request headers and rewrites its own copy of the body
//     (rewriteTryBody). Without crossCluster a retry reaches only targets on the current
//     try's cluster with the replayed body's model.
//   - A marked try the router does not retry after all (its retries or its retry budget
//     spent, the body over the retry buffer) reaches the downstream instance with the
//     target taken for the retry unused: its slots are given back unrecorded, and the
//     response is handled as the failure it is.
//
// Every slot belongs to the downstream stream (httpContext.d, routerTries.pending), so a
// client that goes away mid-failover leaks none: the stream's end gives them back whatever
// the tries' own callbacks did. A request whose response arrives with no try seen by an
// upstream instance (the filter missing, or on another VM) is counted
// (spillway_router_unlinked_total), logged at critical once per VM, and fails over by
// callout.

// LinkProperty is the filter state property that links a try to its request.
const LinkProperty = "spillway.link"

// TargetProperty (routerretry.TargetProperty) is the filter state property that names the
// cluster of a routed request (setTargetHeaders) and, under failover.crossCluster, of its
// next try: the route's matcher cluster specifier reads it (routerretry.TargetFilterStateKey)
// when the route resolves and, with RetryPolicy.refresh_cluster_on_retry (Envoy ≥ 1.39),
// again before each retry.
const TargetProperty = routerretry.TargetProperty

var (
	propLink   = hostabi.JoinPath(nil, LinkProperty)
	propTarget = hostabi.JoinPath(nil, TargetProperty)
)

// routerTries is a router-mode request's failover state (streamState.rt).
type routerTries struct {
	link       uint64          // the request's number in vmContext.linked (0: not linked)
	held       *upstreamTry    // the try whose response is held (failover.holdTries), nil: none
	heldSince  time.Time       // when the last held try's response headers came (zero: none held)
	cluster    string          // the current try's cluster (without crossCluster, every try's)
	model      string          // the upstream model of the body the router replays to every try
	bodyLen    int             // that body's length
	lengthSet  bool            // a try set content-length for a body of its own (crossCluster)
	tries      int             // tries an upstream instance saw start
	pending    engine.Dispatch // the target taken for the router's next try
	hasPending bool            // pending is set: its target is plan.Targets[next-1]
	failed     engine.Outcome  // the marked try's outcome, recorded when the retry starts
}

// routerLinks is the VM-wide index of linked requests, shared by the VM's plugins.
type routerLinks struct {
	token  string // random: tells this VM's links from another's
	next   uint64
	linked map[uint64]*httpContext
	// prop is the buffer a try reads the link into: one per VM (a VM runs one callback at a
	// time), since a try's context is new for every try and would grow its own each time.
	prop []byte
}

// link files h under a new number and returns it with the link's property value; ok is
// false when the VM has no token (no randomness), and the request then fails over by
// callout.
func (l *routerLinks) link(h *httpContext, buf []byte) (n uint64, value []byte, ok bool) {
	if l.token == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			proxywasm.LogWarnf("spillway: router failover: link token: %v; failing over by callout", err)
			return 0, buf, false
		}
		l.token = hex.EncodeToString(b[:])
		l.linked = make(map[uint64]*httpContext)
	}
	l.next++
	l.linked[l.next] = h
	value = strconv.AppendUint(append(append(buf[:0], l.token...), ':'), l.next, 10)
	return l.next, value, true
}

// find returns the request a link value names, nil when it is another VM's, malformed or
// ended.
func (l *routerLinks) find(value []byte) *httpContext {
	n := len(l.token)
	if n == 0 || len(value) <= n+1 || string(value[:n]) != l.token || value[n] != ':' {
		return nil
	}
	id, err := strconv.ParseUint(string(value[n+1:]), 10, 64)
	if err != nil {
		return nil
	}
	h := l.linked[id]
	if h == nil || h.rt.link != id {
		return nil
	}
	return h
}

// unlink removes an ended request.
func (l *routerLinks) unlink(id uint64) {
	if id != 0 {
		delete(l.linked, id)
	}
}

// linkTries links a request sent through the router to its tries (its first attempt's
// target is set on it already; bodyLen is the length of the body it was sent).
func (h *httpContext) linkTries(bodyLen int) {
	p := h.plugin
	// The first try's cluster is in the filter state already (setTargetHeaders): a request
	// that cannot be linked still reaches its target, and fails over by callout.
	n, value, ok := p.vm.links.link(h, h.bufs.prop)
	h.bufs.prop = value
	if !ok {
		return
	}
	if err := hostabi.SetPropertyBytes(propLink, value); err != nil {
		p.vm.links.unlink(n)
		proxywasm.LogWarnf("spillway: router failover: set %s: %v; failing over by callout", LinkProperty, err)
		return
	}
	h.rt.link, h.rt.cluster, h.rt.model, h.rt.bodyLen = n, h.provider().Cluster, h.d.Target.Model, bodyLen
}

// setTargetCluster names the cluster the route sends the request (or, under crossCluster,
// its next try) to, in the filter state TargetProperty. A failure (the host refused the
// write) is logged: a first attempt is then answered 500 (setTargetHeaders), a failed try
// is not marked (it fails over by callout).
func (h *httpContext) setTargetCluster(cluster string) bool {
	if err := hostabi.SetProperty(propTarget, cluster); err != nil {
		proxywasm.LogWarnf("spillway: set %s: %v", TargetProperty, err)
		return false
	}
	return true
}

// tryStarted runs at a try's request headers. The first try is the request's first attempt,
// whose target the downstream instance set; a later one is the retry a failed try asked
// for: that try is recorded now, and the target taken for the retry becomes the attempt.
// It reports whether the try's body must be rewritten for another model (crossCluster):
// the try's headers are then held for its body (rewriteTryBody).
func (h *httpContext) tryStarted() (rewrite bool) {
	rt := &h.rt
	rt.tries++
	if rt.tries == 1 || !rt.hasPending {
		return false // the first try, or a retry Spillway did not ask for: it goes as it is
	}
	next := rt.pending
	rt.pending, rt.hasPending = engine.Dispatch{}, false
	failed, previous := h.d.Target, h.connection().CredentialHeader
	fr := h.recordFailure(rt.failed)
	fr.log.attempt = h.attempts
	h.startAttempt(next)
	h.plugin.metrics.routerRetries.Increment(1)
	h.failedOver(failed, &fr)
	if cn := h.connection(); previous != "" && previous != cn.CredentialHeader {
		removeRequestHeader(previous) // the failed connection's credential, under another name
	}
	h.setConnectionHeaders()
	rt.cluster = h.provider().Cluster
	if h.d.Target.Model != rt.model {
		return true
	}
	if rt.lengthSet {
		// An earlier try's body was another model's: this one is the router's own again.
		replaceRequestHeader("content-length", strconv.Itoa(rt.bodyLen))
		rt.lengthSet = false
	}
	return false
}

// rewriteTryBody gives a try for another model (crossCluster) its body: the client's body
// with the try's model, in place of the router's copy (each try gets its own copy of the
// buffered body, source/common/router/router.cc Filter::doRetry, so the router's stays as
// the first try was sent), with the content-length it needs on the request headers the try
// still holds. A body that cannot be rewritten goes as it is, logged.
func (h *httpContext) rewriteTryBody() {
	if _, ok := h.sendBodyFor(h.d.Target.Model); ok {
		h.rt.lengthSet = true
	}
}

// tryFailed decides on a failed try's outcome o (its status and headers, and with
// failover.holdTries its error body or first event): when it fails over and a target a
// retry can reach takes it, the try's response headers get the marker. It reports whether
// they did.
func (h *httpContext) tryFailed(o engine.Outcome) (marked bool) {
	o.Sent = h.sent() // the request's own: t.request() linked the try to h
	if v, _ := h.plugin.engine.Preview(h.d, o); !v.Fallback || !h.takeRetryTarget() {
		return false
	}
	if next := h.plugin.res.Providers[h.rt.pending.Target.Provider].Cluster; next != h.rt.cluster && !h.setTargetCluster(next) {
		h.returnPendingTry()
		return false
	}
	h.rt.failed = o
	replaceResponseHeader(routerretry.MarkerHeader, "1")
	return true
}

// retryTargetLeft reports whether a retry could still fail over: an attempt and time left in
// the budget, and a next target in the plan on the first target's cluster with its model
// (whether it can take the attempt is known only at its dispatch).
func (h *httpContext) retryTargetLeft() bool {
	return h.failoverLeft() && h.retryReaches(h.plan.Targets[h.next])
}

// retryReaches reports whether a router retry can go to t: with crossCluster any target
// (the route refreshes its cluster, and the try rewrites its body for another model);
// without it only a target on the current try's cluster with the replayed body's model.
func (h *httpContext) retryReaches(t engine.Target) bool {
	p := h.plugin
	return p.res.Failover.CrossCluster || (t.Model == h.rt.model && p.res.Providers[t.Provider].Cluster == h.rt.cluster)
}

// takeRetryTarget takes the slots of the next target in the plan a retry can reach, within
// the failover bounds. It stops at the first target a retry cannot reach (another cluster
// or model), which the downstream instance's callout failover then starts from; a target
// that cannot take the attempt now is passed over (dispatchNow), as in dispatchFailover.
func (h *httpContext) takeRetryTarget() bool {
	h.plugin.refreshCache()
	for h.next < len(h.plan.Targets) {
		if !h.budgetLeft() {
			return false
		}
		t := h.plan.Targets[h.next]
		if !h.retryReaches(t) {
			return false
		}
		h.next++
		d, ok := h.dispatchNow(t)
		if !ok {
			continue
		}
		h.rt.pending, h.rt.hasPending = d, true
		return true
	}
	return false
}

// responseAfterTries runs at the downstream response headers of a linked request, before
// the response path: a target taken for a retry that never came is given back, and a
// request no upstream instance saw is counted.
func (h *httpContext) responseAfterTries() {
	p := h.plugin
	if h.rt.hasPending {
		h.returnPendingTry()
		removeResponseHeader(routerretry.MarkerHeader) // the route removes it too; a client never sees it
	}
	if h.rt.tries == 0 && h.cameFromUpstream() {
		p.metrics.unlinked.Increment(1)
		if !p.vm.unlinkedLogged {
			p.vm.unlinkedLogged = true
			proxywasm.LogCriticalf("spillway: failover goes through the router (resilience.failover.via router, or " +
				"unset: the default), but no upstream instance saw a try of a request: attach the module as each " +
				"provider cluster's upstream HTTP filter (root_id spillway.upstream) on the same vm_config, or set " +
				"resilience.failover.via: callout; failing over by callout meanwhile")
		}
	}
}

// cameFromUpstream reports whether the response being handled is an upstream's
// (response.code_details via_upstream), not one Envoy made before any try started (no
// cluster, no healthy host, overflow), which no upstream instance could have seen.
func (h *httpContext) cameFromUpstream() bool {
	details, ok := property(propResponseCodeDetails, h.bufs.prop)
	h.bufs.prop = details
	return ok && string(details) == viaUpstream
}

// returnPendingTry gives back the target taken for a retry that will not come, and puts it
// back in the plan: the callout failover that may follow starts from it (takeRetryTarget
// took it at plan.Targets[next-1], and nothing moves next while a retry is pending).
func (h *httpContext) returnPendingTry() {
	if h.rt.hasPending {
		h.next--
		h.dropPendingTry()
	}
}

// dropPendingTry gives back, unrecorded, the target taken for a retry that did not start.
func (h *httpContext) dropPendingTry() {
	if !h.rt.hasPending {
		return
	}
	d := h.rt.pending
	h.rt.pending, h.rt.hasPending = engine.Dispatch{}, false
	wake, err := h.plugin.engine.Abandon(d)
	if err != nil {
		proxywasm.LogWarnf("spillway: release a retry's slots: %v", err)
	}
	if w := wake.Or(d.Wake); w.Any() {
		h.plugin.vm.wake(h.plugin, w)
	}
}

// upstreamTry is an upstream-role stream: one try of the router. A try of a linked request
// acts on that request's state (above); every other try continues untouched.
type upstreamTry struct {
	types.DefaultHttpContext
	vm     *vmContext
	id     uint32       // the try's context id
	h      *httpContext // the linked request (nil: none)
	serial uint64       // h's stream when the try started
	// With failover.holdTries, a failed try's response or a 200 event stream is held
	// (holdTries below) from holdStart; sawBody: a body callback reached the held try.
	hold      tryHold
	status    int
	holdStart time.Time
	sawBody   bool
	// rewrite: the try's request headers are held until its body is rewritten for its
	// target's model (crossCluster).
	rewrite bool
}

// tryHold is what a held try waits for.
type tryHold uint8

const (
	holdNone  tryHold = iota
	holdError         // a failed try's error body
	holdFirst         // a 200 event stream's first decisive event
)

// request returns the try's linked request, nil once it ended (its context serves another
// stream or none).
func (t *upstreamTry) request() *httpContext {
	if t.h == nil || t.h.serial != t.serial || t.h.rt.link == 0 {
		return nil
	}
	return t.h
}

// OnHttpRequestHeaders implements types.HttpContext: the try finds its request.
func (t *upstreamTry) OnHttpRequestHeaders(int, bool) (action types.Action) {
	t.vm.inTry = true
	defer t.recover("try request headers", &action)
	value, ok := property(propLink, t.vm.links.prop)
	t.vm.links.prop = value
	if !ok {
		return types.ActionContinue
	}
	h := t.vm.links.find(value)
	if h == nil || h.phase != phaseUpstream {
		return types.ActionContinue // not linked, or no longer waiting on the router
	}
	t.h, t.serial = h, h.serial
	h.enter("try request headers")
	if t.rewrite = h.tryStarted(); t.rewrite {
		// Held until the body: with allow_on_headers_stop_iteration a true StopIteration
		// (the same option the downstream role needs), and the router sends a retry's body
		// at once after its headers (Filter::doRetry).
		return types.ActionPause
	}
	return types.ActionContinue
}

// OnHttpRequestBody implements types.HttpContext: a try held for another model gets its
// body at its end.
func (t *upstreamTry) OnHttpRequestBody(_ int, endOfStream bool) (action types.Action) {
	t.vm.inTry = true
	defer t.recover("try request body", &action)
	if !t.rewrite {
		return types.ActionContinue
	}
	if !endOfStream {
		return types.ActionPause
	}
	t.rewrite = false
	if h := t.request(); h != nil {
		h.enter("try request body")
		h.rewriteTryBody()
	}
	return types.ActionContinue
}

// OnHttpResponseHeaders implements types.HttpContext: a failed try may be marked for a
// retry, or held to decide on its body (failover.holdTries).
func (t *upstreamTry) OnHttpResponseHeaders(_ int, endOfStream bool) (action types.Action) {
	t.vm.inTry = true
	defer t.recover("try response headers", &action)
	h := t.request()
	if h == nil || h.phase != phaseUpstream || h.rt.hasPending {
		return types.ActionContinue
	}
	if err := hostabi.ReadPairs(hostabi.ResponseHeaders, &h.bufs.tryPairs); err != nil {
		return types.ActionContinue
	}
	hdrs := h.bufs.tryPairs.All()
	status, contentType := statusAndType(hdrs)
	p := h.plugin
	switch {
	case status >= 400:
		h.enter("try response headers")
		o := engine.Outcome{Status: status, Headers: hdrs, TTFB: p.clock().Sub(h.dispatchedAt)}
		if h.tryFailed(o) || endOfStream || !p.res.Failover.HoldTries || !h.retryTargetLeft() {
			return types.ActionContinue
		}
		// Its headers do not fail over (or failed over to no target a retry can reach, and
		// then retryTargetLeft is false); its error body may (a quota or rate limit behind
		// a 400 or 403).
		return t.startHold(h, holdError, status)
	case status >= 200 && status < 300 && isEventStream(contentType) && !endOfStream && p.res.Failover.HoldTries:
		h.enter("try response headers")
		if !h.retryTargetLeft() {
			return types.ActionContinue
		}
		return t.startHold(h, holdFirst, status)
	}
	return types.ActionContinue
}

// startHold holds the try's response headers (failover.holdTries). With
// allow_on_headers_stop_iteration the Pause is a StopIteration and the body callbacks
// arrive (proxy-wasm-cpp-host context.cc, convertVmCallResultToFilterHeadersStatus, in the
// upstream filter chain too: the Wasm filter's config is the same class there,
// source/extensions/filters/http/wasm/config.cc); the downstream instance's tick lets a held
// try go at the first-event bound, and answers for one that gets no body at all (the option
// missing on the upstream filter).
func (t *upstreamTry) startHold(h *httpContext, hold tryHold, status int) types.Action {
	p := h.plugin
	t.hold, t.status, t.holdStart, t.sawBody = hold, status, p.clock(), false
	h.rt.held, h.rt.heldSince = t, t.holdStart
	h.bufs.tryBody = h.bufs.tryBody[:0]
	p.watch(h) // watched already (phaseUpstream): its next tick turns busy (setTick)
	return types.ActionPause
}

// OnHttpResponseBody implements types.HttpContext: a held try's body decides it.
func (t *upstreamTry) OnHttpResponseBody(bodySize int, endOfStream bool) (action types.Action) {
	t.vm.inTry = true
	defer t.recover("try response body", &action)
	if t.hold == holdNone {
		return types.ActionContinue
	}
	h := t.request()
	if h == nil || h.rt.held != t {
		t.hold = holdNone
		return types.ActionContinue
	}
	h.enter("try response body")
	t.sawBody = true
	p := h.plugin
	limit := maxErrorBody
	if t.hold == holdFirst {
		limit = p.res.FirstEvent.MaxBytes
	}
	if !endOfStream && bodySize < limit && t.hold == holdError {
		return types.ActionPause // the error body to its end, or to what classification reads
	}
	body, err := hostabi.ReadBuffer(hostabi.ResponseBody, 0, min(bodySize, limit), h.bufs.tryBody)
	h.bufs.tryBody = body
	if err != nil {
		body = nil
	}
	ttfb := t.holdStart.Sub(h.dispatchedAt)
	hdrs := h.bufs.tryPairs.All()
	switch t.hold {
	case holdError:
		h.tryFailed(engine.Outcome{Status: t.status, Headers: hdrs, Body: body, TTFB: ttfb})
	case holdFirst:
		switch fe := llmapi.ScanFirst(body, endOfStream); {
		case fe.Verdict == llmapi.NeedMore && bodySize < limit && p.clock().Sub(t.holdStart) < p.res.FirstEvent.Timeout:
			return types.ActionPause
		case fe.Verdict == llmapi.Failed:
			if h.tryFailed(engine.Outcome{Status: fe.Status, Body: wrapError(fe.Error), TTFB: ttfb}) {
				p.metrics.streamErrors.Increment(1)
			}
		case fe.Verdict == llmapi.Empty:
			h.tryFailed(engine.Outcome{Status: 502, Body: emptyStreamError, TTFB: ttfb})
		}
	}
	t.release(h)
	return types.ActionContinue
}

// release ends the try's hold: its response goes on (to the router, which retries it when
// it carries the marker, or passes it downstream).
func (t *upstreamTry) release(h *httpContext) {
	t.hold = holdNone
	if h.rt.held == t {
		h.rt.held = nil
	}
}

// heldTryTick runs on the downstream instance's tick for a request whose try is held: a 200
// stream held to its first-event bound goes on, and a try held at its headers that got no
// body callback within routing.bodyWaitMs — the upstream filter lacks
// allow_on_headers_stop_iteration, so a headers Pause stops everything — goes on too, counted
// and logged as the request path's detector does (the try is then the downstream's to
// handle, and the request is not answered 500: its response is on its way).
func (h *httpContext) heldTryTick() {
	t := h.rt.held
	p := h.plugin
	waited := p.clock().Sub(t.holdStart)
	switch {
	case !t.sawBody && waited >= p.res.Routing.BodyWait:
		p.metrics.misconfigured.Increment(1)
		if !p.vm.holdMisconfigLogged {
			p.vm.holdMisconfigLogged = true
			proxywasm.LogCriticalf("spillway: a try held at its response headers got no body for %v: the upstream "+
				"filter lacks allow_on_headers_stop_iteration: true in its PluginConfig; letting held tries go", waited)
		}
	case t.hold == holdFirst && waited >= p.res.FirstEvent.Timeout:
	default:
		return
	}
	t.release(h)
	if err := proxywasm.SetEffectiveContext(t.id); err != nil {
		proxywasm.LogWarnf("spillway: resume a held try: %v", err)
		return
	}
	if err := hostabi.ContinueStream(hostabi.StreamResponse); err != nil {
		proxywasm.LogWarnf("spillway: resume a held try: %v", err)
	}
}

// recover keeps a panic in a try's callback from escaping: the try goes on untouched, and
// the request it served is left to the downstream instance (which gives back what it
// holds when it ends).
func (t *upstreamTry) recover(callback string, action *types.Action) {
	t.vm.inTry = false
	if r := recover(); r != nil {
		if h := t.request(); h != nil {
			h.plugin.metrics.panics.Increment(1)
		}
		proxywasm.LogErrorf("spillway: panic in %s, passing the try through: %v", callback, r)
		t.h = nil
		*action = types.ActionContinue
	}
}
