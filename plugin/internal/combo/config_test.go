package combo

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	s := policies.ComboCooldownWaitSettings{Enabled: true, MaxWait: 2 * time.Second, MaxAttempts: 3, Budget: 4 * time.Second}
	if got, want := ConfigFrom(s), (Config{Enabled: true, MaxWait: 2 * time.Second, MaxAttempts: 3, Budget: 4 * time.Second}); got != want {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
	if got, want := DefaultConfig(), ConfigFrom(policies.Defaults().ComboCooldownWait); got != want {
		t.Errorf("DefaultConfig = %+v, want the resolved default %+v", got, want)
	}
}
