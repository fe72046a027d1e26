package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// streamPolicy gives each streaming scenario its own model and keys: a fault on one
// never cools another's. m-first, m-mid and m-trunc have a spare key after the first.
const streamPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: pass, credential: {header: authorization, value: "Bearer key-pass"}}
      - {id: first-a, credential: {header: authorization, value: "Bearer key-first-a"}}
      - {id: first-b, credential: {header: authorization, value: "Bearer key-first-b"}}
      - {id: mid-a, credential: {header: authorization, value: "Bearer key-mid-a"}}
      - {id: mid-b, credential: {header: authorization, value: "Bearer key-mid-b"}}
      - {id: trunc-a, credential: {header: authorization, value: "Bearer key-trunc-a"}}
      - {id: trunc-b, credential: {header: authorization, value: "Bearer key-trunc-b"}}
      - {id: gone, credential: {header: authorization, value: "Bearer key-gone"}, maxConcurrent: 1}
routes:
  - {model: m-pass, targets: [{provider: openai, connection: pass}]}
  - {model: m-first, strategy: priority, targets: [{provider: openai, connection: first-a}, {provider: openai, connection: first-b}]}
  - {model: m-mid, strategy: priority, targets: [{provider: openai, connection: mid-a}, {provider: openai, connection: mid-b}]}
  - {model: m-trunc, strategy: priority, targets: [{provider: openai, connection: trunc-a}, {provider: openai, connection: trunc-b}]}
  - {model: m-gone, targets: [{provider: openai, connection: gone}]}
resilience:
  requestQueue: {maxWaitMs: 2000}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// openStream starts a streaming chat for model.
func openStream(t *testing.T, tg *e2etest.Target, model string, header map[string]string) *e2etest.Stream {
	t.Helper()
	s := e2etest.OpenStream(t, tg.URL+"/v1/chat/completions", e2etest.ChatBody(model, true), header)
	if s.Status != 200 || !strings.HasPrefix(s.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream for %s: %d %q", model, s.Status, s.Header.Get("Content-Type"))
	}
	return s
}

// isContent reports whether an OpenAI chunk event carries text (the role chunk first
// carries an empty content).
func isContent(ev e2etest.Event) bool {
	return strings.Contains(ev.Text, `"content":"`) && !strings.Contains(ev.Text, `"content":""`)
}

// A stream passes through event by event (guide §6 holds it only to its first content
// event): the client has its first content while the provider is still streaming the
// rest, every event arrives, and the stream ends with [DONE].
func testStreamingPassThrough(t *testing.T, start e2etest.Starter) {
	tg := start(t, streamPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.SetPacing(fakeprovider.Pacing{First: 200 * time.Millisecond, Between: 30 * time.Millisecond})
	sent := time.Now()
	s := openStream(t, tg, "m-pass", nil)
	if got := s.Header.Get("x-spillway-connection"); got != "pass" {
		t.Errorf("x-spillway-connection %q", got)
	}
	events, err := s.Rest()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("the stream ended in %v", err)
	}
	var first *e2etest.Event
	for i := range events {
		if isContent(events[i]) {
			first = &events[i]
			break
		}
	}
	if first == nil || events[len(events)-1].Text != "data: [DONE]" {
		t.Fatalf("events: %q", events)
	}
	rec := fake.Requests()
	if len(rec) != 1 || len(rec[0].Sent) != len(events)+1 { // Sent: the headers, then each event
		t.Fatalf("the fake sent %d parts, the client got %d events", len(rec[0].Sent), len(events))
	}
	last := rec[0].Sent[len(rec[0].Sent)-1]
	if !first.At.Before(last) {
		t.Errorf("the first content reached the client at %v, after the provider's last event (%v): buffered, not streamed",
			first.At.Sub(sent), last.Sub(sent))
	}
	t.Logf("time to first content %v, the provider's stream took %v", first.At.Sub(sent), last.Sub(rec[0].Start))
	requireRequests(t, "pass-through", fake, map[string]int{"key-pass": 1})
}

// An error event first in a 200 stream is a failed attempt like an error status: the
// client gets the spare key's stream. An error after content has reached the client
// cannot be retried: the client reads the content and then the error event, and the
// spare is never asked.
func testErrorInStream(t *testing.T, start e2etest.Starter) {
	tg := start(t, streamPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-first-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorFirst})
	fake.ScriptFor("key-mid-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorMid})

	s := openStream(t, tg, "m-first", nil)
	events, err := s.Rest()
	all := joinEvents(events)
	if !errors.Is(err, io.EOF) || !strings.Contains(all, "data: [DONE]") || strings.Contains(all, `"error"`) ||
		s.Header.Get("x-spillway-connection") != "first-b" || s.Header.Get("x-spillway-attempts") != "2" {
		t.Errorf("error first: %v, %s after %s attempts:\n%s", err, s.Header.Get("x-spillway-connection"), s.Header.Get("x-spillway-attempts"), all)
	}

	s = openStream(t, tg, "m-mid", nil)
	events, _ = s.Rest()
	all = joinEvents(events)
	i, j := strings.Index(all, `"content":"Hello"`), strings.Index(all, `data: {"error":{`)
	if i < 0 || j < i || strings.Contains(all, "[DONE]") || s.Header.Get("x-spillway-connection") != "mid-a" {
		t.Errorf("error after content, from %s:\n%s", s.Header.Get("x-spillway-connection"), all)
	}
	requireRequests(t, "error events", fake, map[string]int{"key-first-a": 1, "key-first-b": 1, "key-mid-a": 1, "key-mid-b": 0})
}

