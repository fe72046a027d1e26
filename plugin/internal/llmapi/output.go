package llmapi

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/buger/jsonparser"
)

// What a streamed response's events say about the model's output, for the stream watchdogs
// (guide §6, the throughput watchdog; guide §2, the content stall): how many bytes of
// assistant text an event carries — the decoded UTF-8 length of its text deltas, a
// conservative proxy for output — and whether it belongs to a tool call or a reasoning
// phase, during which the throughput watchdog suspends its judgement. Heartbeats (comments,
// pings), usage-only and empty events and metadata (message_start, response.created, a
// role-only delta, …) carry no output.
//
//   - Chat Completions and Completions: choices[].delta.content and .refusal (and
//     choices[].text) are text; .reasoning_content, .reasoning and .reasoning_details are
//     reasoning; .tool_calls and .function_call are a tool call; a finish_reason ends the
//     choice.
//   - Responses: response.output_text.delta and response.refusal.delta are text; events
//     named after reasoning (response.reasoning_text.delta, response.reasoning_summary_*)
//     and reasoning items are reasoning; function, web-search, file-search, code-interpreter,
//     MCP, image-generation and custom tool calls (their items and *_call* events) are a
//     tool call; response.output_item.done ends an item.
//   - Anthropic Messages: text_delta and a text block's initial text are text;
//     thinking_delta and signature_delta (even with empty text) and thinking or
//     redacted_thinking blocks are reasoning; *tool_use and *tool_result blocks and
//     input_json_delta are a tool call; content_block_stop and message_delta end a block.

// Output is what one event says about the model's output.
type Output struct {
	// Text is the decoded UTF-8 length of the assistant text the event carries.
	Text int
	// ToolCall: the event is part of a tool call (its start, arguments, a server tool's work).
	ToolCall bool
	// Reasoning: the event shows the model reasoning (a thinking or reasoning frame, even an
	// empty one): it is working, but this is not output the client can show.
	Reasoning bool
	// Done: a content block, an output item or a choice finished.
	Done bool
	// End: the response is over — its terminal event or an error event.
	End bool
}

// Progress reports whether the event is model output of any kind: text, a tool call or a
// reasoning frame (the content stall's budget restarts on each).
func (o Output) Progress() bool { return o.Text > 0 || o.ToolCall || o.Reasoning }

// StreamShape is which API's events a stream carries.
type StreamShape uint8

// Stream shapes, as OutputScanner recognises them from the events.
const (
	ShapeUnknown   StreamShape = iota // no event recognised yet
	ShapeChat                         // OpenAI Chat Completions or Completions chunks
	ShapeResponses                    // OpenAI Responses events
	ShapeAnthropic                    // Anthropic Messages events
)

// MaxEventBytes bounds an event OutputScanner reads: a longer event (its lines without the
// blank line that ends it) is not parsed and counts as that many bytes of text, so it can
// never make the watchdog end a stream.
const MaxEventBytes = 64 << 10

// OutputScanner reads a stream's events chunk by chunk, as they reach the filter, and says
// what each complete event carries (Output). An event split over chunks is kept (up to
// MaxEventBytes) until its end arrives; lines end with LF or CRLF, an event with a blank
// line, as in the SSE format (WHATWG HTML, "Server-sent events", §9.2.6). Events are
// reported whatever the chunking: the same bytes in any chunks give the same outputs. It
// allocates only to grow its carry buffer, which Reset keeps for the next stream.
type OutputScanner struct {
	chunk []byte
	pos   int // next byte of chunk to read
	// start is where the event in progress began in chunk; -1 when it began in an earlier
	// chunk (its start is in carry).
	start int
	// cut is the length of the prefix of chunk that ends at an event boundary, the event in
	// progress (if any) having begun after it; -1 when the event in progress began in an
	// earlier chunk.
	cut   int
	carry []byte // the start of an event that began in an earlier chunk (at most MaxEventBytes)
	size  int    // bytes of the event in progress so far, the current line's included
	line  int    // bytes of the current line so far
	cr    bool   // the current line so far is a lone '\r'
	join  []byte // the data of an event with several data lines, joined
	shape StreamShape
}

