package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// clientsPolicy gives each SDK run its own keys: a pair for JSON and a pair for
// streaming per API (the first of each is the one rate-limited), and one key for the
// retry runs. comboCooldownWait is off, so a request that finds its only key cooling
// from a 429 is answered 429 at once instead of waiting (guide §4).
const clientsPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: oa-a, credential: {header: authorization, value: "Bearer key-oa-a"}}
      - {id: oa-b, credential: {header: authorization, value: "Bearer key-oa-b"}}
      - {id: oas-a, credential: {header: authorization, value: "Bearer key-oas-a"}}
      - {id: oas-b, credential: {header: authorization, value: "Bearer key-oas-b"}}
      - {id: oa-retry, credential: {header: authorization, value: "Bearer key-oa-retry"}}
  - id: anthropic
    api: anthropic
    cluster: fake-anthropic
    connections:
      - {id: an-a, credential: {header: x-api-key, value: "key-an-a"}}
      - {id: an-b, credential: {header: x-api-key, value: "key-an-b"}}
      - {id: ans-a, credential: {header: x-api-key, value: "key-ans-a"}}
      - {id: ans-b, credential: {header: x-api-key, value: "key-ans-b"}}
      - {id: an-retry, credential: {header: x-api-key, value: "key-an-retry"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai, connection: oa-a}, {provider: openai, connection: oa-b}]}
  - {model: gpt-4o-mini, strategy: priority, targets: [{provider: openai, connection: oas-a}, {provider: openai, connection: oas-b}]}
  - {model: gpt-4o-retry, targets: [{provider: openai, connection: oa-retry}]}
  - {model: claude-sonnet-4, strategy: priority, targets: [{provider: anthropic, connection: an-a}, {provider: anthropic, connection: an-b}]}
  - {model: claude-haiku-4, strategy: priority, targets: [{provider: anthropic, connection: ans-a}, {provider: anthropic, connection: ans-b}]}
  - {model: claude-retry, targets: [{provider: anthropic, connection: an-retry}]}
resilience:
  comboCooldownWait: {enabled: false}
