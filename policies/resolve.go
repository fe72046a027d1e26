package policies

import (
	"slices"
	"strings"
	"time"
)

// Resolved is a validated policy with every setting at its effective value: defaults from
// defaults.go applied per provider profile, per-connection overrides folded in, durations as
// time.Duration, ids indexed. The engine reads this and never re-implements a default.
// Build it once per configuration with Policy.Resolved and treat it as read-only.
type Resolved struct {
	// Providers in declaration order.
	Providers []ResolvedProvider
	// Routes in declaration order.
	Routes []ResolvedRoute
	// ProviderCooldownEnabled is the opt-in provider cooldown gate's switch (thresholds
	// are per provider, in ResolvedProvider.ProviderCooldown).
	ProviderCooldownEnabled bool
	// ModelLockout is the model lockout layer's settings.
	ModelLockout ModelLockoutSettings
	// RequestQueue holds the policy-wide queue settings, environment defaults
	// (RATE_LIMIT_*) applied (per-connection budgets, with overrides applied, are on
	// ResolvedConnection).
	RequestQueue RequestQueueSettings
	// QuotaShareConcurrencyLimitEnabled makes every connection's maxConcurrent fail-open
	// (guide §4): a request whose wait for a connection slot ends goes without one.
	QuotaShareConcurrencyLimitEnabled bool
	// ComboCooldownWait is the cooldown-aware combo retry.
	ComboCooldownWait ComboCooldownWaitSettings
	// Failover bounds same-request failover.
	Failover FailoverSettings
	// ThroughputWatchdog is the slow-stream watchdog.
	ThroughputWatchdog ThroughputWatchdogSettings
	// ContentStall is the content-stall watchdog.
	ContentStall ContentStallSettings
	// TerminalRecheck is the opt-in re-check of expired connections.
	TerminalRecheck TerminalRecheckSettings
	// P2CLatency is the p2c latency signal.
	P2CLatency P2CLatencySettings
	// SessionAffinityTTL pins sessions to connections; 0 = off.
	SessionAffinityTTL time.Duration
	// SessionAffinityHeaders are read for the session key and never forwarded.
	SessionAffinityHeaders []string
	// SessionAffinityRefreshInterval is how often, at most, a pin's last use is rewritten
	// in shared data.
	SessionAffinityRefreshInterval time.Duration
	// SessionAffinitySlots is the size of the shared pin table.
	SessionAffinitySlots int
	// Admin is the admin API.
	Admin AdminSettings
	// MaxRequestBodyBytes is the buffered request body limit (413 above it).
	MaxRequestBodyBytes int64
	// StateNamespace is the policy's stateNamespace ("" = the plugin's name and root id).
	StateNamespace string
	// Routing is which requests Spillway routes and the header that names their cluster.
	Routing RoutingSettings
	// FirstEvent bounds the hold of a 200 event stream before its first event.
	FirstEvent FirstEventSettings
	// QuotaResetTimeZone is where a daily quota resets when the provider announces no
	// reset: time.UTC or a fixed zone (time.FixedZone), never nil.
	QuotaResetTimeZone *time.Location

	providerByID map[string]int
	connByID     map[string]connRef
	exactRoutes  map[string]int
	globRoutes   []int
}

// ResolvedProvider is a provider with its profile's effective settings.
type ResolvedProvider struct {
	ID      string
	Profile Profile
	// API is the API the provider speaks; a request of another API skips it.
	API       API
	Cluster   string
	Authority string // "" = leave :authority alone
	// CountTruncatedStreams: a stream that ends without its terminal event is a failure
	// of the connection that served it.
	CountTruncatedStreams bool
	// Index is this provider's position in Resolved.Providers.
	Index       int
	Connections []ResolvedConnection
	// Breaker is the circuit breaker for this provider's profile.
	Breaker BreakerSettings
	// ProviderCooldown is the window gate for this provider's profile (used only when
	// Resolved.ProviderCooldownEnabled).
	ProviderCooldown ProviderCooldownSettings
	// ConnectionCooldown applies to each of this provider's connections.
	ConnectionCooldown ConnectionCooldownSettings
	// QuotaFamilies in the order they are tried.
	QuotaFamilies []QuotaFamily
	// StatusRestatement are this provider's restatement rules, in declaration order.
	StatusRestatement []RestatementSettings
	// ErrorRules are this provider's classification rules, in declaration order.
	ErrorRules []ErrorRuleSettings
}