func joinEvents(events []e2etest.Event) string {
	var b strings.Builder
	for _, ev := range events {
		b.WriteString(ev.Text + "\n\n")
	}
	return b.String()
}

// A stream that ends cleanly without [DONE] reaches the client as it came, ended with
// Spillway's error event (code stream_truncated, then [DONE]: testCutStreamSDKs has what the
// SDKs make of it), and counts as a failure of the key that served it (a synthesised 502):
// the key cools and the next request goes to the spare.
func testTruncatedStream(t *testing.T, start e2etest.Starter) {
	tg := start(t, streamPolicy)
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-trunc-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioTruncate, AfterEvents: 3})
	s := openStream(t, tg, "m-trunc", nil)
	events, err := s.Rest()
	all := joinEvents(events)
	n := len(events)
	if !errors.Is(err, io.EOF) || strings.Count(all, `"content":"`) != 4 || n < 2 || events[n-1].Text != "data: [DONE]" ||
		gjson.Get(strings.TrimPrefix(events[n-2].Text, "data: "), "error.code").Str != "stream_truncated" {
		t.Fatalf("truncated: %v:\n%s", err, all) // the role chunk and three content chunks, the error event, a clean end
	}
	e2etest.WaitFor(t, "trunc-a to be marked failed", func() bool { // recorded when the stream ends in the filter
		_, c := tg.Admin(t, "GET", "resilience/cooldowns", "")
		return c.Get(`connections.#(id=="trunc-a").errorCode`).Int() == 502
	})
	if _, c := tg.Admin(t, "GET", "resilience/cooldowns", ""); c.Get(`connections.#(id=="trunc-a").status`).Str != "cooling_down" {
		t.Errorf("trunc-a: %s", c.Get(`connections.#(id=="trunc-a")`).Raw)
	}
	requireAnswer(t, "after the truncation", tg.Chat(t, "m-trunc", nil), "openai/trunc-b/m-trunc/1")
	requireRequests(t, "truncated", fake, map[string]int{"key-trunc-a": 1, "key-trunc-b": 1})
}

// running returns how many requests hold a connection's slots, in every worker.
func running(t *testing.T, tg *e2etest.Target, provider, connection string) int64 {
	_, h := tg.Admin(t, "GET", "monitoring/health", "")
	return h.Get(`rateLimitStatus.` + provider + `:` + connection + `.running`).Int()
}

// A client that goes away mid-stream cancels the upstream call and gives its slot back:
// on a one-slot key the next request is served at once (a leaked slot would queue it
// into 429 RATE_LIMIT_QUEUE_TIMEOUT), and the key is not blamed.
func testClientDisconnect(t *testing.T, start e2etest.Starter) {
	tg := start(t, streamPolicy)
	fake := tg.Fake(t, "fake-openai")
	s := openStream(t, tg, "m-gone", map[string]string{"x-fake-scenario": "stall"})
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("before any content: %v", err)
		}
		if isContent(ev) {
			break
		}
	}
	if n := running(t, tg, "openai", "gone"); n != 1 {
		t.Fatalf("%d requests hold gone's slot mid-stream, want 1", n)
	}
	s.Close()
	e2etest.WaitFor(t, "the upstream call to be cancelled", func() bool { return fake.StatsFor("key-gone").InFlight == 0 })
	e2etest.WaitFor(t, "the slot to be given back", func() bool { return running(t, tg, "openai", "gone") == 0 })
	requireAnswer(t, "after the disconnect", tg.Chat(t, "m-gone", nil), "openai/gone/m-gone/1")
	if _, c := tg.Admin(t, "GET", "resilience/cooldowns", ""); c.Get(`connections.#(id=="gone").status`).Str != "healthy" {
		t.Errorf("gone after its client left: %s", c.Get(`connections.#(id=="gone")`).Raw)
	}
	requireRequests(t, "disconnect", fake, map[string]int{"key-gone": 2})
}

// cutPolicy gives each API of the cut-stream scenario its own key, so that one's
// truncation (which cools its key) never meets another's request.
const cutPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: chat, credential: {header: authorization, value: "Bearer key-cut-chat"}}
      - {id: resp, credential: {header: authorization, value: "Bearer key-cut-resp"}}
      - {id: reset, credential: {header: authorization, value: "Bearer key-cut-reset"}}
  - id: anthropic
    api: anthropic
    cluster: fake-anthropic
    connections:
      - {id: msgs, credential: {header: x-api-key, value: "key-cut-msgs"}}
