package policies

import (
	"slices"
	"time"
)

// Profile is a provider's class, which selects its default thresholds (guide §1,
// PROVIDER_PROFILES): subscription accounts behind OAuth, API keys, or a local server.
type Profile string

// The profiles of the Resilience Guide.
const (
	ProfileOAuth  Profile = "oauth"
	ProfileAPIKey Profile = "apikey"
	ProfileLocal  Profile = "local"
)

// Profiles lists every valid profile, in a stable order.
var Profiles = []Profile{ProfileOAuth, ProfileAPIKey, ProfileLocal}

// Defaults from OmniRoute's Resilience Guide (README, "The resilience engine", says how it is
// cited: §1–§7 are its numbered sections, a quoted heading one of the others). This file is
// the one place they live; every other package reads them from here. Where the guide is silent
// the value is Spillway's own choice and says so.

// Provider circuit breaker (guide §1, PROVIDER_PROFILES).
const (
	BreakerOAuthDegradationThreshold  = 5
	BreakerOAuthFailureThreshold      = 8
	BreakerOAuthResetTimeout          = 60 * time.Second
	BreakerAPIKeyDegradationThreshold = 7
	BreakerAPIKeyFailureThreshold     = 12
	BreakerAPIKeyResetTimeout         = 30 * time.Second
	// The local profile opens at 2 failures; its degradation threshold is derived
	// ("afgeleid"): one failure before opening.
	BreakerLocalDegradationThreshold = 1
	BreakerLocalFailureThreshold     = 2
	BreakerLocalResetTimeout         = 15 * time.Second
	// BreakerMaxBackoffMultiplier caps how far the reset timeout escalates over repeated
	// OPEN cycles (reset × 2^cycles, at most × this). The guide names the setting but not
	// its value; 8 is Spillway's choice.
	BreakerMaxBackoffMultiplier = 8
	// BreakerRecoverySuccesses is how many consecutive successes return a DEGRADED
	// provider to CLOSED ("enough successes"; value is Spillway's choice).
	BreakerRecoverySuccesses = 3
	// BreakerProbeTimeout bounds a HALF_OPEN probe claim: when the worker holding the
	// single probe never reports its outcome (it died, or the client went away), another
	// request may probe after this long. The guide is silent; 60 s is Spillway's choice
	// (long enough for a slow first byte, short enough to recover promptly).
	BreakerProbeTimeout = 60 * time.Second
)

// BreakerTripStatuses are the only upstream statuses that count against a provider's
// breaker (plus transport failures). Account-level 401/403/429 never trip it.
var BreakerTripStatuses = []int{408, 500, 502, 503, 504}

// Opt-in provider cooldown window gate (guide §1, "Opt-in globale Provider Cooldown").
const (
	ProviderCooldownEnabled          = false
	ProviderCooldownOAuthThreshold   = 10
	ProviderCooldownOAuthWindow      = 15 * time.Minute
	ProviderCooldownOAuthCooldown    = 5 * time.Minute
	ProviderCooldownAPIKeyThreshold  = 15
	ProviderCooldownAPIKeyWindow     = 30 * time.Minute
	ProviderCooldownAPIKeyCooldown   = 10 * time.Minute
	ProviderCooldownLocalThreshold   = 2
	ProviderCooldownLocalWindow      = 5 * time.Minute
	ProviderCooldownLocalCooldown    = 1 * time.Minute
	ProviderCooldownMinRetryCooldown = 1 * time.Second // connection-level entries: exponential min → max
	ProviderCooldownMaxRetryCooldown = 2 * time.Minute // (values are Spillway's choice)
)

// Connection cooldown (guide §2).
const (
	ConnectionCooldownOAuthBase  = 5 * time.Second
	ConnectionCooldownAPIKeyBase = 3 * time.Second
	ConnectionCooldownLocalBase  = 1 * time.Second // guide silent; Spillway's choice
	// ConnectionCooldownMaxBackoffSteps caps failureIndex in base × 2^failureIndex. The
	// guide exposes the setting ("maximale backoff-stappen") without a value; 8 is
	// Spillway's choice (3 s → 768 s at most before the max cooldown clamps it).
	ConnectionCooldownMaxBackoffSteps = 8
	// ConnectionCooldownMax clamps any computed cooldown, upstream hints included
	// (Spillway's choice).
	ConnectionCooldownMax = 30 * time.Minute
	// ConcurrencyLimitCooldown is the fixed cooldown of a concurrency-limit 429
	// (CONCURRENCY_LIMIT_COOLDOWN_MS).
	ConcurrencyLimitCooldown = 1 * time.Second
	// ExpiredRetryMax is how many bounded retries an expired credential gets before it
	// becomes terminal (EXPIRED_RETRY_MAX).
	ExpiredRetryMax = 3
	// RequestRejectedStreak is how many consecutive upstream rejections ban a connection.
	RequestRejectedStreak = 3
	// StreamStallCooldownEnabled: a content stall records the error but does not cool.
	StreamStallCooldownEnabled = false
)

