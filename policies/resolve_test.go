package policies

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// threeProfiles has one provider per profile and no resilience settings.
const threeProfiles = `{"providers":[
 {"id":"sub","profile":"oauth","cluster":"c1","connections":[{"id":"sub-a"}]},
 {"id":"key","profile":"apikey","cluster":"c2","connections":[{"id":"key-a"}]},
 {"id":"loc","profile":"local","cluster":"c3","connections":[{"id":"loc-a"}]},
 {"id":"dflt","cluster":"c4","connections":[{"id":"dflt-a"}]}],
 "routes":[{"model":"m","targets":[{"provider":"sub"}]}]%s}`

func resolveThree(t *testing.T, resilience string) *Resolved {
	t.Helper()
	extra := ""
	if resilience != "" {
		extra = `,"resilience":` + resilience
	}
	return mustParse(t, fmt.Sprintf(threeProfiles, extra), ParseOptions{}).Resolved()
}

func TestDefaultsPerProfile(t *testing.T) {
	r := resolveThree(t, "")
	tests := []struct {
		provider string                     // provider id
		breaker  BreakerSettings            // expected breaker (guide §1)
		window   ProviderCooldownSettings   // expected provider cooldown gate
		conn     ConnectionCooldownSettings // expected connection cooldown (guide §2)
	}{
		{"sub",
			BreakerSettings{5, 8, 60 * time.Second, nil, BreakerMaxBackoffMultiplier, BreakerRecoverySuccesses, BreakerProbeTimeout, []int{408, 500, 502, 503, 504}},
			ProviderCooldownSettings{10, 15 * time.Minute, 5 * time.Minute, ProviderCooldownMinRetryCooldown, ProviderCooldownMaxRetryCooldown},
			ConnectionCooldownSettings{5 * time.Second, ConnectionCooldownMaxBackoffSteps, ConnectionCooldownMax, false, false, time.Second, 3, 3}},
		{"key",
			BreakerSettings{7, 12, 30 * time.Second, nil, BreakerMaxBackoffMultiplier, BreakerRecoverySuccesses, BreakerProbeTimeout, []int{408, 500, 502, 503, 504}},
			ProviderCooldownSettings{15, 30 * time.Minute, 10 * time.Minute, ProviderCooldownMinRetryCooldown, ProviderCooldownMaxRetryCooldown},
			ConnectionCooldownSettings{3 * time.Second, ConnectionCooldownMaxBackoffSteps, ConnectionCooldownMax, true, false, time.Second, 3, 3}},
		{"loc",
			BreakerSettings{1, 2, 15 * time.Second, nil, BreakerMaxBackoffMultiplier, BreakerRecoverySuccesses, BreakerProbeTimeout, []int{408, 500, 502, 503, 504}},
			ProviderCooldownSettings{2, 5 * time.Minute, time.Minute, ProviderCooldownMinRetryCooldown, ProviderCooldownMaxRetryCooldown},
			ConnectionCooldownSettings{ConnectionCooldownLocalBase, ConnectionCooldownMaxBackoffSteps, ConnectionCooldownMax, true, false, time.Second, 3, 3}},
		{"dflt", // no profile = apikey
			BreakerSettings{7, 12, 30 * time.Second, nil, BreakerMaxBackoffMultiplier, BreakerRecoverySuccesses, BreakerProbeTimeout, []int{408, 500, 502, 503, 504}},
			ProviderCooldownSettings{15, 30 * time.Minute, 10 * time.Minute, ProviderCooldownMinRetryCooldown, ProviderCooldownMaxRetryCooldown},
			ConnectionCooldownSettings{3 * time.Second, ConnectionCooldownMaxBackoffSteps, ConnectionCooldownMax, true, false, time.Second, 3, 3}},
	}
	for _, tt := range tests {
		p, ok := r.Provider(tt.provider)
		if !ok {
			t.Fatalf("no provider %s", tt.provider)
		}
		if !reflect.DeepEqual(p.Breaker, tt.breaker) {
			t.Errorf("%s breaker = %+v, want %+v", tt.provider, p.Breaker, tt.breaker)
		}
		if p.ProviderCooldown != tt.window {
			t.Errorf("%s provider cooldown = %+v, want %+v", tt.provider, p.ProviderCooldown, tt.window)
		}
		if p.ConnectionCooldown != tt.conn {
			t.Errorf("%s connection cooldown = %+v, want %+v", tt.provider, p.ConnectionCooldown, tt.conn)
		}
	}
	if p, _ := r.Provider("dflt"); p.Profile != ProfileAPIKey {
		t.Errorf("default profile = %q, want apikey", p.Profile)
	}
}

