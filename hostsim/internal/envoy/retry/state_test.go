package retry

import (
	"errors"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// seq is a Random returning its values in order, then the last one forever.
type seq struct {
	v []uint64
	i int
}

func (s *seq) Uint64() uint64 {
	v := s.v[min(s.i, len(s.v)-1)]
	s.i++
	return v
}

// zero is a Random that always draws 0: no back-off delay.
var zero = &seq{v: []uint64{0}}

func status(code string, more ...[2]string) [][2]string {
	return append([][2]string{{":status", code}}, more...)
}

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		name        string
		base, limit time.Duration   // the strategy's interval and cap
		draws       []uint64        // what the random source returns
		want        []time.Duration // the back-offs, in order
	}{
		// The defaults: intervals 25, 50, 100, 200, then the 250 ms cap (doubling 200 would
		// pass it). A draw of interval-1 is the largest back-off of each; 250 % 250 shows
		// the fifth interval is the cap, not 400.
		{"defaults", DefaultBaseInterval, DefaultBaseInterval * DefaultMaxIntervalFactor,
			[]uint64{24, 49, 99, 199, 249, 250, 1000},
			[]time.Duration{24, 49, 99, 199, 249, 0, 0}},
		// 10, 20, then 35: 20 is not under half the cap (17), so the cap follows directly.
		{"cap not a power of two", 10 * time.Millisecond, 35 * time.Millisecond,
			[]uint64{9, 19, 36, 70},
			[]time.Duration{9, 19, 1, 0}},
		// Sub-millisecond intervals round down to whole milliseconds, at least 1.
		{"sub-millisecond", 1500 * time.Microsecond, 900 * time.Microsecond,
			[]uint64{5, 5},
			[]time.Duration{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBackoff(tc.base, tc.limit, &seq{v: tc.draws})
			for i, want := range tc.want {
				if got := b.Next(); got != want*time.Millisecond {
					t.Fatalf("back-off %d = %v, want %v", i+1, got, want*time.Millisecond)
				}
			}
			b.Reset()
			if b.Interval() != max(tc.base.Truncate(time.Millisecond), time.Millisecond) {
				t.Fatalf("after Reset the interval is %v, want the base", b.Interval())
			}
		})
	}
}