// maxKeptCarry bounds the carry buffer Reset keeps for the next stream.
const maxKeptCarry = 16 << 10

// Reset forgets the stream, keeping the buffers (trimmed) for the next one.
func (s *OutputScanner) Reset() {
	carry, join := s.carry[:0], s.join[:0]
	if cap(carry) > maxKeptCarry {
		carry = nil
	}
	if cap(join) > maxKeptCarry {
		join = nil
	}
	*s = OutputScanner{carry: carry, join: join}
}

// Feed hands the scanner the stream's next bytes; read their events with Next until it
// reports no more. chunk must stay unchanged until then.
func (s *OutputScanner) Feed(chunk []byte) {
	s.chunk, s.pos = chunk, 0
	if s.size == 0 {
		s.start, s.cut = 0, 0
	} else {
		s.start, s.cut = -1, -1
	}
}

// Next returns the output of the next event that completes in the chunk being read; ok is
// false when the chunk holds no more complete events.
func (s *OutputScanner) Next() (out Output, ok bool) {
	c := s.chunk
	for s.pos < len(c) {
		rest := c[s.pos:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 { // a line that goes on in the next chunk
			if s.line == 0 {
				s.cr = len(rest) == 1 && rest[0] == '\r'
			} else {
				s.cr = false
			}
			s.line += len(rest)
			s.size += len(rest)
			s.pos = len(c)
			break
		}
		end := s.pos + i // the line's '\n'
		blank := s.line == 0 && (i == 0 || i == 1 && rest[0] == '\r') || s.line == 1 && s.cr && i == 0
		if !blank {
			s.size += i + 1
			s.line, s.cr = 0, false
			s.pos = end + 1
			continue
		}
		// A blank line: the event in progress, if any, is complete.
		evSize := s.size - s.line // without the blank line's '\r'
		var raw []byte
		if evSize > 0 && evSize <= MaxEventBytes {
			if s.start >= 0 {
				raw = c[s.start:end]
			} else {
				s.carry = append(s.carry, c[:end]...)
				raw = s.carry
			}
		}
		s.pos = end + 1
		s.start, s.cut = s.pos, s.pos
		s.size, s.line, s.cr = 0, 0, false
		s.carry = s.carry[:0]
		switch {
		case evSize <= 0:
			continue
		case evSize > MaxEventBytes:
			return Output{Text: evSize}, true
		}
		return s.event(raw), true
	}
	// The chunk is read: keep what it holds of an event that goes on in the next one.
	if s.size > 0 {
		if s.start >= 0 {
			s.keep(c[s.start:])
		} else {
			s.keep(c)
		}
	}
	s.start = -1
	return Output{}, false
}

// keep adds b to the carried start of the event in progress, up to MaxEventBytes (a longer
// event is not parsed).
func (s *OutputScanner) keep(b []byte) {
	if room := MaxEventBytes - len(s.carry); room > 0 {
		s.carry = append(s.carry, b[:min(len(b), room)]...)
	}
}

// Cut is the length of the prefix of the chunk last read (after Next reported no more
// events) that ends at an event boundary, with nothing of the event in progress before it:
// bytes can be inserted there without splitting an event. It is -1 when the event in
// progress began in an earlier chunk, whose bytes have gone on already.
func (s *OutputScanner) Cut() int { return s.cut }

// Shape is the API whose events the stream carries, as far as they were recognised.
func (s *OutputScanner) Shape() StreamShape { return s.shape }

// event parses one complete event (its lines, without the blank line) and judges it.
func (s *OutputScanner) event(raw []byte) Output {
	var name, data []byte
	lines := 0
	for len(raw) > 0 {
		var field, value []byte
		field, value, raw = nextField(raw) // a comment (a heartbeat) has no field
		switch string(field) {
		case "event":
			name = value
		case "data":
			switch lines {
			case 0:
				data = value
			case 1:
				s.join = append(append(append(s.join[:0], data...), '\n'), value...)
				data = s.join
			default:
				s.join = append(append(s.join, '\n'), value...)
				data = s.join
			}
			lines++
		}
	}
	return s.judge(name, data)
}

// judge says what an event's data carries.
func (s *OutputScanner) judge(name, data []byte) Output {
	switch string(name) {
	case "ping", "keepalive", "keep-alive", "heartbeat":
		return Output{}
	case "error":
		return Output{End: true}
	}
	d := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(d) == 0:
		return Output{}
	case string(data) == "[DONE]":
		s.recognise(ShapeChat)
		return Output{End: true}
	case d[0] != '{':
		// Not a JSON object: no API Spillway knows sends one, so it is not Spillway's to
		// judge. It counts as text, so it can never make the watchdog end the stream.
		return Output{Text: len(data)}
	}
	var f fields
	if err := jsonparser.ObjectEach(d, f.member); err != nil {
		return Output{Text: len(data)} // not JSON after all: as above
	}
	if f.typ != nil {
		t := f.typ
		switch {
		case string(t) == "error":
			return Output{End: true}
		case bytes.HasPrefix(t, []byte("response.")):
			s.recognise(ShapeResponses)
			return responsesEvent(t, &f)
		case isAnthropicType(t):
			s.recognise(ShapeAnthropic)
			return anthropicEvent(t, &f)
		}
	}
	switch {
	case f.err:
		return Output{End: true}
	case f.choices != nil:
		s.recognise(ShapeChat)
		return chatChunk(f.choices)
	}
	return Output{} // usage-only, or a shape Spillway does not know: no output
}

