package policies

// The raw model: what an operator writes. Every optional scalar is a pointer (or a nil
// slice/map) so that an explicit zero stays distinguishable from "unset, use the default";
// Resolved() turns a validated Policy into effective values. Doc comments on fields are the
// JSON Schema descriptions (policies/schema); keep them operator-facing.

// Policy is Spillway's whole configuration: the plugin configuration of the Envoy filter.
type Policy struct {
	// Schema is the editor's "$schema" reference; it is accepted and ignored.
	Schema string `json:"$schema,omitempty"`
	// Providers are the upstream providers (breaker scope), each with its connections.
	Providers []Provider `json:"providers" jsonschema:"required"`
	// Routes are the combos: which targets serve a requested model.
	Routes []Route `json:"routes" jsonschema:"required"`
	// Resilience tunes every resilience layer; every block is optional and defaults to the
	// Resilience Guide's values.
	Resilience Resilience `json:"resilience,omitzero"`
	// Routing is how Spillway recognises the LLM requests it routes and tells Envoy the
	// chosen provider's cluster.
	Routing Routing `json:"routing,omitzero"`
	// Admin configures the admin API served by the filter.
	Admin Admin `json:"admin,omitzero"`
	// MaxRequestBodyBytes limits the buffered request body; larger requests get 413.
	// Default 8 MiB; rejected outside 1 KiB–256 MiB.
	MaxRequestBodyBytes *int64 `json:"maxRequestBodyBytes,omitempty" jsonschema:"minimum=1024,maximum=268435456"`
	// StateNamespace names the shared state of this policy's own decisions — queue tickets,
	// round-robin turns, session pins, global and provider caps — in the proxy's shared
	// data, which every Spillway filter in one proxy shares (Istio sets no vm_id). Unset,
	// it is the filter's plugin name and root id, so two filters never mix them; two
	// filters that set the same stateNamespace share them on purpose. Facts about an
	// upstream account (cooldowns, terminal states, lockouts, requests in flight on a
	// credential) and a provider's circuit are shared by every policy that uses the same
	// credential or upstream, whatever this says. Letters, digits, '.', '_' and '-', at
	// most 64.
	StateNamespace string `json:"stateNamespace,omitempty" jsonschema:"maxLength=64,pattern=^[A-Za-z0-9][A-Za-z0-9._-]*$"`

	// Warnings lists what parsing changed or finds doubtful without rejecting it (values
	// clamped into their range, weak admin token, unusable environment defaults). Not part
	// of the JSON document.
	Warnings Errors `json:"-"`

	// envQueue holds the request-queue defaults read from the environment at Parse
	// (RATE_LIMIT_* variables): the lowest layer under resilience.requestQueue.
	envQueue RequestQueue
}

// Provider is one upstream provider: the scope of the circuit breaker and of the opt-in
// provider cooldown.
type Provider struct {
	// ID names the provider (e.g. openai); unique; used in routes, rules, state keys and
	// response headers. Letters, digits, '.', '_' and '-'.
	ID string `json:"id" jsonschema:"required,minLength=1,maxLength=64,pattern=^[A-Za-z0-9][A-Za-z0-9._-]*$"`
	// Profile selects the default thresholds: oauth (subscription accounts), apikey or
	// local. Default apikey.
	Profile Profile `json:"profile,omitempty"`
	// API is the HTTP API the provider speaks: openai (OpenAI and OpenAI-compatible
	// gateways such as OpenRouter, Azure OpenAI or Ollama's /v1) or anthropic (Anthropic's
	// Messages API). Spillway never sends a provider a request of another API: a request
	// skips the route targets whose provider speaks another API than the request's path
	// (routing.paths). Default openai.
	API API `json:"api,omitempty"`
	// Cluster is the Envoy cluster requests for this provider are sent to.
	Cluster string `json:"cluster" jsonschema:"required,minLength=1"`
	// Authority optionally rewrites the :authority (Host) header, e.g. api.openai.com.
	Authority string `json:"authority,omitempty"`
	// Connections are the accounts or API keys of this provider; at least one.
	Connections []Connection `json:"connections" jsonschema:"required,minItems=1"`
	// QuotaFamilies maps model globs to a quota family name: a quota or entitlement failure
	// (429/403/402) locks out the whole family on that connection, e.g. {"gpt-5*": "gpt-5"}.
	// Models matching no glob are their own family. Globs are tried in sorted order; keep
	// them disjoint.
	QuotaFamilies map[string]string `json:"quotaFamilies,omitzero"`
	// CountTruncatedStreams makes a streamed (text/event-stream) response that ends
	// without its terminal event — [DONE] (OpenAI chat and completions), message_stop
	// (Anthropic), response.completed or response.incomplete (OpenAI responses) — count
	// as a failure of the connection that served it: the provider cut the answer short.
	// Set false for a provider that never sends a terminal event. Default true.
	CountTruncatedStreams *bool `json:"countTruncatedStreams,omitempty"`
}

// API is the HTTP API a provider speaks, which fixes the shape of its request and response
// bodies.
type API string

// The APIs Spillway routes.
const (
	// APIOpenAI is OpenAI's API (chat completions, completions, embeddings, responses),
	// also spoken by OpenAI-compatible gateways.
	APIOpenAI API = "openai"
	// APIAnthropic is Anthropic's Messages API.
	APIAnthropic API = "anthropic"
)

// APIs lists every API, in a stable order.
var APIs = []API{APIOpenAI, APIAnthropic}

