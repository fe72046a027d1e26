package retry

import (
	"errors"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// Status is what the retry state answered for an outcome (RetryStatus in
// envoy/router/router.h), or that it was not asked.
type Status int

// The statuses.
const (
	// NotAsked: the router did not consult the retry state — the request has no retry
	// conditions or gave up retrying (body over the buffer limit), the response had
	// started, or an upstream filter answered locally.
	NotAsked Status = iota
	// No: the outcome is not retriable (RetryStatus::No).
	No
	// Yes: retry (RetryStatus::Yes).
	Yes
	// LimitExceeded: retriable, but the request's retries are used up
	// (RetryStatus::NoRetryLimitExceeded, flag URX).
	LimitExceeded
	// Overflow: retriable, but the cluster's retry circuit breaker is full
	// (RetryStatus::NoOverflow, flag UO). The check comes after the request's retry count
	// was decremented, so an overflow uses up a retry.
	Overflow
)

var statusNames = [...]string{"not asked", "no", "yes", "limit exceeded", "overflow"}

func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return "Status(" + strconv.Itoa(int(s)) + ")"
	}
	return statusNames[s]
}

// Action is what the router does after an outcome.
type Action int

// The actions.
const (
	// Retry: the try is reset and forgotten; a new one starts after Decision.Delay
	// (StartRetry), replaying the buffered request body.
	Retry Action = iota + 1
	// PassThrough: the try's response headers go downstream (Filter::onUpstreamHeaders),
	// and the request will not be retried any more.
	PassThrough
	// Abort: the router answers itself (Filter::onUpstreamAbort): for a reset its 503 (502
	// for a protocol error) "upstream connect error or disconnect/reset before headers",
	// for a per-try timeout its 504 "upstream request timeout" (flag UT, details
	// upstream_per_try_timeout); a reset of the downstream stream once the response started.
	Abort
	// Final: an upstream filter answered with a local reply. It goes through the downstream
	// filter manager (upstream_request.cc UpstreamFilterManager::sendLocalReply) without the
	// router: never retried, whatever the policy.
	Final
	// Ignore: a per-try timeout after the response went downstream
	// (UpstreamRequest::onPerTryTimeout: "ignored upstream per try timeout due to already
	// started downstream response").
	Ignore
)

var actionNames = [...]string{"", "retry", "pass through", "abort", "final", "ignore"}

func (a Action) String() string {
	if a <= 0 || int(a) >= len(actionNames) {
		return "Action(" + strconv.Itoa(int(a)) + ")"
	}
	return actionNames[a]
}

// Decision is the router's answer to one try's outcome.
type Decision struct {
	Action Action
	Status Status
	// Delay is the back-off before the next try (Retry only).
	Delay time.Duration
	// Immediate: a RetryImmediately decision (a 425 for a request that did not arrive as
	// early data): the next try starts on the next event-loop iteration, no back-off is
	// drawn, and the back-off interval does not grow.
	Immediate bool
	// Flags are the response flags the retry decision set on the stream: URX for
	// LimitExceeded, UO for Overflow. An Abort's reply adds the flag of its reset reason or
	// timeout (router.ResetReply, router.TimeoutReply) to these.
	Flags streaminfo.ResponseFlags
	// Overloaded: the reset's reason was Overflow (a connection-pool circuit breaker), so
	// the router's reply carries x-envoy-overloaded: true unless suppress_envoy_headers
	// (Filter::onUpstreamReset's dropped).
	Overloaded bool
}

// OutcomeKind is how a try ended, as far as the router learns.
type OutcomeKind int

