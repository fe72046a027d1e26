package hostfn

import (
	"context"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// memoryModule is a wasm module that exports one page of memory and nothing else.
var memoryModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x05, 0x03, 0x01, 0x00, 0x01, // memory section: one memory, min 1 page
	0x07, 0x0a, 0x01, 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, // export it as "memory"
}

// fakeGuest is the model side of the functions for one test: guest memory with a bump
// allocator, and the answers the test sets. Methods it does not override panic (the
// embedded Guest is nil), so a test fails loudly if a function asks the model for more.
type fakeGuest struct {
	Guest
	mem      api.Memory
	next     uint32 // the allocator's next block
	noMemory bool   // the allocator returns 0

	maps    map[abi.MapType]*[][2]string // visible maps (others: BadArgument)
	buf     *[]byte                      // the visible buffer, of type bufType
	bufType abi.BufferType
	bufRW   bool // the buffer may be set
	scratch []byte

	token    uint32     // what NewCalloutToken answers
	callout  abi.Status // what HTTPCall answers
	calls    []string   // the model calls, in order
	foreign  []byte     // what CallForeign answers
	reply    bool       // CallForeign hands foreign over
	property []byte     // what GetProperty answers
}

func newGuest(t *testing.T) *fakeGuest {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	t.Cleanup(func() { rt.Close(ctx) })
	mod, err := rt.Instantiate(ctx, memoryModule)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeGuest{mem: mod.Memory(), next: 1024, maps: map[abi.MapType]*[][2]string{}}
}

func (g *fakeGuest) Memory() api.Memory { return g.mem }

func (g *fakeGuest) Place(n uint32) uint32 {
	if g.noMemory {
		return 0
	}
	addr := g.next
	g.next += n + 8
	return addr
}

func (g *fakeGuest) HeaderMap(t abi.MapType, mutable bool) (*[][2]string, abi.Status) {
	if m := g.maps[t]; m != nil {
		return m, abi.StatusOK
	}
	return nil, abi.StatusBadArgument
}

func (g *fakeGuest) Scratch() *[]byte { return &g.scratch }

func (g *fakeGuest) Buffer(t abi.BufferType) (*[]byte, bool, bool) {
	if g.buf == nil || t != g.bufType {
		return nil, false, false
	}
	return g.buf, g.bufRW, true
}

func (g *fakeGuest) NewCalloutToken() uint32 {
	g.calls = append(g.calls, "token")
	return g.token
}

func (g *fakeGuest) HTTPCall(token uint32, upstream []byte, headers, trailers [][2]string, body []byte, timeoutMs int32) abi.Status {
	g.calls = append(g.calls, "http_call "+string(upstream))
	return g.callout
}

func (g *fakeGuest) CallForeign(name, args []byte) ([]byte, bool, abi.Status) {
	return g.foreign, g.reply, abi.StatusOK
}

func (g *fakeGuest) GetProperty(path []byte) ([]byte, abi.Status) { return g.property, abi.StatusOK }

// put writes b into guest memory and returns its address and length.
func (g *fakeGuest) put(b []byte) (uint64, uint64) {
	addr := g.Place(uint32(len(b)))
	g.mem.Write(addr, b)
	return uint64(addr), uint64(len(b))
}

// slots returns two fresh out-parameter slots, filled with a sentinel.
func (g *fakeGuest) slots() (uint64, uint64) {
	p := g.Place(8)
	g.mem.WriteUint32Le(p, 0xdeadbeef)
	g.mem.WriteUint32Le(p+4, 0xdeadbeef)
	return uint64(p), uint64(p + 4)
}

// out reads what a function handed over through (ptr, size) slots.
func (g *fakeGuest) out(pp, sp uint64) (addr uint32, data []byte) {
	addr, _ = g.mem.ReadUint32Le(uint32(pp))
	n, _ := g.mem.ReadUint32Le(uint32(sp))
	if n == 0 {
		return addr, nil
	}
	b, _ := g.mem.Read(addr, n)
	return addr, append([]byte(nil), b...)
}

