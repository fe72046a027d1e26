package admission

import (
	"testing"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// benchStore is a single-threaded Store that hands out its own buffers instead of copies, so
// the benchmark shows the engine's allocations apart from the host copy (proxy-wasm's
// get_shared_data always copies into guest memory; MemStore copies too).
type benchStore struct {
	entries map[string]*benchEntry
	next    uint32
}

type benchEntry struct {
	value []byte
	cas   uint32
}

func newBenchStore() *benchStore { return &benchStore{entries: map[string]*benchEntry{}, next: 2} }

func (s *benchStore) Get(key string) ([]byte, uint32, bool, error) {
	e, ok := s.entries[key]
	if !ok {
		return nil, 0, false, nil
	}
	return e.value, e.cas, len(e.value) > 0, nil
}

func (s *benchStore) Set(key string, value []byte, cas uint32) error {
	e, ok := s.entries[key]
	if !ok {
		e = &benchEntry{}
		s.entries[key] = e
	} else if cas != 0 && cas != e.cas {
		return state.ErrCasMismatch
	}
	e.value = append(e.value[:0], value...)
	e.cas = s.next
	s.next++
	return nil
}

func (s *benchStore) CreateCAS() (uint32, error) { return 1, nil }

func benchAcquireRelease(b *testing.B, store state.Store, cfg GateConfig) {
	g := mustGate(b, cfg)
	a := New(store, manualclock.New(t0))
	// Two requests already in flight, so the record is not trivial.
	for range 2 {
		if r, err := a.Admit(g, "glm-4.7"); err != nil || !r.Granted {
			b.Fatal(r, err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := a.Admit(g, "glm-5")
		if err != nil || !r.Granted {
			b.Fatal(r, err)
		}
		if _, err := a.Release(r.Lease); err != nil {
			b.Fatal(err)
		}
	}
}

var glmGate = GateConfig{Provider: "zai", Connection: "glm-a", MaxConcurrent: 4, ModelConcurrency: map[string]int{"glm-5": 1, "glm-4.7": 3}}

// Acquire + release with free capacity: connection and model caps, one record.
func BenchmarkAcquireReleaseEngine(b *testing.B) { benchAcquireRelease(b, newBenchStore(), glmGate) }

// The same over MemStore, whose Get and Set copy values like the host does.
func BenchmarkAcquireReleaseMemStore(b *testing.B) {
	benchAcquireRelease(b, state.NewMemStore(), glmGate)
}

// Acquire + release through the full compound gate: global, provider, connection, model.
func BenchmarkAcquireReleaseCompoundEngine(b *testing.B) {
	cfg := glmGate
	cfg.GlobalMaxConcurrent, cfg.ProviderMaxConcurrent = 64, 16
	benchAcquireRelease(b, newBenchStore(), cfg)
}

// A request no cap applies to: no shared data at all.
func BenchmarkAdmitUnlimited(b *testing.B) {
	g := mustGate(b, GateConfig{Provider: "p", Connection: "c"})
	a := New(newBenchStore(), manualclock.New(t0))
	b.ReportAllocs()
	for b.Loop() {
		r, _ := a.Admit(g, "gpt-4o")
		if _, err := a.Release(r.Lease); err != nil {
			b.Fatal(err)
		}
	}
}
