package filter

import (
	"encoding/binary"
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

// phase is where a stream is in Spillway's handling.
type phase uint8

const (
	phasePass        phase = iota // not an LLM request, or failed open: nothing to do
	phaseBody                     // request headers held, body arriving
	phaseQueued                   // waiting for a concurrency slot (admission ticket, in the engine's queue lines)
	phaseAdmitRetry               // a shared-data error put the dispatch off to a later tick (admitRetry)
	phaseComboWait                // every target excluded by a short transient lock: waiting it out
	phaseUpstream                 // sent through the router, waiting for the response headers
	phaseHoldError                // non-2xx response headers held, error body arriving
	phaseHoldFirst                // 200 event stream held until its first decisive event
	phaseCallout                  // a failover attempt is in flight (proxy_http_call)
	phaseFailureWait              // the failed response held while a short rate limit runs out (comboCooldownWait)
	phaseStreaming                // the response goes to the client; outcome recorded
	phaseAborting                 // a stream watchdog ended the stream (watchdog.go): the rest is dropped, it is closed
	phaseAnswered                 // Spillway sent its own reply

	// Header-routed mode (headermode.go) cannot hold a response: it watches it go by.
	phaseWatchFirst // a 200 event stream goes to the client, watched for its first event
	phaseWatchError // a failed response goes to the client, its error body read as it passes
)

// httpContext is one HTTP stream. Its state is reset when the stream ends and the context is
// reused for a later stream with its buffers (pluginContext.recycle).
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	id     uint32
	streamState
	bufs streamBuffers
}

// streamBuffers is the memory a context keeps from one stream to the next.
type streamBuffers struct {
	reqPairs, respPairs hostabi.Pairs // request and response headers as read
	body                []byte        // the request body
	parser              llmapi.Parser // reads body; holds an escaped model's text
	rewrite             []byte        // the body rewritten for a target's model (bodyFor)
	respBody            []byte        // response body bytes read (error body, held events)
	callPairs           hostabi.Pairs // a failover attempt's response headers
	callBody            []byte        // a failover attempt's response body
	replyHdrs           [][2]string   // a failover attempt's headers kept for its reply, or a callout's
	localHdrs           [][2]string   // a local reply's headers
	prop                []byte        // reading a property
	tryPairs            hostabi.Pairs // a router try's response headers (router.go)
	tryBody             []byte        // a held router try's body
	onCallout           func(numHeaders, bodySize, numTrailers int)
	sse                 llmapi.OutputScanner // a watched stream's events (watchdog.go)
	plan                engine.Buffers
	scratch             []byte // encoding local reply headers
}

// maxKeptBody bounds the body buffer a context keeps for reuse: a rare large request does
// not stay in memory after it.
const maxKeptBody = 1 << 20

// streamState is everything about one stream.
type streamState struct {
	phase  phase
	serial uint64 // which stream of this context (pluginContext.streams at its start)

	// The request.
	api        policies.API
	reqHeaders [][2]string // as the client sent them (aliases bufs.reqPairs; for failover attempts)
	present    headerSet   // which headers of interest the client sent
	session    string      // the session id (first session header), "" = none
	heldAt     time.Time   // request headers held (missing-option detector)
	started    time.Time   // the request's start (failover budget)
	body       []byte      // the whole request body, once read (aliases bufs.body)
	modelAt    llmapi.Span // where body's model is (what bodyFor rewrites)
	bodySize   int         // the body buffered so far (Envoy reports the cumulative size)
	model      string      // requested model (interned)
	stream     bool        // "stream": true
	sawBody    bool
	admin      adminCall // an admin API request held for its body (admin.go)
	requestID  string    // x-request-id, for the decision log (aliases bufs.reqPairs)
	route      int       // the route's index + 1 (0: none), for the metrics
	outcome    outcome   // how the request ended, for the metrics (0: not yet)

	// The plan and the attempt in flight.
	plan         engine.Plan
	next         int // index in plan.Targets of the next candidate
	attempts     int
	progress     combo.Progress
	waitStart    time.Time            // comboCooldownWait: when the wait began
	waitUntil    time.Time            // comboCooldownWait: when to plan again
	sessionKey   affinity.Key         // the session's affinity key (zero: none), to plan again
	onRoot       bool                 // the work runs in a root callback (a tick), not the stream's own
	refusal      error                // the first admission refusal met while dispatching
	queuedAt     time.Time            // when the request began waiting in h.d's queue (zero: not waiting)
	admitRetry   admission.StoreRetry // the run of store errors its admission met (stream.go, storeError)
	d            engine.Dispatch
	inFlight     bool // d holds an attempt whose outcome is not recorded yet
	holding      bool // d holds slots (recorded or not) to release at the end
	dispatchedAt time.Time

	// The response.
	status      int
	respHdrs    [][2]string // aliases bufs.respPairs
	eventStream bool
	holdStart   time.Time
	tracker     llmapi.Tracker
	respEnded   bool           // the response's end of stream went through
	envoyReply  string         // response.code_details of a reply Envoy made itself ("" = the provider's)
	last        attemptFailure // the last failed attempt (valid when hasLast)
	hasLast     bool
	heldDropped bool           // the held response's buffer was emptied while a failover attempt ran
	answeredBy  *engine.Target // the failed attempt whose response is the final answer (else h.d's)
	wd          streamWatch    // the stream watchdogs (watchdog.go)
	cutEnded    bool           // the upstream ended the stream without its terminal event: an error event ended it (streamcut.go)

	watched bool

	hm headerRouted // routing.mode: headers (headermode.go)
	rt routerTries  // resilience.failover.via: router (router.go)
}

