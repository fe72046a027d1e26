package lockout

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Record kinds and versions in shared data. Version 2 added the credential fingerprint, the
// lock's own scope and name, and the index's pool slots; version 3 the evidence that a pool
// lockout's model is real. A record of an older version reads as corrupt, which releases it.
const (
	lockKind     = state.KindLockout
	lockVersion  = 3
	indexKind    = state.KindLockoutIndex
	indexVersion = 3
)

// Size bounds.
const (
	maxIDBytes    = 128
	maxModelBytes = 256
	// maxIndexEntries bounds the lockouts of configured models one connection's index
	// lists. The policy names those models, so the bound is only reached by a policy with
	// more than a few dozen models on one connection; then the entry that ends first is
	// dropped, which releases that lockout early rather than growing without end.
	maxIndexEntries = 64
	// InventedSlots is how many lockouts of models the policy does not name (a glob
	// route passes on whatever model a client asks for) one connection keeps. They live
	// in this many fixed shared-data keys, so no client can create keys without bound.
	// A client-chosen name never displaces a configured model's lockout (those have keys
	// of their own), nor a pool lockout with more evidence that its model is real than
	// its own (see Evidence and the package doc).
	InventedSlots  = 16
	maxReasonBytes = 64
)

// Conn names one connection, the credential it uses now, and the models the policy
// routes to it, and precomputes its keys, so the hot path reads its index without building
// a string. Build it once per connection when the policy loads.
type Conn struct {
	provider    string
	connection  string
	indexKey    string // state.KeyLockoutIndex of the account
	lockPrefix  string // state.KeyLockout's prefix of the account
	fingerprint uint64 // credential fingerprint; 0 = unknown
	configured  []string
}

// NewConn validates the ids (1..128 printable ASCII bytes, no ':') and the models, and
// precomputes the keys.
//
// credentialFingerprint is any string that changes when the connection's credential
// changes (a hash or a version, never the credential itself): lockouts recorded under
// another fingerprint no longer apply, so a rotated key starts clean, as its terminal
// states do. Empty means unknown and matches every stored lockout.
//
// configured are the upstream models the policy routes to this connection (the targets'
// models, and the requested model of a non-glob route whose target passes it on). Their
// lockouts — under the exact name, the bare name or the quota family — each get their own
// key. Any other model is client input (a glob route passes on what the client asked
// for); its lockouts share the connection's InventedSlots pool slots.
//
// account is the connection's upstream account (a state.AccountID): its lockouts and index
// live under it, shared by every policy on that credential at that upstream. Lookups walk
// the index, so a policy finds a lockout another policy recorded whatever models each
// configures.
func NewConn(provider, connection, account, credentialFingerprint string, configured ...string) (Conn, error) {
	for _, id := range [...]struct{ what, v string }{{"provider", provider}, {"connection", connection}, {"account", account}} {
		if id.v == "" || len(id.v) > maxIDBytes {
			return Conn{}, fmt.Errorf("lockout: %s id must be 1 to %d bytes, got %d", id.what, maxIDBytes, len(id.v))
		}
		for i := 0; i < len(id.v); i++ {
			if b := id.v[i]; b <= ' ' || b >= 0x7f || b == ':' {
				return Conn{}, fmt.Errorf("lockout: %s id %q: byte %d (%q) not allowed", id.what, id.v, i, b)
			}
		}
	}
	for _, m := range configured {
		if err := validModel(m); err != nil {
			return Conn{}, fmt.Errorf("lockout: configured model of %s/%s: %w", provider, connection, err)
		}
	}
	return Conn{
		provider:    provider,
		connection:  connection,
		indexKey:    state.KeyLockoutIndex.Key(account),
		lockPrefix:  state.KeyLockout.Prefix(account),
		fingerprint: fingerprint(credentialFingerprint),
		configured:  append([]string(nil), configured...),
	}, nil
}

// names reports whether the policy routes model to c by that exact name (NewConn's
// configured models).
func (c Conn) names(model string) bool {
	for _, m := range c.configured {
		if m == model {
			return true
		}
	}
	return false
}

