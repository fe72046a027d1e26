package policies

import (
	"sort"
	"strconv"
)

// Range policy for resilience settings. Where the guide says a value is clamped during
// normalisation (queue waits 1 ms–24 h and queue depth 0–100000, §5; the lockout card's
// base/max/steps, §3; the watchdog's numbers, §6; p2c weight 0–20, §2) an out-of-range value
// is clamped and listed in Policy.Warnings. Everywhere else an out-of-range value is a mistake
// and is rejected: a negative duration, a threshold of 0, an HTTP status outside 100–599.

const (
	msSecond = int64(1000)
	msMinute = 60 * msSecond
	msHour   = 60 * msMinute
	msDay    = 24 * msHour
)

func (v *validator) resilience(r *Resilience, path string) {
	v.providerBreaker(&r.ProviderBreaker, joinField(path, "providerBreaker"))
	v.providerCooldown(&r.ProviderCooldown, joinField(path, "providerCooldown"))
	v.connectionCooldown(&r.ConnectionCooldown, joinField(path, "connectionCooldown"))
	v.modelLockout(&r.ModelLockout, joinField(path, "modelLockout"))
	v.requestQueue(&r.RequestQueue, joinField(path, "requestQueue"))
	v.comboCooldownWait(&r.ComboCooldownWait, joinField(path, "comboCooldownWait"))
	v.failover(&r.Failover, joinField(path, "failover"))
	if n := len(r.StatusRestatement); n > maxRestatementRules {
		v.fail(joinField(path, "statusRestatement"), "at most "+strconv.Itoa(maxRestatementRules)+" rules, got "+strconv.Itoa(n))
	}
	if n := len(r.ProviderErrorRules); n > maxErrorRules {
		v.fail(joinField(path, "providerErrorRules"), "at most "+strconv.Itoa(maxErrorRules)+" rules, got "+strconv.Itoa(n))
	}
	ids := make(map[string]int)
	for i := range r.StatusRestatement {
		v.restatementRule(&r.StatusRestatement[i], joinIndex(joinField(path, "statusRestatement"), i), ids, i)
	}
	ids = make(map[string]int)
	for i := range r.ProviderErrorRules {
		v.providerErrorRule(&r.ProviderErrorRules[i], joinIndex(joinField(path, "providerErrorRules"), i), ids, i)
	}
	v.throughputWatchdog(&r.StreamRecovery.ThroughputWatchdog, joinField(path, "streamRecovery.throughputWatchdog"))
	v.firstEvent(&r.StreamRecovery.FirstEvent, joinField(path, "streamRecovery.firstEvent"))
	v.rangeMs(joinField(path, "streamRecovery.contentStall.timeoutMs"), r.StreamRecovery.ContentStall.TimeoutMs, msSecond, msHour)
	v.terminalRecheck(&r.TerminalRecheck, joinField(path, "terminalRecheck"))
	v.clampInt(joinField(path, "p2cLatency.weight"), r.P2CLatency.Weight, 0, P2CLatencyWeightMax)
	v.rangeMs(joinField(path, "sessionAffinityTtlMs"), r.SessionAffinityTtlMs, 0, 7*msDay)
	if r.QuotaResetTimeZone != "" {
		zp := joinField(path, "quotaResetTimeZone")
		if _, err := parseFixedZone(r.QuotaResetTimeZone); err != nil {
			v.fail(zp, v.quote(zp, r.QuotaResetTimeZone)+": "+err.Error())
		}
	}
}

// terminalRecheck checks the re-check's bounds (rejected, not clamped: the guide names none,
// and a typo here changes how often Spillway calls a provider on its own).
func (v *validator) terminalRecheck(t *TerminalRecheck, path string) {
	v.rangeMs(joinField(path, "intervalMs"), t.IntervalMs, 10*msSecond, msDay)
	v.rangeMs(joinField(path, "maxIntervalMs"), t.MaxIntervalMs, 10*msSecond, msDay)
	if t.MaxPerTick != nil {
		v.rangeInt(joinField(path, "maxPerTick"), *t.MaxPerTick, 1, 10, "")
	}
	v.rangeMs(joinField(path, "timeoutMs"), t.TimeoutMs, msSecond, msMinute)
	// An unset maxIntervalMs is raised to intervalMs (Resolved), never reported.
	lo := TerminalRecheckInterval.Milliseconds()
	if t.IntervalMs != nil {
		lo = *t.IntervalMs
	}
	if hi := t.MaxIntervalMs; hi != nil && *hi < lo && lo <= msDay && *hi >= 10*msSecond {
		v.fail(joinField(path, "maxIntervalMs"), "must not be below intervalMs ("+formatMs(lo)+"), got "+formatMs(*hi))
	}
}

