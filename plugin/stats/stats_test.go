package stats

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// promName is what Envoy's Prometheus output names a stat in a custom namespace: the
// namespace stripped, the rest sanitised (PrometheusStatsFormatter::metricName).
func promName(extracted string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(strings.TrimPrefix(extracted, Namespace+"."), "_")
}

// The tag regexes take out of every family's stat names exactly the family's labels, with
// the values as Value writes them, and leave the family's name: what Prometheus shows.
func TestTagsExtractExactlyEachFamilysLabels(t *testing.T) {
	x, err := NewExtractor(Tags())
	if err != nil {
		t.Fatal(err)
	}
	// Values that could break a naive encoding: dots, globs, delimiters, spaces, quotes.
	values := []string{"openai", "key-a.eu", "gpt-4.1", "claude-*", "a;.;b", "x=.=y", `q"u o\te`, ".lead", "trail.", ""}
	for _, f := range Families() {
		for shift := range values {
			vals := make([]string, len(f.Labels))
			for i := range vals {
				vals[i] = values[(shift+i)%len(values)]
			}
			stat := Namespace + "." + f.Stat(vals...)
			name, tags := x.Extract(stat)
			if name != Namespace+"."+f.Name {
				t.Errorf("%s: %q extracts to name %q, want %q", f.Name, stat, name, Namespace+"."+f.Name)
			}
			if got := promName(name); got != f.Name {
				t.Errorf("%s: Prometheus name %q", f.Name, got)
			}
			if len(tags) != len(f.Labels) {
				t.Fatalf("%s: %q extracts %v, want the labels %v", f.Name, stat, tags, f.Labels)
			}
			for i, tag := range f.Labels {
				if v, ok := labelValue(tags, tag); !ok || v != Value(vals[i]) {
					t.Errorf("%s: %q: tag %s = %q (found %v), want %q", f.Name, stat, tag, v, ok, Value(vals[i]))
				}
			}
			if !strings.HasPrefix(stat, InclusionPrefix) {
				t.Errorf("%s: %q does not start with the inclusion prefix %q", f.Name, stat, InclusionPrefix)
			}
		}
	}
}

func labelValue(tags []Label, name string) (string, bool) {
	for _, l := range tags {
		if l.Name == name {
			return l.Value, true
		}
	}
	return "", false
}

// The families: unique names that are valid Prometheus names, every label a known tag,
// Lookup finds each.
func TestFamilies(t *testing.T) {
	seen := map[string]bool{}
	known := map[string]bool{}
	for _, n := range TagNames() {
		known[n] = true
	}
	valid := regexp.MustCompile(`^spillway_[a-z0-9_]+$`)
	for _, f := range Families() {
		if seen[f.Name] {
			t.Errorf("family %s twice", f.Name)
		}
		seen[f.Name] = true
		if !valid.MatchString(f.Name) {
			t.Errorf("family name %q", f.Name)
		}
		if f.Kind == Counter && !strings.HasSuffix(f.Name, "_total") || f.Kind == Gauge && strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s is a %s: counters end in _total, gauges do not", f.Name, f.Kind)
		}
		for _, l := range f.Labels {
			if !known[l] {
				t.Errorf("%s: label %q is not a tag", f.Name, l)
			}
		}
		if f.Help == "" {
			t.Errorf("%s has no help", f.Name)
		}
		if g, ok := Lookup(f.Name); !ok || g != f {
			t.Errorf("Lookup(%q) = %v %v", f.Name, g, ok)
		}
	}
	if _, ok := Lookup("spillway_nope"); ok {
		t.Error("Lookup found an unknown family")
	}
}

