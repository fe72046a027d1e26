package llmapi

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/plugin/internal/jsonscan"
)

// How the LLM APIs stream (text/event-stream): events separated by a blank line, each with
// optional "event:" and one or more "data:" lines; ":" starts a comment.
//
//   - OpenAI Chat Completions and Completions: unnamed events whose data is a
//     chat.completion.chunk (choices[].delta) or text_completion (choices[].text); the
//     stream ends with "data: [DONE]"; an error is a data object {"error":{...}}.
//   - OpenAI Responses: events named after their data's "type" (response.created, …,
//     response.output_text.delta, …); the stream ends with response.completed or
//     response.incomplete; it fails with response.failed (response.error) or an "error"
//     event.
//   - Anthropic Messages: message_start, content_block_start/delta/stop, message_delta,
//     message_stop (the end), ping; an error is "event: error" with
//     {"type":"error","error":{"type":"overloaded_error",...}}.

// Verdict is what the first events of a 200 stream say about the attempt.
type Verdict uint8

// Verdicts of FirstEvent.
const (
	// NeedMore: no event so far carries content or an error (only a role, pings,
	// comments, message_start, …); hold on.
	NeedMore Verdict = iota
	// Content: an event carries model output, or the stream ended normally: the attempt
	// succeeded as far as the client can tell, and the stream may go on unheld.
	Content
	// Failed: the first decisive event is an error: a failed attempt like an HTTP error.
	Failed
	// Empty: the stream ended without content, error or terminal event.
	Empty
)

// FirstEvent is the decision on a held stream.
type FirstEvent struct {
	Verdict Verdict
	// Status is the HTTP status the error event stands for (Failed only), e.g. 429 for a
	// rate_limit_error, 529 for Anthropic's overloaded_error.
	Status int
	// Error is the error object's JSON (Failed only): the value of "error" (OpenAI chunk,
	// Anthropic), of response.error (Responses response.failed), or the event's data when
	// it has no nested error object. It aliases the scanned bytes.
	Error []byte
}

// ScanFirst reads the complete events at the start of a held stream body (everything
// buffered so far) and decides; eos says the stream has ended, so a last event without its
// blank line counts too.
func ScanFirst(body []byte, eos bool) FirstEvent {
	rest := body
	for len(rest) > 0 {
		ev, next, complete := cutEvent(rest)
		if !complete && !eos {
			break
		}
		rest = next
		if fe, decided := judge(ev); decided {
			return fe
		}
		if !complete {
			break
		}
	}
	if eos {
		return FirstEvent{Verdict: Empty}
	}
	return FirstEvent{Verdict: NeedMore}
}

// cutEvent splits the first event off b (through its blank line). complete is false when
// no blank line ends it yet; ev is then the whole of b.
func cutEvent(b []byte) (ev, rest []byte, complete bool) {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return b, nil, false
		}
		end := i + j // the '\n' ending a line
		// A blank line: "\n\n" or "\n\r\n" (CRLF streams).
		k := end + 1
		if k < len(b) && b[k] == '\r' {
			k++
		}
		if k < len(b) && b[k] == '\n' {
			return b[:end], b[k+1:], true
		}
		if k >= len(b) {
			return b, nil, false
		}
		i = end + 1
	}
	return b, nil, false
}

// event is one parsed event: its name and its data lines joined with '\n' (or, for the
// usual single data line, that line itself without a copy).
type event struct {
	name []byte
	data []byte
}

// nextField cuts the first line off an event's raw lines and splits it as the SSE spec
// does: the field before the first colon, the value after it without one leading space (a
// line without a colon is a field with an empty value). A comment (a line starting with a
// colon, a heartbeat) has the empty field, as has an empty line. rest is what follows the
// line.
func nextField(raw []byte) (field, value, rest []byte) {
	line := raw
	if i := bytes.IndexByte(raw, '\n'); i >= 0 {
		line, rest = raw[:i], raw[i+1:]
	}
	line = bytes.TrimSuffix(line, []byte{'\r'})
	field = line
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	return field, value, rest
}

func parseEvent(raw []byte) event {
	var ev event
	multi := false
	for len(raw) > 0 {
		var field, value []byte
		field, value, raw = nextField(raw)
		switch string(field) {
		case "event":
			ev.name = value
		case "data":
			switch {
			case ev.data == nil && !multi:
				ev.data = value
				multi = true
			default: // several data lines: the payload is their join (rare; copies)
				joined := make([]byte, 0, len(ev.data)+1+len(value))
				joined = append(append(append(joined, ev.data...), '\n'), value...)
				ev.data = joined
			}
		}
	}
	return ev
}

// Types of events that say nothing about the attempt yet: held past.
var preludeTypes = [...]string{
	"message_start", "ping", // Anthropic
	"response.created", "response.in_progress", "response.queued", // Responses
	"response.output_item.added", "response.content_part.added",
}

