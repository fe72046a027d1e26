// Package replies builds every HTTP reply Spillway answers with itself: status, headers and
// an OpenAI-shaped JSON error body {"error":{"message","type","code",...}} with a stable code.
//
// The codes are an external contract: clients and tests outside the repository match on them,
// and the README's "The HTTP surface" lists them with their statuses. A code is never renamed
// or given another status; a new situation gets a new code. A reply never carries a
// credential: builders take only provider, connection and model names, numbers, and fixed
// texts. Where a wait is known the reply carries Retry-After in whole seconds, rounded up,
// never 0.
package replies

import (
	"strconv"
	"time"
)

// Stable error codes (the body's error.code).
const (
	CodeAllTargetsCoolingDown = "all_targets_cooling_down"
	CodeProviderCircuitOpen   = "provider_circuit_open"
	CodeNoExecutableTargets   = "no_executable_targets"
	CodeRateLimit             = "rate_limit_error"
	CodeQueueFull             = "RATE_LIMIT_QUEUE_FULL"
	CodeQueueTimeout          = "RATE_LIMIT_QUEUE_TIMEOUT"
	CodeExecutionTimeout      = "RATE_LIMIT_EXECUTION_TIMEOUT"
	CodeSemaphoreQueueFull    = "SEMAPHORE_QUEUE_FULL"
	CodeSemaphoreTimeout      = "SEMAPHORE_TIMEOUT"
	CodeInvalidRequest        = "invalid_request"
	CodeRequestTooLarge       = "request_too_large"
	CodeUnauthorized          = "unauthorized"
	CodeForbidden             = "forbidden"
	CodeInternal              = "internal_error"
)

// Error types (the body's error.type), after the classes OpenAI and Anthropic clients know.
const (
	TypeInvalidRequest     = "invalid_request_error"
	TypeAuthentication     = "authentication_error"
	TypePermission         = "permission_error"
	TypeRateLimit          = "rate_limit_error"
	TypeServiceUnavailable = "service_unavailable_error"
	TypeTimeout            = "timeout_error"
	TypeServer             = "server_error"
	// TypeAPI is Anthropic's class of an error on the API's side, where OpenAI says
	// TypeServer (Anthropic's API reference, "Errors": api_error).
	TypeAPI = "api_error"
)

// Header names the replies set (lower case, as HTTP/2 and Envoy carry them).
const (
	HeaderContentType     = "content-type"
	HeaderRetryAfter      = "retry-after"
	HeaderWWWAuthenticate = "www-authenticate"
	ContentTypeJSON       = "application/json"
	// HeaderBreaker marks Spillway's own breaker-open 503 (value BreakerOpen), so a client
	// or an outer proxy tells it from a provider's 503 without parsing the body: Spillway's
	// counterpart of OmniRoute's X-OmniRoute-Provider-Breaker: open (the guide is silent).
	HeaderBreaker = "x-spillway-breaker"
	BreakerOpen   = "open"
)

// MaxExcluded bounds the diagnostics list of a cooling-down reply; the rest are counted in
// diagnostics.omitted. A combo has a handful of targets, so this only stops a runaway list.
const MaxExcluded = 64

// maxClientText bounds client-supplied text (a model name) echoed in a message.
const maxClientText = 200

// Reply is one complete local reply, ready for proxy_send_local_response.
type Reply struct {
	Status  int         // HTTP status
	Code    string      // error.code, also useful for stats and logs
	Headers [][2]string // content-type, and retry-after when a wait is known
	Body    []byte      // the JSON body
}

// Excluded is one combo target that was skipped before dispatch, for the diagnostics of a
// cooling-down reply.
type Excluded struct {
	Provider   string        // provider id
	Connection string        // connection id (never its credential)
	Model      string        // upstream model
	Reason     string        // model_lockout | circuit_open | provider_cooldown | unavailable | terminal
	RetryAfter time.Duration // time left on the timer that excludes it (0 = none)
}

