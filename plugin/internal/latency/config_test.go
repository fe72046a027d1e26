package latency

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

func TestConfigFromMapsEveryField(t *testing.T) {
	s := policies.P2CLatencySettings{Weight: 9, Samples: 12, Window: 3 * time.Minute, MinSamples: 5}
	if got, want := ConfigFrom(s), (Config{Samples: 12, Window: 3 * time.Minute, MinSamples: 5, MaxTracked: DefaultMaxTracked}); got != want {
		t.Errorf("ConfigFrom = %+v, want %+v", got, want)
	}
	if got, want := DefaultConfig(), ConfigFrom(policies.Defaults().P2CLatency); got != want || got.MinSamples != 3 {
		t.Errorf("DefaultConfig = %+v, want the resolved default %+v with 3 minimum samples", got, want)
	}
}

func TestTrackerMinSamples(t *testing.T) {
	tests := []struct {
		name string // case
		min  int    // Config.MinSamples
		want int    // Tracker.MinSamples (-1: NewTracker rejects it)
	}{
		{"unset is guide §2's 3", 0, 3},
		{"configured", 5, 5},
		{"as many as the window holds", 20, 20},
		{"more than the window holds", 21, -1},
		{"negative", -1, -1},
	}
	for _, tc := range tests {
		tr, err := NewTracker(Config{Samples: 20, Window: time.Minute, MinSamples: tc.min})
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("%s: accepted", tc.name)
		case tc.want >= 0 && (err != nil || tr.MinSamples() != tc.want):
			t.Errorf("%s: MinSamples %v, err %v; want %d", tc.name, tr, err, tc.want)
		}
	}
}
