package connmgr

import (
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// fakeStream is a stream on a manual clock whose timers the test runs in time order.
type fakeStream struct {
	now     time.Time
	timers  []timer
	timeout int // IdleTimeout calls
}

type timer struct {
	at time.Time
	f  func()
}

func (f *fakeStream) Now() time.Time { return f.now }
func (f *fakeStream) After(d time.Duration, g func()) {
	f.timers = append(f.timers, timer{f.now.Add(d), g})
}
func (f *fakeStream) IdleTimeout() { f.timeout++ }

// advance moves the clock to t, running the timers due on the way.
func (f *fakeStream) advance(to time.Time) {
	for {
		i := -1
		for j, tm := range f.timers {
			if !tm.at.After(to) && (i < 0 || tm.at.Before(f.timers[i].at)) {
				i = j
			}
		}
		if i < 0 {
			f.now = to
			return
		}
		tm := f.timers[i]
		f.timers = append(f.timers[:i], f.timers[i+1:]...)
		f.now = tm.at
		tm.f()
	}
}

func TestIdleTimerFiresAfterTheLastActivity(t *testing.T) {
	f := &fakeStream{now: time.Unix(0, 0)}
	idle := NewIdleTimer(f, 10*time.Second)
	idle.Touch()
	f.advance(f.now.Add(6 * time.Second))
	idle.Touch() // deadline moves to 16s
	if len(f.timers) != 1 {
		t.Fatalf("%d checks scheduled, want one", len(f.timers))
	}
	f.advance(time.Unix(15, 0))
	if f.timeout != 0 {
		t.Fatal("fired before the moved deadline")
	}
	f.advance(time.Unix(16, 0))
	if f.timeout != 1 {
		t.Fatalf("fired %d times by the deadline, want once", f.timeout)
	}
	idle.Touch() // a touch after firing arms it again
	f.advance(time.Unix(40, 0))
	if f.timeout != 2 {
		t.Fatalf("fired %d times, want twice", f.timeout)
	}
}

func TestIdleTimerOff(t *testing.T) {
	f := &fakeStream{}
	idle := NewIdleTimer(f, 0)
	idle.Touch()
	if len(f.timers) != 0 {
		t.Fatal("a timer with no timeout scheduled a check")
	}
}

func TestTimeoutReply(t *testing.T) {
	for _, tc := range []struct {
		complete bool // the client's request was complete
		code     int  // the reply's status
	}{{false, 408}, {true, 504}} {
		r := TimeoutReply(tc.complete)
		if r.Code != tc.code || r.Body != "stream timeout" || r.Flag != streaminfo.FlagStreamIdleTimeout || r.Details != "stream_idle_timeout" {
			t.Errorf("TimeoutReply(%v) = %+v", tc.complete, r)
		}
	}
}