func TestHeadersDecision(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         Policy      // the route's policy
		req       [][2]string // the request headers
		h         [][2]string // the try's response headers after the upstream filters
		action    Action      // what the router does
		st        Status      // what the retry state answered
		immediate bool        // a RetryImmediately decision
	}{
		{"5xx retries 500", Policy{RetryOn: On5xx}, nil, status("500"), Retry, Yes, false},
		{"5xx retries 599", Policy{RetryOn: On5xx}, nil, status("599"), Retry, Yes, false},
		{"5xx does not retry 429", Policy{RetryOn: On5xx}, nil, status("429"), PassThrough, No, false},
		{"gateway-error does not retry 500", Policy{RetryOn: OnGatewayError}, nil, status("500"), PassThrough, No, false},
		{"gateway-error retries 504", Policy{RetryOn: OnGatewayError}, nil, status("504"), Retry, Yes, false},
		{"gateway-error does not retry 505", Policy{RetryOn: OnGatewayError}, nil, status("505"), PassThrough, No, false},
		{"retriable-4xx retries 409", Policy{RetryOn: OnRetriable4xx}, nil, status("409"), Retry, Yes, false},
		{"retriable-4xx does not retry 429", Policy{RetryOn: OnRetriable4xx}, nil, status("429"), PassThrough, No, false},
		{"retriable-status-codes 429", Policy{RetryOn: OnRetriableStatusCodes, RetriableStatusCodes: []uint32{429}}, nil,
			status("429"), Retry, Yes, false},
		{"codes without the condition", Policy{RetryOn: On5xx, RetriableStatusCodes: []uint32{429}}, nil,
			status("429"), PassThrough, No, false},
		{"codes from the request header", Policy{RetryOn: OnRetriableStatusCodes}, [][2]string{{"x-envoy-retriable-status-codes", "418"}},
			status("418"), Retry, Yes, false},
		// x-envoy-ratelimited short-circuits everything else: a 503 with it is not retried
		// on 5xx.
		{"x-envoy-ratelimited vetoes 5xx", Policy{RetryOn: On5xx | OnRetriableHeaders, RetriableHeaders: []HeaderMatcher{{Name: "x-retry"}}}, nil,
			status("503", [2]string{"x-envoy-ratelimited", "true"}, [2]string{"x-retry", "1"}), PassThrough, No, false},
		{"x-envoy-ratelimited with envoy-ratelimited", Policy{RetryOn: OnEnvoyRateLimited}, nil,
			status("200", [2]string{"x-envoy-ratelimited", ""}), Retry, Yes, false},
		{"envoy-ratelimited alone does not retry a 503", Policy{RetryOn: OnEnvoyRateLimited}, nil,
			status("503"), PassThrough, No, false},
		// 425 Too Early: at once, without early data, unless the request came as early data.
		{"425 immediately", Policy{RetryOn: OnRetriableStatusCodes, RetriableStatusCodes: []uint32{425}}, nil,
			status("425"), Retry, Yes, true},
		{"425 of an early-data request", Policy{RetryOn: OnRetriableStatusCodes, RetriableStatusCodes: []uint32{425}},
			[][2]string{{"early-data", "1"}}, status("425"), PassThrough, No, false},
		// ... and then the rest of the conditions still apply.
		{"425 of an early-data request, retriable header", Policy{RetryOn: OnRetriableStatusCodes | OnRetriableHeaders,
			RetriableStatusCodes: []uint32{425}, RetriableHeaders: []HeaderMatcher{{Name: "x-retry"}}},
			[][2]string{{"early-data", "1"}}, status("425", [2]string{"x-retry", "1"}), Retry, Yes, false},
		{"425 with 5xx", Policy{RetryOn: On5xx | OnRetriableStatusCodes, RetriableStatusCodes: []uint32{425}}, nil,
			status("425"), Retry, Yes, true},
		// An upstream filter marks a 200 retriable with a header the route matches.
		{"marker header present", Policy{RetryOn: OnRetriableHeaders, RetriableHeaders: []HeaderMatcher{{Name: "x-spillway-retry"}}}, nil,
			status("200", [2]string{"x-spillway-retry", "1"}), Retry, Yes, false},
		{"marker header absent", Policy{RetryOn: OnRetriableHeaders, RetriableHeaders: []HeaderMatcher{{Name: "x-spillway-retry"}}}, nil,
			status("200"), PassThrough, No, false},
		{"marker exact value", Policy{RetryOn: OnRetriableHeaders,
			RetriableHeaders: []HeaderMatcher{{Name: "x-spillway-retry", Kind: MatchExact, Value: "failover"}}}, nil,
			status("200", [2]string{"x-spillway-retry", "failover"}), Retry, Yes, false},
		{"marker other value", Policy{RetryOn: OnRetriableHeaders,
			RetriableHeaders: []HeaderMatcher{{Name: "x-spillway-retry", Kind: MatchExact, Value: "failover"}}}, nil,
			status("200", [2]string{"x-spillway-retry", "no"}), PassThrough, No, false},
		{"marker from x-envoy-retriable-header-names", Policy{RetryOn: OnRetriableHeaders},
			[][2]string{{"x-envoy-retriable-header-names", "x-spillway-retry"}}, status("200", [2]string{"x-spillway-retry", "1"}), Retry, Yes, false},
		{"retriable headers without the condition", Policy{RetryOn: On5xx, RetriableHeaders: []HeaderMatcher{{Name: "x-spillway-retry"}}}, nil,
			status("200", [2]string{"x-spillway-retry", "1"}), PassThrough, No, false},
		{"no :status", Policy{RetryOn: On5xx | OnRetriable4xx}, nil, [][2]string{{"x-a", "b"}}, PassThrough, No, false},
		{"no conditions", Policy{}, nil, status("503"), PassThrough, NotAsked, false},
		{"request conditions only", Policy{}, [][2]string{{"x-envoy-retry-on", "gateway-error"}}, status("503"), Retry, Yes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := tc.p.ForRequest(tc.req)
			s := NewState(r, nil, zero)
			d, err := s.Decide(Headers(tc.h))
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != tc.action || d.Status != tc.st || d.Immediate != tc.immediate {
				t.Fatalf("Decide = %v/%v immediate %v, want %v/%v immediate %v", d.Action, d.Status, d.Immediate, tc.action, tc.st, tc.immediate)
			}
			if d.Flags != 0 {
				t.Fatalf("flags %v on a first try", d.Flags)
			}
		})
	}
}

