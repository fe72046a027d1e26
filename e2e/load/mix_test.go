package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/policies"
)

// abortMode is how a client walks away from its request.
type abortMode int

const (
	abortNone abortMode = iota
	// abortAfterEvents: the client reads the 200 stream's first abortEvents content events,
	// then cancels: a stream under way, its slot held.
	abortAfterEvents
	// abortAfterSend: the client cancels abortSendDelay after its request went out, while
	// the upstream holds its answer back for a second (x-fake-delay-ms).
	abortAfterSend
)

// answerLimit bounds the wait for one answer, well past the slowest the load policy allows:
// the longest wait is a connection's queue (requestQueue.maxWaitMs, 30 s), the fakes answer
// at once unless asked for a delay (at most 1 s here), a stream lasts under a second, and a
// rate-limited request waits out Retry-After: 1 at most once per attempt
// (failover.maxAttempts, 3). A request without an answer by then is stuck in the proxy.
const answerLimit = time.Minute

// errStuck is the error of a request that got no answer within answerLimit.
var errStuck = errors.New("stuck: no answer within " + answerLimit.String())

// How the aborting kinds walk away.
const (
	abortEvents    = 2
	abortSendDelay = 50 * time.Millisecond
)

// kind is one kind of request in the mix: what it sends and what it may get back.
type kind struct {
	name      string            // the kind's name in the report
	weight    int               // its share of the mix (out of the sum of the weights)
	path      string            // the request path
	model     string            // the requested model
	stream    bool              // "stream": true: the answer is an event stream
	header    map[string]string // x-fake-* headers: the fault the request asks the fakes for
	abort     abortMode         // how the client walks away (abortNone: it reads the answer)
	statuses  []int             // the statuses its answer may have
	providers []string          // the providers whose 2xx it may get (x-spillway-provider)
	upstream  map[int]bool      // the error statuses a fake may answer it that reach the client as they are
}

// The mix. The faults hit only the providers the kinds that ask for them use, so a kind's
// outcomes are known whatever else runs at the same time: openai's 429s and 5xx are aimed
// at one key (x-fake-key-suffix) and failed over, and openrouter, never faulted and
// uncapped, always takes a request the OpenAI keys cannot; flaky's errors and abortable's
// aborts stay on their own providers.
//
// A table: each field's meaning is on the kind type.
var kinds = []kind{
	{name: "chat", weight: 38, path: "/v1/chat/completions", model: "gpt-4o",
		statuses: []int{200}, providers: []string{"openai", "openrouter"}},
	{name: "chat-stream", weight: 14, path: "/v1/chat/completions", model: "gpt-4o-mini", stream: true,
		statuses: []int{200}, providers: []string{"openai", "openrouter"}},
	{name: "messages-stream", weight: 8, path: "/v1/messages", model: "claude-sonnet-4", stream: true,
		statuses: []int{200}, providers: []string{"anthropic"}},
	{name: "rate-limited", weight: 8, path: "/v1/chat/completions", model: "gpt-4o",
		header:   map[string]string{fakeprovider.HeaderScenario: "rate-limit", fakeprovider.HeaderRetryAfter: "1", fakeprovider.HeaderKeySuffix: "key-a"},
		statuses: []int{200}, providers: []string{"openai", "openrouter"}},
	{name: "server-error", weight: 8, path: "/v1/chat/completions", model: "gpt-4o-mini",
		header:   map[string]string{fakeprovider.HeaderScenario: "unavailable", fakeprovider.HeaderKeySuffix: "key-b"},
		statuses: []int{200}, providers: []string{"openai", "openrouter"}},
	{name: "slow-stream", weight: 5, path: "/v1/chat/completions", model: "gpt-4o", stream: true,
		header:   map[string]string{fakeprovider.HeaderEventDelayMs: "25"},
		statuses: []int{200}, providers: []string{"openai", "openrouter"}},
	{name: "limited-429", weight: 3, path: "/v1/chat/completions", model: "limited-model",
		header:   map[string]string{fakeprovider.HeaderStatus: "429", fakeprovider.HeaderRetryAfter: "1"},
		statuses: []int{429}, upstream: map[int]bool{429: true}},
	{name: "flaky-5xx", weight: 5, path: "/v1/chat/completions", model: "flaky-model",
		header:   map[string]string{fakeprovider.HeaderStatus: "502"},
		statuses: []int{502, 503}, upstream: map[int]bool{502: true}},
	{name: "abort-stream", weight: 6, path: "/v1/chat/completions", model: "abort-model", stream: true,
		header: map[string]string{fakeprovider.HeaderEventDelayMs: "50"}, abort: abortAfterEvents,
		statuses: []int{200}, providers: []string{"abortable"}},
	{name: "abort-held", weight: 5, path: "/v1/chat/completions", model: "abort-model",
		header: map[string]string{fakeprovider.HeaderDelayMs: "1000"}, abort: abortAfterSend,
		statuses: []int{200}, providers: []string{"abortable"}},
}

