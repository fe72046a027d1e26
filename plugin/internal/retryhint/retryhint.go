// Package retryhint reads an upstream's own retry hint from a failed response — headers,
// typed and untyped JSON body fields, reset text — as a bounded delay with its source.
//
// Sources, most authoritative first (Find): a typed google.rpc.RetryInfo detail,
// retry-after-ms, Retry-After, untyped body fields (retry_after_ms, retryAfter, retryDelay,
// resets_in_seconds, reset_at, ...; durations, ISO-8601 durations, numbers, epoch times and
// RFC 3339 / HTTP-date timestamps alike), rate-limit reset headers (X-RateLimit-Reset, x-ratelimit-reset-requests,
// anthropic-ratelimit-*-reset, ...), and finally reset text in the body ("try again in 30s",
// "reset after 2h30m14s", "retry after 20 seconds"). Every delay is positive and at most
// MaxDelay; anything else is no hint. Only HintGoogleRetryInfo may later become a long model
// lockout (guide §5, "Retries uit de body").
//
// Reset text is free text, and providers echo client input into their error messages (the
// classify package doc, "Echoes"): a client that writes "try again in 86400s" in its prompt
// would otherwise set a genuine 429's cooldown, or an exhausted quota's window, to a day. So
// a textual hint whose matched text — the trigger phrase and the duration after it, as they
// stand in the body — occurs in what the client sent (textscan.Echo: the request body with
// its JSON escapes decoded, the model, the headers; ASCII case ignored; within
// textscan.MaxEchoScanBytes, and a match longer than textscan.MaxNeedleBytes, which no real
// wait is, counts as sent) is no hint, and the search goes on past it; without another, the
// hint from the status and headers applies. The structured sources are read as they
// were: headers are the upstream's own, and body fields are read by JSON path from the
// error object, where an echo lands only inside a string value, which no path descends into
// (gjson reads the structure; "retry_after" spelled inside a message is no field). They can
// carry client text only when an upstream answers with the request's own JSON as its error
// body — a top-level "retry_after", or an "error" object with RetryInfo details, that the
// client put in its request (the body must be one JSON object, so never the "0.error" array
// form); that is not guarded.
package retryhint

import (
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/tidwall/gjson"
)

// MaxDelay caps every hint: the longest any layer honours an upstream hint (a typed Google
// RetryInfo model lockout, policies.ModelLockoutLongRetryCap). Longer or overflowing values
// are clamped to it, not dropped: the upstream did say "a long time".
const MaxDelay = policies.ModelLockoutLongRetryCap

// maxHeaders bounds how many response headers are looked at.
const maxHeaders = 128

// Hint is an upstream retry hint.
type Hint struct {
	Delay  time.Duration      // how long the upstream asks to wait; 0 = no hint
	Source failure.HintSource // where Delay came from; HintNone when there is no hint
}

// Found reports whether the hint holds a delay.
func (h Hint) Found() bool { return h.Source != failure.HintNone }

// Find returns the most authoritative hint in a failed response: typed Google RetryInfo,
// then Retry-After headers, untyped body fields, rate-limit reset headers, and reset text
// (see the package doc). headers are name/value pairs as proxy-wasm delivers them; names
// are matched case-insensitively. At most textscan.MaxScanBytes of body are read. echo is
// what the client sent, for the reset text (FromText); nil: unknown, every match counts.
func Find(headers [][2]string, body []byte, now time.Time, echo *textscan.Echo) Hint {
	body = textscan.Cap(body)
	json := textscan.String(body)
	if d, ok := googleRetryInfo(json); ok {
		return Hint{d, failure.HintGoogleRetryInfo}
	}
	if h := fromRetryAfterHeaders(headers, now); h.Found() {
		return h
	}
	if d, ok := bodyField(json, now); ok {
		return Hint{d, failure.HintBodyField}
	}
	if d, ok := rateLimitReset(headers, now); ok {
		return Hint{d, failure.HintRateLimitReset}
	}
	if d, ok := FromText(json, echo); ok {
		return Hint{d, failure.HintBodyText}
	}
	return Hint{}
}

