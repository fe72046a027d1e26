package handoff

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
)

func twoTargets() Plan {
	return Plan{PolicyHash: 0xfeedface, Route: 2, Model: "gpt-4o", Stream: true, Targets: []Target{
		{Provider: 0, Connection: 1, Model: "gpt-4o"}, {Provider: 0, Connection: 0, Model: "gpt-4o-2024-08-06"}}}
}

func TestPlanRoundTrip(t *testing.T) {
	cases := []struct {
		name string // what the plan holds
		plan Plan
	}{
		{"two targets of one provider, streamed", twoTargets()},
		{"one target, an empty requested model, not streamed", Plan{Targets: []Target{{Provider: 3, Connection: 7}}}},
		{"as many targets as allowed, the longest models", func() Plan {
			p := Plan{PolicyHash: ^uint64(0), Route: maxIndex, Model: strings.Repeat("m", MaxModelBytes)}
			for i := range MaxTargets {
				p.Targets = append(p.Targets, Target{Provider: i, Connection: maxIndex, Model: strings.Repeat("t", MaxModelBytes)})
			}
			return p
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.plan.Encode(make([]byte, 0, 8))
			if err != nil {
				t.Fatal(err)
			}
			got := Plan{Targets: make([]Target, 0, 1)}
			if err := got.Decode(b); err != nil {
				t.Fatal(err)
			}
			again, _ := got.Encode(nil)
			if want, _ := c.plan.Encode(nil); !bytes.Equal(again, want) || got.Model != c.plan.Model ||
				got.Stream != c.plan.Stream || len(got.Targets) != len(c.plan.Targets) || got.Targets[0] != c.plan.Targets[0] {
				t.Errorf("decoded %+v, want %+v", got, c.plan)
			}
		})
	}
}

func TestPlanEncodeRefusesWhatItCannotHold(t *testing.T) {
	long := strings.Repeat("x", MaxModelBytes+1)
	cases := []struct {
		name string      // what is wrong
		edit func(*Plan) // applied to twoTargets
		want error       // the error's kind
	}{
		{"no target", func(p *Plan) { p.Targets = nil }, ErrTooLarge},
		{"too many targets", func(p *Plan) { p.Targets = make([]Target, MaxTargets+1) }, ErrTooLarge},
		{"a requested model too long", func(p *Plan) { p.Model = long }, ErrTooLarge},
		{"a target's model too long", func(p *Plan) { p.Targets[1].Model = long }, ErrTooLarge},
		{"a negative route", func(p *Plan) { p.Route = -1 }, ErrMalformed},
		{"a negative connection", func(p *Plan) { p.Targets[0].Connection = -1 }, ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := twoTargets()
			c.edit(&p)
			buf := []byte("keep")
			b, err := p.Encode(buf)
			if !errors.Is(err, c.want) || b != nil || string(buf) != "keep" {
				t.Errorf("Encode: %q, %v; want nothing, buf untouched, and %v", b, err, c.want)
			}
		})
	}
}

func TestPlanDecodeRefusesMalformedRecords(t *testing.T) {
	gp := twoTargets()
	good, _ := gp.Encode(nil)
	enc := func() *state.Encoder { return state.NewEncoder(nil, state.KindHandoffPlan, version) }
	cases := []struct {
		name   string // what is wrong
		record []byte
	}{
		{"empty", nil},
		{"another kind", append([]byte{state.KindBreaker}, good[1:]...)},
		{"another version", append([]byte{good[0], version + 1}, good[2:]...)},
		{"cut short", good[:len(good)-3]},
		{"trailing bytes", append(append([]byte(nil), good...), 0)},
		{"no target", enc().Uint(1).Uint(0).String("m").Uint(0).Uint(0).Bytes()},
		{"too many targets", enc().Uint(1).Uint(0).String("m").Uint(0).Uint(MaxTargets + 1).Bytes()},
		{"a stream flag that is not 0 or 1", enc().Uint(1).Uint(0).String("m").Uint(2).Uint(1).Uint(0).Uint(0).String("").Bytes()},
		{"a route past any policy", enc().Uint(1).Uint(maxIndex + 1).String("m").Uint(0).Uint(1).Uint(0).Uint(0).String("").Bytes()},
		{"a provider past any policy", enc().Uint(1).Uint(0).String("m").Uint(0).Uint(1).Uint(maxIndex + 1).Uint(0).String("").Bytes()},
		{"a target's model too long", enc().Uint(1).Uint(0).String("m").Uint(0).Uint(1).Uint(0).Uint(0).String(strings.Repeat("x", MaxModelBytes+1)).Bytes()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := twoTargets()
			if err := p.Decode(c.record); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode: %v, want ErrMalformed", err)
			}
			if p.Model != "" || len(p.Targets) != 0 || p.PolicyHash != 0 {
				t.Errorf("after a failed Decode the plan is %+v, want it empty", p)
			}
		})
	}
}

