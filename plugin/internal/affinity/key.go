// Package affinity pins a client session to a connection in shared data: session-key
// extraction and validation, TTL expiry refreshed on use, and a bounded pin table.
//
// Request flow (guide "Sessieaffiniteit", #7274): KeyFromHeaders reads the first present
// session header; Table.Lookup returns the session's live pin; the caller passes it to
// selection as Request.Pin, which honours it while the pinned connection is eligible; after
// dispatch, Table.Record re-pins the session to the connection actually used (or refreshes
// the pin's last use, at most once per refresh interval). Headers lists the session headers,
// which the filter strips before forwarding upstream.
package affinity

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"github.com/spillwayproxy/spillway/policies"
)

// MaxSessionIDLength bounds a session header value, in bytes (after trimming blanks).
const MaxSessionIDLength = 256

// MaxScopeLength bounds the scope a key is derived in (a route name), in bytes.
const MaxScopeLength = 256

// ErrInvalidSessionID reports a session header value that is too long or not printable
// ASCII. The request is then served without affinity.
var ErrInvalidSessionID = errors.New("affinity: invalid session id")

// Headers returns the session affinity headers in precedence order (a fresh copy). They are
// read for the session key and must never be forwarded upstream.
func Headers() []string { return slices.Clone(policies.SessionAffinityHeaders) }

// Key identifies a session within a scope: a SHA-256 digest of the scope and the session
// id, so the id itself is never stored and the shared-data key has a fixed shape. The zero
// Key means no session.
type Key struct {
	digest [24]byte // bytes 0..7 choose the slot, 8..23 are the stored fingerprint
	set    bool
}

// IsZero reports whether the key names no session.
func (k Key) IsZero() bool { return !k.set }

// NewKey validates a session id and derives its key in scope (the route name, so that one
// session may be pinned per route; "" for one pin per session).
func NewKey(scope, sessionID string) (Key, error) {
	id := trimBlanks(sessionID)
	if err := validate(id); err != nil {
		return Key{}, err
	}
	if len(scope) > MaxScopeLength {
		return Key{}, fmt.Errorf("affinity: scope of %d bytes exceeds %d", len(scope), MaxScopeLength)
	}
	var buf [MaxScopeLength + 1 + MaxSessionIDLength]byte
	n := copy(buf[:], scope)
	buf[n] = 0 // separator: scope "a" + id "bc" never meets scope "ab" + id "c"
	n++
	n += copy(buf[n:], id)
	sum := sha256.Sum256(buf[:n])
	var k Key
	copy(k.digest[:], sum[:])
	k.set = true
	return k, nil
}

// KeyFromHeaders derives the session key from the first present session header, in the
// order of Headers; a header whose value is empty (or only blanks) counts as absent. No
// session header gives the zero Key and no error. An invalid value of the first present
// header gives the zero Key and an error wrapping ErrInvalidSessionID: the request goes
// without affinity, and a lower-precedence header is not consulted instead.
func KeyFromHeaders(scope string, header func(name string) (value string, ok bool)) (Key, error) {
	for _, name := range policies.SessionAffinityHeaders {
		v, ok := header(name)
		if !ok || trimBlanks(v) == "" {
			continue
		}
		k, err := NewKey(scope, v)
		if err != nil {
			return Key{}, fmt.Errorf("%w (header %s)", err, name)
		}
		return k, nil
	}
	return Key{}, nil
}

func validate(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidSessionID)
	}
	if len(id) > MaxSessionIDLength {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidSessionID, len(id), MaxSessionIDLength)
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; b < 0x20 || b > 0x7e {
			return fmt.Errorf("%w: byte %#x at %d is not printable ASCII", ErrInvalidSessionID, b, i)
		}
	}
	return nil
}

// trimBlanks removes leading and trailing spaces and tabs (HTTP optional whitespace).
func trimBlanks(s string) string {
	start, end := 0, len(s)
	for start < end && (s[start] == ' ' || s[start] == '\t') {
		start++
	}
	for end > start && (s[end-1] == ' ' || s[end-1] == '\t') {
		end--
	}
	return s[start:end]
}
