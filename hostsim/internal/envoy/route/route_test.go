package route

import (
	"errors"
	"testing"
)

func fs(kv map[string]string) func(string) ([]byte, bool) {
	return func(k string) ([]byte, bool) {
		v, ok := kv[k]
		return []byte(v), ok
	}
}

// The first pick and the refresh of each specifier (HeaderClusterSpecifierPlugin::route,
// MatcherClusterSpecifierPlugin::route, MatcherRouteEntry::refreshRouteCluster).
func TestRouteAndRefresh(t *testing.T) {
	byState := &Matcher{Input: Input{Kind: InputFilterState, Name: "wasm.target"},
		Exact: map[string]string{"a": "cluster-a", "b": "cluster-b"}}
	withDefault := &Matcher{Input: byState.Input, Exact: byState.Exact, OnNoMatch: "fallback"}
	// The generated bootstrap's: a value the map lacks is not a request without one.
	tellsApart := &Matcher{Input: byState.Input, Exact: byState.Exact, OnNoMatch: "fallback", OnUnknown: "nowhere"}
	byHeader := &Matcher{Input: Input{Kind: InputRequestHeader, Name: "x-target"},
		Exact: map[string]string{"a,b": "both", "a": "cluster-a"}}
	cases := []struct {
		name    string
		spec    Specifier
		first   Data   // what the first pick reads
		want    string // the first pick's cluster
		refresh Data   // what the refresh reads
		changed bool   // Refresh's answer
		after   string // the cluster after the refresh
	}{
		{name: "header: first value, never refreshed", spec: Specifier{Header: "X-Cluster"},
			first: Data{Headers: [][2]string{{"x-cluster", "one"}, {"x-cluster", "two"}}}, want: "one",
			refresh: Data{Headers: [][2]string{{"x-cluster", "three"}}}, after: "one"},
		{name: "header absent: no cluster", spec: Specifier{Header: "x-cluster"}, want: "",
			refresh: Data{Headers: [][2]string{{"x-cluster", "late"}}}, after: ""},
		{name: "filter state: a match moves the cluster", spec: Specifier{Matcher: byState},
			first: Data{FilterState: fs(map[string]string{"wasm.target": "a"})}, want: "cluster-a",
			refresh: Data{FilterState: fs(map[string]string{"wasm.target": "b"})}, changed: true, after: "cluster-b"},
		{name: "filter state: no match keeps the cluster", spec: Specifier{Matcher: byState},
			first: Data{FilterState: fs(map[string]string{"wasm.target": "a"})}, want: "cluster-a",
			refresh: Data{FilterState: fs(map[string]string{"wasm.target": "zzz"})}, after: "cluster-a"},
		{name: "filter state: key gone keeps the cluster", spec: Specifier{Matcher: byState},
			first: Data{FilterState: fs(map[string]string{"wasm.target": "b"})}, want: "cluster-b",
			refresh: Data{}, after: "cluster-b"},
		{name: "first pick without a match: no cluster", spec: Specifier{Matcher: byState},
			first: Data{FilterState: fs(map[string]string{"wasm.target": "zzz"})}, want: "",
			refresh: Data{FilterState: fs(map[string]string{"wasm.target": "a"})}, changed: true, after: "cluster-a"},
		{name: "on_no_match is a match", spec: Specifier{Matcher: withDefault},
			first: Data{FilterState: fs(map[string]string{"wasm.target": "a"})}, want: "cluster-a",
			refresh: Data{FilterState: fs(map[string]string{"wasm.target": "zzz"})}, changed: true, after: "fallback"},
		{name: "on_no_match's predicate: an unknown value", spec: Specifier{Matcher: tellsApart},
			first: Data{FilterState: fs(map[string]string{"wasm.target": "zzz"})}, want: "nowhere",
			refresh: Data{FilterState: fs(map[string]string{"wasm.target": "b"})}, changed: true, after: "cluster-b"},
		{name: "on_no_match's predicate: no value is the default", spec: Specifier{Matcher: tellsApart},
			first: Data{}, want: "fallback",
			refresh: Data{FilterState: fs(map[string]string{"wasm.target": ""})}, after: "fallback"},
		{name: "request header: values joined with a comma", spec: Specifier{Matcher: byHeader},
			first: Data{Headers: [][2]string{{"X-Target", "a"}, {"x-target", "b"}}}, want: "both",
			refresh: Data{Headers: [][2]string{{"x-target", "a"}}}, changed: true, after: "cluster-a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.spec.Validate(); err != nil {
				t.Fatal(err)
			}
			e := c.spec.Route(c.first)
			if got := e.Cluster(); got != c.want {
				t.Fatalf("first pick %q, want %q", got, c.want)
			}
			if changed := e.Refresh(c.refresh); changed != c.changed || e.Cluster() != c.after {
				t.Fatalf("refresh: changed %v cluster %q, want %v %q", changed, e.Cluster(), c.changed, c.after)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	in := Input{Kind: InputFilterState, Name: "wasm.k"}
	bad := []Specifier{
		{}, // neither
		{Header: "x", Matcher: &Matcher{Input: in, OnNoMatch: "c"}},                 // both
		{Matcher: &Matcher{Input: Input{Name: "k"}, OnNoMatch: "c"}},                // no input kind
		{Matcher: &Matcher{Input: Input{Kind: InputRequestHeader}, OnNoMatch: "c"}}, // no header name
		{Matcher: &Matcher{Input: in}},                                              // nothing to pick
		{Matcher: &Matcher{Input: in, Exact: map[string]string{"v": ""}}},           // empty cluster
	}
	for i, s := range bad {
		if err := s.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: %v, want ErrInvalid", i, err)
		}
	}
}
