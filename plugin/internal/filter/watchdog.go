package filter

import (
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/plugin/internal/watchdog"
)

// The stream watchdogs (guide §6 throughput, guide §2 content stall) on a committed event
// stream: one that passed its first-event hold and goes to the client. Each body chunk's
// events are read (llmapi.OutputScanner) and judged (package watchdog) at the callback's
// time; ticks judge too, for a stream that sends nothing at all. No runtime timer is used.
//
// By then the client has bytes, so a slow attempt is ended, never replayed (guide §6: "Na
// de commit wordt de stream nooit blindelings opnieuw afgespeeld"):
//
//  1. The client gets a clean end: an error event in its API's shape (llmapi.AppendStreamError)
//     is appended to a body chunk at an event boundary, the chunk cut there (a partial
//     event after it is dropped). Data can be added only in a body callback: from a tick the
//     response body is not the filter's to write. A verdict reached on a tick (or on a chunk
//     that ends inside an event begun in an earlier chunk, whose start already went on)
//     waits for the next chunk that has a boundary, for at most inBandGrace.
//  2. Then the stream is closed: Envoy cannot end a response under way with end of stream
//     on a filter's behalf; proxy_close_stream resets it (Context::closeStream →
//     encoder_callbacks_->resetStream, source/extensions/common/wasm/context.cc), and so
//     does a local reply after the headers went downstream (sendLocalReply). The reset is
//     deferred only to the end of the callback that asks for it (proxy-wasm-cpp-host
//     DeferAfterCallActions in ContextBase::onResponseBody) — before Envoy passes that
//     callback's data on, so the reset is asked for in the callback after the one that
//     carried the error event: the next tick (at most busyTickMs later) or the next chunk
//     (which it drops). On HTTP/2 the reset only cancels frames not yet sent (the codec's
//     StreamImpl::resetStream), so the error event, handed to the codec in the callback
//     before, goes out first; that HTTP/1.1's connection close flushes it as well is not
//     verified here. If the upstream's end of stream comes first, the stream simply ends
//     after the error event.
//  3. The attempt is recorded once: a stall (engine.RecordStall: the connection's last error,
//     no cooldown unless streamStallCooldown), counted in spillway_connection_watchdog_aborts_total;
//     the stream leaves phaseStreaming, so its end is no truncation, and its slots are given
//     back once, in OnHttpStreamDone, like every stream's.
//
// A failover attempt's response is not watched: it reaches the filter complete. The rate is
// the rate at which chunks reach the filter, which Envoy's flow control paces to what the
// client reads (watermarks), so a very slow reader looks like a slow stream.

// inBandGrace is how long a verdict waits for a body chunk to carry the error event to
// the client; a stream that sends nothing meanwhile is reset without one.
const inBandGrace = 5 * time.Second

// streamWatch is a committed stream's watchdog state (part of streamState; the scanner's
// buffers live in streamBuffers).
type streamWatch struct {
	on      bool
	dog     watchdog.Watchdog
	due     watchdog.Verdict // a verdict waiting for a chunk to carry its error event
	dueAt   time.Time        // when it was first reached
	verdict watchdog.Verdict // the verdict the stream was ended with (phaseAborting)
	closed  bool             // proxy_close_stream was asked for
}

// startWatchdog starts the watchdogs on a stream being committed; held is the stream so
// far (what the hold read).
func (h *httpContext) startWatchdog(held []byte) {
	p := h.plugin
	if !p.watchdog.On() {
		return
	}
	h.wd.on = true
	h.wd.dog.Start(&p.watchdog, h.holdStart)
	h.observe(held, p.clock())
}

// observe reads a chunk's complete events into the watchdog.
func (h *httpContext) observe(chunk []byte, now time.Time) {
	s := &h.bufs.sse
	s.Feed(chunk)
	for o, ok := s.Next(); ok; o, ok = s.Next() {
		h.wd.dog.Observe(now, o)
	}
}

