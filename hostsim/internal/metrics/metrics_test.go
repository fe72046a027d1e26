package metrics

import (
	"reflect"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

func TestMetricCalls(t *testing.T) {
	s := NewStore()
	c, _ := s.Define(abi.MetricCounter, "c")
	g, _ := s.Define(abi.MetricGauge, "g")
	h, _ := s.Define(abi.MetricHistogram, "h")
	if again, _ := s.Define(abi.MetricCounter, "c"); again != c {
		t.Fatalf("redefining a counter gave id %d, want %d", again, c)
	}
	for id, typ := range map[uint32]abi.MetricType{c: abi.MetricCounter, g: abi.MetricGauge, h: abi.MetricHistogram} {
		if id&typeMask != uint32(typ) {
			t.Fatalf("id %d does not carry type %v in its low bits", id, typ)
		}
	}
	for _, tc := range []struct {
		name string
		call func() abi.Status // one host call
		want abi.Status        // what it answers
	}{
		{"define an unknown type", func() abi.Status { _, st := s.Define(3, "x"); return st }, abi.StatusBadArgument},
		{"counter up", func() abi.Status { return s.Increment(c, 2) }, abi.StatusOK},
		{"counter never down", func() abi.Status { return s.Increment(c, -1) }, abi.StatusBadArgument},
		{"counter record adds", func() abi.Status { return s.Record(c, 3) }, abi.StatusOK},
		{"gauge down", func() abi.Status { return s.Increment(g, -5) }, abi.StatusOK},
		{"gauge record sets", func() abi.Status { return s.Record(g, 7) }, abi.StatusOK},
		{"histogram sample", func() abi.Status { return s.Record(h, 11) }, abi.StatusOK},
		{"histogram second sample", func() abi.Status { return s.Record(h, 13) }, abi.StatusOK},
		{"histogram increment", func() abi.Status { return s.Increment(h, 1) }, abi.StatusBadArgument},
		{"histogram get", func() abi.Status { _, st := s.Get(h); return st }, abi.StatusBadArgument},
		{"id with the wrong type bits", func() abi.Status { _, st := s.Get(c | 1); return st }, abi.StatusNotFound},
		{"unknown id", func() abi.Status { return s.Record(99<<typeBits, 1) }, abi.StatusNotFound},
	} {
		if got := tc.call(); got != tc.want {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if v, st := s.Get(c); st != abi.StatusOK || v != 5 {
		t.Fatalf("counter = %d, %v; want 5, Ok", v, st)
	}
	if v, _, _ := s.Lookup("g", abi.MetricGauge); v != 7 {
		t.Fatalf("gauge = %d, want 7", v)
	}
	if v, samples, _ := s.Lookup("h", abi.MetricHistogram); v != 13 || !reflect.DeepEqual(samples, []uint64{11, 13}) {
		t.Fatalf("histogram = %d %v, want 13 [11 13]", v, samples)
	}
	if _, _, err := s.Lookup("c", abi.MetricGauge); err == nil {
		t.Fatal("reading a counter as a gauge did not fail")
	}
	if got, want := s.Names(), []string{"counter:c", "gauge:g", "histogram:h"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
}
