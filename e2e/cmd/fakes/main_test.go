package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lineWriter hands each write (run prints one line per write) to the test.
type lineWriter struct {
	ch chan string
}

func (b *lineWriter) Write(p []byte) (int, error) {
	b.ch <- string(p)
	return len(p), nil
}

// The fakes serve their API on the given addresses until the context ends, and answer
// the fault headers.
func TestRunServesEachFake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{ch: make(chan string, 4)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"fake-openai=openai@127.0.0.1:0", "fake-anthropic=anthropic@127.0.0.1:0"}, out)
	}()
	urls := map[string]string{}
	re := regexp.MustCompile(`^fakes: (\S+) \((\w+)\) on (http://\S+)\n$`)
	for len(urls) < 2 {
		select {
		case line := <-out.ch:
			m := re.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("line %q", line)
			}
			urls[m[1]] = m[3]
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no fake started")
		}
	}
	for _, tc := range []struct {
		fake   string            // which fake
		path   string            // the request's path
		body   string            // the request's body
		header map[string]string // fault headers
		status int               // the status it answers
		want   string            // substring of the body
	}{
		{"fake-openai", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, nil, 200, "Hello from fake-openai"},
		{"fake-anthropic", "/v1/messages", `{"model":"claude-sonnet-4","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil, 200, "Hello from fake-anthropic"},
		{"fake-openai", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			map[string]string{"x-fake-scenario": "rate-limit"}, 429, "rate_limit_error"},
	} {
		req, _ := http.NewRequest("POST", urls[tc.fake]+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer k")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !bytes.Contains(b, []byte(tc.want)) {
			t.Errorf("%s %s: %d %s, want %d with %q", tc.fake, tc.path, resp.StatusCode, b, tc.status, tc.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// Bad arguments are refused with what is expected.
func TestRunRefusesBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string // the command line
		want string   // substring of the error
	}{
		{nil, "no fake given"},
		{[]string{"fake-openai"}, "want NAME=KIND@HOST:PORT"},
		{[]string{"fake-openai=openai"}, "want NAME=KIND@HOST:PORT"},
		{[]string{"fake-x=gemini@127.0.0.1:0"}, `kind "gemini"`},
		{[]string{"fake-x=openai@127.0.0.1:bad"}, "start fake-x"},
	} {
		err := run(context.Background(), tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
