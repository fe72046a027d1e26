package affinity

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	r := &policies.Resolved{SessionAffinityTTL: 2 * time.Minute, SessionAffinityRefreshInterval: 3 * time.Second, SessionAffinitySlots: 4}
	if got, want := ConfigFrom(r), (Config{TTL: 2 * time.Minute, RefreshInterval: 3 * time.Second, Slots: 4}); got != want {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
	d := ConfigFrom(policies.Defaults())
	if d.TTL != 0 || d.RefreshInterval != policies.SessionAffinityRefreshInterval || d.Slots != policies.SessionAffinitySlots {
		t.Errorf("defaults = %+v, want affinity off with the policies refresh interval and slots", d)
	}
}
