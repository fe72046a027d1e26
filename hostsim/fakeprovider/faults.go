package fakeprovider

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scenario names a way for a fake to misbehave: the status, body, headers and stream shape
// a real provider shows in that situation, in the fake's own API (see the package doc for
// what each one answers).
type Scenario string

// The scenarios (also the values of the x-fake-scenario request header).
const (
	// ScenarioRateLimit: 429 with Retry-After and the provider's rate-limit headers
	// (OpenAI x-ratelimit-*-requests and X-RateLimit-Reset, Anthropic anthropic-ratelimit-*).
	ScenarioRateLimit Scenario = "rate-limit"
	// ScenarioConcurrencyLimit: 429 saying too many concurrent requests.
	ScenarioConcurrencyLimit Scenario = "concurrency-limit"
	// ScenarioQuota: 429 saying a daily quota is used up.
	ScenarioQuota Scenario = "quota"
	// ScenarioUnavailable: 503 (script several for a storm).
	ScenarioUnavailable Scenario = "unavailable"
	// ScenarioOverloaded: Anthropic's 529 overloaded_error; OpenAI's 503 "overloaded".
	ScenarioOverloaded Scenario = "overloaded"
	// ScenarioAgentrouterQuota: agentrouter's 403 with 额度不足 (quota insufficient).
	ScenarioAgentrouterQuota Scenario = "agentrouter-quota"
	// ScenarioAgentrouterNoAccess: agentrouter's 403 with 无权访问模型 (no access to the model).
	ScenarioAgentrouterNoAccess Scenario = "agentrouter-no-access"
	// ScenarioCredits: the account's credits are gone (OpenAI 429 insufficient_quota,
	// Anthropic 400 "credit balance is too low").
	ScenarioCredits Scenario = "credits"
	// ScenarioSlowStream: a stream whose events come SlowEventDelay apart.
	ScenarioSlowStream Scenario = "slow-stream"
	// ScenarioStall: a stream that stops after AfterEvents content events and stays open.
	ScenarioStall Scenario = "stall"
	// ScenarioHeartbeatOnly: a stream of heartbeats only (": keep-alive" comments, Anthropic
	// ping events), never content.
	ScenarioHeartbeatOnly Scenario = "heartbeat-only"
	// ScenarioErrorFirst: a 200 stream whose first event is an error event.
	ScenarioErrorFirst Scenario = "error-first"
	// ScenarioErrorMid: a 200 stream with an error event after AfterEvents content events.
	ScenarioErrorMid Scenario = "error-mid"
	// ScenarioTruncate: a stream that ends cleanly after AfterEvents content events, without
	// its terminal events ([DONE], message_stop, response.completed).
	ScenarioTruncate Scenario = "truncate"
	// ScenarioReset: the connection is reset (TCP RST): before any answer for a JSON
	// request, after AfterEvents content events for a stream.
	ScenarioReset Scenario = "reset"
	// ScenarioTimeout: no answer at all until the client gives up.
	ScenarioTimeout Scenario = "timeout"
)

// scenarios lists every scenario, for validation and docs.
var scenarios = []Scenario{ScenarioRateLimit, ScenarioConcurrencyLimit, ScenarioQuota, ScenarioUnavailable,
	ScenarioOverloaded, ScenarioAgentrouterQuota, ScenarioAgentrouterNoAccess, ScenarioCredits, ScenarioSlowStream,
	ScenarioStall, ScenarioHeartbeatOnly, ScenarioErrorFirst, ScenarioErrorMid, ScenarioTruncate, ScenarioReset,
	ScenarioTimeout}

// Defaults of the scenarios.
const (
	// DefaultAfterEvents is how many content events a stall, an error-mid, a truncated or a
	// reset stream sends before its fault.
	DefaultAfterEvents = 2
	// DefaultRetryAfter is the Retry-After of ScenarioRateLimit.
	DefaultRetryAfter = 7 * time.Second
	// SlowEventDelay is the gap between events of ScenarioSlowStream.
	SlowEventDelay = 2 * time.Second
	// HeartbeatInterval is the gap between heartbeats of ScenarioHeartbeatOnly.
	HeartbeatInterval = time.Second
)

