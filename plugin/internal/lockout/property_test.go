package lockout

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

var propModels = []string{"gpt-5-mini", "gpt-5.1", "gpt-4o", "models/gemini", "gemini"}

var propVerdicts = []failure.Verdict{
	v429, v403, v404, v502, v500, v503(),
	{Status: 403, Reason: failure.ReasonAuthError, Scope: failure.ScopeModel, Cooldown: 6 * time.Hour},
	{Status: 429, Reason: failure.ReasonRateLimit, Scope: failure.ScopeExact},
	{Status: 429, Reason: failure.ReasonQuotaExhausted, Cooldown: 12 * time.Hour, QuotaWindow: true},
}

var propSources = []failure.HintSource{failure.HintNone, failure.HintRetryAfter, failure.HintGoogleRetryInfo,
	failure.HintBodyText, failure.HintRestatement}

func drawConfig(t *rapid.T) Config {
	c := enabled()
	c.Enabled = rapid.Bool().Draw(t, "enabled")
	ms := func(lo, hi time.Duration, label string) time.Duration {
		return time.Millisecond * time.Duration(rapid.Int64Range(lo.Milliseconds(), hi.Milliseconds()).Draw(t, label))
	}
	c.MaxCooldown = ms(time.Second, maxCooldownLimit, "max")
	c.BaseCooldown = max(ms(time.Millisecond, c.MaxCooldown, "base")>>rapid.IntRange(0, 6).Draw(t, "shift"), time.Millisecond).Truncate(time.Millisecond)
	c.MaxBackoffSteps = rapid.IntRange(0, maxBackoffStepsLimit).Draw(t, "steps")
	c.UseExponentialBackoff = rapid.Bool().Draw(t, "exponential")
	c.LongRetryCap = ms(time.Second, maxLongRetryCap, "longCap")
	c.EscalationWindow = ms(0, time.Hour, "window")
	c.Family = codexFamilies.Family
	return c
}

// Random failures, successes and clock moves; after each event every model's lockout stays
// within its cap, its count within the steps, and Locked agrees with the lock records.
func TestPropertyLockoutNeverOutlivesItsCap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		f := newFixture(t, cfg, propModels...)
		longHints, windows := false, false
		n := rapid.IntRange(1, 50).Draw(t, "events")
		for i := 0; i < n; i++ {
			switch rapid.IntRange(0, 2).Draw(t, "advanceKind") {
			case 0:
				f.clock.Advance(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "advance")))
			case 1:
				f.clock.Advance(maxLongRetryCap + 2*time.Hour) // past everything
			}
			model := rapid.SampledFrom(propModels).Draw(t, "model")
			if rapid.IntRange(0, 3).Draw(t, "op") == 0 {
				f.succeed(t, model)
			} else {
				v := rapid.SampledFrom(propVerdicts).Draw(t, "verdict")
				v.HintSource = rapid.SampledFrom(propSources).Draw(t, "source")
				v.RetryHint = time.Duration(rapid.Int64Range(0, int64(10*24*time.Hour)).Draw(t, "hint"))
				longHints = longHints || v.HintSource == failure.HintGoogleRetryInfo
				windows = windows || v.QuotaWindow
				started := f.clock.Now()
				if rapid.Bool().Draw(t, "overlapping") {
					started = started.Add(-time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "startedAgo")))
				}
				if _, err := f.tr.RecordFailure(f.conn, Failure{Model: model, Verdict: v, Started: started}); err != nil {
					t.Fatal(err)
				}
			}
			limit := cfg.MaxCooldown
			if longHints {
				limit = max(limit, cfg.LongRetryCap)
			}
			if windows {
				limit = max(limit, failure.MaxQuotaWindow)
			}
			now := f.clock.Now()
			for _, m := range propModels {
				l, ok := f.locked(t, m)
				if !ok {
					continue
				}
				if left := l.Until.Sub(now); left <= 0 || left > limit {
					t.Fatalf("%s locked for %v more, cap %v", m, left, limit)
				}
				if l.FailureCount < 0 || l.FailureCount > cfg.MaxBackoffSteps+1 {
					t.Fatalf("%s failure count %d beyond %d steps", m, l.FailureCount, cfg.MaxBackoffSteps)
				}
			}
			for _, m := range propModels {
				active := false
				for _, k := range f.tr.candidates(m) {
					rec, ok, err := f.tr.readLock(f.conn, indexEntry{scope: k.scope, name: k.name})
					if err != nil {
						t.Fatal(err)
					}
					active = active || (ok && rec.until > now.UnixMilli())
				}
				if _, locked := f.locked(t, m); locked != active {
					t.Fatalf("%s: Locked %v but lock records active %v", m, locked, active)
				}
			}
		}
	})
}