// Provider returns the provider id.
func (c Conn) Provider() string { return c.provider }

// Connection returns the connection id.
func (c Conn) Connection() string { return c.connection }

// lockKey is the key of a configured model's lockout: the account's lockout prefix, <scope>:<name>.
func (c Conn) lockKey(s failure.Scope, name string) string {
	return c.lockPrefix + string(s) + ":" + name
}

// slotKey is the key of pool slot n (1..InventedSlots): the account's lockout prefix, ~<n>.
// No scope starts with '~', so it never meets a lockKey.
func (c Conn) slotKey(n int) string {
	return c.lockPrefix + "~" + strconv.Itoa(n)
}

// keyOf is the key an index entry's lock lives under.
func (c Conn) keyOf(e indexEntry) string {
	if e.slot > 0 {
		return c.slotKey(e.slot)
	}
	return c.lockKey(e.scope, e.name)
}

// sameCredential reports whether a record written under fingerprint fp applies to c. An
// unknown fingerprint on either side matches.
func (c Conn) sameCredential(fp uint64) bool {
	return c.fingerprint == 0 || fp == 0 || c.fingerprint == fp
}

// fingerprint hashes a credential fingerprint with 64-bit FNV-1a; 0 is reserved for "unknown".
func fingerprint(s string) uint64 {
	if s == "" {
		return 0
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	if h == 0 {
		h = 1
	}
	return h
}

// validModel accepts 1..256 bytes without control characters. The model is the last part of
// a key, so it may contain ':' and '/'.
func validModel(model string) error {
	if model == "" || len(model) > maxModelBytes {
		return fmt.Errorf("lockout: model must be 1 to %d bytes, got %d", maxModelBytes, len(model))
	}
	for i := 0; i < len(model); i++ {
		if b := model[i]; b < ' ' || b == 0x7f {
			return fmt.Errorf("lockout: model %q: control byte at %d", model, i)
		}
	}
	return nil
}

// Scopes a lockout key can have, with their compact codes in the index.
var scopeCodes = [...]failure.Scope{failure.ScopeNone, failure.ScopeQuotaFamily, failure.ScopeModel, failure.ScopeExact}

func scopeCode(s failure.Scope) uint64 {
	for i, v := range scopeCodes {
		if v == s {
			return uint64(i)
		}
	}
	return 0
}

// entryHash identifies (scope, name) in the index with 64-bit FNV-1a, so lookups compare
// integers instead of decoding strings. 0 is never produced.
func entryHash(s failure.Scope, name string) uint64 {
	h := uint64(14695981039346656037)
	h ^= scopeCode(s)
	h *= 1099511628211
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	if h == 0 {
		h = 1
	}
	return h
}

// lock is one stored lockout. Times are Unix milliseconds.
type lock struct {
	fingerprint uint64         // credential fingerprint it was recorded under (0 = unknown)
	count       int            // failure count: escalates the cooldown, halved by each success; 0 when the upstream set the window
	until       int64          // end of the lockout
	lockedAt    int64          // when the lockout was last set (herd protection, stale successes)
	status      int            // upstream status that set it
	reason      failure.Reason // why (admin output)
	scope       failure.Scope  // the key's scope and name, so a pool slot names its holder
	name        string
	evidence    Evidence // a pool lockout's evidence that its model is real (0 for a configured key)
}

func (l lock) encode() []byte {
	return state.NewEncoder(nil, lockKind, lockVersion).
		Uint(l.fingerprint).
		Uint(uint64(l.count)).
		Int(l.until).
		Int(l.lockedAt).
		Uint(uint64(l.status)).
		String(string(l.reason)).
		Uint(scopeCode(l.scope)).
		String(l.name).
		Uint(uint64(l.evidence)).
		Bytes()
}

// decodeLockOf decodes a stored lock. With want set, a lock whose name is want's reuses
// want's name instead of copying it out of the record (no allocation on the read path).
func decodeLockOf(b []byte, want *indexEntry) (lock, error) {
	d := state.NewDecoder(b, lockKind, lockVersion)
	l := lock{fingerprint: d.Uint()}
	count := d.Uint()
	l.until, l.lockedAt = d.Int(), d.Int()
	status := d.Uint()
	l.reason = failure.Reason(d.String())
	sc := d.Uint()
	name := d.View()
	ev := d.Uint()
	if err := d.Err(); err != nil {
		return lock{}, fmt.Errorf("lockout: %w", err)
	}
	if want != nil && string(name) == want.name {
		l.name = want.name
	} else {
		l.name = string(name)
	}
	if count > maxBackoffStepsLimit+1 || status > 999 || len(l.reason) > maxReasonBytes ||
		sc == 0 || sc >= uint64(len(scopeCodes)) || validModel(l.name) != nil || ev > uint64(EvidenceServed) {
		return lock{}, fmt.Errorf("lockout: %w: lock field out of range", state.ErrCorrupt)
	}
	l.count, l.status, l.scope, l.evidence = int(count), int(status), scopeCodes[sc], Evidence(ev)
	return l, nil
}

// holds reports whether the lock is (scope, name)'s under c's credential.
func (l lock) holds(c Conn, s failure.Scope, name string) bool {
	return l.scope == s && l.name == name && c.sameCredential(l.fingerprint)
}

// indexEntry is one lockout key the connection created.
type indexEntry struct {
	scope failure.Scope
	until int64 // the lockout's end as last written (an upper bound: lock records are authoritative)
	hash  uint64
	slot  int // 0 = the lock's own key (a configured model); 1..InventedSlots = a pool slot
	// evidence is a pool entry's evidence that its model is real: what decides which
	// entry a newcomer may displace (slotFor).
	evidence Evidence
	name     string
}

// index lists a connection's lockout keys. Encoded as: the credential fingerprint, the
// latest until of all entries, the entry count, the fixed-size (scope, until, hash, slot,
// evidence) tuples, then the names; so the hot path reads the first values, or the tuples,
// and never decodes a string.
type index struct {
	fingerprint uint64
	entries     []indexEntry
}

func (x index) maxUntil() int64 {
	var m int64
	for _, e := range x.entries {
		m = max(m, e.until)
	}
	return m
}

func (x index) encode() []byte {
	e := state.NewEncoder(nil, indexKind, indexVersion).Uint(x.fingerprint).Int(x.maxUntil()).Uint(uint64(len(x.entries)))
	for _, en := range x.entries {
		e.Uint(scopeCode(en.scope)).Int(en.until).Uint(en.hash).Uint(uint64(en.slot)).Uint(uint64(en.evidence))
	}
	for _, en := range x.entries {
		e.String(en.name)
	}
	return e.Bytes()
}

func decodeIndex(b []byte) (index, error) {
	d := state.NewDecoder(b, indexKind, indexVersion)
	x := index{fingerprint: d.Uint()}
	maxUntil := d.Int()
	n := d.Uint()
	if n > maxIndexEntries+InventedSlots {
		return index{}, fmt.Errorf("lockout: %w: %d index entries", state.ErrCorrupt, n)
	}
	x.entries = make([]indexEntry, n)
	for i := range x.entries {
		sc := d.Uint()
		if sc == 0 || sc >= uint64(len(scopeCodes)) {
			return index{}, fmt.Errorf("lockout: %w: index scope %d", state.ErrCorrupt, sc)
		}
		x.entries[i] = indexEntry{scope: scopeCodes[sc], until: d.Int(), hash: d.Uint()}
		slot, ev := d.Uint(), d.Uint()
		if slot > InventedSlots || ev > uint64(EvidenceServed) {
			return index{}, fmt.Errorf("lockout: %w: index slot %d evidence %d", state.ErrCorrupt, slot, ev)
		}
		x.entries[i].slot, x.entries[i].evidence = int(slot), Evidence(ev)
	}
	for i := range x.entries {
		x.entries[i].name = d.String()
	}
	if err := d.Err(); err != nil {
		return index{}, fmt.Errorf("lockout: %w", err)
	}
	for _, en := range x.entries {
		if en.hash != entryHash(en.scope, en.name) || validModel(en.name) != nil {
			return index{}, fmt.Errorf("lockout: %w: index entry does not match its hash", state.ErrCorrupt)
		}
	}
	if maxUntil != x.maxUntil() {
		return index{}, fmt.Errorf("lockout: %w: index maxUntil", state.ErrCorrupt)
	}
	return x, nil
}

// upsert records that (scope, name) is locked until until in slot (0 = its own key) with
// evidence ev: the entry keeps the later end and the stronger evidence if it was listed;
// another entry in the same pool slot (a holder it displaced) is dropped; entries whose
// escalation window has passed are dropped; and when more than maxIndexEntries configured
// entries remain, the configured entry that ends first is evicted. Pool entries never count
// against, nor evict, configured ones.
func (x *index) upsert(s failure.Scope, name string, until int64, slot int, ev Evidence, now, window int64) {
	kept := x.entries[:0]
	found := false
	configured := 0
	for _, e := range x.entries {
		switch {
		case e.scope == s && e.name == name:
			if e.slot != slot {
				continue // moved (a race): the new place wins
			}
			e.until = max(e.until, until)
			e.evidence = max(e.evidence, ev)
			found = true
		case slot > 0 && e.slot == slot:
			continue // the slot's previous holder, displaced
		case e.until+window <= now:
			continue
		}
		if e.slot == 0 {
			configured++
		}
		kept = append(kept, e)
	}
	x.entries = kept
	if !found {
		x.entries = append(x.entries, indexEntry{scope: s, until: until, hash: entryHash(s, name), slot: slot, evidence: ev, name: name})
		if slot == 0 {
			configured++
		}
	}
	for ; configured > maxIndexEntries; configured-- {
		first := -1
		for i, e := range x.entries[:len(x.entries)-1] { // never the entry just added
			if e.slot == 0 && (first < 0 || e.until < x.entries[first].until) {
				first = i
			}
		}
		x.entries = append(x.entries[:first], x.entries[first+1:]...)
	}
}

// slotFor picks the pool slot for an invented (scope, name) with evidence ev at now: the
// slot it already holds; else a slot no live entry holds (one whose escalation window has
// passed is free); else the slot of the live entry with the least evidence, the one that
// ends first among those — but never an entry with more evidence than ev. It reports false
// when every slot is held by more evidence: the newcomer is not locked.
func (x index) slotFor(s failure.Scope, name string, ev Evidence, now, window int64) (int, bool) {
	var used [InventedSlots + 1]bool
	victim := -1
	for i, e := range x.entries {
		if e.slot == 0 {
			continue
		}
		if e.scope == s && e.name == name {
			return e.slot, true
		}
		if e.until+window <= now {
			continue // its escalation window passed: the slot is free
		}
		used[e.slot] = true
		if e.evidence > ev {
			continue // a name with more evidence is never displaced by this one
		}
		if v := victim; v < 0 || e.evidence < x.entries[v].evidence ||
			(e.evidence == x.entries[v].evidence && e.until < x.entries[v].until) {
			victim = i
		}
	}
	for n := 1; n <= InventedSlots; n++ {
		if !used[n] {
			return n, true
		}
	}
	if victim < 0 {
		return 0, false
	}
	return x.entries[victim].slot, true
}

// slotTaken reports whether e's pool slot is listed under another name.
func (x index) slotTaken(e indexEntry) bool {
	for _, o := range x.entries {
		if o.slot == e.slot && (o.scope != e.scope || o.name != e.name) {
			return true
		}
	}
	return false
}

// remove drops (scope, name) if it is listed in slot, and reports whether it was.
func (x *index) remove(s failure.Scope, name string, slot int) bool {
	for i, e := range x.entries {
		if e.scope == s && e.name == name && e.slot == slot {
			x.entries = append(x.entries[:i], x.entries[i+1:]...)
			return true
		}
	}
	return false
}

// ceilMillis converts a positive duration to whole milliseconds, rounding up, so a sub-
// millisecond lockout still ends after it starts.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// millis converts t to Unix milliseconds, with the zero time as 0.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
