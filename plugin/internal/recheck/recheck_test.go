package recheck

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
	"github.com/spillwayproxy/spillway/policies"
)

var cfg = Config{Interval: time.Minute, MaxInterval: 4 * time.Minute, MaxPerTick: 1, Tick: time.Second, Timeout: 10 * time.Second}

func newScheduler(t *testing.T, store state.Store, clock *manualclock.Clock) *Scheduler {
	t.Helper()
	s, err := New(store, clock, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewConnRejectsBadIDs(t *testing.T) {
	for _, tc := range []struct {
		provider, connection string // the ids
		ok                   bool   // whether NewConn accepts them
	}{
		{"openai", "key-a", true},
		{"", "key-a", false},
		{"openai", "", false},
		{"open:ai", "key-a", false}, // the key separator
		{"openai", "key a", false},
		{"openai", string(make([]byte, 129)), false},
	} {
		if _, err := NewConn(tc.provider, tc.connection, "account"); (err == nil) != tc.ok {
			t.Errorf("NewConn(%q, %q): %v, want ok %v", tc.provider, tc.connection, err, tc.ok)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string        // the case
		edit func(*Config) // what is wrong
	}{
		{"interval below the tick", func(c *Config) { c.Interval = 500 * time.Millisecond }},
		{"cap below the interval", func(c *Config) { c.MaxInterval = 30 * time.Second }},
		{"no checks per tick", func(c *Config) { c.MaxPerTick = 0 }},
		{"no timeout", func(c *Config) { c.Timeout = 0 }},
		{"no tick", func(c *Config) { c.Tick = 0 }},
	} {
		c := cfg
		tc.edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// The policy's defaults make a valid Config.
	p, err := policies.Parse([]byte(`{"providers":[{"id":"p","cluster":"c","connections":[{"id":"c1"}]}],"routes":[{"model":"m","targets":[{"provider":"p"}]}]}`), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, on := ConfigFrom(p.Resolved().TerminalRecheck); on || c.Validate() != nil {
		t.Fatalf("defaults: %+v on %v: %v", c, on, c.Validate())
	}
}

// A corrupt schedule, or one of another expiry, reads as a fresh one: due an interval after
// the expiry, never earlier and never lost.
func TestScheduleOfAnotherExpiryOrCorruptIsFresh(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(testfixture.T0)
	s := newScheduler(t, store, clock)
	c, _ := NewConn("p", "c1", "p/c1")
	since := clock.Now()
	for _, stored := range [][]byte{[]byte("garbage"), schedule{since: since.UnixMilli() - 1, next: since.UnixMilli() + 3_600_000}.encode()} {
		if err := store.Set(c.key, stored, 0); err != nil {
			t.Fatal(err)
		}
		clock.Set(since.Add(59 * time.Second))
		if due, err := s.Due(c, since); err != nil || due {
			t.Fatalf("59 s after the expiry over %x: due %v (%v)", stored, due, err)
		}
		clock.Set(since.Add(time.Minute))
		if due, err := s.Due(c, since); err != nil || !due {
			t.Fatalf("60 s after the expiry over %x: due %v (%v)", stored, due, err)
		}
	}
}

// The tick is won by exactly one of many workers per Tick, even when another worker's claim
// lands between a worker's read and its write.
func TestClaimTickOnePerTick(t *testing.T) {
	store := state.NewMemStore()
	clock := manualclock.New(testfixture.T0)
	workers := []*Scheduler{newScheduler(t, store, clock), newScheduler(t, store, clock), newScheduler(t, store, clock)}
	otherWon := false
	in := testfixture.InterleaveOn(store, tickKey, 1, func() {
		won, err := workers[2].ClaimTick()
		if err != nil {
			t.Fatal(err)
		}
		otherWon = won
	})
	for second := range 5 {
		wins := 0
		for _, w := range workers {
			won, err := w.ClaimTick()
			if err != nil {
				t.Fatal(err)
			}
			if won {
				wins++
			}
		}
		if second == 0 && otherWon {
			wins++ // the interleaved claim won the first tick
		}
		if wins != 1 {
			t.Fatalf("second %d: %d workers won the tick, want 1", second, wins)
		}
		clock.Advance(time.Second)
	}
	if in.Ran != 1 || !otherWon {
		t.Fatalf("the interleaved claim ran %d times, won %v", in.Ran, otherWon)
	}
}

// Look lets a worker look once per Tick, without touching shared data.
func TestLookOncePerTick(t *testing.T) {
	store := testfixture.NewStore()
	clock := manualclock.New(testfixture.T0)
	s := newScheduler(t, store, clock)
	looks := 0
	for range 50 { // five seconds of 100 ms ticks
		if s.Look() {
			looks++
		}
		clock.Advance(100 * time.Millisecond)
	}
	if looks != 5 || store.Gets+store.Sets != 0 {
		t.Fatalf("%d looks in 5 s (want 5), %d shared-data operations (want 0)", looks, store.Gets+store.Sets)
	}
}

func TestAnswerOf(t *testing.T) {
	for status, want := range map[int]Answer{200: Passed, 204: Passed, 299: Passed, 401: Refused, 403: Refused,
		0: Inconclusive, 301: Inconclusive, 400: Inconclusive, 404: Inconclusive, 429: Inconclusive, 500: Inconclusive, 503: Inconclusive} {
		if got := AnswerOf(status); got != want {
			t.Errorf("AnswerOf(%d) = %v, want %v", status, got, want)
		}
	}
	if h := ExtraHeaders(policies.APIAnthropic); len(h) != 1 || h[0] != [2]string{"anthropic-version", "2023-06-01"} {
		t.Errorf("anthropic headers %v", h)
	}
	if h := ExtraHeaders(policies.APIOpenAI); h != nil {
		t.Errorf("openai headers %v", h)
	}
}

// A stored schedule is decoded without panicking whatever the bytes, and one that decodes is
// what its encoding says (it re-encodes to the same bytes).
func FuzzDecodeSchedule(f *testing.F) {
	f.Add(schedule{since: 1, next: 2, refusals: 3}.encode())
	f.Add([]byte{})
	f.Add([]byte("T\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeSchedule(b)
		if err != nil {
			return
		}
		if r.refusals < 0 || r.refusals > maxRefusals {
			t.Fatalf("decoded refusals %d", r.refusals)
		}
		if again, err := decodeSchedule(r.encode()); err != nil || again != r {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", r, again, err)
		}
	})
}
