package serve

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// requireEnded fails unless worker-0 ran on_log, on_done and on_delete for stream 2, once
// each and in that order, and no longer holds any stream.
func requireEnded(t *testing.T, p *probeEnv) {
	t.Helper()
	var got []string
	for _, line := range strings.Split(p.logs.String(), "\n") {
		for _, cb := range []string{"log", "done", "delete"} {
			if strings.HasSuffix(line, "worker-0: cb "+cb+" ctx=2") {
				got = append(got, cb)
			}
		}
	}
	if strings.Join(got, " ") != "log done delete" {
		t.Errorf("stream 2's end callbacks: %q, want log done delete; guest log:\n%s", got, p.logs)
	}
	if n := p.srv.Host().LiveStreams(); n != 0 {
		t.Errorf("%d streams left in the VMs, want 0", n)
	}
}

// orderedTimeout is serve's timeout in the tests that need something else to happen first
// (a 20 ms tick to find the stream, the request to reach the upstream): a hundred times
// what that takes, so only a stalled machine could reorder them. It is the only real-time
// margin here; everything else waits on events.
const orderedTimeout = 2 * time.Second

// A request the filter holds paused past the timeout is answered 504 and its stream is
// reset in the VM: it ends (log → done → delete) before the answer goes out, and a later
// tick no longer finds it.
func TestTimeoutResetsThePausedStream(t *testing.T) {
	p := probeServer(t, `
configure tick_period 20
request_headers ret 1
tick effective 2
`, orderedTimeout, "")
	status, body := get(t, p.url+"/v1/models")
	if status != 504 || !strings.Contains(body, `"code":"hostsim_timeout"`) {
		t.Fatalf("%d %s", status, body)
	}
	requireEnded(t, p)
	if len(p.access.await("GET /v1/models 504", 1)) != 1 {
		t.Errorf("access log:\n%s", p.access)
	}
	// Ticks found the paused stream while it lived (a tick before the request arrived may
	// find none: that is before its life), and a tick after the reset does not.
	const found, notFound = "worker-0: op effective 2 -> Ok", "worker-0: op effective 2 -> BadArgument"
	requireLog(t, p.logs, found)
	log := p.logs.String()
	created, deleted := strings.Index(log, "worker-0: cb context_create ctx=2"), strings.Index(log, "worker-0: cb delete ctx=2")
	if created < 0 || deleted < created {
		t.Fatalf("stream 2 was not created, then deleted:\n%s", log)
	}
	if life := log[created:deleted]; strings.Contains(life, notFound) || !strings.Contains(life, found) {
		t.Errorf("while stream 2 lived, ticks did not always find it:\n%s", log)
	}
	before := strings.Count(log[:deleted], notFound)
	if len(p.logs.await(notFound, before+1)) <= before {
		t.Fatalf("no tick after the reset:\n%s", p.logs)
	}
	log = p.logs.String()
	if strings.Contains(log[deleted:], found) {
		t.Errorf("a tick found the stream after it was reset:\n%s", log)
	}
	if n := p.srv.Host().LiveStreams(); n != 0 {
		t.Errorf("%d streams in the VMs after later ticks, want 0", n)
	}
}

// A client that goes away while the filter holds its request resets the stream, as Envoy
// does on a downstream disconnect.
func TestClientGoneResetsThePausedStream(t *testing.T) {
	p := probeServer(t, "request_headers ret 1\n", time.Minute, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.url+"/v1/models", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The client goes away once the filter holds its request, not after some time.
	go func() {
		p.logs.await("worker-0: cb request_headers ctx=2", 1)
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d from a filter that never resumes", resp.StatusCode)
	}
	if len(p.logs.lines("worker-0: cb request_headers ctx=2")) != 1 {
		t.Fatalf("the client gave up before the filter saw its request; guest log:\n%s", p.logs)
	}
	if len(p.access.await("GET /v1/models client-gone", 1)) != 1 {
		t.Fatalf("access log:\n%s", p.access)
	}
	requireEnded(t, p)
}

// The upstream call runs under the exchange's context: the reset at the timeout cancels
// it.
func TestTimeoutCancelsTheUpstreamCall(t *testing.T) {
	arrived, cancelled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(up.Close)
	p := probeServer(t, "", orderedTimeout, up.URL)
	status, body := get(t, p.url+"/v1/models")
	if status != 504 || !strings.Contains(body, `"code":"hostsim_timeout"`) {
		t.Fatalf("%d %s", status, body)
	}
	select {
	case <-arrived:
	default:
		t.Fatal("the request never reached the upstream")
	}
	select {
	case <-cancelled:
	case <-time.After(hostsimtest.WaitLimit):
		t.Fatal("the upstream call was not cancelled after the timeout")
	}
	requireEnded(t, p)
}

// An HTTP/2 client that cancels one stream mid-answer (RST_STREAM on a live connection: flag
// DR) went away: the demo filter does not take it for a truncated stream, so the connection
// that served it is not cooled and the next request goes to it again.
func TestAnHTTP2StreamCancelIsNotATruncation(t *testing.T) {
	d := startDemo(t, nil)
	d.fake(t, "fake-openai").SetPacing(fakeprovider.Pacing{Between: 50 * time.Millisecond})
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", d.URL()+"/v1/chat/completions", strings.NewReader(streamChatBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 || resp.Header.Get("x-spillway-connection") != "openai-a" {
		t.Fatalf("%s via %q, want HTTP/2 via openai-a", resp.Proto, resp.Header.Get("x-spillway-connection"))
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before its content: %v", err)
		}
		if strings.Contains(line, `"content":"Hello"`) {
			break
		}
	}
	cancel() // RST_STREAM(CANCEL); the connection stays up
	resp.Body.Close()
	if got := d.access.await(" flags=DR ", 1); len(got) != 1 {
		t.Fatalf("access log has no DR stream:\n%s", d.access)
	}
	_, h, _ := post(t, d.URL()+"/v1/chat/completions", chatBody, nil)
	if c := h.Get("x-spillway-connection"); c != "openai-a" {
		t.Errorf("the next request went to %s: openai-a was cooled by a client's cancel", c)
	}
	if w := d.logs.lines("ended without its terminal event"); len(w) > 0 {
		t.Errorf("guest log: %q", w)
	}
}
