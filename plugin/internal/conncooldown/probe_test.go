package conncooldown

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// The recovery probe's rules, against the guide's numbers for an API key (§2: base cooldown
// 3 s, "baseCooldownMs * 2 ** failureIndex") and the breaker's probe timeout the claim
// deadline reuses (60 s, Spillway's documented choice).

// probeFixture is a fixture with a second connection of the same provider and one of another.
type probeFixture struct {
	*fixture
	sibling, stranger Conn
}

func newProbeFixture(t *testing.T) *probeFixture {
	t.Helper()
	f := newFixture(t, apikey())
	sibling, err := NewConn("openai", "openai-b", "openai", "openai/openai-b", "fp-b")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := NewConn("azure", "azure-a", "azure", "azure/azure-a", "fp-z")
	if err != nil {
		t.Fatal(err)
	}
	return &probeFixture{fixture: f, sibling: sibling, stranger: stranger}
}

// coolTwice makes every conn fail with v, then again once the first cooldown ran out: for a
// server error, level 2, cooling 6 s from now.
func (f *probeFixture) coolTwice(t *testing.T, v Failure, conns ...Conn) {
	t.Helper()
	for i := 0; i < 2; i++ {
		if i > 0 {
			a, _ := f.tr.Check(conns[0])
			f.clock.Advance(a.RetryAfter)
		}
		v.Started = f.clock.Now()
		for _, c := range conns {
			if _, err := f.tr.RecordFailure(c, v); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (f *probeFixture) ready(t *testing.T, c Conn) bool {
	t.Helper()
	ok, err := f.tr.ProbeReady(c)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func (f *probeFixture) claim(t *testing.T, c Conn) Claim {
	t.Helper()
	cl, err := f.tr.ClaimProbe(c)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestProbeReadiness(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, f *probeFixture) // from a clean store at t0
		claimed bool                                // ProbeReady and ClaimProbe on f.conn then
	}{
		{name: "a server error cooled for one base cooldown", claimed: true, setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn)
			f.clock.Advance(3 * time.Second)
		}},
		{name: "a server error cooled for less than one base cooldown", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn)
			f.clock.Advance(2999 * time.Millisecond)
		}},
		{name: "a server error whose cooldown ended", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn)
			f.clock.Advance(6 * time.Second)
		}},
		{name: "a rate limit", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vRateLimit}, f.conn)
			f.clock.Advance(3 * time.Second)
		}},
		{name: "an exhausted quota", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vQuota(time.Hour)}, f.conn)
			f.clock.Advance(3 * time.Second)
		}},
		{name: "an auth error", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: v401}, f.conn)
			f.clock.Advance(3 * time.Second)
		}},
		{name: "a terminal state", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn)
			f.fail(t, vBanned, f.clock.Now())
			f.clock.Advance(3 * time.Second)
		}},
		{name: "a sibling's probe in flight", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn, f.sibling)
			f.clock.Advance(3 * time.Second)
			if !f.claim(t, f.sibling).Held() {
				t.Fatal("the sibling's claim failed")
			}
			f.clock.Advance(2 * time.Second) // past one base cooldown after the claim: in flight still
		}},
		{name: "another provider's probe in flight", claimed: true, setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn, f.stranger)
			f.clock.Advance(3 * time.Second)
			if !f.claim(t, f.stranger).Held() {
				t.Fatal("the other provider's claim failed")
			}
		}},
		{name: "a sibling's probe ended 2.9 s after its claim", setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn, f.sibling)
			f.clock.Advance(3 * time.Second)
			cl := f.claim(t, f.sibling)
			f.clock.Advance(100 * time.Millisecond)
			if err := f.tr.EndProbe(f.sibling, cl); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(2800 * time.Millisecond)
		}},
		{name: "a sibling's probe ended, claimed 3 s ago", claimed: true, setup: func(t *testing.T, f *probeFixture) {
			v := vServer
			v.Cooldown = 10 * time.Minute // a rule's base: still cooling then
			f.coolTwice(t, Failure{Verdict: v}, f.conn, f.sibling)
			f.clock.Advance(3 * time.Second)
			cl := f.claim(t, f.sibling)
			f.clock.Advance(100 * time.Millisecond)
			if err := f.tr.EndProbe(f.sibling, cl); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(2900 * time.Millisecond)
		}},
		{name: "a sibling's lost probe at its 60 s deadline", claimed: true, setup: func(t *testing.T, f *probeFixture) {
			// Cooling long enough: a server error a rule cools with a 10 min base.
			v := vServer
			v.Cooldown = 10 * time.Minute
			f.coolTwice(t, Failure{Verdict: v}, f.conn, f.sibling)
			f.clock.Advance(3 * time.Second)
			f.claim(t, f.sibling)
			f.clock.Advance(60 * time.Second)
		}},
		{name: "a sibling's lost probe 59.9 s after its claim", setup: func(t *testing.T, f *probeFixture) {
			v := vServer
			v.Cooldown = 10 * time.Minute
			f.coolTwice(t, Failure{Verdict: v}, f.conn, f.sibling)
			f.clock.Advance(3 * time.Second)
			f.claim(t, f.sibling)
			f.clock.Advance(59900 * time.Millisecond)
		}},
		{name: "a claim from a clock that has since moved back", claimed: true, setup: func(t *testing.T, f *probeFixture) {
			v := vServer
			v.Cooldown = 10 * time.Minute
			f.coolTwice(t, Failure{Verdict: v}, f.conn, f.sibling)
			f.clock.Advance(3 * time.Second)
			back := f.clock.Now()
			f.clock.Advance(2 * time.Minute) // another worker's clock ran ahead and claimed
			if !f.claim(t, f.sibling).Held() {
				t.Fatal("the claim ahead failed")
			}
			f.clock.Set(back)
		}},
		{name: "a corrupt claim record", claimed: true, setup: func(t *testing.T, f *probeFixture) {
			f.coolTwice(t, Failure{Verdict: vServer}, f.conn)
			f.clock.Advance(3 * time.Second)
			if err := f.store.Set(f.conn.probeKey, []byte{state.KindRecoveryProbe, 1, 0xff}, 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newProbeFixture(t)
			tc.setup(t, f)
			if got := f.ready(t, f.conn); got != tc.claimed {
				t.Fatalf("ProbeReady = %v, want %v", got, tc.claimed)
			}
			cl := f.claim(t, f.conn)
			if cl.Held() != tc.claimed {
				t.Fatalf("ClaimProbe held %v, want %v", cl.Held(), tc.claimed)
			}
			if tc.claimed && (f.ready(t, f.conn) || f.ready(t, f.sibling) || f.claim(t, f.conn).Held()) {
				t.Fatal("the provider is still ready for a probe after a claim")
			}
		})
	}
}

