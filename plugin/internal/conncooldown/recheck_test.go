package conncooldown

import (
	"testing"
	"time"
)

// ExpiredSince finds only the expired state, under the connection's current credential, and
// RestoreExpired clears only that expiry: never banned or credits_exhausted, never another
// expiry, never another credential's record.
func TestExpiredSinceAndRestore(t *testing.T) {
	cfg := apikey()
	cfg.ExpiredRetryMax = 1 // the first revoked-key 401 is terminal
	f := newFixture(t, cfg)

	for _, v := range [...]struct {
		name string
		fail func()
	}{{"banned", func() { f.fail(t, vBanned, time.Time{}) }}, {"credits exhausted", func() { f.fail(t, vCredits, time.Time{}) }}} {
		v.fail()
		if _, expired, err := f.tr.ExpiredSince(f.conn); err != nil || expired {
			t.Fatalf("%s: ExpiredSince says expired (%v)", v.name, err)
		}
		cleared, err := f.tr.RestoreExpired(f.conn, f.clock.Now())
		if err != nil || cleared || f.check(t).Status == StatusAvailable {
			t.Fatalf("%s: RestoreExpired cleared it (%v, %v)", v.name, cleared, err)
		}
		if _, err := f.tr.Clear(f.conn, true); err != nil {
			t.Fatal(err)
		}
	}

	f.clock.Advance(time.Minute)
	expiredAt := f.clock.Now()
	f.fail(t, v401, time.Time{})
	since, expired, err := f.tr.ExpiredSince(f.conn)
	if err != nil || !expired || !since.Equal(expiredAt) {
		t.Fatalf("after a revoked-key 401: since %v expired %v (%v), want since %v", since, expired, err, expiredAt)
	}
	// A rotated credential starts clean: nothing expired to find or restore.
	rotated, err := NewConn("openai", "openai-a", "openai", "openai/openai-a", "fp-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, expired, _ := f.tr.ExpiredSince(rotated); expired {
		t.Fatal("a rotated credential reads as expired")
	}
	if cleared, _ := f.tr.RestoreExpired(rotated, since); cleared || f.check(t).Status != StatusExpired {
		t.Fatal("a check under another credential restored the old one's expiry")
	}
	// A check about another expiry restores nothing.
	if cleared, _ := f.tr.RestoreExpired(f.conn, since.Add(-time.Second)); cleared || f.check(t).Status != StatusExpired {
		t.Fatal("a check about an earlier expiry restored this one")
	}
	cleared, err := f.tr.RestoreExpired(f.conn, since)
	if err != nil || !cleared {
		t.Fatalf("RestoreExpired of the expiry: %v, %v", cleared, err)
	}
	if a := f.check(t); a.Status != StatusAvailable || a.BackoffLevel != 0 {
		t.Fatalf("after the restore: %+v, want available with no backoff", a)
	}
	if snap, _ := f.tr.Inspect(f.conn); snap.LastErrorType != "" || snap.ExpiredRetries != 0 {
		t.Fatalf("after the restore the error fields stay: %+v", snap)
	}
}
