// Package stats names Spillway's Envoy stats and the tag extraction that turns the labels
// encoded in those names into Prometheus labels: the one vocabulary the filter, the Envoy
// bootstrap, the Istio manifests and hostsim share.
//
// # How a labelled stat reaches Prometheus
//
// A Wasm module has no labels to give Envoy: proxy_define_metric takes a name. Envoy files
// the name under its custom stat namespace, as "wasmcustom.<name>"
// (source/extensions/common/wasm/context.cc, Context::defineMetric builds the stat from the
// elements {custom_stat_namespace_, name}; plugin.cc, ensureCustomStatNamespaceRegistered
// registers "wasmcustom"). Envoy's stats_config.stats_tags then take labels out of the name:
// each regex searches the whole stat name (source/common/stats/tag_extractor_impl.cc,
// TagExtractorStdRegexImpl::extractTag, std::regex_search), its first capture group is
// removed from the name and its second is the tag's value; every extractor reads the
// original name and the removals are applied together (tag_producer_impl.cc,
// TagProducerImpl::produceTags). The Prometheus output strips the registered namespace and
// adds no "envoy_" prefix to such a stat (source/server/admin/prometheus_stats.cc,
// PrometheusStatsFormatter::metricName), sanitises the rest to [a-zA-Z0-9_] and prints the
// tags as labels (formattedTags).
//
// Spillway encodes a label as "<tag>=.=<value>;.;" in front of the metric's name, the
// encoding Istio's bootstrap uses for the tags an operator lists in extraStatTags (istio
// tools/packaging/common/envoy_bootstrap.json: regex "(<tag>=\.=(.*?);\.;)"). So
//
//	wasmcustom.spillway_provider=.=openai;.;spillway_connection=.=key-a;.;spillway_connection_attempts_total
//
// becomes spillway_connection_attempts_total{spillway_provider="openai",spillway_connection="key-a"},
// under standalone Envoy with the stats_tags of Tags() and under Istio with TagNames() in
// extraStatTags: both produce the same regexes. Every tag name starts with "spillway_" and
// none is the end of another, so no regex matches inside another tag (an unanchored search
// for "model=" would match inside "route_model="), and every Spillway stat starts with
// InclusionPrefix.
//
// Label values are ids from the policy (provider and connection ids, a route's model as
// configured) and fixed words from the code (outcomes, failure reasons), never client
// input, so the number of stats is bounded by the policy. Value says how a value is
// written into a name (dots become underscores).
package stats

import "strings"

// Namespace is Envoy's custom stat namespace for the metrics a Wasm module defines.
const Namespace = "wasmcustom"

// Prefix starts the name of every stat the filter defines, labelled or not (every tag name
// starts with it too).
const Prefix = "spillway_"

// InclusionPrefix starts every Spillway stat as Envoy names it: the prefix for a
// stats_matcher inclusion_list (Istio: proxyStatsMatcher.inclusionPrefixes).
const InclusionPrefix = Namespace + "." + Prefix

// The tags Spillway's stat names carry.
const (
	TagProvider   = "spillway_provider"    // a provider id
	TagConnection = "spillway_connection"  // a connection id (never its credential)
	TagRouteModel = "spillway_route_model" // a route's model as configured (a glob stays a glob)
	TagOutcome    = "spillway_outcome"     // how a request ended, see the Outcome constants
	TagReason     = "spillway_reason"      // a failure classification or a watchdog's reason
)

// tagNames are the tags in the order Tags lists them.
var tagNames = [...]string{TagProvider, TagConnection, TagRouteModel, TagOutcome, TagReason}

// Tag is one Envoy stats_config.stats_tags entry (envoy.config.metrics.v3.TagSpecifier).
type Tag struct {
	Name  string // tag_name
	Regex string // regex: an ECMAScript regex (Envoy's std::regex) that RE2 reads the same
}

// Tags returns the stats_tags that turn Spillway's labels into Prometheus labels, in a fixed
// order. Each regex is the one Istio generates for the same name in extraStatTags.
func Tags() []Tag {
	out := make([]Tag, len(tagNames))
	for i, n := range tagNames {
		out[i] = Tag{Name: n, Regex: TagRegex(n)}
	}
	return out
}

// TagNames returns the tag names, for Istio's extraStatTags (ProxyConfig.extraStatTags, or
// the sidecar.istio.io/extraStatTags annotation).
func TagNames() []string { return append([]string(nil), tagNames[:]...) }

// TagRegex is the extraction regex of a tag: the whole "<name>=.=<value>;.;" is removed
// from the stat name and <value> is the tag's value.
func TagRegex(name string) string { return "(" + name + `=\.=(.*?);\.;)` }

// Outcomes of an LLM request (TagOutcome). A request Spillway answered itself has the
// error.code of its reply as its outcome instead (RATE_LIMIT_QUEUE_FULL,
// all_targets_cooling_down, model_not_found, ...).
const (
	OutcomeSuccess         = "success"          // a provider's 2xx reached the client
	OutcomeUpstreamFailure = "upstream_failure" // the upstream's error response or error event reached the client
	OutcomeClientGone      = "client_gone"      // the stream ended before the client had an answer
	OutcomeFailedOpen      = "failed_open"      // a callback panicked and the request was passed through untouched
)

// NoRoute is the route model of a request no route served (an invalid body, an unknown
// model).
const NoRoute = "-"

// Kind is a metric's type.
type Kind uint8

// Metric kinds.
const (
	Counter Kind = iota
	Gauge
)

// String names the kind as Prometheus' TYPE line does.
func (k Kind) String() string {
	if k == Gauge {
		return "gauge"
	}
	return "counter"
}

// Family is one metric as Prometheus shows it: a name and the labels its series carry.
type Family struct {
	Name   string   // the Prometheus name: the stat name with its labels removed
	Kind   Kind     // counter or gauge
	Labels []string // the tags of its series, in the order Stat takes their values
	Help   string   // what it counts
}

// Stat is the stat name the filter defines for the series of f with these label values (in
// the order of f.Labels; a missing one is "-"). Each value goes through Value, so two
// values that differ only where Value replaces bytes share a series.
func (f *Family) Stat(values ...string) string {
	if len(f.Labels) == 0 {
		return f.Name
	}
	var b strings.Builder
	for i, tag := range f.Labels {
		v := "-"
		if i < len(values) {
			v = values[i]
		}
		b.WriteString(tag)
		b.WriteString("=.=")
		b.WriteString(Value(v))
		b.WriteString(";.;")
	}
	b.WriteString(f.Name)
	return b.String()
}

// Value makes a label value safe inside a stat name: every byte other than a letter, a
// digit or one of -_:/@+*?[]~ becomes '_'. No value then holds the "=.=" or ";.;"
// delimiters, and no value holds a dot: Envoy splits stat names at dots, and the generic
// regexes an Istio proxy applies to every stat match on dots ("(tag\.(.+?);\.)",
// "(cache\.(.+?)\.)", "rbac(\.(allowed|denied))", ...), so a dot in a value could let one of
// them cut into a Spillway name. A model "gpt-4.1" is labelled "gpt-4_1", as Prometheus
// names turn dots into underscores. An empty value is "-".
func Value(s string) string {
	if s == "" {
		return "-"
	}
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if !safeByte(b[j]) {
					b[j] = '_'
				}
			}
			return string(b)
		}
	}
	return s
}

func safeByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-_:/@+*?[]~", c) >= 0
}
