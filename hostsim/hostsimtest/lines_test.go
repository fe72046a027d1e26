package hostsimtest

import (
	"fmt"
	"testing"
)

// Wait returns once enough matching lines arrived, from writers on other goroutines.
func TestLinesWaitWakesOnWrites(t *testing.T) {
	var l Lines
	release := make(chan struct{})
	go func() {
		<-release
		for i := 0; i < 5; i++ {
			fmt.Fprintf(&l, "tick %d\nother\n", i)
		}
	}()
	if got := l.Matching("tick"); len(got) != 0 {
		t.Fatalf("lines before any write: %q", got)
	}
	close(release)
	got := l.Wait("tick", 5)
	if len(got) != 5 || got[4] != "tick 4" {
		t.Fatalf("Wait returned %q", got)
	}
}
