package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/hostsim/serve"
)

// Failover that streams is the default (design.md §4): a policy without any failover field,
// run where the deployment has the upstream filter, fails over through the router. What
// streams then depends on the Envoy release the configuration is for (README, "Supported
// Envoy and Istio versions", the table per release):
//
//   - another key of the same provider after a 429: a retry decided on the failed try's
//     status, on every supported release;
//   - another key after an error event first in a 200 stream: only a held try sees that
//     event (failover.holdTries, Envoy ≥ 1.37); before, the downstream instance fails over
//     by callout and the answer arrives whole;
//   - another provider: only a retry that refreshes its cluster reaches it
//     (failover.crossCluster, Envoy ≥ 1.39); before, by callout, whole.
//
// Each runs under hostsim serve's model of Envoy 1.36 (-envoy-version 1.36 with 1.36's
// route buffer limit, -route-buffer-limit-at-router) and 1.39, and, with ENVOY_BIN, under
// that Envoy with the expectations of its release. The answering fake sends its headers,
// role chunk and first content event and then holds the rest of its generation
// (defaultGeneration, timed from its request's arrival, or until the client has its first
// content, whichever is later): a streamed failover is shown by the client having that
// first content while the fake still holds the rest, the whole delivery by the client
// having nothing until the fake ends its generation, then every byte at once with the
// Content-Length of the whole stream (a local reply).

// defaultFailoverPolicy sets no failover field: openai's two keys, then the backup provider
// on another cluster with its own name for the model; a route on one key alone for the
// fallback case, so the fallback is the only failover it makes.
const defaultFailoverPolicy = `
providers:
  - id: openai
    cluster: fake-openai
    connections:
      - {id: openai-a, credential: {header: authorization, value: "Bearer key-a"}}
      - {id: openai-b, credential: {header: authorization, value: "Bearer key-b"}}
  - id: solo
    cluster: fake-solo
    connections:
      - {id: solo-a, credential: {header: authorization, value: "Bearer key-solo"}}
  - id: backup
    cluster: fake-backup
    connections:
      - {id: backup-a, credential: {header: authorization, value: "Bearer key-backup"}}
routes:
  - {model: gpt-4o, strategy: priority, targets: [{provider: openai}]}
  - {model: m-fallback, strategy: priority, targets: [{provider: solo}, {provider: backup, model: vendor/m}]}
admin: {token: "${SPILLWAY_ADMIN_TOKEN}"}
`

// defaultGeneration is how long the answering fake's generation lasts.
const defaultGeneration = time.Second

// defaultFailoverCase is one of the three failovers.
type defaultFailoverCase struct {
	name  string
	model string
	// fail scripts the failing attempt on the fakes.
	fail func(tg *e2etest.Target)
	// fake and credential answer; answer is x-spillway-provider/connection/model/attempts.
	fake, credential, answer string
	// since is the release from which it streams (1.since).
	since int
}

var defaultFailoverCases = []defaultFailoverCase{
	{"another key after a 429", "gpt-4o",
		func(tg *e2etest.Target) { tg.Fakes["fake-openai"].ScriptFor("key-a", rateLimited) },
		"fake-openai", "key-b", "openai/openai-b/gpt-4o/2", 36},
	{"another key after an error event in a 200 stream", "gpt-4o",
		func(tg *e2etest.Target) {
			tg.Fakes["fake-openai"].ScriptFor("key-a", fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorFirst})
		},
		"fake-openai", "key-b", "openai/openai-b/gpt-4o/2", 37},
	{"another provider after a 429", "m-fallback",
		func(tg *e2etest.Target) { tg.Fakes["fake-solo"].ScriptFor("key-solo", rateLimited) },
		"fake-backup", "key-backup", "backup/backup-a/vendor/m/2", 39},
}

// TestDefaultFailoverStreamsPerRelease: the proof, the three failovers of a policy
// without failover fields under serve's 1.36 and 1.39 models (see the file comment).
func TestDefaultFailoverStreamsPerRelease(t *testing.T) {
	for _, release := range []int{36, 39} {
		for _, c := range defaultFailoverCases {
			t.Run(fmt.Sprintf("Envoy 1.%d/%s", release, c.name), func(t *testing.T) {
				t.Parallel()
				tg := e2etest.StartServeWith(t, defaultFailoverPolicy, func(o *serve.Options) {
					o.EnvoyMinor = release
					o.RouteBufferLimitAtRouter = release < 37 // 1.36: before envoyproxy/envoy#42607
				})
				requireDefaultFailover(t, tg, c, release)
			})
		}
	}
}

// TestDefaultFailoverStreamsInEnvoy: the same in a real Envoy when ENVOY_BIN names one,
// rendered for its release, with that release's expectations.
func TestDefaultFailoverStreamsInEnvoy(t *testing.T) {
	bin := os.Getenv(e2etest.EnvEnvoyBin)
	if bin == "" {
		t.Skip("ENVOY_BIN not set: the default failover was NOT checked in a real Envoy (set ENVOY_BIN=/path/to/envoy, Envoy >= 1.36)")
	}
	minor, err := e2etest.EnvoyMinor(bin)
	if err != nil {
		t.Fatal(err)
	}
	start := e2etest.EnvoyStarter(bin)
	for _, c := range defaultFailoverCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			requireDefaultFailover(t, start(t, defaultFailoverPolicy), c, minor)
		})
	}
}