// watchChunk judges a committed stream at one of its body chunks (read into chunk) and
// ends it in-band when a verdict is due.
func (h *httpContext) watchChunk(chunk []byte) {
	p := h.plugin
	p.readClock()
	now := p.clock()
	h.observe(chunk, now)
	if h.wd.dog.Ended() {
		h.wd.due = watchdog.Keep // the answer is complete: nothing to end
		return
	}
	v := h.wd.dog.Judge(now)
	if v == watchdog.Keep {
		h.wd.due = watchdog.Keep // output came since a tick's verdict
		return
	}
	cut := h.bufs.sse.Cut()
	if cut < 0 {
		// The chunk ends inside an event whose start went on already: wait for its end.
		h.markDue(v, now)
		return
	}
	out := llmapi.AppendStreamError(chunk[:cut], h.errorShape(h.bufs.sse.Shape()), "timeout_error", v.Code(), v.Message())
	h.bufs.respBody = out
	if err := hostabi.ReplaceBuffer(hostabi.ResponseBody, out); err != nil {
		proxywasm.LogWarnf("spillway: watchdog: add the error event: %v", err)
	}
	h.abort(v, true)
}

// markDue keeps the time of the first verdict, from which inBandGrace runs.
func (h *httpContext) markDue(v watchdog.Verdict, now time.Time) {
	if h.wd.due == watchdog.Keep {
		h.wd.due, h.wd.dueAt = v, now
	}
}

// watchdogTick judges a committed stream on a tick; it reports whether the stream was
// ended. A verdict waits for a chunk to carry it, for inBandGrace; then the stream is reset.
func (h *httpContext) watchdogTick() bool {
	now := h.plugin.clock()
	v := h.wd.dog.Judge(now)
	if v == watchdog.Keep {
		h.wd.due = watchdog.Keep
		return false
	}
	h.markDue(v, now)
	if now.Sub(h.wd.dueAt) < inBandGrace {
		return false
	}
	h.effective()
	h.abort(h.wd.due, false)
	h.closeStream()
	return true
}

// abort records a stream the watchdog ends (once: the stream leaves phaseStreaming).
func (h *httpContext) abort(v watchdog.Verdict, inBand bool) {
	p := h.plugin
	h.phase = phaseAborting
	h.wd.verdict = v
	kind := watchdogSlowStream
	if v == watchdog.Stalled {
		kind = watchdogStall
	}
	p.metrics.WatchdogAbort(h.d.Target, kind)
	how := "an error event, then a reset"
	if !inBand {
		how = "a reset: no chunk came to carry an error event"
	}
	proxywasm.LogWarnf("spillway: watchdog (%s) ended the stream from %s after %v: %s", v, h.targetName(),
		p.clock().Sub(h.holdStart).Round(time.Millisecond), how)
	if r := p.engine.RecordStall(h.d); r.Errors != nil {
		proxywasm.LogWarnf("spillway: record stall on %s: %v", h.targetName(), r.Errors)
	}
	p.setTick(busyTickMs) // the reset follows at the next tick
}

// abortingBody is a body chunk of a stream a watchdog ended: nothing more of the attempt
// reaches the client; the upstream's end of stream ends the stream cleanly, anything else
// is reset.
func (h *httpContext) abortingBody(bodySize int, endOfStream bool) types.Action {
	if bodySize > 0 {
		if err := hostabi.ReplaceBuffer(hostabi.ResponseBody, nil); err != nil {
			proxywasm.LogDebugf("spillway: watchdog: drop the rest of the stream: %v", err)
		}
	}
	h.respEnded = endOfStream
	if !endOfStream {
		h.closeStream()
	}
	return types.ActionContinue
}

// closeStream resets the stream, once.
func (h *httpContext) closeStream() {
	if h.wd.closed {
		return
	}
	h.wd.closed = true
	if err := hostabi.CloseStream(hostabi.StreamResponse); err != nil {
		proxywasm.LogWarnf("spillway: watchdog: close the stream: %v", err)
	}
}