// An ended claim is not ended twice: a claim that lapsed and was taken by another attempt
// stays that attempt's.
func TestEndProbeLeavesALaterClaimAlone(t *testing.T) {
	f := newProbeFixture(t)
	v := vServer
	v.Cooldown = 10 * time.Minute
	f.coolTwice(t, Failure{Verdict: v}, f.conn)
	f.clock.Advance(3 * time.Second)
	lost := f.claim(t, f.conn)
	f.clock.Advance(60 * time.Second)
	taken := f.claim(t, f.conn)
	if !lost.Held() || !taken.Held() {
		t.Fatalf("claims %+v %+v", lost, taken)
	}
	if err := f.tr.EndProbe(f.conn, lost); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(3 * time.Second)
	if f.ready(t, f.conn) {
		t.Fatal("the lost probe's late end freed the claim that replaced it")
	}
	if err := f.tr.EndProbe(f.conn, taken); err != nil {
		t.Fatal(err)
	}
	if !f.ready(t, f.conn) {
		t.Fatal("the claim's own end did not free it")
	}
}

// A probe's failure escalates the connection as the ladder's next failure would, though its
// cooldown still runs; an ordinary failure overlapping the cooldown does not (thundering herd,
// guide §2).
func TestAProbesFailureEscalates(t *testing.T) {
	f := newProbeFixture(t)
	f.coolTwice(t, Failure{Verdict: vServer}, f.conn) // 3 s, then 6 s
	f.clock.Advance(3 * time.Second)
	if out, _ := f.tr.RecordFailure(f.conn, Failure{Verdict: vServer, Started: f.clock.Now()}); out.Counted {
		t.Fatal("an ordinary failure during the cooldown counted")
	}
	for _, want := range []time.Duration{12 * time.Second, 24 * time.Second, 48 * time.Second} {
		f.clock.Advance(3 * time.Second)
		out, err := f.tr.RecordFailure(f.conn, Failure{Verdict: vServer, Started: f.clock.Now(), Probe: true})
		if err != nil || !out.Counted || out.Availability.RetryAfter != want {
			t.Fatalf("probe failure: %+v %v, want counted, cooling %v", out, err, want)
		}
	}
}

// A sibling's recovery clears a server-error cooldown recorded no later than the probe was
// sent, and nothing else.
func TestRecoverServerError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       Failure       // the connection's failure
		after   time.Duration // how long after the probe was sent it was recorded (negative: before)
		cleared bool
	}{
		{"a 503 before the probe", Failure{Verdict: vServer}, -time.Second, true},
		{"a 503 as the probe was sent", Failure{Verdict: vServer}, 0, true},
		{"a 503 after the probe was sent", Failure{Verdict: vServer}, time.Millisecond, false},
		{"a 429 before the probe", Failure{Verdict: vRateLimit}, -time.Second, false},
		{"an auth error before the probe", Failure{Verdict: v401}, -time.Second, false},
		{"a ban before the probe", Failure{Verdict: vBanned}, -time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newProbeFixture(t)
			sent := t0.Add(10 * time.Second)
			f.clock.Set(sent.Add(tc.after))
			tc.v.Started = f.clock.Now()
			if _, err := f.tr.RecordFailure(f.conn, tc.v); err != nil {
				t.Fatal(err)
			}
			before := f.check(t)
			f.clock.Set(sent.Add(500 * time.Millisecond))
			if err := f.tr.RecoverServerError(f.conn, sent); err != nil {
				t.Fatal(err)
			}
			a := f.check(t)
			if got := a.Available() && a.BackoffLevel == 0 && !before.Available(); got != tc.cleared {
				t.Fatalf("before %+v, after %+v: cleared %v, want %v", before, a, got, tc.cleared)
			}
		})
	}
}

// Claim records decode or read as absent, never panic.
func FuzzDecodeProbe(f *testing.F) {
	f.Add(probeRecord{claimedAt: 1700000000000, until: 1700000060000}.encode())
	f.Add([]byte{state.KindRecoveryProbe, 1})
	f.Add([]byte{state.KindRecoveryProbe, 1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeProbe(b)
		if err != nil {
			return
		}
		if again, err := decodeProbe(r.encode()); err != nil || again != r {
			t.Fatalf("%x decodes to %+v, which re-encodes to %+v (%v)", b, r, again, err)
		}
	})
}
