package lockout

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Tracker applies one Config to the model lockouts of connections whose state lives in a
// shared Store. It keeps no lockout memory of its own, so every worker VM sees the same state;
// it is safe for concurrent use.
//
// Rules (guide §3, §4, §5): a failure whose status is one of ErrorCodes locks the model on
// the connection — the quota family for 429/402/403, the bare model for 404, the exact model
// otherwise, and the exact model alone for a name without evidence (the package doc) — for BaseCooldown × 2^(count−1) up to MaxCooldown; a 429's upstream hint, or an
// exhausted quota's window, sets the length instead (without climbing); a long typed Google
// RetryInfo hint locks the exact model even when lockouts are off. Failures overlapping a
// lockout do not escalate it. A success halves the count of every key of the model and
// releases it at 0, unless the succeeding attempt started before the lockout was set.
//
// Storage: lockouts are tied to the connection's credential fingerprint (a rotated key starts
// clean). A configured model's keys are its own; a model the policy does not name — client
// input on a glob route — shares the connection's InventedSlots pool slots, ranked by the
// evidence that it is real (the package doc states the guarantee), so nothing a client sends
// creates keys without bound or displaces a real model's lockout. One index per connection
// lists them, since shared data has no key listing.
type Tracker struct {
	store   state.Store
	clock   state.Clock
	cfg     Config
	codes   [10]uint64 // bitset of cfg.ErrorCodes
	family  func(string) string
	bare    func(string) string
	corrupt atomic.Uint64
}

