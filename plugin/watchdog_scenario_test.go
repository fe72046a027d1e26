package main

// The stream watchdogs (guide §6 throughput, guide §2 content stall) on build/spillway.wasm
// in hostsim, on the virtual clock: what the client gets when a committed stream is ended
// (its API's error event, then a reset), what is recorded, and the streams that must pass
// untouched.

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	antstream "github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"
	"github.com/openai/openai-go/v3"
	oaistream "github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// watchdogPolicy is scenarioPolicy with the watchdogs set by resilience (YAML under
// resilience:, indented two spaces) and a 1 s first-event hold.
func watchdogPolicy(resilience string) string {
	return scenarioPolicy + "resilience:\n  streamRecovery:\n    firstEvent: {timeoutMs: 1000}\n" + resilience
}

const (
	// throughputOn: verdicts from 6 s (2 s warm-up + a 4 s window), a window needs 40 bytes.
	throughputOn = "    throughputWatchdog: {enabled: true, warmupMs: 2000, windowMs: 4000, minBytesPerSecond: 10, minOutputBytes: 1}\n"
	// stallOn: 5 s without model output is a stall.
	stallOn = "    contentStall: {enabled: true, timeoutMs: 5000}\n"
)

// paced is a 200 event stream of events, the first at once, then one every gap.
func paced(gap time.Duration, events ...string) *hostsim.UpstreamResponse {
	r := sse(events...)
	r.ChunkDelays = make([]time.Duration, len(events))
	for i := 1; i < len(events); i++ {
		r.ChunkDelays[i] = gap
	}
	return r
}

// repeat is n copies of event.
func repeat(event string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = event
	}
	return out
}

func sseBody(body []byte) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(string(body)))}
}

// chatStreamError reads a chat stream the way openai-go does: the text it delivers and the
// error it ends with.
func chatStreamError(body []byte) (string, error) {
	s := oaistream.NewStream[openai.ChatCompletionChunk](oaistream.NewDecoder(sseBody(body)), nil)
	var text string
	for s.Next() {
		for _, c := range s.Current().Choices {
			text += c.Delta.Content
		}
	}
	return text, s.Err()
}

// anthropicStreamError reads a Messages stream the way anthropic-sdk-go does.
func anthropicStreamError(body []byte) (string, error) {
	s := antstream.NewStream[anthropic.MessageStreamEventUnion](antstream.NewDecoder(sseBody(body)), nil)
	var text string
	for s.Next() {
		if d := s.Current().AsContentBlockDelta(); d.Delta.Type == "text_delta" {
			text += d.Delta.Text
		}
	}
	return text, s.Err()
}

// lastDataAt is when the last body bytes reached the client, since the exchange's start.
func lastDataAt(r *hostsim.Response) time.Duration {
	var at time.Duration
	for _, e := range r.Received {
		if e.Kind == hostsim.ClientData {
			at = e.At.Sub(r.Start)
		}
	}
	return at
}

