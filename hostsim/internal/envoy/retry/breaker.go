package retry

import "sync/atomic"

// Breaker is a cluster's retries resource for one routing priority (ResourceManager::
// retries(), circuit_breaker.proto Thresholds.max_retries): how many retries may be in
// progress at once across all the cluster's requests. A retry holds it from the decision to
// retry until its request's next decision or the request's end (RetryStateImpl::
// resetRetry), so across its back-off and its try. Safe for concurrent use, like Envoy's
// atomic resource counts; as in Envoy, checking and taking are two steps.
type Breaker struct {
	max  uint64
	busy atomic.Int64
}

// NewBreaker is a breaker allowing max concurrent retries (DefaultMaxRetries unless the
// cluster configures max_retries; 0 allows none).
func NewBreaker(max uint32) *Breaker { return &Breaker{max: uint64(max)} }

// Busy is the number of retries holding the resource.
func (b *Breaker) Busy() int { return int(b.busy.Load()) }

// canCreate is ResourceImpl::canCreate: fewer in use than the maximum.
func (b *Breaker) canCreate() bool { return uint64(b.busy.Load()) < b.max }

func (b *Breaker) inc() { b.busy.Add(1) }
func (b *Breaker) dec() { b.busy.Add(-1) }