func TestPlanFitsOnlyItsPolicy(t *testing.T) {
	res := &policies.Resolved{
		Providers: []policies.ResolvedProvider{{Connections: make([]policies.ResolvedConnection, 2)}},
		Routes:    make([]policies.ResolvedRoute, 3),
	}
	cases := []struct {
		name string      // the plan against res
		edit func(*Plan) // applied to twoTargets
		hash uint64      // the instance's policy hash
		ok   bool        // whether it fits
	}{
		{"the same policy, every index in it", func(*Plan) {}, 0xfeedface, true},
		{"another policy's plan", func(*Plan) {}, 0xfeedfacf, false},
		{"a route past the policy's", func(p *Plan) { p.Route = 3 }, 0xfeedface, false},
		{"a provider past the policy's", func(p *Plan) { p.Targets[1].Provider = 1 }, 0xfeedface, false},
		{"a connection past its provider's", func(p *Plan) { p.Targets[0].Connection = 2 }, 0xfeedface, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := twoTargets()
			c.edit(&p)
			if err := p.Fits(c.hash, res); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Errorf("Fits: %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestTriesRoundTripAndLast(t *testing.T) {
	var tr Tries
	if _, ok := tr.Last(); ok {
		t.Fatal("Last of no tries reported one")
	}
	b, err := tr.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Tries{}).Decode(b); err != nil {
		t.Fatalf("an empty record: %v", err)
	}
	tr.List = []Try{
		{Attempt: 1, Target: 0, Outcome: Retried, Status: 429, Leased: true},
		{Attempt: 2, Target: -1, Outcome: Answered},
		{Attempt: 3, Target: MaxTargets - 1, Outcome: Started, Status: 0},
		{Attempt: 4, Target: 1, Outcome: Passed, Status: 200, Leased: true},
	}
	if b, err = tr.Encode(b[:0]); err != nil {
		t.Fatal(err)
	}
	got := Tries{List: make([]Try, 0, 8)}
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	if len(got.List) != len(tr.List) {
		t.Fatalf("decoded %d tries, want %d", len(got.List), len(tr.List))
	}
	for i := range tr.List {
		if got.List[i] != tr.List[i] {
			t.Errorf("try %d: %+v, want %+v", i, got.List[i], tr.List[i])
		}
	}
	if last, ok := got.Last(); !ok || last != tr.List[3] {
		t.Errorf("Last: %+v %v", last, ok)
	}
}

func TestTriesRefuseWhatIsOutOfBounds(t *testing.T) {
	cases := []struct {
		name string // the try that cannot be recorded
		try  Try
	}{
		{"attempt 0", Try{Attempt: 0, Outcome: Started}},
		{"no outcome", Try{Attempt: 1}},
		{"an unknown outcome", Try{Attempt: 1, Outcome: Answered + 1}},
		{"a target past a plan's", Try{Attempt: 1, Target: MaxTargets, Outcome: Started}},
		{"a target below -1", Try{Attempt: 1, Target: -2, Outcome: Started}},
		{"a status past 999", Try{Attempt: 1, Outcome: Passed, Status: 1000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := Tries{List: []Try{c.try}}
			if _, err := tr.Encode(nil); !errors.Is(err, ErrMalformed) {
				t.Errorf("Encode: %v, want ErrMalformed", err)
			}
			// The decoder refuses the same try, written past Encode's checks.
			rec := state.NewEncoder(nil, state.KindHandoffTries, version).Uint(1).Uint(uint64(max(c.try.Attempt, 0))).
				Int(int64(c.try.Target)).Uint(uint64(c.try.Outcome)).Uint(uint64(c.try.Status)).Uint(0).Bytes()
			got := Tries{List: []Try{{Attempt: 9, Outcome: Passed}}}
			if err := got.Decode(rec); !errors.Is(err, ErrMalformed) || len(got.List) != 0 {
				t.Errorf("Decode: %v, %+v; want ErrMalformed and no tries", err, got.List)
			}
		})
	}
	if _, err := (&Tries{List: make([]Try, MaxTries+1)}).Encode(nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too many tries: %v, want ErrTooLarge", err)
	}
}

// FuzzDecode: no input makes a decoder panic, and whatever decodes encodes to a record that
// decodes to the same thing (varints may be written longer than needed, so the bytes may
// differ; what they say may not).
func FuzzDecode(f *testing.F) {
	fp := twoTargets()
	plan, _ := fp.Encode(nil)
	tries, _ := (&Tries{List: []Try{{Attempt: 1, Target: 0, Outcome: Retried, Status: 429}}}).Encode(nil)
	f.Add(plan)
	f.Add(tries)
	f.Add([]byte{state.KindHandoffPlan, version})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p, p2 Plan
		if p.Decode(b) == nil {
			again, err := p.Encode(nil)
			if err != nil || p2.Decode(again) != nil || !reflect.DeepEqual(p, p2) {
				t.Errorf("plan %q decoded to %+v, which encodes to %q (%v) and decodes to %+v", b, p, again, err, p2)
			}
		}
		var tr, tr2 Tries
		if tr.Decode(b) == nil {
			again, err := tr.Encode(nil)
			if err != nil || tr2.Decode(again) != nil || !reflect.DeepEqual(tr, tr2) {
				t.Errorf("tries %q decoded to %+v, which encodes to %q (%v) and decodes to %+v", b, tr, again, err, tr2)
			}
		}
	})
}
