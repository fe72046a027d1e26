package admin

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/lockout"
	"github.com/spillwayproxy/spillway/plugin/internal/providercooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
)

// The reply shapes follow OmniRoute's: the field names of its health payload
// (providerHealth, circuitBreakers, lockouts, rateLimitStatus), of its cooldown manager's
// connection rows (status, testStatus, rateLimitedUntil, cooldownRemainingMs, backoffLevel,
// errorCode, lastErrorType, lockouts) and of its model lockout rows (provider, connectionId,
// model, reason, remainingMs, failureCount, expiresAt). Times are RFC 3339 in UTC with
// milliseconds, durations whole milliseconds; what is unknown is null. Spillway adds fields
// OmniRoute has no counterpart for; a client that reads OmniRoute's finds them where it
// looks.

// timeLayout is JavaScript's Date.toISOString, which OmniRoute's replies use.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func isoTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// optTime is a time or null.
func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := isoTime(t)
	return &s
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Milliseconds() // a wait rounds up: never 0 while one runs
}

func quote(s string) string { return strconv.Quote(clip(s)) }

// layerErrorJSON names a layer that could not be read or written (never the store's error,
// which is logged).
type layerErrorJSON struct {
	Provider   *string `json:"provider"`
	Connection *string `json:"connection"`
	Layer      string  `json:"layer"`
}

func layerErrors(errs []engine.LayerError) []layerErrorJSON {
	out := make([]layerErrorJSON, 0, len(errs))
	for _, e := range errs {
		out = append(out, layerErrorJSON{Provider: optString(e.Provider), Connection: optString(e.Connection), Layer: string(e.Layer)})
	}
	return out
}

// --- GET monitoring/health ---

type healthJSON struct {
	// Status is "healthy", or "degraded" when some layer could not be read (OmniRoute's
	// status is its own liveness; a Spillway that answers is live).
	Status          string                   `json:"status"`
	Timestamp       string                   `json:"timestamp"`
	CircuitBreakers breakerCountsJSON        `json:"circuitBreakers"`
	ProviderHealth  map[string]providerJSON  `json:"providerHealth"`
	Connections     []connectionJSON         `json:"connections"`
	Lockouts        []lockoutJSON            `json:"lockouts"`
	RateLimitStatus map[string]rateLimitJSON `json:"rateLimitStatus"`
	Settings        settingsJSON             `json:"settings"`
	Errors          []layerErrorJSON         `json:"errors"`
}

// breakerCountsJSON counts circuits by state. As in OmniRoute's, closed includes DEGRADED
// (traffic flows); degraded counts those separately.
type breakerCountsJSON struct {
	Open     int `json:"open"`
	HalfOpen int `json:"halfOpen"`
	Closed   int `json:"closed"`
	Degraded int `json:"degraded"`
	Total    int `json:"total"`
}

type providerJSON struct {
	State            breaker.State `json:"state"` // CLOSED, DEGRADED, OPEN, HALF_OPEN
	Failures         int           `json:"failures"`
	LastFailure      *string       `json:"lastFailure"`
	LastFailureKind  *string       `json:"lastFailureKind"` // server_error, timeout, transport_error
	RetryAfterMs     int64         `json:"retryAfterMs"`    // until traffic may flow (0 = it may)
	OpenUntil        *string       `json:"openUntil"`
	ProbeInFlight    bool          `json:"probeInFlight"`
	OpenCycles       int           `json:"openCycles"` // OPEN periods since the provider was last quiet
	Profile          string        `json:"profile"`
	API              string        `json:"api"`
	ProviderCooldown *gateJSON     `json:"providerCooldown,omitempty"` // only with the opt-in gate on
	Connections      int           `json:"connections"`
}

type gateJSON struct {
	Cooling      bool    `json:"cooling"`
	RetryAfterMs int64   `json:"retryAfterMs"`
	Until        *string `json:"until"`
	Failures     int     `json:"failures"`
}

type settingsJSON struct {
	ModelLockout     bool `json:"modelLockout"`     // resilience.modelLockout.enabled
	ProviderCooldown bool `json:"providerCooldown"` // resilience.providerCooldown.enabled
}

