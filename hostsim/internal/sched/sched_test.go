package sched

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/internal/manualclock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Timers fire in time order, ties in the order they were scheduled, each with the clock at
// its time; what an event posts runs before the next timer; Advance stops at its target.
func TestAdvanceRunsTimersInOrder(t *testing.T) {
	clock := manualclock.New(t0)
	var ran []string
	var l *Loop[string]
	l = New(func(ev string) error {
		ran = append(ran, fmt.Sprintf("%s@%v", ev, clock.Now().Sub(t0)))
		if ev == "b" {
			l.Post("posted-by-b")
		}
		if ev == "bad" {
			return errors.New("bad event")
		}
		return nil
	})
	l.Schedule(t0.Add(2*time.Second), "c")
	l.Schedule(t0.Add(time.Second), "a")
	l.Schedule(t0.Add(time.Second), "b")
	l.Schedule(t0.Add(time.Second), "bad")
	l.Schedule(t0.Add(10*time.Second), "later")
	l.Post("now")
	err := l.Advance(clock, 5*time.Second)
	want := []string{"now@0s", "a@1s", "b@1s", "posted-by-b@1s", "bad@1s", "c@2s"}
	if !reflect.DeepEqual(ran, want) {
		t.Fatalf("ran %q, want %q", ran, want)
	}
	if err == nil || !strings.Contains(err.Error(), "bad event") {
		t.Fatalf("Advance error %v, want the event's", err)
	}
	if got := clock.Now(); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("clock at %v, want +5s", got.Sub(t0))
	}
	if next, ok := l.Next(); !ok || !next.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("Next() = %v, %v; want +10s", next.Sub(t0), ok)
	}
}

// An event that re-posts itself forever ends the drain with an error instead of a hang.
func TestDrainBoundsAnEventStorm(t *testing.T) {
	var l *Loop[int]
	n := 0
	l = New(func(int) error { n++; l.Post(0); return nil })
	l.Post(0)
	if err := l.Drain(); err == nil || !strings.Contains(err.Error(), "event storm") {
		t.Fatalf("Drain = %v, want the event storm error", err)
	}
	if n != maxDrain {
		t.Fatalf("ran %d events, want the bound %d", n, maxDrain)
	}
}

// A cancelled timer never runs and leaves the loop; the Timer its owner keeps holds no event
// once it was cancelled or fired, so a long timer cannot keep what its event references.
func TestCancelTakesATimerOff(t *testing.T) {
	clock := manualclock.New(t0)
	var ran []string
	l := New(func(ev *string) error { ran = append(ran, *ev); return nil })
	a, b, c := "a", "b", "c"
	ta := l.Schedule(t0.Add(time.Second), &a)
	tb := l.Schedule(t0.Add(2*time.Second), &b)
	tc := l.Schedule(t0.Add(8*time.Minute), &c)
	if !l.Cancel(tb) || l.Cancel(tb) {
		t.Fatal("Cancel: want true once, then false")
	}
	if l.Pending(tb) || !l.Pending(tc) || l.Len() != 2 {
		t.Fatalf("after Cancel: Pending(b)=%v Pending(c)=%v Len=%d; want false, true, 2", l.Pending(tb), l.Pending(tc), l.Len())
	}
	if err := l.Advance(clock, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ran, []string{"a"}) {
		t.Fatalf("ran %q, want only a", ran)
	}
	if l.Cancel(ta) {
		t.Fatal("Cancel of a fired timer: want false")
	}
	if !l.Cancel(tc) || l.Len() != 0 {
		t.Fatalf("the long timer is still on the loop (Len %d)", l.Len())
	}
	for name, tm := range map[string]*Timer[*string]{"fired": ta, "cancelled": tb, "cancelled long": tc} {
		if tm.ev != nil {
			t.Fatalf("%s timer still holds its event", name)
		}
	}
	if l.Cancel(nil) {
		t.Fatal("Cancel(nil): want false")
	}
}