// FromHeaders returns the hint in the response headers alone: retry-after-ms, Retry-After,
// then rate-limit reset headers.
func FromHeaders(headers [][2]string, now time.Time) Hint {
	if h := fromRetryAfterHeaders(headers, now); h.Found() {
		return h
	}
	if d, ok := rateLimitReset(headers, now); ok {
		return Hint{d, failure.HintRateLimitReset}
	}
	return Hint{}
}

// RetryAfter returns the Retry-After header's delay (see ParseRetryAfter), ignoring every
// other source.
func RetryAfter(headers [][2]string, now time.Time) (time.Duration, bool) {
	for i, h := range headers {
		if i == maxHeaders {
			break
		}
		if textscan.EqualFold(h[0], "retry-after") {
			return ParseRetryAfter(h[1], now)
		}
	}
	return 0, false
}

// fromRetryAfterHeaders reads retry-after-ms (OpenAI's precise form) or Retry-After.
func fromRetryAfterHeaders(headers [][2]string, now time.Time) Hint {
	var seconds string
	haveSeconds := false
	for i, h := range headers {
		if i == maxHeaders {
			break
		}
		switch {
		case textscan.EqualFold(h[0], "retry-after-ms"):
			if d, ok := ParseReset(h[1], now, true); ok {
				return Hint{d, failure.HintRetryAfter}
			}
		case !haveSeconds && textscan.EqualFold(h[0], "retry-after"):
			seconds, haveSeconds = h[1], true
		}
	}
	if haveSeconds {
		if d, ok := ParseRetryAfter(seconds, now); ok {
			return Hint{d, failure.HintRetryAfter}
		}
	}
	return Hint{}
}

// rateLimitReset reads the reset headers: every header whose name holds both "ratelimit"
// and "reset". When a header's "remaining" twin (x-ratelimit-reset-tokens ↔
// x-ratelimit-remaining-tokens) says that limit still has room, that limit did not cause
// the failure and its reset is ignored, unless no limit is known to be spent. Of the rest
// the longest wait wins: the request can go only when every spent limit has reset.
func rateLimitReset(headers [][2]string, now time.Time) (time.Duration, bool) {
	var spent, any time.Duration
	for i, h := range headers {
		if i == maxHeaders {
			break
		}
		name := h[0]
		at := textscan.IndexFold(name, "reset")
		if at < 0 || !textscan.ContainsFold(name, "ratelimit") {
			continue
		}
		millis := len(name) > 3 && textscan.EqualFold(name[len(name)-3:], "-ms")
		d, ok := ParseReset(h[1], now, millis)
		if !ok {
			continue
		}
		any = max(any, d)
		if !remainingHasRoom(headers, name, at) {
			spent = max(spent, d)
		}
	}
	switch {
	case spent > 0:
		return spent, true
	case any > 0:
		return any, true
	}
	return 0, false
}

// remainingHasRoom reports whether the twin of reset header name (with "reset" at index at
// replaced by "remaining") is present with a positive value.
func remainingHasRoom(headers [][2]string, name string, at int) bool {
	const reset, remaining = "reset", "remaining"
	prefix, suffix := name[:at], name[at+len(reset):]
	for i, h := range headers {
		if i == maxHeaders {
			break
		}
		n := h[0]
		if len(n) != len(prefix)+len(remaining)+len(suffix) ||
			!textscan.EqualFold(n[:len(prefix)], prefix) ||
			!textscan.EqualFold(n[len(prefix):len(prefix)+len(remaining)], remaining) ||
			!textscan.EqualFold(n[len(prefix)+len(remaining):], suffix) {
			continue
		}
		v := trimSpace(h[1])
		num, ok := parseNumber(v, 0)
		return ok && num.end == len(v) && (num.whole > 0 || num.frac > 0)
	}
	return false
}

// googleRetryType is the @type of a typed Google retry hint.
const googleRetryType = "type.googleapis.com/google.rpc.RetryInfo"

// detailsPaths are where Google puts error details: the usual object, and the array a
// streaming Gemini endpoint wraps errors in.
var detailsPaths = [...]string{"error.details", "0.error.details"}