type rateLimitJSON struct {
	Queued        int                     `json:"queued"`
	Running       int                     `json:"running"`
	Executing     int                     `json:"executing"` // = running: a lease is held while the attempt executes
	MaxConcurrent int                     `json:"maxConcurrent"`
	MaxQueueDepth int                     `json:"maxQueueDepth"`
	Models        map[string]modelCapJSON `json:"models"`
}

type modelCapJSON struct {
	Running int `json:"running"`
	Limit   int `json:"limit"`
}

func renderHealth(h engine.Health) replies.Reply {
	out := healthJSON{
		Status:          "healthy",
		Timestamp:       isoTime(h.At),
		ProviderHealth:  map[string]providerJSON{},
		Connections:     []connectionJSON{},
		Lockouts:        []lockoutJSON{},
		RateLimitStatus: map[string]rateLimitJSON{},
		Settings:        settingsJSON{ModelLockout: h.ModelLockoutEnabled, ProviderCooldown: h.ProviderCooldownEnabled},
		Errors:          layerErrors(h.Errors),
	}
	if len(h.Errors) > 0 {
		out.Status = "degraded"
	}
	for _, p := range h.Providers {
		b := &out.CircuitBreakers
		switch p.Breaker.State {
		case breaker.Open:
			b.Open++
		case breaker.HalfOpen:
			b.HalfOpen++
		case breaker.Degraded:
			b.Degraded++
			b.Closed++
		default:
			b.Closed++
		}
		b.Total++
		pj := providerJSON{
			State:         p.Breaker.State,
			Failures:      p.Breaker.Failures,
			LastFailure:   optTime(p.Breaker.LastFailureAt),
			RetryAfterMs:  millis(p.Breaker.RetryAfter),
			OpenUntil:     optTime(p.Breaker.OpenUntil),
			ProbeInFlight: p.Breaker.ProbeInFlight,
			OpenCycles:    p.Breaker.OpenCycles,
			Profile:       string(p.Profile),
			API:           string(p.API),
			Connections:   len(p.Connections),
		}
		if p.Breaker.LastFailureKind != breaker.KindNone {
			pj.LastFailureKind = optString(p.Breaker.LastFailureKind.String())
		}
		if h.ProviderCooldownEnabled {
			pj.ProviderCooldown = gate(p.Gate)
		}
		out.ProviderHealth[p.ID] = pj
		for _, c := range p.Connections {
			out.Connections = append(out.Connections, connection(c, h.At, h.ProviderCooldownEnabled))
			for _, l := range c.Lockouts {
				out.Lockouts = append(out.Lockouts, lockoutRow(l, h.At))
			}
			if cc := c.Concurrency; cc.Capped() {
				rl := rateLimitJSON{Queued: cc.Queued, Running: cc.InFlight, Executing: cc.InFlight,
					MaxConcurrent: cc.MaxConcurrent, MaxQueueDepth: cc.MaxQueueDepth, Models: map[string]modelCapJSON{}}
				for _, m := range cc.Models {
					rl.Models[m.Model] = modelCapJSON{Running: m.InFlight, Limit: m.Limit}
				}
				out.RateLimitStatus[c.Provider+":"+c.ID] = rl
			}
		}
	}
	return jsonReply(200, out)
}

func gate(s providercooldown.Status) *gateJSON {
	return &gateJSON{Cooling: s.Cooling, RetryAfterMs: millis(s.RetryAfter), Until: optTime(s.Until), Failures: s.Failures}
}

// --- GET resilience/cooldowns ---

type cooldownsJSON struct {
	Connections []connectionJSON `json:"connections"`
	GeneratedAt string           `json:"generatedAt"`
	Errors      []layerErrorJSON `json:"errors"`
}

