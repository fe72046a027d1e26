// Package fakeprovider is tiny fake LLM upstreams (OpenAI- and Anthropic-compatible, not
// streaming) for `hostsim serve` and tests: valid JSON in the providers' shapes, request
// validation with the provider's own error shape, request recording, and faults on demand.
//
// Faults. A request can ask for its own failure with headers (they pass through the filter
// like any other header):
//
//	x-fake-status: 429          answer this status with an error body in the provider's shape
//	x-fake-retry-after: 7       add Retry-After: 7 to that error
//	x-fake-message: text        the error's message
//	x-fake-delay-ms: 250        wait this long before answering (at most MaxDelay)
//
// Tests can also script the next answers with Provider.Script: each scripted Fault answers
// one request, in order, before normal service resumes.
package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is the API a fake speaks.
type Kind string

// The APIs a fake can speak.
const (
	// OpenAI serves POST /v1/chat/completions, /v1/completions, /v1/embeddings,
	// /v1/responses and GET /v1/models.
	OpenAI Kind = "openai"
	// Anthropic serves POST /v1/messages and GET /v1/models.
	Anthropic Kind = "anthropic"
)

// Fault-injection request headers (see the package doc).
const (
	HeaderStatus     = "x-fake-status"
	HeaderRetryAfter = "x-fake-retry-after"
	HeaderMessage    = "x-fake-message"
	HeaderDelayMs    = "x-fake-delay-ms"
)

// Limits on what a fake accepts.
const (
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes = 8 << 20
	// MaxDelay bounds a requested or scripted delay.
	MaxDelay = 60 * time.Second
	// MaxRecorded is how many recent requests a Provider keeps (the oldest go first).
	MaxRecorded = 256
)

// Fault is one scripted answer.
type Fault struct {
	// Status is the HTTP status to answer with (0: answer normally, after Delay).
	Status int
	// RetryAfter, when set, is sent as the Retry-After header of the error.
	RetryAfter string
	// Message is the error message (default: a text naming the status).
	Message string
	// Delay is how long to wait before answering (bounded by MaxDelay).
	Delay time.Duration
}

// Recorded is a request a fake received.
type Recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Provider is one fake upstream; it is an http.Handler and safe for concurrent use.
type Provider struct {
	kind Kind
	name string
	seq  atomic.Uint64

	mu       sync.Mutex
	script   []Fault
	requests []Recorded
}

// New returns a fake speaking kind's API; name appears in its canned replies.
func New(kind Kind, name string) (*Provider, error) {
	if kind != OpenAI && kind != Anthropic {
		return nil, fmt.Errorf("fakeprovider: unknown kind %q (want %q or %q)", kind, OpenAI, Anthropic)
	}
	return &Provider{kind: kind, name: name}, nil
}

// Kind returns the API the fake speaks.
func (p *Provider) Kind() Kind { return p.kind }

// Name returns the fake's name.
func (p *Provider) Name() string { return p.name }

// Script queues faults; each answers one request, in order, before normal service resumes.
func (p *Provider) Script(faults ...Fault) {
	p.mu.Lock()
	p.script = append(p.script, faults...)
	p.mu.Unlock()
}

// Requests returns copies of the recent requests, oldest first.
func (p *Provider) Requests() []Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Recorded, len(p.requests))
	for i, r := range p.requests {
		out[i] = Recorded{Method: r.Method, Path: r.Path, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
	}
	return out
}

// Reset forgets the recorded requests and the remaining script.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.script, p.requests = nil, nil
	p.mu.Unlock()
}

func (p *Provider) record(r *http.Request, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) == MaxRecorded {
		copy(p.requests, p.requests[1:])
		p.requests = p.requests[:MaxRecorded-1]
	}
	p.requests = append(p.requests, Recorded{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
}

func (p *Provider) nextScripted() (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.script) == 0 {
		return Fault{}, false
	}
	f := p.script[0]
	p.script = p.script[1:]
	return f, true
}

