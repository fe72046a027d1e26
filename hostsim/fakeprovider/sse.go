package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// sseWriter writes server-sent events and flushes each one, noting when it went out.
type sseWriter struct {
	c  *call
	rc *http.ResponseController
}

// event writes one event: "event: name" (omitted when name is "") and "data: <v as JSON>".
func (sw *sseWriter) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("fakeprovider: encode %s: %w", name, err)
	}
	var s strings.Builder
	if name != "" {
		s.WriteString("event: ")
		s.WriteString(name)
		s.WriteByte('\n')
	}
	s.WriteString("data: ")
	s.Write(b)
	s.WriteString("\n\n")
	return sw.raw(s.String())
}

// raw writes text as is and flushes it.
func (sw *sseWriter) raw(text string) error {
	if _, err := sw.c.w.Write([]byte(text)); err != nil {
		return err
	}
	if err := sw.rc.Flush(); err != nil {
		return err
	}
	sw.c.p.sent(sw.c.rec)
	return nil
}

// streamer writes one API's stream events.
type streamer interface {
	// preamble is what comes before the first content (a role chunk, message_start, ...).
	preamble(sw *sseWriter) error
	// delta is one piece of content.
	delta(sw *sseWriter, text string) error
	// finish is the terminal events; text is the whole content.
	finish(sw *sseWriter, text string) error
	// fail is the provider's error event inside a 200 stream.
	fail(sw *sseWriter, f Fault) error
	// heartbeat keeps the connection alive without content.
	heartbeat(sw *sseWriter) error
}

// words splits the reply into the pieces a model would stream: each word with the space
// before it.
func words(text string) []string {
	var out []string
	for i, w := range strings.Split(text, " ") {
		if i > 0 {
			w = " " + w
		}
		out = append(out, w)
	}
	return out
}

// stream answers a "stream": true request: 200 text/event-stream, then the API's events
// paced like a model (Pacing, or the fault's EventDelay), going wrong as c.fault says.
func (c *call) stream(st streamer, text string) {
	f := c.fault
	pace := c.p.currentPacing()
	if f.EventDelay > 0 {
		pace = Pacing{First: f.EventDelay, Between: f.EventDelay}
	}
	c.addFaultHeaders(f)
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	sw := &sseWriter{c: c, rc: http.NewResponseController(c.w)}
	if sw.rc.Flush() != nil {
		return
	}
	c.p.sent(c.rec)
	deadline := time.Now().Add(MaxStreamDuration)

	if f.Stream == StreamHeartbeatOnly {
		for time.Now().Before(deadline) && c.wait(pace.Between) {
			if st.heartbeat(sw) != nil {
				return
			}
		}
		return
	}
	if f.Stream == StreamError && f.AfterEvents == 0 {
		if c.waitFor(f.Pause) && c.wait(pace.First) {
			_ = st.fail(sw, f)
		}
		return
	}
	if st.preamble(sw) != nil {
		return
	}
	pieces := words(text)
	for i, piece := range pieces {
		if i == f.AfterEvents && !c.waitFor(f.Pause) {
			return
		}
		if f.Stream != StreamOK && i == f.AfterEvents {
			c.streamFault(st, sw, f)
			return
		}
		gap := pace.Between
		if i == 0 {
			gap = pace.First
		}
		if !c.wait(gap) || st.delta(sw, piece) != nil {
			return
		}
	}
	if f.AfterEvents >= len(pieces) && !c.waitFor(f.Pause) {
		return
	}
	if f.Stream != StreamOK {
		c.streamFault(st, sw, f)
		return
	}
	_ = st.finish(sw, text)
}

// streamFault is how the stream ends instead of its terminal events.
func (c *call) streamFault(st streamer, sw *sseWriter, f Fault) {
	switch f.Stream {
	case StreamError:
		_ = st.fail(sw, f)
	case StreamReset:
		resetConnection(c.w)
	case StreamStall:
		c.hang()
	case StreamTruncate:
		// A clean end of the HTTP body without the API's terminal events.
	}
}

// errorMessage is the fault's message, or the provider's usual one for a failure mid-stream.
func errorMessage(f Fault, def string) string {
	if f.Message != "" {
		return f.Message
	}
	return def
}

// chatStreamer is Chat Completions: chat.completion.chunk objects, then data: [DONE].
type chatStreamer struct {
	id                 string
	created            int64
	model              string
	includeUsage       bool
	prompt, completion int
}

func (s *chatStreamer) chunk(delta map[string]any, finish any) map[string]any {
	c := map[string]any{
		"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
		"system_fingerprint": "fp_hostsim_fake",
		"choices":            []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
	}
	if s.includeUsage {
		c["usage"] = nil
	}
	return c
}

func (s *chatStreamer) preamble(sw *sseWriter) error {
	return sw.event("", s.chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
}

func (s *chatStreamer) delta(sw *sseWriter, text string) error {
	return sw.event("", s.chunk(map[string]any{"content": text}, nil))
}

func (s *chatStreamer) finish(sw *sseWriter, _ string) error {
	if err := sw.event("", s.chunk(map[string]any{}, "stop")); err != nil {
		return err
	}
	if s.includeUsage {
		u := map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
			"system_fingerprint": "fp_hostsim_fake", "choices": []any{}, "usage": openAIUsage(s.prompt, s.completion)}
		if err := sw.event("", u); err != nil {
			return err
		}
	}
	return sw.raw("data: [DONE]\n\n")
}

func (s *chatStreamer) fail(sw *sseWriter, f Fault) error { return openAIStreamError(sw, f) }

func (s *chatStreamer) heartbeat(sw *sseWriter) error { return sw.raw(": keep-alive\n\n") }

