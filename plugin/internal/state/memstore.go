package state

import (
	"fmt"
	"sync"
)

// MemStore is an in-memory Store with Envoy's shared-data semantics: one process-global CAS
// counter starting at 1 and never 0, cas 0 unconditional, a non-zero cas ignored for a
// missing key. It is safe for concurrent use. Tests interleave writers through BeforeSet.
type MemStore struct {
	mu      sync.Mutex
	entries map[string]memEntry
	nextCAS uint32
	guard   uint32

	// BeforeSet, when set, runs before every Set with the store unlocked, so a test can let
	// another writer in between a caller's Get and its Set.
	BeforeSet func(key string)
}

type memEntry struct {
	value []byte
	cas   uint32
}

// NewMemStore returns an empty store whose creation CAS is already reserved.
func NewMemStore() *MemStore {
	s := &MemStore{entries: map[string]memEntry{}, nextCAS: 1}
	s.guard = s.bump()
	s.entries[KeyGuard.Key()] = memEntry{value: []byte{1}, cas: s.guard}
	return s
}

func (s *MemStore) bump() uint32 {
	c := s.nextCAS
	s.nextCAS++
	if s.nextCAS == 0 {
		s.nextCAS = 1
	}
	return c
}

// Get implements Store.
func (s *MemStore) Get(key string) ([]byte, uint32, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return nil, 0, false, nil
	}
	if len(e.value) == 0 {
		return nil, e.cas, false, nil
	}
	return append([]byte(nil), e.value...), e.cas, true, nil
}

// Set implements Store.
func (s *MemStore) Set(key string, value []byte, cas uint32) error {
	if s.BeforeSet != nil {
		s.BeforeSet(key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok && cas != 0 && cas != e.cas {
		return fmt.Errorf("set %q: %w", key, ErrCasMismatch)
	}
	s.entries[key] = memEntry{value: append([]byte(nil), value...), cas: s.bump()}
	return nil
}

// CreateCAS implements Store.
func (s *MemStore) CreateCAS() (uint32, error) { return s.guard, nil }

// Keys returns the number of live (non-deleted) keys, for tests.
func (s *MemStore) Keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.entries {
		if len(e.value) > 0 {
			n++
		}
	}
	return n
}
