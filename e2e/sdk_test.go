// The SDKs through hostsim serve on the demo policy, every API path Spillway routes by
// default (moved from hostsim/serve, so the hostsim library's tests need no SDK). These
// read serve's access log and worker names, so they run on hostsim only; the SDK
// scenarios of clients_test.go run on every target.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/serve"
)

// openAIClient is the OpenAI SDK pointed at a target, with the client's own key and no
// retries of its own (a test that wants them asks).
func openAIClient(tg *e2etest.Target, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(tg.URL + "/v1/"),
		option.WithAPIKey(e2etest.ClientKey), option.WithMaxRetries(0)}, opts...)...)
}

// anthropicClient is the Anthropic SDK pointed at a target, as openAIClient.
func anthropicClient(tg *e2etest.Target, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(tg.URL),
		aoption.WithAPIKey(e2etest.ClientKey), aoption.WithMaxRetries(0)}, opts...)...)
}

// requireSpillwayHeaders checks the filter's x-spillway-* headers on a routed answer: the
// provider, connection and upstream model that answered, and the attempts it took.
func requireSpillwayHeaders(t *testing.T, h http.Header, provider, connection, model, attempts string) {
	t.Helper()
	for _, kv := range [][2]string{{"x-spillway-provider", provider}, {"x-spillway-connection", connection},
		{"x-spillway-model", model}, {"x-spillway-attempts", attempts}} {
		if got := h.Get(kv[0]); got != kv[1] {
			t.Errorf("%s = %q, want %q", kv[0], got, kv[1])
		}
	}
}

// requireNoSpillwayHeaders: a request Spillway does not route passes through untouched.
func requireNoSpillwayHeaders(t *testing.T, h http.Header) {
	t.Helper()
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-spillway-") {
			t.Errorf("a request Spillway does not route got %s: %v", k, h)
		}
	}
}

// Every OpenAI path Spillway routes by default, and GET /v1/models, through the filter
// with the OpenAI SDK. The demo sends each model to the openai provider's first key (gpt-4o
// by priority; round-robin starts there for gpt-4o-mini and text-embedding-*); the models
// list is not routed and passes through to the default cluster without Spillway's headers,
// with the client's own key.
func TestOpenAISDKThroughTheFilter(t *testing.T) {
	tg := e2etest.StartServe(t, "") // the demo policy
	client := openAIClient(tg)
	ctx := context.Background()
	tests := []struct {
		name  string
		model string // x-spillway-model ("" : not routed, no x-spillway-* headers)
		// call makes the SDK request, capturing the raw response, and returns the text or
		// value the fake put in its answer
		call func(raw **http.Response) (string, error)
		want string // substring of that value
	}{
		{"chat completion", "gpt-4o", func(raw **http.Response) (string, error) {
			r, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}}, option.WithResponseInto(raw))
			if err != nil {
				return "", err
			}
			if r.Model != "gpt-4o" || r.Usage.TotalTokens == 0 {
				return "", fmt.Errorf("model %q usage %+v", r.Model, r.Usage)
			}
			return r.Choices[0].Message.Content, nil
		}, "answering as gpt-4o"},
		{"legacy completion", "gpt-4o-mini", func(raw **http.Response) (string, error) {
			r, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: "gpt-4o-mini",
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hi")}}, option.WithResponseInto(raw))
			if err != nil {
				return "", err
			}
			return r.Choices[0].Text, nil
		}, "answering as gpt-4o-mini"},
		{"embeddings", "text-embedding-3-small", func(raw **http.Response) (string, error) {
			r, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "text-embedding-3-small",
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}}}, option.WithResponseInto(raw))
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d vectors of %d", len(r.Data), len(r.Data[0].Embedding)), nil
		}, "2 vectors of 8"},
		{"responses", "gpt-4o", func(raw **http.Response) (string, error) {
			r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}}, option.WithResponseInto(raw))
			if err != nil {
				return "", err
			}
			return r.OutputText(), nil
		}, "answering as gpt-4o"},
		{"models", "", func(raw **http.Response) (string, error) {
			r, err := client.Models.List(ctx, option.WithResponseInto(raw))
			if err != nil {
				return "", err
			}
			ids := make([]string, len(r.Data))
			for i, m := range r.Data {
				ids[i] = m.ID
			}
			return strings.Join(ids, ","), nil
		}, "gpt-4o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw *http.Response
			got, err := tt.call(&raw)
			if err != nil {
				t.Fatalf("SDK call: %v", err)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("answer %q does not contain %q", got, tt.want)
			}
			if tt.model == "" {
				requireNoSpillwayHeaders(t, raw.Header)
				return
			}
			requireSpillwayHeaders(t, raw.Header, "openai", "openai-a", tt.model, "1")
		})
	}
	// The routed requests reached fake-openai with the key the filter injected, never the
	// client's; the models list with the client's own.
	fake := tg.Fake(t, "fake-openai")
	if a, c := fake.StatsFor("demo-key-a").Requests, fake.StatsFor(e2etest.ClientKey).Requests; a != len(tests)-1 || c != 1 {
		t.Errorf("fake-openai counted %d requests from demo-key-a and %d from the client's key, want %d and 1", a, c, len(tests)-1)
	}
	// One access line per request, naming the worker and the filter's headers.
	if lines := tg.Access.Wait(" 200 ", len(tests)); len(lines) != len(tests) {
		t.Fatalf("%d access lines for %d requests:\n%s", len(lines), len(tests), tg.Access)
	}
	for _, want := range []string{
		"POST /v1/chat/completions 200 ", " worker-", " provider=openai connection=openai-a model=gpt-4o attempts=1 ",
		"POST /v1/embeddings 200 ", " provider=openai connection=openai-a model=text-embedding-3-small attempts=1 ",
		"GET /v1/models 200 ", " provider=- connection=- model=- attempts=- flags=- details=via_upstream",
	} {
		if !strings.Contains(tg.Access.String(), want) {
			t.Errorf("access log lacks %q:\n%s", want, tg.Access)
		}
	}
}