func TestPolicyWideDefaults(t *testing.T) {
	r := resolveThree(t, "")
	checks := []struct {
		name      string // setting
		got, want any    // effective and guide value
	}{
		{"provider cooldown off", r.ProviderCooldownEnabled, false},
		{"quota-share fail-open off", r.QuotaShareConcurrencyLimitEnabled, false},
		{"lockout", r.ModelLockout, ModelLockoutSettings{false, []int{403, 404, 429, 502, 503, 504}, 120 * time.Second, 30 * time.Minute, 10, true, 24 * time.Hour, 30 * time.Minute}},
		// No depth set: each connection gets the default of its caps (below).
		{"queue", r.RequestQueue, RequestQueueSettings{30 * time.Second, 10 * time.Minute, RequestQueueMaxDepthUnset}},
		{"combo wait", r.ComboCooldownWait, ComboCooldownWaitSettings{ComboCooldownWaitEnabled, ComboCooldownWaitMaxWait, ComboCooldownWaitMaxAttempts, ComboCooldownWaitBudget}},
		// Failover that streams is the default (design.md §4, decided in turn 3): an unset via
		// goes through the router in body-routed mode.
		{"failover", r.Failover, FailoverSettings{MaxAttempts: FailoverMaxAttempts, Budget: FailoverBudget, ViaRouter: true}},
		{"watchdog", r.ThroughputWatchdog, ThroughputWatchdogSettings{false, ThroughputWatchdogWindow, ThroughputWatchdogWarmup, ThroughputWatchdogMinBytesPerSec, ThroughputWatchdogMinOutput}},
		{"content stall", r.ContentStall, ContentStallSettings{false, 2 * time.Minute}},
		{"p2c", r.P2CLatency, P2CLatencySettings{0, 20, 15 * time.Minute, 3}},
		{"affinity off", r.SessionAffinityTTL, time.Duration(0)},
		{"affinity headers", r.SessionAffinityHeaders, []string{"x-session-id", "x-codex-session-id", "x-omniroute-session"}},
		{"admin", r.Admin, AdminSettings{false, "/spillway/api/", Secret{}}},
		{"body limit", r.MaxRequestBodyBytes, int64(8 << 20)},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
	}
	_, conn, _ := r.Connection("key-a")
	// Spillway's default depth, max(64, 8 × the cap): 64 for a connection without a cap.
	want := ResolvedConnection{ID: "key-a", Provider: 1, Index: 0, Weight: 1,
		QueueMaxWait: 30 * time.Second, ExecutionMaxWait: 10 * time.Minute, MaxQueueDepth: 64}
	if !reflect.DeepEqual(*conn, want) {
		t.Errorf("connection = %+v, want %+v", *conn, want)
	}
}