// Connection is one account or API key of a provider: the scope of the connection cooldown,
// the concurrency caps and the request queue.
type Connection struct {
	// ID names the connection; unique across the whole policy (it keys shared state).
	// Letters, digits, '.', '_' and '-'.
	ID string `json:"id" jsonschema:"required,minLength=1,maxLength=64,pattern=^[A-Za-z0-9][A-Za-z0-9._-]*$"`
	// Credential is the header Spillway sets on requests sent through this connection.
	// Optional (local providers often need none).
	Credential *Credential `json:"credential,omitempty"`
	// MaxConcurrent caps the requests in flight on this connection; unset = no cap.
	// Requests over the cap queue (requestQueue). Rejected outside 1–100000.
	MaxConcurrent *int `json:"maxConcurrent,omitempty" jsonschema:"minimum=1,maximum=100000"`
	// ModelConcurrency caps the requests in flight per upstream model on this connection
	// (exact model id as sent upstream); both this and maxConcurrent apply. Values
	// 1–100000.
	ModelConcurrency map[string]int `json:"modelConcurrency,omitzero"`
	// Weight is this connection's share for weighted strategies. Default 1; 0 makes it a
	// standby, used only after every candidate with a positive weight; rejected outside
	// 0–1000.
	Weight *int `json:"weight,omitempty" jsonschema:"minimum=0,maximum=1000"`
	// RateLimitOverrides override the request queue budgets for this connection only
	// (precedence: default < RATE_LIMIT_* environment < resilience.requestQueue < this).
	RateLimitOverrides *RateLimitOverrides `json:"rateLimitOverrides,omitempty"`
}

// Credential is a header name and value injected upstream. The value usually comes from the
// VM environment ("Bearer ${OPENAI_KEY}") and never appears in errors, logs or output.
type Credential struct {
	// Header is the header name, e.g. authorization or x-api-key (an HTTP token; stored
	// lower-case). Hop-by-hop, framing and pseudo headers are rejected.
	Header string `json:"header" jsonschema:"required,minLength=1"`
	// Value is the header value; ${ENV} expands from the VM environment. Spillway never
	// shows it: logs, errors and dumps print [redacted].
	Value Secret `json:"value" jsonschema:"required,minLength=1"`
}

// RateLimitOverrides are per-connection queue budgets (guide §5 precedence: environment
// default < resilience.requestQueue < per-connection override).
type RateLimitOverrides struct {
	// MaxWaitMs is how long a request may wait in this connection's queue. Clamped to
	// 1 ms–24 h.
	MaxWaitMs *int64 `json:"maxWaitMs,omitempty"`
	// ExecutionMaxWaitMs caps one dispatched attempt on this connection. Clamped to
	// 1 ms–24 h.
	ExecutionMaxWaitMs *int64 `json:"executionMaxWaitMs,omitempty"`
}

// Strategy is how a route chooses among its candidates.
type Strategy string

// The routing strategies Spillway implements (a subset of the twenty of guide
// "Overige resilientiefuncties").
const (
	// StrategyPriority tries candidates in declaration order.
	StrategyPriority Strategy = "priority"
	// StrategyWeighted picks at random in proportion to weights.
	StrategyWeighted Strategy = "weighted"
	// StrategyRoundRobin rotates through candidates.
	StrategyRoundRobin Strategy = "round-robin"
	// StrategyFillFirst uses the first candidate until it is full or unavailable.
	StrategyFillFirst Strategy = "fill-first"
	// StrategyRandom picks uniformly at random, then falls back in order.
	StrategyRandom Strategy = "random"
	// StrategyStrictRandom shuffles every candidate (no fixed fallback order).
	StrategyStrictRandom Strategy = "strict-random"
	// StrategyLeastUsed picks the candidate with the fewest requests in flight.
	StrategyLeastUsed Strategy = "least-used"
	// StrategyP2C compares two random candidates (power of two choices), optionally
	// weighted by latency (resilience.p2cLatency).
	StrategyP2C Strategy = "p2c"
)

// Strategies lists every valid strategy, in a stable order.
var Strategies = []Strategy{StrategyPriority, StrategyWeighted, StrategyRoundRobin,
	StrategyFillFirst, StrategyRandom, StrategyStrictRandom, StrategyLeastUsed, StrategyP2C}

// Route is a combo: the targets that can serve a requested model.
type Route struct {
	// Model is the requested model this route serves: an exact name, or a glob ('*' any
	// run of characters including '/', '?' one character, [a-z] classes, '\' escapes).
	// An exact route wins over globs; among globs the first declared wins.
	Model string `json:"model" jsonschema:"required,minLength=1,maxLength=256"`
	// Strategy chooses among the candidates: each target expanded into its provider's
	// connections, in declaration order. Default priority. least-used and p2c compare
	// requests in flight (fill-first moves a connection at its maxConcurrent behind the
	// rest): counted across every Envoy worker on a connection with maxConcurrent or
	// modelConcurrency (its shared leases), and only the deciding worker's own requests on
	// one without a cap.
	Strategy Strategy `json:"strategy,omitempty"`
	// Targets are where the request may go, in fallback order; at least one.
	Targets []Target `json:"targets" jsonschema:"required,minItems=1"`
}

// Target is one provider (optionally one connection of it) and the upstream model to ask for.
type Target struct {
	// Provider is the id of a declared provider.
	Provider string `json:"provider" jsonschema:"required,minLength=1"`
	// Model is the upstream model to request; unset = the requested model unchanged
	// (the usual choice for glob routes).
	Model string `json:"model,omitempty" jsonschema:"maxLength=256"`
	// Connection pins this target to one connection of the provider; unset = any.
	Connection string `json:"connection,omitempty"`
	// Weight is this target's share for weighted strategies (multiplied by the
	// connection's weight). Default 1; 0 makes it a standby; rejected outside 0–1000.
	Weight *int `json:"weight,omitempty" jsonschema:"minimum=0,maximum=1000"`
}

