package conncooldown

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/policies"
)

var anyVerdicts = []failure.Verdict{vServer, vRateLimit, vConcurrency, vStall, vRejected, vExpired, vBanned, vCredits,
	{Status: 403, Reason: failure.ReasonQuotaExhausted, Cooldown: 6 * time.Hour},
	{Status: 502, Reason: failure.ReasonTransport, KeepBackoff: true, Cooldown: 40 * time.Minute},
	vQuota(12 * time.Hour), vQuota(26 * time.Hour), vModelOnly, v401, vExpired401,
}

var transientVerdicts = []failure.Verdict{vServer, vRateLimit, vConcurrency, vStall,
	{Status: 403, Reason: failure.ReasonQuotaExhausted, Cooldown: 6 * time.Hour},
}

var hintSources = []failure.HintSource{failure.HintNone, failure.HintRetryAfter, failure.HintRateLimitReset,
	failure.HintGoogleRetryInfo, failure.HintBodyField, failure.HintBodyText, failure.HintRestatement, failure.HintRule}

func drawVerdict(t *rapid.T, from []failure.Verdict) failure.Verdict {
	v := rapid.SampledFrom(from).Draw(t, "verdict")
	if rapid.Bool().Draw(t, "hinted") {
		v.RetryHint = time.Duration(rapid.Int64Range(0, int64(48*time.Hour)).Draw(t, "hint"))
		v.HintSource = rapid.SampledFrom(hintSources).Draw(t, "source")
	}
	return v
}

func drawConfig(t *rapid.T) Config {
	c := DefaultConfig(rapid.SampledFrom(policies.Profiles).Draw(t, "profile"))
	c.MaxCooldown = time.Millisecond * time.Duration(rapid.Int64Range(1000, maxCooldownLimit.Milliseconds()).Draw(t, "maxMs"))
	// A base that is a random fraction of max divided by a small power of two, so the
	// ladder often crosses max a few steps in.
	frac := rapid.Int64Range(1, 1000).Draw(t, "baseFraction")
	c.BaseCooldown = max(time.Duration(int64(c.MaxCooldown)/1000*frac)>>rapid.IntRange(0, 6).Draw(t, "baseShift"), time.Millisecond).Truncate(time.Millisecond)
	c.ConcurrencyLimitCooldown = min(c.ConcurrencyLimitCooldown, c.MaxCooldown)
	c.MaxBackoffSteps = rapid.IntRange(0, maxBackoffStepsLimit).Draw(t, "steps")
	c.StreamStallCooldown = rapid.Bool().Draw(t, "stall")
	return c
}

// run drives a random sequence of failures, successes and clock moves, calling inv after each.
func run(t *rapid.T, f *fixture, verdicts []failure.Verdict, inv func(a Availability)) {
	n := rapid.IntRange(1, 60).Draw(t, "events")
	for i := 0; i < n; i++ {
		// Mostly: stay put (overlapping failures) or move past any cooldown (escalation).
		switch rapid.IntRange(0, 2).Draw(t, "advanceKind") {
		case 0:
			f.clock.Advance(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "advance")))
		case 1:
			f.clock.Advance(maxCooldownLimit + time.Second)
		}
		started := f.clock.Now()
		if rapid.Bool().Draw(t, "overlapping") {
			started = started.Add(-time.Duration(rapid.Int64Range(0, int64(2*time.Hour)).Draw(t, "startedAgo")))
		}
		if rapid.IntRange(0, 3).Draw(t, "op") == 0 {
			if err := f.tr.RecordSuccess(f.conn, started); err != nil {
				t.Fatal(err)
			}
		} else {
			v := drawVerdict(t, verdicts)
			if _, err := f.tr.RecordFailure(f.conn, Failure{Verdict: v, Started: started}); err != nil {
				t.Fatal(err)
			}
		}
		a, err := f.tr.Check(f.conn)
		if err != nil {
			t.Fatal(err)
		}
		inv(a)
	}
}

func TestPropertyTerminalNeverOverwritten(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := newFixture(t, drawConfig(t))
		run(t, f, transientVerdicts, func(Availability) {}) // any history first
		term := rapid.SampledFrom([]failure.Verdict{vBanned, vCredits}).Draw(t, "terminal")
		if _, err := f.tr.RecordFailure(f.conn, Failure{Verdict: term}); err != nil {
			t.Fatal(err)
		}
		want := f.check(t).Status
		if !want.Terminal() {
			t.Fatalf("terminal verdict gave %s", want)
		}
		run(t, f, anyVerdicts, func(a Availability) {
			if a.Status != want || a.Available() {
				t.Fatalf("terminal %s became %s", want, a.Status)
			}
		})
	})
}

func TestPropertyBackoffNeverExceedsMax(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		f := newFixture(t, cfg)
		run(t, f, anyVerdicts, func(a Availability) {
			limit := cfg.MaxCooldown
			if a.Reason == failure.ReasonQuotaExhausted {
				limit = max(limit, failure.MaxQuotaWindow) // an exhausted quota's own window
			}
			if a.RetryAfter < 0 || a.RetryAfter > limit {
				t.Fatalf("cooldown %v outside [0, %v]", a.RetryAfter, limit)
			}
			if a.BackoffLevel < 0 || a.BackoffLevel > cfg.MaxBackoffSteps {
				t.Fatalf("backoff level %d outside [0, %d]", a.BackoffLevel, cfg.MaxBackoffSteps)
			}
			if a.Status == StatusUnavailable && a.RetryAfter == 0 {
				t.Fatalf("cooling with nothing left")
			}
		})
	})
}

// A counted failure never shortens the cooldown the connection already has, and an uncounted
// one leaves the record untouched.
func TestPropertyApplyFailureMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		now := int64(rapid.Int64Range(1, 1<<40).Draw(t, "now"))
		cur := record{
			until: rapid.Int64Range(0, now+int64(time.Hour/time.Millisecond)).Draw(t, "until"),
			setAt: rapid.Int64Range(0, now).Draw(t, "setAt"),
			level: rapid.IntRange(0, cfg.MaxBackoffSteps).Draw(t, "level"),
		}
		v := drawVerdict(t, anyVerdicts)
		started := time.UnixMilli(rapid.Int64Range(1, now).Draw(t, "started"))
		next, write := cfg.applyFailure(cur, Failure{Verdict: v, Started: started}, now)
		if !write {
			if next != cur {
				t.Fatalf("uncounted failure changed the record: %+v -> %+v", cur, next)
			}
			return
		}
		if next.terminal == "" && next.until < cur.until {
			t.Fatalf("cooldown shortened: %d -> %d", cur.until, next.until)
		}
		limit := cfg.MaxCooldown
		if v.QuotaWindow {
			limit = failure.MaxQuotaWindow
		}
		if next.until != cur.until && next.until-now > limit.Milliseconds() {
			t.Fatalf("cooldown %dms beyond %v", next.until-now, limit)
		}
		// The level only falls back, to 0, when the upstream decided the wait.
		upstreamDecided := quotaWindow(v) > 0 || (cfg.PreferRetryHint && v.Status == 429 && v.UpstreamHint() > 0)
		if next.level > cfg.MaxBackoffSteps || (next.level < cur.level && !(next.level == 0 && upstreamDecided)) {
			t.Fatalf("level %d -> %d (max %d) for %+v", cur.level, next.level, cfg.MaxBackoffSteps, v)
		}
		if v.ModelOnly {
			t.Fatalf("a model-only failure was written: %+v", next)
		}
	})
}
