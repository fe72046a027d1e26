package admission

import (
	"errors"
	"reflect"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

func TestConnRecordRoundTrip(t *testing.T) {
	in := connRecord{
		nextID:  1 << 50,
		leases:  []lease{{id: 7, deadlineMs: 1_772_366_400_000, model: hashModel("glm-5")}, {id: 9, deadlineMs: -1, model: 0}},
		tickets: []ticket{{id: 8, enqueuedMs: 1, deadlineMs: 30001, model: ^uint64(0), modelCap: 3}},
	}
	var out connRecord
	if err := out.decode(in.encode(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	// An empty record round-trips too.
	empty := connRecord{nextID: 1}
	if err := out.decode(empty.encode(nil)); err != nil || out.nextID != 1 || len(out.leases)+len(out.tickets) != 0 {
		t.Fatalf("empty: %+v %v", out, err)
	}
}

func TestPoolRecordRoundTrip(t *testing.T) {
	in := poolRecord{nextID: 42, contendedUntilMs: 99, leases: []lease{{id: 1, deadlineMs: 5}, {id: 2, deadlineMs: 6}}}
	var out poolRecord
	if err := out.decode(in.encode(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v vs %+v", in, out)
	}
}

func TestCorruptRecordsAreReported(t *testing.T) {
	good := (&connRecord{nextID: 5, leases: []lease{{id: 1, deadlineMs: 2, model: 3}}}).encode(nil)
	tests := []struct {
		name string
		b    []byte // stored bytes
	}{
		{name: "empty", b: nil},
		{name: "wrong kind", b: (&poolRecord{nextID: 1}).encode(nil)},
		{name: "wrong version", b: append([]byte{connKind, 9}, good[2:]...)},
		{name: "truncated", b: good[:len(good)-1]},
		{name: "trailing byte", b: append(append([]byte(nil), good...), 0)},
		{name: "absurd count", b: []byte{connKind, codecV1, 1, 0xff, 0xff, 0xff, 0x7f}},
	}
	for _, tc := range tests {
		var r connRecord
		if err := r.decode(tc.b); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", tc.name, err)
		}
	}
}

func TestPruneDropsExpired(t *testing.T) {
	r := connRecord{
		leases:  []lease{{id: 1, deadlineMs: 100}, {id: 2, deadlineMs: 101}},
		tickets: []ticket{{id: 3, deadlineMs: 99}, {id: 4, deadlineMs: 200}},
	}
	if !r.prune(100) {
		t.Fatal("prune reported no change")
	}
	// A deadline equal to now has expired.
	if len(r.leases) != 1 || r.leases[0].id != 2 || len(r.tickets) != 1 || r.tickets[0].id != 4 {
		t.Fatalf("after prune: %+v", r)
	}
	if r.prune(100) {
		t.Fatal("second prune reported a change")
	}
}

func TestTurn(t *testing.T) {
	a, b := hashModel("a"), hashModel("b")
	tests := []struct {
		name     string
		connCap  int      // connection cap (0 = none)
		leases   []uint64 // models of the live leases
		tickets  []ticket // the queue, oldest first
		pos      int      // the asker's place (len(tickets) = newcomer)
		model    uint64   // the asker's model
		modelCap int      // its cap (0 = none)
		want     bool     // may take a slot now
	}{
		{name: "free connection", connCap: 2, leases: []uint64{a}, pos: 0, model: a, want: true},
		{name: "full connection", connCap: 2, leases: []uint64{a, b}, pos: 0, model: a, want: false},
		{name: "model cap reached, connection free", connCap: 4, leases: []uint64{a}, pos: 0, model: a, modelCap: 1, want: false},
		{name: "model cap only", connCap: 0, leases: []uint64{a, a}, pos: 0, model: a, modelCap: 3, want: true},
		{
			name:    "newcomer behind a ticket that fits waits its turn",
			connCap: 2, leases: []uint64{a},
			tickets: []ticket{{id: 1, model: b}}, pos: 1, model: a, want: false,
		},
		{
			name:    "two free slots: both the ticket and the newcomer fit",
			connCap: 3, leases: []uint64{a},
			tickets: []ticket{{id: 1, model: b}}, pos: 1, model: a, want: true,
		},
		{
			name:    "a ticket blocked by its own model cap does not block another model",
			connCap: 3, leases: []uint64{a},
			tickets: []ticket{{id: 1, model: a, modelCap: 1}}, pos: 1, model: b, want: true,
		},
		{
			name:    "an older ticket for the same capped model goes first",
			connCap: 0, leases: nil,
			tickets: []ticket{{id: 1, model: a, modelCap: 1}}, pos: 1, model: a, modelCap: 1, want: false,
		},
		{
			name:    "the head ticket itself fits",
			connCap: 1, leases: nil,
			tickets: []ticket{{id: 1, model: a}, {id: 2, model: b}}, pos: 0, model: a, want: true,
		},
		{
			name:    "the second ticket waits for the head",
			connCap: 1, leases: nil,
			tickets: []ticket{{id: 1, model: a}, {id: 2, model: b}}, pos: 1, model: b, want: false,
		},
	}
	for _, tc := range tests {
		r := connRecord{tickets: tc.tickets}
		for i, m := range tc.leases {
			r.leases = append(r.leases, lease{id: uint64(100 + i), model: m})
		}
		var use []modelUse
		if got := r.turn(tc.connCap, tc.pos, tc.model, tc.modelCap, &use); got != tc.want {
			t.Errorf("%s: turn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestInsertTicketKeepsFIFO(t *testing.T) {
	r := connRecord{tickets: []ticket{{id: 1, enqueuedMs: 10}, {id: 3, enqueuedMs: 30}}}
	if at := r.insertTicket(ticket{id: 2, enqueuedMs: 20}); at != 1 {
		t.Fatalf("inserted at %d, want 1", at)
	}
	if at := r.insertTicket(ticket{id: 4, enqueuedMs: 30}); at != 3 {
		t.Fatalf("equal time, larger id: inserted at %d, want 3", at)
	}
	var ids []uint64
	for _, tk := range r.tickets {
		ids = append(ids, tk.id)
	}
	if !reflect.DeepEqual(ids, []uint64{1, 2, 3, 4}) {
		t.Fatalf("order %v", ids)
	}
}
