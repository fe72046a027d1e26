package llmapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

// More events as the providers send them (OpenAI's and Anthropic's API references), beside
// those of sse_test.go.
const (
	chatReasoning = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Let me think\"},\"finish_reason\":null}]}\n\n"
	chatToolArgs  = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"q\\\":\"}}]},\"finish_reason\":null}]}\n\n"
	chatToolDone  = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
	chatEscaped   = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\nb\\\"\\u00e9\\ud83d\\ude00\"}}]}\n\n"

	antThinkDelta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"\"}}\n\n"
	antSignature  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n"
	antJSONDelta  = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":\"}}\n\n"
	antBlockStop  = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
	antMsgDelta   = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n"
	antTextBlock  = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"Hello\"}}\n\n"
	antServerTool = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\"}}\n\n"

	respReasonItem = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs\"}}\n\n"
	respReasonSum  = "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"Thinking\"}\n\n"
	respFnItem     = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"name\":\"f\"}}\n\n"
	respFnArgs     = "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\\\"q\\\"\"}\n\n"
	respFnDone     = "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"name\":\"f\"}}\n\n"
	respSearching  = "event: response.web_search_call.searching\ndata: {\"type\":\"response.web_search_call.searching\",\"item_id\":\"ws\"}\n\n"
	respRefusal    = "event: response.refusal.delta\ndata: {\"type\":\"response.refusal.delta\",\"delta\":\"No.\"}\n\n"
	respPartAdded  = "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"part\":{\"type\":\"output_text\",\"text\":\"\"}}\n\n"
	respError      = "event: error\ndata: {\"type\":\"error\",\"code\":\"ERR\",\"message\":\"broke\"}\n\n"
)

// outputs reads a whole stream's events in one chunk.
func outputs(stream string) ([]Output, StreamShape) {
	var s OutputScanner
	s.Feed([]byte(stream))
	var outs []Output
	for {
		o, ok := s.Next()
		if !ok {
			return outs, s.Shape()
		}
		outs = append(outs, o)
	}
}

