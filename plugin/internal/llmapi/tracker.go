package llmapi

import "bytes"

// Tracker follows a stream that is already going to the client, line by line, for the two
// things Spillway still needs to know: whether its terminal event arrived ("data: [DONE]",
// "event: message_stop", "event: response.completed" / "response.incomplete") and whether
// an error event arrived after content (a failure Spillway can no longer fail over). Lines
// are matched at their start only: content inside a JSON data line has its newlines escaped,
// so a model that writes "data: [DONE]" in its output cannot end the stream early. It keeps
// only the head of the line in progress, so it costs no allocation whatever the chunking.
type Tracker struct {
	head    [48]byte // the start of the line in progress
	n       int      // bytes of it in head (capped at len(head))
	started bool     // a line is in progress (some bytes after the last '\n')
	// Terminal: the stream's terminal event went by.
	Terminal bool
	// Errored: an error event went by (Anthropic "event: error", an OpenAI {"error":…} data
	// line, Responses response.failed).
	Errored bool
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
			return
		}
		t.line(bytes.TrimSuffix(t.head[:t.n], []byte{'\r'}))
		t.n, t.started = 0, false
		b = b[i+1:]
	}
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