// The pure transition never escalates an overlapping failure and never sets a lockout beyond
// the caps.
func TestPropertyApplyFailureBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		tr := newFixture(t, cfg).tr
		now := rapid.Int64Range(1, 1<<40).Draw(t, "now")
		prev := lock{}
		if rapid.Bool().Draw(t, "existing") {
			prev = lock{
				count:    rapid.IntRange(1, cfg.MaxBackoffSteps+1).Draw(t, "count"),
				until:    rapid.Int64Range(1, now+int64(time.Hour/time.Millisecond)).Draw(t, "until"),
				lockedAt: rapid.Int64Range(1, now).Draw(t, "lockedAt"),
			}
		}
		v := rapid.SampledFrom(propVerdicts).Draw(t, "verdict")
		v.HintSource = rapid.SampledFrom(propSources).Draw(t, "source")
		v.RetryHint = time.Duration(rapid.Int64Range(0, int64(10*24*time.Hour)).Draw(t, "hint"))
		// As in RecordFailure: a long hint exceeds a budget of at least 0.
		long := v.HintSource == failure.HintGoogleRetryInfo && v.RetryHint > 0 && rapid.Bool().Draw(t, "long")
		started := rapid.Int64Range(0, now).Draw(t, "started")
		next, counted, write := tr.applyFailure(prev, v, long, started, now)
		overlapping := prev.until > now || (started != 0 && prev.lockedAt != 0 && started < prev.lockedAt)
		if overlapping && (counted || next.count != prev.count) {
			t.Fatalf("overlapping failure escalated: %+v -> %+v", prev, next)
		}
		if !write {
			if next != prev {
				t.Fatalf("kept lock changed: %+v -> %+v", prev, next)
			}
			return
		}
		limit := cfg.MaxCooldown
		switch {
		case long:
			limit = cfg.LongRetryCap
		case v.QuotaWindow:
			limit = failure.MaxQuotaWindow
		}
		if d := next.until - now; d <= 0 || d > limit.Milliseconds() {
			t.Fatalf("lockout of %dms, cap %v", d, limit)
		}
		if next.until < prev.until {
			t.Fatalf("lockout shortened: %d -> %d", prev.until, next.until)
		}
	})
}

// Any sequence of failures of client-chosen names — refused as unknown, rate-limited, failed
// by the server, each possibly seen served by its worker — leaves a served model's lockout in
// place until it ends, unless another served name took its slot; and the pool never holds
// more keys than its slots (issue 18, the package doc's guarantee).
func TestPropertyServedLockoutsOutliveJunk(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newFixture(t, enabled())
		keys := recordKeys(f)
		real := Failure{Model: "real", Verdict: rapid.SampledFrom([]failure.Verdict{v429, v502, v503()}).Draw(t, "realVerdict"),
			Served: true}
		out, err := f.tr.RecordFailure(f.conn, real)
		if err != nil || !out.Locked {
			t.Fatalf("the served model's failure: %+v %v", out, err)
		}
		until := out.Lock.Until
		servedJunk := false
		n := rapid.IntRange(1, 3*InventedSlots).Draw(t, "junk")
		for i := 0; i < n; i++ {
			f.clock.Advance(time.Duration(rapid.Int64Range(0, int64(5*time.Second)).Draw(t, "advance")))
			served := rapid.IntRange(0, 9).Draw(t, "servedJunk") == 0
			servedJunk = servedJunk || served
			v := rapid.SampledFrom([]failure.Verdict{v404, v429, v502, v403, v503()}).Draw(t, "verdict")
			name := fmt.Sprintf("junk-%d", rapid.IntRange(0, 2*InventedSlots).Draw(t, "name"))
			if _, err := f.tr.RecordFailure(f.conn, Failure{Model: name, Verdict: v, Started: f.clock.Now(), Served: served}); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.locked(t, "real"); !ok && f.clock.Now().Before(until) && !servedJunk {
				t.Fatalf("after %d junk failures the served model's lockout is gone %v before its end", i+1, until.Sub(f.clock.Now()))
			}
			if len(keys) > 1+InventedSlots {
				t.Fatalf("%d keys written", len(keys))
			}
		}
	})
}

// Whatever names a client chooses — a real model's name behind a prefix, a name in its
// family, its bare name — and however the provider refuses them without metering them (not
// found, auth, a rule's declared scope, a server error), no lockout ever covers a configured
// or served model (issue 18; the package doc's rule for names without evidence).
func TestPropertyANameWithoutEvidenceNeverLocksAnother(t *testing.T) {
	configured := []string{"gpt-5-mini", "claude-sonnet-4-5"}
	served := []string{"gpt-5.1", "models/gemini-2.5-pro"} // client-chosen names the provider served: no failure of theirs below
	real := append(append([]string(nil), configured...), served...)
	unmetered := []failure.Verdict{v404, v403, v502, v500,
		{Status: 400, Reason: failure.ReasonBadRequest, Scope: failure.ScopeModel},
		{Status: 403, Reason: failure.ReasonAuthError, Scope: failure.ScopeModel, Cooldown: 6 * time.Hour},
		{Status: 404, Reason: failure.ReasonNotFound, Scope: failure.ScopeQuotaFamily},
		{Status: 504, Reason: failure.ReasonTimeout, Scope: failure.ScopeModel}}
	rapid.Check(t, func(t *rapid.T) {
		cfg := enabled()
		cfg.Family = codexFamilies.Family
		f := newFixture(t, cfg, configured...)
		n := rapid.IntRange(1, 3*InventedSlots).Draw(t, "failures")
		for i := 0; i < n; i++ {
			name := rapid.SampledFrom([]string{"", "x/", "claude-x/", "models/", "a/b/"}).Draw(t, "prefix") +
				rapid.SampledFrom(append([]string{"gpt-5", "claude", "gemini-2.5-pro", "codex"}, real...)).Draw(t, "stem") +
				rapid.SampledFrom([]string{"", "-junk", "/gpt-5-mini", "/claude-sonnet-4-5"}).Draw(t, "suffix")
			if slices.Contains(real, name) {
				continue // a real model's own failure: the guide's rules
			}
			f.clock.Advance(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "advance")))
			v := rapid.SampledFrom(unmetered).Draw(t, "verdict")
			if _, err := f.tr.RecordFailure(f.conn, Failure{Model: name, Verdict: v, Started: f.clock.Now()}); err != nil {
				t.Fatal(err)
			}
			for _, m := range real {
				if l, ok := f.locked(t, m); ok {
					t.Fatalf("%d %s of %q locked %s: %+v", v.Status, v.Reason, name, m, l)
				}
			}
		}
	})
}