func TestOutputOfEachEvent(t *testing.T) {
	cases := []struct {
		name  string      // the event
		event string      // its bytes, blank line included
		want  Output      // what it carries
		shape StreamShape // the API it shows
	}{
		// Chat Completions and Completions.
		{"chat role-only delta", chatRole, Output{}, ShapeChat},
		{"chat text", chatContent, Output{Text: 3}, ShapeChat},
		{"chat text with escapes counts decoded bytes", chatEscaped, Output{Text: 1 + 1 + 1 + 1 + 2 + 4}, ShapeChat},
		{"chat tool call", chatTool, Output{ToolCall: true}, ShapeChat},
		{"chat tool arguments", chatToolArgs, Output{ToolCall: true}, ShapeChat},
		{"chat reasoning", chatReasoning, Output{Reasoning: true}, ShapeChat},
		{"chat finish", chatFinish, Output{Done: true}, ShapeChat},
		{"chat tool finish", chatToolDone, Output{Done: true}, ShapeChat},
		{"chat usage-only", chatUsage, Output{}, ShapeChat},
		{"chat done", chatDone, Output{End: true}, ShapeChat},
		{"chat error", chatError, Output{End: true}, ShapeUnknown},
		{"completions text", complText, Output{Text: 4}, ShapeChat},
		{"two choices add up", "data: {\"choices\":[{\"delta\":{\"content\":\"ab\"}},{\"delta\":{\"content\":\"cde\"}}]}\n\n", Output{Text: 5}, ShapeChat},
		{"empty reasoning is no frame", "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"\"}}]}\n\n", Output{}, ShapeChat},
		{"empty tool_calls is no call", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[]}}]}\n\n", Output{}, ShapeChat},
		{"null fields are nothing", "data: {\"choices\":[{\"delta\":{\"content\":null,\"tool_calls\":null},\"finish_reason\":null}]}\n\n", Output{}, ShapeChat},
		// Heartbeats, comments and shapes Spillway does not know.
		{"comment heartbeat", heartbeat, Output{}, ShapeUnknown},
		{"ping event name", "event: ping\ndata: {}\n\n", Output{}, ShapeUnknown},
		{"empty data", "data:\n\n", Output{}, ShapeUnknown},
		{"empty object", "data: {}\n\n", Output{}, ShapeUnknown},
		{"not JSON counts as text", "data: hello\n\n", Output{Text: 5}, ShapeUnknown},
		{"broken JSON counts as text", "data: {\"choices\":[\n\n", Output{Text: 12}, ShapeUnknown},
		{"data in two lines joined", "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"xy\"}}]}\n\n", Output{Text: 2}, ShapeChat},
		{"data without space after the colon", "data:{\"choices\":[{\"delta\":{\"content\":\"xy\"}}]}\n\n", Output{Text: 2}, ShapeChat},
		// Anthropic Messages.
		{"anthropic message_start", antStart, Output{}, ShapeAnthropic},
		{"anthropic ping", antPing, Output{}, ShapeUnknown},
		{"anthropic empty text block", antBlock, Output{}, ShapeAnthropic},
		{"anthropic text block with text", antTextBlock, Output{Text: 5}, ShapeAnthropic},
		{"anthropic text delta", antDelta, Output{Text: 2}, ShapeAnthropic},
		{"anthropic thinking block", antThink, Output{Reasoning: true}, ShapeAnthropic},
		{"anthropic empty thinking delta is reasoning", antThinkDelta, Output{Reasoning: true}, ShapeAnthropic},
		{"anthropic signature delta is reasoning", antSignature, Output{Reasoning: true}, ShapeAnthropic},
		{"anthropic tool use", antToolUse, Output{ToolCall: true}, ShapeAnthropic},
		{"anthropic server tool use", antServerTool, Output{ToolCall: true}, ShapeAnthropic},
		{"anthropic tool input", antJSONDelta, Output{ToolCall: true}, ShapeAnthropic},
		{"anthropic block stop", antBlockStop, Output{Done: true}, ShapeAnthropic},
		{"anthropic message delta", antMsgDelta, Output{Done: true}, ShapeAnthropic},
		{"anthropic message stop", antStop, Output{End: true}, ShapeAnthropic},
		{"anthropic error", antError, Output{End: true}, ShapeUnknown},
		// Responses.
		{"responses created", respCreated, Output{}, ShapeResponses},
		{"responses message item", respItem, Output{}, ShapeResponses},
		{"responses content part", respPartAdded, Output{}, ShapeResponses},
		{"responses text delta", respDelta, Output{Text: 2}, ShapeResponses},
		{"responses refusal delta", respRefusal, Output{Text: 3}, ShapeResponses},
		{"responses reasoning item", respReasonItem, Output{Reasoning: true}, ShapeResponses},
		{"responses reasoning summary", respReasonSum, Output{Reasoning: true}, ShapeResponses},
		{"responses function call item", respFnItem, Output{ToolCall: true}, ShapeResponses},
		{"responses function arguments", respFnArgs, Output{ToolCall: true}, ShapeResponses},
		{"responses function call done", respFnDone, Output{ToolCall: true, Done: true}, ShapeResponses},
		{"responses web search", respSearching, Output{ToolCall: true}, ShapeResponses},
		{"responses completed", respDone, Output{End: true}, ShapeResponses},
		{"responses failed", respFailed, Output{End: true}, ShapeResponses},
		{"responses error event", respError, Output{End: true}, ShapeUnknown},
		// Line endings.
		{"CRLF", strings.ReplaceAll(antDelta, "\n", "\r\n"), Output{Text: 2}, ShapeAnthropic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outs, shape := outputs(c.event)
			if len(outs) != 1 || outs[0] != c.want || shape != c.shape {
				t.Fatalf("outputs %+v shape %d, want [%+v] shape %d", outs, shape, c.want, c.shape)
			}
		})
	}
}

// Whole streams, as a watchdog reads them.
var streams = []struct {
	name   string // the stream
	stream string // its bytes
}{
	{"chat", chatRole + chatContent + heartbeat + chatEscaped + chatUsage + chatFinish + chatDone},
	{"chat tool call", chatRole + chatTool + chatToolArgs + chatToolDone + chatDone},
	{"anthropic thinking then text", antStart + antThink + antThinkDelta + antSignature + antBlockStop + antBlock +
		antPing + antDelta + antBlockStop + antMsgDelta + antStop},
	{"responses reasoning and a tool", respCreated + respReasonItem + respReasonSum + respFnItem + respFnArgs + respFnDone +
		respItem + respPartAdded + respDelta + respDone},
	{"CRLF", strings.ReplaceAll(chatRole+chatContent+chatDone, "\n", "\r\n")},
	{"extra blank lines", "\n\n" + chatContent + "\n\n\r\n" + chatContent},
	{"an event without its end", chatContent + "data: {\"choices\":[{\"delta\":{\"content\":\"lost\"}}]}\n"},
}

