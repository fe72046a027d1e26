package combo

import "github.com/spillwayproxy/spillway/policies"

// ConfigFrom converts the resolved cooldown-aware combo retry settings into a Config: the
// one conversion from policy settings to the combo wait.
func ConfigFrom(s policies.ComboCooldownWaitSettings) Config {
	return Config{Enabled: s.Enabled, MaxWait: s.MaxWait, MaxAttempts: s.MaxAttempts, Budget: s.Budget}
}
