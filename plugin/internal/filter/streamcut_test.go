package filter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/plugin/stats"
)

// Streams in the providers' wire formats (OpenAI's and Anthropic's API references).
const (
	cutChatRole    = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	cutChatContent = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	cutChatDone    = "data: [DONE]\n\n"
	cutChatError   = "data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n"
	cutRespCreated = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\"}}\n\n"
	cutRespDelta   = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"
	cutRespDone    = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\"}}\n\n"
	cutAntStart    = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"content\":[]}}\n\n"
	cutAntDelta    = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
	cutAntStop     = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	cutAntError    = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
)

// cutStream runs a committed event stream through the filter: its first chunk (content: the
// hold lets it go), then the rest, the last with end of stream. It returns what the client
// got of the stream's body and its response headers.
func cutStream(t *testing.T, host proxytest.HostEmulator, path, body string, respHeaders [][2]string,
	chunks ...string) (got string, hdrs [][2]string) {
	t.Helper()
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders(path), false)
	if a := host.CallOnRequestBody(id, []byte(body), true); a != types.ActionContinue {
		t.Fatalf("request body: %v", a)
	}
	if a := host.CallOnResponseHeaders(id, respHeaders, false); a != types.ActionPause {
		t.Fatalf("stream headers: %v, want held for the first event", a)
	}
	for i, c := range chunks {
		if a := host.CallOnResponseBody(id, []byte(c), i == len(chunks)-1); a != types.ActionContinue {
			t.Fatalf("chunk %d: %v", i, a)
		}
		got += string(host.GetCurrentResponseBody(id))
	}
	hdrs = append(hdrs, host.GetCurrentResponseHeaders(id)...)
	host.CompleteHttpContext(id)
	return got, hdrs
}

var sseHeaders = [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}

// lastEvent is the last SSE event of a body (the text between the last two blank lines),
// skip events from the end.
func lastEvent(body string, skip int) string {
	evs := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	if len(evs) <= skip {
		return ""
	}
	return evs[len(evs)-1-skip]
}

// eventData is an event's data line.
func eventData(ev string) string {
	for _, l := range strings.Split(ev, "\n") {
		if v, ok := strings.CutPrefix(l, "data: "); ok {
			return v
		}
	}
	return ""
}

// A stream the provider ends cleanly without its terminal event ends for the client with
// an error event in its API's shape, carrying the code stream_truncated (the README's);
// the provider's bytes before it are as sent. The expected shapes are the APIs' own error
// events: OpenAI's {"error":{...}} data line then [DONE], Responses' response.failed,
// Anthropic's event: error (whose errors have no code: it is in the message).
func TestACutStreamEndsWithAnErrorEventInItsAPIsShape(t *testing.T) {
	cases := []struct {
		name, path, body string
		chunks           []string            // the provider's stream; the last ends it
		check            func(string) string // "" when the added event is right, else what is wrong
	}{
		{"chat completions", "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`,
			[]string{cutChatRole + cutChatContent, cutChatContent}, func(tail string) string {
				ev, done := eventData(lastEvent(tail, 1)), lastEvent(tail, 0)
				if done != cutChatDone[:len(cutChatDone)-2] || gjson.Get(ev, "error.code").Str != "stream_truncated" ||
					gjson.Get(ev, "error.type").Str != "server_error" || gjson.Get(ev, "error.message").Str == "" {
					return "want an error data line with code stream_truncated, then [DONE]"
				}
				return ""
			}},
		{"chat completions, end of stream without data", "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`,
			[]string{cutChatRole + cutChatContent, cutChatContent, ""}, func(tail string) string {
				if gjson.Get(eventData(lastEvent(tail, 1)), "error.code").Str != "stream_truncated" {
					return "want the error event in the empty last chunk"
				}
				return ""
			}},
		{"responses", "/v1/responses", `{"model":"gpt-4o","stream":true,"input":"hi"}`,
			[]string{cutRespCreated + cutRespDelta, cutRespDelta}, func(tail string) string {
				ev := lastEvent(tail, 0)
				d := eventData(ev)
				if !strings.HasPrefix(ev, "event: response.failed\n") || gjson.Get(d, "type").Str != "response.failed" ||
					gjson.Get(d, "response.status").Str != "failed" || gjson.Get(d, "response.error.code").Str != "stream_truncated" {
					return "want a response.failed event with error code stream_truncated"
				}
				return ""
			}},
		{"anthropic", "/v1/messages", `{"model":"claude-sonnet-4","stream":true,"max_tokens":5}`,
			[]string{cutAntStart + cutAntDelta, cutAntDelta}, func(tail string) string {
				ev := lastEvent(tail, 0)
				d := eventData(ev)
				if !strings.HasPrefix(ev, "event: error\n") || gjson.Get(d, "type").Str != "error" ||
					gjson.Get(d, "error.type").Str != "api_error" || !strings.Contains(gjson.Get(d, "error.message").Str, "stream_truncated") {
					return "want an error event of type api_error naming stream_truncated"
				}
				return ""
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, _ := newHost(t, policyJSON(t, testPolicy), nil)
			got, _ := cutStream(t, host, c.path, c.body, sseHeaders, c.chunks...)
			sent := strings.Join(c.chunks, "")
			if !strings.HasPrefix(got, sent) {
				t.Fatalf("the provider's bytes changed: %q", got)
			}
			if msg := c.check(got[len(sent):]); msg != "" {
				t.Fatalf("%s; the client got %q", msg, got)
			}
			// The truncation is still recorded: counted, logged, and on the connection.
			host.Tick()
			if n, err := host.GetCounterMetric(stats.TruncatedStreams.Name); err != nil || n != 1 {
				t.Errorf("%s = %d (%v), want 1", stats.TruncatedStreams.Name, n, err)
			}
			if logs := strings.Join(host.GetWarnLogs(), "\n"); !strings.Contains(logs, "ended without its terminal event; the client got a stream_truncated error event") {
				t.Errorf("warn logs %q", logs)
			}
		})
	}
}