// ResolvedConnection is a connection with its effective caps and queue budgets.
type ResolvedConnection struct {
	ID string
	// Provider is the index of the connection's provider in Resolved.Providers.
	Provider int
	// Index is the connection's position in its provider's Connections.
	Index int
	// CredentialHeader is the lower-case header name; "" = inject nothing.
	CredentialHeader string
	// CredentialValue is the header value; it prints as [redacted].
	CredentialValue Secret
	// MaxConcurrent caps requests in flight; 0 = no cap.
	MaxConcurrent int
	// ModelConcurrency caps requests in flight per upstream model; nil = none.
	ModelConcurrency map[string]int
	// Weight is the share for weighted strategies.
	Weight int
	// QueueMaxWait is the effective queue budget (default < RATE_LIMIT_MAX_WAIT_MS <
	// requestQueue < rateLimitOverrides).
	QueueMaxWait time.Duration
	// ExecutionMaxWait is the effective per-attempt execution cap.
	ExecutionMaxWait time.Duration
	// MaxQueueDepth caps waiting requests on this connection, across workers; 0 =
	// unbounded. Unset, it is DefaultMaxQueueDepth of the connection's caps.
	MaxQueueDepth int
}

// ModelConcurrencyCap returns the cap for an upstream model on this connection (0 = none).
func (c *ResolvedConnection) ModelConcurrencyCap(model string) int {
	return c.ModelConcurrency[model]
}

// BreakerSettings are one profile's circuit breaker settings.
type BreakerSettings struct {
	DegradationThreshold int
	FailureThreshold     int
	ResetTimeout         time.Duration
	// CooldownByKind overrides ResetTimeout by the last failure's kind; nil = none.
	CooldownByKind       map[string]time.Duration
	MaxBackoffMultiplier int
	RecoverySuccesses    int
	// ProbeTimeout frees a HALF_OPEN probe claim whose outcome never came.
	ProbeTimeout time.Duration
	// TripStatuses count against the breaker (transport failures always do).
	TripStatuses []int
}

// OpenPeriod is the base OPEN period after a failure of the given kind.
func (b *BreakerSettings) OpenPeriod(kind string) time.Duration {
	if d, ok := b.CooldownByKind[kind]; ok {
		return d
	}
	return b.ResetTimeout
}

// Trips reports whether an upstream status counts against the breaker.
func (b *BreakerSettings) Trips(status int) bool { return slices.Contains(b.TripStatuses, status) }

// ProviderCooldownSettings are one profile's window gate settings.
type ProviderCooldownSettings struct {
	FailureThreshold int
	FailureWindow    time.Duration
	Cooldown         time.Duration
	MinRetryCooldown time.Duration
	MaxRetryCooldown time.Duration
}

// ConnectionCooldownSettings are one profile's connection cooldown settings.
type ConnectionCooldownSettings struct {
	BaseCooldown          time.Duration
	MaxBackoffSteps       int
	MaxCooldown           time.Duration
	UseUpstreamRetryHints bool
	// StreamStallCooldown makes a content stall cool the connection.
	StreamStallCooldown      bool
	ConcurrencyLimitCooldown time.Duration
	ExpiredRetryMax          int
	RequestRejectedStreak    int
}

// ModelLockoutSettings are the model lockout settings.
type ModelLockoutSettings struct {
	Enabled               bool
	ErrorCodes            []int
	BaseCooldown          time.Duration
	MaxCooldown           time.Duration
	MaxBackoffSteps       int
	UseExponentialBackoff bool
	// LongRetryCap caps a lockout made from a long typed Google RetryInfo hint.
	LongRetryCap time.Duration
	// EscalationWindow is how long after a lockout ends a new failure still escalates
	// from the earlier failure count.
	EscalationWindow time.Duration
}

// CountsStatus reports whether an upstream status is a model-level failure.
func (m *ModelLockoutSettings) CountsStatus(status int) bool {
	return slices.Contains(m.ErrorCodes, status)
}

// RequestQueueSettings are the policy-wide queue settings.
type RequestQueueSettings struct {
	MaxWait          time.Duration
	ExecutionMaxWait time.Duration
	// MaxQueueDepth is the depth the policy or the environment sets (0 = unbounded), or
	// RequestQueueMaxDepthUnset: each ResolvedConnection.MaxQueueDepth is then the default
	// of its caps (DefaultMaxQueueDepth).
	MaxQueueDepth int
}