// Resilience holds every resilience block. Each is optional; defaults are the guide's.
type Resilience struct {
	// ProviderBreaker is the provider circuit breaker (guide §1), per profile.
	ProviderBreaker ProviderBreaker `json:"providerBreaker,omitzero"`
	// ProviderCooldown is the opt-in provider cooldown window gate (guide §1).
	ProviderCooldown ProviderCooldown `json:"providerCooldown,omitzero"`
	// ConnectionCooldown is the per-connection cooldown with exponential backoff (guide §2).
	ConnectionCooldown ConnectionCooldown `json:"connectionCooldown,omitzero"`
	// ModelLockout is the opt-in provider+connection+model lockout (guide §3).
	ModelLockout ModelLockout `json:"modelLockout,omitzero"`
	// RequestQueue is queue admission for connections at their concurrency cap (guide §5).
	RequestQueue RequestQueue `json:"requestQueue,omitzero"`
	// QuotaShareConcurrencyLimit makes a connection's maxConcurrent fail-open (guide §4).
	QuotaShareConcurrencyLimit QuotaShareConcurrencyLimit `json:"quotaShareConcurrencyLimit,omitzero"`
	// ComboCooldownWait waits out short transient cooldowns instead of answering 429
	// (guide §4).
	ComboCooldownWait ComboCooldownWait `json:"comboCooldownWait,omitzero"`
	// Failover bounds same-request failover to the next candidate.
	Failover Failover `json:"failover,omitzero"`
	// StatusRestatement rewrites misleading upstream statuses before classification
	// (guide §7), e.g. agentrouter's 403 "额度不足" to 429. At most 32 rules; they come
	// before Spillway's built-in rules, and one with a built-in rule's id replaces it.
	StatusRestatement []RestatementRule `json:"statusRestatement,omitzero"`
	// ProviderErrorRules are operator classification rules: provider + status + markers →
	// reason, scope and cooldown (guide §7, settings.providerErrorRules). At most 64
	// rules, consulted before Spillway's built-in rules.
	ProviderErrorRules []ProviderErrorRule `json:"providerErrorRules,omitzero"`
	// StreamRecovery holds the stream watchdogs.
	StreamRecovery StreamRecovery `json:"streamRecovery,omitzero"`
	// TerminalRecheck is the opt-in periodic re-check of expired connections (Spillway's
	// own; the guide keeps a terminal state until an operator reset or a new credential).
	TerminalRecheck TerminalRecheck `json:"terminalRecheck,omitzero"`
	// P2CLatency is the opt-in latency signal for p2c selection (guide §2).
	P2CLatency P2CLatency `json:"p2cLatency,omitzero"`
	// SessionAffinityTtlMs pins a client session (x-session-id, x-codex-session-id,
	// x-omniroute-session) to one connection for this long; 0 (default) turns it off.
	// Rejected outside 0–7 days.
	SessionAffinityTtlMs *int64 `json:"sessionAffinityTtlMs,omitempty" jsonschema:"minimum=0,maximum=604800000"`
	// QuotaResetTimeZone is the time zone of daily quota resets: a quota_exhausted failure
	// with a daily window stays locked until the reset the provider announced, else until
	// the next midnight in this zone. UTC (default) or a fixed offset ±HH:MM between
	// -12:00 and +14:00, e.g. +08:00 for providers that reset at Beijing midnight. Fixed
	// offsets (no daylight saving) rather than IANA names such as Asia/Shanghai: the filter
	// would have to embed the time zone database (about 450 KB of wasm), and providers
	// announce their resets as fixed offsets.
	QuotaResetTimeZone string `json:"quotaResetTimeZone,omitempty" jsonschema:"pattern=^(UTC|[+-][0-9]{2}:[0-9]{2})$"`
}

// ProviderBreaker configures the provider circuit breaker per profile.
type ProviderBreaker struct {
	// OAuth overrides the oauth profile (default 5 / 8 / 60 s).
	OAuth BreakerProfile `json:"oauth,omitzero"`
	// APIKey overrides the apikey profile (default 7 / 12 / 30 s).
	APIKey BreakerProfile `json:"apikey,omitzero"`
	// Local overrides the local profile (default 1 / 2 / 15 s).
	Local BreakerProfile `json:"local,omitzero"`
	// TripStatuses are the upstream statuses that count against a provider (transport
	// failures always count). Default [408, 500, 502, 503, 504]. Each 400–599, never the
	// account-level 401, 403 or 429; [] = transport failures only.
	TripStatuses []int `json:"tripStatuses,omitzero"`
}

// BreakerProfile is one profile's breaker thresholds.
type BreakerProfile struct {
	// DegradationThreshold is the failure count that makes a provider DEGRADED (traffic
	// still flows). Must be ≥ 1 and ≤ failureThreshold. Unset: the profile's default,
	// lowered to failureThreshold when that is set lower.
	DegradationThreshold *int `json:"degradationThreshold,omitempty" jsonschema:"minimum=1,maximum=1000000"`
	// FailureThreshold is the failure count that OPENs the breaker. Rejected outside
	// 1–1000000.
	FailureThreshold *int `json:"failureThreshold,omitempty" jsonschema:"minimum=1,maximum=1000000"`
	// ResetTimeoutMs is how long the breaker stays OPEN before HALF_OPEN. Rejected
	// outside 1 s–24 h.
	ResetTimeoutMs *int64 `json:"resetTimeoutMs,omitempty" jsonschema:"minimum=1000,maximum=86400000"`
	// CooldownByKind overrides resetTimeoutMs by the kind of the last failure
	// (server_error, timeout, transport_error). Values 1 s–24 h.
	CooldownByKind map[string]int64 `json:"cooldownByKind,omitzero"`
	// MaxBackoffMultiplier caps how far the OPEN period escalates over repeated OPEN
	// cycles (resetTimeout × 2^cycles, at most × this). Default 8; rejected outside 1–1024.
	MaxBackoffMultiplier *int `json:"maxBackoffMultiplier,omitempty" jsonschema:"minimum=1,maximum=1024"`
	// RecoverySuccesses is how many consecutive successes return a DEGRADED provider to
	// CLOSED. Default 3; rejected outside 1–1000.
	RecoverySuccesses *int `json:"recoverySuccesses,omitempty" jsonschema:"minimum=1,maximum=1000"`
}