func TestOutputWhateverTheChunking(t *testing.T) {
	for _, c := range streams {
		want, wantShape := outputs(c.stream)
		for _, size := range []int{1, 2, 3, 5, 17, 64} {
			var s OutputScanner
			var got []Output
			for i := 0; i < len(c.stream); i += size {
				s.Feed([]byte(c.stream[i:min(i+size, len(c.stream))]))
				for o, ok := s.Next(); ok; o, ok = s.Next() {
					got = append(got, o)
				}
			}
			if !equalOutputs(got, want) || s.Shape() != wantShape {
				t.Errorf("%s in chunks of %d: %+v shape %d, want %+v shape %d", c.name, size, got, s.Shape(), want, wantShape)
			}
		}
	}
}

func equalOutputs(a, b []Output) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCutIsWhereAnEventMayBeInserted(t *testing.T) {
	cases := []struct {
		name   string // what the chunk shows
		before string // what earlier chunks held
		chunk  string // the chunk read
		cut    int    // Cut after reading it
	}{
		{"whole events", "", chatContent + chatContent, 2 * len(chatContent)},
		{"an event split at the end", "", chatContent + chatContent[:20], len(chatContent)},
		{"only the start of an event", "", chatContent[:20], 0},
		{"the rest of an earlier event", chatContent[:20], chatContent[20:], len(chatContent) - 20},
		{"the middle of an earlier event", chatContent[:20], chatContent[20:30], -1},
		{"an earlier event ending in a lone CR", "data: x\n\r", "\n", 1},
		{"a blank line split in two", chatContent[:len(chatContent)-1], "\n" + chatContent[:5], 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s OutputScanner
			s.Feed([]byte(c.before))
			for _, ok := s.Next(); ok; _, ok = s.Next() {
			}
			s.Feed([]byte(c.chunk))
			for _, ok := s.Next(); ok; _, ok = s.Next() {
			}
			if s.Cut() != c.cut {
				t.Fatalf("cut %d, want %d", s.Cut(), c.cut)
			}
		})
	}
}

func TestAnOversizedEventCountsAsText(t *testing.T) {
	ev := "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"" + strings.Repeat("x", MaxEventBytes) + "\"}}]}}]}"
	for _, size := range []int{len(ev) + 2, 4096} {
		stream := ev + "\n\n" + chatContent
		var s OutputScanner
		var got []Output
		for i := 0; i < len(stream); i += size {
			s.Feed([]byte(stream[i:min(i+size, len(stream))]))
			for o, ok := s.Next(); ok; o, ok = s.Next() {
				got = append(got, o)
			}
		}
		if len(got) != 2 || got[0] != (Output{Text: len(ev) + 1}) || got[1] != (Output{Text: 3}) {
			t.Fatalf("chunks of %d: outputs %+v", size, got)
		}
		if len(s.carry) > MaxEventBytes {
			t.Fatalf("carried %d bytes, more than the bound", len(s.carry))
		}
	}
}

