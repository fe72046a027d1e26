package main

// A committed stream the provider cuts off, on the built module under hostsim: a clean end
// without the terminal event gets an error event in the client's API shape
// (plugin/internal/filter/streamcut.go); a reset, a client gone, or a stream that ended
// properly get nothing added.

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// The Responses API's events (OpenAI's API reference, "Streaming events").
const (
	respCreatedEvent = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"status\":\"in_progress\"}}\n\n"
	respDeltaEvent   = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"
	respDoneEvent    = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\"}}\n\n"
)

// addedAfter is what the client got after the provider's bytes sent (false when the
// provider's bytes did not reach it as sent).
func addedAfter(r *hostsim.Response, sent ...string) (string, bool) {
	return strings.CutPrefix(string(r.Body), strings.Join(sent, ""))
}

// truncationErr checks the event the filter added to a cut stream against the API's own
// error event shape, with the code the README lists (stream_truncated): "" when right.
func truncationErr(api, added string) string {
	events := strings.Split(strings.TrimSuffix(added, "\n\n"), "\n\n")
	data := func(ev string) string {
		_, d, _ := strings.Cut(ev, "data: ")
		return d
	}
	switch api {
	case "chat":
		if len(events) != 2 || events[1] != "data: [DONE]" || gjson.Get(data(events[0]), "error.code").Str != "stream_truncated" {
			return "want data: {\"error\":{…\"code\":\"stream_truncated\"}} then data: [DONE]"
		}
	case "responses":
		if len(events) != 1 || !strings.HasPrefix(events[0], "event: response.failed\n") ||
			gjson.Get(data(events[0]), "response.error.code").Str != "stream_truncated" {
			return "want event: response.failed with response.error.code stream_truncated"
		}
	case "anthropic":
		if len(events) != 1 || !strings.HasPrefix(events[0], "event: error\n") ||
			gjson.Get(data(events[0]), "error.type").Str != "api_error" ||
			!strings.Contains(gjson.Get(data(events[0]), "error.message").Str, "stream_truncated") {
			return "want event: error of type api_error naming stream_truncated"
		}
	}
	return ""
}