// reset clears the stream's state and trims what its buffers keep.
func (h *httpContext) reset() {
	h.streamState = streamState{}
	if cap(h.bufs.body) > maxKeptBody {
		h.bufs.body = nil
	}
	if cap(h.bufs.rewrite) > maxKeptBody {
		h.bufs.rewrite = nil
	}
	if cap(h.bufs.respBody) > maxKeptBody {
		h.bufs.respBody = nil
	}
	if cap(h.bufs.callBody) > maxKeptBody {
		h.bufs.callBody = nil
	}
	if cap(h.bufs.tryBody) > maxKeptBody {
		h.bufs.tryBody = nil
	}
	h.bufs.sse.Reset()
	h.bufs.callPairs.Reset()
	h.bufs.reqPairs.Reset()
	h.bufs.respPairs.Reset()
	h.bufs.tryPairs.Reset()
}

// attemptFailure is the last failed attempt, kept for the final answer when failover runs
// out.
type attemptFailure struct {
	status       int
	headers      [][2]string
	body         []byte
	restatedFrom int
	retryAfter   time.Duration
	fromCallout  bool // the response came from a callout (else it is the router's, held)
	target       engine.Target
}

// headerSet marks request headers the client sent that Spillway must act on.
type headerSet uint16

const (
	hasClusterHeader headerSet = 1 << iota
	hasAcceptEncoding
	hasContentLength
	hasSessionBase // + index in policies.SessionAffinityHeaders
)

const hasCredentialBase = hasSessionBase << 4 // + index in llmapi.CredentialHeaders

// sessionHeaders are the bits of every session header.
const sessionHeaders = hasCredentialBase - hasSessionBase

func sessionBit(i int) headerSet    { return hasSessionBase << i }
func credentialBit(i int) headerSet { return hasCredentialBase << i }

// failOpen recovers a panic in a stream callback: it logs it, counts it and lets the request
// through untouched (README, "The HTTP surface": a panic never escapes a callback). Whatever
// the stream held is given back.
func (h *httpContext) failOpen(callback string, action *types.Action) {
	if r := recover(); r != nil {
		h.plugin.metrics.panics.Increment(1)
		proxywasm.LogErrorf("spillway: panic in %s, passing the request through: %v", callback, r)
		h.abandon()
		h.phase, h.outcome = phasePass, outcomeFailedOpen
		*action = types.ActionContinue
	}
}

// enter runs at the start of every stream callback.
func (h *httpContext) enter(callback string) {
	h.plugin.readClock()
	if h.plugin.beforeCallback != nil {
		h.plugin.beforeCallback(callback)
	}
}

// needsBusyTick reports whether the stream waits on time at a resolution finer than the
// idle tick.
func (h *httpContext) needsBusyTick() bool {
	if h.rt.held != nil {
		return true // a router try held for its body (router.go)
	}
	switch h.phase {
	case phaseQueued, phaseAdmitRetry, phaseComboWait, phaseFailureWait, phaseHoldFirst, phaseAborting:
		return true
	}
	return false
}