func TestResetDecision(t *testing.T) {
	type reset struct {
		reason streaminfo.ResetReason
		sent   bool
	}
	for _, tc := range []struct {
		name   string
		on     Condition // the request's conditions
		prior  []reset   // earlier tries' resets, each retried
		last   Outcome   // the try's outcome decided here
		action Action    // what the router does with it
		st     Status    // what the retry state answered
	}{
		{"connect-failure: remote connection failure", OnConnectFailure, nil,
			Reset(streaminfo.ResetRemoteConnectionFailure, false), Retry, Yes},
		{"connect-failure: connection timeout", OnConnectFailure, nil,
			Reset(streaminfo.ResetConnectionTimeout, false), Retry, Yes},
		{"connect-failure: not a remote reset", OnConnectFailure, nil,
			Reset(streaminfo.ResetRemoteReset, true), Abort, No},
		// A connection failure without connect-failure falls through to the others.
		{"5xx retries a connection failure", On5xx, nil,
			Reset(streaminfo.ResetLocalConnectionFailure, false), Retry, Yes},
		{"gateway-error retries a remote reset", OnGatewayError, nil,
			Reset(streaminfo.ResetRemoteReset, true), Retry, Yes},
		{"reset retries a local reset", OnReset, nil,
			Reset(streaminfo.ResetLocalReset, true), Retry, Yes},
		{"overflow never", allConditions, nil,
			Reset(streaminfo.ResetOverflow, false), Abort, No},
		{"refused-stream: refused", OnRefusedStream, nil,
			Reset(streaminfo.ResetRemoteRefusedStreamReset, true), Retry, Yes},
		{"refused-stream: other reset", OnRefusedStream, nil,
			Reset(streaminfo.ResetRemoteReset, true), Abort, No},
		{"refused-stream: connection failure", OnRefusedStream, nil,
			Reset(streaminfo.ResetRemoteConnectionFailure, false), Abort, No},
		{"reset-before-request before a byte", OnResetBeforeRequest, nil,
			Reset(streaminfo.ResetRemoteReset, false), Retry, Yes},
		{"reset-before-request after a byte", OnResetBeforeRequest, nil,
			Reset(streaminfo.ResetRemoteReset, true), Abort, No},
		// upstream_request_started_ is the router's, sticky across tries: once any try sent
		// a byte, a later try's reset before its first byte is not "before request".
		{"reset-before-request after an earlier try's byte", OnResetBeforeRequest | OnConnectFailure,
			[]reset{{streaminfo.ResetRemoteConnectionFailure, true}},
			Reset(streaminfo.ResetRemoteReset, false), Abort, No},
		{"reset-before-request after earlier tries sent nothing", OnResetBeforeRequest,
			[]reset{{streaminfo.ResetRemoteReset, false}},
			Reset(streaminfo.ResetRemoteReset, false), Retry, Yes},
		{"per-try timeout with 5xx", On5xx, nil, PerTryTimeout(true), Retry, Yes},
		{"per-try timeout with reset", OnReset, nil, PerTryTimeout(true), Retry, Yes},
		{"per-try timeout with connect-failure only", OnConnectFailure, nil, PerTryTimeout(true), Abort, No},
		{"per-try timeout before a byte", OnResetBeforeRequest, nil, PerTryTimeout(false), Retry, Yes},
		{"no conditions", 0, nil, Reset(streaminfo.ResetRemoteReset, true), Abort, NotAsked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := Policy{RetryOn: tc.on, NumRetries: Uint32(5)}.ForRequest(nil)
			s := NewState(r, NewBreaker(10), zero)
			for i, p := range tc.prior {
				if d, err := s.Decide(Reset(p.reason, p.sent)); err != nil || d.Action != Retry {
					t.Fatalf("prior reset %d: %+v, %v; want a retry", i, d, err)
				}
				if err := s.StartRetry(); err != nil {
					t.Fatal(err)
				}
			}
			d, err := s.Decide(tc.last)
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != tc.action || d.Status != tc.st {
				t.Fatalf("Decide(%+v) = %v/%v, want %v/%v", tc.last, d.Action, d.Status, tc.action, tc.st)
			}
			if d.Overloaded != (tc.last.Kind == OutcomeReset && tc.last.Reason == streaminfo.ResetOverflow) {
				t.Fatalf("Overloaded = %v", d.Overloaded)
			}
		})
	}
}

