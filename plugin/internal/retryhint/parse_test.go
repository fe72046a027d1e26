package retryhint

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

// now is the fixed clock of every test: 2025-06-01T12:00:00Z, Unix 1748779200.
var now = testfixture.T0

// parseCase is one row of a parser table.
type parseCase struct {
	in   string        // the value as the upstream sent it
	want time.Duration // the delay expected; ignored when ok is false
	ok   bool          // whether a hint is expected at all
}

func runParseTable(t *testing.T, name string, parse func(string) (time.Duration, bool), cases []parseCase) {
	t.Helper()
	for _, c := range cases {
		got, ok := parse(c.in)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s(%q) = %v, %v; want %v, %v", name, c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestParseDuration(t *testing.T) {
	runParseTable(t, "ParseDuration", ParseDuration, []parseCase{
		{"30", 30 * time.Second, true},                                    // bare number: seconds
		{"1.5", 1500 * time.Millisecond, true},                            // bare decimal seconds
		{"30s", 30 * time.Second, true},                                   // Go-style seconds
		{"1m30s", 90 * time.Second, true},                                 // Go-style compound
		{"6m0s", 6 * time.Minute, true},                                   // OpenAI x-ratelimit-reset-requests
		{"17ms", 17 * time.Millisecond, true},                             // OpenAI sub-second reset
		{"2h30m14s", 2*time.Hour + 30*time.Minute + 14*time.Second, true}, // reset text form
		{"31.123456s", 31123456 * time.Microsecond, true},                 // Gemini fractional
		{"12µs", 12 * time.Microsecond, true},                             // Go writes µs
		{"250us", 250 * time.Microsecond, true},                           // ASCII micro
		{"1d", 24 * time.Hour, true},                                      // days
		{"20 seconds", 20 * time.Second, true},                            // worded unit
		{"2 hours 5 minutes", 2*time.Hour + 5*time.Minute, true},          // worded compound
		{"1 hour, 5 mins", time.Hour + 5*time.Minute, true},               // comma separated
		{"1h and 30m", 90 * time.Minute, true},                            // "and" separated
		{" 45s ", 45 * time.Second, true},                                 // surrounding blanks
		{"100000h", MaxDelay, true},                                       // huge: clamped
		{"99999999999999999999999999s", MaxDelay, true},                   // overflow: saturates, clamped
		{"0", 0, false},        // zero is no hint
		{"0s", 0, false},       // zero with unit
		{"-5", 0, false},       // negative
		{"-5s", 0, false},      // negative with unit
		{"+5", 0, false},       // explicit sign
		{"1e3", 0, false},      // exponent
		{"5 months", 0, false}, // unknown unit
		{"5x", 0, false},       // unknown unit letter
		{"s", 0, false},        // unit without number
		{".5s", 0, false},      // no whole digits
		{"5.s", 0, false},      // no fraction digits
		{"", 0, false},         // empty
		{"soon", 0, false},     // words
		{"30 40", 0, false},    // two bare numbers
	})
}

func TestParseISO8601(t *testing.T) {
	runParseTable(t, "ParseISO8601", ParseISO8601, []parseCase{
		{"PT30S", 30 * time.Second, true},                          // seconds
		{"PT1M30.5S", 90*time.Second + 500*time.Millisecond, true}, // minutes and fractional seconds
		{"pt2h", 2 * time.Hour, true},                              // lower case
		{"P0DT2H", 2 * time.Hour, true},                            // days and hours
		{"P1DT2H", MaxDelay, true},                                 // 26 h: clamped
		{"P1W", MaxDelay, true},                                    // a week: clamped
		{"PT0S", 0, false},                                         // zero
		{"P1M", 0, false},                                          // months have no fixed length
		{"P1Y", 0, false},                                          // years neither
		{"PT", 0, false},                                           // no terms
		{"P", 0, false},                                            // nothing
		{"PT5", 0, false},                                          // number without designator
		{"PT1H2H", 3 * time.Hour, true},                            // repeated designators add up
		{"PTT5S", 0, false},                                        // double T
		{"PT-5S", 0, false},                                        // negative
		{"30S", 0, false},                                          // missing P
	})
}

func TestParseRetryAfter(t *testing.T) {
	parse := func(s string) (time.Duration, bool) { return ParseRetryAfter(s, now) }
	runParseTable(t, "ParseRetryAfter", parse, []parseCase{
		{"120", 120 * time.Second, true},                           // delta seconds (RFC 9110)
		{"1.5", 1500 * time.Millisecond, true},                     // fractional seconds
		{"60s", time.Minute, true},                                 // Groq-style unit
		{"5m", 5 * time.Minute, true},                              // minutes, not 5 seconds
		{"Sun, 01 Jun 2025 12:01:30 GMT", 90 * time.Second, true},  // IMF-fixdate
		{"Sunday, 01-Jun-25 12:00:10 GMT", 10 * time.Second, true}, // RFC 850
		{"Sun Jun  1 12:00:05 2025", 5 * time.Second, true},        // asctime
		{"2025-06-01T12:00:07Z", 7 * time.Second, true},            // RFC 3339
		{"Sun, 01 Jun 2025 11:59:00 GMT", 0, false},                // date in the past
		{"Sun, 01 Jun 2025 12:00:00 GMT", 0, false},                // date now
		{"Mon, 01 Jun 2026 12:00:00 GMT", MaxDelay, true},          // a year ahead: clamped
		{"0", 0, false},                             // zero
		{"-1", 0, false},                            // negative
		{"86400000000", MaxDelay, true},             // huge seconds: clamped
		{"", 0, false},                              // empty
		{"later", 0, false},                         // garbage
		{"Sun, 99 Jun 2025 12:00:00 GMT", 0, false}, // invalid date
	})
}

func TestParseReset(t *testing.T) {
	parse := func(s string) (time.Duration, bool) { return ParseReset(s, now, false) }
	runParseTable(t, "ParseReset", parse, []parseCase{
		{"30", 30 * time.Second, true},                           // delta seconds
		{"1m30s", 90 * time.Second, true},                        // Go-style duration
		{"6m0s", 6 * time.Minute, true},                          // OpenAI reset-requests
		{"20ms", 20 * time.Millisecond, true},                    // OpenAI reset-tokens
		{"1748779260", time.Minute, true},                        // epoch seconds, 60 s ahead
		{"1748779200500", 500 * time.Millisecond, true},          // epoch milliseconds, 0.5 s ahead
		{"1748779100", 0, false},                                 // epoch seconds in the past
		{"2025-06-01T12:00:42Z", 42 * time.Second, true},         // RFC 3339 (Anthropic)
		{"2025-06-01T14:00:42+02:00", 42 * time.Second, true},    // RFC 3339 with offset
		{"Sun, 01 Jun 2025 12:00:03 GMT", 3 * time.Second, true}, // HTTP date
		{"999999999", MaxDelay, true},                            // below the epoch cut: delta, clamped
		{"99999999999999999999999", 0, false},                    // saturated epoch: not a time
		{"0", 0, false},                                          // zero
		{"-30", 0, false},                                        // negative
		{"abc", 0, false},                                        // garbage
	})
	millis := func(s string) (time.Duration, bool) { return ParseReset(s, now, true) }
	runParseTable(t, "ParseReset(millis)", millis, []parseCase{
		{"1500", 1500 * time.Millisecond, true}, // *-ms header: milliseconds
		{"2.5", 2500 * time.Microsecond, true},  // fractional milliseconds
		{"0", 0, false},                         // zero
	})
}