// ProviderCooldown is the opt-in provider cooldown window gate (PROVIDER_COOLDOWN_ENABLED).
type ProviderCooldown struct {
	// Enabled turns the gate on. Default false.
	Enabled *bool `json:"enabled,omitempty"`
	// OAuth overrides the oauth profile (default 10 failures / 15 min → 5 min).
	OAuth ProviderCooldownProfile `json:"oauth,omitzero"`
	// APIKey overrides the apikey profile (default 15 failures / 30 min → 10 min).
	APIKey ProviderCooldownProfile `json:"apikey,omitzero"`
	// Local overrides the local profile (default 2 failures / 5 min → 1 min).
	Local ProviderCooldownProfile `json:"local,omitzero"`
}

// ProviderCooldownProfile is one profile's window gate.
type ProviderCooldownProfile struct {
	// ProviderFailureThreshold is the failures within the window that cool the provider.
	// Rejected outside 1–1000.
	ProviderFailureThreshold *int `json:"providerFailureThreshold,omitempty" jsonschema:"minimum=1,maximum=1000"`
	// ProviderFailureWindowMs is the window failures are counted in. Rejected outside
	// 1 s–24 h.
	ProviderFailureWindowMs *int64 `json:"providerFailureWindowMs,omitempty" jsonschema:"minimum=1000,maximum=86400000"`
	// ProviderCooldownMs is how long a tripped provider cools. Rejected outside 1 s–24 h.
	ProviderCooldownMs *int64 `json:"providerCooldownMs,omitempty" jsonschema:"minimum=1000,maximum=86400000"`
	// MinRetryCooldownMs starts the exponential backoff of connection-level entries
	// (provider:connection). Rejected outside 1 ms–24 h.
	MinRetryCooldownMs *int64 `json:"minRetryCooldownMs,omitempty" jsonschema:"minimum=1,maximum=86400000"`
	// MaxRetryCooldownMs caps that backoff; must be ≥ minRetryCooldownMs. Rejected outside
	// 1 ms–24 h.
	MaxRetryCooldownMs *int64 `json:"maxRetryCooldownMs,omitempty" jsonschema:"minimum=1,maximum=86400000"`
}

// ConnectionCooldown configures the per-connection cooldown (guide §2).
type ConnectionCooldown struct {
	// OAuth overrides the oauth profile (default base 5 s).
	OAuth ConnectionCooldownProfile `json:"oauth,omitzero"`
	// APIKey overrides the apikey profile (default base 3 s).
	APIKey ConnectionCooldownProfile `json:"apikey,omitzero"`
	// Local overrides the local profile (default base 1 s).
	Local ConnectionCooldownProfile `json:"local,omitzero"`
	// StreamStallCooldown decides whether a content stall cools the connection.
	StreamStallCooldown StreamStallCooldown `json:"streamStallCooldown,omitzero"`
	// ConcurrencyLimitCooldownMs is the fixed cooldown of a concurrency-limit 429 (no
	// backoff step). Default 1 s; rejected outside 1 ms–10 min.
	ConcurrencyLimitCooldownMs *int64 `json:"concurrencyLimitCooldownMs,omitempty" jsonschema:"minimum=1,maximum=600000"`
	// ExpiredRetryMax is how many bounded retries an expired credential gets before it
	// becomes terminal (EXPIRED_RETRY_MAX). Default 3; rejected outside 1–100.
	ExpiredRetryMax *int `json:"expiredRetryMax,omitempty" jsonschema:"minimum=1,maximum=100"`
	// RequestRejectedStreak is how many consecutive upstream rejections ban a connection.
	// Default 3; rejected outside 1–100.
	RequestRejectedStreak *int `json:"requestRejectedStreak,omitempty" jsonschema:"minimum=1,maximum=100"`
}

// ConnectionCooldownProfile is one profile's connection cooldown.
type ConnectionCooldownProfile struct {
	// BaseCooldownMs is the first cooldown; repeated failures use
	// baseCooldownMs × 2^failureIndex. Rejected outside 1 ms–24 h.
	BaseCooldownMs *int64 `json:"baseCooldownMs,omitempty" jsonschema:"minimum=1,maximum=86400000"`
	// MaxBackoffSteps caps failureIndex. Default 8; rejected outside 0–30.
	MaxBackoffSteps *int `json:"maxBackoffSteps,omitempty" jsonschema:"minimum=0,maximum=30"`
	// MaxCooldownMs clamps every computed cooldown, upstream hints included. Default
	// 30 min; must be ≥ baseCooldownMs and ≥ concurrencyLimitCooldownMs; rejected outside
	// 1 ms–24 h.
	MaxCooldownMs *int64 `json:"maxCooldownMs,omitempty" jsonschema:"minimum=1,maximum=86400000"`
	// UseUpstreamRetryHints prefers upstream Retry-After / reset headers / reset text
	// over the computed backoff. Default true for apikey and local, false for oauth.
	UseUpstreamRetryHints *bool `json:"useUpstreamRetryHints,omitempty"`
}

// StreamStallCooldown is resilienceSettings.streamStallCooldown.
type StreamStallCooldown struct {
	// Enabled makes a content stall cool the connection. Default false (the stall is
	// recorded but does not cool).
	Enabled *bool `json:"enabled,omitempty"`
}