// Model lockout (guide §3, DEFAULT_MODEL_LOCKOUT_SETTINGS).
const (
	ModelLockoutEnabled               = false
	ModelLockoutBaseCooldown          = 120 * time.Second
	ModelLockoutMaxCooldown           = 30 * time.Minute
	ModelLockoutMaxBackoffSteps       = 10
	ModelLockoutUseExponentialBackoff = true
	// ModelLockoutLongRetryCap caps a lockout made from a long typed Google RetryInfo hint.
	ModelLockoutLongRetryCap = 24 * time.Hour
	// ModelLockoutEscalationWindow is how long after a lockout ends a new failure still
	// escalates from the earlier failure count. The guide names the window without a
	// length; Spillway uses one default maximum lockout (a configured maxCooldownMs does
	// not change it).
	ModelLockoutEscalationWindow = ModelLockoutMaxCooldown
)

// ModelLockoutErrorCodes are the upstream statuses that count as model-level failures.
var ModelLockoutErrorCodes = []int{403, 404, 429, 502, 503, 504}

// Request queue admission (guide §5).
const (
	RequestQueueMaxWait          = 30 * time.Second
	RequestQueueExecutionMaxWait = 10 * time.Minute
	RequestQueueMinWait          = 1 * time.Millisecond
	RequestQueueMaxWaitCap       = 24 * time.Hour
	RequestQueueMaxDepthCap      = 100000
	// RequestQueueMaxDepthUnset is RequestQueueSettings.MaxQueueDepth when neither the
	// policy nor RATE_LIMIT_MAX_QUEUE_DEPTH sets a depth: each connection then gets
	// DefaultMaxQueueDepth of its own caps.
	RequestQueueMaxDepthUnset = -1
	// The default depth's floor and its waiters per slot (DefaultMaxQueueDepth).
	RequestQueueMaxDepthFloor   = 64
	RequestQueueMaxDepthPerSlot = 8
)

// DefaultMaxQueueDepth is a connection's maxQueueDepth when nothing sets one: max(64, 8 × its
// cap) — maxConcurrent, or without one its largest modelConcurrency — at most
// RequestQueueMaxDepthCap. A divergence from the guide, whose default is 0 = unbounded
// (§5: "Standaard 0 = uitgeschakeld"): every waiter is a paused request that holds its body
// in the proxy, so an unbounded queue grows with whatever a client sends. Eight waiters per
// slot is eight response times of waiting, where LLM calls of a few seconds already meet the
// 30 s wait budget (a deeper queue holds requests only to answer them
// RATE_LIMIT_QUEUE_TIMEOUT later); the floor of 64 keeps a small cap from refusing a burst.
// An explicit 0 still means unbounded, as in the guide.
func DefaultMaxQueueDepth(maxConcurrent int, modelConcurrency map[string]int) int {
	c := maxConcurrent
	if c == 0 {
		for _, n := range modelConcurrency {
			c = max(c, n)
		}
	}
	return min(max(RequestQueueMaxDepthFloor, RequestQueueMaxDepthPerSlot*c), RequestQueueMaxDepthCap)
}

// QuotaShareConcurrencyLimitEnabled (guide §4, quotaShareConcurrencyLimit.enabled) makes a
// connection's maxConcurrent fail-open. OmniRoute defaults it on, but applies it to
// quota-share combos only, which Spillway has no notion of; Spillway's connection cap is
// the request queue of guide §5, which refuses with RATE_LIMIT_QUEUE_FULL / _TIMEOUT. So
// Spillway defaults it off.
const QuotaShareConcurrencyLimitEnabled = false

// Cooldown-aware combo retry (guide §4, comboCooldownWait). The guide names the settings
// but gives no values; these are Spillway's: wait out short (Gemini-class ~60 s) windows.
const (
	ComboCooldownWaitEnabled     = true
	ComboCooldownWaitMaxWait     = 65 * time.Second
	ComboCooldownWaitMaxAttempts = 2
	ComboCooldownWaitBudget      = 90 * time.Second
)

