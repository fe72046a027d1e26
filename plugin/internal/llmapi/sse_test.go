package llmapi

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// Streams as the providers send them (shapes from OpenAI's and Anthropic's API references).
const (
	chatRole    = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	chatContent = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n"
	chatTool    = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n"
	chatFinish  = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	chatUsage   = "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n"
	chatDone    = "data: [DONE]\n\n"
	chatError   = "data: {\"error\":{\"message\":\"Rate limit reached for gpt-4o\",\"type\":\"rate_limit_error\",\"code\":\"rate_limit_exceeded\"}}\n\n"
	complText   = "data: {\"id\":\"x\",\"object\":\"text_completion\",\"choices\":[{\"text\":\"Once\",\"index\":0,\"finish_reason\":null}]}\n\n"
	heartbeat   = ": keep-alive\n\n"

	antStart   = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"content\":[]}}\n\n"
	antPing    = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
	antBlock   = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	antThink   = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n"
	antToolUse = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n"
	antDelta   = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	antStop    = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	antError   = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

	respCreated = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\"}}\n\n"
	respProg    = "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"r\"}}\n\n"
	respItem    = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\"}}\n\n"
	respDelta   = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"
	respFailed  = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"r\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model failed\"}}}\n\n"
	respDone    = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\"}}\n\n"
)

func TestScanFirst(t *testing.T) {
	cases := []struct {
		name    string  // the stream's start
		body    string  // bytes held so far
		eos     bool    // the stream has ended
		verdict Verdict // expected verdict
		status  int     // expected status (Failed)
		errType string  // expected error object's type or code (Failed)
	}{
		{"nothing yet", "", false, NeedMore, 0, ""},
		{"role-only delta holds", chatRole, false, NeedMore, 0, ""},
		{"role then content", chatRole + chatContent, false, Content, 0, ""},
		{"content split mid-event waits for its end", chatRole + chatContent[:30], false, NeedMore, 0, ""},
		{"heartbeats hold", heartbeat + heartbeat + chatRole, false, NeedMore, 0, ""},
		{"tool call is output", chatRole + chatTool, false, Content, 0, ""},
		{"finish reason is output", chatRole + chatFinish, false, Content, 0, ""},
		{"usage-only chunk holds", chatUsage, false, NeedMore, 0, ""},
		{"done at once passes", chatDone, false, Content, 0, ""},
		{"completions text", complText, false, Content, 0, ""},
		{"openai error first", chatError, false, Failed, 429, "rate_limit_error"},
		{"openai error after role", chatRole + chatError, false, Failed, 429, "rate_limit_error"},
		{"anthropic prelude holds", antStart + antPing + antBlock, false, NeedMore, 0, ""},
		{"anthropic empty thinking block holds", antStart + antThink, false, NeedMore, 0, ""},
		{"anthropic delta", antStart + antPing + antBlock + antDelta, false, Content, 0, ""},
		{"anthropic tool use is output", antStart + antToolUse, false, Content, 0, ""},
		{"anthropic overloaded", antStart + antError, false, Failed, 529, "overloaded_error"},
		{"anthropic error first", antError, false, Failed, 529, "overloaded_error"},
		{"responses prelude holds", respCreated + respProg + respItem, false, NeedMore, 0, ""},
		{"responses delta", respCreated + respDelta, false, Content, 0, ""},
		{"responses failed", respCreated + respProg + respFailed, false, Failed, 500, "server_error"},
		{"responses completed", respCreated + respDone, false, Content, 0, ""},
		{"CRLF events", strings.ReplaceAll(chatRole+chatContent, "\n", "\r\n"), false, Content, 0, ""},
		{"CRLF error", strings.ReplaceAll(antError, "\n", "\r\n"), false, Failed, 529, "overloaded_error"},
		{"ended with only a role", chatRole, true, Empty, 0, ""},
		{"ended empty", "", true, Empty, 0, ""},
		{"last event without blank line at eos", chatRole + strings.TrimSuffix(chatContent, "\n\n"), true, Content, 0, ""},
		{"not JSON data passes", "data: hello\n\n", false, Content, 0, ""},
		{"explicit numeric status wins", "data: {\"error\":{\"message\":\"busy\",\"code\":503}}\n\n", false, Failed, 503, ""},
		{"unknown error type is a server failure", "data: {\"error\":{\"message\":\"?\",\"type\":\"weird\"}}\n\n", false, Failed, 500, "weird"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fe := ScanFirst([]byte(c.body), c.eos)
			if fe.Verdict != c.verdict || fe.Status != c.status {
				t.Fatalf("verdict %d status %d, want %d %d", fe.Verdict, fe.Status, c.verdict, c.status)
			}
			if c.verdict == Failed {
				obj := gjson.ParseBytes(fe.Error)
				if !obj.IsObject() {
					t.Fatalf("error object %q is not a JSON object", fe.Error)
				}
				if c.errType != "" && obj.Get("type").Str != c.errType && obj.Get("code").Str != c.errType {
					t.Fatalf("error object %s, want type/code %q", fe.Error, c.errType)
				}
			}
		})
	}
}

