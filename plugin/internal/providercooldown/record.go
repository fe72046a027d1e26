package providercooldown

import (
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Records in shared data. Times are Unix milliseconds of the filter's clock.
const (
	windowKind     = state.KindGateWindow // provider entry: cooling deadline + failure timestamps
	windowVersion  = 1
	backoffKind    = state.KindGateBackoff // connection entry: cooling deadline + failures in a row
	backoffVersion = 1
)

// window is a provider entry: the failures inside the sliding window, oldest first, and
// the end of the current cooldown (0 = none).
type window struct {
	coolingUntil int64
	failures     []int64
}

// encodeWindow writes the timestamps as the first one followed by gaps, which keeps a
// full window of recent failures to a few bytes each.
func (w window) encode() []byte {
	e := state.NewEncoder(make([]byte, 0, 16+4*len(w.failures)), windowKind, windowVersion).
		Int(w.coolingUntil).
		Uint(uint64(len(w.failures)))
	prev := int64(0)
	for i, at := range w.failures {
		if i == 0 {
			e.Int(at)
		} else {
			e.Uint(uint64(at - prev))
		}
		prev = at
	}
	return e.Bytes()
}

// windowReader walks a stored window record without allocating.
type windowReader struct {
	d            *state.Decoder
	coolingUntil int64
	n            uint64
	i            uint64
	prev         int64
}

func readWindow(b []byte) (windowReader, error) {
	r := windowReader{d: state.NewDecoder(b, windowKind, windowVersion)}
	r.coolingUntil = r.d.Int()
	r.n = r.d.Uint()
	if r.n == 0 { // nothing follows, so the decoder's verdict is final (bad header included)
		if err := r.d.Err(); err != nil {
			return windowReader{}, err
		}
	}
	if r.n > maxThreshold {
		return windowReader{}, fmt.Errorf("%w: window of %d failures", state.ErrCorrupt, r.n)
	}
	return r, nil
}

// next returns the next failure timestamp; ok is false at the end or on a bad record
// (see done).
func (r *windowReader) next() (at int64, ok bool) {
	if r.i >= r.n {
		return 0, false
	}
	if r.i == 0 {
		at = r.d.Int()
	} else {
		gap := r.d.Uint()
		if gap > 1<<62 {
			return 0, false
		}
		at = r.prev + int64(gap)
	}
	r.i++
	r.prev = at
	return at, true
}

// done reports a decoding error once every timestamp has been read.
func (r *windowReader) done() error {
	if r.i != r.n {
		return fmt.Errorf("%w: window record ends early", state.ErrCorrupt)
	}
	return r.d.Err()
}

func decodeWindow(b []byte) (window, error) {
	r, err := readWindow(b)
	if err != nil {
		return window{}, err
	}
	w := window{coolingUntil: r.coolingUntil, failures: make([]int64, 0, r.n+1)}
	for at, ok := r.next(); ok; at, ok = r.next() {
		w.failures = append(w.failures, at)
	}
	if err := r.done(); err != nil {
		return window{}, err
	}
	return w, nil
}

// backoff is a connection entry: failures in a row and the end of the current cooldown.
type backoff struct {
	coolingUntil int64
	failures     uint64
}

// maxBackoffFailures bounds the stored count; the cooldown is capped long before.
const maxBackoffFailures = 64

func (b backoff) encode() []byte {
	return state.NewEncoder(make([]byte, 0, 2+10+10), backoffKind, backoffVersion).
		Int(b.coolingUntil).
		Uint(b.failures).
		Bytes()
}

func decodeBackoff(raw []byte) (backoff, error) {
	d := state.NewDecoder(raw, backoffKind, backoffVersion)
	b := backoff{coolingUntil: d.Int(), failures: d.Uint()}
	if err := d.Err(); err != nil {
		return backoff{}, err
	}
	if b.failures > maxBackoffFailures {
		return backoff{}, fmt.Errorf("%w: backoff of %d failures", state.ErrCorrupt, b.failures)
	}
	return b, nil
}
