package hostsim_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// next reads the exchange's next client event within a generous bound.
func next(t *testing.T, ex *hostsim.Exchange) hostsim.ClientEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := ex.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// StartStream with a streaming upstream (real clock): the upstream is called as soon as the
// headers pass the filter, reads the body as the client sends it, and its answer reaches
// the client part by part.
func TestStartStreamBothWays(t *testing.T) {
	body := make(chan []byte, 1)
	h := probe(t, "", hostsim.WithRealClock(), hostsim.WithStreamingUpstream(func(c *hostsim.UpstreamCall) {
		if err := c.Respond(hdrs(":status", "200", "content-type", "text/event-stream"), false); err != nil {
			t.Errorf("Respond: %v", err)
			return
		}
		b, err := io.ReadAll(c.Body())
		if err != nil {
			t.Errorf("read the request body: %v", err)
		}
		body <- b
		for _, e := range events3 {
			if err := c.Data([]byte(e), false); err != nil {
				t.Errorf("Data: %v", err)
				return
			}
		}
		if err := c.Data(nil, true); err != nil {
			t.Errorf("end: %v", err)
		}
	}))
	ctx := context.Background()
	ex, err := h.Worker(0).StartStream(ctx, postReq, false)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ex); ev.Kind != hostsim.ClientHeaders {
		t.Fatalf("first event %+v, want the headers before the request body was even sent", ev)
	}
	for i, part := range []string{`{"model":`, `"gpt-4o",`, `"stream":true}`} {
		if err := ex.SendData(ctx, []byte(part), i == 2); err != nil {
			t.Fatalf("SendData %d: %v", i, err)
		}
	}
	if got := <-body; string(got) != `{"model":"gpt-4o","stream":true}` {
		t.Fatalf("upstream got %q", got)
	}
	var got bytes.Buffer
	for {
		ev := next(t, ex)
		if ev.Kind == hostsim.ClientEnd {
			break
		}
		if ev.Kind != hostsim.ClientData {
			t.Fatalf("event %+v", ev)
		}
		got.Write(ev.Data)
	}
	if got.String() != events3[0]+events3[1]+events3[2] {
		t.Fatalf("client got %q", got.String())
	}
	if _, err := ex.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %v, want io.EOF", err)
	}
	if resp := ex.Response(); resp.StatusCode != 200 || resp.Details != hostsim.DetailsViaUpstream {
		t.Fatalf("response %+v", resp)
	}
}

// Flow control on the request side: without allow_on_headers_stop_iteration a paused
// stream holds the body at the headers (stop-all, watermark), and SendData stops taking
// more once the buffer limit is held; it never answers 413 for that.
func TestSendDataWaitsAtTheWatermark(t *testing.T) {
	h := probe(t, "request_headers ret 1", hostsim.WithRealClock(), hostsim.WithBufferLimit(1024),
		hostsim.WithoutAllowOnHeadersStopIteration(), hostsim.WithUpstream(echoUpstream(nil)))
	ex, err := h.Worker(0).StartStream(context.Background(), postReq, false)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	chunk := make([]byte, 512)
	// Below the limit SendData does not wait (a done context does not matter)...
	for i := 0; i < 2; i++ {
		if err := ex.SendData(cancelled, chunk, false); err != nil {
			t.Fatalf("chunk %d below the limit: %v", i, err)
		}
	}
	// ... at the limit it would wait, so it reports the context's end.
	if err := ex.SendData(cancelled, chunk, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("at the limit: %v, want it to wait (context.Canceled)", err)
	}
	st, _ := h.Worker(0).StreamState(2)
	if st.HeldRequestBody != 1024 || st.Replaced != nil {
		t.Fatalf("held %d, replaced %+v: want 1024 held and no 413", st.HeldRequestBody, st.Replaced)
	}
	if err := ex.Reset(""); err != nil {
		t.Fatal(err)
	}
	if err := ex.SendData(context.Background(), chunk, true); !errors.Is(err, hostsim.ErrNoStream) {
		t.Fatalf("after the reset: %v, want ErrNoStream", err)
	}
}