func TestOverridesPerProfile(t *testing.T) {
	r := resolveThree(t, `{
	 "providerBreaker":{"oauth":{"failureThreshold":3,"cooldownByKind":{"timeout":5000}},"local":{"resetTimeoutMs":2000},"tripStatuses":[503]},
	 "providerCooldown":{"enabled":true,"apikey":{"providerFailureThreshold":4,"maxRetryCooldownMs":9000}},
	 "connectionCooldown":{"oauth":{"baseCooldownMs":1,"useUpstreamRetryHints":true},"streamStallCooldown":{"enabled":true},"expiredRetryMax":1},
	 "quotaShareConcurrencyLimit":{"enabled":true}}`)
	sub, _ := r.Provider("sub")
	if sub.Breaker.FailureThreshold != 3 || sub.Breaker.DegradationThreshold != 3 {
		t.Errorf("oauth thresholds = %d/%d, want degradation dragged down to 3/3", sub.Breaker.DegradationThreshold, sub.Breaker.FailureThreshold)
	}
	if got := sub.Breaker.OpenPeriod("timeout"); got != 5*time.Second {
		t.Errorf("oauth timeout open period = %v", got)
	}
	if got := sub.Breaker.OpenPeriod("server_error"); got != 60*time.Second {
		t.Errorf("oauth server_error open period = %v, want the reset timeout", got)
	}
	if !sub.Breaker.Trips(503) || sub.Breaker.Trips(500) {
		t.Errorf("trip statuses = %v, want only 503", sub.Breaker.TripStatuses)
	}
	if sub.ConnectionCooldown.BaseCooldown != time.Millisecond || !sub.ConnectionCooldown.UseUpstreamRetryHints {
		t.Errorf("oauth connection cooldown = %+v", sub.ConnectionCooldown)
	}
	key, _ := r.Provider("key")
	if key.Breaker.FailureThreshold != 12 || key.Breaker.DegradationThreshold != 7 {
		t.Error("apikey breaker changed by an oauth override")
	}
	if key.ProviderCooldown.FailureThreshold != 4 || key.ProviderCooldown.MaxRetryCooldown != 9*time.Second ||
		key.ProviderCooldown.FailureWindow != 30*time.Minute {
		t.Errorf("apikey window gate = %+v", key.ProviderCooldown)
	}
	if !r.ProviderCooldownEnabled {
		t.Error("provider cooldown not enabled")
	}
	if !r.QuotaShareConcurrencyLimitEnabled {
		t.Error("quota-share fail-open not enabled")
	}
	if !key.ConnectionCooldown.StreamStallCooldown || key.ConnectionCooldown.ExpiredRetryMax != 1 {
		t.Errorf("policy-wide connection settings not applied: %+v", key.ConnectionCooldown)
	}
	loc, _ := r.Provider("loc")
	if loc.Breaker.ResetTimeout != 2*time.Second || loc.Breaker.FailureThreshold != 2 {
		t.Errorf("local breaker = %+v", loc.Breaker)
	}
}

func TestQueueBudgetPrecedence(t *testing.T) {
	// default < resilience.requestQueue < per-connection override (guide §5).
	doc := `{"providers":[{"id":"p","cluster":"c","connections":[
	  {"id":"plain"},
	  {"id":"wait","rateLimitOverrides":{"maxWaitMs":500}},
	  {"id":"both","rateLimitOverrides":{"maxWaitMs":700,"executionMaxWaitMs":9000}}]}],
	 "routes":[{"model":"m","targets":[{"provider":"p"}]}]%s}`
	tests := []struct {
		name      string        // case
		queue     string        // requestQueue block ("" = none)
		conn      string        // connection id
		wait, exe time.Duration // effective budgets
		depth     int           // effective queue depth
	}{
		{"defaults", "", "plain", 30 * time.Second, 10 * time.Minute, 64},
		{"policy", `{"maxWaitMs":2000,"executionMaxWaitMs":60000,"maxQueueDepth":4}`, "plain", 2 * time.Second, time.Minute, 4},
		{"override wait only", `{"maxWaitMs":2000,"executionMaxWaitMs":60000}`, "wait", 500 * time.Millisecond, time.Minute, 64},
		{"override without policy", "", "both", 700 * time.Millisecond, 9 * time.Second, 64},
		{"unbounded", `{"maxQueueDepth":0}`, "plain", 30 * time.Second, 10 * time.Minute, 0},
	}
	for _, tt := range tests {
		extra := ""
		if tt.queue != "" {
			extra = `,"resilience":{"requestQueue":` + tt.queue + `}`
		}
		r := mustParse(t, fmt.Sprintf(doc, extra), ParseOptions{}).Resolved()
		_, c, ok := r.Connection(tt.conn)
		if !ok {
			t.Fatalf("%s: no connection %s", tt.name, tt.conn)
		}
		if c.QueueMaxWait != tt.wait || c.ExecutionMaxWait != tt.exe || c.MaxQueueDepth != tt.depth {
			t.Errorf("%s: wait %v exec %v depth %d; want %v %v %d", tt.name, c.QueueMaxWait, c.ExecutionMaxWait, c.MaxQueueDepth, tt.wait, tt.exe, tt.depth)
		}
	}
}

