// Package fakeprovider is fake LLM upstreams (OpenAI- and Anthropic-compatible) for `hostsim
// serve` and tests: valid answers in the providers' real wire formats, as JSON and as SSE
// streams (Chat Completions chunks ending in `data: [DONE]`, Responses API events,
// Anthropic message events) paced like a real model; request validation with the
// provider's own error shape; and misbehaviour on cue, scripted per credential or asked for
// by request headers. Each fake counts what every credential sent it and how many of those
// requests were in flight at once.
//
// Faults. A request can ask for its own failure with headers. They pass through the filter
// like any other header, and Spillway copies them onto its failover attempts, so every key
// and provider a request tries gets them; x-fake-key-suffix aims them at one key:
//
//	x-fake-scenario: NAME       one of the Scenario names: rate-limit, concurrency-limit, quota,
//	                            unavailable, overloaded, agentrouter-quota, agentrouter-no-access,
//	                            credits, slow-stream, stall, heartbeat-only, error-first,
//	                            error-mid, truncate, reset, timeout
//	x-fake-status: 429          answer this status with an error body in the provider's shape
//	x-fake-retry-after: 7       add Retry-After: 7 to the answer
//	x-fake-message: text        the error's message
//	x-fake-delay-ms: 250        wait this long before answering (at most MaxDelay)
//	x-fake-event-delay-ms: 100  the gap between stream events
//	x-fake-after-events: 3      content events before a stall, error-mid, truncate or reset
//	x-fake-key-suffix: key-b    apply the x-fake-* headers only when the request's credential
//	                            (bearer token or x-api-key, as the filter injected it) ends
//	                            with this
//
// Tests script answers instead: Provider.Script queues Faults for any request,
// Provider.ScriptFor for one credential; each scripted Fault answers one request, in order,
// before normal service (and the headers) resume.
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

// Limits on what a fake accepts.
const (
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes = 8 << 20
	// MaxDelay bounds a requested or scripted delay.
	MaxDelay = 60 * time.Second
	// MaxRecorded is how many recent requests a Provider keeps (the oldest go first).
	MaxRecorded = 256
	// MaxStreamDuration bounds how long a stalled or heartbeat-only stream stays open.
	MaxStreamDuration = 10 * time.Minute
)

// Pacing is how fast a fake streams: the delay before the first content event (time to
// first token) and between the next ones.
type Pacing struct {
	First, Between time.Duration
}

// DefaultPacing is a fast model's pace: 300 ms to the first token, then 40 ms a token.
var DefaultPacing = Pacing{First: 300 * time.Millisecond, Between: 40 * time.Millisecond}

// Recorded is a request a fake received.
type Recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Credential says which credential sent it (the bearer token or x-api-key; "" for none).
	Credential string
	// Start is when the request arrived; Sent holds the time each part of the answer was
	// written and flushed (the headers of a stream, then each SSE event).
	Start time.Time
	Sent  []time.Time
}

// Stats counts the requests one credential (or all of them) sent.
type Stats struct {
	// Requests is how many arrived.
	Requests int
	// InFlight is how many are being answered now; MaxInFlight the most at once so far.
	InFlight, MaxInFlight int
}

// Provider is one fake upstream; it is an http.Handler and safe for concurrent use.
type Provider struct {
	kind Kind
	name string
	seq  atomic.Uint64

	mu       sync.Mutex
	pacing   Pacing
	script   []Fault
	scripts  map[string][]Fault
	requests []*Recorded
	stats    map[string]*Stats
	total    Stats
}

// New returns a fake speaking kind's API; name appears in its canned replies.
func New(kind Kind, name string) (*Provider, error) {
	if kind != OpenAI && kind != Anthropic {
		return nil, fmt.Errorf("fakeprovider: unknown kind %q (want %q or %q)", kind, OpenAI, Anthropic)
	}
	return &Provider{kind: kind, name: name, pacing: DefaultPacing, scripts: map[string][]Fault{},
		stats: map[string]*Stats{}}, nil
}

// Kind returns the API the fake speaks.
func (p *Provider) Kind() Kind { return p.kind }