// ModelLockout is DEFAULT_MODEL_LOCKOUT_SETTINGS (guide §3).
type ModelLockout struct {
	// Enabled is the master switch. Default false.
	Enabled *bool `json:"enabled,omitempty"`
	// ErrorCodes are the upstream statuses that count as model-level failures. Default
	// [403, 404, 429, 502, 503, 504]. Each 100–599; at least one (an empty list would
	// never lock out: to turn model lockout off, set enabled: false).
	ErrorCodes []int `json:"errorCodes,omitzero" jsonschema:"minItems=1"`
	// BaseCooldownMs is the first lockout. Default 120 s; clamped to 1 s–24 h.
	BaseCooldownMs *int64 `json:"baseCooldownMs,omitempty"`
	// MaxCooldownMs caps the escalated lockout. Default 30 min; clamped to
	// baseCooldownMs–24 h.
	MaxCooldownMs *int64 `json:"maxCooldownMs,omitempty"`
	// MaxBackoffSteps caps the escalation steps. Default 10; clamped to 0–30.
	MaxBackoffSteps *int `json:"maxBackoffSteps,omitempty"`
	// UseExponentialBackoff escalates repeated failures exponentially. Default true.
	UseExponentialBackoff *bool `json:"useExponentialBackoff,omitempty"`
}

// RequestQueue is resilienceSettings.requestQueue (guide §5). Precedence for each value:
// built-in default < environment (RATE_LIMIT_MAX_WAIT_MS, RATE_LIMIT_EXECUTION_MAX_WAIT_MS,
// RATE_LIMIT_MAX_QUEUE_DEPTH) < this block < a connection's rateLimitOverrides.
type RequestQueue struct {
	// MaxWaitMs is the queue budget: how long a request may wait for a slot before 429
	// RATE_LIMIT_QUEUE_TIMEOUT. Default 30 s; clamped to 1 ms–24 h.
	MaxWaitMs *int64 `json:"maxWaitMs,omitempty"`
	// ExecutionMaxWaitMs caps one dispatched attempt (504 RATE_LIMIT_EXECUTION_TIMEOUT).
	// Default 10 min; clamped to 1 ms–24 h.
	ExecutionMaxWaitMs *int64 `json:"executionMaxWaitMs,omitempty"`
	// MaxQueueDepth caps how many requests may wait per connection, across workers (429
	// RATE_LIMIT_QUEUE_FULL, or SEMAPHORE_QUEUE_FULL on the per-model gate, above it).
	// Default max(64, 8 × the connection's maxConcurrent, or its largest modelConcurrency
	// without one), where the guide's default is 0 = unbounded: every waiter is a paused
	// request holding its body. 0 means unbounded. Clamped to 0–100000.
	MaxQueueDepth *int `json:"maxQueueDepth,omitempty"`
}

// QuotaShareConcurrencyLimit is resilienceSettings.quotaShareConcurrencyLimit (guide §4
// "Serialisatie van quota-share-requests").
type QuotaShareConcurrencyLimit struct {
	// Enabled makes a connection's maxConcurrent fail-open: a request whose wait for a
	// slot on the connection ends (the queue holds maxQueueDepth requests, or the wait
	// budget runs out) is sent without a slot instead of being answered 429
	// RATE_LIMIT_QUEUE_FULL / RATE_LIMIT_QUEUE_TIMEOUT. modelConcurrency caps never fail
	// open (429 SEMAPHORE_QUEUE_FULL / SEMAPHORE_TIMEOUT). Default false: OmniRoute turns it
	// on for quota-share combos only (several keys sharing one upstream account), which
	// Spillway has no notion of, and Spillway's connection cap is the request queue of
	// guide §5, which refuses.
	Enabled *bool `json:"enabled,omitempty"`
}

// ComboCooldownWait is resilienceSettings.comboCooldownWait (guide §4).
type ComboCooldownWait struct {
	// Enabled turns the wait on. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// MaxWaitMs is the longest single wait. Default 65 s; rejected outside 0–24 h.
	MaxWaitMs *int64 `json:"maxWaitMs,omitempty" jsonschema:"minimum=0,maximum=86400000"`
	// MaxAttempts is how many times one request may wait. Default 2; rejected outside 0–10.
	MaxAttempts *int `json:"maxAttempts,omitempty" jsonschema:"minimum=0,maximum=10"`
	// BudgetMs is the total wait one request may spend. Default 90 s; rejected outside
	// 0–24 h.
	BudgetMs *int64 `json:"budgetMs,omitempty" jsonschema:"minimum=0,maximum=86400000"`
}

// Failover bounds same-request failover (Spillway's own block; the guide is silent).
type Failover struct {
	// MaxAttempts is the most upstream attempts one request makes, the first included.
	// Default 3; rejected outside 1–20.
	MaxAttempts *int `json:"maxAttempts,omitempty" jsonschema:"minimum=1,maximum=20"`
	// BudgetMs is the total time one request may spend on attempts before Spillway answers
	// with the last failure. Default 10 min; rejected outside 1 s–24 h.
	BudgetMs *int64 `json:"budgetMs,omitempty" jsonschema:"minimum=1000,maximum=86400000"`
	// Via is how a failover attempt reaches its target. router has Envoy's router retry the
	// request through Spillway's upstream HTTP filter on the provider cluster, so a failover
	// attempt streams: it needs that filter and the route's retry policy (render envoy,
	// render istio's Full mode and hostsim serve write both) and body-routed mode, and it
	// fails over this way to the targets a retry can reach (the first target's cluster and
	// model; any with crossCluster), on what the status and headers of a failed try say
	// (its body too with holdTries); every other failover still goes by callout. callout
	// sends every failover attempt with proxy_http_call from the HTTP connection manager's
	// filter: any target, but the attempt's response reaches the client only once complete.
	// Default: router in body-routed mode, callout in header-routed mode (routing.mode:
	// headers, which refuses router). A proxy without the upstream filter is detected
	// (spillway_router_unlinked_total, a critical log once per VM) and fails over by
	// callout; set callout to keep the callout path without the detector.
	Via FailoverVia `json:"via,omitempty" jsonschema:"enum=callout,enum=router"`
	// HoldTries (router only) has the upstream instance hold a failed try's response to
	// read its error body, and a 200 event stream until its first event, before it decides
	// whether the try fails over, as the callout path decides; without it a try fails over
	// on its status and headers alone, and a failure only its body shows is failed over by
	// callout. It needs Envoy ≥ 1.37: releasing a held try for a retry is undefined
	// behaviour before envoyproxy/envoy#41879. Default false; render envoy, render istio
	// and hostsim serve set it from the Envoy release they render for (on from 1.37) and
	// refuse true for an older one.
	HoldTries *bool `json:"holdTries,omitempty"`
	// CrossCluster (router only) lets a retry go to a target on another cluster, with another
	// model, so a fallback to another provider streams too: the route picks its cluster with
	// a matcher on the filter state the filter writes, and refreshes it before each retry
	// (RetryPolicy.refresh_cluster_on_retry); the Envoy generator writes that route instead
	// of the cluster_header one. It needs Envoy ≥ 1.39. Without it a retry stays on the first
	// target's cluster and model, and a fallback to another provider goes by callout.
	// Default false; render envoy and hostsim serve set it from the Envoy release they
	// render for (on from 1.39) and refuse true for an older one; render istio refuses it.
	CrossCluster *bool `json:"crossCluster,omitempty"`
}