// Nothing is added to a stream that ended with its terminal event or an error event (the
// provider's own end), nor to one whose provider does not count truncated streams.
func TestAStreamThatEndedGetsNothingAdded(t *testing.T) {
	noCount := strings.Replace(testPolicy, "  - id: backup\n", "  - id: backup\n    countTruncatedStreams: false\n", 1)
	cases := []struct {
		name, policy, path, body string
		chunks                   []string
		truncated                uint64 // spillway_truncated_streams_total after it
	}{
		{"chat with [DONE]", testPolicy, "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`,
			[]string{cutChatRole + cutChatContent, cutChatDone}, 0},
		{"chat with [DONE] without its newlines", testPolicy, "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`,
			[]string{cutChatRole + cutChatContent, "data: [DONE]"}, 0},
		{"chat with an error event", testPolicy, "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`,
			[]string{cutChatRole + cutChatContent, cutChatError}, 1},
		{"responses completed", testPolicy, "/v1/responses", `{"model":"gpt-4o","stream":true}`,
			[]string{cutRespCreated + cutRespDelta, cutRespDone}, 0},
		{"anthropic message_stop", testPolicy, "/v1/messages", `{"model":"claude-sonnet-4","stream":true}`,
			[]string{cutAntStart + cutAntDelta, cutAntStop}, 0},
		{"anthropic error event", testPolicy, "/v1/messages", `{"model":"claude-sonnet-4","stream":true}`,
			[]string{cutAntStart + cutAntDelta, cutAntError}, 1},
		{"a provider that does not count truncations", noCount, "/v1/chat/completions", `{"model":"mapped","stream":true}`,
			[]string{cutChatRole + cutChatContent, cutChatContent}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, _ := newHost(t, policyJSON(t, c.policy), nil)
			got, _ := cutStream(t, host, c.path, c.body, sseHeaders, c.chunks...)
			if want := strings.Join(c.chunks, ""); got != want {
				t.Fatalf("the client got %q, want the provider's %q", got, want)
			}
			host.Tick()
			if n, _ := host.GetCounterMetric(stats.TruncatedStreams.Name); n != c.truncated {
				t.Errorf("%s = %d, want %d", stats.TruncatedStreams.Name, n, c.truncated)
			}
		})
	}
}