func TestWatchdogEndsASlowStreamWithAnErrorEvent(t *testing.T) {
	// Two bytes of text every 2 s: 4 bytes a window, where 40 are needed.
	slow := append([]string{chatRoleEvent}, repeat(chatContentEvent, 30)...)
	for _, c := range []struct {
		name         string // the variant
		resilience   string // the policy's resilience block
		chunk        int    // the stream is cut into chunks of this many bytes (0: one event a chunk)
		nextVia      string // where the next request goes
		stallCooling bool   // streamStallCooldown on
	}{
		{"events in their own chunks", throughputOn, 0, "openai/key-a/gpt-4o/1", false},
		{"chunks that split events", throughputOn, 37, "openai/key-a/gpt-4o/1", false},
		{"with streamStallCooldown the stall cools the key", throughputOn + "  connectionCooldown: {streamStallCooldown: {enabled: true}}\n",
			0, "openai/key-b/gpt-4o/1", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, watchdogPolicy(c.resilience), 1)
			w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
				r := paced(2*time.Second, slow...)
				if c.chunk > 0 {
					whole := strings.Join(slow, "")
					r = sse()
					for i := 0; i < len(whole); i += c.chunk {
						r.BodyChunks = append(r.BodyChunks, []byte(whole[i:min(i+c.chunk, len(whole))]))
						// about one event every 2 s, as above
						r.ChunkDelays = append(r.ChunkDelays, time.Duration(c.chunk)*2*time.Second/time.Duration(len(chatContentEvent)))
					}
				}
				return r
			})
			resp := w.run(0, chatReq("gpt-4o"))
			expect(t, "slow stream", resp, 200, "openai/key-a/gpt-4o/1")
			text, err := chatStreamError(resp.Body)
			var se *oaistream.StreamError
			if !errors.As(err, &se) || !strings.Contains(se.Message, "STREAM_THROUGHPUT_TOO_LOW") || text == "" {
				t.Fatalf("the SDK read %q and ended with %v; body %q", text, err, resp.Body)
			}
			if !strings.HasSuffix(string(resp.Body), "data: [DONE]\n\n") {
				t.Fatalf("the error event is not the end of what the client got: %q", resp.Body)
			}
			// No verdict before the warm-up plus one full window (6 s), and the error event
			// with the first chunk that could carry it; then the stream is reset at the next
			// tick, before the upstream's next event.
			if at := lastDataAt(resp); at < 6*time.Second || at > 8*time.Second {
				t.Fatalf("the error event reached the client at %v", at)
			}
			if resp.Reset != hostsim.DetailsWasmCloseStream || resp.Details != hostsim.DetailsViaUpstream {
				t.Fatalf("reset %q details %q, want a reset by the filter of an upstream response", resp.Reset, resp.Details)
			}
			if got := strings.Count(text, "Hi"); got >= 30 {
				t.Fatalf("the whole stream went through (%d events)", got)
			}
			if n := w.watchdogAborts(); n != 1 {
				t.Fatalf("watchdog aborts = %d", n)
			}
			if n := w.metric("spillway_truncated_streams_total"); n != 0 {
				t.Fatalf("an ended stream counted as truncated %d times", n)
			}
			logs := strings.Join(w.host.Host.LogsAt(hostsim.LogWarn), "\n")
			if !strings.Contains(logs, "watchdog (throughput too low) ended the stream from openai/key-a") {
				t.Fatalf("not logged: %s", logs)
			}
			// A stall is recorded without cooling the key unless streamStallCooldown says so.
			w.fakes.set("sk-a", nil)
			expect(t, "next request", w.run(0, chatReq("gpt-4o")), 200, c.nextVia)
			w.noStreamsLeft()
		})
	}
}