// ServeHTTP implements http.Handler.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		p.writeError(w, http.StatusBadRequest, "", "could not read the request body: "+err.Error())
		return
	}
	p.record(r, body)
	if len(body) > MaxBodyBytes {
		p.writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body larger than %d bytes", MaxBodyBytes))
		return
	}
	fault, scripted := p.nextScripted()
	if !scripted {
		if fault, err = faultFromHeaders(r.Header); err != nil {
			p.writeError(w, http.StatusBadRequest, "", err.Error())
			return
		}
	}
	if d := min(fault.Delay, MaxDelay); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if fault.Status != 0 {
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		msg := fault.Message
		if msg == "" {
			msg = fmt.Sprintf("fake %s error %d (%s)", p.name, fault.Status, http.StatusText(fault.Status))
		}
		p.writeError(w, fault.Status, "", msg)
		return
	}
	p.route(w, r, body)
}

// faultFromHeaders reads the x-fake-* headers of a request.
func faultFromHeaders(h http.Header) (Fault, error) {
	var f Fault
	if v := h.Get(HeaderStatus); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 200 || n > 599 {
			return f, fmt.Errorf("%s must be an HTTP status 200-599, got %q", HeaderStatus, v)
		}
		if n >= 300 { // 2xx asks for a normal answer
			f.Status = n
		}
	}
	f.RetryAfter = h.Get(HeaderRetryAfter)
	f.Message = h.Get(HeaderMessage)
	if v := h.Get(HeaderDelayMs); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || time.Duration(n)*time.Millisecond > MaxDelay {
			return f, fmt.Errorf("%s must be 0-%d milliseconds, got %q", HeaderDelayMs, MaxDelay.Milliseconds(), v)
		}
		f.Delay = time.Duration(n) * time.Millisecond
	}
	return f, nil
}

func (p *Provider) route(w http.ResponseWriter, r *http.Request, body []byte) {
	type handler func(w http.ResponseWriter, body []byte)
	var routes map[string]handler
	if p.kind == OpenAI {
		routes = map[string]handler{
			"POST /v1/chat/completions": p.chatCompletion,
			"POST /v1/completions":      p.completion,
			"POST /v1/embeddings":       p.embeddings,
			"POST /v1/responses":        p.response,
			"GET /v1/models":            p.openAIModels,
		}
	} else {
		routes = map[string]handler{
			"POST /v1/messages": p.message,
			"GET /v1/models":    p.anthropicModels,
		}
	}
	if h, ok := routes[r.Method+" "+r.URL.Path]; ok {
		h(w, body)
		return
	}
	for key := range routes {
		if strings.HasSuffix(key, " "+r.URL.Path) {
			w.Header().Set("Allow", strings.Fields(key)[0])
			p.writeError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
			return
		}
	}
	p.writeError(w, http.StatusNotFound, "", fmt.Sprintf("no route %s %s on the fake %s provider", r.Method, r.URL.Path, p.kind))
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are marshalled: a failure is a bug
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"fakeprovider: cannot encode the reply"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError answers an error in the provider's own shape. param names the offending
// request field, if any (OpenAI reports it).
func (p *Provider) writeError(w http.ResponseWriter, status int, param, msg string) {
	if p.kind == Anthropic {
		writeJSON(w, status, map[string]any{
			"type":  "error",
			"error": map[string]any{"type": anthropicErrorType(status), "message": msg},
		})
		return
	}
	typ, code := openAIErrorType(status)
	var paramV, codeV any
	if param != "" {
		paramV = param
	}
	if code != "" {
		codeV = code
	}
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": paramV, "code": codeV},
	})
}

// openAIErrorType maps a status to OpenAI's error type and code.
func openAIErrorType(status int) (typ, code string) {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case status == http.StatusForbidden:
		return "invalid_request_error", "unsupported_country_region_territory"
	case status == http.StatusNotFound:
		return "invalid_request_error", "not_found"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error", "rate_limit_exceeded"
	case status >= 500:
		return "server_error", ""
	}
	return "invalid_request_error", ""
}

// anthropicErrorType maps a status to Anthropic's error type.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// Server is a Provider listening on a TCP address.
type Server struct {
	*Provider
	// URL is the base URL to reach it, e.g. http://127.0.0.1:39123.
	URL string
	srv *http.Server
	ln  net.Listener
}

// Start serves p on addr ("127.0.0.1:0" picks a free loopback port).
func Start(p *Provider, addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakeprovider: listen for %s: %w", p.name, err)
	}
	s := &Server{Provider: p, URL: "http://" + ln.Addr().String(), ln: ln,
		srv: &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return s, nil
}

// Close stops the server at once.
func (s *Server) Close() error { return s.srv.Close() }
