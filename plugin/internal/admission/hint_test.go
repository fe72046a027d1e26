package admission

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
)

func TestDecideRetryHint(t *testing.T) {
	tests := []struct {
		name      string
		hint      time.Duration      // the upstream's own wait
		source    failure.HintSource // where it came from
		remaining time.Duration      // the caller's queue wait budget left
		want      HintAction
	}{
		{name: "no hint", hint: 0, source: failure.HintNone, remaining: 30 * time.Second, want: HintNone},
		{name: "a duration without a source is no hint", hint: time.Second, source: failure.HintNone, remaining: 30 * time.Second, want: HintNone},
		{name: "Gemini TPM window fits the 30 s budget", hint: 20 * time.Second, source: failure.HintGoogleRetryInfo, remaining: 30 * time.Second, want: HintPace},
		{name: "exactly the budget is still pacing", hint: 30 * time.Second, source: failure.HintBodyText, remaining: 30 * time.Second, want: HintPace},
		{name: "Gemini daily quota 86399s: lock the model", hint: 86399 * time.Second, source: failure.HintGoogleRetryInfo, remaining: 30 * time.Second, want: HintLockModel},
		{name: "plain-text long wait keeps the pause, rejects the waiter", hint: 2 * time.Minute, source: failure.HintBodyText, remaining: 30 * time.Second, want: HintRejectWaiter},
		{name: "Retry-After longer than what a waiter has left", hint: 20 * time.Second, source: failure.HintRetryAfter, remaining: 5 * time.Second, want: HintRejectWaiter},
	}
	for _, tc := range tests {
		if got := DecideRetryHint(tc.hint, tc.source, tc.remaining); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if HintLockModel.String() != "lock_model" || HintAction(99).String() != "unknown" {
		t.Error("hint action names changed")
	}
}