// StreamFault is how a 200 SSE stream goes wrong.
type StreamFault int

// The stream faults.
const (
	StreamOK            StreamFault = iota // a normal stream
	StreamError                            // an error event after AfterEvents content events, then the end
	StreamTruncate                         // a clean end after AfterEvents content events, without the terminal events
	StreamReset                            // a TCP reset after AfterEvents content events
	StreamStall                            // nothing more after AfterEvents content events, until the client goes
	StreamHeartbeatOnly                    // heartbeats only, until the client goes
)

// Fault is one answer a fake gives instead of (or on top of) its normal one: a scripted
// answer (Provider.Script, Provider.ScriptFor) or what the x-fake-* request headers ask for.
// Scenario fills in the provider's realistic status, body, headers and stream shape; the
// other fields, when set, override them.
type Fault struct {
	// Scenario is the situation to reproduce ("" for none).
	Scenario Scenario
	// Status answers this HTTP status with an error body in the provider's shape (0 or 2xx:
	// answer normally, after Delay).
	Status int
	// ErrorType and ErrorCode override the error body's type and code (OpenAI error.type and
	// error.code, Anthropic error.type).
	ErrorType, ErrorCode string
	// Message is the error's message (default: the scenario's, or a text naming the status).
	Message string
	// RetryAfter, when set, is sent as the Retry-After header of the answer.
	RetryAfter string
	// Header is added to the answer (e.g. X-RateLimit-Reset, anthropic-ratelimit-*).
	Header http.Header
	// Delay is how long to wait before answering (bounded by MaxDelay). A client that goes
	// away meanwhile gets nothing.
	Delay time.Duration
	// Hang never answers: the request is held until the client goes away (a timeout).
	Hang bool
	// Until, when set, holds the answer until the channel is closed (after Delay), then
	// answers as the rest of the fault says; a client that goes away first gets nothing.
	// Only a script can set it: a test holds a connection's slot and releases it by the
	// provider answering, so the provider has counted the request out before the answer
	// ends (a client that gives up instead is counted out whenever the fake notices).
	Until <-chan struct{}
	// Pause, when set, stops a "stream": true answer after AfterEvents content events
	// (its headers and preamble sent, each event flushed) until the channel is closed; the
	// stream then goes on as the rest of the fault says. A client that goes away first
	// gets nothing more. Only a script can set it: a test sees the first events reach its
	// client while the provider provably holds the rest (a proof of streaming by order,
	// not by timing).
	Pause <-chan struct{}
	// Reset resets the connection (TCP RST) instead of answering.
	Reset bool
	// Stream is how a "stream": true answer goes wrong.
	Stream StreamFault
	// AfterEvents is how many content events the stream sends before its fault.
	AfterEvents int
	// EventDelay, when set, is the gap between stream events (and before the first),
	// overriding the provider's pacing (bounded by MaxDelay).
	EventDelay time.Duration
}