// ComboCooldownWaitSettings are the cooldown-aware combo retry settings.
type ComboCooldownWaitSettings struct {
	Enabled     bool
	MaxWait     time.Duration
	MaxAttempts int
	Budget      time.Duration
}

// FailoverSettings bound same-request failover.
type FailoverSettings struct {
	MaxAttempts int
	Budget      time.Duration
	// ViaRouter: failover attempts go as the router's retries through the upstream filter
	// where they can (see ViaRouter: Failover.Via router, or unset in body-routed mode).
	ViaRouter bool
	// HoldTries: the upstream instance holds a failed try to read its body (router only).
	HoldTries bool
	// CrossCluster: a retry may go to another cluster and model (router only).
	CrossCluster bool
}

// ViaRouter is the one place that decides how failover reaches its target: through the
// router (Failover.Via router) unless the policy says callout or routes by header
// (routing.mode: headers, where the target is picked before the body is read, so a try
// has nothing to replay: validate refuses router there). An unset via is router in
// body-routed mode: failover that streams is the default, and a deployment without the
// upstream filter is caught by the filter's unlinked detector, which fails over by callout
// (README, "Failover that keeps streaming"). The generators write the upstream filter for
// it and say the path in the policy they render (policies/envoyrelease.Settle).
func ViaRouter(via FailoverVia, mode RoutingMode) bool {
	switch via {
	case FailoverViaRouter:
		return true
	case FailoverViaCallout:
		return false
	}
	return mode != RoutingModeHeaders
}

// ThroughputWatchdogSettings are the slow-stream watchdog settings.
type ThroughputWatchdogSettings struct {
	Enabled           bool
	Window            time.Duration
	Warmup            time.Duration
	MinBytesPerSecond int64
	MinOutputBytes    int64
}

// ContentStallSettings are the content-stall watchdog settings.
type ContentStallSettings struct {
	Enabled bool
	Timeout time.Duration // the longest a stream may go without model output
}

// TerminalRecheckSettings are the re-check settings of expired connections.
type TerminalRecheckSettings struct {
	Enabled     bool
	Interval    time.Duration // between checks of one connection (and from its expiry)
	MaxInterval time.Duration // cap of the doubled interval after refused checks
	MaxPerTick  int           // checks started per Tick, process-wide
	Tick        time.Duration // the round MaxPerTick counts in (not configurable)
	Timeout     time.Duration // one check's request timeout
}

// P2CLatencySettings are the p2c latency signal settings (only Weight is configurable).
type P2CLatencySettings struct {
	Weight     int // 0 = off
	Samples    int
	Window     time.Duration
	MinSamples int
}

// RoutingSettings are the routing settings.
type RoutingSettings struct {
	// ClusterHeader is the lower-case request header that names the cluster: the policy's
	// routing.clusterHeader, else RoutingClusterHeader. A client's value of it is removed;
	// Spillway sets it only when ClusterByHeader.
	ClusterHeader string
	// ClusterByHeader reports that the policy sets routing.clusterHeader: Spillway names
	// the chosen cluster in ClusterHeader (for Istio's VirtualServices, which match a
	// header) instead of in filter state (routerretry.TargetProperty, which the standalone
	// bootstrap's and hostsim serve's routes read).
	ClusterByHeader bool
	// Paths maps each routed request path to the API its requests speak. Use APIOf to
	// look up a request's :path, which may carry a query string.
	Paths map[string]API
	// BodyWait is how long a held request may wait for its first body chunk before
	// Spillway answers 500 spillway_misconfigured.
	BodyWait time.Duration
	// Mode is when the target is picked: RoutingModeBody or RoutingModeHeaders.
	Mode RoutingMode
	// ModelHeader is the lower-case request header naming the model in header mode; ""
	// in body mode, which reads no such header.
	ModelHeader string
	// DefaultModel is the model header mode assumes when ModelHeader is absent ("" =
	// none: such a request is answered 400); "" in body mode.
	DefaultModel string
}

// HeaderRouted reports header-routed mode: the target is picked at the request headers.
func (r *RoutingSettings) HeaderRouted() bool { return r.Mode == RoutingModeHeaders }

