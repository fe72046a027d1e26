package serve

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// admin is the Envoy-like admin listener's handler: /stats/prometheus and /stats with the
// filter's metrics, /ready with the server state. It models an Envoy whose bootstrap
// carries Spillway's stats_tags (plugin/stats), so labelled Spillway stats show their
// labels.
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

// wasmStatPrefix is where Envoy files the metrics a Wasm plugin defines: its custom stat
// namespace "wasmcustom" (source/extensions/common/wasm/context.cc, Context::defineMetric;
// plugin.cc, ensureCustomStatNamespaceRegistered).
const wasmStatPrefix = stats.Namespace + "."

// tagExtractor applies the stats_tags the Envoy configuration Spillway ships carries
// (stats.Tags), as Envoy's TagProducerImpl applies them to every stat name.
var tagExtractor = func() *stats.Extractor {
	x, err := stats.NewExtractor(stats.Tags())
	if err != nil {
		panic(err) // stats.Tags is fixed and tested
	}
	return x
}()

// promUnsafe is what Envoy's PrometheusStatsFormatter::sanitizeName replaces with '_'.
var promUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// prometheusName is PrometheusStatsFormatter::metricName for a tag-extracted stat name: a
// stat in a registered custom namespace (wasmcustom) is shown without the namespace and
// without Envoy's "envoy_" prefix, sanitised, and left out ("", false) when it would start
// with a digit; any other stat is "envoy_" + the name, sanitised.
func prometheusName(extracted string) (string, bool) {
	if rest, ok := strings.CutPrefix(extracted, wasmStatPrefix); ok {
		n := promUnsafe.ReplaceAllString(rest, "_")
		if n == "" || (n[0] >= '0' && n[0] <= '9') {
			return "", false
		}
		return n, true
	}
	return promUnsafe.ReplaceAllString("envoy_"+extracted, "_"), true
}

// promLabels is PrometheusStatsFormatter::formattedTags: name="value" pairs, the names
// sanitised, the values escaped as Prometheus' text format wants (backslash, newline and
// double quote; sanitizeValue).
func promLabels(tags []stats.Label) string {
	parts := make([]string, len(tags))
	for i, t := range tags {
		v := strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(t.Value)
		parts[i] = promUnsafe.ReplaceAllString(t.Name, "_") + `="` + v + `"`
	}
	return strings.Join(parts, ",")
}

// histogramBuckets are Envoy's default histogram bucket bounds (Stats::HistogramSettings).
var histogramBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
	300000, 600000, 1800000, 3600000}

// promSeries is one stat as the Prometheus output groups it.
type promSeries struct {
	stat   string // the full stat name (wasmcustom.<name>)
	labels string // its formatted tags
	m      hostsim.MetricValue
}

// prometheusText is /stats/prometheus as Envoy's PrometheusTextRequest writes it: counters,
// then gauges, then histograms; within each, the stats grouped by their tag-extracted name
// (groups in name order, series in stat-name order), a "# TYPE" line per group, then
// "name{labels} value" per series (labels extracted by the stats_tags), histograms as
// cumulative buckets with _sum and _count.
func prometheusText(ms []hostsim.MetricValue) string {
	var b strings.Builder
	for _, typ := range []hostsim.MetricType{hostsim.MetricCounter, hostsim.MetricGauge, hostsim.MetricHistogram} {
		groups := map[string][]promSeries{}
		for _, m := range ms {
			if m.Type != typ {
				continue
			}
			stat := wasmStatPrefix + m.Name
			extracted, tags := tagExtractor.Extract(stat)
			groups[extracted] = append(groups[extracted], promSeries{stat: stat, labels: promLabels(tags), m: m})
		}
		names := make([]string, 0, len(groups))
		for n := range groups {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, extracted := range names {
			name, ok := prometheusName(extracted)
			if !ok {
				continue
			}
			group := groups[extracted]
			sort.Slice(group, func(i, j int) bool { return group[i].stat < group[j].stat })
			fmt.Fprintf(&b, "# TYPE %s %s\n", name, typ)
			for _, s := range group {
				writeSeries(&b, name, s)
			}
		}
	}
	return b.String()
}

func writeSeries(b *strings.Builder, name string, s promSeries) {
	switch s.m.Type {
	case hostsim.MetricCounter, hostsim.MetricGauge:
		// Envoy's counters and gauges are uint64 (a gauge taken below 0 wraps).
		fmt.Fprintf(b, "%s{%s} %d\n", name, s.labels, s.m.Value)
	case hostsim.MetricHistogram:
		hist := ""
		if s.labels != "" {
			hist = s.labels + ","
		}
		var sum float64
		for _, v := range s.m.Samples {
			sum += float64(v)
		}
		for _, le := range histogramBuckets {
			n := 0
			for _, v := range s.m.Samples {
				if float64(v) <= le {
					n++
				}
			}
			fmt.Fprintf(b, "%s_bucket{%sle=\"%s\"} %d\n", name, hist, strconv.FormatFloat(le, 'f', -1, 64), n)
		}
		fmt.Fprintf(b, "%s_bucket{%sle=\"+Inf\"} %d\n%s_sum{%s} %s\n%s_count{%s} %d\n", name, hist, len(s.m.Samples),
			name, s.labels, strconv.FormatFloat(sum, 'f', -1, 64), name, s.labels, len(s.m.Samples))
	}
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