// onTick moves a watched stream on: the missing-option detector, queue and combo waits,
// execution timeouts, the first-event hold's time bound, lease renewals.
func (h *httpContext) onTick() {
	p := h.plugin
	defer h.failOpenOutside("tick")
	if p.beforeCallback != nil {
		p.beforeCallback("tick")
	}
	switch h.phase {
	case phaseBody:
		if p.optionProven {
			p.unwatch(h)
			return
		}
		if !h.sawBody && p.clock().Sub(h.heldAt) >= p.res.Routing.BodyWait {
			h.effective()
			h.misconfigured()
		}
	case phaseQueued:
		p.unwatch(h) // its engine's queue lines poll it (VisitQueues)
	case phaseAdmitRetry:
		if !h.admitRetry.Waiting(p.clock()) {
			h.effective()
			h.resumeRequest(h.planAndDispatch())
		}
	case phaseComboWait:
		if !p.clock().Before(h.waitUntil) {
			h.progress.Attempts++
			h.progress.Waited += p.clock().Sub(h.waitStart)
			h.effective()
			h.resumeRequest(h.planAndDispatch())
		}
	case phaseUpstream:
		if h.rt.held != nil {
			h.heldTryTick()
		}
		if limit := h.executionLimit(); limit > 0 && p.clock().Sub(h.dispatchedAt) >= limit {
			h.effective()
			h.executionTimeout(limit)
			return
		}
		h.renewLease()
	case phaseHoldFirst:
		if p.clock().Sub(h.holdStart) >= p.res.FirstEvent.Timeout {
			h.effective()
			h.commitHeldStream(h.bufs.respBody)
			if err := hostabi.ContinueStream(hostabi.StreamResponse); err != nil {
				proxywasm.LogWarnf("spillway: resume response: %v", err)
			}
			return
		}
		h.renewLease()
	case phaseStreaming:
		if h.wd.on && h.watchdogTick() {
			return
		}
		h.renewLease()
	case phaseHoldError, phaseCallout:
		h.renewLease()
	case phaseFailureWait:
		if !p.clock().Before(h.waitUntil) {
			h.progress.Attempts++
			h.progress.Waited += p.clock().Sub(h.waitStart)
			h.effective()
			h.onRoot = true
			h.carryOut(h.retryAfterWait())
			h.onRoot = false
		}
	case phaseAborting:
		if !h.respEnded {
			h.effective()
			h.closeStream()
		}
	case phaseWatchFirst, phaseWatchError:
		h.headerRoutedTick()
	default:
		p.unwatch(h)
	}
}

// failOpenOutside recovers a panic in work done for the stream from a root callback (a tick,
// a queue wake-up, a callout answer): it logs and counts it, gives back what the stream held,
// and lets the stream go on untouched — the direction Spillway was holding continues — so a
// panic never leaves a request hanging.
func (h *httpContext) failOpenOutside(where string) {
	r := recover()
	if r == nil {
		return
	}
	p := h.plugin
	p.metrics.panics.Increment(1)
	proxywasm.LogErrorf("spillway: panic in %s for stream %d, passing it through: %v", where, h.id, r)
	defer func() { _ = recover() }() // the host may refuse; nothing more to do then
	held := h.phase
	h.abandon()
	h.phase, h.outcome = phasePass, outcomeFailedOpen
	p.unwatch(h)
	h.effective()
	if h.hm.active && h.headerRoutedFailOpen(held) {
		return
	}
	switch held {
	case phaseBody, phaseQueued, phaseAdmitRetry, phaseComboWait:
		_ = hostabi.ContinueStream(hostabi.StreamRequest)
	case phaseHoldError, phaseHoldFirst, phaseCallout, phaseFailureWait:
		_ = hostabi.ContinueStream(hostabi.StreamResponse)
	}
}

// effective makes this stream the target of the host calls that follow (from a tick, a
// queue wake-up or a callout answer, which run on the root context).
func (h *httpContext) effective() {
	if err := proxywasm.SetEffectiveContext(h.id); err != nil {
		proxywasm.LogDebugf("spillway: set effective context %d: %v", h.id, err)
	}
}

// renewLease keeps a long attempt's concurrency slots from expiring while it runs.
func (h *httpContext) renewLease() {
	if !h.holding || !h.d.Lease.Held() {
		return
	}
	limit := h.executionLimit()
	if limit <= 0 || h.d.Lease.Deadline.Sub(h.plugin.clock()) > limit/2 {
		return
	}
	if err := h.plugin.engine.Renew(&h.d); err != nil {
		h.plugin.metrics.storeErrors.count(storeRetried) // the next tick renews again
		proxywasm.LogWarnf("spillway: renew slots of %s: %v", h.targetName(), err)
	}
}

// executionLimit is executionMaxWaitMs of the attempt's connection.
func (h *httpContext) executionLimit() time.Duration {
	if !h.holding && !h.inFlight {
		return 0
	}
	return h.connection().ExecutionMaxWait
}

func (h *httpContext) provider() *policies.ResolvedProvider {
	return &h.plugin.res.Providers[h.d.Target.Provider]
}

func (h *httpContext) connection() *policies.ResolvedConnection {
	return &h.plugin.res.Providers[h.d.Target.Provider].Connections[h.d.Target.Connection]
}