// Tags are Istio's extraStatTags regexes for the same names, and no tag name ends another
// (an unanchored "<a>=\.=" would match inside "<b>=.=" if b ended with a).
func TestTagsAreIstiosAndIndependent(t *testing.T) {
	tags := Tags()
	if len(tags) != len(TagNames()) {
		t.Fatalf("%d tags, %d names", len(tags), len(TagNames()))
	}
	for i, tag := range tags {
		// istio tools/packaging/common/envoy_bootstrap.json: "regex": "({{ $tag }}=\\.=(.*?);\\.;)"
		if want := "(" + TagNames()[i] + `=\.=(.*?);\.;)`; tag.Name != TagNames()[i] || tag.Regex != want {
			t.Errorf("tag %d = %+v, want %s %s", i, tag, TagNames()[i], want)
		}
		if !strings.HasPrefix(tag.Name, Prefix) {
			t.Errorf("tag %s lacks the prefix %s", tag.Name, Prefix)
		}
		for j, other := range tags {
			if i != j && strings.HasSuffix(other.Name, tag.Name) {
				t.Errorf("tag %s ends tag %s", tag.Name, other.Name)
			}
		}
	}
}

// The regexes an Istio proxy applies to every stat (istio
// tools/packaging/common/envoy_bootstrap.json, stats_config.stats_tags, those RE2 can
// compile; the others are anchored on cluster., tcp., listener, http. or mongo.) and the
// unanchored ones of Envoy's defaults (source/common/config/well_known_names.cc,
// RESPONSE_CODE and RESPONSE_CODE_CLASS) never match a Spillway stat, whatever the values.
func TestForeignTagRegexesLeaveSpillwayStatsAlone(t *testing.T) {
	foreign := []string{
		`^cluster\.((.+?(\..+?\.svc\.cluster\.local)?)\.)`,
		`^tcp\.((.*?)\.)\w+?$`,
		`_rq(_(\d{3}))$`,
		`_rq(_(\dxx))$`,
		`^mongo\.(.+?)\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$`,
		`(cache\.(.+?)\.)`,
		`(component\.(.+?)\.)`,
		`(tag\.(.+?);\.)`,
		`(wasm_filter\.(.+?)\.)`,
		`rbac(\.(allowed|denied))`,
		`(\.istio_dry_run_(allow|deny)_)`,
		`(\.shadow_(allowed|denied))`,
		`(response_code=\.=(.+?);\.;)|_rq(_(\d{3}))$`,
	}
	// Values a policy may hold that contain the words those regexes look for.
	values := []string{"cache.eu", "component.x", "my-tag.v1", "wasm_filter.a", "rbac.allowed", "x.shadow_denied",
		"a.istio_dry_run_allow_b", "svc_rq_200", "response_code", "cluster.a"}
	for _, re := range foreign {
		r := regexp.MustCompile(re)
		for _, f := range Families() {
			for shift := range values {
				vals := make([]string, len(f.Labels))
				for i := range vals {
					vals[i] = values[(shift+i)%len(values)]
				}
				if stat := Namespace + "." + f.Stat(vals...); r.MatchString(stat) {
					t.Errorf("%s matches %q", re, stat)
				}
			}
		}
	}
}

