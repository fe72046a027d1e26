package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// Router-mode failover (resilience.failover.via: router): the module also runs as each
// provider cluster's upstream HTTP filter, a failed try is marked for the router's retry
// on the next key of the same cluster, and that retry's response streams to the client;
// what fails over no further on the cluster reaches the downstream instance, which fails
// over by callout (buffered). The fakes cannot tell a router try from a callout (both are
// the same request on the wire), so which path an attempt took is read from the filter's
// own counters on the admin listener: spillway_router_retries_total counts the failovers
// made as router retries, spillway_failovers_total all of them.

// routerPolicy is one OpenAI provider with two keys tried in order, failing over through
// the router; key-b takes one request at a time, so a slot leaked to it shows as a request
// that queues (and, past the 300 ms budget, is refused). FAILOVER is replaced by each
// scenario's failover settings (withFailover).
const routerPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
      - {id: openai-b, maxConcurrent: 1, credential: {header: authorization, value: "Bearer key-b"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai}]}
resilience:
  failover: FAILOVER
  requestQueue: {maxWaitMs: 300}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// routerFallbackPolicy adds a second provider on another cluster, with its own name for
// the model: a retry cannot reach it (the router retries on the route's cluster, with the
// body the first try was sent), so failing over to it is a callout.
const routerFallbackPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
      - {id: openai-b, credential: {header: authorization, value: "Bearer key-b"}}
  - id: backup
    cluster: fake-backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer key-backup"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai}, {provider: backup, model: vendor/gpt-4o}]}
resilience:
  failover: FAILOVER
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// withFailover sets a policy's resilience.failover.
func withFailover(policy, failover string) string {
	return strings.Replace(policy, "FAILOVER", failover, 1)
}

// rateLimited is key-a's answer in these scenarios: a 429 whose Retry-After keeps the key
// cooling for the rest of the scenario.
var rateLimited = fakeprovider.Fault{Status: 429, ErrorType: "rate_limit_error", RetryAfter: "30"}

// releaser is a fake's Pause (or Until) channel, closed once: by the test, or by a
// watchdog after hostsimtest.WaitLimit so that a proxy that buffers what it should stream
// (its client then waits for the held rest) fails the test on what the client saw instead
// of hanging it, or when the test ends.
type releaser struct {
	ch       chan struct{}
	once     sync.Once
	watchdog *time.Timer
	mu       sync.Mutex
	at       time.Time // when it was released (mu)
}

// releasedAt is when it was released (zero: not yet).
func (r *releaser) releasedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at
}

// close closes the channel, noting when.
func (r *releaser) close() {
	r.mu.Lock()
	r.at = time.Now()
	r.mu.Unlock()
	close(r.ch)
}

func newReleaser(t *testing.T) *releaser {
	r := &releaser{ch: make(chan struct{})}
	r.watchdog = time.AfterFunc(hostsimtest.WaitLimit, func() {
		r.once.Do(func() {
			t.Logf("the fake's held answer was released by the %v bound, not by the test", hostsimtest.WaitLimit)
			r.close()
		})
	})
	t.Cleanup(func() {
		r.watchdog.Stop()
		r.once.Do(r.close)
	})
	return r
}

// release lets the held answer go on, noting when.
func (r *releaser) release() {
	r.once.Do(func() {
		r.watchdog.Stop()
		r.close()
	})
}

// requestOf returns the one request a credential sent a fake.
func requestOf(t *testing.T, f *fakeprovider.Server, credential string) fakeprovider.Recorded {
	t.Helper()
	var found []fakeprovider.Recorded
	for _, r := range f.Requests() {
		if r.Credential == credential {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s sent %s %d requests, want 1", credential, f.Name(), len(found))
	}
	return found[0]
}

// credentials lists who sent a fake's requests, in the order they arrived.
func credentials(f *fakeprovider.Server) string {
	var out []string
	for _, r := range f.Requests() {
		out = append(out, r.Credential)
	}
	return strings.Join(out, " ")
}

// requireCounters waits until the filter's counters of requests ended show every line of
// ended (the filter counts a request's end last and flushes each VM's counters on its tick,
// so by then every counter of those requests is on the admin listener; requests on two
// workers need a line each), then checks each of want, a whole series ("name{labels}") and
// its value.
func requireCounters(t *testing.T, tg *e2etest.Target, ended []string, want map[string]int) {
	t.Helper()
	var scrape string
	e2etest.WaitFor(t, fmt.Sprintf("the requests' counters on the admin listener (%q)", ended), func() bool {
		scrape = tg.Scrape(t)
		for _, line := range ended {
			if !hasLine(scrape, line) {
				return false
			}
		}
		return true
	})
	for series, n := range want {
		if line := series + " " + strconv.Itoa(n); !hasLine(scrape, line) {
			t.Errorf("the scrape lacks %q; it has %q", line, seriesLines(scrape, series))
		}
	}
}

// seriesLines returns the scrape's lines of a series' family, for failure messages.
func seriesLines(scrape, series string) []string {
	family, _, _ := strings.Cut(series, "{")
	var out []string
	for _, l := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(l, family+"{") || strings.HasPrefix(l, family+" ") {
			out = append(out, l)
		}
	}
	return out
}