routes:
  - {model: m-chat, targets: [{provider: openai, connection: chat}]}
  - {model: m-resp, targets: [{provider: openai, connection: resp}]}
  - {model: m-reset, targets: [{provider: openai, connection: reset}]}
  - {model: m-msgs, targets: [{provider: anthropic, connection: msgs}]}
`

// A stream the provider ends cleanly after some content without its terminal event reaches
// the SDKs as an API error with Spillway's code stream_truncated, after the content that
// came: openai-go's chat stream stops with its StreamError, anthropic-sdk-go's with its API
// error, and a Responses stream ends with response.failed (the API's own end of a failed
// response, which openai-go hands over as an event). Without the error event each of them
// would end as if the answer were whole. A stream the provider resets instead can take
// nothing more: the proxy drops the HTTP/1.1 connection before the body's last chunk, and
// the SDK reports the broken body (unexpected EOF).
func testCutStreamSDKs(t *testing.T, start e2etest.Starter) {
	tg := start(t, cutPolicy)
	oa, an := tg.Fake(t, "fake-openai"), tg.Fake(t, "fake-anthropic")
	cut := fakeprovider.Fault{Scenario: fakeprovider.ScenarioTruncate, AfterEvents: 3}
	oa.ScriptFor("key-cut-chat", cut)
	oa.ScriptFor("key-cut-resp", cut)
	an.ScriptFor("key-cut-msgs", cut)
	oa.ScriptFor("key-cut-reset", fakeprovider.Fault{Scenario: fakeprovider.ScenarioReset, AfterEvents: 3})
	ctx := context.Background()
	const firstWords = "Hello from fake-" // three content events of the fake's answer

	t.Run("openai-go chat completions", func(t *testing.T) {
		client := openAIClient(tg)
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m-chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}})
		var text strings.Builder
		for stream.Next() {
			if cs := stream.Current().Choices; len(cs) > 0 {
				text.WriteString(cs[0].Delta.Content)
			}
		}
		var se *ssestream.StreamError
		if !errors.As(stream.Err(), &se) || gjson.GetBytes(se.Event.Data, "error.code").Str != "stream_truncated" {
			t.Fatalf("the stream ended with %v (%T), want the SDK's StreamError with code stream_truncated", stream.Err(), stream.Err())
		}
		if !strings.HasPrefix(text.String(), firstWords) {
			t.Fatalf("content before the error %q", text.String())
		}
	})
	t.Run("openai-go responses", func(t *testing.T) {
		client := openAIClient(tg)
		stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m-resp",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
		var text strings.Builder
		var last responses.ResponseStreamEventUnion
		for stream.Next() {
			last = stream.Current()
			text.WriteString(last.AsResponseOutputTextDelta().Delta)
		}
		failed := last.AsResponseFailed()
		if stream.Err() != nil || last.Type != "response.failed" || failed.Response.Status != "failed" ||
			string(failed.Response.Error.Code) != "stream_truncated" {
			t.Fatalf("last event %s, err %v; want response.failed with code stream_truncated", last.RawJSON(), stream.Err())
		}
		if !strings.HasPrefix(text.String(), firstWords) {
			t.Fatalf("content before the error %q", text.String())
		}
	})
	t.Run("anthropic-sdk-go messages", func(t *testing.T) {
		client := anthropicClient(tg)
		stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "m-msgs", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}})
		var text strings.Builder
		for stream.Next() {
			text.WriteString(stream.Current().Delta.Text)
		}
		var ae *anthropic.Error
		if !errors.As(stream.Err(), &ae) || !strings.Contains(ae.Error(), "api_error") || !strings.Contains(ae.Error(), "stream_truncated") {
			t.Fatalf("the stream ended with %v (%T), want the SDK's API error naming stream_truncated", stream.Err(), stream.Err())
		}
		if !strings.HasPrefix(text.String(), firstWords) {
			t.Fatalf("content before the error %q", text.String())
		}
	})
	t.Run("openai-go chat completions, reset", func(t *testing.T) {
		client := openAIClient(tg)
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m-reset",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}})
		var text strings.Builder
		for stream.Next() {
			if cs := stream.Current().Choices; len(cs) > 0 {
				text.WriteString(cs[0].Delta.Content)
			}
		}
		if !errors.Is(stream.Err(), io.ErrUnexpectedEOF) || !strings.HasPrefix(text.String(), firstWords) {
			t.Fatalf("after %q the stream ended with %v, want the broken body's unexpected EOF", text.String(), stream.Err())
		}
	})
	requireRequests(t, "cut streams", oa, map[string]int{"key-cut-chat": 1, "key-cut-resp": 1, "key-cut-reset": 1})
	requireRequests(t, "cut streams", an, map[string]int{"key-cut-msgs": 1})
}
