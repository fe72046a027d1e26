package main

// The upstream role: the same module attached as each provider cluster's upstream HTTP
// filter under root id rootid.Upstream, a second plugin on every VM. Under a policy that
// fails over by callout it passes every try through untouched, so a request gives exactly
// what it gives without it.

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// upstreamRoleLine is the start log line of the upstream role.
const upstreamRoleLine = "spillway: upstream filter (root_id spillway.upstream)"

// calloutDemo is the demo policy failing over by callout (said explicitly: an unset via is
// router), under which the upstream role passes every try through.
var calloutDemo = strings.Replace(string(examples.Demo()), "\nresilience:\n", "\nresilience:\n  failover: {via: callout}\n", 1)

func demoPolicyJSON(t *testing.T) []byte {
	t.Helper()
	config, err := policyfile.ToJSON([]byte(calloutDemo))
	if err != nil {
		t.Fatal(err)
	}
	return config
}

// demoOutcome is everything a run of the demo's requests shows from outside the VMs.
type demoOutcome struct {
	responses []string               // per request: status, x-spillway-* headers, body
	received  []string               // what the fake providers received, in order
	tries     []int                  // per request: the router's tries
	counters  []hostsim.MetricValue  // every counter once each VM flushed
	proxy     hostsim.HostCallCounts // the guest's proxy-wasm calls (env.*) the requests made
	started   map[string]int         // per VM: "policy loaded" lines
	roleLines map[string]int         // per VM: the upstream role's start lines
}

// runDemo starts the demo policy on workers VMs with opts, sends a chat completion that
// succeeds and one that key A answers 429 (failed over to key B by callout) through each
// worker, and returns what they gave.
func runDemo(t *testing.T, workers int, opts ...hostsim.Option) demoOutcome {
	t.Helper()
	w := newWorld(t, calloutDemo, workers,
		append([]hostsim.Option{hostsim.WithCluster("fake-openai", "fake-openrouter", "fake-anthropic")}, opts...)...)
	var out demoOutcome
	out.started, out.roleLines = map[string]int{}, map[string]int{}
	for _, l := range w.host.Logs() {
		switch {
		case strings.HasPrefix(l.Message, "spillway: policy loaded"):
			out.started[l.VM]++
		case strings.HasPrefix(l.Message, upstreamRoleLine):
			if l.Level != hostsim.LogInfo {
				t.Errorf("%s: role line at level %v, want info", l.VM, l.Level)
			}
			out.roleLines[l.VM]++
		}
	}
	out.proxy = hostsim.HostCallCounts{}
	// run sends one request and adds the guest's proxy-wasm calls it made to out.proxy (the
	// requests' alone: which VM publishes the gauges on a tick depends on random VM ids).
	run := func(worker int) *hostsim.Response {
		before := w.host.Host.HostCalls()
		r := w.run(worker, chatReq("gpt-4o"))
		for name, n := range w.host.Host.HostCalls().Sub(before) {
			if strings.HasPrefix(name, "env.") {
				out.proxy[name] += n
			}
		}
		return r
	}
	for i := 0; i < workers; i++ {
		w.fakes.set("demo-key-a", nil)
		ok := run(i)
		w.fakes.set("demo-key-a", rateLimited("1"))
		failedOver := run(i)
		for _, r := range []*hostsim.Response{ok, failedOver} {
			var hs []string
			for _, kv := range r.Headers {
				if strings.HasPrefix(kv[0], "x-spillway-") {
					hs = append(hs, kv[0]+"="+kv[1])
				}
			}
			slices.Sort(hs)
			out.responses = append(out.responses, fmt.Sprintf("%d %s %s", r.StatusCode, strings.Join(hs, " "), r.Body))
			out.tries = append(out.tries, len(r.Tries))
		}
		// Past key A's cooldown for the next worker's requests.
		w.advance(2 * time.Second)
	}
	for _, c := range w.fakes.received() {
		out.received = append(out.received, fmt.Sprintf("%s %s %s callout=%v", c.cluster, c.credential, c.model, c.viaCallout))
	}
	w.metric("spillway_requests_total") // ticks every worker: their counts reach the metrics
	// The counters: the gauges are defined by the VM that publishes them, the one with the
	// lowest random id.
	for _, m := range w.host.Host.Metrics() {
		if m.Type == hostsim.MetricCounter {
			out.counters = append(out.counters, m)
		}
	}
	w.noStreamsLeft() // the upstream filter's streams too: every try's stream ended
	return out
}