// oneSuccess is the route's success counter after one answered request.
var oneSuccess = []string{`spillway_route_requests_total{spillway_route_model="gpt-4o",spillway_outcome="success"} 1`}

// firstContent reads a stream until its first content event, failing the test if the
// stream ends or carries an error first.
func firstContent(t *testing.T, s *e2etest.Stream) e2etest.Event {
	t.Helper()
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("the stream ended before any content: %v", err)
		}
		if strings.Contains(ev.Text, `"error"`) {
			t.Fatalf("an error event reached the client: %s", ev.Text)
		}
		if isContent(ev) {
			return ev
		}
	}
}

// requireStreamedFailover is the proof both streaming scenarios share: key-a's failure
// (scripted by the caller) fails over to key-b as the router's retry, and key-b's stream
// reaches the client as it comes. Key-b sends its role chunk and first content event and
// then holds the rest until the test releases it, so the client having that first event
// while the fake has sent nothing more is streaming shown by order, not by timing; the
// stream then ends with [DONE]. The time to first content the client saw and key-b's own
// are logged, not asserted (a 2-core machine's scheduling is not the proxy's latency).
func requireStreamedFailover(t *testing.T, tg *e2etest.Target) {
	t.Helper()
	fake := tg.Fake(t, "fake-openai")
	hold := newReleaser(t)
	fake.ScriptFor("key-b", fakeprovider.Fault{AfterEvents: 1, Pause: hold.ch})

	sent := time.Now()
	s := openStream(t, tg, "gpt-4o", nil)
	if got := s.Header.Get("x-spillway-connection") + "/" + s.Header.Get("x-spillway-attempts"); got != "openai-b/2" {
		t.Errorf("x-spillway-connection/attempts %s, want openai-b/2", got)
	}
	if cl := s.Header.Get("Content-Length"); cl != "" {
		t.Errorf("a streamed failover has Content-Length %s: the answer was buffered whole", cl)
	}
	first := firstContent(t, s)
	// Its headers, the role chunk, the first content: the rest is held. (The fake notes a
	// part just after flushing it, so the first content's note may come after the client
	// has it: at most 3 now, exactly 3 once noted.)
	if n := len(requestOf(t, fake, "key-b").Sent); n > 3 {
		t.Fatalf("key-b sent %d parts when the client had its first content, want at most 3 (the fake holds the rest)", n)
	}
	e2etest.WaitFor(t, "key-b's first content to be noted", func() bool { return len(requestOf(t, fake, "key-b").Sent) >= 3 })
	b := requestOf(t, fake, "key-b")
	if len(b.Sent) != 3 {
		t.Fatalf("key-b sent %d parts while it held its stream, want 3", len(b.Sent))
	}
	t.Logf("time to first content: the client's %v after sending; key-b's own %v after its request arrived, %v before the client had it",
		first.At.Sub(sent), b.Sent[2].Sub(b.Start), first.At.Sub(b.Sent[2]))

	hold.release()
	rest, err := s.Rest()
	all := joinEvents(rest)
	if !errors.Is(err, io.EOF) || len(rest) == 0 || rest[len(rest)-1].Text != "data: [DONE]" || strings.Contains(all, `"error"`) {
		t.Fatalf("after the release the stream ended in %v:\n%s", err, all)
	}
	if got := credentials(fake); got != "key-a key-b" {
		t.Errorf("the fake received %q, want key-a then key-b", got)
	}
	requireRequests(t, "streamed failover", fake, map[string]int{"key-a": 1, "key-b": 1})
}

