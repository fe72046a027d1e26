package e2etest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/tidwall/gjson"
)

// ClientKey is the credential the harness's requests carry; the filter replaces it with
// the chosen connection's, so a fake that counts it saw a request the filter did not
// route.
const ClientKey = "sk-e2e-client-key"

// Response is what a client got.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// ReadErr is the error reading the body ended in (a reset stream), nil for a whole one.
	ReadErr error
}

// JSON returns the body as a gjson document (query it with gjson paths such as
// "error.code"), failing the test if it is not a JSON object.
func (r *Response) JSON(t testing.TB) gjson.Result {
	t.Helper()
	if !gjson.ValidBytes(r.Body) || !gjson.ParseBytes(r.Body).IsObject() {
		t.Fatalf("e2etest: body is not a JSON object: %s", r.Body)
	}
	return gjson.ParseBytes(r.Body)
}

// Spillway returns the response's x-spillway-* headers that name the answer: provider,
// connection, model and attempts, as "provider/connection/model/attempts".
func (r *Response) Spillway() string {
	h := r.Header
	return h.Get("x-spillway-provider") + "/" + h.Get("x-spillway-connection") + "/" +
		h.Get("x-spillway-model") + "/" + h.Get("x-spillway-attempts")
}

// Do sends a request with the client's own key and reads the whole answer. header adds
// request headers (x-fake-* faults, session ids). A request that gets no answer fails the
// test.
func Do(t testing.TB, method, url, body string, header map[string]string) *Response {
	t.Helper()
	r, err := Send(context.Background(), method, url, body, header)
	if err != nil {
		t.Fatalf("e2etest: %v", err)
	}
	return r
}

// Send is Do for a request that may get no answer (its ctx cancelled, the connection
// reset before the headers): it returns the error instead of failing the test, so it can
// run on a goroutine of its own.
func Send(ctx context.Context, method, url, body string, header map[string]string) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("e2etest: %w", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+ClientKey)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2etest: %s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b, ReadErr: rerr}, nil
}

// ChatBody is an OpenAI chat completions body for model; stream asks for SSE.
func ChatBody(model string, stream bool) string {
	s := ""
	if stream {
		s = `,"stream":true`
	}
	return `{"model":"` + model + `","messages":[{"role":"user","content":"Hello"}]` + s + `}`
}

// Chat posts a chat completion for model to the target.
func (tg *Target) Chat(t testing.TB, model string, header map[string]string) *Response {
	t.Helper()
	return Do(t, "POST", tg.URL+"/v1/chat/completions", ChatBody(model, false), header)
}

// Admin calls the filter's admin API (path relative to its prefix, e.g.
// "monitoring/health") with AdminToken and returns the status and the reply, a JSON
// object (query it with gjson paths such as `connections.#(id=="a").status`).
func (tg *Target) Admin(t testing.TB, method, path, body string) (int, gjson.Result) {
	t.Helper()
	req, err := http.NewRequest(method, tg.AdminAPI()+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("e2etest: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("e2etest: admin %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !gjson.ValidBytes(b) || !gjson.ParseBytes(b).IsObject() {
		t.Fatalf("e2etest: admin %s %s: %d, not a JSON object: %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, gjson.ParseBytes(b)
}

// Scrape reads the admin listener's /stats/prometheus.
func (tg *Target) Scrape(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(tg.AdminURL + "/stats/prometheus")
	if err != nil {
		t.Fatalf("e2etest: scrape: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("e2etest: scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// PollInterval is how often WaitFor looks again.
const PollInterval = 20 * time.Millisecond

// WaitFor waits until cond holds, looking every PollInterval, for state that changes on
// its own time and announces itself nowhere a test can block on (a cooldown running out,
// a tick flushing metrics, another goroutine's bookkeeping). It never times anything:
// the bound, hostsimtest.WaitLimit, is only there so a broken test fails instead of
// hanging; what fails says what was awaited.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hostsimtest.WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("e2etest: still waiting after %v for %s", hostsimtest.WaitLimit, what)
		}
		time.Sleep(PollInterval)
	}
}