// The added event never joins the provider's last event: a partial event that began in the
// last chunk is dropped (none of it reached the client), a complete line the provider did
// not end with its blank line is ended first.
func TestTheErrorEventFollowsTheLastCompleteEvent(t *testing.T) {
	cases := []struct {
		name   string
		chunks []string
		kept   string // what the client gets before the error event
	}{
		{"a partial event at the end", []string{cutChatRole + cutChatContent, cutChatContent + cutChatContent[:25]},
			cutChatRole + cutChatContent + cutChatContent},
		{"a partial event that is the whole last chunk", []string{cutChatRole + cutChatContent, cutChatContent[:25]},
			cutChatRole + cutChatContent},
		{"the last event without its blank line", []string{cutChatRole + cutChatContent, strings.TrimSuffix(cutChatContent, "\n")},
			cutChatRole + cutChatContent + cutChatContent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, _ := newHost(t, policyJSON(t, testPolicy), nil)
			got, _ := cutStream(t, host, "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`, sseHeaders, c.chunks...)
			rest, ok := strings.CutPrefix(got, c.kept)
			if !ok || !strings.HasPrefix(rest, `data: {"error":`) || !strings.HasSuffix(rest, "\n\ndata: [DONE]\n\n") {
				t.Fatalf("the client got %q, want %q then the error event", got, c.kept)
			}
		})
	}
}

// A stream's content-length is removed while its headers are held, so that adding to its
// body keeps its framing (Envoy then sends it chunked on HTTP/1.1).
func TestAnEventStreamLosesItsContentLength(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), nil)
	body := cutChatRole + cutChatContent + cutChatContent
	withLength := append([][2]string{{"content-length", "123"}}, sseHeaders...)
	got, hdrs := cutStream(t, host, "/v1/chat/completions", `{"model":"gpt-4o","stream":true}`, withLength,
		cutChatRole+cutChatContent, cutChatContent)
	if v, ok := header(hdrs, "content-length"); ok {
		t.Fatalf("content-length %q left on the stream", v)
	}
	if !strings.HasPrefix(got, body) || !strings.Contains(got[len(body):], "stream_truncated") {
		t.Fatalf("the client got %q", got)
	}
}

// calloutStream fails the request's first attempt with a 429 and answers the failover
// callout that follows with a 200 event stream of body, whole (the host's async client
// hands over a callout's answer once it is complete). It returns the local reply that
// carries the answer to the client.
func calloutStream(t *testing.T, host proxytest.HostEmulator, path, reqBody, body string) *proxytest.LocalHttpResponse {
	t.Helper()
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, chatHeaders(path), false)
	host.CallOnRequestBody(id, []byte(reqBody), true)
	host.CallOnResponseHeaders(id, [][2]string{{":status", "429"}, {"retry-after", "120"}, {"content-type", "application/json"}}, false)
	if a := host.CallOnResponseBody(id, []byte(`{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`), true); a != types.ActionPause {
		t.Fatalf("error body: %v, want held while failing over", a)
	}
	callouts := host.GetCalloutAttributesFromContext(id)
	if len(callouts) != 1 {
		t.Fatalf("%d callouts, want the failover's", len(callouts))
	}
	host.CallOnHttpCallResponse(callouts[0].CalloutID, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"},
		{"content-length", strconv.Itoa(len(body))}}, nil, []byte(body))
	lr := host.GetSentLocalResponse(id)
	if lr == nil || lr.StatusCode != 200 {
		t.Fatalf("reply %+v, want the callout's 200", lr)
	}
	host.CompleteHttpContext(id)
	return lr
}

// twoAnthropicKeys is testPolicy with a second Anthropic key, for an Anthropic failover.
var twoAnthropicKeys = strings.Replace(testPolicy, `      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}`,
	`      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}
      - {id: ant-b, credential: {header: x-api-key, value: "sk-ant-b"}}`, 1)