// spillwayCodes are the error codes of Spillway's own replies a kind may get (the
// statuses decide which).
var spillwayCodes = map[int][]string{
	429: {"rate_limit_error"},
	503: {"all_targets_cooling_down", "provider_circuit_open"},
}

// kindFor returns the kind of request id (an index into kinds), drawn from seed and id: the
// same seed gives the same mix, whatever order the requests run in.
func kindFor(seed uint64, id int) int {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	r := rand.New(rand.NewPCG(seed, uint64(id))).IntN(total)
	for j, k := range kinds {
		if r < k.weight {
			return j
		}
		r -= k.weight
	}
	panic("unreachable")
}

// body is the request body of kind k.
func (k *kind) body() string {
	stream := ""
	if k.stream {
		stream = `,"stream":true`
	}
	if k.path == "/v1/messages" {
		return `{"model":"` + k.model + `","max_tokens":64` + stream + `,"messages":[{"role":"user","content":"Hello"}]}`
	}
	return `{"model":"` + k.model + `"` + stream + `,"messages":[{"role":"user","content":"Hello"}]}`
}

// outcome is what one request got.
type outcome struct {
	status  int // 0: the client walked away before the status
	header  http.Header
	aborted bool          // the client walked away (before the status or mid-stream)
	latency time.Duration // from sending to the end of the answer (or the abort)
	code    string        // the error.code of Spillway's own reply ("" for another answer)
	err     error         // why the answer is not what the kind may get; nil: it is
}

// attempts is the answer's x-spillway-attempts (0 when absent or unreadable).
func (o *outcome) attempts() int {
	n, _ := strconv.Atoi(o.header.Get("x-spillway-attempts"))
	return n
}

// target is what the checks know of the policy: each connection's provider, each
// provider's cluster and the API its fake speaks.
type target struct {
	providerOf map[string]string // connection id -> provider id
	clusterOf  map[string]string // provider id -> cluster
	apiOf      map[string]string // provider id -> "openai" or "anthropic"
}

func targetsOf(r *policies.Resolved) target {
	t := target{providerOf: map[string]string{}, clusterOf: map[string]string{}, apiOf: map[string]string{}}
	for _, p := range r.Providers {
		t.clusterOf[p.ID], t.apiOf[p.ID] = p.Cluster, string(p.API)
		for _, c := range p.Connections {
			t.providerOf[c.ID] = p.ID
		}
	}
	return t
}

// send runs one request of kind k and checks its answer against what k may get.
func send(ctx context.Context, c *http.Client, base string, id int, k *kind, tg target) outcome {
	ctx, cancelLimit := context.WithTimeoutCause(ctx, answerLimit, errStuck)
	defer cancelLimit()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	if k.abort == abortAfterSend {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { time.AfterFunc(abortSendDelay, cancel) },
		})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, requestURL(base, k.path, id), strings.NewReader(k.body()))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("content-type", "application/json")
	for name, v := range k.header {
		req.Header.Set(name, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), errStuck) {
			err = errStuck
		} else if k.abort == abortAfterSend && errors.Is(err, context.Canceled) {
			return outcome{aborted: true, latency: time.Since(start)}
		}
		return outcome{err: fmt.Errorf("no answer: %w", err), latency: time.Since(start)}
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode, header: resp.Header}
	o.err = k.check(&o, resp.Body, cancel, tg)
	if o.err != nil && errors.Is(context.Cause(ctx), errStuck) {
		o.err = fmt.Errorf("%w: %w", errStuck, o.err)
	}
	o.latency = time.Since(start)
	return o
}

