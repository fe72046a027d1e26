package manualclock

import (
	"sync"
	"testing"
	"time"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(start)
	for _, step := range []struct {
		name string
		move func()    // what the test does to the clock
		want time.Time // where the clock then stands
	}{
		{"untouched", func() {}, start},
		{"advance", func() { c.Advance(90 * time.Second) }, start.Add(90 * time.Second)},
		{"set back", func() { c.Set(start.Add(time.Second)) }, start.Add(time.Second)},
		{"advance zero", func() { c.Advance(0) }, start.Add(time.Second)},
	} {
		step.move()
		if got := c.Now(); !got.Equal(step.want) {
			t.Fatalf("%s: Now() = %v, want %v", step.name, got, step.want)
		}
	}
}

// Concurrent advances all land (run under -race by `make race`).
func TestClockIsSafeForConcurrentUse(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(start)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(800*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}
