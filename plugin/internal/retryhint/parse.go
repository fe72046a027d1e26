package retryhint

import (
	"time"
)

// The grammar of the duration parsers, shared by headers, JSON fields and reset text:
// a decimal number (digits, optional fraction) followed by a unit. Negative numbers, signs
// and exponents are rejected. Overflow saturates at maxParse, and every hint is clamped to
// MaxDelay afterwards, so garbage can make a hint long but never wrap around.

// maxParse is where parsed values saturate: far above MaxDelay, far below overflow.
const maxParse = 1 << 62

// maxNumberLen bounds how many bytes one number may span; longer runs are garbage.
const maxNumberLen = 64

// number is a parsed non-negative decimal: whole part and up to 9 fraction digits.
type number struct {
	whole int64 // saturates at maxParse
	frac  int64 // fraction in units of 1e-9
	end   int   // index just past the number
}

// parseNumber parses a decimal number at s[at:]. It needs at least one digit before any
// '.', and at least one digit after it.
func parseNumber(s string, at int) (number, bool) {
	n := number{end: at}
	i := at
	for i < len(s) && isDigit(s[i]) {
		if n.whole < maxParse/10 {
			n.whole = n.whole*10 + int64(s[i]-'0')
		} else {
			n.whole = maxParse
		}
		i++
	}
	if i == at || i-at > maxNumberLen {
		return n, false
	}
	if i+1 < len(s) && s[i] == '.' && isDigit(s[i+1]) {
		i++
		scale := int64(1e8)
		start := i
		for i < len(s) && isDigit(s[i]) {
			if scale > 0 {
				n.frac += int64(s[i]-'0') * scale
				scale /= 10
			}
			i++
		}
		if i-start > maxNumberLen {
			return n, false
		}
	}
	n.end = i
	return n, true
}

// times returns the number multiplied by unit, saturating at maxParse.
func (n number) times(unit time.Duration) time.Duration {
	u := int64(unit)
	if n.whole > maxParse/u {
		return maxParse
	}
	d := n.whole * u
	// frac is in 1e-9 units: frac × unit / 1e9, split to avoid overflow for long units.
	d += (n.frac/1e3)*(u/1e6) + (n.frac%1e3)*u/1e9
	if d < 0 || d > maxParse {
		return maxParse
	}
	return time.Duration(d)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// unitOf maps a unit word (ASCII, any case) to its duration; 0 if unknown.
func unitOf(w string) time.Duration {
	if len(w) == 0 || len(w) > len("milliseconds") {
		return 0
	}
	var buf [12]byte
	for i := 0; i < len(w); i++ {
		buf[i] = w[i] | 0x20
	}
	switch string(buf[:len(w)]) {
	case "ns", "nanosecond", "nanoseconds":
		return time.Nanosecond
	case "us", "microsecond", "microseconds":
		return time.Microsecond
	case "ms", "msec", "msecs", "millisecond", "milliseconds":
		return time.Millisecond
	case "s", "sec", "secs", "second", "seconds":
		return time.Second
	case "m", "min", "mins", "minute", "minutes":
		return time.Minute
	case "h", "hr", "hrs", "hour", "hours":
		return time.Hour
	case "d", "day", "days":
		return 24 * time.Hour
	}
	return 0
}

// microSign is "µ" in UTF-8, as Go writes microseconds ("12µs").
const microSign = "\u00b5"

// parseUnit reads the unit after a number at s[at:]: a run of ASCII letters (or "µs"),
// optionally after one space. It returns the unit, or 0 when there is none, and the index
// past it.
func parseUnit(s string, at int) (time.Duration, int) {
	i := at
	if i < len(s) && s[i] == ' ' {
		i++
	}
	if i+len(microSign)+1 <= len(s) && s[i:i+len(microSign)] == microSign && (s[i+len(microSign)]|0x20) == 's' {
		return time.Microsecond, i + len(microSign) + 1
	}
	start := i
	for i < len(s) && isLetter(s[i]) {
		i++
	}
	if u := unitOf(s[start:i]); u != 0 {
		return u, i
	}
	return 0, at
}

// scanDuration reads a sequence of number-unit terms at s[at:] ("2h30m14s", "1 hour 5
// minutes", "1.5s", "20 seconds"). When bareSeconds is set, a lone number that is not
// followed by a word counts as seconds. It returns the sum, the index past the last term,
// and whether any term was read.
func scanDuration(s string, at int, bareSeconds bool) (time.Duration, int, bool) {
	var total time.Duration
	i, terms := at, 0
	for terms < maxTerms {
		j := i
		if terms > 0 {
			// Terms may be glued ("2h30m") or separated by " ", ", " or " and ".
			switch {
			case hasPrefixAt(s, j, ", "):
				j += 2
			case hasPrefixAt(s, j, " and "):
				j += 5
			case hasPrefixAt(s, j, " "):
				j++
			}
		}
		n, ok := parseNumber(s, j)
		if !ok {
			break
		}
		unit, end := parseUnit(s, n.end)
		if unit == 0 {
			if terms == 0 && bareSeconds && !wordFollows(s, n.end) {
				total, i, terms = n.times(time.Second), n.end, 1
			}
			break
		}
		total = saturatingAdd(total, n.times(unit))
		i = end
		terms++
	}
	return total, i, terms > 0
}

// maxTerms bounds the terms of one duration ("1d2h3m4s5ms" has five).
const maxTerms = 8

// wordFollows reports whether a letter or digit follows s[at:], after at most one space:
// then a number without a known unit is not a bare count of seconds ("5 months").
func wordFollows(s string, at int) bool {
	if at < len(s) && s[at] == ' ' {
		at++
	}
	return at < len(s) && (isLetter(s[at]) || isDigit(s[at]) || s[at] >= 0x80)
}

func hasPrefixAt(s string, at int, p string) bool {
	return at+len(p) <= len(s) && s[at:at+len(p)] == p
}

func saturatingAdd(a, b time.Duration) time.Duration {
	if a > maxParse-b {
		return maxParse
	}
	return a + b
}

// ParseDuration parses a whole value as a Go-style or worded duration: "1m30s", "6m0s",
// "20ms", "1.5s", "30 seconds", "2h 5m". A bare number is seconds ("30", "1.5"). The result
// is clamped to MaxDelay; ok is false for garbage, negatives and zero.
func ParseDuration(s string) (time.Duration, bool) {
	s = trimSpace(s)
	d, end, ok := scanDuration(s, 0, true)
	if !ok || end != len(s) {
		return 0, false
	}
	return clamp(d)
}

// ParseISO8601 parses an ISO-8601 duration such as "PT30S", "PT1M30.5S", "P1DT2H"
// (years and months are rejected: their length is not fixed). The result is clamped to
// MaxDelay; ok is false for garbage and zero.
func ParseISO8601(s string) (time.Duration, bool) {
	s = trimSpace(s)
	if len(s) < 3 || s[0]|0x20 != 'p' {
		return 0, false
	}
	var total time.Duration
	inTime, terms := false, 0
	for i := 1; i < len(s); {
		if s[i]|0x20 == 't' {
			if inTime {
				return 0, false
			}
			inTime = true
			i++
			continue
		}
		n, ok := parseNumber(s, i)
		if !ok || n.end >= len(s) {
			return 0, false
		}
		var unit time.Duration
		switch c := s[n.end] | 0x20; {
		case c == 'w' && !inTime:
			unit = 7 * 24 * time.Hour
		case c == 'd' && !inTime:
			unit = 24 * time.Hour
		case c == 'h' && inTime:
			unit = time.Hour
		case c == 'm' && inTime:
			unit = time.Minute
		case c == 's' && inTime:
			unit = time.Second
		default:
			return 0, false
		}
		total = saturatingAdd(total, n.times(unit))
		terms++
		i = n.end + 1
	}
	if terms == 0 {
		return 0, false
	}
	return clamp(total)
}

// ParseRetryAfter parses a Retry-After header value: delta seconds ("120", also "1.5"),
// a duration with a unit ("60s", "5m", as some gateways send), or an HTTP date, which is
// measured from now. The result is clamped to MaxDelay; ok is false for garbage, negatives,
// zero and dates not in the future.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = trimSpace(value)
	if value == "" {
		return 0, false
	}
	if isDigit(value[0]) {
		if d, ok := ParseDuration(value); ok {
			return d, true
		}
	}
	return parseDate(value, now)
}