// FailoverVia is how a failover attempt reaches its target (Failover.Via).
type FailoverVia string

// The failover paths.
const (
	// FailoverViaCallout sends failover attempts with proxy_http_call.
	FailoverViaCallout FailoverVia = "callout"
	// FailoverViaRouter has the router retry the request through the upstream filter.
	FailoverViaRouter FailoverVia = "router"
)

// RestatementRule rewrites an upstream status before classification (guide §7).
type RestatementRule struct {
	// ID names the rule in logs and diagnostics; unique. Spillway's built-in agentrouter
	// rule is "agentrouter-quota-misstatus".
	ID string `json:"id" jsonschema:"required,minLength=1"`
	// Provider is the id of the declared provider the rule applies to.
	Provider string `json:"provider" jsonschema:"required,minLength=1"`
	// FromStatuses are the upstream statuses the rule may rewrite: 1 to 16 of them, each
	// 400–599, none equal to toStatus.
	FromStatuses []int `json:"fromStatuses" jsonschema:"required,minItems=1,maxItems=16"`
	// ToStatus is the status to restate to (e.g. 429), 400–599.
	ToStatus int `json:"toStatus" jsonschema:"required,minimum=400,maximum=599"`
	// TextMarkers: the rule matches when the error body contains any of them (substring;
	// ASCII letters case-insensitive, other bytes exact, so Chinese markers match as
	// written). Empty = any body. At most 16, each 1–256 bytes.
	TextMarkers []string `json:"textMarkers,omitzero" jsonschema:"maxItems=16"`
	// ExcludeMarkers veto the rule when the body contains any of them, even if a text
	// marker matched (permanent errors keep their status). At most 16, each 1–256 bytes.
	ExcludeMarkers []string `json:"excludeMarkers,omitzero" jsonschema:"maxItems=16"`
	// DefaultRetryAfterMs is the Retry-After told to the client when upstream gave none.
	// Default 60 s; rejected outside 1 s–24 h.
	DefaultRetryAfterMs *int64 `json:"defaultRetryAfterMs,omitempty" jsonschema:"minimum=1000,maximum=86400000"`
}

// ProviderErrorRule is an operator classification rule (settings.providerErrorRules): when
// a provider's error matches, it decides the failure reason, the scope it blames and the
// cooldown. A declared rule is the operator's opt-in: its scope is always honoured and it
// sees the full error text.
type ProviderErrorRule struct {
	// ID names the rule; unique.
	ID string `json:"id" jsonschema:"required,minLength=1"`
	// Provider is the id of the declared provider the rule applies to.
	Provider string `json:"provider" jsonschema:"required,minLength=1"`
	// Status is the upstream status (after restatement) to match, 400–599; unset = any
	// error status.
	Status *int `json:"status,omitempty" jsonschema:"minimum=400,maximum=599"`
	// TextMarkers: the rule matches when the error text contains any of them (substring;
	// ASCII letters case-insensitive, other bytes exact). Empty = any error of that
	// provider and status. At most 16, each 1–256 bytes.
	TextMarkers []string `json:"textMarkers,omitzero" jsonschema:"maxItems=16"`
	// ExcludeMarkers veto the rule when the error text contains any of them. At most 16,
	// each 1–256 bytes.
	ExcludeMarkers []string `json:"excludeMarkers,omitzero" jsonschema:"maxItems=16"`
	// Reason is the failure reason to record (e.g. quota_exhausted, auth_error).
	Reason string `json:"reason" jsonschema:"required"`
	// Scope is what the failure blames: provider, connection, quota (the model's quota
	// family), model or exact (provider+connection+model); unset = the status's own scope.
	Scope string `json:"scope,omitempty"`
	// CooldownMs is the declared base cooldown; unset = the layer's own backoff. Model
	// lockouts are still clamped to modelLockout.maxCooldownMs. Rejected outside 0–30 days.
	CooldownMs *int64 `json:"cooldownMs,omitempty" jsonschema:"minimum=0,maximum=2592000000"`
}

// StreamRecovery holds the stream watchdogs (guide §6).
type StreamRecovery struct {
	// ThroughputWatchdog aborts an attempt whose useful output is too slow.
	ThroughputWatchdog ThroughputWatchdog `json:"throughputWatchdog,omitzero"`
	// ContentStall ends an attempt whose stream sends no model output in time.
	ContentStall ContentStall `json:"contentStall,omitzero"`
	// FirstEvent bounds how long and how far Spillway holds a 200 event stream while it
	// looks for the stream's first event.
	FirstEvent FirstEvent `json:"firstEvent,omitzero"`
}