// APIOf returns the API of a request's :path, its query string (and any fragment)
// ignored; ok is false for a path Spillway does not route. It does not allocate.
func (r *RoutingSettings) APIOf(path string) (api API, ok bool) {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	api, ok = r.Paths[path]
	return api, ok
}

// FirstEventSettings bound the hold of a 200 text/event-stream response while Spillway
// looks for its first event that carries content or an error.
type FirstEventSettings struct {
	// MaxBytes is the most response bytes held.
	MaxBytes int
	// Timeout is the longest the response is held.
	Timeout time.Duration
}

// AdminSettings are the admin API settings.
type AdminSettings struct {
	// Enabled is false when no token is configured: the admin API is off and requests
	// under PathPrefix pass through.
	Enabled    bool
	PathPrefix string
	Token      Secret
}

// QuotaFamily maps model names matching Glob to Family.
type QuotaFamily struct {
	Glob   Glob
	Family string
}

// RestatementSettings is one status restatement rule (matched by plugin/internal/restate:
// markers are ASCII case-insensitive substrings).
type RestatementSettings struct {
	ID                string
	Provider          string
	FromStatuses      []int
	ToStatus          int
	TextMarkers       []string
	ExcludeMarkers    []string
	DefaultRetryAfter time.Duration
}

// ErrorRuleSettings is one provider error rule (matched by plugin/internal/errorrules).
type ErrorRuleSettings struct {
	ID             string
	Provider       string
	Status         int // 0 = any error status
	TextMarkers    []string
	ExcludeMarkers []string
	Reason         string
	Scope          string // "" = the status's own scope
	// Cooldown is the declared base cooldown, when HasCooldown.
	Cooldown    time.Duration
	HasCooldown bool
}

// ResolvedRoute is a route with its compiled model matcher.
type ResolvedRoute struct {
	Model    string
	Glob     Glob
	IsGlob   bool
	Strategy Strategy
	Targets  []ResolvedTarget
}

// ResolvedTarget is a route target with indexes into Resolved.
type ResolvedTarget struct {
	// Provider is the index in Resolved.Providers.
	Provider   int
	ProviderID string
	// Connection is the index in the provider's Connections, or -1 for any.
	Connection   int
	ConnectionID string
	// Model is the upstream model; "" = the requested model.
	Model  string
	Weight int
}

// UpstreamModel returns the model to send upstream for a requested model.
func (t *ResolvedTarget) UpstreamModel(requested string) string {
	if t.Model == "" {
		return requested
	}
	return t.Model
}

// Route returns the route serving a requested model: the exact route if any, otherwise the
// first glob route (declaration order) that matches. It does not allocate.
func (r *Resolved) Route(model string) (*ResolvedRoute, bool) {
	if i, ok := r.exactRoutes[model]; ok {
		return &r.Routes[i], true
	}
	for _, i := range r.globRoutes {
		if r.Routes[i].Glob.Match(model) {
			return &r.Routes[i], true
		}
	}
	return nil, false
}

// Provider returns a provider by id.
func (r *Resolved) Provider(id string) (*ResolvedProvider, bool) {
	i, ok := r.providerByID[id]
	if !ok {
		return nil, false
	}
	return &r.Providers[i], true
}

// Connection returns a connection (and its provider) by connection id.
func (r *Resolved) Connection(id string) (*ResolvedProvider, *ResolvedConnection, bool) {
	ref, ok := r.connByID[id]
	if !ok {
		return nil, nil, false
	}
	p := &r.Providers[ref.provider]
	return p, &p.Connections[ref.index], true
}

// QuotaFamily returns the quota family of a model on this provider: the family of the first
// matching glob, or the model itself.
func (p *ResolvedProvider) QuotaFamily(model string) string {
	for i := range p.QuotaFamilies {
		if p.QuotaFamilies[i].Glob.Match(model) {
			return p.QuotaFamilies[i].Family
		}
	}
	return model
}