// firstEvent checks the first-event hold's bounds (rejected, not clamped: a typo here
// changes failover behaviour).
func (v *validator) firstEvent(f *FirstEvent, path string) {
	if f.MaxBytes != nil {
		v.rangeInt(joinField(path, "maxBytes"), *f.MaxBytes, 1024, 1<<20, "")
	}
	v.rangeMs(joinField(path, "timeoutMs"), f.TimeoutMs, 100, 5*msMinute)
}

func (v *validator) providerBreaker(b *ProviderBreaker, path string) {
	for _, prof := range Profiles {
		bp := b.profile(prof)
		pp := joinField(path, string(prof))
		def := profileRow(prof).Breaker
		if bp.DegradationThreshold != nil {
			v.rangeInt(joinField(pp, "degradationThreshold"), *bp.DegradationThreshold, 1, 1_000_000, "")
		}
		if bp.FailureThreshold != nil {
			v.rangeInt(joinField(pp, "failureThreshold"), *bp.FailureThreshold, 1, 1_000_000, "")
		}
		if bp.DegradationThreshold != nil {
			failure := def.FailureThreshold
			if bp.FailureThreshold != nil {
				failure = *bp.FailureThreshold
			}
			if *bp.DegradationThreshold > failure {
				v.fail(joinField(pp, "degradationThreshold"), "must not exceed failureThreshold ("+
					strconv.Itoa(failure)+")")
			}
		}
		v.rangeMs(joinField(pp, "resetTimeoutMs"), bp.ResetTimeoutMs, msSecond, msDay)
		kp := joinField(pp, "cooldownByKind")
		for _, kind := range sortedKeys(bp.CooldownByKind) {
			keyPath := joinKey(kp, kind)
			if !validFailureKind(kind) {
				v.fail(keyPath, "unknown failure kind "+strconv.Quote(truncate(kind, 64))+" (want one of "+failureKindList()+")")
				continue
			}
			ms := bp.CooldownByKind[kind]
			v.rangeMs(keyPath, &ms, msSecond, msDay)
		}
		if bp.MaxBackoffMultiplier != nil {
			v.rangeInt(joinField(pp, "maxBackoffMultiplier"), *bp.MaxBackoffMultiplier, 1, 1024, "")
		}
		if bp.RecoverySuccesses != nil {
			v.rangeInt(joinField(pp, "recoverySuccesses"), *bp.RecoverySuccesses, 1, 1000, "")
		}
	}
	tp := joinField(path, "tripStatuses")
	v.statuses(tp, b.TripStatuses)
	for i, s := range b.TripStatuses {
		switch {
		case s >= 100 && s < 400:
			v.fail(joinIndex(tp, i), "status "+strconv.Itoa(s)+" is not an error status (want 400–599)")
		case s == 401 || s == 403 || s == 429:
			v.fail(joinIndex(tp, i), "status "+strconv.Itoa(s)+" is account-level: it belongs to connection cooldown or model lockout, never the provider breaker")
		}
	}
}

func (v *validator) providerCooldown(c *ProviderCooldown, path string) {
	for _, prof := range Profiles {
		cp := c.profile(prof)
		pp := joinField(path, string(prof))
		if cp.ProviderFailureThreshold != nil {
			v.rangeInt(joinField(pp, "providerFailureThreshold"), *cp.ProviderFailureThreshold, 1, 1000, "")
		}
		v.rangeMs(joinField(pp, "providerFailureWindowMs"), cp.ProviderFailureWindowMs, msSecond, msDay)
		v.rangeMs(joinField(pp, "providerCooldownMs"), cp.ProviderCooldownMs, msSecond, msDay)
		v.rangeMs(joinField(pp, "minRetryCooldownMs"), cp.MinRetryCooldownMs, 1, msDay)
		v.rangeMs(joinField(pp, "maxRetryCooldownMs"), cp.MaxRetryCooldownMs, 1, msDay)
		def := profileRow(prof).ProviderCooldown
		lo := def.MinRetryCooldown.Milliseconds()
		if cp.MinRetryCooldownMs != nil {
			lo = *cp.MinRetryCooldownMs
		}
		hi := def.MaxRetryCooldown.Milliseconds()
		if cp.MaxRetryCooldownMs != nil {
			hi = *cp.MaxRetryCooldownMs
		}
		if (cp.MinRetryCooldownMs != nil || cp.MaxRetryCooldownMs != nil) && hi < lo {
			v.fail(joinField(pp, "maxRetryCooldownMs"), "must not be below minRetryCooldownMs ("+formatMs(lo)+"), got "+formatMs(hi))
		}
	}
}