func TestWatchdogEndsAHeartbeatOnlyStream(t *testing.T) {
	// Anthropic's prelude, then only pings: held for the 1 s first-event bound, then let go.
	stream := append([]string{antStart, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"},
		repeat("event: ping\ndata: {\"type\": \"ping\"}\n\n", 40)...)
	for _, c := range []struct {
		name       string        // which watchdog is on
		resilience string        // the policy's resilience block
		code       string        // the error event's code
		earliest   time.Duration // no error event before
	}{
		{"the throughput watchdog", throughputOn, "STREAM_THROUGHPUT_TOO_LOW", 6 * time.Second},
		{"the content stall", stallOn, "STREAM_CONTENT_STALL", 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, watchdogPolicy(c.resilience), 1)
			w.fakes.set("sk-ant", func(upstreamCall) *hostsim.UpstreamResponse { return paced(time.Second, stream...) })
			resp := w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`))
			expect(t, "heartbeat-only stream", resp, 200, "anthropic/ant-a/claude-sonnet-4/1")
			_, err := anthropicStreamError(resp.Body)
			if err == nil || !strings.Contains(err.Error(), c.code) || !strings.Contains(err.Error(), "timeout_error") {
				t.Fatalf("the SDK ended with %v; body %q", err, resp.Body)
			}
			if at := lastDataAt(resp); at < c.earliest || at > c.earliest+2*time.Second {
				t.Fatalf("the error event reached the client at %v", at)
			}
			if resp.Reset == "" {
				t.Fatal("the stream was not closed")
			}
			if n := w.watchdogAborts(); n != 1 {
				t.Fatalf("watchdog aborts = %d", n)
			}
			w.noStreamsLeft()
		})
	}
}

func TestWatchdogSuspendsJudgementDuringAToolCall(t *testing.T) {
	toolStart := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n"
	toolArgs := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n"
	toolDone := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
	// A tool call that starts, then pauses 20 s with only keep-alives (far past 6 s, with
	// no text at all), then finishes.
	stream := append([]string{chatRoleEvent, toolStart}, repeat(": keep-alive\n\n", 10)...)
	stream = append(stream, toolArgs, toolDone, chatDoneEvent)
	w := newWorld(t, watchdogPolicy(throughputOn), 1)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return paced(2*time.Second, stream...) })
	resp := w.run(0, chatReq("gpt-4o"))
	expect(t, "tool call", resp, 200, "openai/key-a/gpt-4o/1")
	if string(resp.Body) != strings.Join(stream, "") || resp.Reset != "" {
		t.Fatalf("reset %q, client got %q", resp.Reset, resp.Body)
	}
	if n := w.watchdogAborts(); n != 0 {
		t.Fatalf("watchdog aborts = %d", n)
	}
	w.noStreamsLeft()
}

func TestWatchdogReasoningFramesRestartTheStallBudget(t *testing.T) {
	thinkStart := "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n"
	thinking := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"\"}}\n\n"
	stop := "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
	ping := "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	req := func() *hostsim.Request {
		return llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`)
	}
	t.Run("a model that thinks for 30 s in empty thinking frames is kept", func(t *testing.T) {
		// One empty thinking frame every 2 s for 30 s, six times the 5 s budget, then text.
		stream := append([]string{antStart, thinkStart}, repeat(thinking, 15)...)
		stream = append(stream, stop, antDelta, antStop)
		w := newWorld(t, watchdogPolicy(stallOn+throughputOn), 1)
		w.fakes.set("sk-ant", func(upstreamCall) *hostsim.UpstreamResponse { return paced(2*time.Second, stream...) })
		resp := w.run(0, req())
		if string(resp.Body) != strings.Join(stream, "") || resp.Reset != "" {
			t.Fatalf("reset %q, client got %q", resp.Reset, resp.Body)
		}
		if n := w.watchdogAborts(); n != 0 {
			t.Fatalf("watchdog aborts = %d", n)
		}
	})
	t.Run("a model that stops thinking and only pings stalls", func(t *testing.T) {
		// Thinking frames for 6 s, then pings: the stall comes 5 s after the last frame.
		stream := append([]string{antStart, thinkStart}, repeat(thinking, 3)...)
		stream = append(stream, repeat(ping, 20)...)
		w := newWorld(t, watchdogPolicy(stallOn), 1)
		w.fakes.set("sk-ant", func(upstreamCall) *hostsim.UpstreamResponse { return paced(2*time.Second, stream...) })
		resp := w.run(0, req())
		_, err := anthropicStreamError(resp.Body)
		if err == nil || !strings.Contains(err.Error(), "STREAM_CONTENT_STALL") {
			t.Fatalf("the SDK ended with %v; body %q", err, resp.Body)
		}
		// The last thinking frame is at 8 s; the first ping past 13 s carries the error.
		if at := lastDataAt(resp); at < 13*time.Second || at > 15*time.Second {
			t.Fatalf("the error event reached the client at %v", at)
		}
		w.noStreamsLeft()
	})
}

func TestWatchdogResetsAStreamThatSendsNothingAtAll(t *testing.T) {
	// After its first content the upstream goes silent for a minute.
	w := newWorld(t, watchdogPolicy(stallOn), 1)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse {
		r := sse(chatRoleEvent, chatContentEvent, chatContentEvent, chatDoneEvent)
		r.ChunkDelays = []time.Duration{0, 0, time.Minute, 0}
		return r
	})
	resp := w.run(0, chatReq("gpt-4o"))
	// No chunk can carry an error event: 5 s of stall, 5 s of grace, then the reset.
	if string(resp.Body) != chatRoleEvent+chatContentEvent || resp.Reset != hostsim.DetailsWasmCloseStream {
		t.Fatalf("reset %q, client got %q", resp.Reset, resp.Body)
	}
	if end := resp.Received[len(resp.Received)-1]; end.At.Sub(resp.Start) < 10*time.Second || end.At.Sub(resp.Start) > 12*time.Second {
		t.Fatalf("reset at %v, want 10 s (stall and grace) plus at most a tick", end.At.Sub(resp.Start))
	}
	if n := w.watchdogAborts(); n != 1 {
		t.Fatalf("watchdog aborts = %d", n)
	}
	if n := w.metric("spillway_truncated_streams_total"); n != 0 {
		t.Fatalf("truncated = %d", n)
	}
	w.noStreamsLeft()
}

func TestWatchdogNeverJudgesAFastStream(t *testing.T) {
	fast := "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a fast token stream\"},\"finish_reason\":null}]}\n\n"
	// 19 bytes every 200 ms (95 B/s, where 10 are needed) for 20 s.
	stream := append(append([]string{chatRoleEvent}, repeat(fast, 100)...), chatDoneEvent)
	w := newWorld(t, watchdogPolicy(throughputOn+stallOn), 1)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return paced(200*time.Millisecond, stream...) })
	resp := w.run(0, chatReq("gpt-4o"))
	if string(resp.Body) != strings.Join(stream, "") || resp.Reset != "" {
		t.Fatalf("reset %q, client got %d bytes", resp.Reset, len(resp.Body))
	}
	if n := w.watchdogAborts(); n != 0 {
		t.Fatalf("watchdog aborts = %d", n)
	}
	w.noStreamsLeft()
}

