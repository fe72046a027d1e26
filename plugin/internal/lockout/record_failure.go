package lockout

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Failure is one failed attempt of a model on a connection.
type Failure struct {
	// Model is the upstream model the attempt used.
	Model string
	// Verdict is the classifier's decision about the attempt.
	Verdict failure.Verdict
	// Started is when the attempt was sent; zero if unknown. A failure of an attempt that
	// started before the current lockout was set does not escalate it.
	Started time.Time
	// QueueMaxWait is the connection's queue wait budget; 0 means Config.QueueMaxWait.
	QueueMaxWait time.Duration
}

// Outcome reports what a failure did.
type Outcome struct {
	// Locked is true when a lockout applies to the failure's key after it.
	Locked bool
	// Counted is true when the failure raised the failure count; false when it was not a
	// model-level failure or overlapped a lockout that was already set.
	Counted bool
	// Lock is the lockout (zero unless Locked).
	Lock Lock
}

// ResolveScope returns the key scope a verdict locks: an explicit model-level scope from a
// rule wins; otherwise 429, 402 and 403 lock the quota family, 404 the bare model, and any
// other status the exact model.
func ResolveScope(v failure.Verdict) failure.Scope {
	if explicitScope(v.Scope) {
		return v.Scope
	}
	switch v.Status {
	case 429, 402, 403:
		return failure.ScopeQuotaFamily
	case 404:
		return failure.ScopeModel
	}
	return failure.ScopeExact
}

func explicitScope(s failure.Scope) bool {
	return s == failure.ScopeQuotaFamily || s == failure.ScopeModel || s == failure.ScopeExact
}

// RecordFailure applies one failed attempt. Only statuses in ErrorCodes lock, and only when
// lockouts are enabled; a typed Google RetryInfo hint longer than the queue wait budget always
// locks the exact model (whatever the verdict's scope), for the hint capped at LongRetryCap,
// instead of pausing the queue.
func (t *Tracker) RecordFailure(c Conn, f Failure) (Outcome, error) {
	if err := validModel(f.Model); err != nil {
		return Outcome{}, err
	}
	v := f.Verdict
	budget := f.QueueMaxWait
	if budget <= 0 {
		budget = t.cfg.QueueMaxWait
	}
	long := v.HintSource == failure.HintGoogleRetryInfo && v.RetryHint > budget
	if !long && (!t.cfg.Enabled || !t.countsAsModelFailure(v.Status)) {
		return Outcome{}, nil
	}
	scope := ResolveScope(v)
	if long {
		scope = failure.ScopeExact // lockExactModel: never a family or a bare name
	}
	name := f.Model
	switch scope {
	case failure.ScopeQuotaFamily:
		name = t.family(f.Model)
	case failure.ScopeModel:
		name = t.bare(f.Model)
	}
	if err := validModel(name); err != nil {
		return Outcome{}, fmt.Errorf("lockout: %s name of model %q: %w", scope, f.Model, err)
	}

	now := t.nowMillis()
	started := millis(f.Started)
	var after lock
	var counted, write bool
	_, err := state.Update(t.store, c.lockKey(scope, name), func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		prev := t.liveLock(cur, found, now)
		after, counted, write = t.applyFailure(prev, v, long, started, now)
		if !write {
			return nil, state.Keep, nil
		}
		return after.encode(), state.Write, nil
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("lockout: record failure on %s/%s %s:%s: %w", c.provider, c.connection, scope, name, err)
	}
	if write {
		if err := t.indexUpsert(c, scope, name, after.until, now); err != nil {
			return Outcome{}, err
		}
	}
	if after.until <= now {
		return Outcome{Counted: counted}, nil
	}
	return Outcome{Locked: true, Counted: counted, Lock: after.public(scope, name)}, nil
}

// liveLock decodes a stored lock; absent, corrupt and dead ones (their escalation window has
// passed) read as the zero lock.
func (t *Tracker) liveLock(cur []byte, found bool, now int64) lock {
	if !found {
		return lock{}
	}
	l, err := decodeLock(cur)
	if err != nil {
		t.corrupt.Add(1)
		return lock{}
	}
	if l.until+t.cfg.EscalationWindow.Milliseconds() <= now {
		return lock{}
	}
	return l
}

// applyFailure is the pure transition of one lock on a failure at now.
func (t *Tracker) applyFailure(prev lock, v failure.Verdict, long bool, started, now int64) (next lock, counted, write bool) {
	overlapping := prev.until > now || (started != 0 && prev.lockedAt != 0 && started < prev.lockedAt)
	if overlapping {
		// Thundering herd: no escalation. Only an explicit longer window extends the lock.
		d := t.explicitCooldown(v, long)
		if d <= 0 || now+ceilMillis(d) <= prev.until {
			return prev, false, false
		}
		next = prev
		next.until, next.lockedAt = now+ceilMillis(d), now
		next.status, next.reason = v.Status, boundedReason(v.Reason)
		return next, false, true
	}
	next = lock{
		count:    min(prev.count+1, t.cfg.MaxBackoffSteps+1),
		lockedAt: now,
		status:   v.Status,
		reason:   boundedReason(v.Reason),
	}
	next.until = now + ceilMillis(t.cooldown(next.count, v, long))
	return next, true, true
}