// targetName names the attempt's target in logs: provider/connection (never a credential).
func (h *httpContext) targetName() string {
	pv := h.provider()
	return pv.ID + "/" + pv.Connections[h.d.Target.Connection].ID
}

// spillwayHeaders are the x-spillway-* values for the stream's current state: the target
// whose response the client gets (the last attempt's, or the failed attempt whose answer is
// the final one), the requested model before any target was chosen.
func (h *httpContext) spillwayHeaders() [4][2]string {
	provider, connection, model := h.spillwayValues()
	return [4][2]string{{HeaderProvider, provider}, {HeaderConnection, connection}, {HeaderModel, model},
		{HeaderAttempts, attemptsValue(h.attempts)}}
}

// spillwayValues are the provider, connection and model values of spillwayHeaders.
func (h *httpContext) spillwayValues() (provider, connection, model string) {
	provider, connection, model = unrouted, unrouted, unrouted
	switch {
	case h.answeredBy != nil:
		t := h.answeredBy
		pv := &h.plugin.res.Providers[t.Provider]
		provider, connection, model = pv.ID, pv.Connections[t.Connection].ID, t.Model
	case h.attempts > 0:
		pv := h.provider()
		provider, connection, model = pv.ID, pv.Connections[h.d.Target.Connection].ID, h.d.Target.Model
	case h.model != "":
		model = h.model
	}
	return provider, connection, model
}

// setSpillwayHeaders writes them on the response headers the filter holds (without building
// the array: the response path runs it on every routed response).
func (h *httpContext) setSpillwayHeaders() {
	provider, connection, model := h.spillwayValues()
	replaceResponseHeader(HeaderProvider, provider)
	replaceResponseHeader(HeaderConnection, connection)
	replaceResponseHeader(HeaderModel, model)
	replaceResponseHeader(HeaderAttempts, attemptsValue(h.attempts))
}

