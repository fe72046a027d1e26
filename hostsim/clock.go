package hostsim

import (
	"sync"
	"time"
)

// Clock tells the host's time. It drives the guest's WASI clocks, ticks, callout timeouts
// and scheduled deliveries.
type Clock interface {
	Now() time.Time
}

// SettableClock is a virtual clock the host can move (Host.Advance). state.ManualClock
// satisfies it, so engine tests and hostsim can share one clock.
type SettableClock interface {
	Clock
	Set(time.Time)
}

// VirtualClock is a SettableClock that moves only when told to.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewVirtualClock returns a clock standing at start.
func NewVirtualClock(start time.Time) *VirtualClock { return &VirtualClock{now: start} }

// Now implements Clock.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set implements SettableClock.
func (c *VirtualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// VirtualStart is where a Host's virtual clock starts unless WithClock says otherwise.
func VirtualStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