`

// attempt is one HTTP attempt an SDK made, as its middleware saw it.
type attempt struct {
	status     int
	header     http.Header
	start, end time.Time // the request sent, the response headers received
}

// recorder records an SDK's attempts (its middleware runs once per attempt, retries
// included).
type recorder struct {
	mu       sync.Mutex
	attempts []attempt
}

func (r *recorder) record(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	start := time.Now()
	resp, err := next(req)
	if resp != nil {
		r.mu.Lock()
		r.attempts = append(r.attempts, attempt{status: resp.StatusCode, header: resp.Header, start: start, end: time.Now()})
		r.mu.Unlock()
	}
	return resp, err
}

func (r *recorder) all() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.attempts...)
}

// last returns the last attempt's response headers.
func (r *recorder) last(t *testing.T) http.Header {
	t.Helper()
	a := r.all()
	if len(a) == 0 {
		t.Fatal("the SDK made no attempt")
	}
	return a[len(a)-1].header
}

// spillwayOf formats x-spillway-* headers as provider/connection/model/attempts.
func spillwayOf(h http.Header) string {
	return (&e2etest.Response{Header: h}).Spillway()
}

// openai-go and anthropic-sdk-go through the proxy, JSON and streaming: with the first
// key rate-limited (429, Retry-After 7) the SDK gets its answer from the second key in
// the same request, and the next request goes to the second key directly; the providers
// saw the connections' keys, never the one the SDK sent (requireRequests).
func testSDKs(t *testing.T, start e2etest.Starter) {
	tg := start(t, clientsPolicy)
	oa, an := tg.Fake(t, "fake-openai"), tg.Fake(t, "fake-anthropic")
	rateLimit := fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit}
	for _, key := range []string{"key-oa-a", "key-oas-a"} {
		oa.ScriptFor(key, rateLimit)
	}
	for _, key := range []string{"key-an-a", "key-ans-a"} {
		an.ScriptFor(key, rateLimit)
	}
	ctx := context.Background()
	// Per request: the connection that answered and the attempts it took.
	runs := []struct{ connection, attempts string }{{"b", "2"}, {"b", "1"}}

	t.Run("openai JSON", func(t *testing.T) {
		for _, want := range runs {
			var rec recorder
			client := openAIClient(tg, option.WithMiddleware(rec.record))
			r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}})
			if err != nil {
				t.Fatalf("Chat.Completions.New: %v", err)
			}
			if !strings.Contains(r.Choices[0].Message.Content, "answering as gpt-4o") || r.Usage.TotalTokens == 0 {
				t.Errorf("answer %+v", r)
			}
			if got := spillwayOf(rec.last(t)); got != "openai/oa-"+want.connection+"/gpt-4o/"+want.attempts {
				t.Errorf("answered by %s", got)
			}
		}
		requireRequests(t, "openai JSON", oa, map[string]int{"key-oa-a": 1, "key-oa-b": 2})
	})
	t.Run("openai streaming", func(t *testing.T) {
		for _, want := range runs {
			var rec recorder
			params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
			client := openAIClient(tg, option.WithMiddleware(rec.record))
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			chunks := 0
			for stream.Next() {
				acc.AddChunk(stream.Current())
				chunks++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if got := acc.Choices[0].Message.Content; got != "Hello from fake-openai, the hostsim fake openai provider, answering as gpt-4o-mini." ||
				acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens == 0 || chunks < 10 {
				t.Errorf("%d chunks: %q finish %q usage %+v", chunks, got, acc.Choices[0].FinishReason, acc.Usage)
			}
			if got := spillwayOf(rec.last(t)); got != "openai/oas-"+want.connection+"/gpt-4o-mini/"+want.attempts {
				t.Errorf("answered by %s", got)
			}
		}
		requireRequests(t, "openai streaming", oa, map[string]int{"key-oas-a": 1, "key-oas-b": 2})
	})
	t.Run("anthropic JSON", func(t *testing.T) {
		for _, want := range runs {
			var rec recorder
			client := anthropicClient(tg, aoption.WithMiddleware(rec.record))
			msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{
				Model: "claude-sonnet-4", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}})
			if err != nil {
				t.Fatalf("Messages.New: %v", err)
			}
			if len(msg.Content) != 1 || !strings.Contains(msg.Content[0].Text, "answering as claude-sonnet-4") || msg.Usage.OutputTokens == 0 {
				t.Errorf("message %+v", msg)
			}
			if got := spillwayOf(rec.last(t)); got != "anthropic/an-"+want.connection+"/claude-sonnet-4/"+want.attempts {
				t.Errorf("answered by %s", got)
			}
		}
		requireRequests(t, "anthropic JSON", an, map[string]int{"key-an-a": 1, "key-an-b": 2})
	})
	t.Run("anthropic streaming", func(t *testing.T) {
		for _, want := range runs {
			var rec recorder
			client := anthropicClient(tg, aoption.WithMiddleware(rec.record))
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: "claude-haiku-4", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}})
			var msg anthropic.Message
			for stream.Next() {
				if err := msg.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if len(msg.Content) != 1 || !strings.Contains(msg.Content[0].Text, "answering as claude-haiku-4") || msg.StopReason != "end_turn" {
				t.Errorf("message %+v", msg)
			}
			if got := spillwayOf(rec.last(t)); got != "anthropic/ans-"+want.connection+"/claude-haiku-4/"+want.attempts {
				t.Errorf("answered by %s", got)
			}
		}
		requireRequests(t, "anthropic streaming", an, map[string]int{"key-ans-a": 1, "key-ans-b": 2})
	})
}

// When the proxy answers 429 with Retry-After, the SDK's own retry waits that long and
// then gets its answer. The key's 429 (Retry-After: 2) cools it for two seconds; the SDK's
// first attempt finds it cooling and Spillway answers 429 itself, without asking the
// provider; the SDK waits the Retry-After Spillway sent (its own backoff would be
// under 0.5 s) and its retry is served.
func testSDKRetryAfter(t *testing.T, start e2etest.Starter) {
	tg := start(t, clientsPolicy)
	ctx := context.Background()
	cases := []struct {
		name    string                    // the SDK
		cluster string                    // the fake behind the route
		key     string                    // the route's one key
		path    string                    // the API path, for the key's own 429
		body    string                    // its body
		call    func(rec *recorder) error // the SDK's call, with retries and rec as middleware
	}{
		{"openai-go", "fake-openai", "key-oa-retry", "/v1/chat/completions", e2etest.ChatBody("gpt-4o-retry", false),
			func(rec *recorder) error {
				client := openAIClient(tg, option.WithMaxRetries(2), option.WithMiddleware(rec.record))
				_, err := client.Chat.Completions.New(ctx,
					openai.ChatCompletionNewParams{Model: "gpt-4o-retry", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}})
				return err
			}},
		{"anthropic-sdk-go", "fake-anthropic", "key-an-retry", "/v1/messages",
			`{"model":"claude-retry","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`,
			func(rec *recorder) error {
				client := anthropicClient(tg, aoption.WithMaxRetries(2), aoption.WithMiddleware(rec.record))
				_, err := client.Messages.New(ctx,
					anthropic.MessageNewParams{Model: "claude-retry", MaxTokens: 64,
						Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}})
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := tg.Fake(t, tc.cluster)
			fake.ScriptFor(tc.key, fakeprovider.Fault{Status: 429, ErrorType: "rate_limit_error", RetryAfter: "2"})
			if r := e2etest.Do(t, "POST", tg.URL+tc.path, tc.body, nil); r.Status != 429 || r.Header.Get("Retry-After") != "2" {
				t.Fatalf("the key's own 429: %d Retry-After %q: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
			}
			var rec recorder
			if err := tc.call(&rec); err != nil {
				t.Fatalf("the SDK's call: %v", err)
			}
			a := rec.all()
			if len(a) != 2 || a[0].status != 429 || a[0].header.Get("x-spillway-attempts") != "0" || a[1].status != 200 {
				for _, at := range a {
					t.Logf("attempt: %d %v", at.status, at.header)
				}
				t.Fatalf("%d attempts, want Spillway's 429 then a 200", len(a))
			}
			secs, err := strconv.Atoi(a[0].header.Get("Retry-After"))
			if err != nil || secs < 1 {
				t.Fatalf("Spillway's 429 has Retry-After %q", a[0].header.Get("Retry-After"))
			}
			if gap := a[1].start.Sub(a[0].end); gap < time.Duration(secs)*time.Second {
				t.Errorf("the SDK retried %v after Spillway's 429, before its Retry-After of %ds", gap, secs)
			}
			if got := fake.StatsFor(tc.key).Requests; got != 2 {
				t.Errorf("%s received %d requests, want 2 (the 429, the retry; never Spillway's own 429)", tc.key, got)
			}
		})
	}
}