// attemptCounts are the x-spillway-attempts values without a conversion per response.
var attemptCounts = func() (s [32]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func attemptsValue(n int) string {
	if n >= 0 && n < len(attemptCounts) {
		return attemptCounts[n]
	}
	return strconv.Itoa(n)
}

// localReplyDetails is the response code details of Spillway's own replies (Envoy's
// response.code_details and %RESPONSE_CODE_DETAILS% in access logs).
const localReplyDetails = "spillway_local_reply"

// reply answers the client with one of Spillway's own replies. In the request phase it goes
// through the filter chain (and this filter's response callbacks, which leave it alone); in
// the response phase it replaces the upstream response Envoy holds. Whatever the stream
// still held is given back first.
func (h *httpContext) reply(r replies.Reply) {
	h.abandon()
	h.outcome = replyOutcome(r.Code)
	h.sendLocal(r.Status, r.Headers, r.Body)
}

// sendLocal sends a local reply with the x-spillway-* headers added.
func (h *httpContext) sendLocal(status int, headers [][2]string, body []byte) {
	sh := h.spillwayHeaders()
	all := append(h.bufs.localHdrs[:0], headers...)
	all = append(all, sh[:]...)
	h.bufs.localHdrs = all
	h.phase = phaseAnswered
	h.plugin.unwatch(h)
	h.plugin.metrics.localReplies.Increment(1)
	if err := hostabi.SendLocalResponse(uint32(status), localReplyDetails, body, all, &h.bufs.scratch); err != nil {
		proxywasm.LogErrorf("spillway: send local reply %d: %v", status, err)
	}
}

// misconfigured answers a request held at its headers that never got a body callback: the
// proxy lacks allow_on_headers_stop_iteration.
func (h *httpContext) misconfigured() {
	p := h.plugin
	p.metrics.misconfigured.Increment(1)
	if !p.misconfigLogged {
		p.misconfigLogged = true
		proxywasm.LogCriticalf("spillway: a request held at its headers got no body for %v: the proxy lacks "+
			"allow_on_headers_stop_iteration: true in the Wasm filter's PluginConfig (Envoy >= 1.36); "+
			"answering such requests 500 %s", p.res.Routing.BodyWait, replies.CodeMisconfigured)
	}
	h.reply(replies.Misconfigured())
}

// abandon gives back what the stream holds without recording an outcome: a queue ticket,
// concurrency slots, a HALF_OPEN probe.
func (h *httpContext) abandon() {
	h.dropPendingTry()
	if !h.inFlight && !h.holding && h.phase != phaseQueued {
		return
	}
	h.endQueueWait()
	var wake admission.Wake
	var err error
	if h.inFlight || h.phase == phaseQueued {
		wake, err = h.plugin.engine.Abandon(h.d)
	} else {
		wake, err = h.plugin.engine.Release(h.d)
	}
	h.inFlight, h.holding = false, false
	if err != nil {
		proxywasm.LogWarnf("spillway: release %s: %v", h.targetName(), err) // retried by the admitter
	}
	if w := wake.Or(h.d.Wake); w.Any() {
		h.plugin.vm.wake(h.plugin, w)
	}
}

// release hands back the slots of an attempt whose outcome is recorded.
func (h *httpContext) release() {
	if !h.holding {
		return
	}
	h.holding = false
	wake, err := h.plugin.engine.Release(h.d)
	if err != nil {
		proxywasm.LogWarnf("spillway: release %s: %v", h.targetName(), err) // retried by the admitter
	}
	if wake.Any() {
		h.plugin.vm.wake(h.plugin, wake)
	}
}

// OnHttpStreamDone implements types.HttpContext (proxy_on_log: the stream is over, however
// it ended). A committed stream that ended without its terminal event is recorded as a
// failure of its connection (unless its client went away first); whatever is still held is
// given back. The giving back — slots and ticket, the router link, the context's reuse — is
// deferred first, so it runs even when the recording panics: a slot is never kept, and a
// context is never reused with a stream's state in it.
func (h *httpContext) OnHttpStreamDone() {
	p := h.plugin
	defer h.streamDone()
	defer func() {
		if r := recover(); r != nil {
			p.metrics.panics.Increment(1)
			proxywasm.LogErrorf("spillway: panic in stream done: %v", r)
		}
	}()
	h.enter("stream done")
	p.coarseClock() // releasing slots needs no fresh time; a truncation reads it below
	p.unwatch(h)
	if h.phase == phaseStreaming && h.eventStream {
		h.tracker.End()
		if h.truncated() && !h.clientWentAway() {
			h.recordTruncation(h.status) // streamcut.go
		}
	}
	if h.phase == phaseWatchError {
		h.recordWatchedError() // header-routed mode: what came of the error body
	}
	if h.api != "" {
		p.metrics.request(h.route, h.outcome)
	}
}

// streamDone gives back what an ended stream holds, unlinks it from its router tries and
// keeps its context for reuse. Each step recovers its own panic, so a failing step skips
// none of the others.
func (h *httpContext) streamDone() {
	for step := range streamDoneSteps {
		h.streamDoneStep(step)
	}
}

const streamDoneSteps = 3

func (h *httpContext) streamDoneStep(step int) {
	p := h.plugin
	defer func() {
		if r := recover(); r != nil {
			p.metrics.panics.Increment(1)
			proxywasm.LogErrorf("spillway: panic ending a stream (step %d): %v", step, r)
		}
	}()
	switch step {
	case 0:
		if p.beforeCallback != nil {
			p.beforeCallback("stream done: release")
		}
		h.abandon()
	case 1:
		p.vm.links.unlink(h.rt.link) // router.go
	case 2:
		// A callout still in flight belongs to the root context and outlives the stream; its
		// answer never reaches the recycled context: the SDK skips the callback of a deleted
		// context id (proxyOnHttpCallResponse), and the host never reuses an id.
		p.unwatch(h)
		p.recycle(h)
	}
}

// clientWentAway reports whether the stream ended because the downstream went away (Envoy's
// response flags DC/DR, or details naming the downstream), which is never the provider's
// failure.
func (h *httpContext) clientWentAway() bool {
	if h.respEnded {
		return false
	}
	if flags, ok := property(propResponseFlags, h.bufs.prop); ok {
		h.bufs.prop = flags
		if len(flags) == 8 && binary.LittleEndian.Uint64(flags)&downstreamGone != 0 {
			return true
		}
	}
	details, _ := property(propResponseCodeDetails, h.bufs.prop)
	h.bufs.prop = details
	return containsDownstream(string(details))
}

// propResponseFlags is the path of Envoy's response.flags attribute: the legacy response
// flags bitmask as an 8-byte little-endian integer (CEL ResponseLookupValues in
// source/extensions/filters/common/expr/context.cc, StreamInfoImpl::legacyResponseFlags).
var propResponseFlags = hostabi.JoinPath(nil, "response", "flags")

// downstreamGone are the response flags of a client that went away: DC (1<<14,
// DownstreamConnectionTermination: the connection closed) and DR (1<<28,
// DownstreamRemoteReset: an HTTP/2 or HTTP/3 stream reset), positions in
// CoreResponseFlag (envoy/stream_info/stream_info.h).
const downstreamGone = 1<<14 | 1<<28
