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
	// sessionAffinityTtlMs, guide "Sessieaffiniteit").
	TTL time.Duration
	// RefreshInterval is how often, at most, a pin's last use is rewritten (0 = the
	// default, policies.SessionAffinityRefreshInterval); it is also capped at TTL/10 so a
	// pin in use never expires for lack of a refresh.
	RefreshInterval time.Duration
	// Slots is the size of the pin table (0 = policies.SessionAffinitySlots).
	Slots int
	// Namespace is the policy's state.NamespaceID: pins are the policy's own (state.KeyPin).
	Namespace string
}

// ConfigFrom converts the resolved session affinity settings into a Config: the one
// conversion from policy settings to the pin table.
func ConfigFrom(r *policies.Resolved) Config {
	return Config{TTL: r.SessionAffinityTTL, RefreshInterval: r.SessionAffinityRefreshInterval, Slots: r.SessionAffinitySlots}
}

// Pin is a session's live pin.
type Pin struct {
	// Provider is the pinned connection's provider id.
	Provider string
	// Connection is the pinned connection id.
	Connection string
	// LastUse is when the pin was last written.
	LastUse time.Time

	place uint8 // which of the session's two slots Record writes: 0 = unknown (the first), 1 or 2
}

// IsZero reports whether there is no pin.
func (p Pin) IsZero() bool { return p.Connection == "" }

// Table is the shared pin table. Pins live in a fixed number of shared-data slots (shared
// data has no delete, so one key per session would grow without bound). Each session has two
// slots chosen by independent parts of its key's hash, and each slot remembers its session's
// fingerprint: a session's pin goes to whichever of its two slots is free (empty, expired or
// already its own), else to the one used least recently. Two sessions that collide on one
// slot therefore both keep their pins; only a session whose two slots are both held by live
// sessions displaces one of them. A Table is one worker's handle; not safe for concurrent use.
type Table struct {
	store   state.Store
	clock   state.Clock
	ttl     time.Duration
	refresh time.Duration
	slots   uint64
	prefix  string // the policy's pin keys up to the slot number
	buf     []byte
	// keys remembers recently built slot keys, direct-mapped by slot: a session's requests
	// come in runs (an agent's turns), and building its key again would allocate each time.
	// Bounded whatever sessions clients send.
	keys [keyMemo]slotKeyMemo
}

// keyMemo is how many slot keys a Table remembers.
const keyMemo = 64

type slotKeyMemo struct {
	slot uint64
	key  string // "" = empty
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
		prefix:  state.KeyPin.Prefix(cfg.Namespace),
	}, nil
}

// Enabled reports whether affinity is on (TTL above 0).
func (t *Table) Enabled() bool { return t.ttl > 0 }

// slots returns the session's two slots (equal only in a one-slot table).
func (t *Table) slotsOf(k Key) (uint64, uint64) {
	first := binary.BigEndian.Uint64(k.digest[:8]) % t.slots
	second := binary.BigEndian.Uint64(k.digest[8:16]) % t.slots
	if second == first {
		second = (first + 1) % t.slots
	}
	return first, second
}

// slotKey is the key of the session's first slot.
func (t *Table) slotKey(k Key) string { return t.keyOf(k, 1) }

// keyOf is the key of the session's slot at place (1 or 2; 0 means the first).
func (t *Table) keyOf(k Key, place uint8) string {
	slot, second := t.slotsOf(k)
	if place == 2 {
		slot = second
	}
	m := &t.keys[slot%keyMemo]
	if m.key == "" || m.slot != slot {
		var b [64]byte
		m.slot, m.key = slot, string(strconv.AppendUint(append(b[:0], t.prefix...), slot, 10))
	}
	return m.key
}

// fingerprint identifies the session within its slot.
func fingerprint(k Key) (uint64, uint64) {
	return binary.BigEndian.Uint64(k.digest[8:16]), binary.BigEndian.Uint64(k.digest[16:24])
}

// Lookup returns the session's live pin: none when affinity is off, the key is zero, or
// neither of the session's slots holds its live pin (a slot may be empty, hold another
// session's pin or a corrupt record, or a pin last used TTL or more ago). The returned Pin,
// even a zero one, tells Record which slot to write. The error reports a shared-data
// failure (serve without affinity). A session pinned in its first slot costs one read.
func (t *Table) Lookup(k Key) (Pin, error) {
	if !t.Enabled() || k.IsZero() {
		return Pin{}, nil
	}
	now := t.clock.Now()
	first, err := t.readSlot(k, 1, now)
	if err != nil || first.own {
		return first.pin, err
	}
	if t.slots == 1 {
		return Pin{place: 1}, nil
	}
	second, err := t.readSlot(k, 2, now)
	if err != nil || second.own {
		return second.pin, err
	}
	// No pin: choose where Record puts one. A free slot first; else the slot whose holder
	// was used least recently.
	switch {
	case first.free:
		return Pin{place: 1}, nil
	case second.free:
		return Pin{place: 2}, nil
	case second.lastUse < first.lastUse:
		return Pin{place: 2}, nil
	}
	return Pin{place: 1}, nil
}

// slotState is what one of a session's slots holds for it.
type slotState struct {
	own     bool  // the session's live pin (in pin)
	free    bool  // empty, corrupt, expired, or the session's own expired pin
	lastUse int64 // the other session's last use (Unix ms), when neither
	pin     Pin
}

// readSlot reads the session's slot at place. It allocates only for the session's own pin.
func (t *Table) readSlot(k Key, place uint8, now time.Time) (slotState, error) {
	b, _, found, err := t.store.Get(t.keyOf(k, place))
	if err != nil {
		return slotState{}, fmt.Errorf("affinity: lookup: %w", err)
	}
	if !found {
		return slotState{free: true}, nil
	}
	d := state.NewDecoder(b, kindPin, pinVersion)
	fp1, fp2 := d.Uint(), d.Uint()
	provider, connection, lastMs := d.View(), d.View(), d.Int()
	if d.Err() != nil || len(connection) == 0 || len(provider) > maxIDBytes || len(connection) > maxIDBytes {
		return slotState{free: true}, nil // corrupt
	}
	last := time.UnixMilli(lastMs)
	if last.After(now) {
		last = now
	}
	if now.Sub(last) >= t.ttl {
		return slotState{free: true}, nil // expired, whoever's it was
	}
	if want1, want2 := fingerprint(k); fp1 != want1 || fp2 != want2 {
		return slotState{lastUse: last.UnixMilli()}, nil // another live session's
	}
	return slotState{own: true, pin: Pin{Provider: string(provider), Connection: string(connection), LastUse: last, place: place}}, nil
}

// Record pins the session to the connection a request was dispatched to. seen is the pin
// Lookup returned for this request (it names the slot to write): when it already names this
// connection and was used less than the refresh interval ago, nothing is written. Otherwise
// the slot is written unconditionally (the latest dispatch wins, whichever worker made it).
// It reports whether it wrote.
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
	if err := t.store.Set(t.keyOf(k, seen.place), t.buf, 0); err != nil {
		return false, fmt.Errorf("affinity: record: %w", err)
	}
	return true, nil
}