// Issue 19: a failover callout's answer is a stream too. One the provider ended cleanly
// without its terminal event reaches the client with the same error event a streamed one
// ends with (the API's own error shape, code stream_truncated), and is recorded as the same
// truncation on the connection that answered; a whole stream, or one ended by the provider's
// error event, gets nothing added (the error event's stream is still a truncation, as
// streamed: TestAStreamThatEndedGetsNothingAdded), and a provider that does not count
// truncations gets neither.
func TestACalloutStreamIsCheckedForItsEnd(t *testing.T) {
	noCount := strings.Replace(testPolicy, "  - id: openai\n", "  - id: openai\n    countTruncatedStreams: false\n", 1)
	chat := `{"model":"gpt-4o","stream":true,"messages":[]}`
	ant := `{"model":"claude-sonnet-4","stream":true,"max_tokens":5,"messages":[]}`
	cases := []struct {
		name, policy, path, reqBody string
		stream                      string // the callout's answer
		api                         string // the added event's API shape ("": nothing added)
		truncated                   uint64 // spillway_truncated_streams_total after it
		connection                  string // the connection the truncation is recorded on
	}{
		{"chat completions, cut", testPolicy, "/v1/chat/completions", chat, cutChatRole + cutChatContent, "chat", 1, "key-b"},
		{"chat completions, cut inside an event", testPolicy, "/v1/chat/completions", chat,
			cutChatRole + cutChatContent + cutChatContent[:25], "chat", 1, "key-b"},
		{"anthropic, cut", twoAnthropicKeys, "/v1/messages", ant, cutAntStart + cutAntDelta, "anthropic", 1, "ant-b"},
		{"chat completions, whole", testPolicy, "/v1/chat/completions", chat, cutChatRole + cutChatContent + cutChatDone, "", 0, ""},
		{"anthropic, whole", twoAnthropicKeys, "/v1/messages", ant, cutAntStart + cutAntDelta + cutAntStop, "", 0, ""},
		{"chat completions, the provider's error event after content", testPolicy, "/v1/chat/completions", chat,
			cutChatRole + cutChatContent + cutChatError, "", 1, "key-b"},
		{"anthropic, the provider's error event after content", twoAnthropicKeys, "/v1/messages", ant,
			cutAntStart + cutAntDelta + cutAntError, "", 1, "ant-b"},
		{"a provider that does not count truncations", noCount, "/v1/chat/completions", chat, cutChatRole + cutChatContent, "", 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			host, _ := newHost(t, policyJSON(t, c.policy), nil)
			lr := calloutStream(t, host, c.path, c.reqBody, c.stream)
			got := string(lr.Data)
			kept := c.stream
			if i := strings.LastIndex(kept, "\n\n"); c.api != "" && i >= 0 {
				kept = kept[:i+2] // a partial last event is dropped, as streamed
			}
			added, ok := strings.CutPrefix(got, kept)
			switch {
			case !ok:
				t.Fatalf("the provider's bytes changed: %q", got)
			case c.api == "" && added != "":
				t.Fatalf("added %q to a stream that ended", added)
			case c.api == "chat" && (gjson.Get(eventData(lastEvent(added, 1)), "error.code").Str != "stream_truncated" || lastEvent(added, 0) != "data: [DONE]"):
				t.Fatalf("added %q, want an error data line with code stream_truncated, then [DONE]", added)
			case c.api == "anthropic" && (!strings.HasPrefix(added, "event: error\n") || gjson.Get(eventData(added), "error.type").Str != "api_error" ||
				!strings.Contains(gjson.Get(eventData(added), "error.message").Str, "stream_truncated")):
				t.Fatalf("added %q, want an error event of type api_error naming stream_truncated", added)
			}
			if _, ok := header(lr.Headers, "content-length"); ok {
				t.Errorf("the reply kept the answer's content-length: %v", lr.Headers)
			}
			host.Tick()
			if n, err := host.GetCounterMetric(stats.TruncatedStreams.Name); err != nil || n != c.truncated {
				t.Errorf("%s = %d (%v), want %d", stats.TruncatedStreams.Name, n, err, c.truncated)
			}
			// The decision log's line (README, "Logs") names the connection that answered.
			line := ""
			for _, l := range host.GetInfoLogs() {
				if strings.Contains(l, "reason=stream_truncated") {
					line = l
				}
			}
			if c.connection == "" && line != "" || c.connection != "" && !strings.Contains(line, " connection="+c.connection+" ") {
				t.Errorf("truncation's decision line %q, want it on %q", line, c.connection)
			}
		})
	}
}