func TestQueueEnvironmentLayer(t *testing.T) {
	// built-in default < RATE_LIMIT_* < resilience.requestQueue < rateLimitOverrides (guide §5).
	doc := `{"providers":[{"id":"p","cluster":"c","connections":[{"id":"plain"},{"id":"over","rateLimitOverrides":{"maxWaitMs":100}}]}],` +
		`"routes":[{"model":"m","targets":[{"provider":"p"}]}]%s}`
	tests := []struct {
		name    string            // case
		env     map[string]string // VM environment
		queue   string            // resilience.requestQueue ("" = none)
		wait    time.Duration     // effective wait of "plain"
		exe     time.Duration     // effective execution cap of "plain"
		depth   int               // effective depth of "plain" (64: Spillway's default for a connection without a cap)
		wide    int               // the policy-wide depth (-1: none set)
		over    time.Duration     // effective wait of "over"
		warning string            // expected warning path ("" = none)
	}{
		{"defaults", nil, "", 30 * time.Second, 10 * time.Minute, 64, -1, 100 * time.Millisecond, ""},
		{"environment", map[string]string{"RATE_LIMIT_MAX_WAIT_MS": " 2000 ", "RATE_LIMIT_EXECUTION_MAX_WAIT_MS": "60000", "RATE_LIMIT_MAX_QUEUE_DEPTH": "7"},
			"", 2 * time.Second, time.Minute, 7, 7, 100 * time.Millisecond, ""},
		{"policy beats environment", map[string]string{"RATE_LIMIT_MAX_WAIT_MS": "2000", "RATE_LIMIT_MAX_QUEUE_DEPTH": "7"},
			`{"maxWaitMs":5000}`, 5 * time.Second, 10 * time.Minute, 7, 7, 100 * time.Millisecond, ""},
		{"empty variable is unset", map[string]string{"RATE_LIMIT_MAX_WAIT_MS": ""}, "", 30 * time.Second, 10 * time.Minute, 64, -1, 100 * time.Millisecond, ""},
		{"bad variable is ignored", map[string]string{"RATE_LIMIT_MAX_WAIT_MS": "30s"}, "", 30 * time.Second, 10 * time.Minute, 64, -1, 100 * time.Millisecond, "$RATE_LIMIT_MAX_WAIT_MS"},
		{"environment is clamped", map[string]string{"RATE_LIMIT_MAX_QUEUE_DEPTH": "999999"}, "", 30 * time.Second, 10 * time.Minute, 100000, 100000, 100 * time.Millisecond, "$RATE_LIMIT_MAX_QUEUE_DEPTH"},
		{"environment 0 is unbounded", map[string]string{"RATE_LIMIT_MAX_QUEUE_DEPTH": "0"}, "", 30 * time.Second, 10 * time.Minute, 0, 0, 100 * time.Millisecond, ""},
	}
	for _, tt := range tests {
		extra := ""
		if tt.queue != "" {
			extra = `,"resilience":{"requestQueue":` + tt.queue + `}`
		}
		p := mustParse(t, fmt.Sprintf(doc, extra), ParseOptions{LookupEnv: envMap(tt.env)})
		r := p.Resolved()
		_, plain, _ := r.Connection("plain")
		_, over, _ := r.Connection("over")
		if plain.QueueMaxWait != tt.wait || plain.ExecutionMaxWait != tt.exe || plain.MaxQueueDepth != tt.depth || over.QueueMaxWait != tt.over {
			t.Errorf("%s: plain %v/%v/%d over %v; want %v/%v/%d %v", tt.name, plain.QueueMaxWait, plain.ExecutionMaxWait,
				plain.MaxQueueDepth, over.QueueMaxWait, tt.wait, tt.exe, tt.depth, tt.over)
		}
		if r.RequestQueue.MaxWait != tt.wait || r.RequestQueue.MaxQueueDepth != tt.wide {
			t.Errorf("%s: policy-wide queue = %+v", tt.name, r.RequestQueue)
		}
		switch {
		case tt.warning == "" && len(p.Warnings) != 0:
			t.Errorf("%s: unexpected warnings %v", tt.name, p.Warnings)
		case tt.warning != "" && (len(p.Warnings) != 1 || p.Warnings[0].Path != tt.warning):
			t.Errorf("%s: warnings %v, want one at %s", tt.name, p.Warnings, tt.warning)
		}
		if strings.Contains(p.Warnings.Error(), "30s") {
			t.Errorf("%s: a warning repeats an environment value: %v", tt.name, p.Warnings)
		}
	}
}

