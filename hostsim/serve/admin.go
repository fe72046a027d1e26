package serve

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spillwayproxy/spillway/hostsim"
)

// admin is the Envoy-like admin listener's handler: /stats/prometheus and /stats with the
// filter's metrics, /ready with the server state.
type admin struct {
	host  *hostsim.Host
	ready *atomic.Bool
}

func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/stats/prometheus":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte(prometheusText(a.host.Metrics())))
	case "/stats":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte(statsText(a.host.Metrics())))
	case "/ready":
		// AdminImpl's /ready: 200 "LIVE" while the server is live, 503 with the state
		// otherwise.
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		if a.ready.Load() {
			_, _ = w.Write([]byte("LIVE\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("DRAINING\n"))
	default:
		http.Error(w, "hostsim admin: no such endpoint (try /stats/prometheus, /stats or /ready)", http.StatusNotFound)
	}
}

// wasmStatPrefix is where Envoy files the metrics a Wasm plugin defines (the custom stat
// namespace "wasmcustom", extensions/common/wasm/context.cc defineMetric); tag extraction
// is not modelled, so the whole name stays in the stat name.
const wasmStatPrefix = "wasmcustom."

// promUnsafe is what Envoy's PrometheusStatsFormatter::sanitizeName replaces with '_'.
var promUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// prometheusName is PrometheusStatsFormatter::metricName: "envoy_" + the stat name,
// sanitized, with a '_' before a leading digit.
func prometheusName(statName string) string {
	n := promUnsafe.ReplaceAllString("envoy_"+statName, "_")
	if n[0] >= '0' && n[0] <= '9' {
		n = "_" + n
	}
	return n
}

// histogramBuckets are Envoy's default histogram bucket bounds (Stats::HistogramSettings).
var histogramBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
	300000, 600000, 1800000, 3600000}

// prometheusText is /stats/prometheus: each metric as Envoy prints it, "# TYPE name type"
// then "name{} value" (no tags), histograms as cumulative buckets with _sum and _count.
func prometheusText(ms []hostsim.MetricValue) string {
	var b strings.Builder
	for _, m := range ms {
		name := prometheusName(wasmStatPrefix + m.Name)
		switch m.Type {
		case hostsim.MetricCounter:
			fmt.Fprintf(&b, "# TYPE %s counter\n%s{} %d\n", name, name, m.Value)
		case hostsim.MetricGauge:
			fmt.Fprintf(&b, "# TYPE %s gauge\n%s{} %d\n", name, name, int64(m.Value))
		case hostsim.MetricHistogram:
			fmt.Fprintf(&b, "# TYPE %s histogram\n", name)
			var sum float64
			for _, v := range m.Samples {
				sum += float64(v)
			}
			for _, le := range histogramBuckets {
				n := 0
				for _, v := range m.Samples {
					if float64(v) <= le {
						n++
					}
				}
				fmt.Fprintf(&b, "%s_bucket{le=\"%s\"} %d\n", name, strconv.FormatFloat(le, 'f', -1, 64), n)
			}
			fmt.Fprintf(&b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum{} %s\n%s_count{} %d\n", name, len(m.Samples),
				name, strconv.FormatFloat(sum, 'f', -1, 64), name, len(m.Samples))
		}
	}
	return b.String()
}

// statsText is /stats: "name: value" lines (a histogram shows its sample count).
func statsText(ms []hostsim.MetricValue) string {
	var b strings.Builder
	for _, m := range ms {
		switch m.Type {
		case hostsim.MetricHistogram:
			fmt.Fprintf(&b, "%s%s: count=%d\n", wasmStatPrefix, m.Name, len(m.Samples))
		case hostsim.MetricGauge:
			fmt.Fprintf(&b, "%s%s: %d\n", wasmStatPrefix, m.Name, int64(m.Value))
		default:
			fmt.Fprintf(&b, "%s%s: %d\n", wasmStatPrefix, m.Name, m.Value)
		}
	}
	return b.String()
}
