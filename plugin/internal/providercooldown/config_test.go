package providercooldown

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	s := policies.ProviderCooldownSettings{FailureThreshold: 2, FailureWindow: 3 * time.Second, Cooldown: 4 * time.Second,
		MinRetryCooldown: 5 * time.Second, MaxRetryCooldown: 6 * time.Second}
	want := Config{Enabled: true, FailureThreshold: 2, FailureWindow: 3 * time.Second, Cooldown: 4 * time.Second,
		MinRetryCooldown: 5 * time.Second, MaxRetryCooldown: 6 * time.Second}
	if got := ConfigFrom(true, s); got != want {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
	if ConfigFrom(false, s).Enabled {
		t.Error("the policy-wide switch off still enables the gate")
	}
}

func TestDefaultConfigIsTheResolvedDefault(t *testing.T) {
	for _, p := range policies.Profiles {
		d, _ := policies.ProfileDefaults(p)
		got, err := DefaultConfig(p)
		if want := ConfigFrom(policies.ProviderCooldownEnabled, d.ProviderCooldown); err != nil || got != want {
			t.Errorf("%s: DefaultConfig = %+v, %v; want %+v", p, got, err, want)
		}
	}
	if _, err := DefaultConfig("gold"); err == nil {
		t.Error("unknown profile accepted")
	}
}