// connectionJSON is one connection's row. Status is OmniRoute's cooldown manager's:
// terminal, cooling_down, model_locked or healthy; testStatus the guide's field (§2; active,
// unavailable, banned, expired, credits_exhausted).
type connectionJSON struct {
	ID                  string               `json:"id"`
	Provider            string               `json:"provider"`
	Status              string               `json:"status"`
	TestStatus          string               `json:"testStatus"`
	RateLimitedUntil    *string              `json:"rateLimitedUntil"`
	CooldownRemainingMs int64                `json:"cooldownRemainingMs"`
	BackoffLevel        int                  `json:"backoffLevel"`
	ErrorCode           *int                 `json:"errorCode"`
	LastError           *string              `json:"lastError"` // Spillway's own summary, never an upstream body
	LastErrorType       *string              `json:"lastErrorType"`
	LastErrorAt         *string              `json:"lastErrorAt"`
	TerminalSince       *string              `json:"terminalSince"`
	RejectStreak        int                  `json:"rejectStreak"`   // request_rejected verdicts in a row (banned at three)
	ExpiredRetries      int                  `json:"expiredRetries"` // expired-credential verdicts since the last success
	ProviderCooldown    *gateJSON            `json:"providerCooldown,omitempty"`
	Lockouts            []connLockoutJSON    `json:"lockouts"`
	Concurrency         *connConcurrencyJSON `json:"concurrency"` // null without caps
}

type connLockoutJSON struct {
	Model        string `json:"model"`
	Scope        string `json:"scope"` // quota (the model's quota family), model (bare) or exact
	Reason       string `json:"reason"`
	Status       int    `json:"status"`
	FailureCount int    `json:"failureCount"`
	RemainingMs  int64  `json:"remainingMs"`
	ExpiresAt    string `json:"expiresAt"`
}

type connConcurrencyJSON struct {
	MaxConcurrent int                     `json:"maxConcurrent"`
	InFlight      int                     `json:"inFlight"`
	Queued        int                     `json:"queued"`
	MaxQueueDepth int                     `json:"maxQueueDepth"`
	Models        map[string]modelCapJSON `json:"models"`
}

func connection(c engine.ConnectionHealth, now time.Time, gateOn bool) connectionJSON {
	cd := c.Cooldown
	row := connectionJSON{
		ID:                  c.ID,
		Provider:            c.Provider,
		TestStatus:          string(cd.Status),
		RateLimitedUntil:    optTime(cd.RateLimitedUntil),
		CooldownRemainingMs: millis(cd.CooldownRemaining),
		BackoffLevel:        cd.BackoffLevel,
		LastError:           optString(cd.LastError),
		LastErrorType:       optString(string(cd.LastErrorType)),
		LastErrorAt:         optTime(cd.LastFailureAt),
		TerminalSince:       optTime(cd.TerminalSince),
		RejectStreak:        cd.RejectStreak,
		ExpiredRetries:      cd.ExpiredRetries,
		Lockouts:            []connLockoutJSON{},
	}
	if cd.Status == conncooldown.StatusAvailable {
		row.TestStatus = "active"
	}
	if cd.ErrorCode > 0 {
		code := cd.ErrorCode
		row.ErrorCode = &code
	}
	cooling := cd.CooldownRemaining > 0
	if gateOn {
		row.ProviderCooldown = gate(c.Gate)
		if c.Gate.Cooling {
			cooling = true
			row.CooldownRemainingMs = max(row.CooldownRemainingMs, millis(c.Gate.RetryAfter))
		}
	}
	for _, l := range c.Lockouts {
		row.Lockouts = append(row.Lockouts, connLockoutJSON{Model: l.Model, Scope: string(l.Scope), Reason: string(l.Reason),
			Status: l.Status, FailureCount: l.FailureCount, RemainingMs: millis(l.ExpiresAt.Sub(now)), ExpiresAt: isoTime(l.ExpiresAt)})
	}
	switch {
	case cd.Status.Terminal():
		row.Status = "terminal"
	case cooling:
		row.Status = "cooling_down"
	case len(c.Lockouts) > 0:
		row.Status = "model_locked"
	default:
		row.Status = "healthy"
	}
	if cc := c.Concurrency; cc.Capped() {
		row.Concurrency = &connConcurrencyJSON{MaxConcurrent: cc.MaxConcurrent, InFlight: cc.InFlight, Queued: cc.Queued,
			MaxQueueDepth: cc.MaxQueueDepth, Models: map[string]modelCapJSON{}}
		for _, m := range cc.Models {
			row.Concurrency.Models[m.Model] = modelCapJSON{Running: m.InFlight, Limit: m.Limit}
		}
	}
	return row
}