func TestScenarioACutStreamEndsWithAnErrorEventInItsAPIsShape(t *testing.T) {
	cases := []struct {
		name, api string
		req       *hostsim.Request
		cred      string   // the credential that answers
		events    []string // what the provider sends before its clean end
		next      string   // who answers the next request: the truncation cooled the first key
	}{
		{"chat completions", "chat", chatReq("gpt-4o"), "sk-a", []string{chatRoleEvent, chatContentEvent},
			"openai/key-b/gpt-4o/1"},
		{"chat completions, end of stream in an empty last chunk", "chat", chatReq("gpt-4o"), "sk-a",
			[]string{chatRoleEvent, chatContentEvent, ""}, "openai/key-b/gpt-4o/1"},
		{"responses", "responses", llmRequest("/v1/responses", `{"model":"gpt-4o","input":"hi","stream":true}`), "sk-a",
			[]string{respCreatedEvent, respDeltaEvent}, "openai/key-b/gpt-4o/1"},
		{"anthropic messages", "anthropic", llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`),
			"sk-ant", []string{antStart, antDelta}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, scenarioPolicy, 2)
			w.fakes.set(c.cred, func(upstreamCall) *hostsim.UpstreamResponse { return sse(c.events...) })
			resp := w.run(0, c.req)
			added, ok := addedAfter(resp, c.events...)
			if resp.StatusCode != 200 || resp.Reset != "" || !ok {
				t.Fatalf("%d reset %q: the client got %q", resp.StatusCode, resp.Reset, resp.Body)
			}
			if msg := truncationErr(c.api, added); msg != "" {
				t.Fatalf("%s; added %q", msg, added)
			}
			// The truncation is recorded as before: counted, on its connection.
			if n := w.metric(stats.TruncatedStreams.Name); n != 1 {
				t.Errorf("truncated streams = %d", n)
			}
			if c.next != "" {
				expect(t, "next", w.run(1, chatReq("gpt-4o")), 200, c.next)
			}
			w.noStreamsLeft()
		})
	}
}

// A stream that ended with its terminal event, or with the provider's own error event, gets
// nothing added: the client gets the provider's bytes exactly.
func TestScenarioAStreamThatEndedGetsNothingAdded(t *testing.T) {
	cases := []struct {
		name   string
		req    *hostsim.Request
		cred   string
		events []string
	}{
		{"chat [DONE]", chatReq("gpt-4o"), "sk-a", []string{chatRoleEvent, chatContentEvent, chatDoneEvent}},
		{"chat error after content", chatReq("gpt-4o"), "sk-a", []string{chatRoleEvent, chatContentEvent, chatErrorEvent}},
		{"responses completed", llmRequest("/v1/responses", `{"model":"gpt-4o","input":"hi","stream":true}`), "sk-a",
			[]string{respCreatedEvent, respDeltaEvent, respDoneEvent}},
		{"anthropic message_stop", llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`),
			"sk-ant", []string{antStart, antDelta, antStop}},
		{"anthropic error after content", llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`),
			"sk-ant", []string{antStart, antDelta, antOverloaded}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, scenarioPolicy, 1)
			w.fakes.set(c.cred, func(upstreamCall) *hostsim.UpstreamResponse { return sse(c.events...) })
			resp := w.run(0, c.req)
			if added, ok := addedAfter(resp, c.events...); !ok || added != "" || resp.Reset != "" {
				t.Fatalf("reset %q: the client got %q, want the provider's bytes only", resp.Reset, resp.Body)
			}
			w.noStreamsLeft()
		})
	}
}

// What cannot be added to: a stream the upstream resets after its headers (the router
// resets the client's stream, README "How Spillway handles a request"), one whose client
// went away, and one the upstream ends with trailers. Each keeps what it had; the reset and
// the trailers still count as truncations, the client that left does not.
func TestScenarioNothingIsAddedWhereTheStreamCannotTakeIt(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 2)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent)
		r.Reset = &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteReset, After: 100 * time.Millisecond}
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	if added, ok := addedAfter(resp, chatRoleEvent, chatContentEvent); resp.Reset == "" || !ok || added != "" {
		t.Fatalf("upstream reset: reset %q, client got %q", resp.Reset, resp.Body)
	}

	w.fakes.set("sk-b", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent, chatContentEvent)
		r.ChunkDelays = []time.Duration{0, 0, 5 * time.Second}
		return r
	})
	req := chatReq("gpt-4o")
	req.ResetAfter = 2 * time.Second
	resp = w.run(1, req)
	if added, ok := addedAfter(resp, chatRoleEvent, chatContentEvent); resp.Reset == "" || !ok || added != "" {
		t.Fatalf("client gone: reset %q, client got %q", resp.Reset, resp.Body)
	}

	w.advance(time.Minute) // key A's cooldown runs out
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent)
		r.Trailers = [][2]string{{"x-trailer", "1"}}
		return r
	})
	resp = w.run(0, chatReq("gpt-4o"))
	if added, ok := addedAfter(resp, chatRoleEvent, chatContentEvent); resp.Reset != "" || !ok || added != "" {
		t.Fatalf("trailers: reset %q, client got %q", resp.Reset, resp.Body)
	}
	if n := w.metric(stats.TruncatedStreams.Name); n != 2 {
		t.Fatalf("truncated streams = %d, want the reset's and the trailers'", n)
	}
	w.noStreamsLeft()
}

// A stream sent with a content-length (a gateway's, a fake's) loses it at its held headers,
// so the added event is no byte past what the headers declare.
func TestScenarioACutStreamWithAContentLengthLosesIt(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	body := chatRoleEvent + chatContentEvent
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent)
		r.Headers = append(r.Headers, [2]string{"content-length", strconv.Itoa(len(body))})
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	if v := header(resp.Headers, "content-length"); v != "" {
		t.Fatalf("content-length %q reached the client", v)
	}
	added, ok := addedAfter(resp, body)
	if !ok || truncationErr("chat", added) != "" {
		t.Fatalf("the client got %q", resp.Body)
	}
}

// Header-routed mode watches its streams go by (headermode.go) through the same body
// callback: a cut stream ends with the error event there too, whether its end comes after
// the watched first event or with it.
func TestScenarioHeaderModeEndsACutStreamToo(t *testing.T) {
	for _, c := range []struct {
		name   string
		chunks []string
	}{
		{"after the first event", []string{chatRoleEvent, chatContentEvent, chatContentEvent}},
		{"in the chunk of the first event", []string{chatRoleEvent + chatContentEvent}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, headerPolicy, 1, noOption)
			w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return sse(c.chunks...) })
			resp := w.run(0, headerChat("gpt-4o", "gpt-4o"))
			added, ok := addedAfter(resp, c.chunks...)
			if resp.StatusCode != 200 || !ok || truncationErr("chat", added) != "" {
				t.Fatalf("%d: the client got %q", resp.StatusCode, resp.Body)
			}
			if n := w.metric(stats.TruncatedStreams.Name); n != 1 {
				t.Errorf("truncated streams = %d", n)
			}
			w.noStreamsLeft()
		})
	}
}

// The end-of-stream check costs a stream that ended with its terminal event no host call:
// its last body callback calls the host as often as one of its middle chunks does.
func TestScenarioAnEndedStreamsLastChunkCostsNoHostCallMore(t *testing.T) {
	w := newWorld(t, scenarioPolicy, 1)
	vm := w.host.Worker(0)
	id := vm.InitializeHttpContext()
	req := chatReq("gpt-4o")
	vm.CallOnRequestHeaders(id, req.Headers, false)
	for i, c := range req.BodyChunks {
		vm.CallOnRequestBody(id, c, i == len(req.BodyChunks)-1)
	}
	if a := vm.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false); a != types.ActionPause {
		t.Fatalf("stream headers: %v", a)
	}
	vm.CallOnResponseBody(id, []byte(chatRoleEvent+chatContentEvent), false)
	chunk := func(body string, eos bool) hostsim.HostCallCounts {
		c0 := w.host.Host.HostCalls()
		if a := vm.CallOnResponseBody(id, []byte(body), eos); a != types.ActionContinue {
			t.Fatalf("chunk: %v", a)
		}
		return w.host.Host.HostCalls().Sub(c0)
	}
	middle := chunk(chatContentEvent+chatContentEvent, false)
	last := chunk(chatContentEvent+chatDoneEvent, true)
	if last.Total() != middle.Total() || last.Total() == 0 {
		t.Fatalf("host calls: last chunk %v, a middle chunk %v", last, middle)
	}
	vm.CompleteHttpContext(id)
	w.noStreamsLeft()
}

// calloutPolicy is scenarioPolicy with a second Anthropic key and failover by callout
// (failover.via: callout, whatever the default), so each API has a key to fail over to.
var calloutPolicy = strings.Replace(scenarioPolicy, `      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}`,
	`      - {id: ant-a, credential: {header: x-api-key, value: "sk-ant"}}
      - {id: ant-b, credential: {header: x-api-key, value: "sk-ant-b"}}`, 1) + `
resilience:
  failover: {via: callout}
`

// Issue 19: a stream that reaches the client as a failover callout's answer (its whole body
// one local reply) is checked for its end as a streamed one is. The first key's 429 (its
// Retry-After 1 s) sends the request to the second by callout; the second ends its stream
// cleanly without the terminal event: the client gets the stream with the API's error event
// added, and the truncation is counted and cools the second key, so the next request goes
// elsewhere — to the backup gateway, or, on the Anthropic route, to the first key once its
// second is over (comboCooldownWait). A whole stream gets nothing added and cools nothing:
// the next request goes to the second key.
func TestScenarioACalloutStreamCutByTheProviderEndsWithAnErrorEvent(t *testing.T) {
	antReq := func() *hostsim.Request {
		return llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`)
	}
	chat := func() *hostsim.Request { return chatReq("gpt-4o") }
	cases := []struct {
		name, api    string
		req          func() *hostsim.Request
		first, spare string   // the credentials that fail once and that answer by callout
		events       []string // the spare's stream
		cut          bool     // the stream lacks its terminal event
		answered     string   // x-spillway-* of the reply
		next         string   // who answers the next request
	}{
		{"chat completions, cut", "chat", chat, "sk-a", "sk-b",
			[]string{chatRoleEvent, chatContentEvent}, true, "openai/key-b/gpt-4o/2", "backup/backup-a/openai/gpt-4o/1"},
		{"chat completions, whole", "chat", chat, "sk-a", "sk-b",
			[]string{chatRoleEvent, chatContentEvent, chatDoneEvent}, false, "openai/key-b/gpt-4o/2", "openai/key-b/gpt-4o/1"},
		{"anthropic messages, cut", "anthropic", antReq, "sk-ant", "sk-ant-b",
			[]string{antStart, antDelta}, true, "anthropic/ant-b/claude-sonnet-4/2", "anthropic/ant-a/claude-sonnet-4/1"},
		{"anthropic messages, whole", "anthropic", antReq, "sk-ant", "sk-ant-b",
			[]string{antStart, antDelta, antStop}, false, "anthropic/ant-b/claude-sonnet-4/2", "anthropic/ant-b/claude-sonnet-4/1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, calloutPolicy, 2)
			var failed atomic.Bool
			w.fakes.set(c.first, func(call upstreamCall) *hostsim.UpstreamResponse {
				if failed.CompareAndSwap(false, true) {
					return rateLimited("1")(call)
				}
				return chatOK(call)
			})
			w.fakes.set(c.spare, func(upstreamCall) *hostsim.UpstreamResponse { return sse(c.events...) })
			resp := w.run(0, c.req())
			expect(t, "failover", resp, 200, c.answered)
			if calls := w.fakes.received(); len(calls) != 2 || !calls[1].viaCallout {
				t.Fatalf("upstream calls %+v, want the spare's by callout", calls)
			}
			added, ok := addedAfter(resp, c.events...)
			switch {
			case !ok:
				t.Fatalf("the client got %q", resp.Body)
			case c.cut && truncationErr(c.api, added) != "":
				t.Fatalf("%s; added %q", truncationErr(c.api, added), added)
			case !c.cut && added != "":
				t.Fatalf("added %q to a whole stream", added)
			}
			want := uint64(0)
			if c.cut {
				want = 1
			}
			if n := w.metric(stats.TruncatedStreams.Name); n != want {
				t.Errorf("truncated streams = %d, want %d", n, want)
			}
			expect(t, "next", w.run(1, c.req()), 200, c.next)
			w.noStreamsLeft()
		})
	}
}
