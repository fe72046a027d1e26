// The fakes' wire formats as the providers' own SDKs read them, straight from a fake
// (moved from hostsim/fakeprovider, so the hostsim library's tests need no SDK).
package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// serveFake starts a fake of kind on loopback with no pacing.
func serveFake(t *testing.T, kind fakeprovider.Kind) *fakeprovider.Server {
	t.Helper()
	p, err := fakeprovider.New(kind, "fake-"+string(kind))
	if err != nil {
		t.Fatal(err)
	}
	p.SetPacing(fakeprovider.Pacing{})
	s, err := fakeprovider.Start(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func openAIFor(s *fakeprovider.Server, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(s.URL + "/v1/"), option.WithAPIKey(key),
		option.WithMaxRetries(0)}, opts...)...)
}

func anthropicFor(s *fakeprovider.Server, key string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(s.URL), aoption.WithAPIKey(key),
		aoption.WithMaxRetries(0)}, opts...)...)
}

var chatParams = openai.ChatCompletionNewParams{Model: "gpt-4o",
	Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}}

var messageParams = anthropic.MessageNewParams{Model: "claude-sonnet-4", MaxTokens: 64,
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}

// The three streaming wire formats, read by the providers' own SDKs: the text streamed
// piece by piece equals the JSON answer's text, and each stream ends with its terminal event.
func TestStreamsParseWithTheSDKs(t *testing.T) {
	ctx := context.Background()
	oa := serveFake(t, fakeprovider.OpenAI)
	an := serveFake(t, fakeprovider.Anthropic)
	want := "Hello from fake-openai, the hostsim fake openai provider, answering as gpt-4o."

	t.Run("chat completions", func(t *testing.T) {
		params := chatParams
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		client := openAIFor(oa, "k")
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := acc.Choices[0].Message.Content; got != want || chunks < 10 {
			t.Fatalf("%d chunks, text %q", chunks, got)
		}
		if acc.Choices[0].FinishReason != "stop" || acc.Usage.TotalTokens == 0 {
			t.Fatalf("finish %q usage %+v", acc.Choices[0].FinishReason, acc.Usage)
		}
	})
	t.Run("responses", func(t *testing.T) {
		client := openAIFor(oa, "k")
		stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-4o",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
		var types []string
		var text strings.Builder
		var completed responses.Response
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				completed = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if types[0] != "response.created" || types[len(types)-1] != "response.completed" || text.String() != want {
			t.Fatalf("events %v text %q", types, text.String())
		}
		if completed.OutputText() != want || completed.Status != "completed" {
			t.Fatalf("completed response %+v", completed)
		}
	})
	t.Run("anthropic messages", func(t *testing.T) {
		client := anthropicFor(an, "k")
		stream := client.Messages.NewStreaming(ctx, messageParams)
		var msg anthropic.Message
		var types []string
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			if err := msg.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if got := msg.Content[0].Text; !strings.Contains(got, "answering as claude-sonnet-4") || msg.StopReason != "end_turn" {
			t.Fatalf("message %q stop %q", got, msg.StopReason)
		}
		if types[0] != "message_start" || types[len(types)-1] != "message_stop" || !contains(types, "content_block_delta") {
			t.Fatalf("events %v", types)
		}
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Errors inside a 200 stream, first or after content: the SDKs report them as errors with
// the provider's error type, after the content that came before.
func TestErrorEventsInsideAStream(t *testing.T) {
	ctx := context.Background()
	oa := serveFake(t, fakeprovider.OpenAI)
	an := serveFake(t, fakeprovider.Anthropic)
	tests := []struct {
		name      string
		scenario  fakeprovider.Scenario
		anthropic bool
		wantText  string // content before the error
		wantErr   string // substring of the SDK's error
	}{
		{"openai error first", fakeprovider.ScenarioErrorFirst, false, "", "server_error"},
		{"openai error after content", fakeprovider.ScenarioErrorMid, false, "Hello from", "server_error"},
		{"anthropic error first", fakeprovider.ScenarioErrorFirst, true, "", "overloaded_error"},
		{"anthropic error after content", fakeprovider.ScenarioErrorMid, true, "Hello from", "overloaded_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var text strings.Builder
			var err error
			if tt.anthropic {
				client := anthropicFor(an, "k", aoption.WithHeader(fakeprovider.HeaderScenario, string(tt.scenario)))
				stream := client.Messages.NewStreaming(ctx, messageParams)
				for stream.Next() {
					if d := stream.Current().Delta; d.Text != "" {
						text.WriteString(d.Text)
					}
				}
				err = stream.Err()
			} else {
				client := openAIFor(oa, "k", option.WithHeader(fakeprovider.HeaderScenario, string(tt.scenario)))
				stream := client.Chat.Completions.NewStreaming(ctx, chatParams)
				for stream.Next() {
					if cs := stream.Current().Choices; len(cs) > 0 {
						text.WriteString(cs[0].Delta.Content)
					}
				}
				err = stream.Err()
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("stream error %v, want %q", err, tt.wantErr)
			}
			if text.String() != tt.wantText {
				t.Fatalf("content before the error %q, want %q", text.String(), tt.wantText)
			}
		})
	}
	// The Responses API fails with response.failed.
	client := openAIFor(oa, "k", option.WithHeader(fakeprovider.HeaderScenario, string(fakeprovider.ScenarioErrorMid)))
	stream := client.Responses.NewStreaming(ctx,
		responses.ResponseNewParams{Model: "gpt-4o", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	last := ""
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.failed" {
			last = ev.Type
			if ev.Response.Status != "failed" || ev.Response.Error.Code != "server_error" {
				t.Fatalf("failed event %+v", ev.Response)
			}
		}
	}
	if last != "response.failed" {
		t.Fatal("no response.failed event")
	}
}
