package llmapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	antstream "github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/openai/openai-go/v3"
	oaistream "github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
)

const (
	testMessage = `the stream "stalled"` // a quote to escape
	testCode    = "STREAM_CONTENT_STALL"
)

func sseResponse(body string) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(body))}
}

// The error events end each API's stream the way its official SDK reports an error: the
// content before them is read, then the stream stops with the error (Chat Completions,
// Anthropic) or with the API's failed response (Responses).
func TestStreamErrorIsWhatTheSDKsReport(t *testing.T) {
	t.Run("chat completions", func(t *testing.T) {
		body := chatRole + chatContent + string(AppendStreamError(nil, ShapeChat, "timeout_error", testCode, testMessage))
		s := oaistream.NewStream[openai.ChatCompletionChunk](oaistream.NewDecoder(sseResponse(body)), nil)
		var text string
		for s.Next() {
			for _, c := range s.Current().Choices {
				text += c.Delta.Content
			}
		}
		var se *oaistream.StreamError
		if text != "Hel" || !errors.As(s.Err(), &se) || !strings.Contains(se.Message, testCode) {
			t.Fatalf("text %q, err %v", text, s.Err())
		}
	})
	t.Run("responses", func(t *testing.T) {
		body := respCreated + respDelta + string(AppendStreamError(nil, ShapeResponses, "timeout_error", testCode, testMessage))
		s := oaistream.NewStream[responses.ResponseStreamEventUnion](oaistream.NewDecoder(sseResponse(body)), nil)
		var last responses.ResponseStreamEventUnion
		for s.Next() {
			last = s.Current()
		}
		failed := last.AsResponseFailed()
		if s.Err() != nil || last.Type != "response.failed" || failed.Response.Status != "failed" ||
			string(failed.Response.Error.Code) != testCode || failed.Response.Error.Message != testMessage {
			t.Fatalf("last event %s, err %v", last.RawJSON(), s.Err())
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		body := antStart + antBlock + antDelta + string(AppendStreamError(nil, ShapeAnthropic, "timeout_error", testCode, testMessage))
		s := antstream.NewStream[anthropic.MessageStreamEventUnion](antstream.NewDecoder(sseResponse(body)), nil)
		var text string
		for s.Next() {
			if d := s.Current().AsContentBlockDelta(); d.Delta.Type == "text_delta" {
				text += d.Delta.Text
			}
		}
		if text != "Hi" || s.Err() == nil || !strings.Contains(s.Err().Error(), "timeout_error") ||
			!strings.Contains(s.Err().Error(), testCode) {
			t.Fatalf("text %q, err %v", text, s.Err())
		}
	})
}

// Every event's data is valid JSON, whatever the message holds.
func TestStreamErrorEscapesItsText(t *testing.T) {
	msg := "a \"quote\", a \\ backslash, a\nnewline, a \x01 control and é"
	for _, shape := range []StreamShape{ShapeUnknown, ShapeChat, ShapeResponses, ShapeAnthropic} {
		ev := AppendStreamError([]byte("prefix"), shape, "timeout_error", "C", msg)
		if !bytes.HasPrefix(ev, []byte("prefix")) || !bytes.HasSuffix(ev, []byte("\n\n")) {
			t.Fatalf("shape %d: %q", shape, ev)
		}
		for _, line := range strings.Split(string(ev[len("prefix"):]), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatalf("shape %d: data %s: %v", shape, data, err)
			}
			if !strings.Contains(data, `a \"quote\"`) {
				t.Fatalf("shape %d: message lost: %s", shape, data)
			}
		}
	}
}
