package llmapi

import "bytes"

// Tracker follows a stream that is already going to the client, line by line, for what
// Spillway still needs to know: whether its terminal event arrived ("data: [DONE]",
// "event: message_stop", "event: response.completed" / "response.incomplete"), whether an
// error event arrived after content (a failure Spillway can no longer fail over), which
// API's events it carries, and where its last event ends (Boundary), so that a stream that
// ends without either can be ended with an error event. Lines are matched at their start
// only: content inside a JSON data line has its newlines escaped, so a model that writes
// "data: [DONE]" in its output cannot end the stream early. Lines end with LF (a CR before
// it is dropped), an event with a blank line, as the SDKs' decoders read them (openai-go's
// ssestream: bufio.ScanLines). It keeps only the head of the line in progress, so it costs
// no allocation whatever the chunking.
type Tracker struct {
	head    [48]byte // the start of the line in progress
	n       int      // bytes of it in head (capped at len(head))
	started bool     // a line is in progress (some bytes after the last '\n')
	pending bool     // a complete line of an event that no blank line has ended yet
	named   bool     // the event in progress has an "event:" line
	open    int      // bytes since the last blank line (or the start): the event in progress
	// Terminal: the stream's terminal event went by.
	Terminal bool
	// Errored: an error event went by (Anthropic "event: error", an OpenAI {"error":…} data
	// line, Responses response.failed).
	Errored bool
	// Shape is the API the stream's events are in, from the first line that tells (an
	// "event:" name, or a data line's start); ShapeUnknown until then.
	Shape StreamShape
}

// Feed takes the next bytes of the stream.
func (t *Tracker) Feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		if t.n < len(t.head) {
			t.n += copy(t.head[t.n:], part)
		}
		t.started = true
		if i < 0 {
			t.open += len(b)
			return
		}
		t.open += i + 1
		l := bytes.TrimSuffix(t.head[:t.n], []byte{'\r'})
		if len(l) == 0 { // a blank line: the event (if any) ends here
			t.pending, t.named, t.open = false, false, 0
		} else {
			t.pending = true
			t.line(l)
		}
		t.n, t.started = 0, false
		b = b[i+1:]
	}
}

// Boundary says where an event can be added after the bytes fed so far without joining the
// stream's last event, last being the length of the chunk fed last that is still the
// filter's to edit: keep is how much of that chunk to keep, sep what must come before the
// added event. Call it before End.
//   - At an event boundary (or before anything was fed): the whole chunk, nothing first.
//   - After a complete line of an event no blank line ended (a provider that left out the
//     last one): the whole chunk, "\n", which ends that event as it is.
//   - Inside a line of an event begun in this chunk: the chunk up to that event's start,
//     nothing first: the partial event is dropped, and none of it has reached the client.
//   - Inside a line of an event begun in an earlier chunk (its start has gone on): the whole
//     chunk, "\n\n", which ends that event as it is (a client may find it malformed).
func (t *Tracker) Boundary(last int) (keep int, sep string) {
	switch {
	case !t.started && !t.pending:
		return last, ""
	case !t.started:
		return last, "\n"
	case t.open <= last:
		return last - t.open, ""
	}
	return last, "\n\n"
}

// End is the end of the stream: a last line without its newline still counts.
func (t *Tracker) End() {
	if t.started {
		t.line(bytes.TrimSuffix(t.head[:t.n], []byte{'\r'}))
		t.n, t.started = 0, false
	}
}

var (
	terminalLines = [...]string{"data: [DONE]", "data:[DONE]", "event: message_stop", "event:message_stop",
		"event: response.completed", "event:response.completed", "event: response.incomplete", "event:response.incomplete"}
	terminalPrefixes = [...]string{`data: {"type":"message_stop"`, `data: {"type":"response.completed"`,
		`data: {"type":"response.incomplete"`}
	errorLines    = [...]string{"event: error", "event:error", "event: response.failed", "event:response.failed"}
	errorPrefixes = [...]string{`data: {"error"`, `data:{"error"`, `data: {"type":"error"`, `data: {"type":"response.failed"`}
)

func (t *Tracker) line(l []byte) {
	if t.Shape == ShapeUnknown {
		t.recognise(l)
	}
	for _, m := range terminalLines {
		if string(l) == m {
			t.Terminal = true
			return
		}
	}
	for _, m := range terminalPrefixes {
		if bytes.HasPrefix(l, []byte(m)) {
			t.Terminal = true
			return
		}
	}
	for _, m := range errorLines {
		if string(l) == m {
			t.Errored = true
			return
		}
	}
	for _, m := range errorPrefixes {
		if bytes.HasPrefix(l, []byte(m)) {
			t.Errored = true
			return
		}
	}
}

// recognise sets the shape from a line's start, if it tells: an "event:" name of the
// Responses or Messages API, or a data line's JSON start — Responses and Messages events
// lead with their "type" (as both APIs' references show them), Chat Completions chunks with
// anything else ("id" in OpenAI's; [DONE] is Chat's). The data of a named event of another
// name (Anthropic's ping, an error) does not tell: Chat Completions never names its events.
func (t *Tracker) recognise(l []byte) {
	if v, ok := bytes.CutPrefix(l, []byte("event:")); ok {
		t.named = true
		t.Shape = typeShape(bytes.TrimPrefix(v, []byte(" ")))
		return
	}
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	v = bytes.TrimPrefix(v, []byte(" "))
	if typ, ok := bytes.CutPrefix(v, []byte(`{"type":`)); ok {
		typ = bytes.TrimPrefix(typ, []byte(" "))
		if len(typ) > 0 && typ[0] == '"' {
			t.Shape = typeShape(typ[1:])
		}
		return
	}
	if !t.named && (len(v) > 0 && v[0] == '{' || string(v) == "[DONE]") {
		t.Shape = ShapeChat
	}
}

// typeShape is the API whose event type (or name) starts t: ShapeUnknown for another.
func typeShape(t []byte) StreamShape {
	switch {
	case bytes.HasPrefix(t, []byte("response.")):
		return ShapeResponses
	case bytes.HasPrefix(t, []byte("message_")), bytes.HasPrefix(t, []byte("content_block_")):
		return ShapeAnthropic
	}
	return ShapeUnknown
}