// Resolved computes the effective settings of a validated policy (see Parse and Validate;
// the result of an invalid policy is unspecified). Call it once per configuration.
func (p *Policy) Resolved() *Resolved {
	res := &Resolved{
		providerByID: make(map[string]int, len(p.Providers)),
		connByID:     make(map[string]connRef),
		exactRoutes:  make(map[string]int),
	}
	rs := &p.Resilience

	res.ProviderCooldownEnabled = boolOr(rs.ProviderCooldown.Enabled, ProviderCooldownEnabled)
	res.ModelLockout = resolveModelLockout(&rs.ModelLockout)
	env := &p.envQueue
	res.RequestQueue = RequestQueueSettings{
		MaxWait:          msOr(rs.RequestQueue.MaxWaitMs, msOr(env.MaxWaitMs, RequestQueueMaxWait)),
		ExecutionMaxWait: msOr(rs.RequestQueue.ExecutionMaxWaitMs, msOr(env.ExecutionMaxWaitMs, RequestQueueExecutionMaxWait)),
		MaxQueueDepth:    intOr(rs.RequestQueue.MaxQueueDepth, intOr(env.MaxQueueDepth, RequestQueueMaxDepthUnset)),
	}
	res.QuotaShareConcurrencyLimitEnabled = boolOr(rs.QuotaShareConcurrencyLimit.Enabled, QuotaShareConcurrencyLimitEnabled)
	res.ComboCooldownWait = ComboCooldownWaitSettings{
		Enabled:     boolOr(rs.ComboCooldownWait.Enabled, ComboCooldownWaitEnabled),
		MaxWait:     msOr(rs.ComboCooldownWait.MaxWaitMs, ComboCooldownWaitMaxWait),
		MaxAttempts: intOr(rs.ComboCooldownWait.MaxAttempts, ComboCooldownWaitMaxAttempts),
		Budget:      msOr(rs.ComboCooldownWait.BudgetMs, ComboCooldownWaitBudget),
	}
	res.Failover = FailoverSettings{
		MaxAttempts: intOr(rs.Failover.MaxAttempts, FailoverMaxAttempts),
		Budget:      msOr(rs.Failover.BudgetMs, FailoverBudget),
		ViaRouter:   ViaRouter(rs.Failover.Via, p.Routing.Mode),
	}
	res.Failover.HoldTries = res.Failover.ViaRouter && boolOr(rs.Failover.HoldTries, false)
	res.Failover.CrossCluster = res.Failover.ViaRouter && boolOr(rs.Failover.CrossCluster, false)
	w := &rs.StreamRecovery.ThroughputWatchdog
	res.ThroughputWatchdog = ThroughputWatchdogSettings{
		Enabled:           boolOr(w.Enabled, ThroughputWatchdogEnabled),
		Window:            msOr(w.WindowMs, ThroughputWatchdogWindow),
		Warmup:            msOr(w.WarmupMs, ThroughputWatchdogWarmup),
		MinBytesPerSecond: int64Or(w.MinBytesPerSecond, ThroughputWatchdogMinBytesPerSec),
		MinOutputBytes:    int64Or(w.MinOutputBytes, ThroughputWatchdogMinOutput),
	}
	cs := &rs.StreamRecovery.ContentStall
	res.ContentStall = ContentStallSettings{
		Enabled: boolOr(cs.Enabled, ContentStallEnabled),
		Timeout: msOr(cs.TimeoutMs, ContentStallTimeout),
	}
	tr := &rs.TerminalRecheck
	res.TerminalRecheck = TerminalRecheckSettings{
		Enabled:     boolOr(tr.Enabled, TerminalRecheckEnabled),
		Interval:    msOr(tr.IntervalMs, TerminalRecheckInterval),
		MaxInterval: max(msOr(tr.MaxIntervalMs, TerminalRecheckMaxInterval), msOr(tr.IntervalMs, TerminalRecheckInterval)),
		MaxPerTick:  intOr(tr.MaxPerTick, TerminalRecheckMaxPerTick),
		Tick:        TerminalRecheckTick,
		Timeout:     msOr(tr.TimeoutMs, TerminalRecheckTimeout),
	}
	res.P2CLatency = P2CLatencySettings{
		Weight:     intOr(rs.P2CLatency.Weight, P2CLatencyWeight),
		Samples:    P2CLatencySamples,
		Window:     P2CLatencyWindow,
		MinSamples: P2CLatencyMinSamples,
	}
	res.SessionAffinityTTL = msOr(rs.SessionAffinityTtlMs, SessionAffinityTTL)
	res.SessionAffinityHeaders = slices.Clone(SessionAffinityHeaders)
	res.SessionAffinityRefreshInterval = SessionAffinityRefreshInterval
	res.SessionAffinitySlots = SessionAffinitySlots
	res.Admin = AdminSettings{
		Enabled:    !p.Admin.Token.IsZero(),
		PathPrefix: stringOr(p.Admin.PathPrefix, AdminPathPrefix),
		Token:      p.Admin.Token,
	}
	res.MaxRequestBodyBytes = int64Or(p.MaxRequestBodyBytes, MaxRequestBodyBytes)
	res.StateNamespace = p.StateNamespace
	res.Routing = resolveRouting(&p.Routing)
	fe := &rs.StreamRecovery.FirstEvent
	res.FirstEvent = FirstEventSettings{
		MaxBytes: intOr(fe.MaxBytes, FirstEventMaxBytes),
		Timeout:  msOr(fe.TimeoutMs, FirstEventTimeout),
	}
	res.QuotaResetTimeZone = time.UTC
	if zone, err := parseFixedZone(stringOr(rs.QuotaResetTimeZone, QuotaResetTimeZone)); err == nil {
		res.QuotaResetTimeZone = zone // validated; an invalid zone stays UTC
	}

	for i := range p.Providers {
		res.Providers = append(res.Providers, res.resolveProvider(p, i, res.RequestQueue))
	}
	for i := range p.Routes {
		res.Routes = append(res.Routes, res.resolveRoute(&p.Routes[i]))
		route := &res.Routes[i]
		if route.IsGlob {
			res.globRoutes = append(res.globRoutes, i)
		} else if _, dup := res.exactRoutes[route.Model]; !dup {
			res.exactRoutes[route.Model] = i
		}
	}
	return res
}

