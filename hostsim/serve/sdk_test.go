package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func openAIClient(d *demo, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(d.URL() + "/v1/"),
		option.WithAPIKey("sk-client-key"), option.WithMaxRetries(0)}, opts...)...)
}

// Every proxied answer carries the filter's x-spillway-* headers.
func requireSpillwayHeaders(t *testing.T, h http.Header, model string) {
	t.Helper()
	for _, k := range []string{"x-spillway-provider", "x-spillway-connection", "x-spillway-attempts"} {
		if h.Get(k) == "" {
			t.Errorf("response lacks %s: %v", k, h)
		}
	}
	if got := h.Get("x-spillway-model"); got != model {
		t.Errorf("x-spillway-model = %q, want %q", got, model)
	}
}

func TestOpenAISDKThroughTheFilter(t *testing.T) {
	d := startDemo(t, nil)
	client := openAIClient(d)
	ctx := context.Background()
	tests := []struct {
		name  string
		model string // the model the request names
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
		{"models", "-", func(raw **http.Response) (string, error) {
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
			requireSpillwayHeaders(t, raw.Header, tt.model)
		})
	}
	// One access line per request, naming the worker and the filter's headers.
	if lines := d.access.await(" 200 ", len(tests)); len(lines) != len(tests) {
		t.Errorf("%d access lines for %d requests:\n%s", len(lines), len(tests), d.access)
	} else if l := lines[0]; !strings.Contains(l, "POST /v1/chat/completions 200") || !strings.Contains(l, "worker-") ||
		!strings.Contains(l, "model=gpt-4o") || !strings.Contains(l, "attempts=1") {
		t.Errorf("access line %q", l)
	}
}

func TestAnthropicSDKThroughTheFilter(t *testing.T) {
	d := startDemo(t, nil)
	var raw *http.Response
	client := anthropic.NewClient(aoption.WithBaseURL(d.URL()), aoption.WithAPIKey("client-key"), aoption.WithMaxRetries(0),
		// Until the filter routes, the client names the cluster itself (Envoy's cluster_header).
		aoption.WithHeader(HeaderCluster, "fake-anthropic"))
	msg, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}, aoption.WithResponseInto(&raw))
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if len(msg.Content) != 1 || !strings.Contains(msg.Content[0].Text, "fake-anthropic") || msg.Usage.OutputTokens == 0 {
		t.Errorf("message %+v", msg)
	}
	requireSpillwayHeaders(t, raw.Header, "claude-sonnet-4")
	rec := d.fake(t, "fake-anthropic").Requests()
	if len(rec) != 1 || rec[0].Path != "/v1/messages" {
		t.Fatalf("fake-anthropic saw %+v", rec)
	}
	if rec[0].Header.Get(HeaderCluster) != "" {
		t.Errorf("%s reached the upstream", HeaderCluster)
	}
	if n := len(d.fake(t, "fake-openai").Requests()); n != 0 {
		t.Errorf("fake-openai got %d requests", n)
	}
}

// Session-affinity headers are read by the filter and never forwarded; the cluster header
// is stripped; Envoy's x-request-id and x-forwarded-proto are added.
func TestSessionHeadersNeverReachTheUpstream(t *testing.T) {
	d := startDemo(t, nil)
	client := openAIClient(d)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}},
		option.WithHeader("x-session-id", "s-1"), option.WithHeader("x-codex-session-id", "s-2"),
		option.WithHeader("x-omniroute-session", "s-3"), option.WithHeader(HeaderCluster, "fake-openai"),
		option.WithHeader("x-custom", "kept"))
	if err != nil {
		t.Fatal(err)
	}
	rec := d.fake(t, "fake-openai").Requests()
	if len(rec) != 1 {
		t.Fatalf("fake-openai saw %d requests", len(rec))
	}
	h := rec[0].Header
	for _, k := range []string{"x-session-id", "x-codex-session-id", "x-omniroute-session", HeaderCluster} {
		if v := h.Get(k); v != "" {
			t.Errorf("%s = %q reached the upstream", k, v)
		}
	}
	if h.Get("x-custom") != "kept" || h.Get(HeaderRequestID) == "" || h.Get("x-forwarded-proto") != "http" {
		t.Errorf("upstream headers %v", h)
	}
	if !strings.Contains(string(rec[0].Body), `"model":"gpt-4o"`) {
		t.Errorf("upstream body %s", rec[0].Body)
	}
}

