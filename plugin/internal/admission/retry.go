package admission

import "time"

// Store errors (the package doc, "When shared data fails"). A callback cannot sleep, so an
// admission step that loses its CAS race past state.MaxCASAttempts, or meets any other
// store error, is tried again on a later tick while the request stays paused; VMs are
// spread over the next ticks by their node's random offset, so the workers that collided
// do not collide again in step. An error that persists MaxStoreRetries times in a row
// fails open for that request (it goes without a slot), as every store failure does (the
// design's rule: a failure of Spillway's own machinery never becomes the client's error).
const MaxStoreRetries = 5

// RetryDelay is how long a step put off after its attempt-th store error in a row waits: 1
// to 3 ticks, by the VM's jitter and the attempt.
func RetryDelay(tick time.Duration, jitter uint64, attempt int) time.Duration {
	return time.Duration(1+(jitter+uint64(attempt))%3) * tick
}

// StoreRetry is one request's run of store errors. The zero value has none.
type StoreRetry struct {
	failures int
	at       time.Time
}

// Failed notes a store error at now and says what to do: wait until retryAt (a later tick),
// or, when this is the MaxStoreRetries-th error in a row, fail open.
func (r *StoreRetry) Failed(now time.Time, tick time.Duration, jitter uint64) (retryAt time.Time, failOpen bool) {
	r.failures++
	if r.failures >= MaxStoreRetries {
		*r = StoreRetry{}
		return time.Time{}, true
	}
	r.at = now.Add(RetryDelay(tick, jitter, r.failures))
	return r.at, false
}

// Waiting reports whether a retry is pending and not yet due at now.
func (r *StoreRetry) Waiting(now time.Time) bool { return r.failures > 0 && now.Before(r.at) }

// Pending reports whether the last step failed and its retry has not succeeded yet.
func (r *StoreRetry) Pending() bool { return r.failures > 0 }

// Succeeded ends the run.
func (r *StoreRetry) Succeeded() { *r = StoreRetry{} }

// StoreStats counts the store errors an Admitter handled on its own: the releases, cancels
// and ticket publications it put off to a later Retry (Retried), and those it gave up on
// after MaxStoreRetries (Abandoned: the slot comes back when its lease expires, a ticket
// when its wait does). Admit and TryAdmit errors are the caller's to count.
type StoreStats struct {
	Retried, Abandoned uint64
}
