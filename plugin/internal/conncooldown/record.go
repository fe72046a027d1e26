package conncooldown

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Record kind and version in shared data.
const (
	recordKind    = state.KindConnCooldown
	recordVersion = 1
)

// maxIDBytes bounds provider and connection ids; maxMessageBytes bounds the stored lastError.
const (
	maxIDBytes      = 128
	maxMessageBytes = 160
)

// Shared-data keys (state's keys.go): a connection's cooldown record is its upstream
// account's (state.KeyConnCooldown), the recovery probe claim its provider's upstream's
// (state.KeyRecoveryProbe), so every policy on the account or upstream shares them.

// Conn names one connection: its key in shared data (and its provider's recovery probe
// key) and the fingerprint of the credential it uses now. Build it once per connection when
// the policy loads and reuse it: the hot path then needs no allocation to find the record.
type Conn struct {
	provider    string
	connection  string
	key         string
	probeKey    string
	fingerprint uint64
}

// NewConn validates the ids and precomputes the connection's key: state.KeyConnCooldown of
// account (a state.AccountID), so every policy on the same credential at the same upstream
// reads and writes one record. credentialFingerprint is any string that changes when the
// credential changes (a hash or a version, never the credential itself); a stored terminal
// state or cooldown written under another fingerprint no longer applies. An empty
// fingerprint means unknown: it matches every stored record.
//
// upstream is the provider's state.UpstreamID: one recovery probe per upstream, whichever
// policy claims it.
func NewConn(provider, connection, upstream, account, credentialFingerprint string) (Conn, error) {
	if err := validID("provider", provider); err != nil {
		return Conn{}, err
	}
	if err := validID("connection", connection); err != nil {
		return Conn{}, err
	}
	if err := validID("account", account); err != nil {
		return Conn{}, err
	}
	if err := validID("upstream", upstream); err != nil {
		return Conn{}, err
	}
	return Conn{
		provider:    provider,
		connection:  connection,
		key:         state.KeyConnCooldown.Key(account),
		probeKey:    state.KeyRecoveryProbe.Key(upstream),
		fingerprint: fingerprint(credentialFingerprint),
	}, nil
}

// Provider returns the provider id.
func (c Conn) Provider() string { return c.provider }

// Connection returns the connection id.
func (c Conn) Connection() string { return c.connection }

// validID accepts 1..maxIDBytes printable ASCII bytes without ':' (the key separator).
func validID(what, id string) error {
	if id == "" || len(id) > maxIDBytes {
		return fmt.Errorf("conncooldown: %s id must be 1 to %d bytes, got %d", what, maxIDBytes, len(id))
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; b <= ' ' || b >= 0x7f || b == ':' {
			return fmt.Errorf("conncooldown: %s id %q: byte %d (%q) not allowed", what, id, i, b)
		}
	}
	return nil
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

// record is one connection's stored state. Times are Unix milliseconds, 0 = unset.
type record struct {
	fingerprint   uint64           // credential fingerprint the state was recorded under
	terminal      failure.Terminal // terminal state; TerminalNone while only cooling
	until         int64            // rateLimitedUntil
	setAt         int64            // when the current cooldown was set (herd protection)
	lastFailureAt int64            // when the last counted failure happened
	terminalAt    int64            // when the terminal state was set
	level         int              // backoffLevel
	rejectStreak  int              // consecutive request_rejected verdicts
	expiredCount  int              // expired-credential verdicts since the last success
	errorCode     int              // upstream status of the last failure
	lastErrorType failure.Reason   // reason of the last failure
	lastError     string           // short operator-facing summary of the last failure
}

var terminalCodes = [...]failure.Terminal{
	failure.TerminalNone,
	failure.TerminalBanned,
	failure.TerminalExpired,
	failure.TerminalCreditsExhausted,
}

func terminalCode(t failure.Terminal) uint64 {
	for i, v := range terminalCodes {
		if v == t {
			return uint64(i)
		}
	}
	return 0
}

func (r record) encode() []byte {
	return state.NewEncoder(nil, recordKind, recordVersion).
		Uint(r.fingerprint).
		Uint(terminalCode(r.terminal)).
		Int(r.until).
		Int(r.setAt).
		Int(r.lastFailureAt).
		Int(r.terminalAt).
		Uint(uint64(r.level)).
		Uint(uint64(r.rejectStreak)).
		Uint(uint64(r.expiredCount)).
		Uint(uint64(r.errorCode)).
		String(string(r.lastErrorType)).
		String(r.lastError).
		Bytes()
}

func decodeRecord(b []byte) (record, error) {
	d := state.NewDecoder(b, recordKind, recordVersion)
	var r record
	r.fingerprint = d.Uint()
	term := d.Uint()
	r.until = d.Int()
	r.setAt = d.Int()
	r.lastFailureAt = d.Int()
	r.terminalAt = d.Int()
	level, streak, expired, code := d.Uint(), d.Uint(), d.Uint(), d.Uint()
	r.lastErrorType = failure.Reason(d.String())
	r.lastError = d.String()
	if err := d.Err(); err != nil {
		return record{}, fmt.Errorf("conncooldown: %w", err)
	}
	if term >= uint64(len(terminalCodes)) || level > maxBackoffStepsLimit ||
		streak > maxStreakLimit || expired > maxStreakLimit || code > 999 {
		return record{}, fmt.Errorf("conncooldown: %w: field out of range", state.ErrCorrupt)
	}
	r.terminal = terminalCodes[term]
	r.level, r.rejectStreak, r.expiredCount, r.errorCode = int(level), int(streak), int(expired), int(code)
	return r, nil
}

// millis converts t to Unix milliseconds, with the zero time as 0.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMillis converts Unix milliseconds back, with 0 as the zero time.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// truncateMessage bounds a message to maxMessageBytes without splitting a UTF-8 sequence.
func truncateMessage(s string) string {
	if len(s) <= maxMessageBytes {
		return s
	}
	cut := maxMessageBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