// An upstream error status passes through to the SDK with the provider's own error body
// and the filter's headers.
func TestUpstreamErrorPassesThrough(t *testing.T) {
	d := startDemo(t, nil)
	var raw *http.Response
	client := openAIClient(d)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}},
		option.WithHeader("x-fake-status", "429"), option.WithHeader("x-fake-retry-after", "7"), option.WithResponseInto(&raw))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an API error", err)
	}
	if apiErr.StatusCode != 429 || apiErr.Type != "rate_limit_error" || raw.Header.Get("Retry-After") != "7" {
		t.Errorf("status %d type %q Retry-After %q", apiErr.StatusCode, apiErr.Type, raw.Header.Get("Retry-After"))
	}
	requireSpillwayHeaders(t, raw.Header, "gpt-4o")
}

// post sends a JSON POST to the front end and returns the status, headers and body.
func post(t *testing.T, url, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const chatBody = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`

// An unknown cluster is Envoy's "cluster not found" 503 (empty body, flag NC), and an
// unreachable upstream its "upstream connect error" 503 (UF): both pass the filter's
// response path (x-spillway-* set), and the access log shows Envoy's flags and details.
func TestClusterNotFoundAndUpstreamDown(t *testing.T) {
	d := startDemo(t, nil)
	status, h, body := post(t, d.URL()+"/v1/chat/completions", chatBody, map[string]string{HeaderCluster: "nowhere"})
	if status != 503 || body != "" {
		t.Errorf("unknown cluster: %d %q", status, body)
	}
	// The router answers as the headers pass (decodeHeaders), so the filter never saw the
	// body and knows no model.
	requireSpillwayHeaders(t, h, "-")
	if len(d.access.await("503 ", 1)) != 1 || len(d.access.await("flags=NC details=cluster_not_found", 1)) != 1 {
		t.Errorf("access log:\n%s", d.access)
	}

	// A cluster whose port nobody listens on: close a fake and aim a second serve at it.
	dead := d.fake(t, "fake-anthropic").URL
	_ = d.fake(t, "fake-anthropic").Close()
	d2 := startDemo(t, func(o *Options) {
		o.Clusters = []Cluster{{Name: "fake-openai", URL: dead}, {Name: "fake-openrouter", URL: dead}, {Name: "fake-anthropic", URL: dead}}
	})
	if len(d2.Fakes) != 0 {
		t.Errorf("fakes started although -cluster was given: %v", d2.Fakes)
	}
	status, h, body = post(t, d2.URL()+"/v1/chat/completions", chatBody, nil)
	const want = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, " +
		"transport failure reason: delayed connect error: Connection refused"
	if status != 503 || body != want {
		t.Errorf("dead upstream: %d %q", status, body)
	}
	if len(d2.access.await("flags=UF details=upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}", 1)) != 1 {
		t.Errorf("access log:\n%s", d2.access)
	}
	requireSpillwayHeaders(t, h, "gpt-4o")
	if len(d2.logs.lines("cluster fake-openai")) == 0 {
		t.Errorf("the transport error is not logged:\n%s", d2.logs)
	}
}

// Concurrent requests spread over both worker VMs.
func TestConcurrentRequestsSpreadOverWorkers(t *testing.T) {
	d := startDemo(t, nil)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The fake holds each answer a little, so the requests overlap.
			client := openAIClient(d)
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
	d.access.await(" worker-", n)
	w0, w1 := len(d.access.lines(" worker-0 ")), len(d.access.lines(" worker-1 "))
	if w0+w1 != n || w0 < 2 || w1 < 2 {
		t.Errorf("worker-0 served %d, worker-1 %d of %d:\n%s", w0, w1, n, d.access)
	}
}

// An upstream slower than the timeout is answered 504; the stream is reset and the
// abandoned upstream call cancelled.
func TestSlowUpstreamTimesOut(t *testing.T) {
	d := startDemo(t, func(o *Options) { o.Timeout = 300 * time.Millisecond })
	status, _, body := post(t, d.URL()+"/v1/chat/completions", chatBody, map[string]string{"x-fake-delay-ms": "5000"})
	if status != 504 || !strings.Contains(body, `"code":"hostsim_timeout"`) || !strings.Contains(body, "300ms") {
		t.Fatalf("%d %s", status, body)
	}
	if len(d.access.await("POST /v1/chat/completions 504", 1)) != 1 {
		t.Errorf("access log:\n%s", d.access)
	}
	// The reset at the timeout ended the stream in its VM before the 504 went out (and
	// cancelled the upstream call); the next request is served.
	if n := d.Server.Host().LiveStreams(); n != 0 {
		t.Errorf("%d streams left in the VMs after the 504", n)
	}
	if status, _, body := post(t, d.URL()+"/v1/chat/completions", chatBody, nil); status != 200 {
		t.Errorf("next request: %d %s", status, body)
	}
}