// RetryAfterSeconds converts a wait to Retry-After seconds: rounded up, at least 1 for any
// positive wait, 0 when no wait is known (d <= 0).
func RetryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// AllTargetsCoolingDown is 503 all_targets_cooling_down: every target of the combo for
// model is excluded by a resilience timer. retryAfter is the earliest timer (0 = unknown).
func AllTargetsCoolingDown(model string, retryAfter time.Duration, excluded []Excluded) Reply {
	msg := "every target for model " + strconv.Quote(clip(model, maxClientText)) +
		" is excluded by a resilience timer" + retrySuffix(retryAfter)
	b := open(CodeAllTargetsCoolingDown, TypeServiceUnavailable, msg)
	b = appendRetryAfter(b, retryAfter)
	b = append(appendKey(b, "diagnostics"), '{')
	b = append(appendKey(b, "excluded"), '[')
	shown := excluded
	if len(shown) > MaxExcluded {
		shown = shown[:MaxExcluded]
	}
	for _, e := range shown {
		if b[len(b)-1] != '[' {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendStringField(b, "provider", e.Provider)
		b = appendStringField(b, "connection", e.Connection)
		b = appendStringField(b, "model", e.Model)
		b = appendStringField(b, "reason", e.Reason)
		b = appendIntField(b, "retryAfterSeconds", RetryAfterSeconds(e.RetryAfter))
		b = append(b, '}')
	}
	b = append(b, ']')
	if omitted := len(excluded) - len(shown); omitted > 0 {
		b = appendIntField(b, "omitted", int64(omitted))
	}
	b = append(b, '}')
	return finish(503, CodeAllTargetsCoolingDown, retryAfter, b)
}

// ProviderCircuitOpen is 503 provider_circuit_open: the provider's breaker is OPEN (or its
// HALF_OPEN probe is in flight). It carries x-spillway-breaker: open.
func ProviderCircuitOpen(provider string, retryAfter time.Duration) Reply {
	msg := "provider " + strconv.Quote(provider) + " is temporarily unavailable (circuit open)" +
		retrySuffix(retryAfter)
	b := open(CodeProviderCircuitOpen, TypeServiceUnavailable, msg)
	b = appendStringField(b, "provider", provider)
	b = appendRetryAfter(b, retryAfter)
	r := finish(503, CodeProviderCircuitOpen, retryAfter, b)
	r.Headers = append(r.Headers, [2]string{HeaderBreaker, BreakerOpen})
	return r
}

// NoExecutableTargets is 404 no_executable_targets: the combo for model has nothing to run
// and no resilience timer was involved.
func NoExecutableTargets(model string) Reply {
	msg := "no executable target for model " + strconv.Quote(clip(model, maxClientText))
	return finish(404, CodeNoExecutableTargets, 0, open(CodeNoExecutableTargets, TypeInvalidRequest, msg))
}

// RateLimited is 429 rate_limit_error: every target for model is in a short transient
// lockout; retryAfter and resetAt describe the earliest one to expire.
func RateLimited(model string, retryAfter time.Duration, resetAt time.Time) Reply {
	msg := "every target for model " + strconv.Quote(clip(model, maxClientText)) +
		" is rate limited" + retrySuffix(retryAfter)
	b := open(CodeRateLimit, TypeRateLimit, msg)
	b = appendRetryAfter(b, retryAfter)
	if !resetAt.IsZero() {
		// Rounded up to the second, so the advertised reset is never before the real one.
		if frac := resetAt.Sub(resetAt.Truncate(time.Second)); frac > 0 {
			resetAt = resetAt.Add(time.Second - frac)
		}
		b = appendTimeField(b, "reset_at", resetAt)
	}
	return finish(429, CodeRateLimit, retryAfter, b)
}

// QueueFull is 429 RATE_LIMIT_QUEUE_FULL: the queue of a provider connection already held
// queued waiting requests, at or above its limit (maxQueueDepth), so this request for model
// was refused before queuing (guide §5). The body names the limit, the provider,
// connection and model, and the real queue length.
func QueueFull(provider, connection, model string, limit, queued int) Reply {
	return fullQueue(CodeQueueFull, "request queue", provider, connection, model, limit, queued)
}

// fullQueue is the reply of a queue that refused a newcomer: what, where, the limit
// (maxQueueDepth) and the queue's real length.
func fullQueue(code, what, provider, connection, model string, limit, queued int) Reply {
	msg := what + " of " + target(provider, connection)
	if model != "" {
		msg += " for model " + strconv.Quote(clip(model, maxClientText))
	}
	msg += " is full: " + strconv.Itoa(queued) + " waiting, maxQueueDepth " + strconv.Itoa(limit)
	b := open(code, TypeRateLimit, msg)
	b = appendStringField(b, "provider", provider)
	b = appendStringField(b, "connection", connection)
	if model != "" {
		b = appendStringField(b, "model", clip(model, maxClientText))
	}
	b = appendIntField(b, "max_queue_depth", int64(limit))
	b = appendIntField(b, "queue_length", int64(queued))
	return finish(429, code, 0, b)
}

// QueueTimeout is 429 RATE_LIMIT_QUEUE_TIMEOUT: the request waited its whole queue budget
// (maxWaitMs) without a slot and never reached the upstream.
func QueueTimeout(provider, connection string, budget time.Duration) Reply {
	msg := "no free slot on " + target(provider, connection) + " within the queue wait budget of " +
		budget.String()
	return finish(429, CodeQueueTimeout, 0, open(CodeQueueTimeout, TypeRateLimit, msg))
}

// SemaphoreQueueFull is 429 SEMAPHORE_QUEUE_FULL: the model's concurrency gate on the
// connection (modelConcurrency) already has queued requests waiting, limit of them at most.
func SemaphoreQueueFull(provider, connection, model string, limit, queued int) Reply {
	return fullQueue(CodeSemaphoreQueueFull, "model concurrency gate", provider, connection, model, limit, queued)
}

// SemaphoreTimeout is 429 SEMAPHORE_TIMEOUT: the request waited its whole budget for a slot
// of its model's concurrency gate on the connection.
func SemaphoreTimeout(provider, connection string, budget time.Duration) Reply {
	msg := "no free model slot on " + target(provider, connection) + " within the wait budget of " +
		budget.String()
	return finish(429, CodeSemaphoreTimeout, 0, open(CodeSemaphoreTimeout, TypeRateLimit, msg))
}

// ExecutionTimeout is 504 RATE_LIMIT_EXECUTION_TIMEOUT: the request ran past
// executionMaxWaitMs after dispatch.
func ExecutionTimeout(provider, connection string, limit time.Duration) Reply {
	msg := "request on " + target(provider, connection) + " exceeded the execution limit of " +
		limit.String()
	return finish(504, CodeExecutionTimeout, 0, open(CodeExecutionTimeout, TypeTimeout, msg))
}

// InvalidRequest is 400 invalid_request. detail is a fixed description chosen by the caller
// ("request body is not valid JSON", "request has no model"); never pass request content.
func InvalidRequest(detail string) Reply {
	return finish(400, CodeInvalidRequest, 0, open(CodeInvalidRequest, TypeInvalidRequest, clip(detail, maxClientText)))
}

// RequestTooLarge is 413 request_too_large: the body is over limit bytes.
func RequestTooLarge(limit int64) Reply {
	msg := "request body is larger than the limit of " + strconv.FormatInt(limit, 10) + " bytes"
	b := open(CodeRequestTooLarge, TypeInvalidRequest, msg)
	b = appendIntField(b, "limit_bytes", limit)
	return finish(413, CodeRequestTooLarge, 0, b)
}

// Unauthorized is the admin API's 401: no bearer token (no Authorization header, or another
// scheme).
func Unauthorized() Reply {
	r := finish(401, CodeUnauthorized, 0, open(CodeUnauthorized, TypeAuthentication, "missing or invalid admin bearer token"))
	r.Headers = append(r.Headers, [2]string{HeaderWWWAuthenticate, `Bearer realm="spillway"`})
	return r
}

// Forbidden is the admin API's 403: a bearer token that is not the configured one.
func Forbidden() Reply {
	return finish(403, CodeForbidden, 0, open(CodeForbidden, TypePermission, "admin API access is not allowed"))
}

// Internal is 500 internal_error: Spillway itself failed and could not pass the request on.
func Internal() Reply {
	return finish(500, CodeInternal, 0, open(CodeInternal, TypeServer, "internal error in the Spillway filter"))
}

// open starts a body: {"error":{"message":…,"type":…,"code":… (left open for extras).
func open(code, typ, message string) []byte {
	b := make([]byte, 0, 256)
	b = append(b, `{"error":{`...)
	b = appendStringField(b, "message", message)
	b = appendStringField(b, "type", typ)
	return appendStringField(b, "code", code)
}

// finish closes the body and adds the headers.
func finish(status int, code string, retryAfter time.Duration, b []byte) Reply {
	b = append(b, '}', '}')
	headers := make([][2]string, 1, 3)
	headers[0] = [2]string{HeaderContentType, ContentTypeJSON}
	if s := RetryAfterSeconds(retryAfter); s > 0 {
		headers = append(headers, [2]string{HeaderRetryAfter, strconv.FormatInt(s, 10)})
	}
	return Reply{Status: status, Code: code, Headers: headers, Body: b}
}

// appendRetryAfter appends "retry_after": seconds when a wait is known.
func appendRetryAfter(b []byte, retryAfter time.Duration) []byte {
	if s := RetryAfterSeconds(retryAfter); s > 0 {
		b = appendIntField(b, "retry_after", s)
	}
	return b
}

// retrySuffix is the message's "; retry after Ns" when a wait is known.
func retrySuffix(retryAfter time.Duration) string {
	if s := RetryAfterSeconds(retryAfter); s > 0 {
		return "; retry after " + strconv.FormatInt(s, 10) + "s"
	}
	return ""
}

// target names a provider connection in a message.
func target(provider, connection string) string {
	return "provider " + strconv.Quote(provider) + " connection " + strconv.Quote(connection)
}

// Codes of the request-path replies added with routing.
const (
	CodeModelNotFound = "model_not_found"
	CodeMisconfigured = "spillway_misconfigured"
	CodeUpstreamError = "upstream_error"
)

// CodeStreamTruncated is not a reply's but an error event's: the one that ends, for the
// client, a committed event stream the provider ended without its terminal event (the
// filter adds it in the stream's API shape, llmapi.AppendStreamError). It is the word the
// attempt is recorded with (the failure reason stream_truncated), so the client's error and
// the operator's metrics and logs name the same thing.
const CodeStreamTruncated = "stream_truncated"

// ModelNotFound is 404 model_not_found: no route of the policy serves the requested model.
func ModelNotFound(model string) Reply {
	msg := "no route serves model " + strconv.Quote(clip(model, maxClientText))
	return finish(404, CodeModelNotFound, 0, open(CodeModelNotFound, TypeInvalidRequest, msg))
}

// Misconfigured is 500 spillway_misconfigured: the proxy does not hold request headers
// while the body arrives (the Wasm filter's PluginConfig lacks
// allow_on_headers_stop_iteration: true), so Spillway cannot route on the body.
func Misconfigured() Reply {
	msg := "the proxy is misconfigured for Spillway: set allow_on_headers_stop_iteration: true in the Wasm filter's " +
		"PluginConfig (Envoy >= 1.36); without it no request body reaches the filter"
	return finish(500, CodeMisconfigured, 0, open(CodeMisconfigured, TypeServer, msg))
}

// UpstreamFailed is 502 upstream_error: every attempt failed without a response Spillway
// could pass on (connection failures, timeouts).
func UpstreamFailed(attempts int) Reply {
	msg := "no upstream answered: " + strconv.Itoa(attempts) + " attempt(s) failed"
	return finish(502, CodeUpstreamError, 0, open(CodeUpstreamError, TypeServer, msg))
}