// The Anthropic SDK through the filter: claude-* goes to the anthropic provider, whatever
// cluster the client names, with the connection's x-api-key in place of the client's.
func TestAnthropicSDKThroughTheFilter(t *testing.T) {
	tg := e2etest.StartServe(t, "") // the demo policy
	var raw *http.Response
	// A client cannot pick the cluster: the filter removes the header and sets its own.
	client := anthropicClient(tg, aoption.WithHeader(serve.HeaderCluster, "fake-openai"))
	msg, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}, aoption.WithResponseInto(&raw))
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if len(msg.Content) != 1 || !strings.Contains(msg.Content[0].Text, "fake-anthropic") || msg.Usage.OutputTokens == 0 {
		t.Errorf("message %+v", msg)
	}
	requireSpillwayHeaders(t, raw.Header, "anthropic", "anthropic-a", "claude-sonnet-4", "1")
	rec := tg.Fake(t, "fake-anthropic").Requests()
	if len(rec) != 1 || rec[0].Path != "/v1/messages" {
		t.Fatalf("fake-anthropic saw %+v", rec)
	}
	if v := rec[0].Header.Get(serve.HeaderCluster); v != "" {
		t.Errorf("%s = %q reached the upstream", serve.HeaderCluster, v)
	}
	if got := rec[0].Header.Get("x-api-key"); got != "demo-key-anthropic" {
		t.Errorf("x-api-key %q reached the upstream, want anthropic-a's", got)
	}
	if n := len(tg.Fake(t, "fake-openai").Requests()); n != 0 {
		t.Errorf("fake-openai got %d requests", n)
	}
}

