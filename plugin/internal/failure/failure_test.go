package failure

import (
	"testing"
	"time"
)

func TestUpstreamHint(t *testing.T) {
	cases := []struct {
		source HintSource    // where the hint came from
		hint   time.Duration // the verdict's RetryHint
		want   time.Duration // what a cooling layer may use
	}{
		{HintRetryAfter, 20 * time.Second, 20 * time.Second},
		{HintRateLimitReset, time.Minute, time.Minute},
		{HintGoogleRetryInfo, 86399 * time.Second, 86399 * time.Second},
		{HintBodyField, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{HintBodyText, 30 * time.Second, 30 * time.Second},
		{HintRestatement, 60 * time.Second, 0}, // synthetic: told to the client only
		{HintRule, 6 * time.Hour, 0},           // a rule's cooldown travels in Cooldown
		{HintNone, 5 * time.Second, 0},
		{HintRetryAfter, -time.Second, 0}, // never negative
	}
	for _, c := range cases {
		if got := (Verdict{HintSource: c.source, RetryHint: c.hint}).UpstreamHint(); got != c.want {
			t.Errorf("source %d hint %v: got %v, want %v", c.source, c.hint, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		base  time.Duration // first cooldown
		index int           // failure index
		max   time.Duration // clamp
		want  time.Duration
	}{
		{3 * time.Second, 0, 30 * time.Minute, 3 * time.Second},
		{3 * time.Second, 3, 30 * time.Minute, 24 * time.Second},
		{3 * time.Second, 8, 30 * time.Minute, 768 * time.Second},
		{120 * time.Second, 4, 30 * time.Minute, 30 * time.Minute}, // 1920 s clamps to 30 min
		{time.Second, 1 << 20, time.Hour, time.Hour},               // no overflow
	}
	for _, c := range cases {
		if got := Backoff(c.base, c.index, c.max); got != c.want {
			t.Errorf("Backoff(%v, %d, %v) = %v, want %v", c.base, c.index, c.max, got, c.want)
		}
	}
}

func TestWaitable(t *testing.T) {
	// guide §4 "Cooldown-bewuste retry voor combo's": comboCooldownWait waits out only a
	// would-be 429's short lock — a rate limit or a busy account (concurrency limit).
	cases := []struct {
		reason Reason // why the lock was set
		want   bool   // comboCooldownWait may wait it out
	}{
		{ReasonRateLimit, true},
		{ReasonConcurrencyLimited, true},
		{ReasonModelCapacity, false}, // a 529 / 503 overloaded model: a would-be 5xx
		{ReasonServerError, false},
		{ReasonTimeout, false},
		{ReasonTransport, false},
		{ReasonQuotaExhausted, false}, // "vergrendeld tot middernacht"
		{ReasonAuthError, false},
		{ReasonExpired, false},
		{ReasonNotFound, false},
		{ReasonCreditsExhausted, false},
		{ReasonBanned, false},
		{ReasonStreamStall, false},
		{ReasonStreamTruncated, false},
		{ReasonNone, false},
	}
	for _, c := range cases {
		if got := c.reason.Waitable(); got != c.want {
			t.Errorf("%q.Waitable() = %v, want %v", c.reason, got, c.want)
		}
	}
}

func TestServerError(t *testing.T) {
	// guide §1: only provider-level failures — the trip codes 408, 500, 502, 503, 504 and
	// failures without a response — are the provider's service failing; "NIET trippen bij
	// fouten op accountniveau (de meeste 401/403/429 — die horen bij cooldown of lockout)".
	cases := []struct {
		reason Reason // why the connection cools
		want   bool   // a recovery probe may try it
	}{
		{ReasonServerError, true},
		{ReasonTimeout, true},
		{ReasonTransport, true},
		{ReasonRateLimit, false},
		{ReasonConcurrencyLimited, false},
		{ReasonQuotaExhausted, false},
		{ReasonAuthError, false},
		{ReasonExpired, false},
		{ReasonCreditsExhausted, false},
		{ReasonBanned, false},
		{ReasonRequestRejected, false},
		{ReasonModelCapacity, false}, // an overloaded model, not the service
		{ReasonNotFound, false},
		{ReasonBadRequest, false},
		{ReasonStreamStall, false},
		{ReasonStreamTruncated, false},
		{ReasonUnknown, false},
		{ReasonNone, false},
	}
	for _, c := range cases {
		if got := c.reason.ServerError(); got != c.want {
			t.Errorf("%q.ServerError() = %v, want %v", c.reason, got, c.want)
		}
	}
}