// openAIStreamError is the error object OpenAI sends inside a stream (the SDKs stop on a
// data event with an "error" key).
func openAIStreamError(sw *sseWriter, f Fault) error {
	typ, code := f.ErrorType, any(nil)
	if typ == "" {
		typ = "server_error"
	}
	if f.ErrorCode != "" {
		code = f.ErrorCode
	}
	return sw.event("", map[string]any{"error": map[string]any{
		"message": errorMessage(f, "The server had an error while processing your request. Sorry about that!"),
		"type":    typ, "param": nil, "code": code}})
}

// completionStreamer is the legacy Completions API: text_completion chunks, then [DONE].
type completionStreamer struct {
	id      string
	created int64
	model   string
}

func (s *completionStreamer) chunk(text string, finish any) map[string]any {
	return map[string]any{"id": s.id, "object": "text_completion", "created": s.created, "model": s.model,
		"choices": []any{map[string]any{"text": text, "index": 0, "logprobs": nil, "finish_reason": finish}}}
}

func (s *completionStreamer) preamble(*sseWriter) error { return nil }

func (s *completionStreamer) delta(sw *sseWriter, text string) error {
	return sw.event("", s.chunk(text, nil))
}

func (s *completionStreamer) finish(sw *sseWriter, _ string) error {
	if err := sw.event("", s.chunk("", "stop")); err != nil {
		return err
	}
	return sw.raw("data: [DONE]\n\n")
}

func (s *completionStreamer) fail(sw *sseWriter, f Fault) error { return openAIStreamError(sw, f) }

func (s *completionStreamer) heartbeat(sw *sseWriter) error { return sw.raw(": keep-alive\n\n") }

// responsesStreamer is the Responses API: typed events (event: <type>) with sequence
// numbers, from response.created to response.completed or response.failed.
type responsesStreamer struct {
	resp *responseObject
	seq  int
}

func (s *responsesStreamer) send(sw *sseWriter, typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	return sw.event(typ, fields)
}

func (s *responsesStreamer) part(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}

func (s *responsesStreamer) preamble(sw *sseWriter) error {
	r := s.resp
	for _, typ := range []string{"response.created", "response.in_progress"} {
		if err := s.send(sw, typ, map[string]any{"response": r.object("in_progress", "", nil)}); err != nil {
			return err
		}
	}
	if err := s.send(sw, "response.output_item.added", map[string]any{"output_index": 0,
		"item": r.message("in_progress", "", false)}); err != nil {
		return err
	}
	return s.send(sw, "response.content_part.added", map[string]any{"item_id": r.msgID, "output_index": 0,
		"content_index": 0, "part": s.part("")})
}

func (s *responsesStreamer) delta(sw *sseWriter, text string) error {
	return s.send(sw, "response.output_text.delta", map[string]any{"item_id": s.resp.msgID, "output_index": 0,
		"content_index": 0, "delta": text, "logprobs": []any{}})
}

func (s *responsesStreamer) finish(sw *sseWriter, text string) error {
	r := s.resp
	steps := []struct {
		typ    string
		fields map[string]any
	}{
		{"response.output_text.done", map[string]any{"item_id": r.msgID, "output_index": 0, "content_index": 0,
			"text": text, "logprobs": []any{}}},
		{"response.content_part.done", map[string]any{"item_id": r.msgID, "output_index": 0, "content_index": 0,
			"part": s.part(text)}},
		{"response.output_item.done", map[string]any{"output_index": 0, "item": r.message("completed", text, true)}},
		{"response.completed", map[string]any{"response": r.object("completed", text, nil)}},
	}
	for _, st := range steps {
		if err := s.send(sw, st.typ, st.fields); err != nil {
			return err
		}
	}
	return nil
}

func (s *responsesStreamer) fail(sw *sseWriter, f Fault) error {
	code := f.ErrorCode
	if code == "" {
		code = "server_error"
	}
	errObj := map[string]any{"code": code,
		"message": errorMessage(f, "The server had an error while processing your request. Sorry about that!")}
	return s.send(sw, "response.failed", map[string]any{"response": s.resp.object("failed", "", errObj)})
}

func (s *responsesStreamer) heartbeat(sw *sseWriter) error { return sw.raw(": keep-alive\n\n") }

// anthropicStreamer is Anthropic Messages: message_start, content_block_start, ping,
// content_block_delta..., content_block_stop, message_delta, message_stop; errors as
// "event: error".
type anthropicStreamer struct {
	id, model string
	in, out   int
}

func (s *anthropicStreamer) preamble(sw *sseWriter) error {
	if err := sw.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.id, "type": "message", "role": "assistant", "model": s.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": s.in, "output_tokens": 1}}}); err != nil {
		return err
	}
	if err := sw.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}}); err != nil {
		return err
	}
	return s.heartbeat(sw)
}

func (s *anthropicStreamer) delta(sw *sseWriter, text string) error {
	return sw.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "text_delta", "text": text}})
}

func (s *anthropicStreamer) finish(sw *sseWriter, _ string) error {
	if err := sw.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}); err != nil {
		return err
	}
	if err := sw.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": s.out}}); err != nil {
		return err
	}
	return sw.event("message_stop", map[string]any{"type": "message_stop"})
}

func (s *anthropicStreamer) fail(sw *sseWriter, f Fault) error {
	typ := f.ErrorType
	if typ == "" {
		typ = "overloaded_error"
	}
	return sw.event("error", map[string]any{"type": "error",
		"error": map[string]any{"type": typ, "message": errorMessage(f, "Overloaded")}})
}

func (s *anthropicStreamer) heartbeat(sw *sseWriter) error {
	return sw.event("ping", map[string]any{"type": "ping"})
}
