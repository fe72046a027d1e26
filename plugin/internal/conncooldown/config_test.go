package conncooldown

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	s := policies.ConnectionCooldownSettings{BaseCooldown: 2 * time.Second, MaxBackoffSteps: 3, MaxCooldown: 4 * time.Minute,
		UseUpstreamRetryHints: true, StreamStallCooldown: true, ConcurrencyLimitCooldown: 5 * time.Second,
		ExpiredRetryMax: 6, RequestRejectedStreak: 7}
	want := Config{BaseCooldown: 2 * time.Second, MaxBackoffSteps: 3, MaxCooldown: 4 * time.Minute, PreferRetryHint: true,
		ConcurrencyLimitCooldown: 5 * time.Second, ExpiredRetryMax: 6, RequestRejectedStreak: 7, StreamStallCooldown: true,
		ProbeTimeout: 8 * time.Second}
	if got := ConfigFrom(s, 8*time.Second); got != want {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
}

func TestDefaultConfigIsTheResolvedDefault(t *testing.T) {
	for _, p := range policies.Profiles {
		d, _ := policies.ProfileDefaults(p)
		if got, want := DefaultConfig(p), ConfigFrom(d.ConnectionCooldown, d.Breaker.ProbeTimeout); got != want {
			t.Errorf("%s: DefaultConfig = %+v, want %+v", p, got, want)
		}
	}
	api, _ := policies.ProfileDefaults(policies.ProfileAPIKey)
	if got := DefaultConfig("gold"); got != ConfigFrom(api.ConnectionCooldown, api.Breaker.ProbeTimeout) {
		t.Errorf("unknown profile = %+v, want the apikey row", got)
	}
}