// Upstream status restatement (guide §7).
const RestatementDefaultRetryAfter = 60 * time.Second

// Provider error rules (guide §7): agentrouter's model-access-denied rule.
const AgentrouterModelAccessDeniedCooldown = 6 * time.Hour

// Target selection (guide §2, p2c latency signal).
const (
	P2CLatencySamples    = 20
	P2CLatencyWindow     = 15 * time.Minute
	P2CLatencyWeight     = 0 // 0 = off
	P2CLatencyWeightMax  = 20
	P2CLatencyMinSamples = 3
)

// Session affinity (guide "Sessieaffiniteit"): TTL 0 turns it off.
const SessionAffinityTTL = 0

// SessionAffinityHeaders are read for the session key and never forwarded upstream.
var SessionAffinityHeaders = []string{"x-session-id", "x-codex-session-id", "x-omniroute-session"}

// Session affinity storage (Spillway's choices; the guide keeps pins in a database table,
// guide "Sessieaffiniteit").
const (
	// SessionAffinityRefreshInterval: a pin's last-use time is rewritten in shared data at
	// most this often (and at most a tenth of the TTL apart), so a busy session does not
	// write on every request.
	SessionAffinityRefreshInterval = 10 * time.Second
	// SessionAffinitySlots is the size of the fixed pin table in shared data. Shared data
	// has no delete, so pins live in this many hashed slots instead of one key per session;
	// a colliding newer session takes the slot over.
	SessionAffinitySlots = 16384
)

// Slow-stream throughput watchdog (guide §6): off by default. The guide leaves the numbers
// to its normalisation layer; these are Spillway's.
const (
	ThroughputWatchdogEnabled        = false
	ThroughputWatchdogWarmup         = 10 * time.Second
	ThroughputWatchdogWindow         = 30 * time.Second
	ThroughputWatchdogMinBytesPerSec = 8
	ThroughputWatchdogMinOutput      = 64 // bytes of output before the rate is judged
)

// Content-stall watchdog (guide §2): off by default, like the throughput watchdog. The
// guide names no budget; 2 min outlasts a slow first token, and reasoning frames restart it
// for a model that thinks longer.
const (
	ContentStallEnabled = false
	ContentStallTimeout = 2 * time.Minute
)

// Terminal re-check (Spillway's own, issue 19; the guide is silent: its terminal states stay
// until an operator reset or a new credential, §2): off by default. Five minutes between
// checks of one connection is far below what a revoked key costs in a request each, and
// one check per second per proxy keeps the re-check out of the providers' rate limits.
const (
	TerminalRecheckEnabled     = false
	TerminalRecheckInterval    = 5 * time.Minute
	TerminalRecheckMaxInterval = time.Hour
	TerminalRecheckMaxPerTick  = 1
	TerminalRecheckTimeout     = 10 * time.Second
	// TerminalRecheckTick is the round maxPerTick counts in: one second, the filter's idle
	// tick period, whatever the workers' tick periods are at the moment.
	TerminalRecheckTick = time.Second
)

// Admin API defaults.
const AdminPathPrefix = "/spillway/api/"

// MaxRequestBodyBytes is the default limit on buffered request bodies (413 above it).
const MaxRequestBodyBytes = 8 << 20

// ConnectionCooldownUseUpstreamRetryHints: upstream Retry-After / reset headers / reset text
// win over the computed backoff. The guide states it for API-key 429s; Spillway applies it
// to the apikey and local profiles. Subscription (oauth) accounts keep the computed backoff
// by default (ConnectionCooldownOAuthUseUpstreamRetryHints), as plugin/internal/conncooldown
// does.
const (
	ConnectionCooldownUseUpstreamRetryHints      = true
	ConnectionCooldownOAuthUseUpstreamRetryHints = false
)

// Same-request failover bounds (README, "How Spillway handles a request": attempts and time
// are bounded; Spillway's choice, the guide is silent). The budget matches the execution cap
// of one attempt.
const (
	FailoverMaxAttempts = 3
	FailoverBudget      = RequestQueueExecutionMaxWait
)

