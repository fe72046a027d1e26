package serve

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// Prometheus text as Envoy's admin prints Wasm metrics with Spillway's stats_tags: the
// wasmcustom namespace stripped with no envoy_ prefix, the labels taken out of the names,
// the series of one family under one TYPE line, counters before gauges before histograms,
// histograms as cumulative buckets with _sum and _count.
func TestPrometheusText(t *testing.T) {
	host := []hostStat{
		{hostsim.MetricCounter, "hostsim.wasm_vm_failures_total.worker-1", "hostsim.wasm_vm_failures_total", "hostsim_wasm_vm_failures_total", `worker="worker-1"`, 0},
		{hostsim.MetricCounter, "hostsim.wasm_vm_failures_total.worker-0", "hostsim.wasm_vm_failures_total", "hostsim_wasm_vm_failures_total", `worker="worker-0"`, 2},
		{hostsim.MetricCounter, "wasm.spillway.vm_reload_success", "wasm.spillway.vm_reload_success", "envoy_wasm_spillway_vm_reload_success", "", 1},
		{hostsim.MetricGauge, "hostsim.wasm_vm_failed.worker-0", "hostsim.wasm_vm_failed", "hostsim_wasm_vm_failed", `worker="worker-0"`, 1},
	}
	got := prometheusText([]hostsim.MetricValue{
		{Name: stats.ConnectionAttempts.Stat("openai", "key-b"), Type: hostsim.MetricCounter, Value: 2},
		{Name: stats.ConnectionAttempts.Stat("openai", "key-a"), Type: hostsim.MetricCounter, Value: 5},
		{Name: "spillway_requests_total", Type: hostsim.MetricCounter, Value: 7},
		{Name: stats.BreakerState.Stat("openai"), Type: hostsim.MetricGauge, Value: 2},
		{Name: "spillway.queue-depth", Type: hostsim.MetricGauge, Value: 3},
		{Name: "spillway_ttfb_ms", Type: hostsim.MetricHistogram, Samples: []uint64{3, 40, 7000}},
		{Name: "9lives", Type: hostsim.MetricCounter, Value: 1}, // a digit first: Envoy leaves it out
	}, host)
	// The host's stats sort among the filter's by their names without tags (hostsim.…,
	// then wasm.spillway.…, then wasmcustom.…).
	want := "# TYPE hostsim_wasm_vm_failures_total counter\n" +
		`hostsim_wasm_vm_failures_total{worker="worker-0"} 2` + "\n" + `hostsim_wasm_vm_failures_total{worker="worker-1"} 0` + "\n" +
		"# TYPE envoy_wasm_spillway_vm_reload_success counter\nenvoy_wasm_spillway_vm_reload_success{} 1\n" +
		"# TYPE spillway_connection_attempts_total counter\n" +
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="key-a"} 5` + "\n" +
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="key-b"} 2` + "\n" +
		"# TYPE spillway_requests_total counter\nspillway_requests_total{} 7\n" +
		"# TYPE hostsim_wasm_vm_failed gauge\n" + `hostsim_wasm_vm_failed{worker="worker-0"} 1` + "\n" +
		"# TYPE spillway_queue_depth gauge\nspillway_queue_depth{} 3\n" +
		"# TYPE spillway_breaker_state gauge\n" + `spillway_breaker_state{spillway_provider="openai"} 2` + "\n" +
		"# TYPE spillway_ttfb_ms histogram\n"
	if !strings.HasPrefix(got, want) {
		t.Errorf("output:\n%s\nwant it to start with:\n%s", got, want)
	}
	for _, line := range []string{
		`spillway_ttfb_ms_bucket{le="0.5"} 0` + "\n",
		`spillway_ttfb_ms_bucket{le="5"} 1` + "\n",
		`spillway_ttfb_ms_bucket{le="50"} 2` + "\n",
		`spillway_ttfb_ms_bucket{le="10000"} 3` + "\n",
		`spillway_ttfb_ms_bucket{le="+Inf"} 3` + "\n",
		"spillway_ttfb_ms_sum{} 7043\nspillway_ttfb_ms_count{} 3\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("output lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, "9lives") {
		t.Errorf("a name starting with a digit is shown:\n%s", got)
	}
}

