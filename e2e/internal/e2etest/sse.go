package e2etest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Stream is a streaming (SSE) answer the client reads event by event.
type Stream struct {
	Status int
	Header http.Header
	// HeadersAt is when the answer's headers arrived.
	HeadersAt time.Time
	resp      *http.Response
	r         *bufio.Reader
	cancel    context.CancelFunc
}

// Event is one SSE event as it reached the client.
type Event struct {
	// Text is the event's lines, without the blank line that ends it.
	Text string
	// At is when its last byte arrived.
	At time.Time
}

// OpenStream posts body with the client's own key and returns the answer once its
// headers arrived; the test reads the events with Next and may Close it early (the
// client going away). It is closed when the test ends.
func OpenStream(t testing.TB, url, body string, header map[string]string) *Stream {
	t.Helper()
	s, err := DialStream(context.Background(), url, body, header)
	if err != nil {
		t.Fatalf("e2etest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// DialStream is OpenStream for a goroutine of its own (a test that must look at the
// fakes while the answer's headers have not come): it returns the error instead of
// failing the test, and the caller closes the stream. Cancelling ctx goes away.
func DialStream(ctx context.Context, url, body string, header map[string]string) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("e2etest: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+ClientKey)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("e2etest: POST %s: %w", url, err)
	}
	return &Stream{Status: resp.StatusCode, Header: resp.Header, HeadersAt: time.Now(), resp: resp,
		r: bufio.NewReader(resp.Body), cancel: cancel}, nil
}

// Next reads the next event; the error is the body's end (io.EOF for a clean one) or
// its read error.
func (s *Stream) Next() (Event, error) {
	var b strings.Builder
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return Event{Text: b.String(), At: time.Now()}, err
		}
		if line == "\n" {
			if b.Len() == 0 {
				continue
			}
			return Event{Text: strings.TrimSuffix(b.String(), "\n"), At: time.Now()}, nil
		}
		b.WriteString(line)
	}
}

// Rest reads every remaining event and the error the body ended in (io.EOF for a clean
// end).
func (s *Stream) Rest() ([]Event, error) {
	var out []Event
	for {
		ev, err := s.Next()
		if err != nil {
			if ev.Text != "" {
				out = append(out, ev)
			}
			return out, err
		}
		out = append(out, ev)
	}
}

// Close goes away: the request is cancelled and the connection closed.
func (s *Stream) Close() {
	s.cancel()
	_ = s.resp.Body.Close()
}
