package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/config/metrics/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/plugin/stats"
)

// TestBootstrapTagsSpillwaysStats reads the stats_config of each rendered bootstrap back
// and applies it to a stat of every family the way Envoy does (stats.Extractor): every
// label the filter wrote into the name comes out as its tag, and the name that is left is
// the family's. Envoy's default tags stay on, and no stats_matcher drops Spillway's stats.
func TestBootstrapTagsSpillwaysStats(t *testing.T) {
	for _, ex := range generated {
		t.Run(ex.file, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"render", "envoy"}, ex.args...)...)
			if code != exitOK {
				t.Fatalf("render exited %d: %s", code, stderr)
			}
			var b bootstrapv3.Bootstrap
			if err := envoy.UnmarshalYAML([]byte(stdout), &b); err != nil {
				t.Fatal(err)
			}
			sc := b.GetStatsConfig()
			if sc.GetUseAllDefaultTags() == nil || !sc.GetUseAllDefaultTags().GetValue() {
				t.Error("use_all_default_tags is not true: Envoy's own stats would lose their tags")
			}
			for _, f := range []*stats.Family{&stats.Requests, &stats.ConnectionFailures} {
				if stat := stats.Namespace + "." + f.Stat("openai", "openai-a", "rate_limit"); !keepsStat(sc.GetStatsMatcher(), stat) {
					t.Errorf("stats_matcher %v drops %s: an inclusion list must include the prefix %q", sc.GetStatsMatcher(), stat, stats.InclusionPrefix)
				}
			}
			var tags []stats.Tag
			for _, ts := range sc.GetStatsTags() {
				tags = append(tags, stats.Tag{Name: ts.GetTagName(), Regex: ts.GetRegex()})
			}
			x, err := stats.NewExtractor(tags)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range stats.Families() {
				values := make([]string, len(f.Labels))
				for i, l := range f.Labels {
					values[i] = "v-" + l // a distinct value per label
				}
				stat := stats.Namespace + "." + f.Stat(values...)
				name, got := x.Extract(stat)
				if want := stats.Namespace + "." + f.Name; name != want {
					t.Errorf("%s: tag-extracted name %q, want %q", stat, name, want)
				}
				if len(got) != len(f.Labels) {
					t.Errorf("%s: tags %v, want one per label %v", stat, got, f.Labels)
					continue
				}
				for i, l := range got {
					if l.Name != f.Labels[i] || l.Value != values[i] {
						t.Errorf("%s: tag %d is %s=%q, want %s=%q", stat, i, l.Name, l.Value, f.Labels[i], values[i])
					}
				}
			}
		})
	}
}

// keepsStat says whether Envoy instantiates a stat of this name under the matcher
// (config.metrics.v3.StatsMatcher: reject_all, or an exclusion or inclusion list of string
// matchers; safe_regex matches the whole name).
func keepsStat(m *metricsv3.StatsMatcher, name string) bool {
	matches := func(l *matcherv3.ListStringMatcher) bool {
		for _, p := range l.GetPatterns() {
			var ok bool
			switch {
			case p.GetExact() != "":
				ok = name == p.GetExact()
			case p.GetPrefix() != "":
				ok = strings.HasPrefix(name, p.GetPrefix())
			case p.GetSuffix() != "":
				ok = strings.HasSuffix(name, p.GetSuffix())
			case p.GetContains() != "":
				ok = strings.Contains(name, p.GetContains())
			case p.GetSafeRegex() != nil:
				ok = regexp.MustCompile("^(?:" + p.GetSafeRegex().GetRegex() + ")$").MatchString(name)
			}
			if ok {
				return true
			}
		}
		return false
	}
	switch {
	case m.GetRejectAll():
		return false
	case m.GetExclusionList() != nil:
		return !matches(m.GetExclusionList())
	case m.GetInclusionList() != nil:
		return matches(m.GetInclusionList())
	}
	return true
}

// TestReadmesShowTheRenderedStatsConfig: the stats_config block the READMEs show is the
// one envoy/envoy.yaml holds, byte for byte (at the README's indentation).
func TestReadmesShowTheRenderedStatsConfig(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("..", "..", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	block := topLevelBlock(string(golden), "stats_config:")
	if !strings.Contains(block, "tag_name: "+stats.TagProvider) {
		t.Fatalf("envoy/envoy.yaml has no stats_tags for Spillway:\n%s", block)
	}
	for _, readme := range []string{filepath.Join("..", "..", "..", "README.md"), filepath.Join("..", "..", "README.md")} {
		doc, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, indent := range []string{"", "  "} {
			if strings.Contains(string(doc), "```yaml\n"+indentLines(block, indent)+indent+"```\n") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s does not show the stats_config envoy/envoy.yaml holds:\n%s", readme, block)
		}
	}
}

// topLevelBlock is the YAML block that starts with the top-level line key and runs to the
// next top-level line.
func topLevelBlock(doc, key string) string {
	start := strings.Index(doc, "\n"+key+"\n")
	if start < 0 {
		return ""
	}
	rest := doc[start+1:]
	end := len(rest)
	for i := strings.IndexByte(rest, '\n'); i >= 0 && i+1 < len(rest); {
		if c := rest[i+1]; c != ' ' {
			end = i + 1
			break
		}
		next := strings.IndexByte(rest[i+1:], '\n')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return rest[:end]
}

func indentLines(block, indent string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(block, "\n") {
		if line != "" {
			b.WriteString(indent + line)
		}
	}
	return b.String()
}
