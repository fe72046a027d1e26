package hostcalls

import (
	"reflect"
	"testing"
)

func TestCountsAddUp(t *testing.T) {
	table := NewTable([]string{"env.proxy_get_shared_data", "env.proxy_set_shared_data", "env.proxy_log",
		"wasi_snapshot_preview1.clock_time_get"})
	c := table.NewCounters()
	for name, n := range map[string]int{"env.proxy_get_shared_data": 3, "env.proxy_log": 1, "wasi_snapshot_preview1.clock_time_get": 2} {
		i, ok := table.Index(name)
		if !ok {
			t.Fatalf("%s has no index", name)
		}
		for range n {
			c[i].Add(1)
		}
	}
	if _, ok := table.Index("env.unknown"); ok {
		t.Fatal("an unknown function has an index")
	}
	before := Counts{}
	table.AddTo(c, before)
	if want := (Counts{"env.proxy_get_shared_data": 3, "env.proxy_log": 1, "wasi_snapshot_preview1.clock_time_get": 2}); !reflect.DeepEqual(before, want) {
		t.Fatalf("counts %v, want %v (uncalled functions absent)", before, want)
	}
	for _, tc := range []struct {
		name      string
		got, want uint64 // the sum and what it should be
	}{
		{"Total", before.Total(), 6},
		{"Proxy", before.Proxy(), 4},
		{"WASI", before.WASI(), 2},
		{"SharedData", before.SharedData(), 3},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	i, _ := table.Index("env.proxy_set_shared_data")
	c[i].Add(1)
	after := Counts{}
	table.AddTo(c, after)
	if d := after.Sub(before); !reflect.DeepEqual(d, Counts{"env.proxy_set_shared_data": 1}) {
		t.Fatalf("Sub = %v, want only the new call", d)
	}
	if got, want := after.String(), "env.proxy_get_shared_data=3 env.proxy_log=1 env.proxy_set_shared_data=1 wasi_snapshot_preview1.clock_time_get=2"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	c.Reset()
	zero := Counts{}
	table.AddTo(c, zero)
	if len(zero) != 0 {
		t.Fatalf("after Reset: %v", zero)
	}
}
