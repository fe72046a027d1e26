package lockout

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Entry is one active lockout for the admin API (GET resilience/model-cooldowns).
type Entry struct {
	Provider     string
	Connection   string
	Scope        failure.Scope  // quota (family), model (bare) or exact
	Model        string         // the locked family, bare model or exact model
	Reason       failure.Reason // the failure that set it
	Status       int            // the upstream status that set it
	FailureCount int
	ExpiresAt    time.Time
}

// List returns the connection's active lockouts, in the order they were first recorded. Shared
// data has no key listing: the connection's index names the keys, and each is confirmed
// against its lock record.
func (t *Tracker) List(c Conn) ([]Entry, error) {
	b, _, found, err := t.store.Get(c.indexKey)
	if err != nil {
		return nil, fmt.Errorf("lockout: read index of %s/%s: %w", c.provider, c.connection, err)
	}
	x := t.loadIndex(c, b, found)
	now := t.nowMillis()
	var out []Entry
	for _, e := range x.entries {
		if e.until <= now {
			continue
		}
		l, ok, err := t.readLock(c, e)
		if err != nil {
			return nil, err
		}
		if !ok || l.until <= now {
			continue
		}
		out = append(out, Entry{
			Provider:     c.provider,
			Connection:   c.connection,
			Scope:        e.scope,
			Model:        e.name,
			Reason:       l.reason,
			Status:       l.status,
			FailureCount: l.count,
			ExpiresAt:    time.UnixMilli(l.until).UTC(),
		})
	}
	return out, nil
}

// Delete re-enables model on the connection (DELETE resilience/model-cooldowns): it removes
// every lockout key that Locked consults for model (exact, bare, family) and every listed
// lockout named model under any scope. It returns how many active lockouts it removed.
func (t *Tracker) Delete(c Conn, model string) (int, error) {
	if err := validModel(model); err != nil {
		return 0, err
	}
	cands := t.candidates(model)
	targets := []indexEntry{}
	add := func(e indexEntry) {
		for _, x := range targets {
			if x.scope == e.scope && x.name == e.name && x.slot == e.slot {
				return
			}
		}
		targets = append(targets, e)
	}
	for _, k := range cands {
		if t.configured(c, k.scope, k.name) {
			add(indexEntry{scope: k.scope, name: k.name}) // its own key, listed or not
		}
	}
	removed, err := t.rewriteIndex(c, func(x *index) {
		kept := x.entries[:0]
		for _, e := range x.entries {
			if e.name == model || isCandidate(&cands, e) {
				continue
			}
			kept = append(kept, e)
		}
		x.entries = kept
	})
	if err != nil {
		return 0, err
	}
	for _, e := range removed {
		add(e)
	}
	return t.tombstone(c, targets)
}

func isCandidate(cands *[3]candidate, e indexEntry) bool {
	for _, k := range cands {
		if k.scope == e.scope && k.name == e.name {
			return true
		}
	}
	return false
}

// ClearConnection removes every lockout of the connection and its index, and returns how
// many active lockouts it removed.
func (t *Tracker) ClearConnection(c Conn) (int, error) {
	removed, err := t.rewriteIndex(c, func(x *index) { x.entries = nil })
	if err != nil {
		return 0, err
	}
	return t.tombstone(c, removed)
}

// rewriteIndex applies edit to the connection's index and returns the entries it dropped.
func (t *Tracker) rewriteIndex(c Conn, edit func(x *index)) ([]indexEntry, error) {
	var removed []indexEntry
	_, err := state.Update(t.store, c.indexKey, func(cur []byte, found bool) ([]byte, state.Mutation, error) {
		removed = nil
		if !found {
			return nil, state.Keep, nil
		}
		x := t.loadIndex(c, cur, found)
		before := append([]indexEntry(nil), x.entries...)
		edit(&x)
		for _, e := range before {
			if !x.has(e) {
				removed = append(removed, e)
			}
		}
		switch {
		case len(x.entries) == 0:
			return nil, state.Delete, nil
		case len(removed) == 0:
			return nil, state.Keep, nil
		}
		return x.encode(), state.Write, nil
	})
	if err != nil {
		return nil, fmt.Errorf("lockout: index %s/%s: %w", c.provider, c.connection, err)
	}
	return removed, nil
}

// tombstone deletes the lock records of targets and counts those that were still active. A
// pool slot that another name holds by now is left alone.
func (t *Tracker) tombstone(c Conn, targets []indexEntry) (int, error) {
	now := t.nowMillis()
	active := 0
	for _, e := range targets {
		wasActive := false
		_, err := state.Update(t.store, c.keyOf(e), func(cur []byte, found bool) ([]byte, state.Mutation, error) {
			wasActive = false
			if found && e.slot > 0 {
				if l, err := decodeLockOf(cur, &e); err == nil && !l.holds(c, e.scope, e.name) {
					return nil, state.Keep, nil
				}
			}
			wasActive = found && t.liveLock(c, e, cur, found, now).until > now
			return nil, state.Delete, nil
		})
		if err != nil {
			return active, fmt.Errorf("lockout: delete %s/%s %s:%s: %w", c.provider, c.connection, e.scope, e.name, err)
		}
		if wasActive {
			active++
		}
	}
	return active, nil
}

func (x index) has(want indexEntry) bool {
	for _, e := range x.entries {
		if e.scope == want.scope && e.name == want.name && e.slot == want.slot {
			return true
		}
	}
	return false
}