// Session-affinity headers are read by the filter and never forwarded; a client's cluster
// header is removed (the request goes where the route says, not to fake-openrouter) and
// its credential replaced by the connection's; Envoy's x-request-id and x-forwarded-proto
// are added; other headers pass.
func TestSessionHeadersNeverReachTheUpstream(t *testing.T) {
	tg := e2etest.StartServe(t, "") // the demo policy
	client := openAIClient(tg)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}},
		option.WithHeader("x-session-id", "s-1"), option.WithHeader("x-codex-session-id", "s-2"),
		option.WithHeader("x-omniroute-session", "s-3"), option.WithHeader(serve.HeaderCluster, "fake-openrouter"),
		option.WithHeader("x-custom", "kept"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tg.Fake(t, "fake-openrouter").Requests()); n != 0 {
		t.Errorf("the client's cluster header sent %d requests to fake-openrouter", n)
	}
	rec := tg.Fake(t, "fake-openai").Requests()
	if len(rec) != 1 {
		t.Fatalf("fake-openai saw %d requests", len(rec))
	}
	h := rec[0].Header
	for _, k := range []string{"x-session-id", "x-codex-session-id", "x-omniroute-session", serve.HeaderCluster} {
		if v := h.Get(k); v != "" {
			t.Errorf("%s = %q reached the upstream", k, v)
		}
	}
	if got := h.Get("Authorization"); got != "Bearer demo-key-a" {
		t.Errorf("authorization %q reached the upstream, want openai-a's", got)
	}
	if h.Get("x-custom") != "kept" || h.Get(serve.HeaderRequestID) == "" || h.Get("x-forwarded-proto") != "http" {
		t.Errorf("upstream headers %v", h)
	}
	if !strings.Contains(string(rec[0].Body), `"model":"gpt-4o"`) {
		t.Errorf("upstream body %s", rec[0].Body)
	}
}

// An error every candidate gives (x-fake-status reaches every fake and key) reaches the
// SDK as the last candidate gave it, with that provider's own error body and Retry-After
// and the filter's headers naming the attempt: gpt-4o tried openai-a, openai-b, then
// OpenRouter asking for openai/gpt-4o (failover.maxAttempts 3).
func TestUpstreamErrorPassesThrough(t *testing.T) {
	tg := e2etest.StartServe(t, "") // the demo policy
	var raw *http.Response
	client := openAIClient(tg)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}},
		option.WithHeader("x-fake-status", "429"), option.WithHeader("x-fake-retry-after", "7"), option.WithResponseInto(&raw))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an API error", err)
	}
	if apiErr.StatusCode != 429 || apiErr.Type != "rate_limit_error" || raw.Header.Get("Retry-After") != "7" ||
		!strings.Contains(apiErr.Message, "fake fake-openrouter error 429") {
		t.Errorf("status %d type %q message %q Retry-After %q", apiErr.StatusCode, apiErr.Type, apiErr.Message, raw.Header.Get("Retry-After"))
	}
	requireSpillwayHeaders(t, raw.Header, "openrouter", "openrouter-a", "openai/gpt-4o", "3")
	oa, or := tg.Fake(t, "fake-openai"), tg.Fake(t, "fake-openrouter")
	if a, b, r := oa.StatsFor("demo-key-a").Requests, oa.StatsFor("demo-key-b").Requests,
		or.StatsFor("demo-key-openrouter").Requests; a != 1 || b != 1 || r != 1 {
		t.Errorf("requests: openai-a %d, openai-b %d, openrouter-a %d; want one each", a, b, r)
	}
	if rec := or.Requests(); len(rec) != 1 || !strings.Contains(string(rec[0].Body), `"model":"openai/gpt-4o"`) {
		t.Errorf("fake-openrouter saw %+v", rec)
	}
}

// Concurrent requests spread over both worker VMs.
func TestConcurrentRequestsSpreadOverWorkers(t *testing.T) {
	tg := e2etest.StartServe(t, "") // the demo policy
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The fake holds each answer a little, so the requests overlap.
			client := openAIClient(tg)
			_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}},
				option.WithHeader("x-fake-delay-ms", "200"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	tg.Access.Wait(" worker-", n)
	w0, w1 := len(tg.Access.Matching(" worker-0 ")), len(tg.Access.Matching(" worker-1 "))
	if w0+w1 != n || w0 < 2 || w1 < 2 {
		t.Errorf("worker-0 served %d, worker-1 %d of %d:\n%s", w0, w1, n, tg.Access)
	}
}