// requireDefaultFailover runs case c on tg, whose Envoy is 1.release, and checks that it
// streams from c.since on and arrives whole before, through the path the table names: a
// router retry (spillway_router_retries_total) or a callout, never the unlinked detector.
func requireDefaultFailover(t *testing.T, tg *e2etest.Target, c defaultFailoverCase, release int) {
	t.Helper()
	streams := release >= c.since
	c.fail(tg)
	fake := tg.Fake(t, c.fake)
	hold := newReleaser(t)
	fake.ScriptFor(c.credential, fakeprovider.Fault{AfterEvents: 1, Pause: hold.ch})

	type opened struct {
		s   *e2etest.Stream
		err error
	}
	got := make(chan opened, 1)
	// The events up to the first content, once the client has it.
	firstEvents := make(chan []e2etest.Event, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sent := time.Now()
	go func() {
		s, err := e2etest.DialStream(ctx, tg.URL+"/v1/chat/completions", e2etest.ChatBody(c.model, true), nil)
		got <- opened{s, err}
		if err != nil {
			return
		}
		var read []e2etest.Event
		for {
			ev, err := s.Next()
			if err != nil {
				return
			}
			if read = append(read, ev); isContent(ev) {
				firstEvents <- read
				return
			}
		}
	}()
	e2etest.WaitFor(t, c.credential+"'s first content, then its hold", func() bool {
		for _, r := range fake.Requests() {
			if r.Credential == c.credential {
				return len(r.Sent) == 3
			}
		}
		return false
	})
	start := requestOf(t, fake, c.credential).Start
	generationEnd := start.Add(defaultGeneration)

	var before []e2etest.Event
	if streams {
		// The client has the first content while the fake holds the rest (a proxy that
		// buffers it would keep the client waiting: bounded here).
		select {
		case before = <-firstEvents:
		case <-time.After(hostsimtest.WaitLimit):
			t.Fatalf("the client had no content while %s held its stream: the failover did not stream", c.credential)
		}
		time.Sleep(time.Until(generationEnd))
		hold.release()
	} else {
		time.Sleep(time.Until(generationEnd))
		select {
		case o := <-got:
			t.Fatalf("the client had an answer (%v) while %s held its stream: it streamed before 1.%d", o.err, c.credential, c.since)
		default:
		}
		hold.release()
	}
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	s := o.s
	t.Cleanup(s.Close)
	if h := s.Header; h.Get("x-spillway-provider")+"/"+h.Get("x-spillway-connection")+"/"+h.Get("x-spillway-model")+"/"+
		h.Get("x-spillway-attempts") != c.answer {
		t.Errorf("answered by %s/%s/%s/%s, want %s", h.Get("x-spillway-provider"), h.Get("x-spillway-connection"),
			h.Get("x-spillway-model"), h.Get("x-spillway-attempts"), c.answer)
	}
	if !streams {
		before = <-firstEvents
	}
	first, released := before[len(before)-1].At, hold.releasedAt()
	t.Logf("Envoy 1.%d, "+c.name+": first content %v after the request, %v after %s's request arrived; its generation lasted %v (held until %v after the request)",
		release, first.Sub(sent).Round(time.Millisecond), first.Sub(start).Round(time.Millisecond), c.credential,
		released.Sub(start).Round(time.Millisecond), released.Sub(sent).Round(time.Millisecond))
	if streams != first.Before(released) {
		t.Errorf("first content before the generation ended: %v, want %v", first.Before(released), streams)
	}
	events, err := s.Rest()
	all := joinEvents(append(before, events...))
	if !errors.Is(err, io.EOF) || !strings.HasSuffix(all, "data: [DONE]\n\n") || strings.Contains(all, `"error"`) {
		t.Fatalf("the stream ended in %v:\n%s", err, all)
	}
	cl := s.Header.Get("Content-Length")
	switch {
	case streams && cl != "":
		t.Errorf("a streamed failover has Content-Length %s", cl)
	case !streams && (cl != strconv.Itoa(len(all)) || !s.HeadersAt.After(released)):
		// The whole stream as one local reply: its headers came after the generation ended
		// and carry its length.
		t.Errorf("Content-Length %q, headers %v after the release: want the whole stream's %d bytes, after it", cl,
			s.HeadersAt.Sub(released), len(all))
	}
	retries := 0
	if streams {
		retries = 1
	}
	requireCounters(t, tg, []string{`spillway_route_requests_total{spillway_route_model="` + c.model + `",spillway_outcome="success"} 1`},
		map[string]int{
			"spillway_attempts_total{}":        2,
			"spillway_failovers_total{}":       1,
			"spillway_router_retries_total{}":  retries,
			"spillway_router_unlinked_total{}": 0,
		})
}