// cooldown is the length of a lockout after count failures: BaseCooldown (or a rule's
// declared cooldown) × 2^(count-1) when exponential, at least an upstream hint, all clamped
// to MaxCooldown; a long typed Google hint instead locks for the hint, capped at LongRetryCap.
func (t *Tracker) cooldown(count int, v failure.Verdict, long bool) time.Duration {
	if long {
		return min(v.RetryHint, t.cfg.LongRetryCap)
	}
	base := t.cfg.BaseCooldown
	if v.Cooldown > 0 {
		base = min(v.Cooldown, t.cfg.MaxCooldown)
	}
	d := base
	if t.cfg.UseExponentialBackoff {
		d = failure.Backoff(base, min(count-1, t.cfg.MaxBackoffSteps), t.cfg.MaxCooldown)
	}
	return max(d, min(v.UpstreamHint(), t.cfg.MaxCooldown))
}

// explicitCooldown is the window a failure itself names (long hint, upstream hint or rule),
// or 0.
func (t *Tracker) explicitCooldown(v failure.Verdict, long bool) time.Duration {
	switch {
	case long:
		return min(v.RetryHint, t.cfg.LongRetryCap)
	case v.UpstreamHint() > 0:
		return min(v.UpstreamHint(), t.cfg.MaxCooldown)
	case v.Cooldown > 0:
		return min(v.Cooldown, t.cfg.MaxCooldown)
	}
	return 0
}

func boundedReason(r failure.Reason) failure.Reason {
	if len(r) > maxReasonBytes {
		return failure.ReasonUnknown
	}
	return r
}

// indexUpsert lists (scope, name) in the connection's index until until.
func (t *Tracker) indexUpsert(c Conn, s failure.Scope, name string, until, now int64) error {
	window := t.cfg.EscalationWindow.Milliseconds()
	_, err := state.Update(t.store, c.indexKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		x := t.loadIndex(cur, found)
		x.upsert(s, name, until, now, window)
		return x.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("lockout: index %s/%s: %w", c.provider, c.connection, err)
	}
	return nil
}

// indexRemove drops (scope, name) from the index.
func (t *Tracker) indexRemove(c Conn, s failure.Scope, name string) error {
	_, err := state.Update(t.store, c.indexKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		if !found {
			return nil, state.Keep, nil
		}
		x := t.loadIndex(cur, found)
		if !x.remove(s, name) {
			return nil, state.Keep, nil
		}
		if len(x.entries) == 0 {
			return nil, state.Delete, nil
		}
		return x.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("lockout: index %s/%s: %w", c.provider, c.connection, err)
	}
	return nil
}

// loadIndex decodes a stored index; absent and corrupt ones read as empty.
func (t *Tracker) loadIndex(cur []byte, found bool) index {
	if !found {
		return index{}
	}
	x, err := decodeIndex(cur)
	if err != nil {
		t.corrupt.Add(1)
		return index{}
	}
	return x
}

// RecordSuccess decays the failure counts of every lockout key of model on the connection
// (exact, bare and family): each count is halved (floor(n/2)) and a lockout whose count
// reaches 0 is removed, releasing the model before its timer ends. A connection with no
// lockout history costs one shared-data read and no allocation.
func (t *Tracker) RecordSuccess(c Conn, model string) error {
	if err := validModel(model); err != nil {
		return err
	}
	b, _, found, err := t.store.Get(c.indexKey)
	if err != nil {
		return fmt.Errorf("lockout: read index of %s/%s: %w", c.provider, c.connection, err)
	}
	if !found {
		return nil
	}
	d := state.NewDecoder(b, indexKind, indexVersion)
	d.Int() // maxUntil: decay also applies to ended lockouts still in their escalation window
	cands := t.candidates(model)
	untils := scanIndex(d, &cands)
	now := t.nowMillis()
	for j, listed := range untils {
		if listed == 0 {
			continue
		}
		if err := t.decay(c, cands[j].scope, cands[j].name, now); err != nil {
			return err
		}
	}
	return nil
}

// decay halves one lock's failure count and removes it at 0, from the index too.
func (t *Tracker) decay(c Conn, s failure.Scope, name string, now int64) error {
	var gone bool
	_, err := state.Update(t.store, c.lockKey(s, name), func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		l := t.liveLock(cur, found, now)
		l.count /= 2
		gone = l.count == 0
		if gone {
			return nil, state.Delete, nil // also tidies a dead or corrupt record away
		}
		return l.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("lockout: decay %s/%s %s:%s: %w", c.provider, c.connection, s, name, err)
	}
	if !gone {
		return nil
	}
	if err := t.indexRemove(c, s, name); err != nil {
		return err
	}
	// A failure may have locked the key again after the delete. If its record write came
	// before this read, list it again here; if after, its own index write follows ours.
	// Either way no live lock is left out of the index.
	l, ok, err := t.readLock(c, s, name)
	if err != nil || !ok || l.until+t.cfg.EscalationWindow.Milliseconds() <= now {
		return err
	}
	return t.indexUpsert(c, s, name, l.until, now)
}