// resolve fills in the scenario's answer for this provider, request model and stream flag;
// explicitly set fields win.
func (f Fault) resolve(kind Kind, model string, stream bool, now time.Time) Fault {
	var d Fault // the scenario's defaults
	switch f.Scenario {
	case ScenarioRateLimit:
		d = Fault{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(int(DefaultRetryAfter / time.Second)),
			Header: rateLimitHeaders(kind, DefaultRetryAfter, now)}
		if kind == Anthropic {
			d.Message = "This request would exceed the rate limit for your organization of 50 requests per minute. " +
				"For details, refer to: https://docs.claude.com/en/api/rate-limits."
		} else {
			d.Message = "Rate limit reached for requests per minute. Limit: 500, Used: 500, Requested: 1. " +
				"Please try again in 7s."
		}
	case ScenarioConcurrencyLimit:
		d = Fault{Status: http.StatusTooManyRequests,
			Message: "Too many concurrent requests for this key. Please wait for your other requests to finish and retry."}
	case ScenarioQuota:
		d = Fault{Status: http.StatusTooManyRequests,
			Message: "You have used up your daily quota of requests for this model. It resets at midnight UTC."}
		if kind == OpenAI {
			d.ErrorCode = "daily_quota_exceeded"
		}
	case ScenarioUnavailable:
		d = Fault{Status: http.StatusServiceUnavailable, Message: "The service is temporarily unavailable. Please retry."}
	case ScenarioOverloaded:
		if kind == Anthropic {
			d = Fault{Status: 529, ErrorType: "overloaded_error", Message: "Overloaded"}
		} else {
			d = Fault{Status: http.StatusServiceUnavailable, Message: "The engine is currently overloaded, please try again later."}
		}
	case ScenarioAgentrouterQuota:
		d = Fault{Status: http.StatusForbidden, ErrorType: "new_api_error", ErrorCode: "insufficient_user_quota",
			Message: "用户额度不足, 剩余额度: ＄0.000000 (request id: fake)"}
	case ScenarioAgentrouterNoAccess:
		d = Fault{Status: http.StatusForbidden, ErrorType: "new_api_error", ErrorCode: "model_not_allowed",
			Message: fmt.Sprintf("该令牌无权访问模型 %s (request id: fake)", model)}
	case ScenarioCredits:
		if kind == Anthropic {
			d = Fault{Status: http.StatusBadRequest, ErrorType: "invalid_request_error",
				Message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}
		} else {
			d = Fault{Status: http.StatusTooManyRequests, ErrorType: "insufficient_quota", ErrorCode: "insufficient_quota",
				Message: "You exceeded your current quota, please check your plan and billing details."}
		}
	case ScenarioSlowStream:
		d = Fault{EventDelay: SlowEventDelay}
	case ScenarioStall:
		d = Fault{Stream: StreamStall, AfterEvents: DefaultAfterEvents}
	case ScenarioHeartbeatOnly:
		d = Fault{Stream: StreamHeartbeatOnly, EventDelay: HeartbeatInterval}
	case ScenarioErrorFirst:
		d = Fault{Stream: StreamError}
	case ScenarioErrorMid:
		d = Fault{Stream: StreamError, AfterEvents: DefaultAfterEvents}
	case ScenarioTruncate:
		d = Fault{Stream: StreamTruncate, AfterEvents: DefaultAfterEvents}
	case ScenarioReset:
		if stream {
			d = Fault{Stream: StreamReset, AfterEvents: DefaultAfterEvents}
		} else {
			d = Fault{Reset: true}
		}
	case ScenarioTimeout:
		d = Fault{Hang: true}
	}
	if f.Status == 0 {
		f.Status = d.Status
	}
	if f.ErrorType == "" {
		f.ErrorType = d.ErrorType
	}
	if f.ErrorCode == "" {
		f.ErrorCode = d.ErrorCode
	}
	if f.Message == "" {
		f.Message = d.Message
	}
	if f.RetryAfter == "" {
		f.RetryAfter = d.RetryAfter
	}
	if d.Header != nil {
		h := d.Header
		for k, vs := range f.Header {
			h[k] = vs
		}
		f.Header = h
	}
	f.Hang = f.Hang || d.Hang
	f.Reset = f.Reset || d.Reset
	if f.Stream == StreamOK {
		f.Stream = d.Stream
	}
	if f.AfterEvents == 0 && d.AfterEvents != 0 && f.Stream == d.Stream {
		f.AfterEvents = d.AfterEvents
	}
	if f.EventDelay == 0 {
		f.EventDelay = d.EventDelay
	}
	f.Delay = min(f.Delay, MaxDelay)
	f.EventDelay = min(f.EventDelay, MaxDelay)
	return f
}

