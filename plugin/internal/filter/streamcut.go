package filter

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/policies"
)

// A committed event stream (past its first-event hold: the client has bytes) that the
// provider cuts off cannot be replayed (guide §6). What the client sees of the cut depends
// on how the upstream ended it:
//
//   - Cleanly, without its terminal event ([DONE], message_stop, response.completed or
//     response.incomplete) or an error event: Envoy hands the filter the stream's end, the
//     body callback with end of stream, with the last data or empty (an HTTP/1 upstream's
//     complete message ends with decodeData of an empty buffer and end_stream true,
//     ClientConnectionImpl::onMessageCompleteBase in source/common/http/http1/codec_impl.cc,
//     which the router encodes on as it came). That chunk is still the filter's to edit
//     (Context::encodeData points the response body buffer at it,
//     source/extensions/common/wasm/context.cc), so endCutStream appends an error event in
//     the client's API shape (llmapi.AppendStreamError, the shape the stream watchdogs end a
//     stream with), coded replies.CodeStreamTruncated, and the stream then ends as the
//     upstream ended it. Without it the SDKs read a clean end: openai-go's and
//     anthropic-sdk-go's streams stop without an error, an incomplete answer taken for a
//     whole one. The attempt is still recorded as a truncation when the stream is done
//     (OnHttpStreamDone), as before.
//   - With a reset (or a connection closed mid-body): no callback carries the end. The
//     router resets the downstream stream once the response has started
//     (Filter::onUpstreamReset → onUpstreamAbort → sendLocalReply, which resets the stream
//     when "prior headers have already been sent", DownstreamFilterManager::sendLocalReply
//     in source/common/http/filter_manager.cc), so nothing can be added: an HTTP/2 client
//     gets RST_STREAM (NO_ERROR: reasonToReset in source/common/http/http2/codec_impl.cc),
//     an HTTP/1.1 client a connection closed before the body's last chunk
//     (ConnectionManagerImpl::doEndStream sets DrainState::Closing for a reset stream on
//     HTTP/1, source/common/http/conn_manager_impl.cc) — which its SDK reports as an error
//     (Go's net/http: unexpected EOF). The truncation is recorded the same way.
//   - With trailers after the last data (no SSE provider sends them): the body callbacks
//     saw no end of stream and the trailers callback has no body to add to; the stream ends
//     as it came, the truncation is recorded.
//
// A stream that reaches the client as a failover callout's answer (failover.go) is a body
// the host's async client handed over whole once the upstream ended it, so only the clean
// end is possible there: a reset fails the callout, answered with no headers
// (Context::onHttpCallFailure, source/extensions/common/wasm/context.cc). endCalloutStream
// runs the same tracker over it, appends the same event (appendCutEvent) to the local
// reply's body and records the same truncation (recordTruncation).
//
// An error event can only be added to a stream whose headers carry no content-length: of a
// body longer than it declares, an HTTP/1.1 client reads the declared length only (the rest
// is garbage on the connection) and an HTTP/2 client refuses the stream. So
// freeStreamLength removes it from every 2xx event stream's headers while they can still be
// edited — held for the first-event hold in body mode, or in the headers callback before
// they go on in header-routed mode; every 2xx event stream Spillway routes passes one of
// the two, so none is committed with its length. Envoy's HTTP/1 codec then frames the body
// chunked (StreamEncoderImpl::encodeHeadersBase, source/common/http/http1/codec_impl.cc),
// HTTP/2 by END_STREAM. Providers send streams chunked already; a gateway or fake that
// sends one with a length costs one header removal. (The watchdogs' error event needs the
// same.)

// streamCutMessage is the added error event's message.
const streamCutMessage = "the provider ended the stream before its end event ([DONE], message_stop or " +
	"response.completed): the answer is incomplete"

// freeStreamLength removes content-length from a 2xx event stream's response headers (hdrs:
// as read), which the filter is still holding.
func (h *httpContext) freeStreamLength(hdrs [][2]string) {
	if hasHeader(hdrs, "content-length") {
		removeResponseHeader("content-length")
	}
}

