package affinity

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

// MaxSlots bounds Config.Slots.
const MaxSlots = 1 << 20

// Pin record (state codec kind 'A', version 1): fingerprint (two uints, the key digest's
// bytes 8..15 and 16..23), provider, connection (strings), last use (signed varint, Unix
// milliseconds).
const (
	kindPin    = state.KindAffinityPin
	pinVersion = 1
	maxIDBytes = 1024 // a stored provider or connection id longer than this is corrupt
)

// Config sets the pin table.
type Config struct {
	// TTL is how long a pin lives after its last use; 0 turns affinity off (the guide's
	// sessionAffinityTtlMs).
	TTL time.Duration
	// RefreshInterval is how often, at most, a pin's last use is rewritten (0 = the
	// default, policies.SessionAffinityRefreshInterval); it is also capped at TTL/10 so a
	// pin in use never expires for lack of a refresh.
	RefreshInterval time.Duration
	// Slots is the size of the pin table (0 = policies.SessionAffinitySlots).
	Slots int
}

// Pin is a session's live pin.
type Pin struct {
	// Provider is the pinned connection's provider id.
	Provider string
	// Connection is the pinned connection id.
	Connection string
	// LastUse is when the pin was last written.
	LastUse time.Time
}

// IsZero reports whether there is no pin.
func (p Pin) IsZero() bool { return p.Connection == "" }

// Table is the shared pin table. Pins live in a fixed number of shared-data slots chosen by
// the key's hash (shared data has no delete, so one key per session would grow without
// bound); each slot remembers its session's fingerprint, and a newer session that hashes to
// an occupied slot takes it over. A Table is one worker's handle; not safe for concurrent
// use.
type Table struct {
	store   state.Store
	clock   state.Clock
	ttl     time.Duration
	refresh time.Duration
	slots   uint64
	buf     []byte
}

// New returns a pin table over store. Negative durations and out-of-range slot counts are
// rejected.
func New(store state.Store, clock state.Clock, cfg Config) (*Table, error) {
	switch {
	case store == nil || clock == nil:
		return nil, fmt.Errorf("affinity: a store and a clock are required")
	case cfg.TTL < 0:
		return nil, fmt.Errorf("affinity: negative TTL %v", cfg.TTL)
	case cfg.RefreshInterval < 0:
		return nil, fmt.Errorf("affinity: negative refresh interval %v", cfg.RefreshInterval)
	case cfg.Slots < 0 || cfg.Slots > MaxSlots:
		return nil, fmt.Errorf("affinity: slots %d outside 0..%d", cfg.Slots, MaxSlots)
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = policies.SessionAffinityRefreshInterval
	}
	if cfg.Slots == 0 {
		cfg.Slots = policies.SessionAffinitySlots
	}
	return &Table{
		store:   store,
		clock:   clock,
		ttl:     cfg.TTL,
		refresh: min(cfg.RefreshInterval, cfg.TTL/10),
		slots:   uint64(cfg.Slots),
	}, nil
}

// Enabled reports whether affinity is on (TTL above 0).
func (t *Table) Enabled() bool { return t.ttl > 0 }

func (t *Table) slotKey(k Key) string {
	slot := binary.BigEndian.Uint64(k.digest[:8]) % t.slots
	var b [32]byte
	return string(strconv.AppendUint(append(b[:0], state.KeyPrefix+"aff:"...), slot, 10))
}

// fingerprint identifies the session within its slot.
func fingerprint(k Key) (uint64, uint64) {
	return binary.BigEndian.Uint64(k.digest[8:16]), binary.BigEndian.Uint64(k.digest[16:24])
}

// Lookup returns the session's live pin: none when affinity is off, the key is zero, the
// slot is empty, holds another session's pin, holds a corrupt record, or the pin's last use
// is TTL or more ago. The error reports a shared-data failure (serve without affinity).
func (t *Table) Lookup(k Key) (Pin, error) {
	if !t.Enabled() || k.IsZero() {
		return Pin{}, nil
	}
	b, _, found, err := t.store.Get(t.slotKey(k))
	if err != nil {
		return Pin{}, fmt.Errorf("affinity: lookup: %w", err)
	}
	if !found {
		return Pin{}, nil
	}
	d := state.NewDecoder(b, kindPin, pinVersion)
	fp1, fp2 := d.Uint(), d.Uint()
	provider, connection, lastMs := d.String(), d.String(), d.Int()
	want1, want2 := fingerprint(k)
	if d.Err() != nil || fp1 != want1 || fp2 != want2 || connection == "" ||
		len(provider) > maxIDBytes || len(connection) > maxIDBytes {
		return Pin{}, nil // absent, another session's, or corrupt: no pin
	}
	now := t.clock.Now()
	last := time.UnixMilli(lastMs)
	if last.After(now) {
		last = now
	}
	if now.Sub(last) >= t.ttl {
		return Pin{}, nil
	}
	return Pin{Provider: provider, Connection: connection, LastUse: last}, nil
}

// Record pins the session to the connection a request was dispatched to. seen is the pin
// Lookup returned for this request: when it already names this connection and was used
// less than the refresh interval ago, nothing is written. Otherwise the slot is written
// unconditionally (the latest dispatch wins, whichever worker made it). It reports whether
// it wrote.
func (t *Table) Record(k Key, provider, connection string, seen Pin) (bool, error) {
	if !t.Enabled() || k.IsZero() || connection == "" {
		return false, nil
	}
	now := t.clock.Now()
	if seen.Connection == connection && seen.Provider == provider && now.Sub(seen.LastUse) < t.refresh {
		return false, nil
	}
	if len(provider) > maxIDBytes || len(connection) > maxIDBytes {
		return false, fmt.Errorf("affinity: connection id of %d bytes too long to pin", max(len(provider), len(connection)))
	}
	fp1, fp2 := fingerprint(k)
	e := state.NewEncoder(t.buf, kindPin, pinVersion)
	e.Uint(fp1).Uint(fp2).String(provider).String(connection).Int(now.UnixMilli())
	t.buf = e.Bytes()
	if err := t.store.Set(t.slotKey(k), t.buf, 0); err != nil {
		return false, fmt.Errorf("affinity: record: %w", err)
	}
	return true, nil
}
