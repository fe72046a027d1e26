package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// outagePolicy: one API-key provider with two keys (the issue-19 report), nothing to fall
// back to; round-robin, so both keys take traffic once they serve again.
const outagePolicy = `
providers:
  - id: flaky
    profile: apikey
    cluster: flaky
    connections:
      - {id: key-1, credential: {header: authorization, value: "Bearer k1"}}
      - {id: key-2, credential: {header: authorization, value: "Bearer k2"}}
routes:
  - {model: gpt-4o, strategy: round-robin, targets: [{provider: flaky}]}
`

// outageRun is what clients and the provider saw in one simulated outage.
type outageRun struct {
	attemptsDuring int           // upstream requests while the provider failed
	firstOK        time.Duration // first 200 after the provider recovered, from the recovery
	allKeysBack    time.Duration // every key served a 200 again, from the recovery
	spillway503    int           // Spillway's own 503s after the recovery, before the first 200
}

// simulateOutage runs the issue-19 measurement through the built module: a provider whose
// every request fails with 503 for outage, then succeeds; a client sends one request every
// 100 ms (alternating between two worker VMs) on the virtual clock, until every key has
// served again or 60 s past the recovery.
func simulateOutage(t *testing.T, outage time.Duration) outageRun {
	t.Helper()
	w := newWorld(t, outagePolicy, 2)
	start := w.host.Clock().Now()
	recovered := start.Add(outage)
	failing := true
	for _, k := range []string{"k1", "k2"} {
		w.fakes.set(k, func(c upstreamCall) *hostsim.UpstreamResponse {
			if failing {
				return jsonError(503, `{"error":{"message":"upstream unavailable","type":"server_error"}}`)
			}
			return chatOK(c)
		})
	}
	var run outageRun
	run.firstOK, run.allKeysBack = -1, -1
	served := map[string]bool{}
	for i := 0; ; i++ {
		now := w.host.Clock().Now()
		if !now.Before(recovered) {
			failing = false
		}
		if now.Sub(recovered) > 60*time.Second || run.allKeysBack >= 0 {
			break
		}
		r := w.run(i%2, chatReq("gpt-4o"))
		after := now.Sub(recovered)
		switch {
		case r.StatusCode == 200 && after >= 0:
			if run.firstOK < 0 {
				run.firstOK = after
			}
			served[header(r.Headers, "x-spillway-connection")] = true
			if len(served) == 2 {
				run.allKeysBack = after
			}
		case r.StatusCode == 503 && after >= 0 && run.firstOK < 0 && errorCode(r) != "":
			run.spillway503++
		}
		w.advance(100 * time.Millisecond)
	}
	for _, c := range w.fakes.received() {
		if c.at.Before(recovered) {
			run.attemptsDuring++
		}
	}
	w.noStreamsLeft()
	return run
}

func (r outageRun) String() string {
	return fmt.Sprintf("%d upstream attempts during the outage; first 200 %v after the recovery (%d Spillway 503s before it); every key back after %v",
		r.attemptsDuring, r.firstOK, r.spillway503, r.allKeysBack)
}

// ladderAttempts is what the guide's connection cooldown alone lets through during an outage
// of length d, on each of keys keys failing together: one attempt per step of the ladder, a
// step ending 3 s × (2^k − 1) after the outage began (guide §2: an API key's base cooldown
// is 3 s, "baseCooldownMs * 2 ** failureIndex").
func ladderAttempts(d time.Duration, keys int) int {
	n := 0
	for end := time.Duration(0); end < d; end = 2*end + 3*time.Second {
		n++
	}
	return n * keys
}

