package lockout

import (
	"fmt"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Record kinds and versions in shared data.
const (
	lockKind     = state.KindLockout
	lockVersion  = 1
	indexKind    = state.KindLockoutIndex
	indexVersion = 1
)

// Size bounds.
const (
	maxIDBytes    = 128
	maxModelBytes = 256
	// maxIndexEntries bounds one connection's index. When it is full the entry that ends
	// first is dropped, which releases that lockout early rather than growing without end.
	maxIndexEntries = 64
	maxReasonBytes  = 64
)

// Conn names one connection and precomputes its keys, so the hot path reads its index
// without building a string. Build it once per connection when the policy loads.
type Conn struct {
	provider   string
	connection string
	indexKey   string // spw1:mli:<provider>:<connection>
	lockPrefix string // spw1:ml:<provider>:<connection>:
}

// NewConn validates the ids (1..128 printable ASCII bytes, no ':') and precomputes the keys.
func NewConn(provider, connection string) (Conn, error) {
	for _, id := range [...]struct{ what, v string }{{"provider", provider}, {"connection", connection}} {
		if id.v == "" || len(id.v) > maxIDBytes {
			return Conn{}, fmt.Errorf("lockout: %s id must be 1 to %d bytes, got %d", id.what, maxIDBytes, len(id.v))
		}
		for i := 0; i < len(id.v); i++ {
			if b := id.v[i]; b <= ' ' || b >= 0x7f || b == ':' {
				return Conn{}, fmt.Errorf("lockout: %s id %q: byte %d (%q) not allowed", id.what, id.v, i, b)
			}
		}
	}
	return Conn{
		provider:   provider,
		connection: connection,
		indexKey:   state.KeyPrefix + "mli:" + provider + ":" + connection,
		lockPrefix: state.KeyPrefix + "ml:" + provider + ":" + connection + ":",
	}, nil
}

// Provider returns the provider id.
func (c Conn) Provider() string { return c.provider }

// Connection returns the connection id.
func (c Conn) Connection() string { return c.connection }

// lockKey is the key of one lockout: spw1:ml:<provider>:<connection>:<scope>:<name>.
func (c Conn) lockKey(s failure.Scope, name string) string {
	return c.lockPrefix + string(s) + ":" + name
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
	count    int            // failure count: escalates the cooldown, halved by each success
	until    int64          // end of the lockout
	lockedAt int64          // when the lockout was last set (herd protection)
	status   int            // upstream status that set it
	reason   failure.Reason // why (admin output)
}

func (l lock) encode() []byte {
	return state.NewEncoder(nil, lockKind, lockVersion).
		Uint(uint64(l.count)).
		Int(l.until).
		Int(l.lockedAt).
		Uint(uint64(l.status)).
		String(string(l.reason)).
		Bytes()
}

func decodeLock(b []byte) (lock, error) {
	d := state.NewDecoder(b, lockKind, lockVersion)
	count := d.Uint()
	l := lock{until: d.Int(), lockedAt: d.Int()}
	status := d.Uint()
	l.reason = failure.Reason(d.String())
	if err := d.Err(); err != nil {
		return lock{}, fmt.Errorf("lockout: %w", err)
	}
	if count == 0 || count > maxBackoffStepsLimit+1 || status > 999 || len(l.reason) > maxReasonBytes {
		return lock{}, fmt.Errorf("lockout: %w: lock field out of range", state.ErrCorrupt)
	}
	l.count, l.status = int(count), int(status)
	return l, nil
}

// indexEntry is one lockout key the connection created.
type indexEntry struct {
	scope failure.Scope
	until int64 // the lockout's end as last written (an upper bound: lock records are authoritative)
	hash  uint64
	name  string
}

// index lists a connection's lockout keys. Encoded as: the latest until of all entries, the
// entry count, the fixed-size (scope, until, hash) triples, then the names; so the hot path
// reads the first value, or the triples, and never decodes a string.
type index struct {
	entries []indexEntry
}

func (x index) maxUntil() int64 {
	var m int64
	for _, e := range x.entries {
		m = max(m, e.until)
	}
	return m
}

func (x index) encode() []byte {
	e := state.NewEncoder(nil, indexKind, indexVersion).Int(x.maxUntil()).Uint(uint64(len(x.entries)))
	for _, en := range x.entries {
		e.Uint(scopeCode(en.scope)).Int(en.until).Uint(en.hash)
	}
	for _, en := range x.entries {
		e.String(en.name)
	}
	return e.Bytes()
}

func decodeIndex(b []byte) (index, error) {
	d := state.NewDecoder(b, indexKind, indexVersion)
	maxUntil := d.Int()
	n := d.Uint()
	if n > maxIndexEntries {
		return index{}, fmt.Errorf("lockout: %w: %d index entries", state.ErrCorrupt, n)
	}
	x := index{entries: make([]indexEntry, n)}
	for i := range x.entries {
		sc := d.Uint()
		if sc == 0 || sc >= uint64(len(scopeCodes)) {
			return index{}, fmt.Errorf("lockout: %w: index scope %d", state.ErrCorrupt, sc)
		}
		x.entries[i] = indexEntry{scope: scopeCodes[sc], until: d.Int(), hash: d.Uint()}
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

// upsert records that (scope, name) is locked until until, drops entries whose escalation
// window has passed, and evicts the entry that ends first if the index is full.
func (x *index) upsert(s failure.Scope, name string, until, now, window int64) {
	kept := x.entries[:0]
	found := false
	for _, e := range x.entries {
		if e.scope == s && e.name == name {
			e.until = max(e.until, until)
			found = true
		} else if e.until+window <= now {
			continue
		}
		kept = append(kept, e)
	}
	x.entries = kept
	if !found {
		x.entries = append(x.entries, indexEntry{scope: s, until: until, hash: entryHash(s, name), name: name})
	}
	for len(x.entries) > maxIndexEntries {
		first := 0
		for i, e := range x.entries[:len(x.entries)-1] { // never the entry just added
			if e.until < x.entries[first].until {
				first = i
			}
		}
		x.entries = append(x.entries[:first], x.entries[first+1:]...)
	}
}

// remove drops (scope, name) and reports whether it was listed.
func (x *index) remove(s failure.Scope, name string) bool {
	for i, e := range x.entries {
		if e.scope == s && e.name == name {
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