// endCutStream runs at the upstream's end of a committed event stream, chunk being that
// callback's body as read (and fed to the tracker): a stream that carried neither its
// terminal event nor an error event gets an error event appended (appendCutEvent). A stream
// with its terminal event, or already ended with an error (the provider's, or a watchdog's:
// that stream has left phaseStreaming), gets nothing, and neither does a client that went
// away (no end-of-stream callback comes). Nothing here calls the host unless an event is
// added.
func (h *httpContext) endCutStream(chunk []byte) {
	out, added := h.appendCutEvent(chunk)
	if !added {
		return
	}
	h.bufs.respBody = out
	if err := hostabi.ReplaceBuffer(hostabi.ResponseBody, out); err != nil {
		proxywasm.LogWarnf("spillway: add the error event to a cut stream: %v", err)
		return
	}
	h.cutEnded = true
}

// appendCutEvent ends the stream h.tracker followed, last being the bytes fed last that are
// still the filter's to edit (a committed stream's last chunk, or a callout answer's whole
// body): when the stream carried neither its terminal event nor an error event, out is last
// with the error event appended after its last complete event (Tracker.Boundary) and added
// is true; otherwise out is last as it is. A provider that does not count truncated streams
// (policies: countTruncatedStreams, for providers whose streams have no terminal event) gets
// nothing added. The one decision for every path a stream reaches the client by: the
// streamed response (endCutStream) and a callout failover's answer (failover.go).
func (h *httpContext) appendCutEvent(last []byte) (out []byte, added bool) {
	keep, sep := h.tracker.Boundary(len(last))
	h.tracker.End()
	if h.tracker.Terminal || h.tracker.Errored || !h.provider().CountTruncatedStreams {
		return last, false
	}
	shape := h.errorShape(h.tracker.Shape)
	errType := replies.TypeServer
	if shape == llmapi.ShapeAnthropic {
		errType = replies.TypeAPI
	}
	out = append(last[:keep], sep...)
	return llmapi.AppendStreamError(out, shape, errType, replies.CodeStreamTruncated, streamCutMessage), true
}

// truncated reports whether the stream h.tracker followed to its end (Tracker.End) is a
// truncation to record: it ended without its terminal event (an error event after content
// counts: the answer is incomplete), and its provider counts truncated streams.
func (h *httpContext) truncated() bool {
	return !h.tracker.Terminal && h.provider().CountTruncatedStreams
}

// recordTruncation records a truncated stream (truncated) on the attempt's connection:
// counted (spillway_truncated_streams_total), logged at warn, recorded by the engine
// (RecordTruncation: a synthesised 502 of the model) with its decision line, status being
// the status the stream came with.
func (h *httpContext) recordTruncation(status int) {
	p := h.plugin
	p.readClock()
	p.metrics.truncated.Increment(1)
	proxywasm.LogWarnf("spillway: stream from %s ended without its terminal event%s", h.targetName(), h.cutNote())
	r := p.engine.RecordTruncation(h.d)
	if r.Errors != nil {
		proxywasm.LogWarnf("spillway: record truncation: %v", r.Errors)
	}
	p.metrics.failure(h.d.Target, r.Verdict.Reason)
	h.logFailure(h.d.Target, &failureLog{status: status, reason: string(r.Verdict.Reason), effects: r.Effects},
		nextNone, nil, 0, "")
}

// errorShape is the shape of an error event that ends the stream: the shape its events
// were recognised in; an unrecognised stream of the Anthropic API is Anthropic's, any other
// Chat Completions' (llmapi.AppendStreamError's default).
func (h *httpContext) errorShape(recognised llmapi.StreamShape) llmapi.StreamShape {
	if recognised == llmapi.ShapeUnknown && h.api == policies.APIAnthropic {
		return llmapi.ShapeAnthropic
	}
	return recognised
}

// cutNote completes the truncation's log line: how the client's stream ended.
func (h *httpContext) cutNote() string {
	if h.cutEnded {
		return "; the client got a " + replies.CodeStreamTruncated + " error event"
	}
	return ""
}