// FirstEvent bounds the hold of a 200 text/event-stream response: Spillway holds the
// response (nothing reaches the client yet) until its first event that carries content or
// an error — keep-alive comments and events without content do not count. An error there
// is a failed attempt like an HTTP error status, so the request can still fail over to the
// next target. Past either bound Spillway stops holding and passes the stream on as it
// comes.
type FirstEvent struct {
	// MaxBytes is the most response bytes held while looking for that event. Default
	// 65536; rejected outside 1024–1048576.
	MaxBytes *int `json:"maxBytes,omitempty" jsonschema:"minimum=1024,maximum=1048576"`
	// TimeoutMs is the longest the response is held while looking for that event. Default
	// 10 s; rejected outside 100 ms–5 min.
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"minimum=100,maximum=300000"`
}

// ThroughputWatchdog is resilienceSettings.streamRecovery.throughputWatchdog.
type ThroughputWatchdog struct {
	// Enabled turns the watchdog on. Default false.
	Enabled *bool `json:"enabled,omitempty"`
	// WindowMs is the rolling window the output rate is measured over. Default 30 s;
	// clamped to 1 s–10 min.
	WindowMs *int64 `json:"windowMs,omitempty"`
	// WarmupMs is the grace period before the first judgement. Default 10 s; clamped to
	// 0–10 min.
	WarmupMs *int64 `json:"warmupMs,omitempty"`
	// MinBytesPerSecond is the slowest acceptable output rate. Default 8; clamped to
	// 1–1 MiB.
	MinBytesPerSecond *int64 `json:"minBytesPerSecond,omitempty"`
	// MinOutputBytes is the minimum measurable output: a window with less useful output
	// than this is judged as slow whatever the rate (the least a window must carry is the
	// larger of this and minBytesPerSecond × the window). Default 64; clamped to 0–1 MiB.
	MinOutputBytes *int64 `json:"minOutputBytes,omitempty"`
}

// ContentStall is the content-stall watchdog (guide §2): a stream that went to the client
// and then sends no model output — text, a tool call, or a reasoning frame, each of which
// restarts the budget — for timeoutMs is ended with an error event; heartbeats, pings,
// usage and metadata do not count. The stall is recorded on the connection without cooling
// it unless resilience.connectionCooldown.streamStallCooldown is enabled.
type ContentStall struct {
	// Enabled turns it on. Default false.
	Enabled *bool `json:"enabled,omitempty"`
	// TimeoutMs is the longest a stream may go without model output. Default 2 min;
	// rejected outside 1 s–1 h.
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"minimum=1000,maximum=3600000"`
}