func TestRouteLookup(t *testing.T) {
	doc := `{"providers":[{"id":"p","cluster":"c","connections":[{"id":"a"},{"id":"b"}]}],"routes":[
	  {"model":"claude-*","targets":[{"provider":"p"}]},
	  {"model":"claude-3-opus","targets":[{"provider":"p","model":"claude-3-opus-20240229","connection":"b","weight":5}]},
	  {"model":"claude-3-*","targets":[{"provider":"p"}]},
	  {"model":"openai/gpt-?o","targets":[{"provider":"p"}]},
	  {"model":"*","strategy":"p2c","targets":[{"provider":"p"}]}]}`
	r := mustParse(t, doc, ParseOptions{}).Resolved()
	tests := []struct {
		model string // requested model
		route string // expected route model
	}{
		{"claude-3-opus", "claude-3-opus"}, // exact beats earlier globs
		{"claude-3-haiku", "claude-*"},     // first declared glob wins
		{"openai/gpt-4o", "openai/gpt-?o"}, // '*'/'?' handle '/'
		{"openai/gpt-4oo", "*"},            // '?' is exactly one character
		{"", "*"},
		{"anything", "*"},
	}
	for _, tt := range tests {
		route, ok := r.Route(tt.model)
		if !ok || route.Model != tt.route {
			t.Errorf("Route(%q) = %v, %v; want %q", tt.model, route, ok, tt.route)
		}
	}
	route, _ := r.Route("claude-3-opus")
	target := route.Targets[0]
	if target.Provider != 0 || target.Connection != 1 || target.ConnectionID != "b" || target.Weight != 5 {
		t.Errorf("target = %+v", target)
	}
	if got := target.UpstreamModel("claude-3-opus"); got != "claude-3-opus-20240229" {
		t.Errorf("UpstreamModel = %q", got)
	}
	glob, _ := r.Route("claude-x")
	if glob.Strategy != StrategyPriority || glob.Targets[0].Connection != -1 || glob.Targets[0].UpstreamModel("claude-x") != "claude-x" {
		t.Errorf("glob route defaults = %+v", glob)
	}
	if p2c, _ := r.Route("zzz"); p2c.Strategy != StrategyP2C {
		t.Errorf("strategy = %q", p2c.Strategy)
	}
}

func TestNoRoute(t *testing.T) {
	r := mustParse(t, minimal, ParseOptions{}).Resolved()
	if _, ok := r.Route("gpt-4o-mini"); ok {
		t.Error("an exact route matched another model")
	}
	if _, ok := r.Provider("nope"); ok {
		t.Error("unknown provider found")
	}
	if _, _, ok := r.Connection("nope"); ok {
		t.Error("unknown connection found")
	}
}

func TestQuotaFamily(t *testing.T) {
	doc := strings.Replace(minimal, `"cluster":"openai"`, `"cluster":"openai","quotaFamilies":{"gpt-5*":"gpt-5","o[134]-*":"o-series"}`, 1)
	p, _ := mustParse(t, doc, ParseOptions{}).Resolved().Provider("openai")
	tests := []struct {
		model  string // upstream model
		family string // expected quota family
	}{
		{"gpt-5", "gpt-5"},
		{"gpt-5.1-codex", "gpt-5"},
		{"o3-mini", "o-series"},
		{"o2-mini", "o2-mini"}, // no glob: its own family
		{"gpt-4o", "gpt-4o"},
	}
	for _, tt := range tests {
		if got := p.QuotaFamily(tt.model); got != tt.family {
			t.Errorf("QuotaFamily(%q) = %q, want %q", tt.model, got, tt.family)
		}
	}
}

func TestConnectionDetails(t *testing.T) {
	r := mustParse(t, richBase, ParseOptions{}).Resolved()
	prov, c, ok := r.Connection("openai-a")
	if !ok || prov.ID != "openai" {
		t.Fatal("openai-a not found")
	}
	if c.CredentialHeader != "authorization" || c.CredentialValue.Reveal() != "Bearer k" {
		t.Errorf("credential = %q %q", c.CredentialHeader, c.CredentialValue.Reveal())
	}
	if c.MaxConcurrent != 2 || c.ModelConcurrencyCap("gpt-4o") != 1 || c.ModelConcurrencyCap("gpt-4") != 0 || c.Weight != 2 {
		t.Errorf("caps = %+v", c)
	}
	if c.QueueMaxWait != time.Second {
		t.Errorf("override wait = %v", c.QueueMaxWait)
	}
	if !r.Admin.Enabled || r.Admin.PathPrefix != "/admin/" {
		t.Errorf("admin = %+v", r.Admin)
	}
	if prov.Authority != "api.openai.com" {
		t.Errorf("authority = %q", prov.Authority)
	}
}