func (v *validator) connectionCooldown(c *ConnectionCooldown, path string) {
	concurrency := ConcurrencyLimitCooldown.Milliseconds()
	if c.ConcurrencyLimitCooldownMs != nil {
		concurrency = *c.ConcurrencyLimitCooldownMs
	}
	for _, prof := range Profiles {
		cp := c.profile(prof)
		pp := joinField(path, string(prof))
		v.rangeMs(joinField(pp, "baseCooldownMs"), cp.BaseCooldownMs, 1, msDay)
		v.rangeMs(joinField(pp, "maxCooldownMs"), cp.MaxCooldownMs, 1, msDay)
		if cp.MaxBackoffSteps != nil {
			v.rangeInt(joinField(pp, "maxBackoffSteps"), *cp.MaxBackoffSteps, 0, 30, "")
		}
		def := profileRow(prof).ConnectionCooldown
		base := def.BaseCooldown.Milliseconds()
		if cp.BaseCooldownMs != nil {
			base = *cp.BaseCooldownMs
		}
		maxMs := def.MaxCooldown.Milliseconds()
		if cp.MaxCooldownMs != nil {
			maxMs = *cp.MaxCooldownMs
		}
		if maxMs < 1 || maxMs > msDay || base < 1 || base > msDay {
			continue // already reported
		}
		mp := joinField(pp, "maxCooldownMs")
		if maxMs < base {
			v.fail(mp, "must not be below baseCooldownMs ("+formatMs(base)+"), got "+formatMs(maxMs))
		}
		if maxMs < concurrency && concurrency >= 1 && concurrency <= 10*msMinute {
			v.fail(mp, "must not be below concurrencyLimitCooldownMs ("+formatMs(concurrency)+"), got "+formatMs(maxMs))
		}
	}
	v.rangeMs(joinField(path, "concurrencyLimitCooldownMs"), c.ConcurrencyLimitCooldownMs, 1, 10*msMinute)
	if c.ExpiredRetryMax != nil {
		v.rangeInt(joinField(path, "expiredRetryMax"), *c.ExpiredRetryMax, 1, 100, "")
	}
	if c.RequestRejectedStreak != nil {
		v.rangeInt(joinField(path, "requestRejectedStreak"), *c.RequestRejectedStreak, 1, 100, "")
	}
}

// modelLockout applies the lockout card's clamps (base 1 s–24 h, max base–24 h, steps 0–30)
// and keeps max ≥ base, as the card does.
func (v *validator) modelLockout(m *ModelLockout, path string) {
	if m.ErrorCodes != nil && len(m.ErrorCodes) == 0 {
		v.fail(joinField(path, "errorCodes"), "must not be empty: with no status counting, model lockout would never lock anything out (to turn model lockout off, set enabled: false)")
	}
	v.statuses(joinField(path, "errorCodes"), m.ErrorCodes)
	v.clampMs(joinField(path, "baseCooldownMs"), m.BaseCooldownMs, ModelLockoutMinBaseCooldown.Milliseconds(), ModelLockoutMaxCooldownCap.Milliseconds())
	base := ModelLockoutBaseCooldown.Milliseconds()
	if m.BaseCooldownMs != nil {
		base = *m.BaseCooldownMs
	}
	if m.MaxCooldownMs != nil {
		v.clampMs(joinField(path, "maxCooldownMs"), m.MaxCooldownMs, base, ModelLockoutMaxCooldownCap.Milliseconds())
	} else if base > ModelLockoutMaxCooldown.Milliseconds() {
		// The default max is below the operator's base: raise it, as the card does.
		raised := base
		m.MaxCooldownMs = &raised
		v.warn(joinField(path, "maxCooldownMs"), "raised the default "+formatMs(ModelLockoutMaxCooldown.Milliseconds())+
			" to baseCooldownMs ("+formatMs(base)+")")
	}
	v.clampInt(joinField(path, "maxBackoffSteps"), m.MaxBackoffSteps, 0, ModelLockoutMaxBackoffStepCap)
}