// New returns a Tracker, or an error if cfg is out of range or store or clock is missing.
func New(store state.Store, clock state.Clock, cfg Config) (*Tracker, error) {
	if store == nil || clock == nil {
		return nil, errors.New("lockout: store and clock are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{store: store, clock: clock, cfg: cfg, family: cfg.Family, bare: cfg.Bare}
	for _, code := range cfg.ErrorCodes {
		t.codes[code/64] |= 1 << (code % 64)
	}
	if t.family == nil {
		t.family = func(model string) string { return model }
	}
	if t.bare == nil {
		t.bare = BareModel
	}
	return t, nil
}

// Config returns the tracker's settings.
func (t *Tracker) Config() Config { return t.cfg }

// CorruptReads counts reads of stored records that could not be decoded and were treated as
// absent (a read repeated by a CAS retry counts again). Export it as a stat.
func (t *Tracker) CorruptReads() uint64 { return t.corrupt.Load() }

func (t *Tracker) countsAsModelFailure(status int) bool {
	return status > 0 && status < 640 && t.codes[status/64]&(1<<(status%64)) != 0
}

// Lock describes an active lockout.
type Lock struct {
	Scope        failure.Scope  // quota (family), model (bare) or exact
	Name         string         // the locked family, bare model or exact model
	Until        time.Time      // when it ends (expiresAt)
	Reason       failure.Reason // the failure that set it
	Status       int            // the upstream status that set it
	FailureCount int            // failures counted toward escalation
}

// Transient reports whether combo retry may wait the lockout out: a rate-limit-class lock
// (a 429's rate limit or concurrency limit, failure.Reason.Waitable), not one set by a
// server error, an overloaded model, an exhausted quota, auth or not-found (guide §4).
func (l Lock) Transient() bool { return l.Reason.Waitable() }

// candidate is one key a model's lockout may live under.
type candidate struct {
	scope failure.Scope
	name  string
	hash  uint64
}

// configured reports whether (scope, name) is the lockout key of a model the policy routes
// to c: the model itself, its bare name or its quota family.
func (t *Tracker) configured(c Conn, s failure.Scope, name string) bool {
	for _, m := range c.configured {
		switch s {
		case failure.ScopeExact:
			if m == name {
				return true
			}
		case failure.ScopeModel:
			if t.bare(m) == name {
				return true
			}
		case failure.ScopeQuotaFamily:
			if t.family(m) == name {
				return true
			}
		}
	}
	return false
}

// candidates returns the exact, bare-model and family keys of model, without hashes.
func (t *Tracker) candidates(model string) [3]candidate {
	return [3]candidate{
		{scope: failure.ScopeExact, name: model},
		{scope: failure.ScopeModel, name: t.bare(model)},
		{scope: failure.ScopeQuotaFamily, name: t.family(model)},
	}
}

// scanIndex reads the index's fixed-size tuples after its header and returns, per
// candidate, the until recorded for it (0 = not listed) and its slot. It decodes no string.
// A corrupt index can only produce matches that the lock records then fail to confirm.
func scanIndex(d *state.Decoder, cands *[3]candidate) (untils [3]int64, slots [3]int) {
	for j := range cands {
		cands[j].hash = entryHash(cands[j].scope, cands[j].name)
	}
	n := d.Uint()
	if n > maxIndexEntries+InventedSlots {
		return untils, slots
	}
	for i := uint64(0); i < n; i++ {
		sc, until, h, slot := d.Uint(), d.Int(), d.Uint(), d.Uint()
		d.Uint() // evidence: only a failure's slot choice reads it
		for j := range cands {
			if h == cands[j].hash && sc == scopeCode(cands[j].scope) && until > untils[j] && slot <= InventedSlots {
				untils[j], slots[j] = until, int(slot)
			}
		}
	}
	return untils, slots
}

// Locked reports whether model is locked on the connection: under its exact name, its bare
// name or its quota family. When several are, it returns the one that ends last. A connection
// with no lockout history, or one whose lockouts were recorded under another credential,
// costs one shared-data read and no allocation. On a store error it fails open (not locked)
// and returns the error.
func (t *Tracker) Locked(c Conn, model string) (Lock, bool, error) {
	if err := validModel(model); err != nil {
		return Lock{}, false, err
	}
	b, _, found, err := t.store.Get(c.indexKey)
	if err != nil {
		return Lock{}, false, fmt.Errorf("lockout: read index of %s/%s: %w", c.provider, c.connection, err)
	}
	if !found {
		return Lock{}, false, nil
	}
	now := t.nowMillis()
	d := state.NewDecoder(b, indexKind, indexVersion)
	if fp, maxUntil := d.Uint(), d.Int(); maxUntil <= now || !c.sameCredential(fp) {
		return Lock{}, false, nil // every listed lockout has ended, or belongs to a rotated key
	}
	cands := t.candidates(model)
	untils, slots := scanIndex(d, &cands)
	var best Lock
	locked := false
	for j, u := range untils {
		if u <= now {
			continue
		}
		l, ok, err := t.readLock(c, indexEntry{scope: cands[j].scope, name: cands[j].name, slot: slots[j]})
		if err != nil {
			return Lock{}, false, err
		}
		if ok && l.until > now && (!locked || l.until > millis(best.Until)) {
			best, locked = l.public(cands[j].scope, cands[j].name), true
		}
	}
	return best, locked, nil
}

// readLock reads the lock an index entry names; absent and corrupt records, a pool slot
// that another name holds now, and a lock of another credential report ok=false.
func (t *Tracker) readLock(c Conn, e indexEntry) (lock, bool, error) {
	b, _, found, err := t.store.Get(c.keyOf(e))
	if err != nil {
		return lock{}, false, fmt.Errorf("lockout: read %s/%s %s:%s: %w", c.provider, c.connection, e.scope, e.name, err)
	}
	if !found {
		return lock{}, false, nil
	}
	l, err := decodeLockOf(b, &e)
	if err != nil {
		t.corrupt.Add(1)
		return lock{}, false, nil
	}
	return l, l.holds(c, e.scope, e.name), nil
}

func (l lock) public(s failure.Scope, name string) Lock {
	return Lock{Scope: s, Name: name, Until: time.UnixMilli(l.until).UTC(), Reason: l.reason, Status: l.status, FailureCount: l.count}
}

func (t *Tracker) nowMillis() int64 { return t.clock.Now().UnixMilli() }
