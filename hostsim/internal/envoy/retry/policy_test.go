package retry

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestParseRetryOn(t *testing.T) {
	for _, tc := range []struct {
		in      string    // retry_on or x-envoy-retry-on
		want    Condition // the conditions recognised
		unknown []string  // the names ignored
	}{
		{"5xx", On5xx, nil},
		{" 5xx , gateway-error,,reset ", On5xx | OnGatewayError | OnReset, nil},
		{"retriable-headers,retriable-status-codes,envoy-ratelimited", OnRetriableHeaders | OnRetriableStatusCodes | OnEnvoyRateLimited, nil},
		{"connect-failure,refused-stream,retriable-4xx,reset-before-request",
			OnConnectFailure | OnRefusedStream | OnRetriable4xx | OnResetBeforeRequest, nil},
		// Names are case-sensitive; gRPC and HTTP/3 names are not modelled.
		{"5XX,unavailable,http3-post-connect-failure,5xx", On5xx, []string{"5XX", "unavailable", "http3-post-connect-failure"}},
		// Only ASCII whitespace is trimmed, as absl::StripAsciiWhitespace does.
		{"\u00a05xx", 0, []string{"\u00a05xx"}},
		{"", 0, nil},
	} {
		got, unknown := ParseRetryOn(tc.in)
		if got != tc.want || !slices.Equal(unknown, tc.unknown) {
			t.Errorf("ParseRetryOn(%q) = %v, %q; want %v, %q", tc.in, got, unknown, tc.want, tc.unknown)
		}
	}
}

func TestConditionStringRoundTrips(t *testing.T) {
	all := allConditions
	if got, unknown := ParseRetryOn(all.String()); got != all || unknown != nil {
		t.Fatalf("ParseRetryOn(%q) = %v, %q", all.String(), got, unknown)
	}
	if s := (On5xx | OnReset | 1<<20).String(); s != "5xx,reset" {
		t.Fatalf("String() = %q, want the known names only", s)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     Policy // the policy
		field string // the field rejected, "" for a valid policy
	}{
		{"zero policy", Policy{}, ""},
		{"everything set", Policy{RetryOn: allConditions, NumRetries: Uint32(0), RetriableStatusCodes: []uint32{100, 599},
			RetriableHeaders: []HeaderMatcher{{Name: "x-retry", Kind: MatchExact, Value: "1", Invert: true}},
			PerTryTimeout:    time.Second, BaseInterval: time.Millisecond, MaxInterval: time.Millisecond, BufferLimit: Uint64(0)}, ""},
		{"unknown condition bit", Policy{RetryOn: 1 << 30}, "retry_on"},
		{"status 99", Policy{RetriableStatusCodes: []uint32{503, 99}}, "retriable_status_codes"},
		{"status 600", Policy{RetriableStatusCodes: []uint32{600}}, "retriable_status_codes"},
		{"nameless retriable header", Policy{RetriableHeaders: []HeaderMatcher{{Name: "a"}, {}}}, "retriable_headers[1].name"},
		{"unknown match kind", Policy{RetriableRequestHeaders: []HeaderMatcher{{Name: "a", Kind: 7}}}, "retriable_request_headers[0]"},
		{"negative per-try timeout", Policy{PerTryTimeout: -1}, "per_try_timeout"},
		{"negative base", Policy{BaseInterval: -time.Millisecond}, "retry_back_off.base_interval"},
		{"negative max", Policy{BaseInterval: time.Millisecond, MaxInterval: -time.Millisecond}, "retry_back_off.max_interval"},
		{"max without base", Policy{MaxInterval: time.Second}, "retry_back_off.base_interval"},
		{"max under base", Policy{BaseInterval: 100 * time.Millisecond, MaxInterval: 99 * time.Millisecond}, "retry_back_off.max_interval"},
		// Both round to 1 ms (RetryPolicyImpl), so the cap is not under the base.
		{"sub-millisecond max and base", Policy{BaseInterval: 900 * time.Microsecond, MaxInterval: 300 * time.Microsecond}, ""},
		// Both round down to 10 ms: equal, valid.
		{"max rounds down to the base", Policy{BaseInterval: 10500 * time.Microsecond, MaxInterval: 10900 * time.Microsecond}, ""},
		// 10.9 ms rounds down to 10 ms, under an 11 ms base.
		{"max rounds down under the base", Policy{BaseInterval: 11 * time.Millisecond, MaxInterval: 10900 * time.Microsecond}, "retry_back_off.max_interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) || pe.Field != tc.field || !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("Validate() = %v, want a PolicyError on %s wrapping ErrInvalidPolicy", err, tc.field)
			}
			if msg := err.Error(); msg[:len("retry: ")] != "retry: " {
				t.Fatalf("error %q lacks the package prefix", msg)
			}
		})
	}
}

func TestBufferLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		connection  uint64  // per_connection_buffer_limit_bytes (0: none)
		perRequest  *uint32 // per_request_buffer_limit_bytes
		requestBody *uint64 // request_body_buffer_limit
		want        uint64  // the router's retry buffer limit
	}{
		{"connection only", 1 << 20, nil, nil, 1 << 20},
		{"per-request caps the connection's", 1 << 20, Uint32(4096), nil, 4096},
		{"per-request does not raise it", 4096, Uint32(1 << 20), nil, 4096},
		{"request_body_buffer_limit raises it", 4096, Uint32(1024), Uint64(8 << 20), 8 << 20},
		{"request_body_buffer_limit lowers it", 1 << 20, nil, Uint64(10), 10},
		{"no connection limit, per-request", 0, Uint32(100), nil, 100},
		{"no limit at all", 0, nil, nil, ^uint64(0)},
	} {
		if got := BufferLimit(tc.connection, tc.perRequest, tc.requestBody); got != tc.want {
			t.Errorf("%s: BufferLimit = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestForRequest(t *testing.T) {
	presence := func(names ...string) []HeaderMatcher {
		var ms []HeaderMatcher
		for _, n := range names {
			ms = append(ms, HeaderMatcher{Name: n})
		}
		return ms
	}
	for _, tc := range []struct {
		name       string
		p          Policy          // the route's policy
		h          [][2]string     // the request headers reaching the router
		retryOn    Condition       // the request's conditions
		numRetries uint32          // its retries
		codes      []uint32        // its retriable status codes
		headers    []HeaderMatcher // its retriable headers
		perTry     time.Duration   // its per-try timeout
		rest       [][2]string     // the headers left for the upstream
	}{
		{"route policy alone", Policy{RetryOn: On5xx}, [][2]string{{":path", "/"}},
			On5xx, 1, nil, nil, 0, [][2]string{{":path", "/"}}},
		{"headers merge into the route's", Policy{RetryOn: OnConnectFailure, RetriableStatusCodes: []uint32{429},
			RetriableHeaders: presence("x-a")},
			[][2]string{{"x-envoy-retry-on", "retriable-status-codes,retriable-headers,bogus"}, {"x-envoy-max-retries", "4"},
				{"x-envoy-retriable-status-codes", "503, 504,x,,-1"}, {"x-envoy-retriable-header-names", " x-b ,, X-C"},
				{"x-envoy-upstream-rq-per-try-timeout-ms", "250"}, {"x-envoy-retry-grpc-on", "unavailable"},
				{"x-envoy-hedge-on-per-try-timeout", "true"}, {"x-envoy-upstream-rq-timeout-ms", "9"}, {"x-keep", "1"}},
			OnConnectFailure | OnRetriableStatusCodes | OnRetriableHeaders, 4, []uint32{429, 503, 504},
			presence("x-a", "x-b", "X-C"), 250 * time.Millisecond,
			// The route timeout header is FilterUtility::finalTimeout's, not the retry state's.
			[][2]string{{"x-envoy-upstream-rq-timeout-ms", "9"}, {"x-keep", "1"}}},
		{"max retries needs a condition", Policy{}, [][2]string{{"x-envoy-max-retries", "5"}},
			0, 1, nil, nil, 0, [][2]string{}},
		{"max retries from the header's own condition", Policy{}, [][2]string{{"x-envoy-max-retries", "+5 "}, {"x-envoy-retry-on", "reset"}},
			OnReset, 5, nil, nil, 0, [][2]string{}},
		{"max retries 0 turns retries off", Policy{RetryOn: On5xx, NumRetries: Uint32(3)}, [][2]string{{"x-envoy-max-retries", "0"}},
			On5xx, 0, nil, nil, 0, [][2]string{}},
		// Envoy stores the uint64 into a uint32_t.
		{"max retries wraps at 2^32", Policy{RetryOn: On5xx}, [][2]string{{"x-envoy-max-retries", "4294967298"}},
			On5xx, 2, nil, nil, 0, [][2]string{}},
		{"invalid max retries kept the route's, and is removed", Policy{RetryOn: On5xx, NumRetries: Uint32(2)},
			[][2]string{{"x-envoy-max-retries", "-1"}, {"x-envoy-upstream-rq-per-try-timeout-ms", "soon"}},
			On5xx, 2, nil, nil, 0, [][2]string{}},
		{"status code beyond uint32 skipped", Policy{RetryOn: OnRetriableStatusCodes},
			[][2]string{{"x-envoy-retriable-status-codes", "4294967296,425"}},
			OnRetriableStatusCodes, 1, []uint32{425}, nil, 0, [][2]string{}},
		{"retriable_request_headers unmatched: no conditions", Policy{RetryOn: On5xx, RetriableRequestHeaders: presence("x-idempotent")},
			[][2]string{{"x-envoy-retry-on", "reset"}, {"x-envoy-max-retries", "3"}},
			0, 1, nil, nil, 0, [][2]string{}},
		{"retriable_request_headers matched", Policy{RetryOn: On5xx, RetriableRequestHeaders: presence("x-idempotent")},
			[][2]string{{"x-idempotent", ""}, {"x-envoy-max-retries", "3"}},
			On5xx, 3, nil, nil, 0, [][2]string{{"x-idempotent", ""}}},
		{"first value of a repeated header", Policy{RetryOn: On5xx}, [][2]string{{"x-envoy-max-retries", "2"}, {"x-envoy-max-retries", "7"}},
			On5xx, 2, nil, nil, 0, [][2]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := append([][2]string(nil), tc.h...)
			r, rest := tc.p.ForRequest(h)
			if r.RetryOn() != tc.retryOn || r.NumRetries() != tc.numRetries || !slices.Equal(r.statusCodes, tc.codes) ||
				!slices.Equal(r.headers, tc.headers) || r.perTryTimeout != tc.perTry {
				t.Errorf("ForRequest = on %v, %d retries, codes %v, headers %v, per-try %v; want %v, %d, %v, %v, %v",
					r.RetryOn(), r.NumRetries(), r.statusCodes, r.headers, r.perTryTimeout,
					tc.retryOn, tc.numRetries, tc.codes, tc.headers, tc.perTry)
			}
			if !slices.Equal(rest, tc.rest) {
				t.Errorf("headers left %q, want %q", rest, tc.rest)
			}
			if !slices.Equal(h, tc.h) {
				t.Errorf("ForRequest modified its input: %q", h)
			}
			if r.Enabled() != (tc.retryOn != 0) {
				t.Errorf("Enabled() = %v with conditions %v", r.Enabled(), tc.retryOn)
			}
		})
	}
}

func TestEffectivePerTryTimeout(t *testing.T) {
	r, _ := Policy{PerTryTimeout: 2 * time.Second}.ForRequest(nil)
	for _, tc := range []struct {
		route time.Duration // the route timeout (0: none)
		want  time.Duration // the per-try timeout armed
	}{
		{0, 2 * time.Second},
		{3 * time.Second, 2 * time.Second},
		{2 * time.Second, 0},
		{time.Second, 0},
	} {
		if got := r.EffectivePerTryTimeout(tc.route); got != tc.want {
			t.Errorf("route timeout %v: per-try %v, want %v", tc.route, got, tc.want)
		}
	}
}

func TestHeaderMatcher(t *testing.T) {
	h := [][2]string{{":status", "200"}, {"x-retry", "a"}, {"x-retry", "b"}, {"x-empty", ""}}
	for _, tc := range []struct {
		m    HeaderMatcher // the matcher
		want bool          // whether it matches h
	}{
		{HeaderMatcher{Name: "x-retry"}, true},
		{HeaderMatcher{Name: "X-Retry"}, true},
		{HeaderMatcher{Name: "x-none"}, false},
		{HeaderMatcher{Name: "x-none", Invert: true}, true},
		{HeaderMatcher{Name: "x-none", Kind: MatchAbsent}, true},
		{HeaderMatcher{Name: "x-empty", Kind: MatchAbsent}, false},
		// A repeated header is matched on its values joined with ",".
		{HeaderMatcher{Name: "x-retry", Kind: MatchExact, Value: "a,b"}, true},
		{HeaderMatcher{Name: "x-retry", Kind: MatchExact, Value: "a"}, false},
		{HeaderMatcher{Name: "x-retry", Kind: MatchExact, Value: "a", Invert: true}, true},
		{HeaderMatcher{Name: "x-empty", Kind: MatchExact}, true},
		// A value match of a missing header fails, inverted or not.
		{HeaderMatcher{Name: "x-none", Kind: MatchExact, Value: "a", Invert: true}, false},
	} {
		if got := tc.m.matches(h); got != tc.want {
			t.Errorf("%+v matches = %v, want %v", tc.m, got, tc.want)
		}
	}
}
