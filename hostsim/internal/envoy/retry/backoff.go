package retry

import "time"

// Random is the random source the back-off draws from (Envoy's Random::RandomGenerator::
// random()); *math/rand/v2.Rand and the rand/v2 sources satisfy it, and a test can inject a
// fixed sequence.
type Random interface{ Uint64() uint64 }

// Backoff is Envoy's JitteredExponentialBackOffStrategy (source/common/common/
// backoff_strategy.cc): each back-off is uniform in [0, interval), the interval starting at
// the base and doubling, up to the cap. With the defaults (25 ms, cap 250 ms) the first
// retry waits under 25 ms, the second under 50, then 100, 200, and 250 from the fifth on.
// Envoy's documentation gives the range as [0, (2^N−1)·B) for retry N; the source, followed
// here, draws from [0, 2^(N−1)·B).
type Backoff struct {
	base, limit uint64 // milliseconds
	next        uint64 // next_interval_
	rnd         Random
}

// NewBackoff is the strategy from base to limit (both rounded down to milliseconds, at
// least 1 ms; limit at least base) over rnd.
func NewBackoff(base, limit time.Duration, rnd Random) *Backoff {
	b := uint64(max(base.Milliseconds(), 1))
	l := max(uint64(max(limit.Milliseconds(), 1)), b)
	return &Backoff{base: b, limit: l, next: b, rnd: rnd}
}

// Next is nextBackOffMs: a draw from [0, interval) ms, the interval then doubled, or set
// to the cap once doubling would pass it (doubling_limit_ is half the cap).
func (b *Backoff) Next() time.Duration {
	interval := b.next
	if b.next < b.limit/2 {
		b.next *= 2
	} else {
		b.next = b.limit
	}
	return time.Duration(b.rnd.Uint64()%interval) * time.Millisecond
}

// Interval is the interval the next back-off is drawn from.
func (b *Backoff) Interval() time.Duration { return time.Duration(b.next) * time.Millisecond }

// Reset is reset(): the interval is the base again.
func (b *Backoff) Reset() { b.next = b.base }