// step is one event of a request in a sequence test.
type step struct {
	o     Outcome // the current try's outcome
	start bool    // the retry's try starts after the decision (StartRetry)
}

func TestSequences(t *testing.T) {
	fail := step{o: Headers(status("503")), start: true}
	last503 := step{o: Headers(status("503"))}
	for _, tc := range []struct {
		name      string
		p         Policy     // the route's policy
		breaker   uint32     // the cluster's max_retries
		others    int        // retries other requests hold on the breaker
		steps     []step     // the request's tries
		want      []Decision // the decision after each step (Delay, Immediate and Overloaded not compared)
		remaining uint32     // the retries left at the end
		busy      int        // the breaker's retries in use at the end, the others' included, before Done
		stats     Stats      // the counters charged
	}{
		{"limit exceeded passes the last response through with URX",
			Policy{RetryOn: On5xx}, 3, 0, []step{fail, last503},
			[]Decision{{Action: Retry, Status: Yes}, {Action: PassThrough, Status: LimitExceeded, Flags: streaminfo.FlagUpstreamRetryLimitExceeded}},
			0, 0, Stats{Retry: 1, LimitExceeded: 1, BackoffExponential: 1}},
		{"a retry's success is counted",
			Policy{RetryOn: On5xx}, 3, 0, []step{fail, {o: Headers(status("200"))}},
			[]Decision{{Action: Retry, Status: Yes}, {Action: PassThrough, Status: No}},
			0, 0, Stats{Retry: 1, Success: 1, BackoffExponential: 1}},
		// The limit is checked before the breaker: with no retries left a full breaker is
		// URX, not UO.
		{"no retries left beats a full breaker",
			Policy{RetryOn: On5xx, NumRetries: Uint32(0)}, 1, 1, []step{last503},
			[]Decision{{Action: PassThrough, Status: LimitExceeded, Flags: streaminfo.FlagUpstreamRetryLimitExceeded}},
			0, 1, Stats{LimitExceeded: 1}},
		// retries_remaining_ is decremented before the breaker check: the overflow used the
		// request's only retry.
		{"overflow uses up a retry",
			Policy{RetryOn: On5xx}, 1, 1, []step{last503},
			[]Decision{{Action: PassThrough, Status: Overflow, Flags: streaminfo.FlagUpstreamOverflow}},
			0, 1, Stats{Overflow: 1}},
		{"overflow on a reset aborts with UO",
			Policy{RetryOn: OnReset, NumRetries: Uint32(2)}, 0, 0, []step{{o: Reset(streaminfo.ResetRemoteReset, true)}},
			[]Decision{{Action: Abort, Status: Overflow, Flags: streaminfo.FlagUpstreamOverflow}},
			1, 0, Stats{Overflow: 1}},
		// A retry lets go of the breaker before the next check, so one request retries on a
		// breaker of one as often as its policy allows.
		{"a request's own retry does not overflow it",
			Policy{RetryOn: On5xx, NumRetries: Uint32(3)}, 1, 0, []step{fail, fail, fail, last503},
			[]Decision{{Action: Retry, Status: Yes}, {Action: Retry, Status: Yes}, {Action: Retry, Status: Yes},
				{Action: PassThrough, Status: LimitExceeded, Flags: streaminfo.FlagUpstreamRetryLimitExceeded}},
			0, 0, Stats{Retry: 3, LimitExceeded: 1, BackoffExponential: 3}},
		{"the retry holds the breaker through its try",
			Policy{RetryOn: On5xx}, 3, 0, []step{fail},
			[]Decision{{Action: Retry, Status: Yes}},
			0, 1, Stats{Retry: 1, BackoffExponential: 1}},
		{"reset retried, then limit exceeded aborts with URX",
			Policy{RetryOn: OnConnectFailure}, 3, 0,
			[]step{{o: Reset(streaminfo.ResetRemoteConnectionFailure, false), start: true}, {o: Reset(streaminfo.ResetConnectionTimeout, false)}},
			[]Decision{{Action: Retry, Status: Yes}, {Action: Abort, Status: LimitExceeded, Flags: streaminfo.FlagUpstreamRetryLimitExceeded}},
			0, 0, Stats{Retry: 1, LimitExceeded: 1, BackoffExponential: 1}},
		// A local reply from an upstream filter is final, however retriable its status.
		{"an upstream filter's local reply is final",
			Policy{RetryOn: On5xx | OnReset}, 3, 0, []step{fail, {o: LocalReply()}},
			[]Decision{{Action: Retry, Status: Yes}, {Action: Final, Status: NotAsked}},
			0, 0, Stats{Retry: 1, BackoffExponential: 1}},
		{"a reset after the response started aborts without asking",
			Policy{RetryOn: OnReset | On5xx, NumRetries: Uint32(2)}, 3, 0,
			[]step{{o: Headers(status("200"))}, {o: Reset(streaminfo.ResetRemoteReset, true)}},
			[]Decision{{Action: PassThrough, Status: No}, {Action: Abort, Status: NotAsked}},
			2, 0, Stats{}},
		{"a per-try timeout after the response started is ignored",
			Policy{RetryOn: On5xx}, 3, 0,
			[]step{{o: Headers(status("200"))}, {o: PerTryTimeout(true)}},
			[]Decision{{Action: PassThrough, Status: No}, {Action: Ignore, Status: NotAsked}},
			1, 0, Stats{}},
		{"after a 100 Continue nothing is retried",
			Policy{RetryOn: On5xx}, 3, 0,
			[]step{{o: Informational()}, last503},
			[]Decision{{Action: PassThrough, Status: NotAsked}, {Action: PassThrough, Status: NotAsked}},
			1, 0, Stats{}},
		{"425 retried at once draws no back-off",
			Policy{RetryOn: OnRetriableStatusCodes | On5xx, RetriableStatusCodes: []uint32{425}, NumRetries: Uint32(2)}, 3, 0,
			[]step{{o: Headers(status("425")), start: true}, fail},
			[]Decision{{Action: Retry, Status: Yes, Immediate: true}, {Action: Retry, Status: Yes}},
			0, 1, Stats{Retry: 2, BackoffExponential: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBreaker(tc.breaker)
			for range tc.others {
				b.inc()
			}
			r, _ := tc.p.ForRequest(nil)
			s := NewState(r, b, zero)
			for i, st := range tc.steps {
				d, err := s.Decide(st.o)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				w := tc.want[i]
				if d.Action != w.Action || d.Status != w.Status || d.Flags != w.Flags || (w.Immediate && !d.Immediate) {
					t.Fatalf("step %d: %v/%v flags %v immediate %v; want %v/%v flags %v immediate %v",
						i, d.Action, d.Status, d.Flags, d.Immediate, w.Action, w.Status, w.Flags, w.Immediate)
				}
				if st.start {
					if err := s.StartRetry(); err != nil {
						t.Fatalf("step %d: StartRetry: %v", i, err)
					}
				}
			}
			if s.Remaining() != tc.remaining || b.Busy() != tc.busy || s.Stats() != tc.stats {
				t.Fatalf("remaining %d, busy %d, stats %+v; want %d, %d, %+v",
					s.Remaining(), b.Busy(), s.Stats(), tc.remaining, tc.busy, tc.stats)
			}
			s.Done()
			if b.Busy() != tc.others {
				t.Fatalf("after Done the breaker holds %d, want the other requests' %d", b.Busy(), tc.others)
			}
		})
	}
}

