package filtermanager

import (
	"reflect"
	"testing"
)

// recorder is a Filter that records what the transitions asked of it; Body can pause the
// direction again, as a guest's StopIterationAndBuffer would.
type recorder struct {
	bodies    []string // the chunks delivered to the body callback
	eos       []bool   // each chunk's end of stream
	trailers  int      // trailers callbacks
	completed int      // completions heard
	stopBody  bool     // the body callback buffers (StopIterationAndBuffer)
}

func (r *recorder) Body(d *Direction, chunk []byte, eos bool) error {
	r.bodies, r.eos = append(r.bodies, string(chunk)), append(r.eos, eos)
	if r.stopBody {
		d.Body, d.Buffering = append(d.Body, chunk...), true
		return nil
	}
	d.ForwardBody(chunk, eos, r)
	return nil
}

func (r *recorder) Trailers(d *Direction, trailers [][2]string) error {
	r.trailers++
	d.Trailers, d.HasTrailers = trailers, true
	d.ForwardTrailers(r)
	return nil
}

func (r *recorder) Completed(*Direction) { r.completed++ }

var tr = [][2]string{{"grpc-status", "0"}}

func TestResume(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        Direction // the direction when proxy_continue_stream runs
		stopBody  bool      // the redelivered body callback buffers again
		want      Direction // the direction after
		bodies    []string  // chunks redelivered to the filter's body callback
		trailers  int       // trailers callbacks redelivered
		completed int       // completions the stream hears
	}{
		{
			name: "stopped all: headers go on, held data in one body callback, then trailers",
			in: Direction{GotHeaders: true, StoppedAll: true, HeldBody: []byte("ab"), HasHeldBody: true,
				HeldTrailers: tr, HasHeldTrailers: true},
			want: Direction{GotHeaders: true, ForwardedHeaders: true, ForwardedBody: []byte("ab"),
				Trailers: tr, HasTrailers: true, ForwardedTrailers: tr, Complete: true},
			bodies: []string{"ab"}, trailers: 1, completed: 1,
		},
		{
			name:   "stopped all, held data with end of stream: the body callback completes it",
			in:     Direction{GotHeaders: true, StoppedAll: true, HeldBody: []byte("x"), HeldEndStream: true, HasHeldBody: true},
			want:   Direction{GotHeaders: true, ForwardedHeaders: true, ForwardedBody: []byte("x"), Complete: true},
			bodies: []string{"x"}, completed: 1,
		},
		{
			// commonContinue runs doData, then doTrailers: a buffering body callback does
			// not hold the trailers back.
			name: "stopped all, the redelivered body buffers: the held trailers still reach the filter",
			in: Direction{GotHeaders: true, StoppedAll: true, HeldBody: []byte("x"), HasHeldBody: true,
				HeldTrailers: tr, HasHeldTrailers: true},
			stopBody: true,
			want: Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("x"), ForwardedBody: []byte("x"),
				Trailers: tr, HasTrailers: true, ForwardedTrailers: tr, Complete: true},
			bodies: []string{"x"}, trailers: 1, completed: 1,
		},
		{
			name:      "stopped all, headers only with end of stream",
			in:        Direction{GotHeaders: true, EndStream: true, StoppedAll: true},
			want:      Direction{GotHeaders: true, EndStream: true, ForwardedHeaders: true, Complete: true},
			completed: 1,
		},
		{
			name: "stopped headers, buffered body: both go on",
			in:   Direction{GotHeaders: true, EndStream: true, StoppedHeaders: true, Buffering: true, Body: []byte("b")},
			want: Direction{GotHeaders: true, EndStream: true, ForwardedHeaders: true, Body: []byte("b"),
				ForwardedBody: []byte("b"), Complete: true, ReleasedBuffer: true},
			completed: 1,
		},
		{
			name: "stopped headers and trailers: everything goes on",
			in: Direction{GotHeaders: true, StoppedHeaders: true, StoppedTrailers: true, Trailers: tr,
				HasTrailers: true},
			want: Direction{GotHeaders: true, ForwardedHeaders: true, Trailers: tr, HasTrailers: true,
				ForwardedTrailers: tr, Complete: true},
			completed: 1,
		},
		{
			name: "stopped headers without end of stream: only the headers go on",
			in:   Direction{GotHeaders: true, StoppedHeaders: true},
			want: Direction{GotHeaders: true, ForwardedHeaders: true},
		},
		{
			name: "buffering, not ended: the buffer goes on, the direction stays open",
			in:   Direction{GotHeaders: true, ForwardedHeaders: true, Buffering: true, Body: []byte("b")},
			want: Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("b"), ForwardedBody: []byte("b"),
				ReleasedBuffer: true},
		},
		{
			name: "halted: nothing resumes",
			in:   Direction{GotHeaders: true, StoppedAll: true, Halted: true},
			want: Direction{GotHeaders: true, StoppedAll: true, Halted: true},
		},
		{
			name: "no headers yet: nothing resumes",
			in:   Direction{Buffering: true},
			want: Direction{Buffering: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{stopBody: tc.stopBody}
			d := tc.in
			if err := d.Resume(r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d, tc.want) {
				t.Errorf("direction\n got %+v\nwant %+v", d, tc.want)
			}
			if !reflect.DeepEqual(r.bodies, tc.bodies) || r.trailers != tc.trailers || r.completed != tc.completed {
				t.Errorf("bodies %q, trailers %d, completed %d; want %q, %d, %d",
					r.bodies, r.trailers, r.completed, tc.bodies, tc.trailers, tc.completed)
			}
		})
	}
}

