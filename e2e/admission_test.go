package e2e

import (
	"context"
	"sync"
	"testing"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// capsPolicy has three keys of one slot each (maxConcurrent: 1), each serving its own
// model; a queue of at most 2 per key, and a 300 ms wait budget on "slow".
const capsPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: serial, credential: {header: authorization, value: "Bearer key-serial"}, maxConcurrent: 1}
      - {id: full, credential: {header: authorization, value: "Bearer key-full"}, maxConcurrent: 1}
      - {id: slow, credential: {header: authorization, value: "Bearer key-slow"}, maxConcurrent: 1,
         rateLimitOverrides: {maxWaitMs: 300}}
routes:
  - {model: m-serial, targets: [{provider: openai, connection: serial}]}
  - {model: m-full, targets: [{provider: openai, connection: full}]}
  - {model: m-slow, targets: [{provider: openai, connection: slow}]}
resilience:
  requestQueue: {maxQueueDepth: 2, maxWaitMs: 30000}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// holdSlot sends a request for model that the fake holds, and waits until it holds the
// key's slot (the fake has it in flight); release has the fake answer it, giving the slot
// back. The fake counts the request out before its answer ends, so the provider's
// MaxInFlight measures the filter's cap, not how soon a fake notices a client that left.
func holdSlot(t *testing.T, tg *e2etest.Target, model, key string) (release func()) {
	t.Helper()
	fake := tg.Fake(t, "fake-openai")
	held := make(chan struct{})
	fake.ScriptFor(key, fakeprovider.Fault{Until: held})
	answered := make(chan *e2etest.Response, 1)
	go func() {
		r, _ := e2etest.Send(context.Background(), "POST", tg.URL+"/v1/chat/completions", e2etest.ChatBody(model, false), nil)
		answered <- r
	}()
	e2etest.WaitFor(t, key+"'s slot to be held", func() bool { return fake.StatsFor(key).InFlight == 1 })
	return func() {
		close(held)
		if r := <-answered; r == nil || r.Status != 200 {
			t.Errorf("the request holding %s's slot: %+v, want 200 once released", key, r)
		}
	}
}

// queued returns how many requests wait for a connection's slot, in every worker.
func queued(t *testing.T, tg *e2etest.Target, provider, connection string) int64 {
	_, h := tg.Admin(t, "GET", "monitoring/health", "")
	return h.Get(`rateLimitStatus.` + provider + `:` + connection + `.queued`).Int()
}