// textLen counts what encoding/json decodes a JSON string to.
func TestTextLenIsTheDecodedLength(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "text")
		raw, err := json.Marshal(s) // escapes quotes, controls, <>&, U+2028/9, invalid UTF-8
		if err != nil {
			t.Fatal(err)
		}
		var decoded string
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		if n := textLen(raw[1 : len(raw)-1]); n != len(decoded) {
			t.Fatalf("textLen(%s) = %d, want %d", raw, n, len(decoded))
		}
	})
	for _, c := range []struct {
		raw  string // a JSON string's text between its quotes
		want int    // its decoded UTF-8 length
	}{
		{`\ud83d\ude00`, 4}, // a surrogate pair: one 4-byte rune
		{`\ud83d`, 3},       // a lone high surrogate: U+FFFD
		{`\ude00x`, 4},      // a lone low surrogate, then x
		{`\ud83d\u0041`, 4}, // a high surrogate not followed by a low one: U+FFFD, then A
		{`\u00E9`, 2},       // upper-case hex
		{`\uZZZZ`, 5},       // malformed: the 'u' and the rest count as bytes
		{`trailing\`, 8},    // a dangling backslash counts nothing
		{"é", len("é")},     // raw UTF-8 counts as it is
	} {
		if n := textLen([]byte(c.raw)); n != c.want {
			t.Errorf("textLen(%q) = %d, want %d", c.raw, n, c.want)
		}
	}
}

func TestOutputScannerDoesNotAllocate(t *testing.T) {
	for _, c := range streams {
		chunks := split(c.stream, 7)
		var s OutputScanner
		for _, ch := range chunks { // grow the carry once
			s.Feed(ch)
			for _, ok := s.Next(); ok; _, ok = s.Next() {
			}
		}
		n := testing.AllocsPerRun(50, func() {
			s.Reset()
			for _, ch := range chunks {
				s.Feed(ch)
				for _, ok := s.Next(); ok; _, ok = s.Next() {
				}
			}
		})
		if n != 0 {
			t.Errorf("%s: %.1f allocations per stream", c.name, n)
		}
	}
}

func split(s string, size int) [][]byte {
	var out [][]byte
	for i := 0; i < len(s); i += size {
		out = append(out, []byte(s[i:min(i+size, len(s))]))
	}
	return out
}

// FuzzOutputScanner: any bytes in any two chunks are read without a panic, with the same
// outputs as in one chunk, a carry within its bound, and a Cut that is an event boundary
// (the stream up to it, read afresh, ends between events). `go test` runs the seeds in
// testdata/fuzz/FuzzOutputScanner.
func FuzzOutputScanner(f *testing.F) {
	for _, c := range streams {
		f.Add([]byte(c.stream), uint16(len(c.stream)/2))
	}
	for _, b := range testfixture.HostileBodies() { // issue 18's families, as event data
		f.Add(append(append([]byte("data: "), b...), "\n\n"...), uint16(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, stream []byte, at uint16) {
		want, _ := outputs(string(stream))
		k := int(at) % (len(stream) + 1)
		var s OutputScanner
		var got []Output
		for i, ch := range [][]byte{stream[:k], stream[k:]} {
			s.Feed(ch)
			for o, ok := s.Next(); ok; o, ok = s.Next() {
				if o.Text < 0 {
					t.Fatalf("negative text %d", o.Text)
				}
				got = append(got, o)
			}
			if len(s.carry) > MaxEventBytes {
				t.Fatalf("carry of %d bytes", len(s.carry))
			}
			cut := s.Cut()
			if cut < -1 || cut > len(ch) {
				t.Fatalf("cut %d outside the chunk of %d", cut, len(ch))
			}
			if cut >= 0 {
				offset := 0
				if i == 1 {
					offset = k
				}
				var fresh OutputScanner
				fresh.Feed(stream[:offset+cut])
				for _, ok := fresh.Next(); ok; _, ok = fresh.Next() {
				}
				if fresh.size != 0 {
					t.Fatalf("cut %d of chunk %d is inside an event", cut, i)
				}
			}
		}
		if !equalOutputs(got, want) {
			t.Fatalf("split at %d: %+v, want %+v", k, got, want)
		}
		var buf []byte
		buf = AppendStreamError(buf, s.Shape(), "timeout_error", "CODE", string(stream[:min(len(stream), 40)]))
		if !utf8.Valid(stream) {
			return
		}
		errOuts, _ := outputs(string(buf))
		if len(errOuts) == 0 || !errOuts[0].End {
			t.Fatalf("the error event %q does not read as the end", buf)
		}
	})
}

// BenchmarkOutputScanner reads a chat stream chunk by chunk; x-tracker is its time over the
// terminal-event Tracker's on the same chunks (the per-chunk work every committed stream
// already pays), measured in the same run.
func BenchmarkOutputScanner(b *testing.B) {
	for _, c := range streams[:4] {
		b.Run(c.name, func(b *testing.B) {
			chunks := split(strings.Repeat(c.stream, 20), 97)
			run := func(n int, read func([]byte)) float64 {
				start := time.Now()
				for range n {
					for _, ch := range chunks {
						read(ch)
					}
				}
				return float64(time.Since(start)) / float64(n)
			}
			var s OutputScanner
			var tr Tracker
			scan := func(ch []byte) {
				s.Feed(ch)
				for _, ok := s.Next(); ok; _, ok = s.Next() {
				}
			}
			track := func(ch []byte) { tr.Feed(ch) }
			b.ReportAllocs()
			b.SetBytes(int64(len(c.stream) * 20))
			var scanNs, trackNs float64
			for b.Loop() {
				s.Reset()
				scanNs += run(1, scan)
				tr = Tracker{}
				trackNs += run(1, track)
			}
			b.ReportMetric(scanNs/trackNs, "x-tracker")
		})
	}
}
