package foreign

import (
	"bytes"
	"encoding/hex"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// cZlib is C zlib's compress() of "hello world!" (what Envoy's compress answers for the
// SDK's foreign_call_on_tick example), made with CPython's zlib module over the system zlib.
const cZlib = "789ccb48cdc9c95728cf2fca495104001e89047e"

func TestZlibRoundTrip(t *testing.T) {
	for _, in := range [][]byte{[]byte("hello world!"), {}, bytes.Repeat([]byte("abc"), 10000)} {
		z, st := Zlib(in)
		// RFC 1950: CMF 0x78 (deflate, 32 KiB window), FLG 0x9c (default level, check bits).
		if st != abi.StatusOK || len(z) < 6 || z[0] != 0x78 || z[1] != 0x9c {
			t.Fatalf("Zlib(%d bytes) = %x, %v; want a zlib stream", len(in), z, st)
		}
		out, st := Unzlib(z)
		if st != abi.StatusOK || !bytes.Equal(out, in) {
			t.Fatalf("Unzlib(Zlib(%d bytes)) = %d bytes, %v", len(in), len(out), st)
		}
	}
}

func TestUnzlibReadsCZlib(t *testing.T) {
	z, _ := hex.DecodeString(cZlib)
	if out, st := Unzlib(z); st != abi.StatusOK || string(out) != "hello world!" {
		t.Fatalf("Unzlib(C zlib's stream) = %q, %v", out, st)
	}
}

func TestUnzlibRefusesWhatZlibRefuses(t *testing.T) {
	z, _ := hex.DecodeString(cZlib)
	corrupt := append([]byte(nil), z...)
	corrupt[len(corrupt)-1] ^= 1 // the Adler-32 check
	for _, tc := range []struct {
		name string
		in   []byte // uncompress's argument
	}{
		{"empty", nil},
		{"not zlib", []byte("hello world!")},
		{"truncated", z[:len(z)-5]},
		{"bad checksum", corrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, st := Unzlib(tc.in); st != abi.StatusSerializationFailure || out != nil {
				t.Fatalf("Unzlib = %q, %v; want SerializationFailure", out, st)
			}
		})
	}
}

func TestUnzlibStopsAtItsBound(t *testing.T) {
	z, _ := Zlib(make([]byte, maxUncompressedBytes+1))
	if _, st := Unzlib(z); st != abi.StatusSerializationFailure {
		t.Fatalf("Unzlib of %d zero bytes: %v; want SerializationFailure", maxUncompressedBytes+1, st)
	}
}

func msg(fields ...[]byte) []byte { return bytes.Join(fields, nil) }

func str(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

func varint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func TestParseFilterStateArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte          // the serialized SetEnvoyFilterStateArguments
		want FilterStateArgs // the arguments read
		ok   bool            // ParseFromString succeeds
	}{
		{"path and value", msg(str(1, "envoy.network.upstream_server_name"), str(2, "api.example")),
			FilterStateArgs{Path: "envoy.network.upstream_server_name", Value: "api.example"}, true},
		{"span", msg(str(1, "k"), varint(3, 1)), FilterStateArgs{Path: "k", Span: 1}, true},
		{"empty message", nil, FilterStateArgs{}, true},
		{"unknown field skipped", msg(varint(9, 7), str(1, "k")), FilterStateArgs{Path: "k"}, true},
		{"last occurrence wins", msg(str(1, "a"), str(1, "b")), FilterStateArgs{Path: "b"}, true},
		{"truncated", str(1, "abc")[:3], FilterStateArgs{}, false},
		{"not UTF-8", str(2, "\xff"), FilterStateArgs{}, false},
		{"not protobuf", []byte{0xff, 0xff, 0xff}, FilterStateArgs{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseFilterStateArgs(tc.in)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("ParseFilterStateArgs = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseFilterStateArgs(f *testing.F) {
	f.Add(msg(str(1, "envoy.network.upstream_server_name"), str(2, "v"), varint(3, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := ParseFilterStateArgs(b)
		if ok && (!utf8.ValidString(a.Path) || !utf8.ValidString(a.Value)) {
			t.Fatalf("accepted non-UTF-8 %+v", a)
		}
	})
}

func FuzzUnzlib(f *testing.F) {
	z, _ := hex.DecodeString(cZlib)
	f.Add(z)
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, st := Unzlib(b); st == abi.StatusOK {
			if back, st := Zlib(out); st != abi.StatusOK || len(back) == 0 {
				t.Fatalf("Zlib of an accepted stream's output: %v", st)
			}
		}
	})
}

func TestFactories(t *testing.T) {
	if f, ok := FactoryFor("envoy.network.upstream_server_name"); !ok {
		t.Fatal("no factory for envoy.network.upstream_server_name")
	} else if obj, ok := f("api.example"); !ok || string(obj) != "api.example" {
		t.Fatalf("object %q, %v", obj, ok)
	}
	// Spillway's routes read wasm.spillway_target, which Envoy registers no factory for.
	if _, ok := FactoryFor("wasm.spillway_target"); ok {
		t.Fatal("a factory for wasm.spillway_target")
	}
}
