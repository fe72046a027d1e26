package state

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrCorrupt reports a stored record that cannot be decoded. Engine packages treat it as a
// missing record (and count it), never as a reason to fail a request.
var ErrCorrupt = errors.New("state: corrupt record")

// Record encoding: one kind byte (which record type, one of the Kind* constants in kinds.go,
// each with one owning package), one version byte, then fields as unsigned or zig-zag signed varints and length-prefixed strings, in a
// fixed order per kind and version. Small, allocation-free to read, and a reader that sees
// a kind or version it does not know reports ErrCorrupt instead of misreading it.

// Encoder appends a record to a reusable buffer.
type Encoder struct{ buf []byte }

// NewEncoder starts a record of the given kind and version in buf (which may be nil or a
// reused buffer).
func NewEncoder(buf []byte, kind, version byte) *Encoder {
	return &Encoder{buf: append(buf[:0], kind, version)}
}

// Uint appends an unsigned varint.
func (e *Encoder) Uint(v uint64) *Encoder { e.buf = binary.AppendUvarint(e.buf, v); return e }

// Int appends a signed (zig-zag) varint.
func (e *Encoder) Int(v int64) *Encoder { e.buf = binary.AppendVarint(e.buf, v); return e }

// String appends a length-prefixed string.
func (e *Encoder) String(s string) *Encoder {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
	return e
}

// Bytes returns the encoded record.
func (e *Encoder) Bytes() []byte { return e.buf }

// Decoder reads a record field by field. The first error sticks: later reads return zero
// values and Err reports it, so callers check once at the end.
type Decoder struct {
	buf []byte
	err error
}

// NewDecoder checks the record's kind and version and returns a decoder for its fields. It
// is small enough to inline, so a decoder that does not escape the caller stays on its stack.
func NewDecoder(b []byte, kind, version byte) *Decoder {
	d := &Decoder{}
	d.buf, d.err = header(b, kind, version)
	return d
}

// header checks a record's kind/version header and returns the fields after it.
func header(b []byte, kind, version byte) ([]byte, error) {
	switch {
	case len(b) < 2:
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	case b[0] != kind:
		return nil, fmt.Errorf("%w: kind %q, want %q", ErrCorrupt, b[0], kind)
	case b[1] != version:
		return nil, fmt.Errorf("%w: kind %q version %d, want %d", ErrCorrupt, kind, b[1], version)
	}
	return b[2:], nil
}

// Uint reads an unsigned varint.
func (d *Decoder) Uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Int reads a signed varint.
func (d *Decoder) Int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// String reads a length-prefixed string.
func (d *Decoder) String() string {
	n := d.Uint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.buf)) {
		d.err = fmt.Errorf("%w: string of %d bytes past the end", ErrCorrupt, n)
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

// View reads a length-prefixed string like String, but returns the record's own bytes
// without copying: the view is only valid while the decoded buffer is, and must not be
// modified. Use it to compare a stored name without allocating.
func (d *Decoder) View() []byte {
	n := d.Uint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.err = fmt.Errorf("%w: string of %d bytes past the end", ErrCorrupt, n)
		return nil
	}
	v := d.buf[:n:n]
	d.buf = d.buf[n:]
	return v
}

// Failed reports whether a read failed (the record is corrupt), mid-record: a decoder of a
// repeated group stops there instead of reading zeros for as long as a count says.
func (d *Decoder) Failed() bool { return d.err != nil }

// Err reports the first decoding error, or trailing bytes. A record read to its end
// without error costs no call.
func (d *Decoder) Err() error {
	if d.err == nil && len(d.buf) == 0 {
		return nil
	}
	return d.errSlow()
}

func (d *Decoder) errSlow() error {
	if d.err == nil {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	return d.err
}