// Names and labels as Envoy's PrometheusStatsFormatter writes them.
func TestPrometheusNamesAndLabels(t *testing.T) {
	tests := []struct {
		extracted string // a tag-extracted stat name
		want      string // its Prometheus name ("" = left out)
	}{
		{"wasmcustom.spillway_requests_total", "spillway_requests_total"}, // custom namespace: stripped, no envoy_
		{"wasmcustom.a.b-c", "a_b_c"},                                     // sanitised
		{"wasmcustom.9lives", ""},                                         // would start with a digit: left out
		{"cluster.upstream_rq_total", "envoy_cluster_upstream_rq_total"},  // Envoy's own stats get envoy_
	}
	for _, tt := range tests {
		got, ok := prometheusName(tt.extracted)
		if tt.want == "" && ok || tt.want != "" && got != tt.want {
			t.Errorf("prometheusName(%q) = %q %v, want %q", tt.extracted, got, ok, tt.want)
		}
	}
	if got := promLabels([]stats.Label{{Name: "a.b", Value: "x\"y\\z\nw"}}); got != `a_b="x\"y\\z\nw"` {
		t.Errorf("labels %s", got)
	}
}

// The admin listener serves the filter's metrics and the readiness. The filter counts in
// each VM and adds its counts to Envoy's stats on that VM's next tick (at most a second
// later when idle), so the counts are awaited.
func TestAdminListener(t *testing.T) {
	d := startDemo(t, func(o *Options) { o.Admin = "127.0.0.1:0" })
	if d.AdminAddr == "" || !strings.Contains(d.Banner(), "admin:     http://"+d.AdminAddr) {
		t.Fatalf("admin at %q, banner:\n%s", d.AdminAddr, d.Banner())
	}
	for i := 0; i < 3; i++ {
		if status, _, body := post(t, d.URL()+"/v1/chat/completions", chatBody, nil); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	}
	// One more that fails over from openai-a to openai-b: 4 requests, 5 attempts.
	if status, h, body := post(t, d.URL()+"/v1/chat/completions", chatBody,
		map[string]string{"x-fake-status": "503", "x-fake-key-suffix": "key-a"}); status != 200 || h.Get("x-spillway-attempts") != "2" {
		t.Fatalf("%d %v %s", status, h, body)
	}
	want := []string{
		"# TYPE spillway_requests_total counter\nspillway_requests_total{} 4\n",
		"spillway_routed_total{} 4\n",
		"spillway_attempts_total{} 5\n",
		"spillway_failovers_total{} 1\n",
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="openai-a"} 4` + "\n",
		`spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="openai-b"} 1` + "\n",
		`spillway_connection_failures_total{spillway_provider="openai",spillway_connection="openai-a",spillway_reason="server_error"} 1` + "\n",
		`spillway_route_requests_total{spillway_route_model="gpt-4o",spillway_outcome="success"} 4` + "\n",
	}
	var status int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if status, body = get(t, "http://"+d.AdminAddr+"/stats/prometheus"); status == 200 && containsAll(body, want) {
			break
		}
	}
	if status != 200 || !containsAll(body, want) {
		t.Errorf("/stats/prometheus %d, want %q:\n%s", status, want, body)
	}
	if status, body := get(t, "http://"+d.AdminAddr+"/stats"); status != 200 || !strings.Contains(body, "wasmcustom.spillway_requests_total: 4\n") {
		t.Errorf("/stats %d:\n%s", status, body)
	}
	if status, body := get(t, "http://"+d.AdminAddr+"/ready"); status != 200 || body != "LIVE\n" {
		t.Errorf("/ready %d %q", status, body)
	}
	// No VM failed: hostsim's failure stats and Envoy's reload counters are there, at 0.
	if _, body := get(t, "http://"+d.AdminAddr+"/stats/prometheus"); !containsAll(body, []string{
		`hostsim_wasm_vm_failures_total{worker="worker-0"} 0` + "\n", `hostsim_wasm_vm_failures_total{worker="worker-1"} 0` + "\n",
		`hostsim_wasm_vm_failed{worker="worker-1"} 0` + "\n", "envoy_wasm_spillway_vm_reload_success{} 0\n",
		"envoy_wasm_spillway_vm_reload_failure{} 0\n"}) {
		t.Errorf("/stats/prometheus lacks the VM stats:\n%s", body)
	}
	if status, _ := get(t, "http://"+d.AdminAddr+"/nope"); status != 404 {
		t.Errorf("unknown endpoint: %d", status)
	}
	// Draining: /ready says so with a 503.
	var ready atomic.Bool
	rec := httptest.NewRecorder()
	(&admin{host: d.Server.Host(), ready: &ready}).ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
	if b, _ := io.ReadAll(rec.Body); rec.Code != 503 || string(b) != "DRAINING\n" {
		t.Errorf("/ready while draining: %d %q", rec.Code, b)
	}
}

// A VM that trapped is counted on the admin listener, and /ready reports a worker whose VM
// stays failed. Envoy's own /ready does not look at VMs; what each policy does to the next
// stream is Envoy's (source/extensions/common/wasm/wasm.cc, PluginConfig::createContext and
// maybeReloadHandleIfNeeded): FAIL_CLOSED answers 503 and FAIL_OPEN skips the filter until
// a restart, FAIL_RELOAD starts a fresh VM for it and counts vm_reload_success.
func TestVMFailureOnTheAdminListener(t *testing.T) {
	for _, tt := range []struct {
		policy     hostsim.FailurePolicy
		first      int    // the trapping request's status (FAIL_OPEN lets it pass unfiltered)
		readyAfter int    // /ready's status once the VM failed, and after the next request
		second     int    // the next request's status
		reloads    string // envoy_wasm_spillway_vm_reload_success after the next request
		failed     string // hostsim_wasm_vm_failed after the next request
	}{
		{hostsim.FailClosed, 503, 503, 503, "0", "1"},
		{hostsim.FailOpen, 200, 503, 200, "0", "1"},
		{hostsim.FailReload, 503, 200, 200, "1", "0"},
	} {
		t.Run(tt.policy.String(), func(t *testing.T) {
			// The first stream (context 2) traps in proxy_on_request_headers.
			env := probeStream(t, "request_headers@2 trap", func(c *Config) { c.FailurePolicy = tt.policy })
			var ready atomic.Bool
			ready.Store(true)
			a := &admin{host: env.srv.Host(), ready: &ready}
			scrape := func(path string) (int, string) {
				rec := httptest.NewRecorder()
				a.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				return rec.Code, rec.Body.String()
			}
			if code, body := scrape("/ready"); code != 200 || body != "LIVE\n" {
				t.Fatalf("/ready before the trap: %d %q", code, body)
			}
			get := func() int {
				resp, err := http.Get(env.url + "/v1/models")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := get(); got != tt.first {
				t.Fatalf("trapping request: %d, want %d", got, tt.first)
			}
			code, body := scrape("/ready")
			if code != tt.readyAfter || tt.readyAfter == 503 && !strings.HasPrefix(body,
				"VM_FAILED\nworker-0: VM failed under "+FailurePolicyName(tt.policy)+": hostsim: worker-0: proxy_on_request_headers trapped") {
				t.Fatalf("/ready after the trap: %d %q, want %d naming worker-0", code, body, tt.readyAfter)
			}
			if _, body := scrape("/stats/prometheus"); !containsAll(body, []string{
				`hostsim_wasm_vm_failures_total{worker="worker-0"} 1` + "\n", `hostsim_wasm_vm_failed{worker="worker-0"} 1` + "\n"}) {
				t.Fatalf("/stats/prometheus after the trap:\n%s", body)
			}
			if got := get(); got != tt.second {
				t.Fatalf("next request: %d, want %d", got, tt.second)
			}
			if code, _ := scrape("/ready"); code != tt.readyAfter {
				t.Fatalf("/ready after the next request: %d, want %d", code, tt.readyAfter)
			}
			_, body = scrape("/stats/prometheus")
			if !containsAll(body, []string{`hostsim_wasm_vm_failures_total{worker="worker-0"} 1` + "\n",
				`hostsim_wasm_vm_failed{worker="worker-0"} ` + tt.failed + "\n",
				"envoy_wasm_spillway_vm_reload_success{} " + tt.reloads + "\n", "envoy_wasm_spillway_vm_reload_failure{} 0\n"}) {
				t.Fatalf("/stats/prometheus after the next request:\n%s", body)
			}
			if _, body := scrape("/stats"); !strings.Contains(body, "hostsim.wasm_vm_failures_total.worker-0: 1\n") ||
				!strings.Contains(body, "wasm.spillway.vm_reload_success: "+tt.reloads+"\n") {
				t.Fatalf("/stats:\n%s", body)
			}
		})
	}
}

// A failed round trip is the reset Envoy's router would see.
func TestTransportFailure(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	unreachable := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}
	timeout := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
	tests := []struct {
		name   string
		err    error
		reason hostsim.ResetReason
		detail string // transport failure reason
	}{
		{"refused", refused, hostsim.ResetRemoteConnectionFailure, "delayed connect error: Connection refused"},
		{"unreachable", unreachable, hostsim.ResetRemoteConnectionFailure, "delayed connect error: Network is unreachable"},
		{"connect timeout", timeout, hostsim.ResetConnectionTimeout, ""},
		{"closed before the answer", io.ErrUnexpectedEOF, hostsim.ResetConnectionTermination, ""},
		{"wrapped", errors.Join(errors.New("roundtrip"), refused), hostsim.ResetRemoteConnectionFailure, "delayed connect error: Connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := transportFailure(tt.err)
			if r.Reason != tt.reason || r.TransportFailure != tt.detail {
				t.Errorf("%v: reason %v %q, want %v %q", tt.err, r.Reason, r.TransportFailure, tt.reason, tt.detail)
			}
		})
	}
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ http.Handler = (*admin)(nil)