func TestScenarioTheUpstreamRolePassesTriesThroughUntouched(t *testing.T) {
	demo := demoPolicyJSON(t)
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			without := runDemo(t, workers)
			with := runDemo(t, workers, hostsim.WithUpstreamFilter(rootid.Upstream, demo))

			// The requests themselves: the first succeeds on key A, the second fails over to
			// key B, on every worker, with or without the upstream filter.
			for i, r := range without.responses {
				want := "200 x-spillway-attempts=1 x-spillway-connection=openai-a"
				if i%2 == 1 {
					want = "200 x-spillway-attempts=2 x-spillway-connection=openai-b"
				}
				if !strings.HasPrefix(r, want) {
					t.Fatalf("request %d without the upstream filter: %s, want %s...", i, r, want)
				}
			}
			if !slices.Equal(with.responses, without.responses) {
				t.Errorf("responses with the upstream filter:\n%s\nwithout:\n%s", strings.Join(with.responses, "\n"), strings.Join(without.responses, "\n"))
			}
			if !slices.Equal(with.received, without.received) {
				t.Errorf("the providers received with the upstream filter:\n%s\nwithout:\n%s", strings.Join(with.received, "\n"), strings.Join(without.received, "\n"))
			}
			if !slices.Equal(with.tries, without.tries) || slices.ContainsFunc(with.tries, func(n int) bool { return n != 1 }) {
				t.Errorf("tries per request %v with the upstream filter, %v without; want one each (no retry policy)", with.tries, without.tries)
			}
			// Nothing counted, read or written by the upstream plugin: the counters and the
			// guest's proxy-wasm calls of the requests are the same.
			if !reflect.DeepEqual(with.counters, without.counters) {
				t.Errorf("counters with the upstream filter:\n%v\nwithout:\n%v", with.counters, without.counters)
			}
			if !maps.Equal(with.proxy, without.proxy) {
				t.Errorf("proxy-wasm calls with the upstream filter %v, without %v", with.proxy, without.proxy)
			}
			// Each VM started the downstream plugin as before and the upstream plugin once:
			// the canaries (one per plugin), the main thread and every worker.
			if !maps.Equal(with.started, without.started) {
				t.Errorf("downstream starts per VM %v with the upstream filter, %v without", with.started, without.started)
			}
			wantRole := map[string]int{"canary": 1, "main": 1}
			for i := 0; i < workers; i++ {
				wantRole[fmt.Sprintf("worker-%d", i)] = 1
			}
			if !maps.Equal(with.roleLines, wantRole) {
				t.Errorf("upstream role lines per VM %v, want %v", with.roleLines, wantRole)
			}
			if len(without.roleLines) != 0 {
				t.Errorf("upstream role lines without the upstream filter: %v", without.roleLines)
			}
		})
	}
}

func TestScenarioABadPolicyUnderTheUpstreamRootIDRefusesToStart(t *testing.T) {
	wasm := hostsimtest.ReadModule(t, "build/spillway.wasm")
	bad := []byte(`{"providers":[{"id":"openai","profile":"apikey","cluster":"c","connections":[{"id":"a","credential":{"header":"authorization","value":"Bearer k"}}]}],
		"routes":[{"model":"gpt-4o","targets":[{"provider":"azur"}]}]}`)
	for _, canary := range []bool{true, false} {
		t.Run(fmt.Sprintf("canary=%v", canary), func(t *testing.T) {
			opts := []hostsim.Option{hostsim.WithWorkers(2), hostsim.WithPluginConfiguration(demoPolicyJSON(t)),
				hostsim.WithUpstreamFilter(rootid.Upstream, bad)}
			if !canary {
				opts = append(opts, hostsim.WithoutCanary()) // the workers' own starts refuse it
			}
			h := hostsimtest.New(t, wasm, opts...)
			if st := h.StartPlugin(); st != types.OnPluginStartStatusFailed {
				t.Fatalf("start %v, want failed", st)
			}
			crit := strings.Join(h.Host.GetCriticalLogs(), "\n")
			if !strings.Contains(crit, "spillway: refusing to start") || !strings.Contains(crit, "routes[0].targets[0].provider") {
				t.Fatalf("critical logs %q, want the refusal with the field path", crit)
			}
			if strings.Contains(strings.Join(h.Host.GetInfoLogs(), "\n"), upstreamRoleLine) {
				t.Error("a refused upstream plugin logged its role line")
			}
		})
	}
}