// call runs the env function name with args and returns its status.
func call(t *testing.T, g Guest, name string, args ...uint64) abi.Status {
	t.Helper()
	for _, f := range Funcs() {
		if f.Name == name {
			if len(args) != len(f.Params) {
				t.Fatalf("%s takes %d arguments, the test gave %d", name, len(f.Params), len(args))
			}
			stack := make([]uint64, max(len(f.Params), len(f.Results)))
			copy(stack, args)
			f.Fn(g, nil, stack)
			return abi.Status(stack[0])
		}
	}
	t.Fatalf("no env function %s", name)
	return 0
}

// Every import cpp-host links for some ABI version has a function, and every function is
// an import of some version: a module Envoy loads instantiates.
func TestFunctionsAreTheImports(t *testing.T) {
	names := map[string]bool{}
	for _, f := range Funcs() {
		if names[f.Name] {
			t.Errorf("%s is linked twice", f.Name)
		}
		names[f.Name] = true
		allowed := false
		for _, v := range abi.ABIVersions {
			allowed = allowed || ImportAllowed(f.Name, v)
		}
		if !allowed {
			t.Errorf("%s is linked but no ABI version imports it", f.Name)
		}
	}
	var imports []string
	for n := range envCommon {
		imports = append(imports, n)
	}
	for _, set := range envByABI {
		for n := range set {
			imports = append(imports, n)
		}
	}
	for _, n := range imports {
		if !names[n] {
			t.Errorf("%s is an import cpp-host links but has no function", n)
		}
	}
}

func TestHeaderMapFunctions(t *testing.T) {
	const reqHeaders = uint64(abi.MapRequestHeaders)
	for _, tc := range []struct {
		name   string
		fn     string      // the env function
		key    string      // its key argument ("" for none)
		value  string      // its value argument
		pairs  [][2]string // proxy_set_header_map_pairs' argument
		want   abi.Status  // what it answers
		after  [][2]string // the map afterwards
		gotten string      // the value proxy_get_header_map_value handed over
	}{
		{name: "get is case-insensitive", fn: "proxy_get_header_map_value", key: "B",
			want: abi.StatusOK, gotten: "2"},
		{name: "get a missing key", fn: "proxy_get_header_map_value", key: "c", want: abi.StatusNotFound},
		{name: "add appends a duplicate, lower case", fn: "proxy_add_header_map_value", key: "A", value: "4",
			want: abi.StatusOK, after: [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"a", "4"}}},
		{name: "replace keeps the first, drops the others", fn: "proxy_replace_header_map_value", key: "a", value: "x",
			want: abi.StatusOK, after: [][2]string{{"a", "x"}, {"b", "2"}}},
		{name: "replace a missing key adds it", fn: "proxy_replace_header_map_value", key: "C", value: "y",
			want: abi.StatusOK, after: [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"c", "y"}}},
		{name: "remove drops every value", fn: "proxy_remove_header_map_value", key: "A",
			want: abi.StatusOK, after: [][2]string{{"b", "2"}}},
		{name: "set pairs replaces the map, lower case", fn: "proxy_set_header_map_pairs",
			pairs: [][2]string{{"X-One", "1"}, {"x-two", "2"}},
			want:  abi.StatusOK, after: [][2]string{{"x-one", "1"}, {"x-two", "2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t)
			m := [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}}
			g.maps[abi.MapRequestHeaders] = &m
			kp, kl := g.put([]byte(tc.key))
			vp, vl := g.put([]byte(tc.value))
			var got abi.Status
			switch tc.fn {
			case "proxy_get_header_map_value":
				pp, sp := g.slots()
				got = call(t, g, tc.fn, reqHeaders, kp, kl, pp, sp)
				if _, v := g.out(pp, sp); got == abi.StatusOK && string(v) != tc.gotten {
					t.Fatalf("handed over %q, want %q", v, tc.gotten)
				}
			case "proxy_remove_header_map_value":
				got = call(t, g, tc.fn, reqHeaders, kp, kl)
			case "proxy_set_header_map_pairs":
				p, n := g.put(abi.EncodePairs(tc.pairs))
				got = call(t, g, tc.fn, reqHeaders, p, n)
			default:
				got = call(t, g, tc.fn, reqHeaders, kp, kl, vp, vl)
			}
			if got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.fn, got, tc.want)
			}
			if tc.after != nil && !reflect.DeepEqual(m, tc.after) {
				t.Fatalf("map %q, want %q", m, tc.after)
			}
		})
	}
}