func (res *Resolved) resolveProvider(p *Policy, index int, queue RequestQueueSettings) ResolvedProvider {
	pr := &p.Providers[index]
	rs := &p.Resilience
	profile := pr.Profile
	if profile == "" {
		profile = ProfileAPIKey
	}
	out := ResolvedProvider{
		ID:                    pr.ID,
		Profile:               profile,
		API:                   providerAPI(pr),
		Cluster:               pr.Cluster,
		Authority:             pr.Authority,
		CountTruncatedStreams: boolOr(pr.CountTruncatedStreams, CountTruncatedStreams),
		Index:                 index,
		Breaker:               resolveBreaker(&rs.ProviderBreaker, profile),
		ProviderCooldown:      resolveProviderCooldown(&rs.ProviderCooldown, profile),
		ConnectionCooldown:    resolveConnectionCooldown(&rs.ConnectionCooldown, profile),
	}
	if _, dup := res.providerByID[pr.ID]; !dup {
		res.providerByID[pr.ID] = index
	}
	for _, glob := range sortedKeys(pr.QuotaFamilies) {
		if g, err := CompileGlob(glob); err == nil {
			out.QuotaFamilies = append(out.QuotaFamilies, QuotaFamily{Glob: g, Family: pr.QuotaFamilies[glob]})
		}
	}
	queueWait, execWait := queue.MaxWait, queue.ExecutionMaxWait
	for ci := range pr.Connections {
		c := &pr.Connections[ci]
		rc := ResolvedConnection{
			ID:               c.ID,
			Provider:         index,
			Index:            ci,
			MaxConcurrent:    intOr(c.MaxConcurrent, 0),
			Weight:           intOr(c.Weight, 1),
			QueueMaxWait:     queueWait,
			ExecutionMaxWait: execWait,
			MaxQueueDepth:    queue.MaxQueueDepth,
		}
		if c.Credential != nil {
			rc.CredentialHeader = c.Credential.Header
			rc.CredentialValue = c.Credential.Value
		}
		if len(c.ModelConcurrency) > 0 {
			rc.ModelConcurrency = make(map[string]int, len(c.ModelConcurrency))
			for m, n := range c.ModelConcurrency {
				rc.ModelConcurrency[m] = n
			}
		}
		if rc.MaxQueueDepth == RequestQueueMaxDepthUnset {
			rc.MaxQueueDepth = DefaultMaxQueueDepth(rc.MaxConcurrent, rc.ModelConcurrency)
		}
		if o := c.RateLimitOverrides; o != nil {
			rc.QueueMaxWait = msOr(o.MaxWaitMs, queueWait)
			rc.ExecutionMaxWait = msOr(o.ExecutionMaxWaitMs, execWait)
		}
		if _, dup := res.connByID[c.ID]; !dup {
			res.connByID[c.ID] = connRef{provider: index, index: ci}
		}
		out.Connections = append(out.Connections, rc)
	}
	for i := range rs.StatusRestatement {
		r := &rs.StatusRestatement[i]
		if r.Provider != pr.ID {
			continue
		}
		out.StatusRestatement = append(out.StatusRestatement, RestatementSettings{
			ID:                r.ID,
			Provider:          r.Provider,
			FromStatuses:      slices.Clone(r.FromStatuses),
			ToStatus:          r.ToStatus,
			TextMarkers:       slices.Clone(r.TextMarkers),
			ExcludeMarkers:    slices.Clone(r.ExcludeMarkers),
			DefaultRetryAfter: msOr(r.DefaultRetryAfterMs, RestatementDefaultRetryAfter),
		})
	}
	for i := range rs.ProviderErrorRules {
		r := &rs.ProviderErrorRules[i]
		if r.Provider != pr.ID {
			continue
		}
		out.ErrorRules = append(out.ErrorRules, ErrorRuleSettings{
			ID:             r.ID,
			Provider:       r.Provider,
			Status:         intOr(r.Status, 0),
			TextMarkers:    slices.Clone(r.TextMarkers),
			ExcludeMarkers: slices.Clone(r.ExcludeMarkers),
			Reason:         r.Reason,
			Scope:          r.Scope,
			Cooldown:       msOr(r.CooldownMs, 0),
			HasCooldown:    r.CooldownMs != nil,
		})
	}
	return out
}