func TestRulesPerProvider(t *testing.T) {
	r := mustParse(t, richBase, ParseOptions{}).Resolved()
	openai, _ := r.Provider("openai")
	azure, _ := r.Provider("azure")
	if len(openai.StatusRestatement) != 1 || len(openai.ErrorRules) != 1 || len(azure.StatusRestatement) != 0 || len(azure.ErrorRules) != 0 {
		t.Fatalf("rules not attached to their provider: %+v / %+v", openai, azure)
	}
	rs := &openai.StatusRestatement[0]
	if rs.DefaultRetryAfter != RestatementDefaultRetryAfter || rs.ToStatus != 429 {
		t.Errorf("restatement = %+v", rs)
	}
	if !reflect.DeepEqual(rs.FromStatuses, []int{403}) || !reflect.DeepEqual(rs.TextMarkers, []string{"quota"}) || rs.Provider != "openai" {
		t.Errorf("restatement = %+v", rs)
	}
	er := &openai.ErrorRules[0]
	if er.Cooldown != time.Second || !er.HasCooldown || er.Status != 403 || er.Reason != "auth_error" || er.Scope != "model" {
		t.Errorf("error rule = %+v", er)
	}
}

func TestRuleDefaults(t *testing.T) {
	r := mustParse(t, withResilience(`{"providerErrorRules":[{"id":"e","provider":"openai","reason":"rate_limit"}],`+
		`"statusRestatement":[{"id":"r","provider":"openai","fromStatuses":[400],"toStatus":429,"defaultRetryAfterMs":5000}]}`), ParseOptions{}).Resolved()
	p, _ := r.Provider("openai")
	er := p.ErrorRules[0]
	if er.Status != 0 || er.Scope != "" || er.HasCooldown || er.Cooldown != 0 {
		t.Errorf("unset status/scope/cooldown = %+v, want any status, the status's own scope, no cooldown", er)
	}
	if got := p.StatusRestatement[0].DefaultRetryAfter; got != 5*time.Second {
		t.Errorf("defaultRetryAfter = %v", got)
	}
}

func TestLockoutCountsStatus(t *testing.T) {
	r := resolveThree(t, `{"modelLockout":{"enabled":true,"errorCodes":[429]}}`)
	if !r.ModelLockout.Enabled || !r.ModelLockout.CountsStatus(429) || r.ModelLockout.CountsStatus(404) {
		t.Errorf("lockout = %+v", r.ModelLockout)
	}
}

// Spillway's default maxQueueDepth is max(64, 8 × the connection's cap), its cap being
// maxConcurrent or, without one, its largest modelConcurrency (README, "Configuring: the
// policy": a divergence from the guide's unbounded default), at most 100000; a depth the
// policy sets, 0 (unbounded) included, stands.
func TestDefaultQueueDepthFollowsTheCap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conn  string // the connection's caps (JSON fields)
		queue string // resilience.requestQueue ("" = none)
		depth int    // effective depth
	}{
		{"no cap", ``, "", 64},
		{"cap 4: the floor", `,"maxConcurrent":4`, "", 64},
		{"cap 8: the floor", `,"maxConcurrent":8`, "", 64},
		{"cap 9", `,"maxConcurrent":9`, "", 72},
		{"cap 100", `,"maxConcurrent":100`, "", 800},
		{"cap 20000: at most 100000", `,"maxConcurrent":20000`, "", 100000},
		{"model caps only: the largest", `,"modelConcurrency":{"a":3,"b":20}`, "", 160},
		{"the connection's cap over the models'", `,"maxConcurrent":2,"modelConcurrency":{"a":50}`, "", 64},
		{"set by the policy", `,"maxConcurrent":100`, `{"maxQueueDepth":5}`, 5},
		{"0 is unbounded", `,"maxConcurrent":100`, `{"maxQueueDepth":0}`, 0},
	} {
		extra := ""
		if tc.queue != "" {
			extra = `,"resilience":{"requestQueue":` + tc.queue + `}`
		}
		doc := `{"providers":[{"id":"p","cluster":"c","connections":[{"id":"k"` + tc.conn + `}]}],` +
			`"routes":[{"model":"m","targets":[{"provider":"p"}]}]` + extra + `}`
		_, c, ok := mustParse(t, doc, ParseOptions{}).Resolved().Connection("k")
		if !ok || c.MaxQueueDepth != tc.depth {
			t.Errorf("%s: depth %d, want %d", tc.name, c.MaxQueueDepth, tc.depth)
		}
	}
}
