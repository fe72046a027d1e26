package pairs

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

func copyString(b []byte) string { return string(b) }

func TestDecode(t *testing.T) {
	good := Append(nil, [][2]string{{"a", "1"}, {"b", "2"}})
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(huge, 1<<30)
	long := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(long[4:], 1000)
	for _, tc := range []struct {
		name   string
		input  []byte      // the serialization
		want   [][2]string // what Decode appends to an empty dst
		wantOK bool        // whether it is well formed
	}{
		{"round trip", Append(nil, [][2]string{{":path", "/"}, {"x", ""}}), [][2]string{{":path", "/"}, {"x", ""}}, true},
		{"empty", nil, nil, true},
		{"single NUL", []byte{0}, nil, true},
		{"zero pairs", Append(nil, nil), nil, true},
		{"short", []byte{1, 0}, nil, false},
		{"truncated sizes", []byte{2, 0, 0, 0, 1, 0}, nil, false},
		{"count past the end", huge, nil, false},
		{"size past the end", long, nil, false},
		{"truncated data", good[:len(good)-3], nil, false},
		{"missing NUL", append(Append(nil, [][2]string{{"a", "b"}})[:13], 'x', 'b', 0), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Decode(nil, tc.input, copyString)
			if ok != tc.wantOK || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decode = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestDecodeKeepsWhatDstHeld(t *testing.T) {
	dst := [][2]string{{"kept", "1"}}
	got, ok := Decode(dst, []byte{9, 0}, copyString)
	if ok || !reflect.DeepEqual(got, dst) {
		t.Fatalf("malformed: %q, %v; want %q, false", got, ok, dst)
	}
	got, ok = Decode(dst, Append(nil, [][2]string{{"a", "b"}}), copyString)
	if want := [][2]string{{"kept", "1"}, {"a", "b"}}; !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("well formed: %q, %v; want %q, true", got, ok, want)
	}
}

func TestDecodeIntoRoomDoesNotAllocate(t *testing.T) {
	enc := Append(nil, [][2]string{{":status", "200"}, {"content-type", "application/json"}})
	dst := make([][2]string, 0, 2)
	if n := testing.AllocsPerRun(100, func() { dst, _ = Decode(dst[:0], enc, emptyString) }); n != 0 {
		t.Fatalf("Decode into a slice with room allocates %.0f times", n)
	}
}

// emptyString stands for a caller's aliasing conversion (plugin/hostabi's), which does not
// allocate, so that what is counted is Decode's own allocations.
func emptyString([]byte) string { return "" }

func TestAppendLayout(t *testing.T) {
	want := binary.LittleEndian.AppendUint32(nil, 1)
	want = binary.LittleEndian.AppendUint32(want, 2)
	want = binary.LittleEndian.AppendUint32(want, 1)
	want = append(want, 'a', 'b', 0, 'c', 0)
	if got := Append([]byte("x"), [][2]string{{"ab", "c"}}); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("layout %v, want x then %v", got, want)
	}
}
