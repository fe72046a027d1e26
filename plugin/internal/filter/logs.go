package filter

import (
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/breaker"
	"github.com/spillwayproxy/spillway/plugin/internal/conncooldown"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
)

// The decision log. Every failed attempt gets one info line saying what Spillway decided:
//
//	spillway: attempt failed: request="5f0c…" provider=openai connection=key-a model="gpt-4o" status=429 reason=rate_limit set="cooldown 3s" next="failover to openai/key-b"
//
// request is the stream's x-request-id (Envoy sets one on every request it forwards unless
// told not to; "-" when there is none), model the upstream model, status the upstream's
// (0: no response), set what the failure left in the layers it reached ("breaker OPEN 30s",
// "cooldown 3s", "terminal banned", "lockout exact:gpt-4o 2m0s", "none") and next what the
// request does: fail over to the next target or answer the client. The classification's
// details follow at debug. Values from the client (the request id, a model a glob route
// passes on) are quoted; ids come from the policy; a credential, a token, a request or
// response body never appear.

// failureLog is what a failed attempt's decision line reports.
type failureLog struct {
	attempt    int            // the failed attempt's number in its request (0: the current one)
	status     int            // the upstream's status (0: no response)
	restatedTo int            // the restated status (0: not restated)
	reason     string         // the classification, or "envoy_reply" for Envoy's own answer
	effects    engine.Effects // what recording it left in the layers
	// For the debug line: the classification (when classified), whether the failure only
	// concerns the request, Envoy's response details when Envoy reported it, the time to
	// the response.
	classified  bool
	verdict     failure.Verdict
	requestOnly bool
	envoy       string
	ttfb        time.Duration
}

// The next action of a decision line (logFailure's next).
const (
	nextFailover = "failover to "
	nextAnswer   = "answer "
	nextWait     = "wait out the rate limit, then retry" // comboCooldownWait after a failure
	nextNone     = "none: the client has the response"   // a committed stream's failure
)

// logFailure writes the decision line of a failed attempt on failed, and its details at
// debug. next is what the request does now (nextFailover or nextAnswer, completed by
// nextTarget or nextStatus and nextCode). The lines are built in the plugin's reused buffer
// and handed to the host as they are: a failed attempt's log costs two host calls and no
// allocation once the buffer has grown.
func (h *httpContext) logFailure(failed engine.Target, fl *failureLog, next string, nextTarget *engine.Target, nextStatus int, nextCode string) {
	p := h.plugin
	pv := &p.res.Providers[failed.Provider]
	b := append(p.logBuf[:0], "spillway: attempt failed: request="...)
	b = appendQuoteOrDash(b, h.requestID)
	b = append(b, " provider="...)
	b = append(b, pv.ID...)
	b = append(b, " connection="...)
	b = append(b, pv.Connections[failed.Connection].ID...)
	b = append(b, " model="...)
	b = strconv.AppendQuote(b, failed.Model)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(fl.status), 10)
	if fl.restatedTo != 0 {
		b = append(b, "->"...)
		b = strconv.AppendInt(b, int64(fl.restatedTo), 10)
	}
	b = append(b, " reason="...)
	b = append(b, fl.reason...)
	b = append(b, ` set="`...)
	b = appendEffects(b, fl.effects, p.clock())
	b = append(b, `" next="`...)
	b = append(b, next...)
	switch {
	case nextTarget != nil:
		npv := &p.res.Providers[nextTarget.Provider]
		b = append(b, npv.ID...)
		b = append(b, '/')
		b = append(b, npv.Connections[nextTarget.Connection].ID...)
	case nextStatus != 0:
		b = strconv.AppendInt(b, int64(nextStatus), 10)
		if nextCode != "" {
			b = append(b, ' ')
			b = append(b, nextCode...)
		}
	}
	b = append(b, '"')
	if err := hostabi.Log(hostabi.LogInfo, b); err != nil {
		proxywasm.LogDebugf("spillway: log: %v", err)
	}

	b = append(b[:0], "spillway: attempt failed (details): request="...)
	b = appendQuoteOrDash(b, h.requestID)
	b = append(b, " attempt="...)
	attempt := fl.attempt
	if attempt == 0 {
		attempt = h.attempts
	}
	b = strconv.AppendInt(b, int64(attempt), 10)
	b = append(b, " ttfb="...)
	b = appendDuration(b, fl.ttfb)
	if fl.classified {
		v := &fl.verdict
		b = append(b, " scope="...)
		b = append(b, v.Scope...)
		b = append(b, " fallback="...)
		b = strconv.AppendBool(b, v.Fallback)
		b = append(b, " counts_breaker="...)
		b = strconv.AppendBool(b, v.CountBreaker)
		if v.RetryHint > 0 {
			b = append(b, " retry_hint="...)
			b = appendDuration(b, v.RetryHint)
		}
		if v.Terminal != "" {
			b = append(b, " terminal="...)
			b = append(b, v.Terminal...)
		}
		if v.RuleID != "" {
			b = append(b, " rule="...)
			b = append(b, v.RuleID...)
		}
	}
	if fl.requestOnly {
		b = append(b, " model_not_served=true"...)
	}
	if fl.envoy != "" {
		b = append(b, " envoy_details="...)
		b = strconv.AppendQuote(b, fl.envoy)
	}
	_ = hostabi.Log(hostabi.LogDebug, b)
	p.logBuf = b
}