func TestHeaderMapPairsAndSize(t *testing.T) {
	g := newGuest(t)
	m := [][2]string{{":path", "/"}, {"a", "bc"}}
	empty := [][2]string{}
	g.maps[abi.MapRequestHeaders], g.maps[abi.MapResponseHeaders] = &m, &empty
	for _, tc := range []struct {
		name string
		typ  abi.MapType // the map asked for
		want []byte      // what is handed over (nil: address and size 0)
	}{
		{"a map", abi.MapRequestHeaders, abi.EncodePairs(m)},
		{"an empty map hands over nothing", abi.MapResponseHeaders, nil},
		{"a map not visible reads as empty", abi.MapRequestTrailers, nil},
	} {
		pp, sp := g.slots()
		if st := call(t, g, "proxy_get_header_map_pairs", uint64(tc.typ), pp, sp); st != abi.StatusOK {
			t.Fatalf("%s: %v, want Ok", tc.name, st)
		}
		addr, got := g.out(pp, sp)
		if !reflect.DeepEqual(got, tc.want) || (tc.want == nil && addr != 0) {
			t.Fatalf("%s: handed over %q at %d, want %q", tc.name, got, addr, tc.want)
		}
	}
	p := uint64(g.Place(4))
	if st := call(t, g, "proxy_get_header_map_size", uint64(abi.MapRequestHeaders), p); st != abi.StatusOK {
		t.Fatalf("size: %v", st)
	}
	if n, _ := g.mem.ReadUint32Le(uint32(p)); n != uint32(abi.PairsByteSize(m)) {
		t.Fatalf("size %d, want %d", n, abi.PairsByteSize(m))
	}
	if st := call(t, g, "proxy_get_header_map_size", uint64(abi.MapRequestTrailers), p); st != abi.StatusBadArgument {
		t.Fatalf("size of a map not visible: %v, want BadArgument", st)
	}
}

func TestBufferFunctions(t *testing.T) {
	const body = uint64(abi.BufferRequestBody)
	for _, tc := range []struct {
		name   string
		fn     string     // the env function
		args   []uint64   // start and length/max
		data   string     // proxy_set_buffer_bytes' data
		rw     bool       // the buffer may be set
		typ    uint64     // the buffer type asked for
		want   abi.Status // what it answers
		gotten string     // what proxy_get_buffer_bytes handed over
		after  string     // the buffer afterwards
	}{
		{name: "get a slice", fn: "proxy_get_buffer_bytes", args: []uint64{1, 3}, typ: body, want: abi.StatusOK, gotten: "ell", after: "hello"},
		{name: "get past the end", fn: "proxy_get_buffer_bytes", args: []uint64{9, 3}, typ: body, want: abi.StatusOK, after: "hello"},
		{name: "get clipped", fn: "proxy_get_buffer_bytes", args: []uint64{3, 99}, typ: body, want: abi.StatusOK, gotten: "lo", after: "hello"},
		{name: "get overflowing u32", fn: "proxy_get_buffer_bytes", args: []uint64{1, 0xffffffff}, typ: body, want: abi.StatusBadArgument, after: "hello"},
		{name: "get an unknown type", fn: "proxy_get_buffer_bytes", args: []uint64{0, 1}, typ: 9, want: abi.StatusBadArgument, after: "hello"},
		{name: "get a buffer not visible", fn: "proxy_get_buffer_bytes", args: []uint64{0, 1}, typ: uint64(abi.BufferResponseBody), want: abi.StatusNotFound, after: "hello"},
		{name: "set at 0 drains then prepends", fn: "proxy_set_buffer_bytes", args: []uint64{0, 2}, data: "J", rw: true, typ: body, want: abi.StatusOK, after: "Jllo"},
		{name: "set at the end appends", fn: "proxy_set_buffer_bytes", args: []uint64{5, 0}, data: "!", rw: true, typ: body, want: abi.StatusOK, after: "hello!"},
		{name: "set in the middle", fn: "proxy_set_buffer_bytes", args: []uint64{2, 1}, data: "x", rw: true, typ: body, want: abi.StatusBadArgument, after: "hello"},
		{name: "set a read-only buffer", fn: "proxy_set_buffer_bytes", args: []uint64{0, 0}, data: "x", typ: body, want: abi.StatusBadArgument, after: "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t)
			b := []byte("hello")
			g.buf, g.bufType, g.bufRW = &b, abi.BufferRequestBody, tc.rw
			var got abi.Status
			if tc.fn == "proxy_get_buffer_bytes" {
				pp, sp := g.slots()
				got = call(t, g, tc.fn, tc.typ, tc.args[0], tc.args[1], pp, sp)
				if _, v := g.out(pp, sp); got == abi.StatusOK && string(v) != tc.gotten {
					t.Fatalf("handed over %q, want %q", v, tc.gotten)
				}
			} else {
				dp, dl := g.put([]byte(tc.data))
				got = call(t, g, tc.fn, tc.typ, tc.args[0], tc.args[1], dp, dl)
			}
			if got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.fn, got, tc.want)
			}
			if string(b) != tc.after {
				t.Fatalf("buffer %q, want %q", b, tc.after)
			}
		})
	}
}