// requestQueue applies the guide's normalisation (§5): waits 1 ms–24 h, depth 0–100000. An
// empty path means the environment layer, whose problems are named by variable.
func (v *validator) requestQueue(q *RequestQueue, path string) {
	lo, hi := RequestQueueMinWait.Milliseconds(), RequestQueueMaxWaitCap.Milliseconds()
	name := func(field, env string) string {
		if path == "" {
			return envPath(env)
		}
		return joinField(path, field)
	}
	v.clampMs(name("maxWaitMs", EnvRequestQueueMaxWait), q.MaxWaitMs, lo, hi)
	v.clampMs(name("executionMaxWaitMs", EnvRequestQueueExecutionMaxWait), q.ExecutionMaxWaitMs, lo, hi)
	v.clampInt(name("maxQueueDepth", EnvRequestQueueMaxDepth), q.MaxQueueDepth, 0, RequestQueueMaxDepthCap)
}

func (v *validator) comboCooldownWait(c *ComboCooldownWait, path string) {
	v.rangeMs(joinField(path, "maxWaitMs"), c.MaxWaitMs, 0, msDay)
	if c.MaxAttempts != nil {
		v.rangeInt(joinField(path, "maxAttempts"), *c.MaxAttempts, 0, 10, "")
	}
	v.rangeMs(joinField(path, "budgetMs"), c.BudgetMs, 0, msDay)
}

func (v *validator) failover(f *Failover, path string) {
	if f.MaxAttempts != nil {
		v.rangeInt(joinField(path, "maxAttempts"), *f.MaxAttempts, 1, 20, "")
	}
	v.rangeMs(joinField(path, "budgetMs"), f.BudgetMs, msSecond, msDay)
	if f.Via != "" && f.Via != FailoverViaCallout && f.Via != FailoverViaRouter {
		vp := joinField(path, "via")
		v.fail(vp, "unknown failover path "+v.quote(vp, string(f.Via))+" (want callout or router)")
	}
}

// failoverPath checks the failover switches against the path failover takes (ViaRouter),
// which the routing mode decides for an unset via.
func (v *validator) failoverPath(f *Failover, mode RoutingMode, path string) {
	if f.Via == FailoverViaRouter && mode == RoutingModeHeaders {
		v.fail(joinField(path, "via"), "router needs body-routed mode: its tries start from a request whose body was read and "+
			"checked before the first try left; header-routed mode (routing.mode: headers) fails over by callout")
		return
	}
	if ViaRouter(f.Via, mode) {
		return
	}
	why := "via: callout"
	if f.Via == "" {
		why = "header-routed mode fails over by callout"
	}
	if f.HoldTries != nil && *f.HoldTries {
		v.warn(joinField(path, "holdTries"), "only router-mode failover reads it ("+why+"); the callout path always reads a failure's body")
	}
	if f.CrossCluster != nil && *f.CrossCluster {
		v.warn(joinField(path, "crossCluster"), "only router-mode failover reads it ("+why+"); the callout path reaches every cluster")
	}
}

func (v *validator) restatementRule(r *RestatementRule, path string, ids map[string]int, index int) {
	v.ruleID(joinField(path, "id"), r.ID, ids, index)
	v.ruleProvider(joinField(path, "provider"), r.Provider)
	fp := joinField(path, "fromStatuses")
	switch {
	case len(r.FromStatuses) == 0:
		v.fail(fp, "at least one status is required")
	case len(r.FromStatuses) > maxRuleStatuses:
		v.fail(fp, "at most "+strconv.Itoa(maxRuleStatuses)+" statuses, got "+strconv.Itoa(len(r.FromStatuses)))
	}
	v.statuses(fp, r.FromStatuses)
	for i, s := range r.FromStatuses {
		if s >= 100 && s < 400 {
			v.fail(joinIndex(fp, i), "status "+strconv.Itoa(s)+" is not an error status (want 400–599)")
		} else if s == r.ToStatus {
			v.fail(joinIndex(fp, i), "status "+strconv.Itoa(s)+" is the toStatus itself")
		}
	}
	tp := joinField(path, "toStatus")
	if r.ToStatus == 0 {
		v.fail(tp, "required")
	} else {
		v.errorStatus(tp, r.ToStatus)
	}
	v.markers(joinField(path, "textMarkers"), r.TextMarkers)
	v.markers(joinField(path, "excludeMarkers"), r.ExcludeMarkers)
	v.rangeMs(joinField(path, "defaultRetryAfterMs"), r.DefaultRetryAfterMs, msSecond, msDay)
}

