package hostsimtest

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// WaitLimit bounds Lines.Wait: long enough that only a broken test reaches it (it waits for
// something that must happen soon, it never times anything), short enough that such a
// test fails instead of hanging until the suite's timeout.
const WaitLimit = 30 * time.Second

// Lines is an io.Writer for log lines written from several goroutines (a Host's
// WithLogWriter, serve's logs) that a test can wait on: Wait returns as soon as enough lines
// match, woken by the writes themselves rather than by polling.
type Lines struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed, and replaced, by every write
}

// Write implements io.Writer.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return n, err
}

// String returns everything written.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Matching returns the lines written so far that contain sub.
func (l *Lines) Matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return matching(l.b.String(), sub)
}

func matching(s, sub string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

// Wait waits until at least n lines contain sub, or WaitLimit passed, and returns the lines
// that do (fewer than n only when the limit passed).
func (l *Lines) Wait(sub string, n int) []string {
	limit := time.NewTimer(WaitLimit)
	defer limit.Stop()
	for {
		l.mu.Lock()
		got := matching(l.b.String(), sub)
		if len(got) >= n {
			l.mu.Unlock()
			return got
		}
		if l.written == nil {
			l.written = make(chan struct{})
		}
		written := l.written
		l.mu.Unlock()
		select {
		case <-written:
		case <-limit.C:
			return l.Matching(sub)
		}
	}
}