func renderCooldowns(h engine.Health) replies.Reply {
	out := cooldownsJSON{Connections: []connectionJSON{}, GeneratedAt: isoTime(h.At), Errors: layerErrors(h.Errors)}
	for _, p := range h.Providers {
		for _, c := range p.Connections {
			out.Connections = append(out.Connections, connection(c, h.At, h.ProviderCooldownEnabled))
		}
	}
	return jsonReply(200, out)
}

// --- GET resilience/model-cooldowns ---

type lockoutJSON struct {
	Provider     string `json:"provider"`
	Connection   string `json:"connection"`   // the guide's name (§3, Model Cooldowns-dashboard)
	ConnectionID string `json:"connectionId"` // OmniRoute's
	Model        string `json:"model"`
	Scope        string `json:"scope"`
	Reason       string `json:"reason"`
	Status       int    `json:"status"`
	FailureCount int    `json:"failureCount"`
	RemainingMs  int64  `json:"remainingMs"`
	Until        int64  `json:"until"` // Unix milliseconds
	ExpiresAt    string `json:"expiresAt"`
}

func lockoutRow(l lockout.Entry, now time.Time) lockoutJSON {
	return lockoutJSON{Provider: l.Provider, Connection: l.Connection, ConnectionID: l.Connection, Model: l.Model,
		Scope: string(l.Scope), Reason: string(l.Reason), Status: l.Status, FailureCount: l.FailureCount,
		RemainingMs: millis(l.ExpiresAt.Sub(now)), Until: l.ExpiresAt.UnixMilli(), ExpiresAt: isoTime(l.ExpiresAt)}
}

type lockoutsJSON struct {
	Items  []lockoutJSON    `json:"items"`
	Errors []layerErrorJSON `json:"errors"`
}

func renderLockouts(now time.Time, list []lockout.Entry, errs []engine.LayerError) replies.Reply {
	out := lockoutsJSON{Items: []lockoutJSON{}, Errors: layerErrors(errs)}
	for _, l := range list {
		out.Items = append(out.Items, lockoutRow(l, now))
	}
	return jsonReply(200, out)
}

// --- writes ---

// writeStatus is a write's HTTP status: 200, or 500 when some layer could not be written
// (what was done is still reported; every write is safe to repeat).
func writeStatus(errs []engine.LayerError) (int, bool) {
	if len(errs) > 0 {
		return 500, false
	}
	return 200, true
}

type resetJSON struct {
	OK                     bool             `json:"ok"`
	ResetCount             int              `json:"resetCount"` // providers reset (OmniRoute: circuit breakers reset)
	Message                string           `json:"message"`
	Providers              []string         `json:"providers"`
	BreakersReset          int              `json:"breakersReset"`          // circuits that held anything
	ProviderCooldownsReset int              `json:"providerCooldownsReset"` // gate entries that held anything
	ConnectionsCleared     []string         `json:"connectionsCleared"`     // cooldown, backoff, error fields or terminal state removed
	TerminalCleared        []string         `json:"terminalCleared"`        // of those, the terminal ones
	LockoutsCleared        int              `json:"lockoutsCleared"`
	Errors                 []layerErrorJSON `json:"errors"`
}

func renderReset(rep engine.ResetReport) replies.Reply {
	status, ok := writeStatus(rep.Errors)
	return jsonReply(status, resetJSON{
		OK:                     ok,
		ResetCount:             len(rep.Providers),
		Message:                "Reset " + strconv.Itoa(len(rep.Providers)) + " provider(s)",
		Providers:              nonNil(rep.Providers),
		BreakersReset:          rep.Breakers,
		ProviderCooldownsReset: rep.Gates,
		ConnectionsCleared:     nonNil(rep.Connections),
		TerminalCleared:        nonNil(rep.Terminal),
		LockoutsCleared:        rep.Lockouts,
		Errors:                 layerErrors(rep.Errors),
	})
}