// Clamp ranges: where the guide says a setting is normalised into a range, policies clamps an
// out-of-range value into it (and warns) instead of rejecting the policy. The queue ranges are
// above (RequestQueueMinWait, RequestQueueMaxWaitCap, RequestQueueMaxDepthCap) and
// P2CLatencyWeightMax; the guide's lockout card (§3) clamps without naming its bounds, and the
// watchdog's bounds are left to "the normalisation layer" (§6), so these are Spillway's.
const (
	ModelLockoutMinBaseCooldown   = 1 * time.Second
	ModelLockoutMaxCooldownCap    = 24 * time.Hour
	ModelLockoutMaxBackoffStepCap = 30
	ThroughputWatchdogMinWindow   = 1 * time.Second
	ThroughputWatchdogMaxWindow   = 10 * time.Minute
	ThroughputWatchdogMaxWarmup   = 10 * time.Minute
	ThroughputWatchdogMaxBytes    = 1 << 20 // cap of minBytesPerSecond and minOutputBytes
)

// Provider API and stream accounting (Spillway's own; the guide is silent).
const (
	// ProviderAPI is the API a provider speaks when the policy does not say: most
	// providers and gateways speak OpenAI's.
	ProviderAPI = APIOpenAI
	// CountTruncatedStreams: a stream that ends without its terminal event is a failure
	// of the connection that served it.
	CountTruncatedStreams = true
)

// Routing: which requests Spillway routes and how it names the chosen cluster to Envoy
// (Spillway's own settings).
const (
	// RoutingClusterHeader is the request header that names the chosen cluster when the
	// policy routes by header without naming one (istio.Render writes it into the policy
	// it renders), and the header whose client-sent value is removed otherwise.
	RoutingClusterHeader = "x-spillway-cluster"
	// RoutingBodyWait is how long a held request may wait for its first body chunk before
	// Spillway concludes the proxy lacks allow_on_headers_stop_iteration. Ten seconds is
	// far beyond any client's gap between headers and body, short enough that a
	// misconfigured proxy is reported promptly.
	RoutingBodyWait = 10 * time.Second
	// RoutingModelHeader is the request header that names the model in header-routed mode.
	RoutingModelHeader = "x-spillway-request-model"
)

// RoutingDefaultPaths are the request paths Spillway routes by default, per API: the paths of the
// bodies it can read (a model field at the top level).
var RoutingDefaultPaths = map[API][]string{
	APIOpenAI:    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"},
	APIAnthropic: {"/v1/messages"},
}

// First-event hold of a 200 event stream: the response is held until its first event that
// carries content or an error, so an error event can still fail over. The numbers are
// Spillway's choice: 64 KiB leaves room for a long preamble of comments, pings and
// role-only deltas, and 10 s bounds how long a client waits on a stream that sends
// nothing useful before Spillway passes it on.
const (
	FirstEventMaxBytes = 64 << 10
	FirstEventTimeout  = 10 * time.Second
)

// QuotaResetTimeZone is the zone of daily quota resets when the provider announces none
// (Spillway's choice: most providers reset at UTC midnight).
const QuotaResetTimeZone = "UTC"

// ProfileSettings are the settings a provider's profile decides: its circuit breaker, its
// provider cooldown window gate and its connections' cooldown.
type ProfileSettings struct {
	Breaker            BreakerSettings
	ProviderCooldown   ProviderCooldownSettings
	ConnectionCooldown ConnectionCooldownSettings
}

