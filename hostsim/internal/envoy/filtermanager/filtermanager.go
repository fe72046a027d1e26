// Package filtermanager is Envoy's HTTP filter manager as it drives a proxy-wasm filter,
// apart from the VM: how it reads the status a callback returns (source/extensions/common/
// wasm/context.cc, the convertFilter*Status helpers, and the filter manager's iteration in
// source/common/http/filter_manager.cc), one direction of a stream and its transitions
// (Direction: pause and continue, buffering, what it holds while stopped, FAIL_OPEN's
// bypass), which call the filter through the Filter interface, the local replies it makes
// itself and the headers of any local reply, and what it records for a downstream reset.
package filtermanager

import (
	"strconv"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// Response code details the filter manager and the Wasm filter set (ResponseCodeDetailValues
// in envoy/stream_info/stream_info.h).
const (
	// DetailsRequestPayloadTooLarge: a buffered request body passed the buffer limit.
	DetailsRequestPayloadTooLarge = "request_payload_too_large"
	// DetailsResponsePayloadTooLarge: a buffered response body passed the buffer limit.
	DetailsResponsePayloadTooLarge = "response_payload_too_large"
	// DetailsWasmFailStream: the VM failed and FAIL_CLOSED answers 503 (Context::failStream).
	DetailsWasmFailStream = "wasm_fail_stream"
	// ResetDownstreamRemoteDisconnect is the details Envoy records for a client that went
	// away.
	ResetDownstreamRemoteDisconnect = "downstream_remote_disconnect"
)

// HeadersVerdict is what the filter manager does after a headers callback.
type HeadersVerdict int

// The headers verdicts.
const (
	HeadersContinue      HeadersVerdict = iota // the headers go on
	HeadersStopIteration                       // true StopIteration: the body still reaches the filter
	HeadersStopAll                             // StopAllIterationAndWatermark: body and trailers are held
)

// Headers reads a headers callback's status: 0 (Continue) and 2 (ContinueAndEndStream,
// which Envoy's converter does not know) continue; anything else stops all iteration, but
// 1 (StopIteration) is a true StopIteration with allow_on_headers_stop_iteration (Envoy
// ≥ 1.35). A local reply from the callback (forceStop) stops all iteration whatever it
// returned.
func Headers(raw uint64, forceStop, allowStopIteration bool) HeadersVerdict {
	switch {
	case (raw == 0 || raw == 2) && !forceStop:
		return HeadersContinue
	case raw == 1 && allowStopIteration && !forceStop:
		return HeadersStopIteration
	default:
		return HeadersStopAll
	}
}

// DataVerdict is what the filter manager does after a body callback.
type DataVerdict int

// The body verdicts.
const (
	DataContinue      DataVerdict = iota // the data (and what was buffered) goes on
	DataStopAndBuffer                    // StopIterationAndBuffer / Watermark: keep accumulating
	DataStopNoBuffer                     // StopIterationNoBuffer: nobody keeps the data
)

// Data reads a body callback's status: 0 continues, 3 and above stop without buffering, 1
// and 2 (and a local reply from the callback) stop and buffer.
func Data(raw uint64, forceStop bool) DataVerdict {
	switch {
	case raw == 0 && !forceStop:
		return DataContinue
	case raw >= 3 && !forceStop:
		return DataStopNoBuffer
	default:
		return DataStopAndBuffer
	}
}

// Trailers reads a trailers callback's status: whether the trailers go on (0 without a
// local reply from the callback).
func Trailers(raw uint64, forceStop bool) bool { return raw == 0 && !forceStop }

// LocalReply is a reply made at the proxy: the plugin's proxy_send_local_response, or one
// of Envoy's own (field names as in proxytest's LocalHttpResponse). GRPCStatus -1 is none.
type LocalReply struct {
	StatusCode       uint32
	StatusCodeDetail string
	Data             []byte
	Headers          [][2]string
	GRPCStatus       int32
}

// ReplyHeaders is the headers of a local reply as Envoy sends them: :status, the reply's
// headers with lower-cased keys, and for a body its content-length and, unless given,
// content-type text/plain.
func ReplyHeaders(lr *LocalReply) [][2]string {
	h := make([][2]string, 0, len(lr.Headers)+3)
	h = append(h, [2]string{":status", strconv.FormatUint(uint64(lr.StatusCode), 10)})
	for _, kv := range lr.Headers {
		h = append(h, [2]string{abi.LowerASCII(kv[0]), kv[1]})
	}
	if len(lr.Data) > 0 {
		h = abi.SetHeader(h, "content-length", strconv.Itoa(len(lr.Data)))
		if _, ok := abi.HeaderValue(h, "content-type"); !ok {
			h = append(h, [2]string{"content-type", "text/plain"})
		}
	}
	return h
}

// FailStream is FAIL_CLOSED's reply for a stream of a failed VM (Context::failStream): 503
// with details wasm_fail_stream.
func FailStream() *LocalReply {
	return &LocalReply{StatusCode: 503, StatusCodeDetail: DetailsWasmFailStream, GRPCStatus: -1}
}

// RequestTooLarge is the reply to a buffered request body past the buffer limit
// (ActiveStreamDecoderFilter::requestDataTooLarge): 413 "Payload Too Large".
func RequestTooLarge() *LocalReply {
	return &LocalReply{StatusCode: 413, StatusCodeDetail: DetailsRequestPayloadTooLarge,
		Data: []byte("Payload Too Large"), GRPCStatus: -1}
}

// ResponseTooLarge is the reply to a buffered response body past the buffer limit
// (ActiveStreamEncoderFilter::responseDataTooLarge): 500 "Internal Server Error".
func ResponseTooLarge() *LocalReply {
	return &LocalReply{StatusCode: 500, StatusCodeDetail: DetailsResponsePayloadTooLarge,
		Data: []byte("Internal Server Error"), GRPCStatus: -1}
}

// DownstreamReset is how the client side ended a stream early: the response flag and code
// details Envoy's connection manager records for it.
type DownstreamReset struct {
	Flags   streaminfo.ResponseFlags
	Details string // "" keeps the details the stream had
}

var (
	// DownstreamDisconnect is a client that closed its connection (HTTP/1.1):
	// ConnectionManagerImpl::resetAllStreams sets DC (DownstreamConnectionTermination) and
	// the details downstream_remote_disconnect before onResetStream, so on_log sees both.
	DownstreamDisconnect = DownstreamReset{streaminfo.FlagDownstreamConnectionTermination, ResetDownstreamRemoteDisconnect}
	// DownstreamStreamReset is a client that reset one stream (HTTP/2 RST_STREAM): flag DR
	// (DownstreamRemoteReset, "Downstream remote codec level reset was received on the
	// stream"). That Envoy keeps the stream's details is inferred, not read in its source.
	DownstreamStreamReset = DownstreamReset{Flags: streaminfo.FlagDownstreamRemoteReset}
)

// DownstreamResetFor maps the details a caller gave a reset to the reset Envoy would
// record: "" and downstream_remote_disconnect are a disconnect (DC); any other string is the
// caller's own details without a flag.
func DownstreamResetFor(details string) DownstreamReset {
	if details == "" || details == ResetDownstreamRemoteDisconnect {
		return DownstreamDisconnect
	}
	return DownstreamReset{Details: details}
}

// ResetLabel is what a reset stream reports as its reset for a downstream reset: its
// details, or downstream_remote_reset for a reset without.
func ResetLabel(r DownstreamReset) string {
	if r.Details != "" {
		return r.Details
	}
	return "downstream_remote_reset"
}
