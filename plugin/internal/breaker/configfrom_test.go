package breaker

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	s := policies.BreakerSettings{
		DegradationThreshold: 2, FailureThreshold: 3, ResetTimeout: 4 * time.Second,
		CooldownByKind:       map[string]time.Duration{"timeout": 5 * time.Second, "transport_error": 6 * time.Second},
		MaxBackoffMultiplier: 7, RecoverySuccesses: 8, ProbeTimeout: 9 * time.Second, TripStatuses: []int{502, 503},
	}
	got, err := ConfigFrom(s)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{DegradationThreshold: 2, FailureThreshold: 3, ResetTimeout: 4 * time.Second,
		MaxBackoffMultiplier: 7, RecoverySuccesses: 8, ProbeTimeout: 9 * time.Second, TripStatuses: []int{502, 503}}
	want.CooldownByKind[KindTimeout] = 5 * time.Second
	want.CooldownByKind[KindTransport] = 6 * time.Second
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
	s.TripStatuses[0] = 500
	if got.TripStatuses[0] != 502 {
		t.Error("ConfigFrom shares the settings' trip statuses")
	}
	if _, err := ConfigFrom(policies.BreakerSettings{CooldownByKind: map[string]time.Duration{"rate_limit": time.Second}}); err == nil ||
		!strings.HasPrefix(err.Error(), "breaker: ") {
		t.Errorf("unknown kind: err %v", err)
	}
}

func TestDefaultConfigIsTheResolvedDefault(t *testing.T) {
	for _, p := range policies.Profiles {
		d, _ := policies.ProfileDefaults(p)
		want, _ := ConfigFrom(d.Breaker)
		got, err := DefaultConfig(p)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: DefaultConfig = %+v, %v; want the policies table's row %+v", p, got, err, want)
		}
	}
}