// A streamed chat whose first key answers 429 fails over to the second key as the
// router's retry (not a callout: spillway_router_retries_total), and the second key's
// stream reaches the client as it comes. The same request under the callout policy
// reaches the client only once key-b's stream is whole: nothing arrives while the fake
// holds it, and the answer carries the Content-Length of the whole stream, a length that
// did not exist before the release. That contrast is what router mode buys.
func testRouterFailoverStreams(t *testing.T, start e2etest.Starter) {
	t.Run("router", func(t *testing.T) {
		tg := start(t, withFailover(routerPolicy, "{via: router}"))
		tg.Fake(t, "fake-openai").ScriptFor("key-a", rateLimited)
		requireStreamedFailover(t, tg)
		requireCounters(t, tg, oneSuccess, map[string]int{
			"spillway_attempts_total{}":        2,
			"spillway_failovers_total{}":       1,
			"spillway_router_retries_total{}":  1,
			"spillway_router_unlinked_total{}": 0,
		})
	})
	t.Run("callout", func(t *testing.T) {
		tg := start(t, withFailover(routerPolicy, "{via: callout}"))
		fake := tg.Fake(t, "fake-openai")
		fake.ScriptFor("key-a", rateLimited)
		hold := newReleaser(t)
		fake.ScriptFor("key-b", fakeprovider.Fault{AfterEvents: 1, Pause: hold.ch})

		type opened struct {
			s   *e2etest.Stream
			err error
		}
		got := make(chan opened, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			s, err := e2etest.DialStream(ctx, tg.URL+"/v1/chat/completions", e2etest.ChatBody("gpt-4o", true), nil)
			got <- opened{s, err}
		}()
		e2etest.WaitFor(t, "key-b's first content, then its hold", func() bool {
			for _, r := range fake.Requests() {
				if r.Credential == "key-b" {
					return len(r.Sent) == 3
				}
			}
			return false
		})
		select {
		case o := <-got:
			t.Fatalf("the client had an answer (%v) while key-b's stream was held: the callout path streamed", o.err)
		default:
		}
		hold.release()
		o := <-got
		if o.err != nil {
			t.Fatal(o.err)
		}
		s := o.s
		t.Cleanup(s.Close)
		if at := hold.releasedAt(); !s.HeadersAt.After(at) {
			t.Fatalf("the answer's headers came %v before the release", at.Sub(s.HeadersAt))
		}
		if s.Status != 200 || s.Header.Get("x-spillway-connection") != "openai-b" || s.Header.Get("x-spillway-attempts") != "2" {
			t.Fatalf("callout: %d from %s after %s attempts", s.Status, s.Header.Get("x-spillway-connection"), s.Header.Get("x-spillway-attempts"))
		}
		events, err := s.Rest()
		all := joinEvents(events)
		if !errors.Is(err, io.EOF) || !strings.HasSuffix(all, "data: [DONE]\n\n") {
			t.Fatalf("callout: the stream ended in %v:\n%s", err, all)
		}
		if cl := s.Header.Get("Content-Length"); cl != strconv.Itoa(len(all)) {
			t.Errorf("callout: Content-Length %q, want the whole stream's %d bytes (a local reply of the buffered answer)", cl, len(all))
		}
		requireRequests(t, "callout", fake, map[string]int{"key-a": 1, "key-b": 1})
		requireCounters(t, tg, oneSuccess, map[string]int{
			"spillway_attempts_total{}":       2,
			"spillway_failovers_total{}":      1,
			"spillway_router_retries_total{}": 0,
		})
	})
}

// With failover.holdTries (Envoy >= 1.37) the upstream instance holds a 200 stream until
// its first event: key-a's error event first fails over as the router's retry like a 429,
// and key-b's stream reaches the client as it comes. The error event never reaches the
// client, and is counted once.
func testRouterHeldTryErrorEvent(t *testing.T, start e2etest.Starter) {
	tg := start(t, withFailover(routerPolicy, "{via: router, holdTries: true}"))
	tg.Fake(t, "fake-openai").ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorFirst})
	requireStreamedFailover(t, tg)
	requireCounters(t, tg, oneSuccess, map[string]int{
		"spillway_attempts_total{}":            2,
		"spillway_failovers_total{}":           1,
		"spillway_router_retries_total{}":      1,
		"spillway_stream_error_events_total{}": 1,
	})
}

