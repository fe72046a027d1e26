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
	// Served says the caller has seen the provider serve Model on this connection: a success
	// recorded for it (the engine keeps each worker's memory of that in a Served). It is the
	// strongest evidence that a name the policy does not name is a real model (see
	// Evidence); configured models ignore it.
	Served bool
}

// Outcome reports what a failure did.
type Outcome struct {
	// Locked is true when a lockout applies to the failure's key after it.
	Locked bool
	// Counted is true when the failure set the lockout anew; false when it was not a
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

// scopeOf is the key scope failure f locks on c: ResolveScope's (guide §3), with two
// narrowings to the exact model. A long typed Google RetryInfo hint locks the exact model
// (lockExactModel: never a family or a bare name). And, Spillway's divergence from the guide
// for names a client invents (the package doc): a failure of a model with no evidence that
// it is real — not configured for c, not seen served (Failure.Served), and a failure that is
// not metered (EvidenceOf) — locks only its exact name, never the bare name or the quota
// family, since those are keys other, real models are locked under.
func (t *Tracker) scopeOf(c Conn, f Failure, long bool) failure.Scope {
	s := ResolveScope(f.Verdict)
	switch {
	case long:
		return failure.ScopeExact
	case s == failure.ScopeExact:
		return s
	case EvidenceOf(f.Verdict.Reason, f.Served) == EvidenceNone && !c.names(f.Model):
		return failure.ScopeExact
	}
	return s
}

func explicitScope(s failure.Scope) bool {
	return s == failure.ScopeQuotaFamily || s == failure.ScopeModel || s == failure.ScopeExact
}

// RecordFailure applies one failed attempt. Only statuses in ErrorCodes lock, and only when
// lockouts are enabled; a typed Google RetryInfo hint longer than the queue wait budget always
// locks the exact model (whatever the verdict's scope), for the hint capped at LongRetryCap,
// instead of pausing the queue.
//
// How long (guide §3 and §5): a 429's upstream hint is the truth — short hints pace, long
// ones lock — so a 429 with a hint locks for the hint (at most MaxCooldown); an exhausted
// quota's window (failure.Verdict.QuotaWindow) locks until its reset; otherwise
// BaseCooldown (or a rule's declared cooldown) × 2^(count−1). When the upstream decided the
// length the failure count does not climb, so the next failure without a hint starts again
// from the base.
//
// Which key (guide §3, resolveLockoutScope): ResolveScope's, except that a model with no
// evidence that it is real (scopeOf) locks only its exact name.
//
// Where: a configured model's lockout (see NewConn) gets its own key; any other model's
// goes to one of the connection's InventedSlots pool slots, which it may take from a holder
// with no more evidence than its own (EvidenceOf). When every slot is held by more evidence,
// the failure locks nothing (Outcome.Locked false): the caller handles it as with the
// lockout off.
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
	scope := t.scopeOf(c, f, long)
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
	window := t.cfg.EscalationWindow.Milliseconds()
	entry := indexEntry{scope: scope, name: name}
	if !t.configured(c, scope, name) {
		entry.evidence = EvidenceOf(v.Reason, f.Served)
		slot, ok, err := t.reserveSlot(c, scope, name, entry.evidence, now, window)
		if err != nil || !ok {
			return Outcome{}, err // !ok: every slot is held by more evidence
		}
		entry.slot = slot
	}
	started := millis(f.Started)
	var after lock
	var counted, write, refused bool
	_, err := state.Update(t.store, c.keyOf(entry), func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		refused = entry.slot > 0 && t.heldByMore(c, entry, cur, found, now, window)
		if refused {
			// Another worker's failure with more evidence took the slot after this one
			// reserved it: never overwrite its lock.
			return nil, state.Keep, nil
		}
		prev := t.liveLock(c, entry, cur, found, now)
		after, counted, write = t.applyFailure(prev, v, long, started, now)
		if !write && entry.evidence > prev.evidence && prev.until+window > now {
			after, write = prev, true // nothing else changes, but the evidence grows
		}
		if !write {
			return nil, state.Keep, nil
		}
		if c.fingerprint != 0 {
			after.fingerprint = c.fingerprint
		}
		after.scope, after.name = scope, name
		after.evidence = max(prev.evidence, entry.evidence)
		return after.encode(), state.Write, nil
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("lockout: record failure on %s/%s %s:%s: %w", c.provider, c.connection, scope, name, err)
	}
	if refused {
		return Outcome{}, nil
	}
	if write {
		entry.evidence = after.evidence
		if err := t.indexUpsert(c, entry, after.until, now); err != nil {
			return Outcome{}, err
		}
	}
	if after.until <= now {
		return Outcome{Counted: counted}, nil
	}
	return Outcome{Locked: true, Counted: counted, Lock: after.public(scope, name)}, nil
}