// profileDefaults is the one table of per-profile defaults (guide §1 PROVIDER_PROFILES and
// the opt-in provider cooldown, guide §2 connection cooldown), built from the constants
// above. Policy.Resolved starts every provider from its profile's row; the mechanisms'
// DefaultConfig functions read it through ProfileDefaults.
var profileDefaults = map[Profile]ProfileSettings{
	ProfileOAuth: {
		Breaker: BreakerSettings{
			DegradationThreshold: BreakerOAuthDegradationThreshold,
			FailureThreshold:     BreakerOAuthFailureThreshold,
			ResetTimeout:         BreakerOAuthResetTimeout,
			MaxBackoffMultiplier: BreakerMaxBackoffMultiplier,
			RecoverySuccesses:    BreakerRecoverySuccesses,
			ProbeTimeout:         BreakerProbeTimeout,
			TripStatuses:         BreakerTripStatuses,
		},
		ProviderCooldown: ProviderCooldownSettings{
			FailureThreshold: ProviderCooldownOAuthThreshold,
			FailureWindow:    ProviderCooldownOAuthWindow,
			Cooldown:         ProviderCooldownOAuthCooldown,
			MinRetryCooldown: ProviderCooldownMinRetryCooldown,
			MaxRetryCooldown: ProviderCooldownMaxRetryCooldown,
		},
		ConnectionCooldown: ConnectionCooldownSettings{
			BaseCooldown:             ConnectionCooldownOAuthBase,
			MaxBackoffSteps:          ConnectionCooldownMaxBackoffSteps,
			MaxCooldown:              ConnectionCooldownMax,
			UseUpstreamRetryHints:    ConnectionCooldownOAuthUseUpstreamRetryHints,
			StreamStallCooldown:      StreamStallCooldownEnabled,
			ConcurrencyLimitCooldown: ConcurrencyLimitCooldown,
			ExpiredRetryMax:          ExpiredRetryMax,
			RequestRejectedStreak:    RequestRejectedStreak,
		},
	},
	ProfileAPIKey: {
		Breaker: BreakerSettings{
			DegradationThreshold: BreakerAPIKeyDegradationThreshold,
			FailureThreshold:     BreakerAPIKeyFailureThreshold,
			ResetTimeout:         BreakerAPIKeyResetTimeout,
			MaxBackoffMultiplier: BreakerMaxBackoffMultiplier,
			RecoverySuccesses:    BreakerRecoverySuccesses,
			ProbeTimeout:         BreakerProbeTimeout,
			TripStatuses:         BreakerTripStatuses,
		},
		ProviderCooldown: ProviderCooldownSettings{
			FailureThreshold: ProviderCooldownAPIKeyThreshold,
			FailureWindow:    ProviderCooldownAPIKeyWindow,
			Cooldown:         ProviderCooldownAPIKeyCooldown,
			MinRetryCooldown: ProviderCooldownMinRetryCooldown,
			MaxRetryCooldown: ProviderCooldownMaxRetryCooldown,
		},
		ConnectionCooldown: ConnectionCooldownSettings{
			BaseCooldown:             ConnectionCooldownAPIKeyBase,
			MaxBackoffSteps:          ConnectionCooldownMaxBackoffSteps,
			MaxCooldown:              ConnectionCooldownMax,
			UseUpstreamRetryHints:    ConnectionCooldownUseUpstreamRetryHints,
			StreamStallCooldown:      StreamStallCooldownEnabled,
			ConcurrencyLimitCooldown: ConcurrencyLimitCooldown,
			ExpiredRetryMax:          ExpiredRetryMax,
			RequestRejectedStreak:    RequestRejectedStreak,
		},
	},
	ProfileLocal: {
		Breaker: BreakerSettings{
			DegradationThreshold: BreakerLocalDegradationThreshold,
			FailureThreshold:     BreakerLocalFailureThreshold,
			ResetTimeout:         BreakerLocalResetTimeout,
			MaxBackoffMultiplier: BreakerMaxBackoffMultiplier,
			RecoverySuccesses:    BreakerRecoverySuccesses,
			ProbeTimeout:         BreakerProbeTimeout,
			TripStatuses:         BreakerTripStatuses,
		},
		ProviderCooldown: ProviderCooldownSettings{
			FailureThreshold: ProviderCooldownLocalThreshold,
			FailureWindow:    ProviderCooldownLocalWindow,
			Cooldown:         ProviderCooldownLocalCooldown,
			MinRetryCooldown: ProviderCooldownMinRetryCooldown,
			MaxRetryCooldown: ProviderCooldownMaxRetryCooldown,
		},
		ConnectionCooldown: ConnectionCooldownSettings{
			BaseCooldown:             ConnectionCooldownLocalBase,
			MaxBackoffSteps:          ConnectionCooldownMaxBackoffSteps,
			MaxCooldown:              ConnectionCooldownMax,
			UseUpstreamRetryHints:    ConnectionCooldownUseUpstreamRetryHints,
			StreamStallCooldown:      StreamStallCooldownEnabled,
			ConcurrencyLimitCooldown: ConcurrencyLimitCooldown,
			ExpiredRetryMax:          ExpiredRetryMax,
			RequestRejectedStreak:    RequestRejectedStreak,
		},
	},
}

// ProfileDefaults returns a profile's default settings, a copy the caller may change; ok is
// false for an unknown profile.
func ProfileDefaults(p Profile) (settings ProfileSettings, ok bool) {
	settings, ok = profileDefaults[p]
	settings.Breaker.TripStatuses = slices.Clone(settings.Breaker.TripStatuses)
	return settings, ok
}

// Defaults returns every policy-wide setting at its default: the resolved view of a policy
// that sets nothing (no providers or routes; per-provider defaults are ProfileDefaults). It
// goes through Policy.Resolved, so a mechanism that derives its own defaults from it can
// never disagree with a resolved policy.
func Defaults() *Resolved {
	return (&Policy{}).Resolved()
}