func (s *OutputScanner) recognise(shape StreamShape) {
	if s.shape == ShapeUnknown {
		s.shape = shape
	}
}

// fields are the top-level members of an event's data that say what it carries.
type fields struct {
	typ       []byte // "type" (a string)
	choices   []byte // "choices" (an array)
	err       bool   // a non-null "error"
	delta     []byte // "delta"
	deltaType jsonparser.ValueType
	block     []byte // "content_block" (an object)
	item      []byte // "item" (an object)
}

func (f *fields) member(key, value []byte, vt jsonparser.ValueType, _ int) error {
	switch string(key) {
	case "type":
		if vt == jsonparser.String {
			f.typ = value
		}
	case "choices":
		if vt == jsonparser.Array {
			f.choices = value
		}
	case "error":
		f.err = vt != jsonparser.Null
	case "delta":
		f.delta, f.deltaType = value, vt
	case "content_block":
		if vt == jsonparser.Object {
			f.block = value
		}
	case "item":
		if vt == jsonparser.Object {
			f.item = value
		}
	}
	return nil
}

func isAnthropicType(t []byte) bool {
	switch string(t) {
	case "message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta",
		"content_block_stop", "ping":
		return true
	}
	return false
}

// anthropicEvent judges an Anthropic Messages event of type t.
func anthropicEvent(t []byte, f *fields) Output {
	switch string(t) {
	case "message_stop":
		return Output{End: true}
	case "content_block_stop", "message_delta":
		return Output{Done: true}
	case "content_block_start":
		var b typedText
		if f.block != nil {
			_ = jsonparser.ObjectEach(f.block, b.member)
		}
		switch typ := string(b.typ); {
		case typ == "text":
			return Output{Text: textLen(b.text)}
		case typ == "thinking" || typ == "redacted_thinking":
			return Output{Reasoning: true}
		case strings.HasSuffix(typ, "tool_use") || strings.HasSuffix(typ, "tool_result"):
			return Output{ToolCall: true}
		}
	case "content_block_delta":
		var b typedText
		if f.deltaType == jsonparser.Object {
			_ = jsonparser.ObjectEach(f.delta, b.member)
		}
		switch string(b.typ) {
		case "text_delta":
			return Output{Text: textLen(b.text)}
		case "thinking_delta", "signature_delta":
			return Output{Reasoning: true}
		case "input_json_delta":
			return Output{ToolCall: true}
		}
	}
	return Output{} // message_start, ping, citations and what Spillway does not know
}

// typedText reads the type and text of a nested object (an Anthropic content block or delta,
// a Responses item).
type typedText struct {
	typ  []byte
	text []byte
}

