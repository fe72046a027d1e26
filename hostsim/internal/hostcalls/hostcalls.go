// Package hostcalls counts a guest's host calls per function: a fixed table of the host
// functions a host links, one atomic counter per function per VM (one uncontended atomic add
// per call), and Counts, the snapshot built only when read.
package hostcalls

import (
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// Table gives each counted host function, named "module.name", a fixed index.
type Table struct {
	names []string
	index map[string]int
}

// NewTable indexes names in order.
func NewTable(names []string) *Table {
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	return &Table{names: names, index: index}
}

// Index returns the function's index (false if it is not counted).
func (t *Table) Index(name string) (int, bool) {
	i, ok := t.index[name]
	return i, ok
}

// Counters are one VM's counters, indexed like their Table.
type Counters []atomic.Uint64

// NewCounters returns zeroed counters for every function of the table.
func (t *Table) NewCounters() Counters { return make(Counters, len(t.names)) }

// AddTo adds the counters, by function name, to out.
func (t *Table) AddTo(c Counters, out Counts) {
	for i := range c {
		if n := c[i].Load(); n > 0 {
			out[t.names[i]] += n
		}
	}
}

// Reset sets the counters to zero.
func (c Counters) Reset() {
	for i := range c {
		c[i].Store(0)
	}
}

// sharedDataFunctions are the host functions Counts.SharedData adds up: the
// proxy-wasm shared-data reads and writes.
var sharedDataFunctions = []string{"env.proxy_get_shared_data", "env.proxy_set_shared_data"}

// Counts is how many times each host function was called, keyed by its import
// name ("env.proxy_get_shared_data", "wasi_snapshot_preview1.clock_time_get"). Functions
// that were not called are absent.
type Counts map[string]uint64

// Total is the number of host calls of every kind.
func (c Counts) Total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// Proxy is the number of calls into the env module: the proxy-wasm ABI (and cpp-host's
// emscripten stubs, which Go guests never import).
func (c Counts) Proxy() uint64 { return c.prefixed("env.") }

// WASI is the number of WASI calls (wasi_snapshot_preview1 and wasi_unstable).
func (c Counts) WASI() uint64 { return c.Total() - c.Proxy() }

// SharedData is the number of shared-data operations: proxy_get_shared_data plus
// proxy_set_shared_data (a CAS write that fails counts as one operation, as it is one
// host call).
func (c Counts) SharedData() uint64 {
	var n uint64
	for _, name := range sharedDataFunctions {
		n += c[name]
	}
	return n
}

func (c Counts) prefixed(prefix string) uint64 {
	var n uint64
	for k, v := range c {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// Sub returns the calls made since before was taken (c minus before, per function;
// functions that did not change are absent). Both must come from the same VM or Host with
// no reset in between.
func (c Counts) Sub(before Counts) Counts {
	out := Counts{}
	for k, v := range c {
		if b := before[k]; v > b {
			out[k] = v - b
		}
	}
	return out
}

// String lists the counts as "name=n", sorted by name.
func (c Counts) String() string {
	names := make([]string, 0, len(c))
	for k := range c {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatUint(c[k], 10))
	}
	return b.String()
}