// proxy_http_call allocates and writes the token before the model validates the call.
func TestHTTPCallWritesTheTokenFirst(t *testing.T) {
	g := newGuest(t)
	g.token, g.callout = 7, abi.StatusBadArgument
	up, upl := g.put([]byte("cluster"))
	hp, hl := g.put(abi.EncodePairs([][2]string{{":path", "/"}}))
	tok := uint64(g.Place(4))
	if st := call(t, g, "proxy_http_call", up, upl, hp, hl, 0, 0, 0, 0, 1000, tok); st != abi.StatusBadArgument {
		t.Fatalf("proxy_http_call = %v, want the model's BadArgument", st)
	}
	if v, _ := g.mem.ReadUint32Le(uint32(tok)); v != 7 {
		t.Fatalf("token slot %d, want 7", v)
	}
	if want := []string{"token", "http_call cluster"}; !reflect.DeepEqual(g.calls, want) {
		t.Fatalf("model calls %q, want %q", g.calls, want)
	}
}

func TestForeignFunctionReply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   bool   // the model hands a result over
		foreign []byte // the result
		want    []byte // what the slots then say (nil: untouched, still the sentinel)
	}{
		{"a result", true, []byte("out"), []byte("out")},
		{"no reply leaves the slots alone", false, nil, nil},
	} {
		g := newGuest(t)
		g.reply, g.foreign = tc.reply, tc.foreign
		np, nl := g.put([]byte("f"))
		pp, sp := g.slots()
		if st := call(t, g, "proxy_call_foreign_function", np, nl, 0, 0, pp, sp); st != abi.StatusOK {
			t.Fatalf("%s: %v", tc.name, st)
		}
		if tc.want == nil {
			raw, _ := g.mem.Read(uint32(pp), 8)
			if binary.LittleEndian.Uint32(raw) != 0xdeadbeef || binary.LittleEndian.Uint32(raw[4:]) != 0xdeadbeef {
				t.Fatalf("%s: the slots were written: % x", tc.name, raw)
			}
			continue
		}
		if _, got := g.out(pp, sp); !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s: handed over %q, want %q", tc.name, got, tc.want)
		}
	}
}

// An allocator that returns no memory fails a hand-over with InvalidMemoryAccess
// (cpp-host's copyToPointerSize), and an empty answer needs no allocation.
func TestHandOverWithoutMemory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		property []byte     // the answer handed over
		want     abi.Status // what proxy_get_property answers
	}{
		{"data", []byte("v"), abi.StatusInvalidMemoryAccess},
		{"empty", nil, abi.StatusOK},
	} {
		g := newGuest(t)
		pp, sp := g.slots()
		path, pl := g.put([]byte("x"))
		g.noMemory, g.property = true, tc.property
		if st := call(t, g, "proxy_get_property", path, pl, pp, sp); st != tc.want {
			t.Fatalf("%s: %v, want %v", tc.name, st, tc.want)
		}
	}
}