func (m *typedText) member(key, value []byte, vt jsonparser.ValueType, _ int) error {
	if vt != jsonparser.String {
		return nil
	}
	switch string(key) {
	case "type":
		m.typ = value
	case "text":
		m.text = value
	}
	return nil
}

// responsesEvent judges an OpenAI Responses event of type t.
func responsesEvent(t []byte, f *fields) Output {
	switch string(t) {
	case "response.output_text.delta", "response.refusal.delta":
		if f.deltaType == jsonparser.String {
			return Output{Text: textLen(f.delta)}
		}
		return Output{}
	case "response.completed", "response.incomplete", "response.failed":
		return Output{End: true}
	case "response.output_item.added", "response.output_item.done":
		var it typedText
		if f.item != nil {
			_ = jsonparser.ObjectEach(f.item, it.member)
		}
		done := string(t) == "response.output_item.done"
		switch string(it.typ) {
		case "", "message":
			return Output{Done: done}
		case "reasoning":
			return Output{Reasoning: true, Done: done}
		}
		return Output{ToolCall: true, Done: done} // function_call, web_search_call, mcp_call, …
	}
	switch {
	case bytes.Contains(t, []byte("reasoning")):
		return Output{Reasoning: true}
	case bytes.Contains(t, []byte("_call")):
		return Output{ToolCall: true}
	}
	return Output{} // created, in_progress, content parts, annotations, …: metadata
}

// chatChunk judges a Chat Completions (or Completions) chunk's choices.
func chatChunk(choices []byte) Output {
	var out Output
	_, _ = jsonparser.ArrayEach(choices, func(choice []byte, vt jsonparser.ValueType, _ int, _ error) {
		if vt == jsonparser.Object {
			_ = jsonparser.ObjectEach(choice, (*chatOutput)(&out).choiceMember)
		}
	})
	return out
}

// chatOutput reads a chat choice into an Output.
type chatOutput Output

func (o *chatOutput) choiceMember(key, value []byte, vt jsonparser.ValueType, _ int) error {
	switch string(key) {
	case "delta":
		if vt == jsonparser.Object {
			_ = jsonparser.ObjectEach(value, o.deltaMember)
		}
	case "text": // Completions
		if vt == jsonparser.String {
			o.Text += textLen(value)
		}
	case "finish_reason":
		if vt == jsonparser.String {
			o.Done = true
		}
	}
	return nil
}

func (o *chatOutput) deltaMember(key, value []byte, vt jsonparser.ValueType, _ int) error {
	switch string(key) {
	case "content", "refusal":
		if vt == jsonparser.String {
			o.Text += textLen(value)
		}
	case "reasoning_content", "reasoning":
		if vt == jsonparser.String && len(value) > 0 {
			o.Reasoning = true
		}
	case "reasoning_details":
		if vt == jsonparser.Array && len(bytes.TrimSpace(value)) > 2 {
			o.Reasoning = true
		}
	case "tool_calls":
		if vt == jsonparser.Array && len(bytes.TrimSpace(value)) > 2 {
			o.ToolCall = true
		}
	case "function_call":
		if vt == jsonparser.Object {
			o.ToolCall = true
		}
	}
	return nil
}

// textLen is the UTF-8 length of a JSON string's value, raw being its text between the
// quotes with the escapes as written: an escape counts as the bytes it stands for (a
// surrogate pair as 4, a lone surrogate as the 3 of U+FFFD, as encoding/json decodes it);
// other bytes count as they are.
func textLen(raw []byte) int {
	n := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			n++
			continue
		}
		i++
		if i >= len(raw) {
			break
		}
		if raw[i] != 'u' {
			n++ // \" \\ \/ \b \f \n \r \t
			continue
		}
		r, ok := hex4(raw[i+1:])
		if !ok {
			n++ // malformed: count the 'u'
			continue
		}
		i += 4
		if utf16.IsSurrogate(r) {
			if r < 0xdc00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, ok := hex4(raw[i+3:]); ok && lo >= 0xdc00 && lo < 0xe000 {
					n += 4
					i += 6
					continue
				}
			}
			n += utf8.RuneLen(utf8.RuneError)
			continue
		}
		n += utf8.RuneLen(r)
	}
	return n
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