// Name returns the fake's name.
func (p *Provider) Name() string { return p.name }

// SetPacing sets how fast the fake streams (tests speed it up; zero is as fast as possible).
func (p *Provider) SetPacing(pc Pacing) {
	p.mu.Lock()
	p.pacing = Pacing{First: min(max(pc.First, 0), MaxDelay), Between: min(max(pc.Between, 0), MaxDelay)}
	p.mu.Unlock()
}

// Script queues faults; each answers one request, whatever its credential, in order, before
// normal service resumes. A credential's own script (ScriptFor) goes first.
func (p *Provider) Script(faults ...Fault) {
	p.mu.Lock()
	p.script = append(p.script, faults...)
	p.mu.Unlock()
}

// ScriptFor queues faults for the requests of one credential (a bearer token or an
// x-api-key value, as the filter injects it).
func (p *Provider) ScriptFor(credential string, faults ...Fault) {
	p.mu.Lock()
	p.scripts[credential] = append(p.scripts[credential], faults...)
	p.mu.Unlock()
}

// Requests returns copies of the recent requests, oldest first.
func (p *Provider) Requests() []Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Recorded, len(p.requests))
	for i, r := range p.requests {
		out[i] = Recorded{Method: r.Method, Path: r.Path, Header: r.Header.Clone(), Body: bytes.Clone(r.Body),
			Credential: r.Credential, Start: r.Start, Sent: append([]time.Time(nil), r.Sent...)}
	}
	return out
}

// StatsFor returns the counts for one credential.
func (p *Provider) StatsFor(credential string) Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.stats[credential]; s != nil {
		return *s
	}
	return Stats{}
}

// TotalStats returns the counts over all credentials.
func (p *Provider) TotalStats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Reset forgets the recorded requests, the counts and the remaining scripts.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.script, p.scripts, p.requests = nil, map[string][]Fault{}, nil
	p.stats, p.total = map[string]*Stats{}, Stats{InFlight: p.total.InFlight}
	p.mu.Unlock()
}

// credentialOf is the credential a request carries: the bearer token, or x-api-key.
func credentialOf(h http.Header) string {
	if a := h.Get("Authorization"); a != "" {
		if tok, ok := strings.CutPrefix(a, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
		return a
	}
	return h.Get("X-Api-Key")
}

// enter counts a request in; leave counts it out.
func (p *Provider) enter(credential string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats[credential]
	if s == nil {
		s = &Stats{}
		p.stats[credential] = s
	}
	for _, st := range []*Stats{s, &p.total} {
		st.Requests++
		st.InFlight++
		st.MaxInFlight = max(st.MaxInFlight, st.InFlight)
	}
}

func (p *Provider) leave(credential string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.stats[credential]; s != nil && s.InFlight > 0 {
		s.InFlight--
	}
	if p.total.InFlight > 0 {
		p.total.InFlight--
	}
}

func (p *Provider) record(r *http.Request, body []byte, credential string, start time.Time) *Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) == MaxRecorded {
		copy(p.requests, p.requests[1:])
		p.requests = p.requests[:MaxRecorded-1]
	}
	rec := &Recorded{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body,
		Credential: credential, Start: start}
	p.requests = append(p.requests, rec)
	return rec
}

// sent notes that a part of the answer went out now.
func (p *Provider) sent(rec *Recorded) {
	p.mu.Lock()
	rec.Sent = append(rec.Sent, time.Now())
	p.mu.Unlock()
}

func (p *Provider) nextScripted(credential string) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.scripts[credential]; len(q) > 0 {
		p.scripts[credential] = q[1:]
		return q[0], true
	}
	if len(p.script) == 0 {
		return Fault{}, false
	}
	f := p.script[0]
	p.script = p.script[1:]
	return f, true
}

func (p *Provider) currentPacing() Pacing {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pacing
}

// call is one request being answered.
type call struct {
	p     *Provider
	w     http.ResponseWriter
	r     *http.Request
	body  []byte
	fault Fault
	rec   *Recorded
}

