// Package metrics is the store behind the proxy-wasm metric functions as Envoy keeps it for
// a plugin (source/extensions/common/wasm/context.cc defineMetric, incrementMetric,
// recordMetric, getMetric): counters that only go up, gauges, histograms, and ids that carry
// the metric type in their low bits.
package metrics

import (
	"fmt"
	"sort"
	"sync"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// typeBits are the low bits of an id that hold its type (Envoy's wasm.h kMetricTypeMask;
// kMetricIdIncrement is 1 << typeBits). Envoy numbers each type apart; the store numbers
// all in one sequence, so only the low bits match Envoy's ids.
const (
	typeBits = 2
	typeMask = 1<<typeBits - 1
)

// Store is one plugin's metrics. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	metrics []*metric         // by id >> typeBits, from 1
	ids     map[string]uint32 // type and name -> id
}

type metric struct {
	name  string
	typ   abi.MetricType
	value uint64 // counter, gauge; last recorded value of a histogram
	hist  []uint64
}

// Value is a snapshot of one metric.
type Value struct {
	Name  string
	Type  abi.MetricType
	Value uint64 // counter and gauge value; a histogram's last recorded value
	// Samples are every value recorded in a histogram, oldest first.
	Samples []uint64
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{ids: map[string]uint32{}} }

func key(t abi.MetricType, name string) string { return t.String() + "\x00" + name }

// Define returns the id of the metric of type t and name, defining it the first time.
func (s *Store) Define(t abi.MetricType, name string) (uint32, abi.Status) {
	if t > abi.MetricHistogram {
		return 0, abi.StatusBadArgument
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(t, name)
	if id, ok := s.ids[k]; ok {
		return id, abi.StatusOK
	}
	s.metrics = append(s.metrics, &metric{name: name, typ: t})
	id := uint32(len(s.metrics))<<typeBits | uint32(t)
	s.ids[k] = id
	return id, abi.StatusOK
}

// byID finds a metric whose id's index and type both match.
func (s *Store) byID(id uint32) *metric {
	i := int(id >> typeBits)
	if i < 1 || i > len(s.metrics) || uint32(s.metrics[i-1].typ) != id&typeMask {
		return nil
	}
	return s.metrics[i-1]
}

// Increment adds offset to a counter (offset > 0) or a gauge; a histogram is BadArgument.
func (s *Store) Increment(id uint32, offset int64) abi.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byID(id)
	if m == nil {
		return abi.StatusNotFound
	}
	switch m.typ {
	case abi.MetricCounter:
		if offset <= 0 {
			return abi.StatusBadArgument
		}
		m.value += uint64(offset)
	case abi.MetricGauge:
		m.value += uint64(offset)
	default:
		return abi.StatusBadArgument
	}
	return abi.StatusOK
}

// Record adds value to a counter, sets a gauge, or records a histogram sample.
func (s *Store) Record(id uint32, value uint64) abi.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byID(id)
	if m == nil {
		return abi.StatusNotFound
	}
	switch m.typ {
	case abi.MetricCounter:
		m.value += value
	case abi.MetricGauge:
		m.value = value
	default:
		m.value = value
		m.hist = append(m.hist, value)
	}
	return abi.StatusOK
}

// Get reads a counter or a gauge; a histogram is BadArgument.
func (s *Store) Get(id uint32) (uint64, abi.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byID(id)
	if m == nil {
		return 0, abi.StatusNotFound
	}
	if m.typ == abi.MetricHistogram {
		return 0, abi.StatusBadArgument
	}
	return m.value, abi.StatusOK
}

// Lookup returns the metric of type t and name: its value and, for a histogram, every
// sample. A name defined with another type is an error saying so.
func (s *Store) Lookup(name string, t abi.MetricType) (uint64, []uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[key(t, name)]
	if !ok {
		for _, m := range s.metrics {
			if m.name == name {
				return 0, nil, fmt.Errorf("metrics: metric %q is a %s, not a %s", name, m.typ, t)
			}
		}
		return 0, nil, fmt.Errorf("metrics: metric %q not found", name)
	}
	m := s.byID(id)
	return m.value, append([]uint64(nil), m.hist...), nil
}

// Values returns every metric's current value, sorted by name and type.
func (s *Store) Values() []Value {
	s.mu.Lock()
	out := make([]Value, 0, len(s.metrics))
	for _, m := range s.metrics {
		out = append(out, Value{Name: m.name, Type: m.typ, Value: m.value, Samples: append([]uint64(nil), m.hist...)})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Type < out[j].Type
	})
	return out
}

// Names lists the metrics as "type:name", sorted.
func (s *Store) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.metrics))
	for _, m := range s.metrics {
		out = append(out, m.typ.String()+":"+m.name)
	}
	sort.Strings(out)
	return out
}
