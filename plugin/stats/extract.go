package stats

import (
	"fmt"
	"regexp"
	"sort"
)

// Label is one tag Envoy extracted from a stat name.
type Label struct {
	Name, Value string
}

// Extractor applies stats_tags to stat names the way Envoy does, for hosts that model
// Envoy's stats (hostsim) and for tests of the encoding.
type Extractor struct {
	tags []compiledTag
}

type compiledTag struct {
	name string
	re   *regexp.Regexp
}

// NewExtractor compiles tags. A regex must have a capture group.
func NewExtractor(tags []Tag) (*Extractor, error) {
	x := &Extractor{}
	for _, t := range tags {
		if t.Name == "" {
			return nil, fmt.Errorf("stats: a tag has no name")
		}
		re, err := regexp.Compile(t.Regex)
		if err != nil {
			return nil, fmt.Errorf("stats: tag %q: %w", t.Name, err)
		}
		if re.NumSubexp() < 1 {
			return nil, fmt.Errorf("stats: tag %q: regex %q has no capture group", t.Name, t.Regex)
		}
		x.tags = append(x.tags, compiledTag{name: t.Name, re: re})
	}
	return x, nil
}

// Extract returns the tag-extracted name of a stat and its tags, as Envoy's
// TagProducerImpl::produceTags computes them with regex tag specifiers
// (source/common/stats/tag_producer_impl.cc, tag_extractor_impl.cc
// TagExtractorStdRegexImpl::extractTag): every regex searches the original name; on a match
// the first capture group is removed from the name and the second (else the first) is the
// tag's value; a tag whose name an earlier extractor already produced is skipped; the
// removals are applied together at the end. Tags come in extractor order.
//
// Go's regexp is RE2, Envoy's std::regex is ECMAScript: they agree on the leftmost match of
// the regexes Tags returns (literals, a lazy .*? and groups); regexes that use what only
// one of them has (backreferences, lookaround, possessive forms) are outside this model.
func (x *Extractor) Extract(stat string) (string, []Label) {
	var tags []Label
	var cut [][2]int
	for _, t := range x.tags {
		if hasLabel(tags, t.name) {
			continue
		}
		m := t.re.FindStringSubmatchIndex(stat)
		if m == nil || m[2] < 0 {
			continue
		}
		value := stat[m[2]:m[3]]
		if len(m) >= 6 && m[4] >= 0 {
			value = stat[m[4]:m[5]]
		}
		tags = append(tags, Label{Name: t.name, Value: value})
		if m[3] > m[2] {
			cut = append(cut, [2]int{m[2], m[3]})
		}
	}
	return removeIntervals(stat, cut), tags
}

func hasLabel(tags []Label, name string) bool {
	for _, l := range tags {
		if l.Name == name {
			return true
		}
	}
	return false
}

// removeIntervals removes the union of the half-open byte ranges from s
// (StringUtil::removeCharacters over an IntervalSet).
func removeIntervals(s string, cut [][2]int) string {
	if len(cut) == 0 {
		return s
	}
	sort.Slice(cut, func(i, j int) bool { return cut[i][0] < cut[j][0] })
	out := make([]byte, 0, len(s))
	pos := 0
	for _, c := range cut {
		if c[0] > pos {
			out = append(out, s[pos:c[0]]...)
		}
		pos = max(pos, c[1])
	}
	return string(append(out, s[pos:]...))
}