func isPrelude(t string) bool {
	for _, p := range preludeTypes {
		if t == p {
			return true
		}
	}
	return false
}

// judge decides on one event; decided is false for an event that says nothing yet.
func judge(raw []byte) (FirstEvent, bool) {
	ev := parseEvent(raw)
	if len(ev.data) == 0 {
		return FirstEvent{}, false // comment-only or empty event
	}
	if string(ev.data) == "[DONE]" {
		return FirstEvent{Verdict: Content}, true
	}
	if string(ev.name) == "error" {
		return failed(ev.data), true
	}
	// Not JSON, or nested past jsonscan.MaxDepth: not ours to judge; let it through. The
	// check is iterative (gjson.Valid recurses once per level: a deep event could overflow
	// the stack); gjson's Get and ForEach below read iteratively, recursing only along their
	// fixed paths.
	if jsonscan.Valid(ev.data) != nil {
		return FirstEvent{Verdict: Content}, true
	}
	root := gjson.Parse(unsafeString(ev.data))
	switch t := root.Get("type"); {
	case t.Type == gjson.String && (t.Str == "error" || t.Str == "response.failed"):
		return failed(ev.data), true
	case t.Type == gjson.String && t.Str == "content_block_start":
		// A text or thinking block opening empty says nothing; a tool_use block is output.
		if b := root.Get("content_block"); b.Get("type").Str == "text" && b.Get("text").Str == "" ||
			b.Get("type").Str == "thinking" && b.Get("thinking").Str == "" {
			return FirstEvent{}, false
		}
		return FirstEvent{Verdict: Content}, true
	case t.Type == gjson.String && isPrelude(t.Str):
		return FirstEvent{}, false
	case t.Type == gjson.String:
		return FirstEvent{Verdict: Content}, true
	}
	if root.Get("error").Exists() {
		return failed(ev.data), true
	}
	choices := root.Get("choices")
	if !choices.Exists() {
		return FirstEvent{Verdict: Content}, true // some other shape: do not hold it
	}
	output := false
	choices.ForEach(func(_, c gjson.Result) bool {
		if c.Get("finish_reason").Type != gjson.Null && c.Get("finish_reason").Exists() {
			output = true
		} else if t := c.Get("text"); t.Type == gjson.String && t.Str != "" {
			output = true
		} else if d := c.Get("delta"); d.Exists() {
			d.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "role":
				case "content", "refusal", "reasoning_content", "reasoning":
					output = v.Type == gjson.String && v.Str != ""
				default: // tool_calls, function_call, audio, …: output
					output = v.Type != gjson.Null
				}
				return !output
			})
		}
		return !output
	})
	if output {
		return FirstEvent{Verdict: Content}, true
	}
	return FirstEvent{}, false // role-only delta, usage-only chunk
}

// failed builds the Failed verdict from an error event's data.
func failed(data []byte) FirstEvent {
	root := gjson.Parse(unsafeString(data))
	obj := root.Get("error")
	if !obj.IsObject() {
		if r := root.Get("response.error"); r.IsObject() {
			obj = r
		} else {
			obj = root
		}
	}
	errJSON := data
	if obj.Raw != "" && obj.Index >= 0 && obj.Index+len(obj.Raw) <= len(data) {
		errJSON = data[obj.Index : obj.Index+len(obj.Raw)]
	}
	return FirstEvent{Verdict: Failed, Status: errorStatus(obj), Error: errJSON}
}

// errorStatus maps an in-stream error object to the HTTP status the provider would have
// answered with: an explicit numeric status or code first, then the error's type or code
// (OpenAI's and Anthropic's documented error types).
func errorStatus(obj gjson.Result) int {
	for _, f := range [...]string{"status", "status_code", "code"} {
		if v := obj.Get(f); v.Type == gjson.Number && v.Int() >= 400 && v.Int() <= 599 {
			return int(v.Int())
		}
	}
	kind := obj.Get("type").Str
	if kind == "" || kind == "error" {
		kind = obj.Get("code").Str
	}
	switch kind {
	case "overloaded_error":
		return 529 // Anthropic's overloaded status
	case "rate_limit_error", "rate_limit_exceeded", "insufficient_quota", "tokens", "requests":
		return 429
	case "authentication_error", "invalid_api_key":
		return 401
	case "permission_error", "permission_denied":
		return 403
	case "not_found_error", "model_not_found":
		return 404
	case "request_too_large":
		return 413
	case "invalid_request_error", "invalid_prompt", "context_length_exceeded":
		return 400
	case "billing_error":
		return 402
	case "timeout", "timeout_error":
		return 504
	case "service_unavailable", "service_unavailable_error", "overloaded":
		return 503
	}
	return 500 // server_error, api_error and anything unknown: a provider-side failure
}