// check reads the answer and reports what is wrong with it for kind k: its status, its
// x-spillway-* headers, and its body (JSON, or an event stream to its terminal event).
// An aborting kind cancels mid-stream through cancel.
func (k *kind) check(o *outcome, body io.Reader, cancel func(), tg target) error {
	if !slices.Contains(k.statuses, o.status) {
		b, _ := io.ReadAll(body)
		return fmt.Errorf("status %d, want one of %v: %.300s", o.status, k.statuses, b)
	}
	h := o.header
	provider, conn, model, attempts := h.Get("x-spillway-provider"), h.Get("x-spillway-connection"),
		h.Get("x-spillway-model"), h.Get("x-spillway-attempts")
	if provider == "" || conn == "" || model == "" || attempts == "" {
		return fmt.Errorf("status %d without the x-spillway-* headers: %v", o.status, h)
	}
	if o.status >= 300 {
		return k.checkError(o, body)
	}
	if !slices.Contains(k.providers, provider) || tg.providerOf[conn] != provider || o.attempts() < 1 {
		return fmt.Errorf("200 from provider %q connection %q after %s attempts; want one of %v", provider, conn, attempts, k.providers)
	}
	// The fake's canned reply names its cluster and the model it was asked for.
	prefix, suffix := "Hello from "+tg.clusterOf[provider]+",", " answering as "+model+"."
	if !k.stream {
		b, err := io.ReadAll(body)
		if err != nil {
			return fmt.Errorf("reading the body: %w", err)
		}
		text := gjson.GetBytes(b, "choices.0.message.content").Str
		if !gjson.ValidBytes(b) || gjson.GetBytes(b, "object").Str != "chat.completion" ||
			!strings.HasPrefix(text, prefix) || !strings.HasSuffix(text, suffix) {
			return fmt.Errorf("200 body is not %s's chat completion for %s: %.300s", provider, model, b)
		}
		return nil
	}
	if ct := h.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("stream answered with content-type %q", ct)
	}
	if k.abort != abortNone { // abortAfterEvents: walk away mid-stream
		_, err := readStream(body, tg.apiOf[provider], abortEvents)
		if err == nil {
			cancel()
			o.aborted = true
		}
		return err
	}
	text, err := readStream(body, tg.apiOf[provider], -1)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(text, prefix) || !strings.HasSuffix(text, suffix) {
		return fmt.Errorf("stream's text %q is not %s's reply for %s", text, provider, model)
	}
	return nil
}

// checkError checks an error answer: an OpenAI-shaped JSON error, from a fake with one of
// the statuses the kind asked for, or Spillway's own with one of its codes for the status;
// a 429 says when to retry.
func (k *kind) checkError(o *outcome, body io.Reader) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("reading the error body: %w", err)
	}
	e := gjson.GetBytes(b, "error")
	if !gjson.ValidBytes(b) || !e.IsObject() || e.Get("message").Str == "" {
		return fmt.Errorf("%d body is not an error object: %.300s", o.status, b)
	}
	if o.status == http.StatusTooManyRequests && o.header.Get("retry-after") == "" {
		return fmt.Errorf("429 without Retry-After: %.300s", b)
	}
	if o.attempts() == 0 {
		o.code = e.Get("code").Str
		if code := o.code; o.header.Get("x-spillway-provider") != "-" || !slices.Contains(spillwayCodes[o.status], code) {
			return fmt.Errorf("Spillway's %d with code %q (provider %q); want one of %v", o.status, code,
				o.header.Get("x-spillway-provider"), spillwayCodes[o.status])
		}
		return nil
	}
	if !k.upstream[o.status] {
		return fmt.Errorf("upstream %d after %d attempts; the fakes were asked for %v: %.300s", o.status, o.attempts(), k.upstream, b)
	}
	return nil
}

// readStream reads an event stream of api ("openai" Chat Completions or "anthropic"
// Messages) to its terminal event and returns the text its deltas carry. With stopAfter ≥
// 0 it returns once that many content deltas came, without reading on.
func readStream(body io.Reader, api string, stopAfter int) (string, error) {
	var text strings.Builder
	deltas, ended := 0, false
	sc := bufio.NewScanner(body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if ended && line != "" {
			return "", fmt.Errorf("stream goes on after its terminal event: %q", line)
		}
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if api == "anthropic" {
			if !gjson.Valid(data) || gjson.Get(data, "type").Str != event {
				return "", fmt.Errorf("event %q with data %q", event, data)
			}
			switch event {
			case "content_block_delta":
				text.WriteString(gjson.Get(data, "delta.text").Str)
				deltas++
			case "message_stop":
				ended = true
			case "error":
				return "", fmt.Errorf("error event: %s", data)
			}
		} else {
			if data == "[DONE]" {
				ended = true
				continue
			}
			if !gjson.Valid(data) || gjson.Get(data, "object").Str != "chat.completion.chunk" {
				return "", fmt.Errorf("data %q is not a chat.completion.chunk", data)
			}
			if c := gjson.Get(data, "choices.0.delta.content"); c.Str != "" {
				text.WriteString(c.Str)
				deltas++
			}
		}
		if stopAfter >= 0 && deltas == stopAfter {
			return text.String(), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading the stream: %w", err)
	}
	if !ended {
		return "", fmt.Errorf("stream ended without its terminal event after %q", text.String())
	}
	return text.String(), nil
}