// chatAsync sends a chat for model on its own goroutine; wait returns the answer.
func chatAsync(t *testing.T, tg *e2etest.Target, model string) (wait func() *e2etest.Response) {
	var r *e2etest.Response
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err = e2etest.Send(context.Background(), "POST", tg.URL+"/v1/chat/completions", e2etest.ChatBody(model, false), nil)
	}()
	return func() *e2etest.Response {
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// A connection's maxConcurrent serialises its requests (guide §5): three at once all
// succeed, the provider never has two in flight. A full queue answers 429
// RATE_LIMIT_QUEUE_FULL at once and a spent wait budget 429 RATE_LIMIT_QUEUE_TIMEOUT,
// neither reaching the provider; the queued requests run once the slot frees.
func testCaps(t *testing.T, start e2etest.Starter) {
	tg := start(t, capsPolicy)
	fake := tg.Fake(t, "fake-openai")

	t.Run("serialised", func(t *testing.T) {
		var waits []func() *e2etest.Response
		release := holdSlot(t, tg, "m-serial", "key-serial") // the others must queue behind it
		for i := 0; i < 2; i++ {
			waits = append(waits, chatAsync(t, tg, "m-serial"))
		}
		e2etest.WaitFor(t, "two requests queued on serial", func() bool { return queued(t, tg, "openai", "serial") == 2 })
		if n := fake.StatsFor("key-serial").Requests; n != 1 {
			t.Fatalf("the provider got %d requests while the slot was held, want 1", n)
		}
		release()
		for _, wait := range waits {
			requireAnswer(t, "queued request", wait(), "openai/serial/m-serial/1")
		}
		if st := fake.StatsFor("key-serial"); st.Requests != 3 || st.MaxInFlight != 1 {
			t.Errorf("key-serial: %+v, want 3 requests, never 2 at once", st)
		}
	})

	t.Run("queue full", func(t *testing.T) {
		release := holdSlot(t, tg, "m-full", "key-full")
		w1, w2 := chatAsync(t, tg, "m-full"), chatAsync(t, tg, "m-full")
		e2etest.WaitFor(t, "two requests queued on full", func() bool { return queued(t, tg, "openai", "full") == 2 })
		requireSpillwayError(t, "a third in the queue", tg.Chat(t, "m-full", nil), 429, "RATE_LIMIT_QUEUE_FULL", false)
		release()
		requireAnswer(t, "first queued", w1(), "openai/full/m-full/1")
		requireAnswer(t, "second queued", w2(), "openai/full/m-full/1")
		if st := fake.StatsFor("key-full"); st.Requests != 3 || st.MaxInFlight != 1 {
			t.Errorf("key-full: %+v, want 3 requests (the refused one never sent), never 2 at once", st)
		}
	})

	t.Run("queue timeout", func(t *testing.T) {
		release := holdSlot(t, tg, "m-slow", "key-slow")
		requireSpillwayError(t, "past the 300 ms budget", tg.Chat(t, "m-slow", nil), 429, "RATE_LIMIT_QUEUE_TIMEOUT", false)
		release()
		requireAnswer(t, "once the slot is free", tg.Chat(t, "m-slow", nil), "openai/slow/m-slow/1")
		if st := fake.StatsFor("key-slow"); st.Requests != 2 || st.MaxInFlight != 1 {
			t.Errorf("key-slow: %+v, want 2 requests (the timed-out one never sent)", st)
		}
	})
	requireRequests(t, "in all", fake, map[string]int{}) // the client's own key never reached it
}

// affinityPolicy spreads gpt-4o-mini round-robin over two keys and pins sessions.
const affinityPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
      - {id: openai-b, credential: {header: authorization, value: "Bearer key-b"}}
routes:
  - {model: gpt-4o-mini, strategy: round-robin, targets: [{provider: openai}]}
resilience:
  sessionAffinityTtlMs: 60000
`

// Without a session, round-robin spreads requests over both keys; every request of one
// session (x-session-id) goes to the key its first went to, and the session header
// never reaches the provider.
func testSessionAffinity(t *testing.T, start e2etest.Starter) {
	tg := start(t, affinityPolicy)
	fake := tg.Fake(t, "fake-openai")
	const n = 6
	for i := 0; i < n; i++ {
		if r := tg.Chat(t, "gpt-4o-mini", nil); r.Status != 200 {
			t.Fatalf("without a session: %d %s", r.Status, r.Body)
		}
	}
	a, b := fake.StatsFor("key-a").Requests, fake.StatsFor("key-b").Requests
	if a == 0 || b == 0 || a+b != n {
		t.Fatalf("round-robin without a session: key-a %d, key-b %d of %d", a, b, n)
	}
	session := map[string]string{"x-session-id": "e2e-session-1"}
	first := tg.Chat(t, "gpt-4o-mini", session)
	pinned := first.Header.Get("x-spillway-connection")
	for i := 0; i < n; i++ {
		requireAnswer(t, "the session's next request", tg.Chat(t, "gpt-4o-mini", session), "openai/"+pinned+"/gpt-4o-mini/1")
	}
	key := map[string]string{"openai-a": "key-a", "openai-b": "key-b"}[pinned]
	other := map[string]string{"key-a": "key-b", "key-b": "key-a"}[key]
	before := map[string]int{"key-a": a, "key-b": b}
	requireRequests(t, "the session", fake, map[string]int{key: before[key] + n + 1, other: before[other]})
	for _, rec := range fake.Requests() {
		if v := rec.Header.Get("x-session-id"); v != "" {
			t.Fatalf("x-session-id %q reached the provider", v)
		}
	}
}
