package router

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/streaminfo"
)

func TestFailureReply(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error // what the upstream failed with
		started   bool  // whether its response headers had arrived
		want      Reply // the router's answer
		wantKnown bool  // whether the error was one of the typed failures
	}{
		{"cluster not found", ErrClusterNotFound, false,
			Reply{503, "", streaminfo.FlagNoClusterFound, "cluster_not_found"}, true},
		{"no healthy upstream, wrapped", fmt.Errorf("lb: %w", ErrNoHealthyUpstream), false,
			Reply{503, "no healthy upstream", streaminfo.FlagNoHealthyUpstream, "no_healthy_upstream"}, true},
		{"connection refused", &Reset{Reason: streaminfo.ResetRemoteConnectionFailure, TransportFailure: "delayed connect error: Connection refused"}, false,
			Reply{503, "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused",
				streaminfo.FlagUpstreamConnectionFailure,
				"upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}"}, true},
		{"protocol error after headers", &Reset{Reason: streaminfo.ResetProtocolError}, true,
			Reply{502, "upstream connect error or disconnect/reset before headers. reset reason: protocol error",
				streaminfo.ResetFlag(streaminfo.ResetProtocolError), "upstream_reset_after_response_started{protocol_error}"}, true},
		{"untyped error", errors.New("dial: boom"), false,
			Reply{503, "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure",
				streaminfo.FlagUpstreamConnectionFailure, "upstream_reset_before_response_started{remote_connection_failure}"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := FailureReply(tc.err, tc.started)
			if got != tc.want || known != tc.wantKnown {
				t.Fatalf("FailureReply = %+v, %v; want %+v, %v", got, known, tc.want, tc.wantKnown)
			}
		})
	}
}

// fakeStream records the router's replies and holds its timers for the test to fire.
type fakeStream struct {
	replies []Reply
	timers  []func()
	logs    []string
}

func (f *fakeStream) Reply(r Reply)                   { f.replies = append(f.replies, r) }
func (f *fakeStream) After(_ time.Duration, g func()) { f.timers = append(f.timers, g) }
func (f *fakeStream) Debug(msg string)                { f.logs = append(f.logs, msg) }

func (f *fakeStream) fire(i int) { f.timers[i]() }

func TestPerTryIdleTimeoutFiresOnlyForTheLastActivity(t *testing.T) {
	f := &fakeStream{}
	u := New(f, time.Second)
	u.Activity()
	u.Headers(false) // re-arms: timer 0 is stale
	if len(f.timers) != 2 {
		t.Fatalf("%d timers armed, want 2", len(f.timers))
	}
	f.fire(0)
	if len(f.replies) != 0 {
		t.Fatalf("a stale idle timer replied: %+v", f.replies)
	}
	f.fire(1)
	if want := TimeoutReply(DetailsUpstreamPerTryIdleTimeout); len(f.replies) != 1 || f.replies[0] != want {
		t.Fatalf("replies %+v, want %+v", f.replies, want)
	}
}

func TestTimersAfterTheEndDoNothing(t *testing.T) {
	f := &fakeStream{}
	u := New(f, time.Second)
	u.RequestComplete(5 * time.Second)
	u.Data(false)
	u.Trailers()
	for i := range f.timers {
		f.fire(i)
	}
	if len(f.replies) != 0 || !u.Done() {
		t.Fatalf("after the response ended: replies %+v, done %v", f.replies, u.Done())
	}
	if u.Abandon() {
		t.Fatal("Abandon of a finished upstream reports it was still going")
	}
}

func TestNoTimeoutsConfiguredArmNoTimer(t *testing.T) {
	f := &fakeStream{}
	u := New(f, 0)
	u.RequestComplete(0)
	u.Headers(true)
	if len(f.timers) != 0 || !u.Done() || !u.ResponseStarted() {
		t.Fatalf("timers %d, done %v, started %v", len(f.timers), u.Done(), u.ResponseStarted())
	}
}

func TestRouteTimeoutAnswers504(t *testing.T) {
	f := &fakeStream{}
	u := New(f, 0)
	u.RequestComplete(time.Second)
	f.fire(0)
	want := Reply{504, "upstream request timeout", streaminfo.FlagUpstreamRequestTimeout, "response_timeout"}
	if len(f.replies) != 1 || f.replies[0] != want {
		t.Fatalf("replies %+v, want %+v", f.replies, want)
	}
}

func TestFailuresAfterHeaders(t *testing.T) {
	f := &fakeStream{}
	u := New(f, 0)
	u.Headers(false)
	u.FailedAfterHeaders(errors.New("conn closed"))
	u.Failed(errors.New("refused"))
	want := []Reply{
		ResetReply(&Reset{Reason: streaminfo.ResetConnectionTermination}, true),
		ResetReply(&Reset{Reason: streaminfo.ResetRemoteConnectionFailure}, true),
	}
	if len(f.replies) != 2 || f.replies[0] != want[0] || f.replies[1] != want[1] {
		t.Fatalf("replies %+v, want %+v", f.replies, want)
	}
	if len(f.logs) != 2 {
		t.Fatalf("untyped failures logged %q, want one line each", f.logs)
	}
}
