package selection

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/policies"
)

func TestParseStrategy(t *testing.T) {
	tests := []struct {
		in   string   // policy text
		want Strategy // parsed strategy
		ok   bool     // whether it parses
	}{
		{in: "priority", want: Priority, ok: true},
		{in: "weighted", want: Weighted, ok: true},
		{in: "round-robin", want: RoundRobin, ok: true},
		{in: "fill-first", want: FillFirst, ok: true},
		{in: "random", want: Random, ok: true},
		{in: "strict-random", want: StrictRandom, ok: true},
		{in: "least-used", want: LeastUsed, ok: true},
		{in: "p2c", want: P2C, ok: true},
		{in: ""},
		{in: "Priority"},
		{in: "round_robin"},
		{in: "cost-optimized"}, // an OmniRoute strategy Spillway does not implement
		{in: " p2c"},
	}
	for _, tc := range tests {
		got, err := ParseStrategy(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseStrategy(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if !tc.ok && err != nil && !strings.HasPrefix(err.Error(), "selection: ") {
			t.Errorf("error %q lacks the package prefix", err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	if len(Strategies) != len(strategyNames) {
		t.Fatalf("Strategies lists %d, names %d", len(Strategies), len(strategyNames))
	}
}

func TestStrategyText(t *testing.T) {
	var v struct{ S Strategy }
	if err := json.Unmarshal([]byte(`{"S":"strict-random"}`), &v); err != nil || v.S != StrictRandom {
		t.Fatalf("unmarshal = %v, %v", v.S, err)
	}
	out, err := json.Marshal(v)
	if err != nil || string(out) != `{"S":"strict-random"}` {
		t.Fatalf("marshal = %s, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"S":"fastest"}`), &v); err == nil {
		t.Fatal("unknown strategy unmarshalled")
	}
	if _, err := Strategy(200).MarshalText(); err == nil {
		t.Fatal("out-of-range strategy marshalled")
	}
	if s := Strategy(200).String(); s != "Strategy(200)" {
		t.Fatalf("String() = %q", s)
	}
}

func TestNewCombo(t *testing.T) {
	tests := []struct {
		name string      // what the config shows
		cfg  ComboConfig // config to validate
		ok   bool        // whether NewCombo accepts it
	}{
		{name: "ordinary", cfg: ComboConfig{Name: "gpt-4o", Strategy: Weighted, Targets: 3}, ok: true},
		{name: "glob route name", cfg: ComboConfig{Name: "claude-*", Strategy: P2C, Targets: 1}, ok: true},
		{name: "max targets", cfg: ComboConfig{Name: "r", Targets: MaxTargets}, ok: true},
		{name: "empty name", cfg: ComboConfig{Targets: 1}},
		{name: "long name", cfg: ComboConfig{Name: strings.Repeat("x", MaxComboNameLength+1), Targets: 1}},
		{name: "control character", cfg: ComboConfig{Name: "a\nb", Targets: 1}},
		{name: "no targets", cfg: ComboConfig{Name: "r"}},
		{name: "too many targets", cfg: ComboConfig{Name: "r", Targets: MaxTargets + 1}},
		{name: "unknown strategy", cfg: ComboConfig{Name: "r", Strategy: 99, Targets: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCombo(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewCombo error = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrBadCombo) {
				t.Fatalf("error %v is not ErrBadCombo", err)
			}
			if tc.ok && c.Config() != tc.cfg {
				t.Fatalf("Config() = %+v, want %+v", c.Config(), tc.cfg)
			}
		})
	}
}

func TestPenaltiesStayAboveTheLatencyCap(t *testing.T) {
	// Guide: the latency term's cap stays below the quota-locked / quota-exhausted penalties.
	if !(policies.P2CLatencyWeightMax < PenaltyQuotaLocked && PenaltyQuotaLocked < PenaltyQuotaExhausted) {
		t.Fatalf("penalties %d, %d must exceed the %d-point latency cap, in order", PenaltyQuotaLocked, PenaltyQuotaExhausted, policies.P2CLatencyWeightMax)
	}
}