// Both keys of the first provider fail: key-a's 429 fails over to key-b as the router's
// retry; key-b's 503 has no target left on the cluster, reaches the downstream instance,
// and that fails over by callout to the backup provider on another cluster, with its own
// model. The client gets the backup's stream whole (a local reply: its Content-Length is
// the stream's), and every try is counted once: three attempts, one per connection, two
// failovers of which one a router retry, one failure each on the failed keys.
func testRouterCrossProviderFallback(t *testing.T, start e2etest.Starter) {
	tg := start(t, withFailover(routerFallbackPolicy, "{via: router}"))
	oa, bk := tg.Fake(t, "fake-openai"), tg.Fake(t, "fake-backup")
	oa.ScriptFor("key-a", rateLimited)
	oa.ScriptFor("key-b", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})

	s := openStream(t, tg, "gpt-4o", nil)
	events, err := s.Rest()
	all := joinEvents(events)
	if got := s.Header.Get("x-spillway-provider") + "/" + s.Header.Get("x-spillway-connection") + "/" +
		s.Header.Get("x-spillway-model") + "/" + s.Header.Get("x-spillway-attempts"); got != "backup/backup-a/vendor/gpt-4o/3" {
		t.Errorf("answered by %s, want backup/backup-a/vendor/gpt-4o/3", got)
	}
	if !errors.Is(err, io.EOF) || !strings.HasSuffix(all, "data: [DONE]\n\n") || !strings.Contains(all, "fake-backup") {
		t.Fatalf("the backup's stream ended in %v:\n%s", err, all)
	}
	if cl := s.Header.Get("Content-Length"); cl != strconv.Itoa(len(all)) {
		t.Errorf("Content-Length %q, want the whole stream's %d bytes: the callout's answer is buffered", cl, len(all))
	}
	if got := credentials(oa); got != "key-a key-b" {
		t.Errorf("fake-openai received %q, want key-a then key-b", got)
	}
	requireRequests(t, "openai", oa, map[string]int{"key-a": 1, "key-b": 1})
	requireRequests(t, "backup", bk, map[string]int{"key-backup": 1})
	if b := requestOf(t, bk, "key-backup"); !strings.Contains(string(b.Body), `"model":"vendor/gpt-4o"`) {
		t.Errorf("the backup was asked %s", b.Body)
	}
	requireCounters(t, tg, oneSuccess, map[string]int{
		"spillway_attempts_total{}":        3,
		"spillway_failovers_total{}":       2,
		"spillway_router_retries_total{}":  1,
		"spillway_router_unlinked_total{}": 0,
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="openai-a"}`:                                1,
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="openai-b"}`:                                1,
		`spillway_connection_attempts_total{spillway_provider="backup",spillway_connection="backup-a"}`:                                1,
		`spillway_connection_failovers_total{spillway_provider="openai",spillway_connection="openai-a"}`:                               1,
		`spillway_connection_failovers_total{spillway_provider="openai",spillway_connection="openai-b"}`:                               1,
		`spillway_connection_failures_total{spillway_provider="openai",spillway_connection="openai-a",spillway_reason="rate_limit"}`:   1,
		`spillway_connection_failures_total{spillway_provider="openai",spillway_connection="openai-b",spillway_reason="server_error"}`: 1,
	})
}

