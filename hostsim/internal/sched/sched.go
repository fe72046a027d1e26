// Package sched is the host's event loop: events posted to run next and timers due at a
// time, run in time order (ties in the order they were scheduled) either on a virtual clock
// that moves only as they fire, or by a dispatcher goroutine on the wall clock. It knows
// nothing of what an event does.
package sched

import (
	"container/heap"
	"errors"
	"sync"
	"time"
)

// Clock is a virtual clock the loop moves as timers fire.
type Clock interface {
	Now() time.Time
	Set(time.Time)
}

// maxDrain bounds how many events one drain runs (a guest that re-enqueues forever).
const maxDrain = 100000

// Loop runs events of type E with the function given to New. It is safe for concurrent
// use; run is called without the loop's lock held, so it may schedule and post.
type Loop[E any] struct {
	run func(E) error

	mu        sync.Mutex
	timers    timerHeap[E]
	seq       uint64
	pending   []E
	asyncErrs []error

	wake chan struct{} // the dispatcher's, once started
	stop chan struct{}
	done chan struct{}
}

// New returns a loop that runs each event with run.
func New[E any](run func(E) error) *Loop[E] { return &Loop[E]{run: run} }

// Schedule runs ev once the clock reaches at. The Timer cancels it.
func (l *Loop[E]) Schedule(at time.Time, ev E) *Timer[E] {
	l.mu.Lock()
	l.seq++
	t := &Timer[E]{at: at, seq: l.seq, ev: ev}
	heap.Push(&l.timers, t)
	l.mu.Unlock()
	l.kick()
	return t
}

// Cancel takes t off the loop before it fires, so the loop keeps nothing of its event
// (false if it already fired or was cancelled). nil is a no-op.
func (l *Loop[E]) Cancel(t *Timer[E]) bool {
	if t == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&l.timers, t.index)
	var zero E
	t.ev = zero
	return true
}

// Pending reports whether t still waits to fire.
func (l *Loop[E]) Pending(t *Timer[E]) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return t != nil && t.index >= 0
}

// Len is the number of timers waiting to fire.
func (l *Loop[E]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.timers)
}

// Post runs ev next: at the next drain, or at once on the dispatcher.
func (l *Loop[E]) Post(ev E) {
	l.mu.Lock()
	l.pending = append(l.pending, ev)
	l.mu.Unlock()
	l.kick()
}

func (l *Loop[E]) kick() {
	if l.wake != nil {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Dispatching reports whether the dispatcher runs the events (Start).
func (l *Loop[E]) Dispatching() bool { return l.wake != nil }

// Drain runs posted events, and those they post, until none is left.
func (l *Loop[E]) Drain() error {
	var errs []error
	var zero E
	for i := 0; i < maxDrain; i++ {
		l.mu.Lock()
		if len(l.pending) == 0 {
			l.mu.Unlock()
			return errors.Join(errs...)
		}
		ev := l.pending[0]
		l.pending[0] = zero
		l.pending = l.pending[1:]
		l.mu.Unlock()
		if err := l.run(ev); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, errors.New("sched: event storm: more than 100000 events in one drain"))...)
}

// Advance moves the virtual clock c forward by d: it drains, then fires every timer due by
// then in time order, the clock standing at each timer's time while it runs (and draining
// after each), and leaves the clock at now+d. The errors are the events'.
func (l *Loop[E]) Advance(c Clock, d time.Duration) error {
	target := c.Now().Add(d)
	var errs []error
	var zero E
	if err := l.Drain(); err != nil {
		errs = append(errs, err)
	}
	for {
		l.mu.Lock()
		if len(l.timers) == 0 || l.timers[0].at.After(target) {
			l.mu.Unlock()
			break
		}
		t := heap.Pop(&l.timers).(*Timer[E])
		l.mu.Unlock()
		if t.at.After(c.Now()) {
			c.Set(t.at)
		}
		ev := t.ev
		t.ev = zero // a Timer its owner keeps holds nothing once it fired
		if err := l.run(ev); err != nil {
			errs = append(errs, err)
		}
		if err := l.Drain(); err != nil {
			errs = append(errs, err)
		}
	}
	if target.After(c.Now()) {
		c.Set(target)
	}
	return errors.Join(errs...)
}

// Next returns when the next timer is due (false if none is scheduled).
func (l *Loop[E]) Next() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.timers) == 0 {
		return time.Time{}, false
	}
	return l.timers[0].at, true
}

// AsyncErrors returns (and forgets) the errors of events the dispatcher ran.
func (l *Loop[E]) AsyncErrors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.asyncErrs
	l.asyncErrs = nil
	return e
}

// Start runs the events on a dispatcher goroutine, timers on the wall clock, until Stop.
// Call it once, before the loop is shared.
func (l *Loop[E]) Start() {
	l.wake = make(chan struct{}, 1)
	l.stop = make(chan struct{})
	l.done = make(chan struct{})
	go l.dispatch()
}

// Stop ends the dispatcher, if it was started, and waits for it.
func (l *Loop[E]) Stop() {
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
}

func (l *Loop[E]) asyncErr(err error) {
	l.mu.Lock()
	l.asyncErrs = append(l.asyncErrs, err)
	l.mu.Unlock()
}

func (l *Loop[E]) dispatch() {
	defer close(l.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if err := l.Drain(); err != nil {
			l.asyncErr(err)
		}
		now := time.Now()
		wait := time.Hour
		l.mu.Lock()
		var due []*Timer[E]
		for len(l.timers) > 0 && !l.timers[0].at.After(now) {
			due = append(due, heap.Pop(&l.timers).(*Timer[E]))
		}
		if len(l.timers) > 0 {
			wait = l.timers[0].at.Sub(now)
		}
		l.mu.Unlock()
		var zero E
		for _, d := range due {
			ev := d.ev
			d.ev = zero // a Timer its owner keeps holds nothing once it fired
			if err := l.run(ev); err != nil {
				l.asyncErr(err)
			}
		}
		if len(due) > 0 {
			continue
		}
		t.Reset(wait)
		select {
		case <-l.stop:
			return
		case <-l.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		case <-t.C:
		}
	}
}

// Timer is a scheduled event (Schedule); Cancel takes it off the loop.
type Timer[E any] struct {
	at    time.Time
	seq   uint64
	ev    E
	index int // in the heap; -1 once it left it (fired or cancelled)
}

// timerHeap orders timers by time, then by the order they were scheduled.
type timerHeap[E any] []*Timer[E]

func (t timerHeap[E]) Len() int { return len(t) }
func (t timerHeap[E]) Less(i, j int) bool {
	if t[i].at.Equal(t[j].at) {
		return t[i].seq < t[j].seq
	}
	return t[i].at.Before(t[j].at)
}
func (t timerHeap[E]) Swap(i, j int) {
	t[i], t[j] = t[j], t[i]
	t[i].index, t[j].index = i, j
}
func (t *timerHeap[E]) Push(x any) {
	tm := x.(*Timer[E])
	tm.index = len(*t)
	*t = append(*t, tm)
}

// Pop removes the last timer: the heap no longer references it.
func (t *timerHeap[E]) Pop() any {
	old := *t
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*t = old[:len(old)-1]
	x.index = -1
	return x
}
