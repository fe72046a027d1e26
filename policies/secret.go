package policies

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Secret is a credential or token: a connection's credential value or the admin token. It
// never prints, formats or marshals its value — String, GoString, every fmt verb, JSON and
// text all give [redacted] (or nothing for an empty secret) — and unmarshalling still reads
// it. Reveal returns the value, for the few places that send or compare it.
//
// The value sits behind a pointer so that even a Secret in an unexported struct field,
// which fmt prints by reflection without calling its methods, shows only an address. The
// zero Secret is empty. Secrets are immutable; copies share the value.
type Secret struct {
	value *string
}

// redacted is what a non-empty Secret prints as.
const redacted = "[redacted]"

// NewSecret wraps a value ("" gives the zero, empty Secret).
func NewSecret(value string) Secret {
	if value == "" {
		return Secret{}
	}
	return Secret{value: &value}
}

// Reveal returns the value, for the one place that sends it upstream or compares it.
func (s Secret) Reveal() string {
	if s.value == nil {
		return ""
	}
	return *s.value
}

// IsZero reports whether the secret is empty (encoding/json's omitzero uses it).
func (s Secret) IsZero() bool { return s.value == nil || *s.value == "" }

// String hides the value: "[redacted]", or "" for an empty secret.
func (s Secret) String() string {
	if s.IsZero() {
		return ""
	}
	return redacted
}

// GoString hides the value from %#v.
func (s Secret) GoString() string { return "policies.Secret(" + strconv.Quote(s.String()) + ")" }

// Format hides the value from every fmt verb: %q quotes the redacted form, %#v is
// GoString, every other verb writes String.
func (s Secret) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'q':
		_, _ = f.Write([]byte(strconv.Quote(s.String())))
	case verb == 'v' && f.Flag('#'):
		_, _ = f.Write([]byte(s.GoString()))
	default:
		_, _ = f.Write([]byte(s.String()))
	}
}

// MarshalJSON hides the value: "[redacted]", or "" for an empty secret.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// MarshalText hides the value (for encoders that use encoding.TextMarshaler).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalJSON reads the value from a JSON string (null leaves the secret unchanged).
// Policies are read with Parse, which also expands ${ENV}; this is for other decoders.
func (s *Secret) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var value string
	if err := json.Unmarshal(data, &value); err != nil {
		return fmt.Errorf("policies: secret: %w", err)
	}
	*s = NewSecret(value)
	return nil
}
