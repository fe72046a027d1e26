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
// filter's metrics and the VMs' failure stats (vmStats), /ready with the server state and
// the workers' VMs. It models an Envoy whose bootstrap carries Spillway's stats_tags
// (plugin/stats), so labelled Spillway stats show their labels.
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
		_, _ = w.Write([]byte(prometheusText(a.host.Metrics(), vmStats(a.host))))
	case "/stats":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte(statsText(a.host.Metrics(), vmStats(a.host))))
	case "/ready":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		status, body := readiness(a.ready.Load(), a.host)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	default:
		http.Error(w, "hostsim admin: no such endpoint (try /stats/prometheus, /stats or /ready)", http.StatusNotFound)
	}
}

// readiness is /ready. Envoy's (source/server/admin/server_info_handler.cc,
// ServerInfoHandler::handlerReady) says 200 "LIVE" while the server is live and 503 with the
// state otherwise ("DRAINING" during shutdown); it does not look at Wasm VMs. hostsim adds them: while a worker's VM is failed
// and its failure policy does not replace it (FAIL_CLOSED answers that worker's streams 503
// wasm_fail_stream, FAIL_OPEN lets them pass the filter unrouted, both until a restart),
// /ready is 503 "VM_FAILED" with a line per such worker. Under FAIL_RELOAD a failed VM is
// replaced when its next stream starts (wasm.cc, PluginConfig::maybeReloadHandleIfNeeded),
// so the server stays LIVE and the replacement is counted (vm_reload_success).
func readiness(live bool, h *hostsim.Host) (int, string) {
	if !live {
		return http.StatusServiceUnavailable, "DRAINING\n"
	}
	var b strings.Builder
	for _, vm := range h.Workers() {
		if hl := vm.Health(); hl.Failed != nil && !hl.Recovers {
			fmt.Fprintf(&b, "%s: VM failed under %s: %s\n", vm.Name(), FailurePolicyName(h.FailurePolicy()),
				firstLine(hl.Failed.Error()))
		}
	}
	if b.Len() > 0 {
		return http.StatusServiceUnavailable, "VM_FAILED\n" + b.String()
	}
	return http.StatusOK, "LIVE\n"
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// pluginName is the filter's PluginConfig name, as the generated bootstrap names it
// (package envoy, ExtensionConfigName): Envoy files a plugin's own stats under
// wasm.<name>. (source/extensions/common/wasm/wasm.cc, PluginConfig::PluginConfig).
const pluginName = "spillway"

// hostStat is one stat serve's admin shows besides the filter's: Envoy's own stats for the
// plugin, and hostsim's.
type hostStat struct {
	typ       hostsim.MetricType
	stat      string // the name /stats shows; for Envoy's stats, Envoy's
	extracted string // the name without its tags, which groups the series
	prom      string // the Prometheus name
	labels    string // formatted Prometheus labels
	value     uint64
}

// vmStats are the worker VMs' failure stats:
//   - Envoy's wasm.<plugin>.vm_reload_success and vm_reload_failure (counters over every
//     worker: source/extensions/common/wasm/stats_handler.h, WASM_STATS; counted in
//     wasm.cc, PluginConfig::maybeReloadHandleIfNeeded), under their Prometheus names
//     envoy_wasm_spillway_vm_reload_success and _failure (no default tag extractor matches
//     them). Envoy's vm_reload_backoff is left out: hostsim has no reload back-off.
//   - hostsim's own, as Envoy counts no VM failure (it logs "Wasm VM failed"):
//     hostsim_wasm_vm_failures_total{worker}, the VM instances that failed on each worker,
//     under every failure policy, and hostsim_wasm_vm_failed{worker}, 1 while its VM is
//     failed (under FAIL_RELOAD until its next stream replaces it).
func vmStats(h *hostsim.Host) []hostStat {
	var reloads, reloadFailures uint64
	var out []hostStat
	for _, vm := range h.Workers() {
		hl := vm.Health()
		reloads += hl.Reloads
		reloadFailures += hl.ReloadFailures
		failed := uint64(0)
		if hl.Failed != nil {
			failed = 1
		}
		labels := promLabels([]stats.Label{{Name: "worker", Value: vm.Name()}})
		out = append(out,
			hostStat{hostsim.MetricCounter, "hostsim.wasm_vm_failures_total." + vm.Name(), "hostsim.wasm_vm_failures_total",
				"hostsim_wasm_vm_failures_total", labels, hl.Failures},
			hostStat{hostsim.MetricGauge, "hostsim.wasm_vm_failed." + vm.Name(), "hostsim.wasm_vm_failed",
				"hostsim_wasm_vm_failed", labels, failed})
	}
	for _, e := range []struct {
		name string
		n    uint64
	}{{"vm_reload_success", reloads}, {"vm_reload_failure", reloadFailures}} {
		stat := "wasm." + pluginName + "." + e.name
		prom, _ := prometheusName(stat)
		out = append(out, hostStat{hostsim.MetricCounter, stat, stat, prom, "", e.n})
	}
	return out
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
// cumulative buckets with _sum and _count. host are the stats that are not the filter's,
// in the same order.
func prometheusText(ms []hostsim.MetricValue, host []hostStat) string {
	var b strings.Builder
	for _, typ := range []hostsim.MetricType{hostsim.MetricCounter, hostsim.MetricGauge, hostsim.MetricHistogram} {
		type group struct {
			name   string // the Prometheus name
			series []promSeries
		}
		groups := map[string]*group{} // by tag-extracted name
		for _, m := range ms {
			if m.Type != typ {
				continue
			}
			stat := wasmStatPrefix + m.Name
			extracted, tags := tagExtractor.Extract(stat)
			name, ok := prometheusName(extracted)
			if !ok {
				continue
			}
			if groups[extracted] == nil {
				groups[extracted] = &group{name: name}
			}
			groups[extracted].series = append(groups[extracted].series, promSeries{stat: stat, labels: promLabels(tags), m: m})
		}
		for _, hs := range host {
			if hs.typ != typ {
				continue
			}
			key := hs.extracted
			if groups[key] == nil {
				groups[key] = &group{name: hs.prom}
			}
			groups[key].series = append(groups[key].series, promSeries{stat: hs.stat, labels: hs.labels,
				m: hostsim.MetricValue{Type: hs.typ, Value: hs.value}})
		}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			g := groups[k]
			sort.Slice(g.series, func(i, j int) bool { return g.series[i].stat < g.series[j].stat })
			fmt.Fprintf(&b, "# TYPE %s %s\n", g.name, typ)
			for _, s := range g.series {
				writeSeries(&b, g.name, s)
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

// statsText is /stats: "name: value" lines (a histogram shows its sample count), the
// filter's stats, then the host's.
func statsText(ms []hostsim.MetricValue, host []hostStat) string {
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
	for _, hs := range host {
		fmt.Fprintf(&b, "%s: %d\n", hs.stat, hs.value)
	}
	return b.String()
}