// ParseReset parses a rate-limit reset header value (X-RateLimit-Reset,
// x-ratelimit-reset-requests, anthropic-ratelimit-*-reset, RateLimit-Reset):
//   - a Go-style or worded duration ("1m30s", "6m0s", "17ms");
//   - a bare number: epoch milliseconds (≥ 1e12), epoch seconds (≥ 1e9), otherwise delta
//     seconds, or delta milliseconds when millis is set (headers named *-ms);
//   - an RFC 3339 timestamp or HTTP date.
//
// Absolute times are measured from now. The result is clamped to MaxDelay; ok is false for
// garbage, negatives, zero and times not in the future.
func ParseReset(value string, now time.Time, millis bool) (time.Duration, bool) {
	value = trimSpace(value)
	if value == "" {
		return 0, false
	}
	if n, ok := parseNumber(value, 0); ok && n.end == len(value) {
		switch {
		case millis:
			return clamp(n.times(time.Millisecond))
		case n.whole >= 1e12:
			return untilEpoch(n.times(time.Millisecond), now)
		case n.whole >= 1e9:
			return untilEpoch(n.times(time.Second), now)
		default:
			return clamp(n.times(time.Second))
		}
	}
	if isDigit(value[0]) {
		if d, ok := ParseDuration(value); ok {
			return d, true
		}
	}
	return parseDate(value, now)
}

// untilEpoch turns an absolute Unix time (as a duration since the epoch) into a delay.
func untilEpoch(sinceEpoch time.Duration, now time.Time) (time.Duration, bool) {
	if sinceEpoch >= maxParse {
		return 0, false
	}
	return clamp(sinceEpoch - time.Duration(now.UnixNano()))
}

// dateLayouts are the absolute time formats upstreams send: IMF-fixdate (the HTTP date),
// the obsolete RFC 850 and asctime forms, and RFC 3339.
var dateLayouts = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	time.RFC1123,
	time.RFC850,
	time.ANSIC,
	time.RFC3339Nano,
}

// maxDateLen bounds the values parseDate tries; no valid date is longer.
const maxDateLen = 40

func parseDate(value string, now time.Time) (time.Duration, bool) {
	if len(value) > maxDateLen || len(value) < len("2006-01-02T15:04:05Z") {
		return 0, false
	}
	for _, layout := range dateLayouts {
		if t, err := time.Parse(layout, value); err == nil {
			return clamp(t.Sub(now))
		}
	}
	return 0, false
}

// clamp rejects non-positive delays and caps the rest at MaxDelay.
func clamp(d time.Duration) (time.Duration, bool) {
	switch {
	case d <= 0:
		return 0, false
	case d > MaxDelay:
		return MaxDelay, true
	}
	return d, true
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