// The outcome kinds.
const (
	// OutcomeHeaders: the try's response headers, after the upstream HTTP filters ran on
	// them (UpstreamRequest::decodeHeaders reads the status from what they left, then calls
	// Filter::onUpstreamHeaders).
	OutcomeHeaders OutcomeKind = iota + 1
	// OutcomeInformational: a 1xx other than 101 went downstream
	// (Filter::onUpstream1xxHeaders): the response has started and the retry state is
	// dropped ("Don't send retries after 100-Continue has been sent on").
	OutcomeInformational
	// OutcomeReset: the try's stream was reset by the codec or the connection pool failed
	// (UpstreamRequest::onResetStream, onPoolFailure → Filter::onUpstreamReset). A reset an
	// upstream filter asks for (proxy_close_stream) is not one: it resets the downstream
	// stream, with no retry (UpstreamRequestFilterManagerCallbacks::resetStream).
	OutcomeReset
	// OutcomePerTryTimeout: the try's per-try timeout fired (UpstreamRequest::onPerTryTimeout
	// → Filter::onPerTryTimeoutCommon): the try is reset and the outcome treated as a
	// LocalReset (maybeRetryReset with TimeoutRetry::Yes).
	OutcomePerTryTimeout
	// OutcomeLocalReply: an upstream HTTP filter sent a local reply.
	OutcomeLocalReply
)

// Outcome is how the current try ended.
type Outcome struct {
	Kind OutcomeKind
	// Headers are the response headers (OutcomeHeaders), lower-case names, :status
	// included.
	Headers [][2]string
	// Reason is the reset's reason (OutcomeReset).
	Reason streaminfo.ResetReason
	// Sent: a byte of the request had gone upstream on this try (its stream info's
	// first_upstream_tx_byte_sent_), for reset-before-request (OutcomeReset,
	// OutcomePerTryTimeout).
	Sent bool
}

// Headers is the outcome of a try answering with response headers h.
func Headers(h [][2]string) Outcome { return Outcome{Kind: OutcomeHeaders, Headers: h} }

// Reset is the outcome of a try reset for reason, sent saying whether any of the request
// had gone upstream.
func Reset(reason streaminfo.ResetReason, sent bool) Outcome {
	return Outcome{Kind: OutcomeReset, Reason: reason, Sent: sent}
}

// PerTryTimeout is the outcome of a try whose per-try timeout fired.
func PerTryTimeout(sent bool) Outcome { return Outcome{Kind: OutcomePerTryTimeout, Sent: sent} }

// LocalReply is the outcome of an upstream filter answering the request itself.
func LocalReply() Outcome { return Outcome{Kind: OutcomeLocalReply} }

// Informational is the outcome of a 1xx response going downstream.
func Informational() Outcome { return Outcome{Kind: OutcomeInformational} }

// BodyAction is what the router does with a request body chunk (Filter::decodeData).
type BodyAction int

// The body actions.
const (
	// BodyStreamed: the router is not buffering (no retry conditions, retries given up, or
	// the request over): the chunk goes to the current try only.
	BodyStreamed BodyAction = iota + 1
	// BodyBuffered: a copy goes to the current try (if one is in flight) and the chunk is
	// kept for a retry to replay.
	BodyBuffered
	// BodyOverLimit: the chunk took the buffered body past the buffer limit: the router gave
	// up retrying (stat retry_or_shadow_abandoned, retry state dropped, only a debug log)
	// and the chunk goes on to the current try. Every later outcome of the request passes
	// through or aborts, never retried, without URX.
	BodyOverLimit
	// BodyTooLarge: the same while no try was in flight (waiting for a retry's back-off):
	// the router answers 507 "exceeded request buffer limit while retrying upstream"
	// (details request_payload_exceeded_retry_buffer_limit, no response flag) and the
	// request is over.
	BodyTooLarge
)

// The router's 507 for BodyTooLarge.
const (
	TooLargeCode    = 507
	TooLargeBody    = "exceeded request buffer limit while retrying upstream"
	TooLargeDetails = "request_payload_exceeded_retry_buffer_limit"
)

// Stats are the cluster counters the request's retry path charged.
type Stats struct {
	Retry              uint64 // upstream_rq_retry: retries decided
	Success            uint64 // upstream_rq_retry_success: a retry's try was not retriable
	LimitExceeded      uint64 // upstream_rq_retry_limit_exceeded
	Overflow           uint64 // upstream_rq_retry_overflow
	BackoffExponential uint64 // upstream_rq_retry_backoff_exponential: back-offs drawn
	Abandoned          uint64 // retry_or_shadow_abandoned: the body passed the buffer limit
}

