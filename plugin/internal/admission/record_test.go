package admission

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

func TestLeaseRecordRoundTrip(t *testing.T) {
	in := leaseRecord{
		nextID:  1 << 50,
		leases:  []lease{{id: 7, deadlineMs: 1_772_366_400_000, model: hashModel("glm-5"), owner: 3}, {id: 9, deadlineMs: -1, model: 0}},
		waiting: []waitCount{{lane: ^uint64(0), owner: 5, count: 10000, untilMs: 30001}},
	}
	var out leaseRecord
	if err := out.decode(in.encode(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	// An empty record round-trips too.
	empty := leaseRecord{nextID: 1}
	if err := out.decode(empty.encode(nil)); err != nil || out.nextID != 1 || len(out.leases)+len(out.waiting) != 0 {
		t.Fatalf("empty: %+v %v", out, err)
	}
}

func TestTicketRecordRoundTrip(t *testing.T) {
	in := ticketRecord{
		lines: []pubLine{
			{lane: 1, owner: 2, model: hashModel("a"), modelCap: 3, start: 0, n: 2},
			{lane: 4, owner: 0, model: 0, modelCap: 0, start: 2, n: 1},
		},
		tickets: []pubTicket{{order: 1, deadlineMs: 30010}, {order: 2, deadlineMs: 30011}, {order: 9, deadlineMs: -1}},
	}
	var out ticketRecord
	if err := out.decode(in.encode(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
}

func TestPoolRecordRoundTrip(t *testing.T) {
	in := poolRecord{nextID: 42, contendedUntilMs: 99, leases: []lease{{id: 1, deadlineMs: 5, owner: 7}, {id: 2, deadlineMs: 6}}}
	var out poolRecord
	if err := out.decode(in.encode(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v vs %+v", in, out)
	}
}

func TestCorruptRecordsAreReported(t *testing.T) {
	good := (&leaseRecord{nextID: 5, leases: []lease{{id: 1, deadlineMs: 2, model: 3}}}).encode(nil)
	// A version-1 lease record (the layout before the tickets moved out): nextID 5, one
	// lease {1, 2, 3}, no tickets.
	v1 := []byte{leaseKind, 1, 5, 1, 1, 4, 3, 0}
	tests := []struct {
		name string
		b    []byte // stored bytes
	}{
		{name: "empty", b: nil},
		{name: "wrong kind", b: (&poolRecord{nextID: 1}).encode(nil)},
		{name: "version 1", b: v1},
		{name: "wrong version", b: append([]byte{leaseKind, 9}, good[2:]...)},
		{name: "truncated", b: good[:len(good)-1]},
		{name: "trailing byte", b: append(append([]byte(nil), good...), 0)},
		{name: "absurd count", b: []byte{leaseKind, leaseV, 1, 0xff, 0xff, 0xff, 0x7f}},
	}
	for _, tc := range tests {
		var r leaseRecord
		if err := r.decode(tc.b); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", tc.name, err)
		}
	}
	goodT := (&ticketRecord{lines: []pubLine{{lane: 1, n: 1}}, tickets: []pubTicket{{order: 1}}}).encode(nil)
	for name, b := range map[string][]byte{
		"ticket record truncated":    goodT[:len(goodT)-1],
		"ticket record absurd count": {ticketKind, ticketV, 1, 1, 0, 0, 0, 0xff, 0xff, 0x7f},
		"lease record as tickets":    good,
	} {
		var r ticketRecord
		if err := r.decode(b); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestPruneDropsExpired(t *testing.T) {
	r := leaseRecord{
		leases:  []lease{{id: 1, deadlineMs: 100}, {id: 2, deadlineMs: 101}},
		waiting: []waitCount{{lane: 3, count: 1, untilMs: 99}, {lane: 4, count: 2, untilMs: 200}, {lane: 5, count: 0, untilMs: 200}},
	}
	if !r.prune(100) {
		t.Fatal("prune reported no change")
	}
	// A deadline equal to now has expired; an empty waiting count goes too.
	if len(r.leases) != 1 || r.leases[0].id != 2 || len(r.waiting) != 1 || r.waiting[0].lane != 4 {
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
		connCap  int       // connection cap (0 = none)
		leases   []uint64  // models of the live leases
		ahead    []waiting // the tickets ahead of the asker, oldest first
		model    uint64    // the asker's model
		modelCap int       // its cap (0 = none)
		want     bool      // may take a slot now
	}{
		{name: "free connection", connCap: 2, leases: []uint64{a}, model: a, want: true},
		{name: "full connection", connCap: 2, leases: []uint64{a, b}, model: a, want: false},
		{name: "model cap reached, connection free", connCap: 4, leases: []uint64{a}, model: a, modelCap: 1, want: false},
		{name: "model cap only", connCap: 0, leases: []uint64{a, a}, model: a, modelCap: 3, want: true},
		{
			name:    "newcomer behind a ticket that fits waits its turn",
			connCap: 2, leases: []uint64{a},
			ahead: []waiting{{order: 1, model: b}}, model: a, want: false,
		},
		{
			name:    "two free slots: both the ticket and the newcomer fit",
			connCap: 3, leases: []uint64{a},
			ahead: []waiting{{order: 1, model: b}}, model: a, want: true,
		},
		{
			name:    "a ticket blocked by its own model cap does not block another model",
			connCap: 3, leases: []uint64{a},
			ahead: []waiting{{order: 1, model: a, modelCap: 1}}, model: b, want: true,
		},
		{
			name:    "an older ticket for the same capped model goes first",
			connCap: 0, leases: nil,
			ahead: []waiting{{order: 1, model: a, modelCap: 1}}, model: a, modelCap: 1, want: false,
		},
		{
			name:    "the head ticket itself fits",
			connCap: 1, leases: nil,
			model: a, want: true,
		},
		{
			name:    "the second ticket waits for the head",
			connCap: 1, leases: nil,
			ahead: []waiting{{order: 1, model: a}}, model: b, want: false,
		},
	}
	for _, tc := range tests {
		var leases []lease
		for i, m := range tc.leases {
			leases = append(leases, lease{id: uint64(100 + i), model: m})
		}
		var use []modelUse
		if got, _ := turn(leases, tc.ahead, tc.connCap, tc.model, tc.modelCap, &use); got != tc.want {
			t.Errorf("%s: turn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The FIFO order is the same on every VM: the order the lease record gave, then the lane.
func TestFIFOOrder(t *testing.T) {
	ts := []waiting{
		{order: 20, lane: 1},
		{order: 10, lane: 9},
		{order: 10, lane: 2},
		{order: 3, lane: 7},
	}
	want := []waiting{ts[3], ts[2], ts[1], ts[0]}
	got := append([]waiting(nil), ts...)
	slices.SortFunc(got, fifo)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %+v, want %+v", got, want)
	}
}

// FuzzRecordDecoders: whatever bytes shared data holds under an admission key — a torn
// write, another version, another package's record, garbage — every decoder either reports
// ErrCorrupt or reads a record whose encoding reads back as the same record, without
// panicking and in memory linear in the bytes.
func FuzzRecordDecoders(f *testing.F) {
	f.Add((&leaseRecord{nextID: 5, leases: []lease{{id: 1, deadlineMs: 2, model: 3, owner: 4}},
		waiting: []waitCount{{lane: 6, owner: 7, count: 8, untilMs: 9}}}).encode(nil))
	f.Add((&ticketRecord{lines: []pubLine{{lane: 1, owner: 2, model: 3, modelCap: 4, n: 2}},
		tickets: []pubTicket{{order: 5, deadlineMs: 6}, {order: 7, deadlineMs: 8}}}).encode(nil))
	f.Add((&poolRecord{nextID: 1, contendedUntilMs: 2, leases: []lease{{id: 3, deadlineMs: 4, owner: 5}}}).encode(nil))
	f.Add([]byte{ticketKind, ticketV, 0x7f, 1, 0, 0, 0, 0x7f})
	f.Add([]byte{dirKind, dirV, 2, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l, l2 leaseRecord
		if err := l.decode(b); err == nil {
			if err := l2.decode(l.encode(nil)); err != nil || !reflect.DeepEqual(l, l2) {
				t.Fatalf("lease record %x: %+v reads back as %+v (%v)", b, l, l2, err)
			}
		} else if !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("lease record: %v", err)
		}
		var tr, tr2 ticketRecord
		err := tr.decode(b)
		if len(tr.tickets) > len(b) || len(tr.lines) > len(b) {
			t.Fatalf("%d lines and %d tickets from %d bytes", len(tr.lines), len(tr.tickets), len(b))
		}
		if err == nil {
			if err := tr2.decode(tr.encode(nil)); err != nil || !reflect.DeepEqual(tr, tr2) {
				t.Fatalf("ticket record %x: %+v reads back as %+v (%v)", b, tr, tr2, err)
			}
		} else if !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("ticket record: %v", err)
		}
		var p poolRecord
		if err := p.decode(b); err != nil && !errors.Is(err, state.ErrCorrupt) {
			t.Fatalf("pool record: %v", err)
		}
		if peers := decodeDirectory(b, true, nil); len(peers) > maxPeers {
			t.Fatalf("%d peers", len(peers))
		}
	})
}
