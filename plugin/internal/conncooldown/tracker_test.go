package conncooldown

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/failure"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

func TestSuccessOnCleanConnectionDoesNotWrite(t *testing.T) {
	f := newFixture(t, apikey())
	sets := 0
	f.store.BeforeSet = func(string) { sets++ }
	for i := 0; i < 3; i++ {
		if err := f.tr.RecordSuccess(f.conn, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if sets != 0 {
		t.Fatalf("success on a clean connection wrote %d times", sets)
	}
	f.fail(t, vServer, f.clock.Now())
	if err := f.tr.RecordSuccess(f.conn, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := f.tr.RecordSuccess(f.conn, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if sets != 2 { // the failure and the one success that cleared it
		t.Fatalf("got %d writes, want 2", sets)
	}
	if f.store.Keys() != 1 { // only the store's own guard key is live
		t.Fatalf("cleared record still live: %d keys", f.store.Keys())
	}
}

func TestCredentialChangeClearsTerminalState(t *testing.T) {
	f := newFixture(t, apikey())
	f.fail(t, vBanned, f.clock.Now())
	if a := f.check(t); a.Status != StatusBanned {
		t.Fatalf("status %s, want banned", a.Status)
	}
	rotated, err := NewConn("openai", "openai-a", "openai", "openai/openai-a", "fp-2")
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := f.tr.Check(rotated); a.Status != StatusAvailable {
		t.Fatalf("new credential: status %s, want available", a.Status)
	}
	unknown, _ := NewConn("openai", "openai-a", "openai", "openai/openai-a", "")
	if a, _ := f.tr.Check(unknown); a.Status != StatusBanned {
		t.Fatalf("unknown fingerprint: status %s, want banned (unknown matches)", a.Status)
	}
	// A failure under the new credential starts from a clean record.
	out, err := f.tr.RecordFailure(rotated, Failure{Verdict: vServer})
	if err != nil || !out.Counted || out.Availability.BackoffLevel != 1 || out.Availability.RetryAfter != 3*time.Second {
		t.Fatalf("failure under new credential: %+v, %v", out, err)
	}
	// The old credential's view is now the new record, not the ban.
	if a := f.check(t); a.Status != StatusAvailable {
		t.Fatalf("old fingerprint after rewrite: status %s, want available (record now belongs to fp-2)", a.Status)
	}
	// A writer with an unknown fingerprint keeps the stored one.
	if _, err := f.tr.RecordFailure(unknown, Failure{Verdict: vBanned}); err != nil {
		t.Fatal(err)
	}
	if a, _ := f.tr.Check(rotated); a.Status != StatusBanned {
		t.Fatalf("ban written with unknown fingerprint must apply to fp-2: %s", a.Status)
	}
}

func TestRecordNeverHoldsTheFingerprint(t *testing.T) {
	f := newFixture(t, apikey())
	secretish := "sk-live-0123456789abcdef"
	conn, _ := NewConn("openai", "openai-a", "openai", "openai/openai-a", secretish)
	if _, err := f.tr.RecordFailure(conn, Failure{Verdict: vBanned, Message: "banned"}); err != nil {
		t.Fatal(err)
	}
	raw, _, _, _ := f.store.Get(conn.key)
	if bytes.Contains(raw, []byte(secretish)) || bytes.Contains(raw, []byte("sk-live")) {
		t.Fatalf("stored record contains the fingerprint text: %q", raw)
	}
}

func TestInspect(t *testing.T) {
	f := newFixture(t, apikey())
	long := strings.Repeat("é", 100) // 200 bytes: truncated on a rune boundary
	v := testfixture.WithHint(vRateLimit, 42*time.Second, failure.HintRetryAfter)
	if _, err := f.tr.RecordFailure(f.conn, Failure{Verdict: v, Message: long}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Second)
	s, err := f.tr.Inspect(f.conn)
	if err != nil {
		t.Fatal(err)
	}
	want := Snapshot{
		Provider:          "openai",
		Connection:        "openai-a",
		Status:            StatusUnavailable,
		CooldownRemaining: 40 * time.Second,
		RateLimitedUntil:  t0.Add(42 * time.Second),
		BackoffLevel:      0, // the hint decided: no climb
		LastErrorType:     failure.ReasonRateLimit,
		LastError:         strings.Repeat("é", 80),
		ErrorCode:         429,
		LastFailureAt:     t0,
	}
	if s != want {
		t.Fatalf("snapshot\n got %+v\nwant %+v", s, want)
	}
	clean, _ := NewConn("openai", "openai-b", "openai", "openai/openai-b", "")
	if s, err := f.tr.Inspect(clean); err != nil || s.Status != StatusAvailable || s.BackoffLevel != 0 || s.Connection != "openai-b" {
		t.Fatalf("clean connection snapshot %+v, %v", s, err)
	}
}

func TestClear(t *testing.T) {
	f := newFixture(t, apikey())
	mk := func(id string) Conn {
		c, err := NewConn("openai", id, "openai", "openai"+"/"+id, "fp")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cooling, banned, clean, expired := mk("cooling"), mk("banned"), mk("clean"), mk("expired")
	for _, x := range []struct {
		c Conn
		v failure.Verdict
	}{{cooling, vServer}, {banned, vBanned}, {expired, vExpired}, {expired, vExpired}, {expired, vExpired}} {
		f.clock.Advance(time.Hour)
		if _, err := f.tr.RecordFailure(x.c, Failure{Verdict: x.v}); err != nil {
			t.Fatal(err)
		}
	}
	all := []Conn{cooling, banned, clean, expired}

	rep, err := f.tr.ClearMany(all, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Cleared, ",") != "cooling" || strings.Join(rep.Unchanged, ",") != "clean" ||
		strings.Join(rep.SkippedTerminal, ",") != "banned,expired" {
		t.Fatalf("bulk clear without terminal: %+v", rep)
	}
	if a, _ := f.tr.Check(cooling); a.Status != StatusAvailable || a.BackoffLevel != 0 {
		t.Fatalf("cleared connection: %+v", a)
	}
	if a, _ := f.tr.Check(banned); a.Status != StatusBanned {
		t.Fatalf("skipped terminal changed: %+v", a)
	}

	rep, err = f.tr.ClearMany(all, true)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Cleared, ",") != "banned,expired" || strings.Join(rep.Unchanged, ",") != "cooling,clean" ||
		len(rep.SkippedTerminal) != 0 {
		t.Fatalf("bulk clear with terminal: %+v", rep)
	}
	for _, c := range all {
		if a, _ := f.tr.Check(c); a.Status != StatusAvailable {
			t.Fatalf("%s after operator reset: %s", c.connection, a.Status)
		}
	}
	if r, err := f.tr.Clear(cooling, true); err != nil || r != Unchanged || r.String() != "unchanged" {
		t.Fatalf("clear of a clean connection: %v %v", r, err)
	}
	if Cleared.String() != "cleared" || SkippedTerminal.String() != "skippedTerminal" {
		t.Fatalf("result names: %s %s", Cleared, SkippedTerminal)
	}
}

func TestCorruptRecordIsAbsent(t *testing.T) {
	f := newFixture(t, apikey())
	bad := [][]byte{
		{'C'},                        // too short
		{'X', 1, 0},                  // wrong kind
		{'C', 9, 0},                  // unknown version
		{'C', 1, 0x80},               // truncated varint
		append(record{}.encode(), 0), // trailing byte
		record{level: 99}.encode(),   // level beyond any config
		{'C', 1, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // unknown terminal code
	}
	for i, b := range bad {
		if err := f.store.Set(f.conn.key, b, 0); err != nil {
			t.Fatal(err)
		}
		if a := f.check(t); a.Status != StatusAvailable {
			t.Fatalf("case %d: corrupt record read as %s", i, a.Status)
		}
		if got := f.tr.CorruptReads(); got != uint64(i+1) {
			t.Fatalf("case %d: corrupt count %d", i, got)
		}
	}
	out := f.fail(t, vServer, f.clock.Now())
	if !out.Counted || out.Availability.BackoffLevel != 1 {
		t.Fatalf("failure over a corrupt record: %+v", out)
	}
	raw, _, _, _ := f.store.Get(f.conn.key)
	if _, err := decodeRecord(raw); err != nil {
		t.Fatalf("rewritten record is corrupt: %v", err)
	}
}

type failingStore struct{ state.Store }

var errStore = errors.New("host said no")

func (failingStore) Get(string) ([]byte, uint32, bool, error) { return nil, 0, false, errStore }

func TestStoreErrorsFailOpen(t *testing.T) {
	tr, err := New(failingStore{state.NewMemStore()}, manualclock.New(t0), apikey())
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := NewConn("p", "c", "p", "p/c", "")
	a, err := tr.Check(conn)
	if !errors.Is(err, errStore) || !a.Available() {
		t.Fatalf("Check: %+v %v, want available and the store error", a, err)
	}
	if _, err := tr.RecordFailure(conn, Failure{Verdict: vServer}); !errors.Is(err, errStore) || !strings.HasPrefix(err.Error(), "conncooldown: ") {
		t.Fatalf("RecordFailure error %v", err)
	}
	if err := tr.RecordSuccess(conn, time.Time{}); !errors.Is(err, errStore) {
		t.Fatalf("RecordSuccess error %v", err)
	}
	if _, err := tr.Inspect(conn); !errors.Is(err, errStore) {
		t.Fatalf("Inspect error %v", err)
	}
	rep, err := tr.ClearMany([]Conn{conn}, true)
	if !errors.Is(err, errStore) || len(rep.Cleared)+len(rep.Unchanged)+len(rep.SkippedTerminal) != 0 {
		t.Fatalf("ClearMany: %+v %v", rep, err)
	}
}