// Errors for outcomes that cannot happen in the order given: a caller's bug.
var (
	ErrOver           = errors.New("retry: the request is over")
	ErrNoTry          = errors.New("retry: no try in flight (a retry is waiting for StartRetry)")
	ErrHeadersTwice   = errors.New("retry: the try already had its response headers")
	ErrNotWaiting     = errors.New("retry: StartRetry without a retry decided")
	ErrUnknownOutcome = errors.New("retry: unknown outcome kind")
)

// State is one request's retry state: RetryStateImpl with the router's flags around it
// (downstream_response_started_, upstream_request_started_, attempt_count_, is_retry_, the
// body buffered for retries). Not safe for concurrent use; the Breaker it shares is.
type State struct {
	req       Request
	breaker   *Breaker
	backoff   *Backoff
	remaining uint32 // retries_remaining_
	armed     bool   // a retry holds the breaker (backoff_callback_ / next_loop_callback_)
	dropped   bool   // the retry state is gone: retry_state_.reset()
	attempt   uint32 // attempt_count_
	isRetry   bool   // is_retry_
	sent      bool   // upstream_request_started_: some try sent a byte upstream
	started   bool   // downstream_response_started_
	waiting   bool   // a retry decided, its try not started
	headers   bool   // the current try's response headers arrived
	over      bool   // the request is over: no outcome may follow
	buffered  uint64 // the body buffered for retries (the decoding buffer's length)
	stats     Stats
}

// NewState is the retry state of a request with policy r, on the cluster's breaker b (nil:
// a breaker of its own with DefaultMaxRetries, which only this request uses), drawing its
// back-offs from rnd. Its first try is in flight.
func NewState(r Request, b *Breaker, rnd Random) *State {
	if b == nil {
		b = NewBreaker(DefaultMaxRetries)
	}
	return &State{req: r, breaker: b, backoff: r.Backoff(rnd), remaining: r.numRetries, attempt: 1}
}

// Attempt is the current try's number, 1 for the first (attempt_count_, which Filter::
// doRetry increments as it starts each retry; what upstream.request_attempt_count and
// x-envoy-attempt-count show).
func (s *State) Attempt() uint32 { return s.attempt }

// IsRetry reports whether a retry was started (is_retry_): the router's reply to a reset
// then says "upstream connect error or disconnect/reset before headers. retried and the
// latest reset reason: ..." (Filter::onUpstreamReset).
func (s *State) IsRetry() bool { return s.isRetry }

// Remaining is the retries the request has left (retries_remaining_).
func (s *State) Remaining() uint32 { return s.remaining }

// Waiting reports whether a retry was decided and its try not started.
func (s *State) Waiting() bool { return s.waiting }

// Stats are the counters charged so far.
func (s *State) Stats() Stats { return s.stats }

// RequestAttemptHeader is the x-envoy-attempt-count value the router writes into the
// request headers for the current try (Filter::decodeHeaders, doRetry), if the route
// includes the attempt count in requests.
func (s *State) RequestAttemptHeader() (string, bool) {
	return strconv.FormatUint(uint64(s.attempt), 10), s.req.attemptReq
}

// ResponseAttemptHeader is the x-envoy-attempt-count value the router sets on what it
// sends downstream, upstream responses and its own replies alike (modify_headers_), if the
// route includes the attempt count in responses.
func (s *State) ResponseAttemptHeader() (string, bool) {
	return strconv.FormatUint(uint64(s.attempt), 10), s.req.attemptResp
}

// StartRetry is Filter::doRetry: the back-off is over and the next try starts, with the
// attempt count incremented. The retry keeps holding the breaker through its try.
func (s *State) StartRetry() error {
	if s.over {
		return ErrOver
	}
	if !s.waiting {
		return ErrNotWaiting
	}
	s.waiting, s.headers = false, false
	s.isRetry = true
	s.attempt++
	return nil
}

// Done is the request's end (the retry state destroyed: ~RetryStateImpl → resetRetry): a
// retry still holding the breaker lets go. Later calls do nothing.
func (s *State) Done() {
	s.drop()
	s.over = true
}

