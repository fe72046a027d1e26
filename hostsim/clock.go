package hostsim

import "time"

// Clock tells the host's time. It drives the guest's WASI clocks, ticks, callout timeouts
// and scheduled deliveries.
type Clock interface {
	Now() time.Time
}

// SettableClock is a virtual clock the host can move (Host.Advance). The module's one
// implementation is internal/manualclock's Clock, which the engine's tests use too, so a
// test can share one clock between the engine and hostsim.
type SettableClock interface {
	Clock
	Set(time.Time)
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// VirtualStart is where a Host's virtual clock starts unless WithClock says otherwise.
func VirtualStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