func TestBackoffAcrossRetries(t *testing.T) {
	r, _ := Policy{RetryOn: On5xx, NumRetries: Uint32(6)}.ForRequest(nil)
	s := NewState(r, NewBreaker(1), &seq{v: []uint64{1 << 40}})
	// 2^40 ms modulo 25, 50, 100, 200, 250, 250.
	want := []time.Duration{1 << 40 % 25, 1 << 40 % 50, 1 << 40 % 100, 1 << 40 % 200, 1 << 40 % 250, 1 << 40 % 250}
	for i, w := range want {
		d, err := s.Decide(Headers(status("503")))
		if err != nil || d.Action != Retry {
			t.Fatalf("retry %d: %+v, %v", i+1, d, err)
		}
		if d.Delay != w*time.Millisecond {
			t.Fatalf("retry %d waits %v, want %v", i+1, d.Delay, w*time.Millisecond)
		}
		if err := s.StartRetry(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAttemptCount(t *testing.T) {
	r, _ := Policy{RetryOn: On5xx, NumRetries: Uint32(2), IncludeAttemptCountInRequest: true}.ForRequest(nil)
	s := NewState(r, nil, zero)
	for i := uint32(1); i <= 3; i++ {
		if v, ok := s.RequestAttemptHeader(); !ok || v != string(rune('0'+i)) || s.Attempt() != i {
			t.Fatalf("try %d: attempt %d, request header %q %v", i, s.Attempt(), v, ok)
		}
		if _, ok := s.ResponseAttemptHeader(); ok {
			t.Fatal("response attempt count without include_attempt_count_in_response")
		}
		if s.IsRetry() != (i > 1) {
			t.Fatalf("try %d: IsRetry %v", i, s.IsRetry())
		}
		d, err := s.Decide(Reset(streaminfo.ResetRemoteReset, true))
		if err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			// The count moves when the retry starts, not when it is decided.
			if d.Action != Retry || s.Attempt() != i {
				t.Fatalf("try %d: %v, attempt %d", i, d.Action, s.Attempt())
			}
			if err := s.StartRetry(); err != nil {
				t.Fatal(err)
			}
		} else if d.Action != Abort || d.Status != LimitExceeded {
			t.Fatalf("last try: %v/%v", d.Action, d.Status)
		}
	}
	r, _ = Policy{IncludeAttemptCountInResponse: true}.ForRequest(nil)
	if v, ok := NewState(r, nil, zero).ResponseAttemptHeader(); !ok || v != "1" {
		t.Fatalf("response attempt header %q %v", v, ok)
	}
}

func TestBodyBuffering(t *testing.T) {
	type chunk struct {
		n       uint64 // the chunk's length
		aliased bool   // the chunk is the connection manager's buffer itself
	}
	for _, tc := range []struct {
		name    string
		on      Condition    // the request's conditions
		limit   uint64       // the retry buffer limit
		chunks  []chunk      // the body reaching the router
		waiting bool         // the chunks arrive while a retry waits for its back-off
		want    []BodyAction // what the router does with each
		gaveUp  bool         // the router gave up retrying (retry_or_shadow_abandoned)
	}{
		{"under the limit", On5xx, 100, []chunk{{60, false}, {40, false}}, false, []BodyAction{BodyBuffered, BodyBuffered}, false},
		{"over the limit during a try", On5xx, 100, []chunk{{60, false}, {41, false}, {10, false}}, false,
			[]BodyAction{BodyBuffered, BodyOverLimit, BodyStreamed}, true},
		{"over the limit while waiting", On5xx, 100, []chunk{{60, false}, {41, false}}, true,
			[]BodyAction{BodyBuffered, BodyTooLarge}, true},
		// envoyproxy/envoy#30613: the resumed buffer is counted twice.
		{"aliased body counted twice", On5xx, 100, []chunk{{51, true}}, false, []BodyAction{BodyOverLimit}, true},
		{"aliased body at half the limit", On5xx, 100, []chunk{{50, true}, {50, false}}, false, []BodyAction{BodyBuffered, BodyBuffered}, false},
		{"limit 0 buffers nothing", On5xx, 0, []chunk{{1, false}}, false, []BodyAction{BodyOverLimit}, true},
		{"no conditions, no buffering", 0, 10, []chunk{{100, false}}, false, []BodyAction{BodyStreamed}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := Policy{RetryOn: tc.on, NumRetries: Uint32(3), BufferLimit: Uint64(tc.limit)}.ForRequest(nil)
			b := NewBreaker(3)
			s := NewState(r, b, zero)
			if tc.waiting {
				if d, _ := s.Decide(Reset(streaminfo.ResetRemoteReset, false)); d.Action != Retry {
					t.Fatalf("setup: %+v", d)
				}
			}
			for i, c := range tc.chunks {
				if got := s.Body(c.n, c.aliased); got != tc.want[i] {
					t.Fatalf("chunk %d: %v, want %v", i, got, tc.want[i])
				}
			}
			if (s.Stats().Abandoned == 1) != tc.gaveUp {
				t.Fatalf("retry_or_shadow_abandoned %d", s.Stats().Abandoned)
			}
			if tc.gaveUp && b.Busy() != 0 {
				t.Fatalf("giving up kept %d retries on the breaker", b.Busy())
			}
		})
	}
}

func TestAfterGivingUpOnTheBody(t *testing.T) {
	r, _ := Policy{RetryOn: On5xx, BufferLimit: Uint64(10)}.ForRequest(nil)
	s := NewState(r, nil, zero)
	if a := s.Body(11, false); a != BodyOverLimit {
		t.Fatalf("Body = %v", a)
	}
	// The 503 passes through: no retry, and no URX, since the state is gone.
	d, err := s.Decide(Headers(status("503")))
	if err != nil || d != (Decision{Action: PassThrough, Status: NotAsked}) {
		t.Fatalf("Decide = %+v, %v", d, err)
	}

	r, _ = Policy{RetryOn: On5xx, BufferLimit: Uint64(10)}.ForRequest(nil)
	s = NewState(r, nil, zero)
	s.Body(11, false)
	d, _ = s.Decide(Reset(streaminfo.ResetOverflow, true))
	if d != (Decision{Action: Abort, Status: NotAsked, Overloaded: true}) {
		t.Fatalf("reset after giving up: %+v", d)
	}

	r, _ = Policy{RetryOn: On5xx, BufferLimit: Uint64(10)}.ForRequest(nil)
	s = NewState(r, nil, zero)
	s.Decide(Headers(status("503")))
	if a := s.Body(11, false); a != BodyTooLarge {
		t.Fatalf("Body while waiting = %v", a)
	}
	if _, err := s.Decide(Headers(status("200"))); !errors.Is(err, ErrOver) {
		t.Fatalf("after the 507: %v", err)
	}
	if err := s.StartRetry(); !errors.Is(err, ErrOver) {
		t.Fatalf("StartRetry after the 507: %v", err)
	}
}

func TestOutOfOrderOutcomes(t *testing.T) {
	r, _ := Policy{RetryOn: On5xx}.ForRequest(nil)
	s := NewState(r, nil, zero)
	if err := s.StartRetry(); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("StartRetry on the first try: %v", err)
	}
	s.Decide(Headers(status("503")))
	if _, err := s.Decide(Headers(status("200"))); !errors.Is(err, ErrNoTry) {
		t.Fatalf("an outcome while waiting: %v", err)
	}
	s.StartRetry()
	s.Decide(Headers(status("200")))
	if _, err := s.Decide(Headers(status("200"))); !errors.Is(err, ErrHeadersTwice) {
		t.Fatalf("headers twice: %v", err)
	}
	if _, err := s.Decide(Outcome{}); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("zero outcome: %v", err)
	}
	s.Decide(LocalReply())
	if _, err := s.Decide(Reset(streaminfo.ResetRemoteReset, true)); !errors.Is(err, ErrOver) {
		t.Fatalf("after a local reply: %v", err)
	}
}

func TestStringers(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Yes.String(), "yes"}, {Overflow.String(), "overflow"}, {Status(9).String(), "Status(9)"},
		{Retry.String(), "retry"}, {Ignore.String(), "ignore"}, {Action(0).String(), "Action(0)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
