package abi

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

func TestPairsRoundTripAndLimits(t *testing.T) {
	many := make([][2]string, 1025)
	for i := range many {
		many[i] = [2]string{"k", "v"}
	}
	for _, tc := range []struct {
		name   string
		input  []byte      // serialized map
		want   [][2]string // decoded pairs
		wantOK bool        // well formed and within cpp-host's limits
	}{
		{"round trip", EncodePairs([][2]string{{":path", "/"}, {"x", ""}}), [][2]string{{":path", "/"}, {"x", ""}}, true},
		{"empty", nil, nil, true},
		{"single NUL", []byte{0}, nil, true},
		{"zero pairs", EncodePairs(nil), [][2]string{}, true},
		{"truncated sizes", []byte{2, 0, 0, 0, 1, 0}, nil, false},
		{"missing NUL", append(EncodePairs([][2]string{{"a", "b"}})[:13], 'x', 'b', 0), nil, false},
		{"over 1024 pairs", EncodePairs(many), nil, false},
		{"over 1 MiB", EncodePairs([][2]string{{"k", strings.Repeat("v", 1<<20)}}), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := DecodePairs(tc.input)
			if ok != tc.wantOK || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("DecodePairs = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	// Layout: count, then (key length, value length) per pair, then NUL-terminated data.
	b := EncodePairs([][2]string{{"ab", "c"}})
	want := binary.LittleEndian.AppendUint32(nil, 1)
	want = binary.LittleEndian.AppendUint32(want, 2)
	want = binary.LittleEndian.AppendUint32(want, 1)
	want = append(want, 'a', 'b', 0, 'c', 0)
	if !bytes.Equal(b, want) {
		t.Fatalf("layout %v, want %v", b, want)
	}
}