// drop is retry_state_.reset().
func (s *State) drop() {
	s.release()
	s.dropped = true
}

// release is RetryStateImpl::resetRetry.
func (s *State) release() {
	if s.armed {
		s.breaker.dec()
		s.armed = false
	}
}

// active reports whether the router has a retry state it consults.
func (s *State) active() bool { return s.req.Enabled() && !s.dropped }

// Body is a request body chunk of n bytes reaching the router (Filter::decodeData). While
// the router buffers for retries it checks the buffered body plus the chunk against the
// limit first. aliased says the chunk is the connection manager's own buffer, handed on
// by an earlier filter that buffered the body (StopIterationAndBuffer) and resumed:
// Envoy then counts the buffer twice, the buffered length plus the chunk's
// (envoyproxy/envoy#30613, open for 1.36; a fix, envoyproxy/envoy#44346, merged after
// 1.37 and not modelled), so retries are given up at half the limit.
func (s *State) Body(n uint64, aliased bool) BodyAction {
	if s.over || !s.active() {
		return BodyStreamed
	}
	total := s.buffered + n
	if aliased {
		total = n + n // decodingBuffer() is data: its length counted twice
	}
	if total > s.req.bufferLimit {
		s.stats.Abandoned++
		s.drop()
		if s.waiting {
			s.over = true
			return BodyTooLarge
		}
		return BodyOverLimit
	}
	if aliased {
		s.buffered = n
	} else {
		s.buffered += n
	}
	return BodyBuffered
}

// Decide is the router's answer to the current try's outcome.
func (s *State) Decide(o Outcome) (Decision, error) {
	if s.over {
		return Decision{}, ErrOver
	}
	if s.waiting {
		return Decision{}, ErrNoTry
	}
	switch o.Kind {
	case OutcomeLocalReply:
		s.Done()
		return Decision{Action: Final, Status: NotAsked}, nil
	case OutcomeInformational:
		s.started = true
		s.drop()
		return Decision{Action: PassThrough, Status: NotAsked}, nil
	case OutcomeHeaders:
		return s.onHeaders(o.Headers)
	case OutcomeReset:
		return s.onReset(o.Reason, o.Sent), nil
	case OutcomePerTryTimeout:
		if s.started {
			return Decision{Action: Ignore, Status: NotAsked}, nil
		}
		return s.onReset(streaminfo.ResetLocalReset, o.Sent), nil
	}
	return Decision{}, ErrUnknownOutcome
}

// onHeaders is Filter::onUpstreamHeaders' retry half.
func (s *State) onHeaders(h [][2]string) (Decision, error) {
	if s.headers {
		return Decision{}, ErrHeadersTwice
	}
	s.headers = true
	d := Decision{Action: PassThrough, Status: NotAsked}
	if s.active() {
		would := s.wouldRetryFromHeaders(h)
		d = s.shouldRetry(would)
		if d.Status == Yes {
			return d, nil
		}
		d.Action = PassThrough
	}
	// "Make sure any retry timers are destroyed": retry_state_.reset() before the headers
	// go downstream.
	s.started = true
	s.drop()
	return d, nil
}

// onReset is Filter::maybeRetryReset and what onUpstreamReset does when it declines.
func (s *State) onReset(reason streaminfo.ResetReason, sent bool) Decision {
	d := Decision{Action: Abort, Status: NotAsked}
	if !s.started && s.active() {
		// "If the current request in this router has sent data to the upstream, we consider
		// the request started": sticky across tries.
		s.sent = s.sent || sent
		d = s.shouldRetry(s.wouldRetryFromReset(reason))
		if d.Status == Yes {
			return d
		}
		d.Action = Abort
	}
	d.Overloaded = reason == streaminfo.ResetOverflow
	s.Done()
	return d
}

// would is RetryState::RetryDecision.
type would int

const (
	noRetry would = iota
	retryWithBackoff
	retryImmediately
)