func (v *validator) providerErrorRule(r *ProviderErrorRule, path string, ids map[string]int, index int) {
	v.ruleID(joinField(path, "id"), r.ID, ids, index)
	v.ruleProvider(joinField(path, "provider"), r.Provider)
	if r.Status != nil {
		v.errorStatus(joinField(path, "status"), *r.Status)
	}
	v.markers(joinField(path, "textMarkers"), r.TextMarkers)
	v.markers(joinField(path, "excludeMarkers"), r.ExcludeMarkers)
	rp := joinField(path, "reason")
	switch {
	case r.Reason == "":
		v.fail(rp, "required")
	case !validRuleReason(r.Reason):
		v.fail(rp, "unknown reason "+v.quote(rp, r.Reason)+" (want one of "+ruleReasonList()+")")
	}
	sp := joinField(path, "scope")
	switch {
	case r.Scope == "":
	case !validRuleScope(r.Scope):
		v.fail(sp, "unknown scope "+v.quote(sp, r.Scope)+" (want provider, connection, quota, model or exact)")
	}
	v.rangeMs(joinField(path, "cooldownMs"), r.CooldownMs, 0, 30*msDay)
}

// throughputWatchdog clamps into the normalisation ranges (guide §6 leaves them to the
// normalisation layer; the ranges are Spillway's).
func (v *validator) throughputWatchdog(w *ThroughputWatchdog, path string) {
	v.clampMs(joinField(path, "windowMs"), w.WindowMs, ThroughputWatchdogMinWindow.Milliseconds(), ThroughputWatchdogMaxWindow.Milliseconds())
	v.clampMs(joinField(path, "warmupMs"), w.WarmupMs, 0, ThroughputWatchdogMaxWarmup.Milliseconds())
	v.clampInt64(joinField(path, "minBytesPerSecond"), w.MinBytesPerSecond, 1, ThroughputWatchdogMaxBytes)
	v.clampInt64(joinField(path, "minOutputBytes"), w.MinOutputBytes, 0, ThroughputWatchdogMaxBytes)
}

func (v *validator) clampInt64(path string, n *int64, lo, hi int64) {
	if n == nil {
		return
	}
	orig := *n
	switch {
	case orig < lo:
		*n = lo
	case orig > hi:
		*n = hi
	default:
		return
	}
	v.warn(path, "clamped "+strconv.FormatInt(orig, 10)+" to "+strconv.FormatInt(*n, 10)+
		" (allowed "+strconv.FormatInt(lo, 10)+"–"+strconv.FormatInt(hi, 10)+")")
}

func (v *validator) ruleID(path, id string, ids map[string]int, index int) {
	if !v.identifier(path, id) {
		return
	}
	if prev, dup := ids[id]; dup {
		v.fail(path, "duplicate rule id "+v.quote(path, id)+" (also rule ["+strconv.Itoa(prev)+"])")
		return
	}
	ids[id] = index
}

func (v *validator) ruleProvider(path, id string) {
	switch _, known := v.providers[id]; {
	case id == "":
		v.fail(path, "required")
	case !known:
		v.fail(path, "unknown provider "+v.quote(path, id))
	}
}

// Bounds on rules, within what the engine's rule tables accept (plugin/internal/restate and
// errorrules count their built-in rules too), so matching stays cheap.
const (
	maxRestatementRules = 32
	maxErrorRules       = 64
	maxRuleStatuses     = 16
	maxMarkers          = 16
	maxMarkerBytes      = 256
)

func (v *validator) markers(path string, markers []string) {
	if len(markers) > maxMarkers {
		v.fail(path, "at most "+strconv.Itoa(maxMarkers)+" markers, got "+strconv.Itoa(len(markers)))
	}
	for i, m := range markers {
		switch {
		case m == "":
			v.fail(joinIndex(path, i), "marker must not be empty")
		case len(m) > maxMarkerBytes:
			v.fail(joinIndex(path, i), "marker is longer than "+strconv.Itoa(maxMarkerBytes)+" bytes")
		}
	}
}

// errorStatus checks an HTTP error status (400–599).
func (v *validator) errorStatus(path string, s int) {
	if s < 400 || s > 599 {
		v.fail(path, "HTTP error status must be between 400 and 599, got "+strconv.Itoa(s))
	}
}

// statuses checks a status list: each 100–599, no duplicates.
func (v *validator) statuses(path string, list []int) {
	seen := make(map[int]bool, len(list))
	for i, s := range list {
		ip := joinIndex(path, i)
		v.status(ip, s)
		if seen[s] {
			v.fail(ip, "duplicate status "+strconv.Itoa(s))
		}
		seen[s] = true
	}
}

func (v *validator) status(path string, s int) {
	if s < 100 || s > 599 {
		v.fail(path, "HTTP status must be between 100 and 599, got "+strconv.Itoa(s))
	}
}

// sortedKeys returns a map's keys in order, so problems are reported deterministically.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
