package e2e

import (
	"os"
	"testing"

	"github.com/spillwayproxy/spillway/e2e/internal/e2etest"
)

// scenario is one end-to-end behaviour, written against whatever runs the filter: it
// starts its own Target (its own policy, fresh state and fakes) and asserts what the
// client saw and what each fake credential received.
type scenario struct {
	name string                                    // the subtest's name
	run  func(t *testing.T, start e2etest.Starter) // starts its target(s) with start
}

// scenarios are every scenario, in the order the README lists them.
var scenarios = []scenario{
	{"key failover on 429 and recovery after Retry-After", testKeyFailoverAndRecovery},
	{"breaker opens on a 5xx storm, probes half-open and closes", testBreaker},
	{"fallback to a second provider in the same request", testFallbackProvider},
	{"restatement and the exclude veto", testRestatement},
	{"a model locked on one connection while it serves others", testModelLockout},
	{"all targets cooling down, with diagnostics", testAllTargetsCoolingDown},
	{"caps serialise; queue full; queue timeout", testCaps},
	{"session affinity", testSessionAffinity},
	{"the admin API: list, reset, auth", testAdminAPI},
	{"labelled metrics on the admin listener", testMetrics},
	{"streaming pass-through and time to first content", testStreamingPassThrough},
	{"errors inside a stream", testErrorInStream},
	{"a truncated stream", testTruncatedStream},
	{"a cut stream reaches openai-go and anthropic-sdk-go as an API error", testCutStreamSDKs},
	{"a client disconnect gives its slot back", testClientDisconnect},
	{"openai-go and anthropic-sdk-go, JSON and streaming, first key rate-limited", testSDKs},
	{"the SDKs' own retry honours the proxy's Retry-After", testSDKRetryAfter},
	{"router failover: a 429 fails over as the router's retry and streams; the callout path buffers", testRouterFailoverStreams},
	{"router failover with held tries: an error event first fails over and streams", testRouterHeldTryErrorEvent},
	{"router failover to another provider by callout, every try counted once", testRouterCrossProviderFallback},
	{"router failover: a cross-cluster retry streams the other provider (crossCluster, Envoy >= 1.39)", testRouterCrossClusterStreams},
	{"router failover: a client gone mid-failover leaks no slot", testRouterClientGoneMidFailover},
}

// runScenarios runs every scenario as a parallel subtest on start: each waits on its own
// fakes and timers, so two share the machine's cores without sharing any state.
func runScenarios(t *testing.T, start e2etest.Starter) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, start)
		})
	}
}

// The scenarios against hostsim serve: always run.
func TestScenariosHostsim(t *testing.T) {
	runScenarios(t, e2etest.StartServe)
}

// The same scenarios against a real Envoy, when ENVOY_BIN names one (>= 1.36). Without
// it this test alone skips, saying so; the hostsim runs above never skip.
func TestScenariosEnvoy(t *testing.T) {
	bin := os.Getenv(e2etest.EnvEnvoyBin)
	if bin == "" {
		t.Skip("ENVOY_BIN not set: real-Envoy e2e skipped (set ENVOY_BIN=/path/to/envoy, Envoy >= 1.36, to run every scenario against it; see e2e/README.md)")
	}
	runScenarios(t, e2etest.EnvoyStarter(bin))
}