// After an outage the first 200 comes within one base cooldown (3 s for an API key) of the
// provider's recovery, every key serves again right after, and the provider got at most what
// the guide's ladder sends plus one probe per base cooldown (issue 19).
func TestScenarioRecoveryAfterAnOutage(t *testing.T) {
	for _, outage := range []time.Duration{40 * time.Second, 22 * time.Second} {
		t.Run(outage.String(), func(t *testing.T) {
			run := simulateOutage(t, outage)
			t.Logf("%v outage: %v", outage, run)
			budget := ladderAttempts(outage, 2) + int(outage/(3*time.Second))
			if run.firstOK < 0 || run.firstOK > 3*time.Second {
				t.Errorf("first 200 %v after the recovery, want within 3 s", run.firstOK)
			}
			if run.allKeysBack < 0 || run.allKeysBack > run.firstOK+time.Second {
				t.Errorf("every key back %v after the recovery, want within 1 s of the first 200 (%v)", run.allKeysBack, run.firstOK)
			}
			if run.attemptsDuring > budget {
				t.Errorf("%d upstream attempts during the outage, want at most %d (the ladder's %d plus one per 3 s)",
					run.attemptsDuring, budget, ladderAttempts(outage, 2))
			}
		})
	}
}

// One probe at a time in the whole process: while one worker's probe is in flight, another
// worker's request gets Spillway's 503 and the provider nothing; the probe's 200 brings both
// keys back. Keys cooling for an exhausted quota (a 429 that names a daily cap) are never
// probed. (A short rate limit is waited out by comboCooldownWait, guide §4, not probed
// either: plugin/internal/engine's recovery tests cover every reason.)
func TestScenarioOneRecoveryProbeAcrossWorkers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(upstreamCall) *hostsim.UpstreamResponse // what both keys answered, twice
		probe bool                                         // then a request probes, 3 s later
	}{
		{name: "503", probe: true, fail: func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(503, `{"error":{"message":"upstream unavailable","type":"server_error"}}`)
		}},
		{name: "429 daily quota", fail: func(upstreamCall) *hostsim.UpstreamResponse {
			return jsonError(429, `{"error":{"message":"daily rate limit exceeded"}}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, outagePolicy, 2)
			for _, k := range []string{"k1", "k2"} {
				w.fakes.set(k, tc.fail)
			}
			w.run(0, chatReq("gpt-4o")) // both keys fail: 3 s (the quota: until its reset)
			w.advance(3 * time.Second)
			w.run(1, chatReq("gpt-4o")) // again, for a 503: both keys cool 6 s
			w.advance(3 * time.Second)
			for _, k := range []string{"k1", "k2"} {
				w.fakes.set(k, func(c upstreamCall) *hostsim.UpstreamResponse {
					r := chatOK(c)
					r.Delay = time.Second
					return r
				})
			}
			before := len(w.fakes.received())
			probe := w.start(0, chatReq("gpt-4o"))
			w.advance(500 * time.Millisecond)
			other := w.run(1, chatReq("gpt-4o"))
			if other.StatusCode != 503 || errorCode(other) != "all_targets_cooling_down" {
				t.Fatalf("request during the probe: %d %s, want 503 all_targets_cooling_down", other.StatusCode, other.Body)
			}
			resp := w.wait(probe)
			sent := len(w.fakes.received()) - before
			if !tc.probe {
				if resp.StatusCode != 503 || sent != 0 {
					t.Fatalf("keys cooling for a quota: %d after %d upstream requests, want Spillway's 503 and no probe", resp.StatusCode, sent)
				}
				return
			}
			if resp.StatusCode != 200 || sent != 1 {
				t.Fatalf("probe: %d via %s after %d upstream requests, want one 200", resp.StatusCode, spillway(resp), sent)
			}
			probed := header(resp.Headers, "x-spillway-connection")
			for i := 0; i < 2; i++ { // round-robin: both keys serve at once
				r := w.run(1, chatReq("gpt-4o"))
				if r.StatusCode != 200 {
					t.Fatalf("after the probe: %d %s", r.StatusCode, r.Body)
				}
				if c := header(r.Headers, "x-spillway-connection"); c != probed {
					return
				}
			}
			t.Fatalf("only %s served after the probe; the other key stayed cooling", probed)
		})
	}
}
