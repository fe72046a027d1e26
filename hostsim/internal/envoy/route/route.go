// Package route is the route's cluster choice: the cluster specifier a route entry picks its
// cluster with (cluster_header or the matcher cluster specifier plugin), the per-request
// entry that holds the pick, and its refresh (refreshRouteCluster) before a retry. It knows
// no VM, no stream and no router; the caller hands it the request headers and a view of
// the stream's filter state.
//
// Sources read (envoyproxy/envoy):
//
//   - source/common/router/header_cluster_specifier.cc, HeaderClusterSpecifierPlugin::route:
//     the first value of the cluster header, or "" when the header is absent, held by a
//     DynamicRouteEntry (source/common/router/delegating_route_impl.h) whose cluster name
//     is const: refreshRouteCluster does not re-read the header (DynamicRouteEntry does not
//     override it; that the parent RouteEntryImplBase's refresh is a no-op is inferred —
//     that object is shared by every request — not read).
//   - source/extensions/router/cluster_specifiers/matcher/matcher_cluster_specifier.cc,
//     MatcherClusterSpecifierPlugin::route and MatcherRouteEntry::refreshRouteCluster: the
//     entry starts with cluster "" and evaluates the match tree on HttpMatchingDataImpl
//     (the stream info, the current request headers); a match sets the cluster, no match
//     keeps the one it had ("" at the first pick, so the router finds no cluster).
//     on_no_match runs for an input without a value and for one the map lacks alike
//     (source/common/matcher/map_matcher.h, MapMatcher::match and doNoMatch).
//   - The inputs: source/common/http/matching/inputs.h, HttpHeadersDataInputBase::get
//     (envoy.matching.inputs.request_headers: every value of the header joined with ",",
//     no value when absent); source/common/network/matching/inputs.cc,
//     FilterStateInput (envoy.matching.inputs.filter_state: the object's
//     serializeAsString, no value when the key is absent). A Wasm filter's
//     proxy_set_property stores key "wasm." + path as a CelState
//     (source/extensions/common/wasm/context.cc, Context::setProperty), whose
//     serializeAsString is the raw bytes (source/extensions/filters/common/expr/
//     cel_state.h). The exact_match_map runs on_no_match for an input without a value and
//     for a value it lacks alike (source/common/matcher/map_matcher.h, MapMatcher::match
//     and doNoMatch; the filter-state input's missing key is no value:
//     source/common/network/matching/inputs.h, FilterStateInput::get).
//
// Not modelled: weighted_clusters, priority_group, dynamic modules, cluster specifier
// plugins other than the matcher, match trees other than one exact_match_map over one
// input whose on_no_match is a cluster or one matcher_list predicate on the same input
// (Matcher.OnUnknown), and matchers nested in the map's actions.
package route

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by Validate's errors: a specifier Envoy's config validation (or
// hostsim) would reject.
var ErrInvalid = errors.New("route: invalid cluster specifier")

// FilterStatePrefix is the prefix Envoy's Wasm filter gives the filter-state keys
// proxy_set_property writes (context.cc CelStateKeyPrefix).
const FilterStatePrefix = "wasm."

// Specifier is a route's cluster specifier: exactly one of Header and Matcher.
type Specifier struct {
	// Header is RouteAction.cluster_header: the request header whose first value names the
	// cluster.
	Header string
	// Matcher is RouteAction.inline_cluster_specifier_plugin with
	// envoy.router.cluster_specifier_plugin.matcher.
	Matcher *Matcher
}

// Matcher is a MatcherClusterSpecifier whose cluster_matcher is one matcher_tree: an input
// and an exact_match_map from its value to a ClusterAction, with on_no_match.
type Matcher struct {
	// Input is the matcher tree's input.
	Input Input
	// Exact is exact_match_map: input value → cluster.
	Exact map[string]string
	// OnNoMatch is on_no_match's ClusterAction cluster ("": none).
	OnNoMatch string
	// OnUnknown, when set, makes on_no_match a nested matcher_list of one single_predicate
	// on the same input that matches any non-empty value: an input whose value the map
	// lacks goes to OnUnknown, one without a value (or an empty one) to OnNoMatch.
	// (MapMatcher::doNoMatch runs on_no_match, nested matchers included, for both; a single
	// predicate does not match an input without a value.)
	OnUnknown string
}

// InputKind is the kind of a matcher's input.
type InputKind int

// The inputs hostsim models.
const (
	// InputRequestHeader is envoy.matching.inputs.request_headers
	// (HttpRequestHeaderMatchInput, header_name Input.Name).
	InputRequestHeader InputKind = iota + 1
	// InputFilterState is envoy.matching.inputs.filter_state (FilterStateInput, key
	// Input.Name, e.g. "wasm.spillway_target").
	InputFilterState
)

// Input is a matcher tree's input.
type Input struct {
	Kind InputKind
	Name string // the header name, or the filter-state key
}

// Data is what a match reads (HttpMatchingDataImpl): the current request headers and the
// stream's filter state by its Envoy key.
type Data struct {
	Headers     [][2]string
	FilterState func(key string) ([]byte, bool)
}

// Validate checks s as Envoy's config would: exactly one of Header and Matcher, a named
// input of a known kind, cluster names non-empty (ClusterAction.cluster min_len 1 —
// inferred from the proto's use, not read).
func (s Specifier) Validate() error {
	switch {
	case s.Header == "" && s.Matcher == nil:
		return fmt.Errorf("%w: neither cluster_header nor a matcher", ErrInvalid)
	case s.Header != "" && s.Matcher != nil:
		return fmt.Errorf("%w: both cluster_header and a matcher", ErrInvalid)
	case s.Matcher == nil:
		return nil
	}
	m := s.Matcher
	if m.Input.Kind != InputRequestHeader && m.Input.Kind != InputFilterState {
		return fmt.Errorf("%w: matcher input kind %d", ErrInvalid, m.Input.Kind)
	}
	if m.Input.Name == "" {
		return fmt.Errorf("%w: matcher input without a header name or filter-state key", ErrInvalid)
	}
	if len(m.Exact) == 0 && m.OnNoMatch == "" {
		return fmt.Errorf("%w: matcher with neither an exact_match_map nor on_no_match", ErrInvalid)
	}
	for k, c := range m.Exact {
		if c == "" {
			return fmt.Errorf("%w: exact_match_map entry %q without a cluster", ErrInvalid, k)
		}
	}
	return nil
}

// Entry is one request's route entry as far as its cluster goes (DynamicRouteEntry,
// MatcherRouteEntry): the cluster it picked.
type Entry struct {
	matcher *Matcher // nil: cluster_header, never refreshed
	cluster string
}

// Route is the specifier's pick for a request (ClusterSpecifierPlugin::route) on the
// request headers as they reach the router and the stream's filter state.
func (s *Specifier) Route(d Data) *Entry {
	if s.Matcher == nil {
		v, _ := firstValue(d.Headers, strings.ToLower(s.Header))
		return &Entry{cluster: v}
	}
	e := &Entry{matcher: s.Matcher}
	e.Refresh(d)
	return e
}

// Cluster is the entry's cluster name ("": none, which the router does not find).
func (e *Entry) Cluster() string { return e.cluster }

// Refresh is refreshRouteCluster on the current headers and filter state: a matcher
// re-evaluates and keeps its cluster on no match; cluster_header's entry never changes.
// It reports whether the cluster changed.
func (e *Entry) Refresh(d Data) bool {
	m := e.matcher
	if m == nil {
		return false
	}
	c, ok := m.match(d)
	if !ok || c == e.cluster {
		return false
	}
	e.cluster = c
	return true
}

// match evaluates the tree: the input's value looked up in the exact map, else on_no_match
// (also for an input without a value); false when nothing matched.
func (m *Matcher) match(d Data) (string, bool) {
	if v, ok := m.value(d); ok {
		if c, ok := m.Exact[v]; ok {
			return c, true
		}
		if m.OnUnknown != "" && v != "" {
			return m.OnUnknown, true
		}
	}
	if m.OnNoMatch != "" {
		return m.OnNoMatch, true
	}
	return "", false
}

// value is the input's value, false when it has none.
func (m *Matcher) value(d Data) (string, bool) {
	switch m.Input.Kind {
	case InputRequestHeader:
		return allValues(d.Headers, strings.ToLower(m.Input.Name))
	case InputFilterState:
		if d.FilterState == nil {
			return "", false
		}
		b, ok := d.FilterState(m.Input.Name)
		return string(b), ok
	}
	return "", false
}

func firstValue(h [][2]string, name string) (string, bool) {
	for _, kv := range h {
		if strings.ToLower(kv[0]) == name {
			return kv[1], true
		}
	}
	return "", false
}

// allValues is HeaderUtility::getAllOfHeaderAsString with ",": every value of the header,
// in order.
func allValues(h [][2]string, name string) (string, bool) {
	var b strings.Builder
	found := false
	for _, kv := range h {
		if strings.ToLower(kv[0]) != name {
			continue
		}
		if found {
			b.WriteByte(',')
		}
		found = true
		b.WriteString(kv[1])
	}
	return b.String(), found
}
