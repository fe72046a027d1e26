// Package connmgr is the HTTP connection manager's per-stream idle timer, the
// stream_idle_timeout (source/common/http/conn_manager_impl.cc: ActiveStream::
// resetIdleTimer and onIdleTimeout), and the reply it makes when the timer fires. It knows
// no VM: the stream it times is a Stream.
package connmgr

import (
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

// DetailsStreamIdleTimeout: the connection manager's stream idle timer fired
// (ActiveStream::onIdleTimeout).
const DetailsStreamIdleTimeout = "stream_idle_timeout"

// Stream is what the idle timer needs of its stream (the caller's lock held throughout).
type Stream interface {
	// Now is the host clock's time.
	Now() time.Time
	// After runs f d from now on the host's clock, unless the stream ended before.
	After(d time.Duration, f func())
	// IdleTimeout is the timer firing: the stream answers TimeoutReply.
	IdleTimeout()
}

// IdleTimer is one stream's idle timer. Rather than a timer per event (Envoy re-enables
// one timer), Touch moves the deadline and keeps one check scheduled, which moves itself
// on while the deadline is later. The zero value is not usable: make one with NewIdleTimer.
type IdleTimer struct {
	s     Stream
	d     time.Duration // the timeout, 0 for none
	at    time.Time     // when it fires
	armed bool          // a check is scheduled
}

// NewIdleTimer is s's idle timer with timeout d (0: off).
func NewIdleTimer(s Stream, d time.Duration) IdleTimer { return IdleTimer{s: s, d: d} }

// Touch re-arms the timer after a headers, data or trailers event either way
// (ActiveStream::resetIdleTimer).
func (t *IdleTimer) Touch() {
	if t.d <= 0 {
		return
	}
	t.at = t.s.Now().Add(t.d)
	if !t.armed {
		t.armed = true
		t.s.After(t.d, t.check)
	}
}

// check fires the timeout once its deadline has passed.
func (t *IdleTimer) check() {
	if now := t.s.Now(); now.Before(t.at) {
		t.s.After(t.at.Sub(now), t.check)
		return
	}
	t.armed = false
	t.s.IdleTimeout()
}

// TimeoutReply is ActiveStream::onIdleTimeout's answer: flag SI, then sendLocalReply with
// "stream timeout" and details stream_idle_timeout, 408 or, once the client's request was
// complete, 504 (Http::Utility::maybeRequestTimeoutCode(remoteDecodeComplete)).
func TimeoutReply(requestComplete bool) router.Reply {
	code := 408
	if requestComplete {
		code = 504
	}
	return router.Reply{Code: code, Body: "stream timeout", Flag: streaminfo.FlagStreamIdleTimeout, Details: DetailsStreamIdleTimeout}
}