func (res *Resolved) resolveRoute(r *Route) ResolvedRoute {
	out := ResolvedRoute{Model: r.Model, Strategy: r.Strategy, IsGlob: IsGlob(r.Model)}
	if out.Strategy == "" {
		out.Strategy = StrategyPriority
	}
	if out.IsGlob {
		out.Glob, _ = CompileGlob(r.Model) // validated; an invalid glob matches nothing
	}
	for _, t := range r.Targets {
		rt := ResolvedTarget{
			Provider:     -1,
			ProviderID:   t.Provider,
			Connection:   -1,
			ConnectionID: t.Connection,
			Model:        t.Model,
			Weight:       intOr(t.Weight, 1),
		}
		if i, ok := res.providerByID[t.Provider]; ok {
			rt.Provider = i
		}
		if ref, ok := res.connByID[t.Connection]; ok && t.Connection != "" {
			rt.Connection = ref.index
		}
		out.Targets = append(out.Targets, rt)
	}
	return out
}

func resolveRouting(r *Routing) RoutingSettings {
	out := RoutingSettings{
		ClusterHeader:   stringOr(r.ClusterHeader, RoutingClusterHeader),
		ClusterByHeader: r.ClusterHeader != "",
		Paths:           make(map[string]API),
		BodyWait:        msOr(r.BodyWaitMs, RoutingBodyWait),
		Mode:            RoutingModeBody,
	}
	if r.Mode == RoutingModeHeaders {
		out.Mode = RoutingModeHeaders
		out.ModelHeader = stringOr(r.ModelHeader, RoutingModelHeader)
		out.DefaultModel = r.DefaultModel
	}
	for _, api := range APIs {
		paths := r.Paths.forAPI(api)
		if paths == nil {
			paths = RoutingDefaultPaths[api]
		}
		for _, p := range paths {
			if _, dup := out.Paths[p]; !dup { // validated unique; the first wins otherwise
				out.Paths[p] = api
			}
		}
	}
	return out
}

// profile returns the block's settings for one profile.
func (b *ProviderBreaker) profile(p Profile) *BreakerProfile {
	switch p {
	case ProfileOAuth:
		return &b.OAuth
	case ProfileLocal:
		return &b.Local
	}
	return &b.APIKey
}

func (c *ProviderCooldown) profile(p Profile) *ProviderCooldownProfile {
	switch p {
	case ProfileOAuth:
		return &c.OAuth
	case ProfileLocal:
		return &c.Local
	}
	return &c.APIKey
}

func (c *ConnectionCooldown) profile(p Profile) *ConnectionCooldownProfile {
	switch p {
	case ProfileOAuth:
		return &c.OAuth
	case ProfileLocal:
		return &c.Local
	}
	return &c.APIKey
}

// profileRow returns a profile's row of the defaults table (the apikey row for an unknown
// profile, which validation has rejected).
func profileRow(p Profile) ProfileSettings {
	if d, ok := ProfileDefaults(p); ok {
		return d
	}
	d, _ := ProfileDefaults(ProfileAPIKey)
	return d
}

