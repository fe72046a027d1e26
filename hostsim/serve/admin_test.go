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
)

// Prometheus text as Envoy's admin prints Wasm metrics: envoy_wasmcustom_<name>, "{}" for
// no tags, histograms as cumulative buckets with _sum and _count.
func TestPrometheusText(t *testing.T) {
	got := prometheusText([]hostsim.MetricValue{
		{Name: "spillway_requests_total", Type: hostsim.MetricCounter, Value: 7},
		{Name: "spillway.queue-depth", Type: hostsim.MetricGauge, Value: 3},
		{Name: "spillway_ttfb_ms", Type: hostsim.MetricHistogram, Samples: []uint64{3, 40, 7000}},
	})
	for _, want := range []string{
		"# TYPE envoy_wasmcustom_spillway_requests_total counter\nenvoy_wasmcustom_spillway_requests_total{} 7\n",
		"# TYPE envoy_wasmcustom_spillway_queue_depth gauge\nenvoy_wasmcustom_spillway_queue_depth{} 3\n",
		"# TYPE envoy_wasmcustom_spillway_ttfb_ms histogram\n",
		`envoy_wasmcustom_spillway_ttfb_ms_bucket{le="0.5"} 0` + "\n",
		`envoy_wasmcustom_spillway_ttfb_ms_bucket{le="5"} 1` + "\n",
		`envoy_wasmcustom_spillway_ttfb_ms_bucket{le="50"} 2` + "\n",
		`envoy_wasmcustom_spillway_ttfb_ms_bucket{le="10000"} 3` + "\n",
		`envoy_wasmcustom_spillway_ttfb_ms_bucket{le="+Inf"} 3` + "\n",
		"envoy_wasmcustom_spillway_ttfb_ms_sum{} 7043\nenvoy_wasmcustom_spillway_ttfb_ms_count{} 3\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := prometheusName("wasmcustom.9lives"); n != "envoy_wasmcustom_9lives" {
		t.Errorf("name %q", n)
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
		"# TYPE envoy_wasmcustom_spillway_requests_total counter\nenvoy_wasmcustom_spillway_requests_total{} 4\n",
		"envoy_wasmcustom_spillway_routed_total{} 4\n",
		"envoy_wasmcustom_spillway_attempts_total{} 5\n",
		"envoy_wasmcustom_spillway_failovers_total{} 1\n",
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