// googleRetryInfo reads retryDelay from a typed google.rpc.RetryInfo detail.
func googleRetryInfo(json string) (time.Duration, bool) {
	if !strings.Contains(json, "RetryInfo") {
		return 0, false // one fast scan instead of two JSON walks
	}
	for _, path := range detailsPaths {
		details := gjson.Get(json, path)
		if !details.IsArray() {
			continue
		}
		var delay time.Duration
		found := false
		details.ForEach(func(_, detail gjson.Result) bool {
			if !detail.IsObject() || typeOf(detail) != googleRetryType {
				return true
			}
			delay, found = protoDuration(detail.Get("retryDelay"))
			return !found
		})
		if found {
			return delay, true
		}
	}
	return 0, false
}

// typeOf returns a detail's "@type". It walks the keys instead of querying `\@type`: an
// escaped gjson path allocates on every call.
func typeOf(detail gjson.Result) string {
	var typ string
	detail.ForEach(func(key, value gjson.Result) bool {
		if key.Str == "@type" {
			typ = value.Str
			return false
		}
		return true
	})
	return typ
}

// protoDuration reads a google.protobuf.Duration in its JSON form ("30s", "1.5s") or, as
// some encoders write it, as an object {"seconds": 30, "nanos": 0}.
func protoDuration(v gjson.Result) (time.Duration, bool) {
	switch v.Type {
	case gjson.String:
		return ParseDuration(v.Str)
	case gjson.JSON:
		if !v.IsObject() {
			return 0, false
		}
		seconds, nanos := v.Get("seconds"), v.Get("nanos")
		var d time.Duration
		if s, ok := nonNegativeNumber(seconds, time.Second); ok {
			d = s
		}
		if n, ok := nonNegativeNumber(nanos, time.Nanosecond); ok && n < time.Second {
			d += n
		}
		return clamp(d)
	}
	return 0, false
}

// bodyFields are the untyped hint fields, at the top level or under "error", with the unit
// of a bare number. The string forms may be ISO-8601 durations ("PT30S"), Go-style
// durations ("30s"), or absolute times (RFC 3339 "2025-06-01T12:05:00Z", an HTTP date),
// measured from now. Reset fields (reset: true) name when the limit resets, so a bare
// number there may also be an epoch time (as in reset headers).
var bodyFields = [...]struct {
	path  string
	key   string // the field's own name and closing quote: a body without it skips the JSON walk
	unit  time.Duration
	reset bool
}{
	{"retry_after_ms", `retry_after_ms"`, time.Millisecond, false},
	{"error.retry_after_ms", `retry_after_ms"`, time.Millisecond, false},
	{"retryAfterMs", `retryAfterMs"`, time.Millisecond, false},
	{"error.retryAfterMs", `retryAfterMs"`, time.Millisecond, false},
	{"retry_after", `retry_after"`, time.Second, false},
	{"error.retry_after", `retry_after"`, time.Second, false},
	{"retryAfter", `retryAfter"`, time.Second, false},
	{"error.retryAfter", `retryAfter"`, time.Second, false},
	{"retry_after_seconds", `retry_after_seconds"`, time.Second, false},
	{"error.retry_after_seconds", `retry_after_seconds"`, time.Second, false},
	{"resets_in_seconds", `resets_in_seconds"`, time.Second, false}, // Codex usage_limit_reached
	{"error.resets_in_seconds", `resets_in_seconds"`, time.Second, false},
	{"retryDelay", `retryDelay"`, time.Second, false},
	{"error.retryDelay", `retryDelay"`, time.Second, false},
	{"error.details.#.retryDelay", `retryDelay"`, time.Second, false}, // a RetryInfo-shaped detail without its @type
	{"retry_at", `retry_at"`, time.Second, true},
	{"error.retry_at", `retry_at"`, time.Second, true},
	{"retryAt", `retryAt"`, time.Second, true},
	{"error.retryAt", `retryAt"`, time.Second, true},
	{"resets_at", `resets_at"`, time.Second, true}, // Codex usage_limit_reached
	{"error.resets_at", `resets_at"`, time.Second, true},
	{"reset_at", `reset_at"`, time.Second, true},
	{"error.reset_at", `reset_at"`, time.Second, true},
	{"resetAt", `resetAt"`, time.Second, true},
	{"error.resetAt", `resetAt"`, time.Second, true},
	{"reset_time", `reset_time"`, time.Second, true},
	{"error.reset_time", `reset_time"`, time.Second, true},
	{"resetTime", `resetTime"`, time.Second, true},
	{"error.resetTime", `resetTime"`, time.Second, true},
}