func TestAfterData(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        Direction   // the direction as the body callback returns
		verdict   DataVerdict // the callback's status as the filter manager reads it
		eos       bool        // the chunk ended the direction
		paused    bool        // AfterData's answer
		want      Direction   // the direction after
		completed int         // completions the stream hears
	}{
		{
			name: "continue forwards the chunk and completes at end of stream", verdict: DataContinue, eos: true,
			in:        Direction{GotHeaders: true, ForwardedHeaders: true, BodyAvail: true, Body: []byte("a")},
			want:      Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("a"), ForwardedBody: []byte("a"), Complete: true},
			completed: 1,
		},
		{
			name: "continue after a true StopIteration resumes the headers too", verdict: DataContinue,
			in:   Direction{GotHeaders: true, StoppedHeaders: true, HeadersAvail: true, BodyAvail: true, Body: []byte("a")},
			want: Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("a"), ForwardedBody: []byte("a")},
		},
		{
			name: "stop without buffering drops the chunk", verdict: DataStopNoBuffer, paused: true,
			in:   Direction{GotHeaders: true, BodyAvail: true, Buffering: true, Body: []byte("a")},
			want: Direction{GotHeaders: true, Body: []byte{}},
		},
		{
			name: "stop and buffer keeps the chunk and the body visible", verdict: DataStopAndBuffer, paused: true,
			in:   Direction{GotHeaders: true, BodyAvail: true, Body: []byte("a")},
			want: Direction{GotHeaders: true, BodyAvail: true, Buffering: true, Body: []byte("a")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			d := tc.in
			if got := d.AfterData(tc.verdict, tc.eos, r); got != tc.paused {
				t.Errorf("paused = %v, want %v", got, tc.paused)
			}
			if !reflect.DeepEqual(d, tc.want) {
				t.Errorf("direction\n got %+v\nwant %+v", d, tc.want)
			}
			if r.completed != tc.completed {
				t.Errorf("completed %d, want %d", r.completed, tc.completed)
			}
		})
	}
}