func TestWatchdogIsOffByDefault(t *testing.T) {
	// The slow stream and the heartbeat-only stream of the tests above, with the default
	// policy: both pass whole.
	slow := append(append([]string{chatRoleEvent}, repeat(chatContentEvent, 10)...), chatDoneEvent)
	w := newWorld(t, scenarioPolicy, 1)
	w.fakes.set("sk-a", func(upstreamCall) *hostsim.UpstreamResponse { return paced(2*time.Second, slow...) })
	resp := w.run(0, chatReq("gpt-4o"))
	if string(resp.Body) != strings.Join(slow, "") || resp.Reset != "" {
		t.Fatalf("reset %q, client got %q", resp.Reset, resp.Body)
	}
	pings := append([]string{antStart}, repeat("event: ping\ndata: {\"type\": \"ping\"}\n\n", 20)...)
	pings = append(pings, antDelta, antStop)
	w.fakes.set("sk-ant", func(upstreamCall) *hostsim.UpstreamResponse { return paced(time.Second, pings...) })
	resp = w.run(0, llmRequest("/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[],"stream":true}`))
	if string(resp.Body) != strings.Join(pings, "") || resp.Reset != "" {
		t.Fatalf("reset %q, client got %q", resp.Reset, resp.Body)
	}
	if n := w.watchdogAborts(); n != 0 {
		t.Fatalf("watchdog aborts = %d", n)
	}
	if logs := strings.Join(w.host.Host.LogsAt(hostsim.LogWarn), "\n"); strings.Contains(logs, "watchdog") {
		t.Fatalf("the watchdog logged: %s", logs)
	}
	w.noStreamsLeft()
}

// The watchdogs' cost on a committed stream, per chunk, on the built module: one clock read
// (a WASI clock_time_get) and no guest allocation more than with them off, with the same
// ticks running meanwhile.
func TestWatchdogCostsOneClockReadPerChunk(t *testing.T) {
	const chunks = 200
	measure := func(policy string) (allocs uint64, calls hostsim.HostCallCounts) {
		w := newWorld(t, policy, 1)
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
		for range 20 { // warm the buffers
			w.advance(10 * time.Millisecond)
			vm.CallOnResponseBody(id, []byte(chatContentEvent), false)
		}
		// Only the body callbacks are counted: the ticks that move the clock between them do
		// other work (the gauge publisher's readings, metric flushes).
		calls = hostsim.HostCallCounts{}
		for range chunks {
			w.advance(10 * time.Millisecond)
			a0, err := w.host.Host.GuestHeapAllocs()
			if err != nil {
				t.Fatal(err)
			}
			c0 := w.host.Host.HostCalls()
			if a := vm.CallOnResponseBody(id, []byte(chatContentEvent+chatContentEvent), false); a != types.ActionContinue {
				t.Fatalf("chunk: %v", a)
			}
			a1, _ := w.host.Host.GuestHeapAllocs()
			allocs += a1 - a0
			for name, n := range w.host.Host.HostCalls().Sub(c0) {
				calls[name] += n
			}
		}
		vm.CallOnResponseBody(id, []byte(chatDoneEvent), true)
		vm.CompleteHttpContext(id)
		w.noStreamsLeft()
		return allocs, calls
	}
	offAllocs, off := measure(scenarioPolicy)
	onAllocs, on := measure(watchdogPolicy(throughputOn + stallOn))
	const clock = "wasi_snapshot_preview1.clock_time_get"
	if onAllocs != offAllocs || on[clock]-off[clock] != chunks || on.Total()-off.Total() != chunks {
		t.Fatalf("over %d chunks: guest allocations %d on, %d off; host calls on %v, off %v", chunks, onAllocs, offAllocs, on, off)
	}
}

// watchdogAborts sums spillway_connection_watchdog_aborts_total over every connection and
// reason, once every VM has flushed.
func (w *world) watchdogAborts() uint64 {
	w.t.Helper()
	w.metric("spillway_attempts_total") // ticks every VM: their counts are flushed
	var n uint64
	for _, m := range w.host.Host.Metrics() {
		if strings.HasSuffix(m.Name, stats.ConnectionWatchdogAborts.Name) {
			n += m.Value
		}
	}
	return n
}