func TestValue(t *testing.T) {
	tests := []struct {
		in   string // a label value as the policy or the code has it
		want string // as it is written into a stat name
	}{
		{"openai", "openai"},                         // a plain id passes
		{"key_a-1", "key_a-1"},                       // '_' and '-' pass
		{"claude-*", "claude-*"},                     // a glob stays a glob
		{"org/model:tag@v1+x", "org/model:tag@v1+x"}, // path-like model names pass
		{"gpt-4.1", "gpt-4_1"},                       // dots become underscores
		{"a;.;b", "a___b"},                           // the end delimiter cannot appear
		{"x=.=y", "x___y"},                           // nor the start one
		{`say "hi"`, "say__hi_"},                     // quotes and spaces
		{"é", "__"},                                  // non-ASCII bytes
		{"", "-"},                                    // empty
	}
	for _, tt := range tests {
		if got := Value(tt.in); got != tt.want {
			t.Errorf("Value(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStat(t *testing.T) {
	tests := []struct {
		f      *Family  // the family
		values []string // the label values given
		want   string   // the stat name
	}{
		{&Requests, nil, "spillway_requests_total"},
		{&ConnectionAttempts, []string{"openai", "key-a"},
			"spillway_provider=.=openai;.;spillway_connection=.=key-a;.;spillway_connection_attempts_total"},
		{&RouteRequests, []string{"gpt-4.1"}, // a missing value is "-"
			"spillway_route_model=.=gpt-4_1;.;spillway_outcome=.=-;.;spillway_route_requests_total"},
		{&BreakerState, []string{"openai", "extra"}, // an extra value is ignored
			"spillway_provider=.=openai;.;spillway_breaker_state"},
	}
	for _, tt := range tests {
		if got := tt.f.Stat(tt.values...); got != tt.want {
			t.Errorf("%s.Stat(%q) = %q, want %q", tt.f.Name, tt.values, got, tt.want)
		}
	}
}

// The extractor follows Envoy's rules for regex tags.
func TestExtractorFollowsEnvoy(t *testing.T) {
	tests := []struct {
		name     string // what the case shows
		tags     []Tag  // the stats_tags
		stat     string // the stat name
		wantName string // the tag-extracted name
		want     []Label
	}{
		{"the first group is removed, the second is the value",
			[]Tag{{"cluster_name", `^cluster\.((.+?)\.)`}}, "cluster.backend.upstream_rq_total",
			"cluster.upstream_rq_total", []Label{{"cluster_name", "backend"}}},
		{"without a second group the first is the value",
			[]Tag{{"code", `_rq_(\d{3})$`}}, "http.x.downstream_rq_200",
			"http.x.downstream_rq_", []Label{{"code", "200"}}},
		{"every regex reads the original name; removals apply together",
			[]Tag{{"a", `(a=\.=(.*?);\.;)`}, {"b", `(b=\.=(.*?);\.;)`}}, "a=.=1;.;b=.=2;.;m",
			"m", []Label{{"a", "1"}, {"b", "2"}}},
		{"a tag name already produced is skipped",
			[]Tag{{"a", `(a=\.=(.*?);\.;)`}, {"a", `(x=\.=(.*?);\.;)`}}, "x=.=9;.;a=.=1;.;m",
			"x=.=9;.;m", []Label{{"a", "1"}}},
		{"no match leaves the name",
			[]Tag{{"a", `(a=\.=(.*?);\.;)`}}, "spillway_requests_total",
			"spillway_requests_total", nil},
		{"overlapping removals are removed once",
			[]Tag{{"a", `(ab)`}, {"b", `(bc)`}}, "xabcx",
			"xx", []Label{{"a", "ab"}, {"b", "bc"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := NewExtractor(tt.tags)
			if err != nil {
				t.Fatal(err)
			}
			name, got := x.Extract(tt.stat)
			if name != tt.wantName || len(got) != len(tt.want) {
				t.Fatalf("Extract(%q) = %q %v, want %q %v", tt.stat, name, got, tt.wantName, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("tag %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestNewExtractorRejects(t *testing.T) {
	for _, tags := range [][]Tag{
		{{"", `(x)`}},  // no name
		{{"a", `(x`}},  // not a regex
		{{"a", `x.*`}}, // no capture group
	} {
		if _, err := NewExtractor(tags); err == nil || !strings.HasPrefix(err.Error(), "stats: ") {
			t.Errorf("NewExtractor(%v) = %v, want a stats: error", tags, err)
		}
	}
}

// The README's metrics table lists every family with its type and labels, and its
// stats_tags block is Tags() (the repository's documentation must not drift from the code).
func TestReadmeDocumentsTheFamiliesAndTags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(readme)
	for _, f := range Families() {
		row := "| `" + f.Name + "` | " + f.Kind.String() + " | "
		if len(f.Labels) > 0 {
			row += "`" + strings.Join(f.Labels, "`, `") + "`"
		}
		if !strings.Contains(doc, row+" | ") {
			t.Errorf("README lacks the row of %s: %q", f.Name, row)
		}
	}
	for _, tag := range Tags() {
		// As spillway render envoy writes it (envoy/cmd/spillway checks the whole block
		// against the rendered bootstrap).
		entry := "    - tag_name: " + tag.Name + "\n      regex: " + tag.Regex + "\n"
		if !strings.Contains(doc, entry) {
			t.Errorf("README lacks the stats_tags entry %q", entry)
		}
	}
	if !strings.Contains(doc, "extraStatTags: ["+strings.Join(TagNames(), ", ")+"]") ||
		!strings.Contains(doc, "inclusionPrefixes: ["+InclusionPrefix+"]") {
		t.Error("README's Istio example does not list TagNames and InclusionPrefix")
	}
}