func TestAfterHeadersAndTrailers(t *testing.T) {
	r := &recorder{}
	d := Direction{GotHeaders: true, HeadersAvail: true}
	if !d.AfterHeaders(HeadersStopIteration, r) || !d.StoppedHeaders || d.ForwardedHeaders {
		t.Errorf("StopIteration: %+v", d)
	}
	d = Direction{GotHeaders: true, HeadersAvail: true}
	if !d.AfterHeaders(HeadersStopAll, r) || !d.StoppedAll || d.ForwardedHeaders {
		t.Errorf("StopAll: %+v", d)
	}
	d = Direction{GotHeaders: true, HeadersAvail: true, EndStream: true}
	if d.AfterHeaders(HeadersContinue, r) || d.HeadersAvail || !d.ForwardedHeaders || !d.Complete || r.completed != 1 {
		t.Errorf("Continue at end of stream: %+v, completed %d", d, r.completed)
	}

	d = Direction{GotHeaders: true, TrailersAvail: true, Trailers: tr, HasTrailers: true}
	if !d.AfterTrailers(false, r) || !d.StoppedTrailers || d.Complete {
		t.Errorf("trailers stopped: %+v", d)
	}
	d = Direction{GotHeaders: true, StoppedHeaders: true, TrailersAvail: true, Buffering: true, Body: []byte("b"),
		Trailers: tr, HasTrailers: true}
	want := Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("b"), ForwardedBody: []byte("b"),
		Trailers: tr, HasTrailers: true, ForwardedTrailers: tr, Complete: true}
	if d.AfterTrailers(true, r) || !reflect.DeepEqual(d, want) {
		t.Errorf("trailers go on after a true StopIteration:\n got %+v\nwant %+v", d, want)
	}
}

func TestHoldAndReceive(t *testing.T) {
	var d Direction
	d.Hold([]byte("a"), false)
	d.Hold([]byte("b"), true)
	d.Hold([]byte("c"), false) // end of stream, once seen, stays
	if string(d.HeldBody) != "abc" || !d.HeldEndStream || !d.HasHeldBody {
		t.Errorf("held %q eos %v has %v", d.HeldBody, d.HeldEndStream, d.HasHeldBody)
	}
	d.Receive([]byte("1"))
	d.Receive([]byte("2")) // not buffering: the chunk replaces the last
	if string(d.Body) != "2" {
		t.Errorf("body %q, want the last chunk", d.Body)
	}
	d.Buffering = true
	d.Receive([]byte("3"))
	if string(d.Body) != "23" {
		t.Errorf("buffered body %q, want 23", d.Body)
	}
}

func TestFinishOnce(t *testing.T) {
	r := &recorder{}
	d := Direction{Trailers: tr, HasTrailers: true} // trailers added from the last body callback
	d.Finish(r)
	d.Finish(r)
	if r.completed != 1 || !reflect.DeepEqual(d.ForwardedTrailers, tr) {
		t.Errorf("completed %d, forwarded trailers %v", r.completed, d.ForwardedTrailers)
	}
}

func TestBypass(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        Direction // the direction when its filter failed under FAIL_OPEN
		want      Direction // the direction after
		completed int       // completions the stream hears
	}{
		{
			name: "stopped all with held data and trailers: all of it goes on",
			in: Direction{GotHeaders: true, StoppedAll: true, HeldBody: []byte("h"), HasHeldBody: true,
				HeldTrailers: tr, HasHeldTrailers: true},
			want: Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("h"), HeldBody: []byte("h"),
				ForwardedBody: []byte("h"), Trailers: tr, HasTrailers: true, HeldTrailers: tr,
				ForwardedTrailers: tr, Complete: true},
			completed: 1,
		},
		{
			name: "buffering, not ended: the buffer goes on, the direction stays open",
			in:   Direction{GotHeaders: true, ForwardedHeaders: true, Buffering: true, Body: []byte("b")},
			want: Direction{GotHeaders: true, ForwardedHeaders: true, Body: []byte("b"), ForwardedBody: []byte("b")},
		},
		{
			name:      "headers the filter had not let through yet go on",
			in:        Direction{GotHeaders: true, EndStream: true},
			want:      Direction{GotHeaders: true, EndStream: true, ForwardedHeaders: true, Complete: true},
			completed: 1,
		},
		{
			name: "no headers yet: nothing goes on",
			in:   Direction{},
			want: Direction{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			d := tc.in
			d.Bypass(r)
			if !reflect.DeepEqual(d, tc.want) {
				t.Errorf("direction\n got %+v\nwant %+v", d, tc.want)
			}
			if r.completed != tc.completed {
				t.Errorf("completed %d, want %d", r.completed, tc.completed)
			}
		})
	}
}
