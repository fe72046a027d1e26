// Package state is the boundary between Spillway's engine and the proxy's cross-worker
// memory: a Store with get and compare-and-swap over shared data, a Clock, a bounded CAS
// update loop, and a compact versioned record encoding.
//
// Envoy's shared data is proxy-wasm-cpp-host's (src/shared_data.cc and shared_data.h): one
// process-wide map per vm_id with a process-global CAS counter (SharedData::nextCas, which
// never hands out 0). SharedData::get returns the value and its CAS. SharedData::set with a
// zero cas is unconditional; with a non-zero cas it fails with CasMismatch (ErrCasMismatch
// here) on an existing key whose CAS differs, and succeeds on a missing key. ABI 0.2.x has
// no call to delete a key or list keys. Every engine package reads and writes only through
// this interface, so it runs natively in tests and over proxy-wasm in the filter without
// change. keys.go defines the key layout: whose each record is, and who shares it.
package state

import (
	"errors"
	"fmt"
	"time"
)

// ErrCasMismatch reports that the value changed since it was read.
var ErrCasMismatch = errors.New("state: cas mismatch")

// ErrContention reports that a CAS update lost the race MaxCASAttempts times in a row.
var ErrContention = errors.New("state: too much contention")

// MaxCASAttempts bounds every read-modify-write loop. Envoy workers run callbacks one at a
// time per thread, so a handful of workers can only collide a handful of times.
const MaxCASAttempts = 16

// Store is shared data with compare-and-swap.
type Store interface {
	// Get returns the value stored under key and its CAS. A missing key returns
	// found=false, a nil value, cas 0 and no error. A deleted key (empty value, see
	// Delete) returns found=false with its real, non-zero CAS. The value may live in memory
	// the store reuses: it is valid until the next call on the store, so a caller copies
	// what it keeps (the engine's decoders read it at once).
	Get(key string) (value []byte, cas uint32, found bool, err error)
	// Set stores value under key if cas is 0, or if cas matches the stored CAS, or if the
	// key is missing (Envoy does not check the CAS of a missing key); otherwise it returns
	// ErrCasMismatch.
	Set(key string, value []byte, cas uint32) error
	// CreateCAS returns a non-zero CAS that no existing entry holds. Envoy's CAS counter is
	// process-global and every successful set takes a fresh value, so the CAS of a guard
	// key that is never rewritten can never be the CAS of another key. Set with it
	// therefore creates a missing key, and fails with ErrCasMismatch if a concurrent writer
	// created the key first: an atomic create, which shared data lacks otherwise.
	CreateCAS() (uint32, error)
}

// Clock tells the time. The filter uses the guest's wall clock (WASI clock_time_get,
// virtual in hostsim tests); engine tests use a manual clock.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now implements Clock.
func (f ClockFunc) Now() time.Time { return f() }

// Mutation is the decision of an Update callback.
type Mutation int

const (
	// Keep leaves the stored value as it is.
	Keep Mutation = iota
	// Write stores the returned value.
	Write
	// Delete stores the empty value, which reads back as missing: shared data has no
	// delete, so an empty value is the tombstone.
	Delete
)

// UpdateFunc computes the new value from the current one. It may run several times (once
// per CAS attempt), so it must be free of side effects outside its return values.
type UpdateFunc func(current []byte, found bool) (next []byte, m Mutation, err error)

// Update runs a bounded read-modify-write loop on key: no update is lost and none is applied
// twice, whatever other workers do meanwhile. It returns the value stored when it returns
// (the new value after Write, the current one after Keep, nil after Delete).
func Update(s Store, key string, fn UpdateFunc) ([]byte, error) {
	for attempt := 0; attempt < MaxCASAttempts; attempt++ {
		cur, cas, found, err := s.Get(key)
		if err != nil {
			return nil, fmt.Errorf("state: get %q: %w", key, err)
		}
		next, m, err := fn(cur, found)
		if err != nil {
			return nil, err
		}
		switch m {
		case Keep:
			return cur, nil
		case Delete:
			if !found {
				return nil, nil
			}
			next = nil
		}
		if cas == 0 { // never written: create atomically
			if cas, err = s.CreateCAS(); err != nil {
				return nil, fmt.Errorf("state: create %q: %w", key, err)
			}
		}
		if err = s.Set(key, next, cas); err == nil {
			return next, nil
		}
		if errors.Is(err, ErrCasMismatch) {
			continue
		}
		return nil, fmt.Errorf("state: set %q: %w", key, err)
	}
	return nil, fmt.Errorf("%w: key %q", ErrContention, key)
}