func resolveBreaker(b *ProviderBreaker, p Profile) BreakerSettings {
	out := profileRow(p).Breaker
	bp := b.profile(p)
	out.FailureThreshold = intOr(bp.FailureThreshold, out.FailureThreshold)
	if bp.DegradationThreshold != nil {
		out.DegradationThreshold = *bp.DegradationThreshold
	} else if out.DegradationThreshold > out.FailureThreshold {
		// A lowered failure threshold drags the default degradation threshold with it.
		out.DegradationThreshold = out.FailureThreshold
	}
	out.ResetTimeout = msOr(bp.ResetTimeoutMs, out.ResetTimeout)
	if len(bp.CooldownByKind) > 0 {
		out.CooldownByKind = make(map[string]time.Duration, len(bp.CooldownByKind))
		for k, ms := range bp.CooldownByKind {
			out.CooldownByKind[k] = time.Duration(ms) * time.Millisecond
		}
	}
	out.MaxBackoffMultiplier = intOr(bp.MaxBackoffMultiplier, out.MaxBackoffMultiplier)
	out.RecoverySuccesses = intOr(bp.RecoverySuccesses, out.RecoverySuccesses)
	if b.TripStatuses != nil {
		out.TripStatuses = b.TripStatuses
	}
	out.TripStatuses = slices.Clone(out.TripStatuses)
	return out
}

func resolveProviderCooldown(c *ProviderCooldown, p Profile) ProviderCooldownSettings {
	out := profileRow(p).ProviderCooldown
	cp := c.profile(p)
	out.FailureThreshold = intOr(cp.ProviderFailureThreshold, out.FailureThreshold)
	out.FailureWindow = msOr(cp.ProviderFailureWindowMs, out.FailureWindow)
	out.Cooldown = msOr(cp.ProviderCooldownMs, out.Cooldown)
	out.MinRetryCooldown = msOr(cp.MinRetryCooldownMs, out.MinRetryCooldown)
	out.MaxRetryCooldown = msOr(cp.MaxRetryCooldownMs, out.MaxRetryCooldown)
	return out
}

func resolveConnectionCooldown(c *ConnectionCooldown, p Profile) ConnectionCooldownSettings {
	out := profileRow(p).ConnectionCooldown
	cp := c.profile(p)
	out.BaseCooldown = msOr(cp.BaseCooldownMs, out.BaseCooldown)
	out.MaxBackoffSteps = intOr(cp.MaxBackoffSteps, out.MaxBackoffSteps)
	out.MaxCooldown = msOr(cp.MaxCooldownMs, out.MaxCooldown)
	out.UseUpstreamRetryHints = boolOr(cp.UseUpstreamRetryHints, out.UseUpstreamRetryHints)
	out.StreamStallCooldown = boolOr(c.StreamStallCooldown.Enabled, out.StreamStallCooldown)
	out.ConcurrencyLimitCooldown = msOr(c.ConcurrencyLimitCooldownMs, out.ConcurrencyLimitCooldown)
	out.ExpiredRetryMax = intOr(c.ExpiredRetryMax, out.ExpiredRetryMax)
	out.RequestRejectedStreak = intOr(c.RequestRejectedStreak, out.RequestRejectedStreak)
	return out
}

func resolveModelLockout(m *ModelLockout) ModelLockoutSettings {
	codes := ModelLockoutErrorCodes
	if m.ErrorCodes != nil {
		codes = m.ErrorCodes
	}
	return ModelLockoutSettings{
		Enabled:               boolOr(m.Enabled, ModelLockoutEnabled),
		ErrorCodes:            slices.Clone(codes),
		BaseCooldown:          msOr(m.BaseCooldownMs, ModelLockoutBaseCooldown),
		MaxCooldown:           msOr(m.MaxCooldownMs, ModelLockoutMaxCooldown),
		MaxBackoffSteps:       intOr(m.MaxBackoffSteps, ModelLockoutMaxBackoffSteps),
		UseExponentialBackoff: boolOr(m.UseExponentialBackoff, ModelLockoutUseExponentialBackoff),
		LongRetryCap:          ModelLockoutLongRetryCap,
		EscalationWindow:      ModelLockoutEscalationWindow,
	}
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func int64Or(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

func msOr(p *int64, def time.Duration) time.Duration {
	if p == nil {
		return def
	}
	return time.Duration(*p) * time.Millisecond
}

func stringOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