// With failover.crossCluster (Envoy >= 1.39) the fallback to the backup provider is a
// router retry too: key-a's 429 and key-b's 503 fail over as retries, the route refreshes
// its cluster from the filter state the upstream instance wrote, the backup's try carries
// its own credential and model, and its stream reaches the client as it comes: it holds the
// rest after its first content, and the client has that content meanwhile.
func testRouterCrossClusterStreams(t *testing.T, start e2etest.Starter) {
	tg := start(t, withFailover(routerFallbackPolicy, "{via: router, crossCluster: true}"))
	oa, bk := tg.Fake(t, "fake-openai"), tg.Fake(t, "fake-backup")
	oa.ScriptFor("key-a", rateLimited)
	oa.ScriptFor("key-b", fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable})
	hold := newReleaser(t)
	bk.ScriptFor("key-backup", fakeprovider.Fault{AfterEvents: 1, Pause: hold.ch})

	s := openStream(t, tg, "gpt-4o", nil)
	if got := s.Header.Get("x-spillway-provider") + "/" + s.Header.Get("x-spillway-connection") + "/" +
		s.Header.Get("x-spillway-model") + "/" + s.Header.Get("x-spillway-attempts"); got != "backup/backup-a/vendor/gpt-4o/3" {
		t.Errorf("answered by %s, want backup/backup-a/vendor/gpt-4o/3", got)
	}
	if cl := s.Header.Get("Content-Length"); cl != "" {
		t.Errorf("a streamed failover has Content-Length %s: the answer was buffered whole", cl)
	}
	firstContent(t, s)
	if n := len(requestOf(t, bk, "key-backup").Sent); n > 3 {
		t.Fatalf("the backup sent %d parts when the client had its first content, want at most 3 (it holds the rest)", n)
	}
	hold.release()
	rest, err := s.Rest()
	if all := joinEvents(rest); !errors.Is(err, io.EOF) || !strings.HasSuffix(all, "data: [DONE]\n\n") {
		t.Fatalf("after the release the stream ended in %v:\n%s", err, all)
	}
	requireRequests(t, "openai", oa, map[string]int{"key-a": 1, "key-b": 1})
	requireRequests(t, "backup", bk, map[string]int{"key-backup": 1})
	b := requestOf(t, bk, "key-backup")
	if !strings.Contains(string(b.Body), `"model":"vendor/gpt-4o"`) {
		t.Errorf("the backup was asked %s", b.Body)
	}
	requireCounters(t, tg, oneSuccess, map[string]int{
		"spillway_attempts_total{}":        3,
		"spillway_failovers_total{}":       2,
		"spillway_router_retries_total{}":  2,
		"spillway_router_unlinked_total{}": 0,
	})
}

// A client that goes away while key-b's retry is held by the fake leaks no slot: the
// upstream try is cancelled, key-b's one slot is given back (the admin API's running goes
// back to 0), and the next request is served by key-b at once (a leaked slot would queue
// it into 429 RATE_LIMIT_QUEUE_TIMEOUT). Key-b is not blamed for the client leaving.
func testRouterClientGoneMidFailover(t *testing.T, start e2etest.Starter) {
	tg := start(t, withFailover(routerPolicy, "{via: router}"))
	fake := tg.Fake(t, "fake-openai")
	fake.ScriptFor("key-a", rateLimited)
	fake.ScriptFor("key-b", fakeprovider.Fault{Until: newReleaser(t).ch}) // held until the test ends

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gone := make(chan error, 1)
	go func() {
		_, err := e2etest.Send(ctx, "POST", tg.URL+"/v1/chat/completions", e2etest.ChatBody("gpt-4o", true), nil)
		gone <- err
	}()
	e2etest.WaitFor(t, "key-b's try to be held by the fake", func() bool { return fake.StatsFor("key-b").InFlight == 1 })
	if n := running(t, tg, "openai", "openai-b"); n != 1 {
		t.Fatalf("%d requests hold openai-b's slot during its try, want 1", n)
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a client that went away got an answer")
	}
	e2etest.WaitFor(t, "key-b's try to be cancelled", func() bool { return fake.StatsFor("key-b").InFlight == 0 })
	e2etest.WaitFor(t, "openai-b's slot to be given back", func() bool { return running(t, tg, "openai", "openai-b") == 0 })

	requireAnswer(t, "after the client went away", tg.Chat(t, "gpt-4o", nil), "openai/openai-b/gpt-4o/1")
	if _, c := tg.Admin(t, "GET", "resilience/cooldowns", ""); c.Get(`connections.#(id=="openai-b").status`).Str != "healthy" {
		t.Errorf("openai-b after its client left: %s", c.Get(`connections.#(id=="openai-b")`).Raw)
	}
	requireRequests(t, "client gone", fake, map[string]int{"key-a": 1, "key-b": 2})
	requireCounters(t, tg, append(oneSuccess, // each of the two requests may have run on either worker
		`spillway_route_requests_total{spillway_route_model="gpt-4o",spillway_outcome="client_gone"} 1`),
		map[string]int{"spillway_attempts_total{}": 3, "spillway_router_retries_total{}": 1})
}
