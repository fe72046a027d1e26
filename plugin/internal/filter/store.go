package filter

import (
	"errors"
	"fmt"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// sharedStore is state.Store over proxy-wasm shared data. A value it returns lives in its
// reused read buffer until its next Get (state.Store allows it).
type sharedStore struct {
	guardCAS uint32 // CAS of this VM's guard key, reserved on first use
	buf      []byte
}

var _ state.Store = (*sharedStore)(nil)

// Get implements state.Store.
func (s *sharedStore) Get(key string) ([]byte, uint32, bool, error) {
	v, cas, err := hostabi.GetSharedData(key, s.buf)
	s.buf = v
	switch {
	case err == nil && len(v) > 0:
		return v, cas, true, nil
	case errors.Is(err, types.ErrorStatusNotFound):
		return nil, 0, false, nil
	case err != nil:
		return nil, 0, false, fmt.Errorf("filter: get shared data: %w", err)
	case len(v) == 0:
		return nil, cas, false, nil
	}
	return v, cas, true, nil
}

// Set implements state.Store.
func (s *sharedStore) Set(key string, value []byte, cas uint32) error {
	err := hostabi.SetSharedData(key, value, cas)
	if err == nil {
		return nil
	}
	if errors.Is(err, types.ErrorStatusCasMismatch) {
		return state.ErrCasMismatch
	}
	if err != nil {
		return fmt.Errorf("filter: set shared data: %w", err)
	}
	return nil
}

// CreateCAS implements state.Store: it writes a guard key once per VM and returns the CAS
// that write was given. Envoy's CAS counter is process-global and every set takes a fresh
// value, so no other key can ever hold it, even after another VM rewrites the guard key.
func (s *sharedStore) CreateCAS() (uint32, error) {
	if s.guardCAS != 0 {
		return s.guardCAS, nil
	}
	key := state.KeyGuard.Key()
	if err := proxywasm.SetSharedData(key, []byte{1}, 0); err != nil {
		return 0, fmt.Errorf("filter: reserve creation cas: %w", err)
	}
	_, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		return 0, fmt.Errorf("filter: reserve creation cas: %w", err)
	}
	s.guardCAS = cas
	return cas, nil
}