// rateLimitHeaders are the headers a provider sends with a rate-limit 429.
func rateLimitHeaders(kind Kind, wait time.Duration, now time.Time) http.Header {
	reset := now.Add(wait)
	h := http.Header{}
	if kind == Anthropic {
		h.Set("anthropic-ratelimit-requests-limit", "50")
		h.Set("anthropic-ratelimit-requests-remaining", "0")
		h.Set("anthropic-ratelimit-requests-reset", reset.UTC().Format(time.RFC3339))
		h.Set("anthropic-ratelimit-tokens-limit", "40000")
		h.Set("anthropic-ratelimit-tokens-remaining", "40000")
		h.Set("anthropic-ratelimit-tokens-reset", now.UTC().Format(time.RFC3339))
		return h
	}
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", wait.String())
	h.Set("x-ratelimit-limit-tokens", "30000")
	h.Set("x-ratelimit-remaining-tokens", "30000")
	h.Set("x-ratelimit-reset-tokens", "0s")
	// The generic form gateways (OpenRouter, agentrouter) send: the reset as Unix ms.
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.UnixMilli(), 10))
	return h
}

// Fault-injection request headers (see the package doc).
const (
	HeaderScenario     = "x-fake-scenario"
	HeaderStatus       = "x-fake-status"
	HeaderRetryAfter   = "x-fake-retry-after"
	HeaderMessage      = "x-fake-message"
	HeaderDelayMs      = "x-fake-delay-ms"
	HeaderEventDelayMs = "x-fake-event-delay-ms"
	HeaderAfterEvents  = "x-fake-after-events"
	HeaderKeySuffix    = "x-fake-key-suffix"
)

// maxAfterEvents bounds x-fake-after-events.
const maxAfterEvents = 1000

// faultFromHeaders reads the x-fake-* headers of a request; credential is the request's
// (for x-fake-key-suffix).
func faultFromHeaders(h http.Header, credential string) (Fault, error) {
	var f Fault
	if suffix := h.Get(HeaderKeySuffix); suffix != "" && !strings.HasSuffix(credential, suffix) {
		return f, nil // the faults are for another key
	}
	if v := h.Get(HeaderScenario); v != "" {
		s, err := ParseScenario(v)
		if err != nil {
			return f, err
		}
		f.Scenario = s
	}
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
	var err error
	if f.Delay, err = millisHeader(h, HeaderDelayMs); err != nil {
		return f, err
	}
	if f.EventDelay, err = millisHeader(h, HeaderEventDelayMs); err != nil {
		return f, err
	}
	if v := h.Get(HeaderAfterEvents); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxAfterEvents {
			return f, fmt.Errorf("%s must be 0-%d, got %q", HeaderAfterEvents, maxAfterEvents, v)
		}
		f.AfterEvents = n
		if f.Scenario == "" {
			return f, fmt.Errorf("%s needs %s (stall, error-mid, truncate or reset)", HeaderAfterEvents, HeaderScenario)
		}
	}
	return f, nil
}

func millisHeader(h http.Header, name string) (time.Duration, error) {
	v := h.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || time.Duration(n)*time.Millisecond > MaxDelay {
		return 0, fmt.Errorf("%s must be 0-%d milliseconds, got %q", name, MaxDelay.Milliseconds(), v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// ParseScenario reads a scenario name.
func ParseScenario(s string) (Scenario, error) {
	for _, sc := range scenarios {
		if string(sc) == s {
			return sc, nil
		}
	}
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = string(sc)
	}
	return "", fmt.Errorf("%s: unknown scenario %q (want one of %s)", HeaderScenario, s, strings.Join(names, ", "))
}

// Repeat returns n copies of f, e.g. a storm of 503s: p.Script(Repeat(5, Fault{Scenario:
// ScenarioUnavailable})...).
func Repeat(n int, f Fault) []Fault {
	out := make([]Fault, n)
	for i := range out {
		out[i] = f
	}
	return out
}