// shouldRetry is RetryStateImpl::shouldRetry: the order of its checks is Envoy's.
func (s *State) shouldRetry(w would) Decision {
	if s.armed && w == noRetry {
		// "we can infer that we did a retry earlier and it was successful".
		s.stats.Success++
	}
	s.release()
	if w == noRetry {
		return Decision{Status: No}
	}
	if s.remaining == 0 {
		s.stats.LimitExceeded++
		return Decision{Status: LimitExceeded, Flags: streaminfo.FlagUpstreamRetryLimitExceeded}
	}
	s.remaining--
	if !s.breaker.canCreate() {
		s.stats.Overflow++
		return Decision{Status: Overflow, Flags: streaminfo.FlagUpstreamOverflow}
	}
	s.breaker.inc()
	s.armed = true
	s.stats.Retry++
	s.waiting = true
	d := Decision{Action: Retry, Status: Yes}
	if w == retryWithBackoff {
		d.Delay = s.backoff.Next()
		s.stats.BackoffExponential++
	} else {
		d.Immediate = true
	}
	return d
}

// wouldRetryFromHeaders is RetryStateImpl::wouldRetryFromHeaders (gRPC statuses not
// modelled).
func (s *State) wouldRetryFromHeaders(h [][2]string) would {
	on := s.req.retryOn
	// "A response that contains the x-envoy-ratelimited header comes from an upstream
	// envoy. We retry these only when the envoy-ratelimited policy is in effect."
	if _, ok := first(h, HeaderRateLimited); ok {
		if on&OnEnvoyRateLimited != 0 {
			return retryWithBackoff
		}
		return noRetry
	}
	status := responseStatus(h)
	if on&On5xx != 0 && status >= 500 && status < 600 {
		return retryWithBackoff
	}
	if on&OnGatewayError != 0 && status >= 502 && status <= 504 {
		return retryWithBackoff
	}
	if on&OnRetriable4xx != 0 && status == 409 {
		return retryWithBackoff
	}
	if on&OnRetriableStatusCodes != 0 {
		for _, code := range s.req.statusCodes {
			if uint64(code) != status {
				continue
			}
			if code != 425 {
				return retryWithBackoff
			}
			// Too Early: retried at once (without early data) unless the downstream
			// request itself came as early data; then the loop goes on.
			if !s.req.earlyData {
				return retryImmediately
			}
		}
	}
	if on&OnRetriableHeaders != 0 && anyMatch(s.req.headers, h) {
		return retryWithBackoff
	}
	return noRetry
}

// wouldRetryFromReset is RetryStateImpl::wouldRetryFromReset over HTTP/1 and HTTP/2 (no
// HTTP/3 branches). A connection failure without connect-failure falls through to the
// other conditions: 5xx, gateway-error and reset retry it too.
func (s *State) wouldRetryFromReset(reason streaminfo.ResetReason) would {
	on := s.req.retryOn
	if reason == streaminfo.ResetOverflow {
		return noRetry
	}
	switch reason {
	case streaminfo.ResetLocalConnectionFailure, streaminfo.ResetRemoteConnectionFailure,
		streaminfo.ResetConnectionTimeout:
		if on&OnConnectFailure != 0 {
			return retryWithBackoff
		}
	}
	if on&OnResetBeforeRequest != 0 && !s.sent {
		return retryWithBackoff
	}
	if on&OnReset != 0 {
		return retryWithBackoff
	}
	if on&(On5xx|OnGatewayError) != 0 {
		return retryWithBackoff
	}
	if on&OnRefusedStream != 0 && reason == streaminfo.ResetRemoteRefusedStreamReset {
		return retryWithBackoff
	}
	return noRetry
}

// responseStatus is Http::Utility::getResponseStatus: :status as an unsigned number. Envoy's
// codecs guarantee a valid one; an upstream filter that writes something else gets 0 here,
// which no condition matches (Envoy's behaviour for it was not verified).
func responseStatus(h [][2]string) uint64 {
	v, ok := first(h, headerStatus)
	if !ok {
		return 0
	}
	n, ok := simpleAtoi(v, 64)
	if !ok {
		return 0
	}
	return n
}
