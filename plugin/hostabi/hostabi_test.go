package hostabi

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/spillwayproxy/spillway/internal/pairs"
)

func TestPairsRoundTrip(t *testing.T) {
	cases := []struct {
		name  string      // what the map holds
		pairs [][2]string // the map
	}{
		{"empty", [][2]string{}},
		{"pseudo and plain", [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"authorization", "Bearer k"}}},
		{"empty values and duplicates", [][2]string{{"x", ""}, {"x", "2"}, {"", "v"}}},
		{"binary-safe values", [][2]string{{"k", "a\x00b"}}},
	}
	var p Pairs
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p.setFrom(pairs.Append(nil, c.pairs))
			got := p.All()
			if len(got) == 0 && len(c.pairs) == 0 {
				return
			}
			if !reflect.DeepEqual(got, c.pairs) {
				t.Fatalf("got %q, want %q", got, c.pairs)
			}
			if v, ok := p.Get(c.pairs[0][0]); !ok || v != c.pairs[0][1] {
				t.Fatalf("Get(%q) = %q %v", c.pairs[0][0], v, ok)
			}
		})
	}
}

func TestMalformedPairsReadAsEmpty(t *testing.T) {
	good := pairs.Append(nil, [][2]string{{"a", "1"}, {"b", "2"}})
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(huge, 1<<30) // more pairs than bytes
	long := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(long[4:], 1000) // a key longer than the data
	cases := map[string][]byte{"nil": nil, "short": {1, 0}, "count past the end": huge,
		"size past the end": long, "truncated data": good[:len(good)-3]}
	for name, b := range cases {
		var p Pairs
		p.setFrom(b)
		if n := len(p.All()); n != 0 {
			t.Errorf("%s: %d pairs, want an empty map", name, n)
		}
	}
}

func TestReadingIntoPairsReusesItsMemory(t *testing.T) {
	enc := pairs.Append(nil, [][2]string{{":status", "200"}, {"content-type", "application/json"}})
	var p Pairs
	p.setFrom(enc)
	if n := testing.AllocsPerRun(100, func() { p.setFrom(enc) }); n != 0 {
		t.Fatalf("a read into a used Pairs allocates %.0f times", n)
	}
	c := p.Clone()
	p.setFrom(pairs.Append(nil, [][2]string{{":status", "500"}, {"content-type", "text/plain......"}}))
	if c[0][1] != "200" || c[1][1] != "application/json" {
		t.Fatalf("Clone aliases the Pairs: %q", c)
	}
}

func TestJoinPath(t *testing.T) {
	if got := string(JoinPath(nil, "response", "code_details")); got != "response\x00code_details" {
		t.Fatalf("%q", got)
	}
}