// appendQuoteOrDash appends a value from the client quoted, "-" for none.
func appendQuoteOrDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return strconv.AppendQuote(b, s)
}

// appendEffects says what a failure left in the layers it reached, as of now (to the
// millisecond, as the layers store their times): "breaker OPEN", "cooldown 3s", "terminal
// banned", "lockout exact:gpt-4o 2m0s", comma-separated, or "none".
func appendEffects(b []byte, fx engine.Effects, now time.Time) []byte {
	now = now.Truncate(time.Millisecond)
	start := len(b)
	sep := func(b []byte) []byte {
		if len(b) > start {
			b = append(b, ", "...)
		}
		return b
	}
	if fx.BreakerCounted && fx.Breaker != breaker.Closed {
		b = append(b, "breaker "...)
		b = append(b, fx.Breaker.String()...)
	}
	if fx.ConnectionRecorded {
		switch a := fx.Connection; {
		case a.Status.Terminal():
			b = append(sep(b), "terminal "...)
			b = append(b, a.Status...)
		case a.Status == conncooldown.StatusUnavailable:
			b = append(sep(b), "cooldown "...)
			b = appendDuration(b, a.Until.Sub(now))
		}
	}
	if fx.Locked {
		l := &fx.Lockout
		b = append(sep(b), "lockout "...)
		b = append(b, l.Scope...)
		b = append(b, ':')
		b = append(b, l.Name...)
		b = append(b, ' ')
		b = appendDuration(b, l.Until.Sub(now))
	}
	if len(b) == start {
		b = append(b, "none"...)
	}
	return b
}

// appendDuration appends a time in seconds to the millisecond: "3s", "1.5s", "0.042s",
// "120s" (negative as 0).
func appendDuration(b []byte, d time.Duration) []byte {
	ms := max(d, 0).Round(time.Millisecond).Milliseconds()
	b = strconv.AppendInt(b, ms/1000, 10)
	if frac := ms % 1000; frac != 0 {
		b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
		for b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
	}
	return append(b, 's')
}

// policySummary is the policy-load line's description of a policy: its size and the
// layers that are on. It names no credential and no token.
func policySummary(res *policies.Resolved) string {
	conns := 0
	for i := range res.Providers {
		conns += len(res.Providers[i].Connections)
	}
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(res.Providers)) + " providers, " + strconv.Itoa(conns) + " connections, " +
		strconv.Itoa(len(res.Routes)) + " routes")
	b.WriteString("; model lockout " + onOff(res.ModelLockout.Enabled))
	b.WriteString(", provider cooldown gate " + onOff(res.ProviderCooldownEnabled))
	b.WriteString(", throughput watchdog " + onOff(res.ThroughputWatchdog.Enabled))
	if res.SessionAffinityTTL > 0 {
		b.WriteString(", session affinity " + res.SessionAffinityTTL.String())
	} else {
		b.WriteString(", session affinity off")
	}
	if res.Admin.Enabled {
		b.WriteString("; admin API at " + res.Admin.PathPrefix)
	} else {
		b.WriteString("; admin API off (no token)")
	}
	return b.String()
}