// Flow control on the response side: an upstream streams faster than the client reads; it
// is held back so that what the client has not taken stays near the buffer limit.
func TestStreamingUpstreamWaitsForTheClient(t *testing.T) {
	const limit, chunkSize, chunks = 1024, 256, 40
	var consumed, worst atomic.Int64
	h := probe(t, "", hostsim.WithRealClock(), hostsim.WithBufferLimit(limit),
		hostsim.WithStreamingUpstream(func(c *hostsim.UpstreamCall) {
			if c.Respond(hdrs(":status", "200"), false) != nil {
				return
			}
			chunk := bytes.Repeat([]byte("x"), chunkSize)
			for i := 1; i <= chunks; i++ {
				if err := c.Data(chunk, i == chunks); err != nil {
					t.Errorf("Data %d: %v", i, err)
					return
				}
				if ahead := int64(i*chunkSize) - consumed.Load(); ahead > worst.Load() {
					worst.Store(ahead)
				}
			}
		}))
	ex, err := h.Worker(0).StartStream(context.Background(), getReq, true)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for {
		ev := next(t, ex)
		if ev.Kind == hostsim.ClientEnd {
			break
		}
		total += len(ev.Data)
		consumed.Add(int64(len(ev.Data)))
	}
	if total != chunks*chunkSize {
		t.Fatalf("client got %d bytes", total)
	}
	// The upstream may be one chunk past the limit (the check is before each delivery) and
	// one more while the client's count catches up: far below the 10 KiB it would push
	// unchecked.
	if w := worst.Load(); w > limit+2*chunkSize {
		t.Fatalf("the upstream got %d bytes ahead of the client, limit %d", w, limit)
	}
}

// An upstream that answers an exchange which ended is told so.
func TestStreamingUpstreamAfterReset(t *testing.T) {
	started := make(chan *hostsim.UpstreamCall, 1)
	h := probe(t, "", hostsim.WithRealClock(), hostsim.WithStreamingUpstream(func(c *hostsim.UpstreamCall) { started <- c }))
	ex, err := h.Worker(0).StartStream(context.Background(), getReq, true)
	if err != nil {
		t.Fatal(err)
	}
	c := <-started
	if err := ex.Reset(""); err != nil {
		t.Fatal(err)
	}
	<-c.Context().Done()
	if err := c.Respond(hdrs(":status", "200"), true); !errors.Is(err, hostsim.ErrUpstreamGone) {
		t.Fatalf("Respond after the reset: %v, want ErrUpstreamGone", err)
	}
	if n := h.Host.LiveStreams(); n != 0 {
		t.Fatalf("%d live streams", n)
	}
}

// WithStreamingUpstream needs a real clock.
func TestStreamingUpstreamNeedsRealClock(t *testing.T) {
	_, err := hostsim.New(hostsimtest.Guest(t, "probe"), hostsim.WithRuntime(hostsimtest.Runtime(t)), hostsim.WithStreamingUpstream(func(*hostsim.UpstreamCall) {}))
	if err == nil {
		t.Fatal("New accepted a streaming upstream on a virtual clock")
	}
}

// A stream left on a VM instance FAIL_RELOAD replaced ends as "VM gone" for the client and
// the upstream, instead of waiting forever.
func TestStreamOfReplacedInstanceEnds(t *testing.T) {
	started := make(chan *hostsim.UpstreamCall, 1)
	h := probe(t, "request_headers@3 trap", hostsim.WithRealClock(), hostsim.WithFailurePolicy(hostsim.FailReload),
		hostsim.WithStreamingUpstream(func(c *hostsim.UpstreamCall) { started <- c }))
	w := h.Host.Worker(0)
	ex, err := w.StartStream(context.Background(), getReq, true)
	if err != nil {
		t.Fatal(err)
	}
	c := <-started
	if _, err := w.StartStream(context.Background(), getReq, true); err == nil {
		t.Fatal("want the second stream's trap")
	}
	if _, err := w.StartStream(context.Background(), getReq, true); err != nil { // reloads the instance
		t.Fatalf("third stream: %v", err)
	}
	if err := c.Respond(hdrs(":status", "200"), true); !errors.Is(err, hostsim.ErrUpstreamGone) {
		t.Fatalf("Respond on the old instance's stream: %v, want ErrUpstreamGone", err)
	}
	if ev, err := ex.Next(context.Background()); err != nil || ev.Kind != hostsim.ClientReset || ev.Reset != "VM gone" {
		t.Fatalf("client got %+v %v, want a reset", ev, err)
	}
}
