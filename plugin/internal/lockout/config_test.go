package lockout

import (
	"reflect"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	s := policies.ModelLockoutSettings{Enabled: true, ErrorCodes: []int{429, 503}, BaseCooldown: 2 * time.Second,
		MaxCooldown: 3 * time.Minute, MaxBackoffSteps: 4, UseExponentialBackoff: true, LongRetryCap: 5 * time.Hour,
		EscalationWindow: 6 * time.Minute}
	got := ConfigFrom(s, policies.RequestQueueSettings{MaxWait: 7 * time.Second, ExecutionMaxWait: time.Hour, MaxQueueDepth: 9})
	want := Config{Enabled: true, ErrorCodes: []int{429, 503}, BaseCooldown: 2 * time.Second, MaxCooldown: 3 * time.Minute,
		MaxBackoffSteps: 4, UseExponentialBackoff: true, LongRetryCap: 5 * time.Hour, QueueMaxWait: 7 * time.Second,
		EscalationWindow: 6 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
	s.ErrorCodes[0] = 404
	if got.ErrorCodes[0] != 429 {
		t.Error("ConfigFrom shares the settings' error codes")
	}
}

func TestDefaultConfigIsTheResolvedDefault(t *testing.T) {
	d := policies.Defaults()
	if got, want := DefaultConfig(policies.ProfileOAuth), ConfigFrom(d.ModelLockout, d.RequestQueue); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultConfig = %+v, want %+v", got, want)
	}
	// The guide's numbers, and the escalation window of one default maximum lockout.
	c := DefaultConfig(policies.ProfileAPIKey)
	if c.Enabled || c.BaseCooldown != 120*time.Second || c.MaxCooldown != 30*time.Minute || c.MaxBackoffSteps != 10 ||
		!c.UseExponentialBackoff || c.EscalationWindow != 30*time.Minute || c.QueueMaxWait != 30*time.Second {
		t.Errorf("defaults = %+v", c)
	}
}
