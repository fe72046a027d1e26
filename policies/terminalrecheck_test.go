package policies

import (
	"testing"
	"time"
)

// resilience.terminalRecheck (issue 19): off unless the policy turns it on, the documented
// defaults otherwise, and every bound rejected at its field path.
func TestTerminalRecheckResolves(t *testing.T) {
	for _, tc := range []struct {
		name       string                  // the case
		resilience string                  // the policy's resilience block ("" = none)
		want       TerminalRecheckSettings // the resolved settings
	}{
		{name: "no block: off, with the documented defaults", want: TerminalRecheckSettings{
			Interval: 5 * time.Minute, MaxInterval: time.Hour, MaxPerTick: 1, Tick: time.Second, Timeout: 10 * time.Second}},
		{name: "enabled alone", resilience: `{"terminalRecheck":{"enabled":true}}`, want: TerminalRecheckSettings{Enabled: true,
			Interval: 5 * time.Minute, MaxInterval: time.Hour, MaxPerTick: 1, Tick: time.Second, Timeout: 10 * time.Second}},
		{name: "every field", resilience: `{"terminalRecheck":{"enabled":true,"intervalMs":60000,"maxIntervalMs":600000,"maxPerTick":3,"timeoutMs":2000}}`,
			want: TerminalRecheckSettings{Enabled: true, Interval: time.Minute, MaxInterval: 10 * time.Minute, MaxPerTick: 3,
				Tick: time.Second, Timeout: 2 * time.Second}},
		{name: "an interval above the default cap raises the unset cap to it", resilience: `{"terminalRecheck":{"intervalMs":7200000}}`,
			want: TerminalRecheckSettings{Interval: 2 * time.Hour, MaxInterval: 2 * time.Hour, MaxPerTick: 1, Tick: time.Second,
				Timeout: 10 * time.Second}},
	} {
		doc := minimal
		if tc.resilience != "" {
			doc = withResilience(tc.resilience)
		}
		got := mustParse(t, doc, ParseOptions{}).Resolved().TerminalRecheck
		if got != tc.want {
			t.Errorf("%s: resolved %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestTerminalRecheckRejectsOutOfRange(t *testing.T) {
	const p = "resilience.terminalRecheck."
	for _, tc := range []struct {
		block string // the terminalRecheck object
		path  string // the field the problem is reported at
		want  string // part of its message
	}{
		{`{"intervalMs":9999}`, p + "intervalMs", "between 10 s and 24 h"},
		{`{"intervalMs":86400001}`, p + "intervalMs", "between 10 s and 24 h"},
		{`{"maxIntervalMs":9999}`, p + "maxIntervalMs", "between 10 s and 24 h"},
		{`{"maxPerTick":0}`, p + "maxPerTick", "between 1 and 10"},
		{`{"maxPerTick":11}`, p + "maxPerTick", "between 1 and 10"},
		{`{"timeoutMs":999}`, p + "timeoutMs", "between 1 s and 1 min"},
		{`{"timeoutMs":60001}`, p + "timeoutMs", "between 1 s and 1 min"},
		{`{"intervalMs":600000,"maxIntervalMs":300000}`, p + "maxIntervalMs", "must not be below intervalMs"},
		{`{"maxIntervalMs":60000}`, p + "maxIntervalMs", "must not be below intervalMs"}, // the default interval is 5 min
		{`{"enabled":"yes"}`, p + "enabled", ""},
		{`{"interval":1000}`, p + "interval", ""}, // unknown field
	} {
		errs := parseErrors(t, withResilience(`{"terminalRecheck":`+tc.block+`}`), ParseOptions{})
		if !hasProblem(errs, tc.path, tc.want) {
			t.Errorf("%s: problems %v, want one at %s containing %q", tc.block, errs, tc.path, tc.want)
		}
	}
}