func TestTrackerFindsTheEndWhateverTheChunking(t *testing.T) {
	cases := []struct {
		name     string // the stream
		stream   string // its bytes
		terminal bool   // the terminal event is in it
		errored  bool   // an error event is in it
	}{
		{"chat completed", chatRole + chatContent + chatFinish + chatDone, true, false},
		{"chat truncated", chatRole + chatContent, false, false},
		{"chat done without space", chatContent + "data:[DONE]\n\n", true, false},
		{"anthropic completed", antStart + antDelta + antStop, true, false},
		{"anthropic truncated", antStart + antDelta, false, false},
		{"anthropic error mid-stream", antStart + antDelta + antError, false, true},
		{"responses completed", respCreated + respDelta + respDone, true, false},
		{"responses failed mid-stream", respCreated + respDelta + respFailed, false, true},
		{"openai error mid-stream", chatContent + chatError, false, true},
		{"CRLF", strings.ReplaceAll(chatContent+chatDone, "\n", "\r\n"), true, false},
		{"last line without newline", chatContent + "data: [DONE]", true, false},
		{"model output quoting the marker is not the end",
			"data: {\"choices\":[{\"delta\":{\"content\":\"print(\\\"\\ndata: [DONE]\\n\\\")\"}}]}\n\n", false, false},
		{"long lines are fine", "data: " + strings.Repeat("x", 5000) + "\n\n" + chatDone, true, false},
	}
	for _, c := range cases {
		for _, size := range []int{1, 2, 3, 7, 64, len(c.stream)} {
			var tr Tracker
			for i := 0; i < len(c.stream); i += size {
				tr.Feed([]byte(c.stream[i:min(i+size, len(c.stream))]))
			}
			tr.End()
			if tr.Terminal != c.terminal || tr.Errored != c.errored {
				t.Errorf("%s in chunks of %d: terminal %v errored %v, want %v %v", c.name, size, tr.Terminal, tr.Errored, c.terminal, c.errored)
			}
		}
	}
}

func TestScanFirstAndTrackerDoNotAllocate(t *testing.T) {
	body := []byte(antStart + antPing + antBlock + antDelta)
	if n := testing.AllocsPerRun(100, func() { ScanFirst(body, false) }); n != 0 {
		t.Errorf("ScanFirst allocates %.0f times per call", n)
	}
	stream := []byte(chatContent + chatContent + chatDone)
	if n := testing.AllocsPerRun(100, func() {
		var tr Tracker
		tr.Feed(stream)
	}); n != 0 {
		t.Errorf("Tracker.Feed allocates %.0f times per call", n)
	}
}

func BenchmarkScanFirstAnthropic(b *testing.B) {
	body := []byte(antStart + antPing + antBlock + antDelta)
	b.ReportAllocs()
	for b.Loop() {
		ScanFirst(body, false)
	}
}