// TerminalRecheck re-checks connections in the terminal expired state (a revoked or invalid
// key: guide §2's EXPIRED_RETRY_MAX reached) with a cheap authenticated request, so a key
// that was fixed upstream comes back without an operator reset: GET /v1/models on the
// provider's cluster with the connection's credential (and anthropic-version for an
// anthropic provider). A 2xx clears the expired state, as a reset of that connection
// would; a 401 or 403 keeps it and doubles the wait before the next check of that
// connection (up to maxIntervalMs); any other answer, a timeout or no answer changes
// nothing. banned and credits_exhausted are never re-checked. Each connection is checked
// at most once per intervalMs, and at most maxPerTick checks start per second across every
// worker of the proxy. Off by default (the guide's terminal state stands until a reset).
type TerminalRecheck struct {
	// Enabled turns the re-check on. Default false.
	Enabled *bool `json:"enabled,omitempty"`
	// IntervalMs is how long after a connection became expired, and after each check, the
	// next check of that connection may start. Default 5 min; rejected outside 10 s–24 h.
	IntervalMs *int64 `json:"intervalMs,omitempty" jsonschema:"minimum=10000,maximum=86400000"`
	// MaxIntervalMs caps the wait after repeated 401/403 answers (intervalMs doubled per
	// refused check). Default 1 h, or intervalMs when that is longer; must be ≥ intervalMs;
	// rejected outside 10 s–24 h.
	MaxIntervalMs *int64 `json:"maxIntervalMs,omitempty" jsonschema:"minimum=10000,maximum=86400000"`
	// MaxPerTick is the most checks started per second (the filter's one-second tick),
	// counted across every worker of the Envoy process. Default 1; rejected outside 1–10.
	MaxPerTick *int `json:"maxPerTick,omitempty" jsonschema:"minimum=1,maximum=10"`
	// TimeoutMs bounds one check's request; no answer in time changes nothing. Default
	// 10 s; rejected outside 1 s–1 min.
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"minimum=1000,maximum=60000"`
}

// P2CLatency is resilienceSettings.p2cLatency.
type P2CLatency struct {
	// Weight is the most points latency and error rate add to a p2c candidate. 0 (default)
	// turns it off; clamped to 0–20.
	Weight *int `json:"weight,omitempty"`
}

// Routing is how Spillway recognises the requests it routes and hands the chosen provider
// to Envoy: for a request on a routed path it learns the requested model (from the body, or
// in header-routed mode from a request header), picks a target and sets the cluster header,
// which the Envoy route reads with cluster_header.
type Routing struct {
	// Mode is when Spillway picks a request's target, which decides what the proxy must
	// allow. body (the default) reads the model from the request body while it holds the
	// request headers: the proxy must set allow_on_headers_stop_iteration: true in the Wasm
	// filter's PluginConfig (Envoy >= 1.36), and every behaviour of the Resilience Guide is
	// kept. headers picks the target at the request headers, from modelHeader (else
	// defaultModel), and never holds them waiting for the body: for proxies that cannot set
	// the option, such as Istio's WasmPlugin and TrafficExtension. The body is still read
	// before it goes upstream (the target's model is written into it); a body naming a
	// model the chosen target does not serve is answered through a callout to a target of
	// its own model. Header mode decides a failed response from its status and headers
	// where body mode reads its error body or a stream's first event: it cannot fail over
	// from an error body's details, from an error event inside a 200 stream or from a
	// failure that arrives before the request body has, and it cannot restate a status by
	// a rule's text markers (README, "Header-routed mode", lists every difference).
	Mode RoutingMode `json:"mode,omitempty"`
	// ModelHeader is the request header that names the requested model in header mode
	// (mode: headers). It is removed before the request goes upstream. The same rules as
	// clusterHeader, and not the cluster header. Default x-spillway-request-model; not
	// read in body mode (a warning when set there).
	ModelHeader string `json:"modelHeader,omitempty" jsonschema:"minLength=1,maxLength=128"`
	// DefaultModel is the model header mode assumes for a request without modelHeader; a
	// route must serve it. Unset: such a request is answered 400 invalid_request. It suits
	// a catch-all route whose targets all name their model ('*' to one upstream model): a
	// body naming any model that route serves keeps the target, rewritten to the target's
	// model; a body for a model of another route is answered through a callout. On a route
	// with a target that passes the requested model on, every body naming another model
	// than defaultModel is answered through a callout (a warning). Not read in body mode
	// (a warning when set there).
	DefaultModel string `json:"defaultModel,omitempty" jsonschema:"maxLength=256"`
	// ClusterHeader, when set, makes Spillway name the chosen provider's cluster in this
	// request header, for proxies whose routes can only match a header: Istio's
	// VirtualServices (istio.Render sets it in the policy it renders, to x-spillway-cluster
	// unless the policy names another). Unset, Spillway names the cluster in filter state
	// (wasm.spillway_target), which the routes of the standalone Envoy bootstrap and of
	// hostsim serve read and which a client cannot write: whenever the filter is skipped
	// (failure_policy FAIL_OPEN after a VM failure) a request goes to the default cluster,
	// never to one a client names. render envoy, spillway xds and hostsim serve refuse a
	// policy that sets it. A value a client sent in this header (x-spillway-cluster when
	// unset) is always removed. An HTTP token of at most 128 characters,
	// stored lower-case; not a pseudo, hop-by-hop or framing header, not a credential
	// header (authorization, x-api-key, api-key, x-goog-api-key or any connection's
	// credential header), not a session header, not one of Spillway's response headers
	// and not in Envoy's reserved x-envoy- namespace.
	ClusterHeader string `json:"clusterHeader,omitempty" jsonschema:"minLength=1,maxLength=128"`
	// Paths are the LLM API paths Spillway routes, per API; a request on any other path
	// passes through untouched. Each is a canonical ASCII path (no '%', '\', empty, '.' or
	// '..' segments) and none is under admin.pathPrefix, in any case.
	Paths RoutingPaths `json:"paths,omitzero"`
	// BodyWaitMs is how long a held LLM request may wait for its first body chunk. The
	// proxy must deliver the body while the request headers are held (Envoy's
	// allow_on_headers_stop_iteration: true); when no chunk arrives in time Spillway
	// concludes the option is missing and answers 500 spillway_misconfigured instead of
	// hanging. Default 10 s; rejected outside 1 s–10 min. Header mode never holds a
	// request for its body, so it has no such wait.
	BodyWaitMs *int64 `json:"bodyWaitMs,omitempty" jsonschema:"minimum=1000,maximum=600000"`
}

// RoutingMode is when Spillway picks a request's target: from its body (body) or at its
// headers (headers).
type RoutingMode string

// The routing modes.
const (
	// RoutingModeBody reads the body's model with the request headers held (the proxy
	// must set allow_on_headers_stop_iteration).
	RoutingModeBody RoutingMode = "body"
	// RoutingModeHeaders picks the target at the request headers and never holds them
	// waiting for the body.
	RoutingModeHeaders RoutingMode = "headers"
)

// RoutingModes lists every routing mode, the default first.
var RoutingModes = []RoutingMode{RoutingModeBody, RoutingModeHeaders}

// RoutingPaths are the routed request paths of each API. A path matches the request's
// path exactly, its query string ignored (no prefix, case or trailing-slash matching).
// Each path starts with '/', has no query or fragment, is at most 256 bytes and is not
// under admin.pathPrefix; at most 32 per API. A path belongs to one API: it may not appear
// in both lists, nor in one list and the other's defaults when that list is unset. Setting
// one list keeps the other's defaults; an explicitly empty list ([]) means requests of
// that API are not routed (they pass through untouched).
type RoutingPaths struct {
	// OpenAI lists the paths of OpenAI-API requests. Default /v1/chat/completions,
	// /v1/completions, /v1/embeddings, /v1/responses.
	OpenAI []string `json:"openai,omitzero" jsonschema:"maxItems=32"`
	// Anthropic lists the paths of Anthropic-API requests. Default /v1/messages.
	Anthropic []string `json:"anthropic,omitzero" jsonschema:"maxItems=32"`
}

// Admin configures the admin API.
type Admin struct {
	// PathPrefix is where the admin API is served (OmniRoute's paths, such as
	// monitoring/health, under it; /api/ gives OmniRoute's exact paths); must start and end
	// with '/' and be a canonical ASCII path (no '%', '\', empty, '.' or '..' segments),
	// since a path that only canonicalises under it is answered 404. Default /spillway/api/.
	PathPrefix string `json:"pathPrefix,omitempty" jsonschema:"pattern=^/.*/$"`
	// Token is the bearer token the admin API requires (401 without one, 403 with another);
	// no whitespace or control characters. Unset or empty = admin API off: requests under
	// pathPrefix are ordinary requests and pass through. A request elsewhere that carries it
	// as a client credential is answered 404, never forwarded. Use ${SPILLWAY_ADMIN_TOKEN}.
	// Spillway never shows it: logs, errors and dumps print [redacted].
	Token Secret `json:"token,omitzero"`
}