// ServeHTTP implements http.Handler.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	credential := credentialOf(r.Header)
	p.enter(credential)
	defer p.leave(credential)
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		p.writeError(w, http.StatusBadRequest, "", "could not read the request body: "+err.Error())
		return
	}
	c := &call{p: p, w: w, r: r, body: body, rec: p.record(r, body, credential, start)}
	if len(body) > MaxBodyBytes {
		p.writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body larger than %d bytes", MaxBodyBytes))
		return
	}
	fault, scripted := p.nextScripted(credential)
	if !scripted {
		if fault, err = faultFromHeaders(r.Header, credential); err != nil {
			p.writeError(w, http.StatusBadRequest, "", err.Error())
			return
		}
	}
	model, stream := peekModel(body)
	c.fault = fault.resolve(p.kind, model, stream, start)
	if !c.wait(c.fault.Delay) || !c.waitFor(c.fault.Until) {
		return
	}
	switch f := c.fault; {
	case f.Hang:
		c.hang()
		return
	case f.Reset:
		resetConnection(w)
		return
	case f.Status >= 300:
		c.answerError(f)
		return
	}
	p.route(c)
}

// peekModel reads the request's model and stream flag, if it has them.
func peekModel(body []byte) (model string, stream bool) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	return req.Model, req.Stream
}

// wait sleeps d unless the client goes away first (false then).
func (c *call) wait(d time.Duration) bool {
	if d <= 0 {
		return c.r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.r.Context().Done():
		return false
	}
}

// waitFor waits until ch is closed (at once for nil), unless the client goes away first
// (false then).
func (c *call) waitFor(ch <-chan struct{}) bool {
	if ch == nil {
		return c.r.Context().Err() == nil
	}
	select {
	case <-ch:
		return true
	case <-c.r.Context().Done():
		return false
	}
}

// hang holds the request until the client goes away (bounded by MaxStreamDuration).
func (c *call) hang() { c.wait(MaxStreamDuration) }

// addFaultHeaders adds the headers the fault answers with (its Header and Retry-After),
// to an error and to a stream alike.
func (c *call) addFaultHeaders(f Fault) {
	h := c.w.Header()
	for k, vs := range f.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if f.RetryAfter != "" {
		h.Set("Retry-After", f.RetryAfter)
	}
}

// answerError writes the fault's error in the provider's shape.
func (c *call) answerError(f Fault) {
	c.addFaultHeaders(f)
	msg := f.Message
	if msg == "" {
		msg = fmt.Sprintf("fake %s error %d (%s)", c.p.name, f.Status, http.StatusText(f.Status))
	}
	c.p.writeErrorTyped(c.w, f.Status, "", msg, f.ErrorType, f.ErrorCode)
}

// resetConnection ends the connection with a TCP RST (SO_LINGER 0) without finishing the
// answer: what a crashed upstream or a proxy in between does. After HTTP/1 headers and data
// the client sees a body cut short; before them, a connection reset.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // HTTP/2: the server resets the stream
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (p *Provider) route(c *call) {
	type handler func(c *call)
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
	r, w := c.r, c.w
	if h, ok := routes[r.Method+" "+r.URL.Path]; ok {
		h(c)
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
	p.writeErrorTyped(w, status, param, msg, "", "")
}

// errorBody is an error in the provider's shape; typ and code override the status's own.
func (p *Provider) errorBody(status int, param, msg, typ, code string) map[string]any {
	if p.kind == Anthropic {
		if typ == "" {
			typ = anthropicErrorType(status)
		}
		return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	}
	defTyp, defCode := openAIErrorType(status)
	if typ == "" {
		typ = defTyp
	}
	if code == "" {
		code = defCode
	}
	var paramV, codeV any
	if param != "" {
		paramV = param
	}
	if code != "" {
		codeV = code
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": paramV, "code": codeV}}
}

func (p *Provider) writeErrorTyped(w http.ResponseWriter, status int, param, msg, typ, code string) {
	writeJSON(w, status, p.errorBody(status, param, msg, typ, code))
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

// Close stops the server at once (streams in progress are cut).
func (s *Server) Close() error { return s.srv.Close() }