type clearJSON struct {
	OK              bool             `json:"ok"`
	Cleared         int              `json:"cleared"`
	Unchanged       int              `json:"unchanged"`
	SkippedTerminal int              `json:"skippedTerminal"`
	LockoutsCleared int              `json:"lockoutsCleared"`
	Connections     clearIDsJSON     `json:"connections"` // the ids behind the counts
	Errors          []layerErrorJSON `json:"errors"`
}

type clearIDsJSON struct {
	Cleared         []string `json:"cleared"`
	Unchanged       []string `json:"unchanged"`
	SkippedTerminal []string `json:"skippedTerminal"`
}

func renderClear(rep engine.ClearReport) replies.Reply {
	status, ok := writeStatus(rep.Errors)
	return jsonReply(status, clearJSON{
		OK: ok, Cleared: len(rep.Cleared), Unchanged: len(rep.Unchanged), SkippedTerminal: len(rep.SkippedTerminal),
		LockoutsCleared: rep.LockoutsCleared,
		Connections:     clearIDsJSON{nonNil(rep.Cleared), nonNil(rep.Unchanged), nonNil(rep.SkippedTerminal)},
		Errors:          layerErrors(rep.Errors),
	})
}

type lockoutClearJSON struct {
	OK         bool             `json:"ok"`
	Removed    int              `json:"removed"`
	ClearedAll bool             `json:"clearedAll,omitempty"`
	Errors     []layerErrorJSON `json:"errors"`
}

func renderLockoutClear(c Call, rep engine.LockoutClear) replies.Reply {
	status, ok := writeStatus(rep.Errors)
	return jsonReply(status, lockoutClearJSON{OK: ok, Removed: rep.Removed, ClearedAll: c.All, Errors: layerErrors(rep.Errors)})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// --- reset logs ---

// scope names what a call was asked to cover in a log line.
func scope(provider string) string {
	if provider == "" {
		return "every provider"
	}
	return "provider " + quote(provider)
}

func logReset(method, path string, rep engine.ResetReport) string {
	return fmt.Sprintf("admin %s %s: reset %s: %d breaker(s), %d provider cooldown entr(ies), connections cleared %s (terminal %s), %d model lockout(s)%s",
		method, quote(path), strings.Join(rep.Providers, ", "), rep.Breakers, rep.Gates, list(rep.Connections), list(rep.Terminal),
		rep.Lockouts, failed(rep.Errors))
}

func logClear(method, path string, c Call, rep engine.ClearReport) string {
	asked := "connections " + list(c.ConnectionIDs)
	if c.All {
		asked = "every connection of " + scope(c.Provider)
	}
	return fmt.Sprintf("admin %s %s: cleared cooldowns of %s: cleared %s, unchanged %s, skipped terminal %s, %d model lockout(s)%s",
		method, quote(path), asked, list(rep.Cleared), list(rep.Unchanged), list(rep.SkippedTerminal), rep.LockoutsCleared,
		failed(rep.Errors))
}

func logLockoutClear(method, path string, c Call, rep engine.LockoutClear) string {
	asked := "every model lockout of " + scope(c.Provider)
	if !c.All {
		on := "every connection of " + scope(c.Provider)
		if c.Connection != "" {
			on = c.Provider + "/" + c.Connection
		}
		asked = "model " + quote(c.Model) + " on " + on
	}
	return fmt.Sprintf("admin %s %s: re-enabled %s: %d model lockout(s) removed%s", method, quote(path), asked, rep.Removed,
		failed(rep.Errors))
}

func list(ids []string) string { return "[" + strings.Join(ids, " ") + "]" }

func failed(errs []engine.LayerError) string {
	if len(errs) == 0 {
		return ""
	}
	return "; " + strconv.Itoa(len(errs)) + " layer(s) failed (see the warning)"
}