// reserveSlot claims a pool slot for an invented (scope, name) with evidence ev in the index
// before its lock is written, so concurrent failures of different invented names pick
// different slots (the index's CAS orders them). A name that already holds a slot keeps it.
// It reports false, writing nothing, when every slot is held by more evidence (slotFor).
func (t *Tracker) reserveSlot(c Conn, s failure.Scope, name string, ev Evidence, now, window int64) (int, bool, error) {
	var slot int
	var ok bool
	_, err := state.Update(t.store, c.indexKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		x := t.loadIndex(c, cur, found)
		if slot, ok = x.slotFor(s, name, ev, now, window); !ok || x.has(indexEntry{scope: s, name: name, slot: slot}) {
			return nil, state.Keep, nil
		}
		x.upsert(s, name, now+1, slot, ev, now, window) // the lock's real end follows once it is written
		if c.fingerprint != 0 {
			x.fingerprint = c.fingerprint
		}
		return x.encode(), state.Write, nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("lockout: reserve a slot on %s/%s: %w", c.provider, c.connection, err)
	}
	return slot, ok, nil
}

// heldByMore reports whether a pool slot's stored lock belongs, under c's credential and
// within its escalation window, to another name with more evidence than e: the lock e's
// failure must not overwrite.
func (t *Tracker) heldByMore(c Conn, e indexEntry, cur []byte, found bool, now, window int64) bool {
	if !found {
		return false
	}
	l, err := decodeLockOf(cur, &e)
	return err == nil && (l.scope != e.scope || l.name != e.name) && c.sameCredential(l.fingerprint) &&
		l.until+window > now && l.evidence > e.evidence
}

// liveLock decodes the stored lock of an index entry; absent, corrupt and dead ones (their
// escalation window has passed), another credential's, and a pool slot's other holder read
// as the zero lock.
func (t *Tracker) liveLock(c Conn, e indexEntry, cur []byte, found bool, now int64) lock {
	if !found {
		return lock{}
	}
	l, err := decodeLockOf(cur, &e)
	if err != nil {
		t.corrupt.Add(1)
		return lock{}
	}
	if !l.holds(c, e.scope, e.name) || l.until+t.cfg.EscalationWindow.Milliseconds() <= now {
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
		fingerprint: prev.fingerprint,
		count:       min(prev.count+1, t.cfg.MaxBackoffSteps+1),
		lockedAt:    now,
		status:      v.Status,
		reason:      boundedReason(v.Reason),
	}
	d, upstream := t.cooldown(next.count, v, long)
	if upstream {
		next.count = 0 // the upstream set the length: no climb, the next hintless failure gets the base
	}
	next.until = now + ceilMillis(d)
	return next, true, true
}

// cooldown is the length of a lockout after count failures, and whether the upstream
// decided it: a long typed Google hint locks for the hint (at most LongRetryCap); an
// exhausted quota until its reset (at most failure.MaxQuotaWindow); a 429 with an upstream
// hint for the hint (at most MaxCooldown). Otherwise BaseCooldown (or a rule's declared
// cooldown) × 2^(count-1) when exponential, at least any other status's upstream hint, all
// clamped to MaxCooldown.
func (t *Tracker) cooldown(count int, v failure.Verdict, long bool) (time.Duration, bool) {
	switch {
	case long:
		return min(v.RetryHint, t.cfg.LongRetryCap), true
	case v.QuotaWindow && v.Cooldown > 0:
		return min(v.Cooldown, failure.MaxQuotaWindow), true
	case v.Status == 429 && v.UpstreamHint() > 0:
		return min(v.UpstreamHint(), t.cfg.MaxCooldown), true
	}
	base := t.cfg.BaseCooldown
	if v.Cooldown > 0 {
		base = min(v.Cooldown, t.cfg.MaxCooldown)
	}
	d := base
	if t.cfg.UseExponentialBackoff {
		d = failure.Backoff(base, min(count-1, t.cfg.MaxBackoffSteps), t.cfg.MaxCooldown)
	}
	return max(d, min(v.UpstreamHint(), t.cfg.MaxCooldown)), false
}

