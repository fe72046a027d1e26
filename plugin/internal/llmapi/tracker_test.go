package llmapi

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	oaistream "github.com/openai/openai-go/v3/packages/ssestream"
)

// The shape comes from the stream's first telling line, whatever the chunking (the
// examples are the API references' event shapes, in sse_test.go).
func TestTrackerRecognisesTheShape(t *testing.T) {
	cases := []struct {
		name   string      // the stream
		stream string      // its bytes
		want   StreamShape // the API its events are in
	}{
		{"chat", chatRole + chatContent, ShapeChat},
		{"completions", complText, ShapeChat},
		{"chat after heartbeats", heartbeat + heartbeat + chatContent, ShapeChat},
		{"chat done alone", chatDone, ShapeChat},
		{"responses", respCreated + respDelta, ShapeResponses},
		{"responses without event lines", "data: {\"type\":\"response.created\",\"response\":{}}\n\n", ShapeResponses},
		{"anthropic", antStart + antDelta, ShapeAnthropic},
		{"anthropic from a ping first", antPing + antStart, ShapeAnthropic},
		{"anthropic's ping as its reference writes it", "event: ping\ndata: {\"type\": \"ping\"}\n\n" + antStart, ShapeAnthropic},
		{"a spaced type", "data: {\"type\": \"message_start\",\"message\":{}}\n\n", ShapeAnthropic},
		{"another named event's data tells nothing", "event: keepalive\ndata: {\"t\":1}\n\n", ShapeUnknown},
		{"anthropic without event lines", "data: {\"type\":\"message_start\",\"message\":{}}\n\n", ShapeAnthropic},
		{"anthropic error first tells nothing", antError, ShapeUnknown},
		{"heartbeats only", heartbeat + heartbeat, ShapeUnknown},
		{"not SSE", "hello\n\n", ShapeUnknown},
	}
	for _, c := range cases {
		for _, size := range []int{1, 5, len(c.stream)} {
			var tr Tracker
			for i := 0; i < len(c.stream); i += size {
				tr.Feed([]byte(c.stream[i:min(i+size, len(c.stream))]))
			}
			tr.End()
			if tr.Shape != c.want {
				t.Errorf("%s in chunks of %d: shape %d, want %d", c.name, size, tr.Shape, c.want)
			}
		}
	}
}

// Boundary: where an event can follow the stream's last bytes.
func TestTrackerBoundary(t *testing.T) {
	cases := []struct {
		name   string // how the stream ends
		before string // chunks fed before the last one, as one
		last   string // the last chunk (still the filter's)
		keep   int    // how much of last to keep
		sep    string // what comes first
	}{
		{"nothing fed", "", "", 0, ""},
		{"an event boundary", chatRole, chatContent, len(chatContent), ""},
		{"an empty last chunk at a boundary", chatRole + chatContent, "", 0, ""},
		{"a complete line without the blank one", chatRole, "data: {\"a\":1}\n", len("data: {\"a\":1}\n"), "\n"},
		{"CRLF lines", "", "data: {}\r\n\r\n", len("data: {}\r\n\r\n"), ""},
		{"a CRLF line without the blank one", "", "data: {}\r\n", len("data: {}\r\n"), "\n"},
		{"inside an event begun in the last chunk", chatRole, chatContent + chatContent[:20], len(chatContent), ""},
		{"inside an event that is the whole last chunk", chatRole, chatContent[:20], 0, ""},
		{"inside the second line of an event begun in the last chunk", chatRole,
			"event: content_block_delta\ndata: {\"ty", 0, ""},
		{"inside an event begun in an earlier chunk", chatRole + chatContent[:20], chatContent[20:40], len(chatContent[20:40]), "\n\n"},
		{"inside an event, an empty last chunk", chatRole + chatContent[:20], "", 0, "\n\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tr Tracker
			tr.Feed([]byte(c.before))
			tr.Feed([]byte(c.last))
			keep, sep := tr.Boundary(len(c.last))
			if keep != c.keep || sep != c.sep {
				t.Fatalf("keep %d sep %q, want %d %q", keep, sep, c.keep, c.sep)
			}
		})
	}
}

// cutEnd is a stream's bytes as the client gets them when an error event follows: stream
// whose last len(stream)-split bytes are the filter's last chunk.
func cutEnd(stream []byte, split int) []byte {
	var tr Tracker
	tr.Feed(stream[:split])
	tr.Feed(stream[split:])
	keep, sep := tr.Boundary(len(stream) - split)
	out := append(append([]byte(nil), stream[:split+keep]...), sep...)
	return AppendStreamError(out, ShapeChat, "server_error", "stream_truncated", "cut")
}

// decodeEvents reads a stream with openai-go's own SSE decoder, the oracle of where events
// begin and end.
func decodeEvents(body []byte) []oaistream.Event {
	d := oaistream.NewDecoder(&http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(body))})
	var out []oaistream.Event
	for d.Next() {
		ev := d.Event()
		out = append(out, oaistream.Event{Type: ev.Type, Data: bytes.Clone(ev.Data)})
	}
	return out
}

// requireEndsWithTheError checks that the client's SDK reads the added error event, then
// [DONE], as the stream's last two events, each whole, whatever came before.
func requireEndsWithTheError(t *testing.T, stream []byte, split int) {
	t.Helper()
	out := cutEnd(stream, split)
	evs := decodeEvents(out)
	n := len(evs)
	want := string(AppendStreamError(nil, ShapeChat, "server_error", "stream_truncated", "cut"))
	wantData := strings.TrimPrefix(want[:strings.Index(want, "\n\n")], "data: ") + "\n"
	if n < 2 || evs[n-2].Type != "" || string(evs[n-2].Data) != wantData || string(evs[n-1].Data) != "[DONE]\n" {
		t.Fatalf("stream %q split at %d: the client reads %q", stream, split, evs)
	}
	// Nothing that ended before the last chunk is lost, and nothing complete in it either:
	// only a partial last line's event, begun in the last chunk, is dropped.
	if bytes.HasSuffix(stream, []byte("\n")) && !bytes.HasPrefix(out, stream) {
		t.Fatalf("stream %q split at %d: a stream ending with its line lost bytes: %q", stream, split, out)
	}
	if !bytes.HasPrefix(out, stream[:split]) {
		t.Fatalf("stream %q split at %d: bytes that went on before were changed: %q", stream, split, out)
	}
}

func TestTrackerBoundaryEndsTheStreamWhereTheSDKReadsIt(t *testing.T) {
	streams := []string{
		chatRole + chatContent,
		chatRole + chatContent[:len(chatContent)-1], // one newline short
		chatRole + chatContent[:40],                 // inside a data line
		antStart + antDelta[:30],                    // inside an event's second line
		strings.ReplaceAll(chatRole+chatContent, "\n", "\r\n"),
		heartbeat + ": comment without its blank line\n",
		"",
	}
	for _, s := range streams {
		for split := 0; split <= len(s); split++ {
			requireEndsWithTheError(t, []byte(s), split)
		}
	}
}

func FuzzTrackerBoundary(f *testing.F) {
	for _, s := range []string{chatRole + chatContent, chatRole + chatContent[:40], antStart + antDelta[:30],
		"data: x\r\r\ndata: y\r", "\n\n\r\n", ":\n"} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, stream []byte, at uint16) {
		if len(stream) > 4096 {
			return
		}
		requireEndsWithTheError(t, stream, int(at)%(len(stream)+1))
	})
}