// bodyField reads the first untyped hint field present that holds a usable delay.
func bodyField(json string, now time.Time) (time.Duration, bool) {
	if !strings.Contains(json, "retry") && !strings.Contains(json, "reset") && !strings.Contains(json, "Reset") {
		return 0, false // every field name holds one of these: skip the JSON walks
	}
	lastKey, present := "", false
	for _, f := range bodyFields {
		if f.key != lastKey {
			lastKey, present = f.key, strings.Contains(json, f.key)
		}
		if !present {
			continue // one substring scan instead of a JSON walk
		}
		v := gjson.Get(json, f.path)
		if v.IsArray() { // the details query: take the first element
			v = v.Get("0")
		}
		switch v.Type {
		case gjson.Number:
			if f.reset {
				if d, ok := ParseReset(v.Raw, now, false); ok {
					return d, true
				}
				continue
			}
			if d, ok := nonNegativeNumber(v, f.unit); ok {
				if d, ok := clamp(d); ok {
					return d, true
				}
			}
		case gjson.String:
			if d, ok := stringDelay(v.Str, f.unit, now); ok {
				return d, true
			}
		}
	}
	return 0, false
}

// stringDelay parses a body field's string: an ISO-8601 duration, a duration with a unit,
// a bare number in unit, or an absolute time (RFC 3339 or an HTTP date) measured from now.
func stringDelay(s string, unit time.Duration, now time.Time) (time.Duration, bool) {
	s = trimSpace(s)
	if len(s) > 0 && s[0]|0x20 == 'p' {
		return ParseISO8601(s)
	}
	if n, ok := parseNumber(s, 0); ok && n.end == len(s) {
		return clamp(n.times(unit))
	}
	if d, ok := ParseDuration(s); ok {
		return d, true
	}
	return parseDate(s, now)
}

// nonNegativeNumber converts a JSON number in unit to a duration using its raw text, so
// no float rounding or overflow applies; negative and exponent forms are rejected.
func nonNegativeNumber(v gjson.Result, unit time.Duration) (time.Duration, bool) {
	if v.Type != gjson.Number {
		return 0, false
	}
	n, ok := parseNumber(v.Raw, 0)
	if !ok || n.end != len(v.Raw) {
		return 0, false
	}
	return n.times(unit), true
}

// textTriggers introduce a relative wait in an error message. Matching ignores ASCII case.
var textTriggers = [...]string{
	"try again in ",
	"try again after ",
	"retry in ",
	"retry after ",
	"reset after ",
	"resets after ",
	"reset in ",
	"resets in ",
	"wait for ",
}

// FromText finds a relative wait in free text: a trigger phrase ("try again in", "retry
// after", "reset after", "resets in", ...) followed by a duration ("30s", "20 seconds",
// "2h30m14s", "1.5 minutes"). A match whose text (trigger and duration) the client sent
// (echo.Echoed: the package doc) is skipped; a nil echo knows no request. At most
// textscan.MaxScanBytes are read. The result is clamped to MaxDelay.
func FromText(s string, echo *textscan.Echo) (time.Duration, bool) {
	if len(s) > textscan.MaxScanBytes {
		s = s[:textscan.MaxScanBytes]
	}
	for _, trigger := range textTriggers {
		rest := s
		for {
			at := textscan.IndexFold(rest, trigger)
			if at < 0 {
				break
			}
			match := rest[at:]
			rest = rest[at+len(trigger):]
			d, end, ok := scanDuration(rest, 0, true)
			if !ok {
				continue
			}
			if d, ok := clamp(d); ok && !echo.Echoed(match[:len(trigger)+end]) {
				return d, true
			}
		}
	}
	return 0, false
}