// explicitCooldown is the window a failure itself names (long hint, quota window, upstream
// hint or rule), or 0.
func (t *Tracker) explicitCooldown(v failure.Verdict, long bool) time.Duration {
	switch {
	case long:
		return min(v.RetryHint, t.cfg.LongRetryCap)
	case v.QuotaWindow && v.Cooldown > 0:
		return min(v.Cooldown, failure.MaxQuotaWindow)
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

// indexUpsert lists e (with its evidence) in the connection's index until until, once its
// lock is written. A pool slot the index already lists under another name — a race with
// another worker's failure of another name — is listed as e only while the slot's lock
// record is still e's, so the index names whoever holds the lock.
func (t *Tracker) indexUpsert(c Conn, e indexEntry, until, now int64) error {
	window := t.cfg.EscalationWindow.Milliseconds()
	_, err := state.Update(t.store, c.indexKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		x := t.loadIndex(c, cur, found)
		if e.slot > 0 && x.slotTaken(e) {
			if _, mine, err := t.readLock(c, e); err != nil || !mine {
				return nil, state.Keep, err
			}
		}
		x.upsert(e.scope, e.name, until, e.slot, e.evidence, now, window)
		if c.fingerprint != 0 {
			x.fingerprint = c.fingerprint
		}
		return x.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("lockout: index %s/%s: %w", c.provider, c.connection, err)
	}
	return nil
}

// indexRemove drops e (in its slot) from the index.
func (t *Tracker) indexRemove(c Conn, e indexEntry) error {
	_, err := state.Update(t.store, c.indexKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		if !found {
			return nil, state.Keep, nil
		}
		x := t.loadIndex(c, cur, found)
		if !x.remove(e.scope, e.name, e.slot) {
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

// loadIndex decodes a stored index; absent and corrupt ones, and one written under another
// credential, read as empty.
func (t *Tracker) loadIndex(c Conn, cur []byte, found bool) index {
	if !found {
		return index{}
	}
	x, err := decodeIndex(cur)
	if err != nil {
		t.corrupt.Add(1)
		return index{}
	}
	if !c.sameCredential(x.fingerprint) {
		return index{} // a rotated credential starts clean
	}
	return x
}

// RecordSuccess decays the failure counts of every lockout key of model on the connection
// (exact, bare and family) for an attempt that started at started (zero if unknown): each
// count is halved (floor(n/2)) and a lockout whose count reaches 0 is removed, releasing the
// model before its timer ends (guide §3, decayModelFailureCount). A success of an attempt
// that started before a lockout was set says nothing about the model since and leaves that
// lockout alone. A connection with no lockout history costs one shared-data read, no write
// and no allocation.
func (t *Tracker) RecordSuccess(c Conn, model string, started time.Time) error {
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
	if fp := d.Uint(); !c.sameCredential(fp) {
		return nil // another credential's lockouts: not this one's to decay
	}
	d.Int() // maxUntil: decay also applies to ended lockouts still in their escalation window
	cands := t.candidates(model)
	untils, slots := scanIndex(d, &cands)
	now := t.nowMillis()
	start := millis(started)
	for j, listed := range untils {
		if listed == 0 {
			continue
		}
		e := indexEntry{scope: cands[j].scope, name: cands[j].name, slot: slots[j]}
		if err := t.decay(c, e, start, now); err != nil {
			return err
		}
	}
	return nil
}

// decay halves one lock's failure count and removes it at 0, from the index too. A lock set
// after the succeeding attempt started is left alone.
func (t *Tracker) decay(c Conn, e indexEntry, started, now int64) error {
	var gone bool
	_, err := state.Update(t.store, c.keyOf(e), func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		gone = false
		if found && e.slot > 0 {
			if l, err := decodeLockOf(cur, &e); err == nil && !l.holds(c, e.scope, e.name) {
				gone = true // the slot holds another name now: only the stale entry goes
				return nil, state.Keep, nil
			}
		}
		l := t.liveLock(c, e, cur, found, now)
		if started != 0 && l.lockedAt > started {
			return nil, state.Keep, nil // the attempt predates this lockout
		}
		l.count /= 2
		gone = l.count == 0
		if gone {
			return nil, state.Delete, nil // also tidies a dead or corrupt record away
		}
		return l.encode(), state.Write, nil
	})
	if err != nil {
		return fmt.Errorf("lockout: decay %s/%s %s:%s: %w", c.provider, c.connection, e.scope, e.name, err)
	}
	if !gone {
		return nil
	}
	if err := t.indexRemove(c, e); err != nil {
		return err
	}
	// A failure may have locked the key again after the delete. If its record write came
	// before this read, list it again here; if after, its own index write follows ours.
	// Either way no live lock is left out of the index.
	l, ok, err := t.readLock(c, e)
	if err != nil || !ok || l.until+t.cfg.EscalationWindow.Milliseconds() <= now {
		return err
	}
	e.evidence = l.evidence
	return t.indexUpsert(c, e, l.until, now)
}
