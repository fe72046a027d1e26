package hostsim_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// The route's cluster and refresh_cluster_on_retry: the downstream filter names the first
// cluster in filter state (and edits a request header, which clears the route cache so the
// router resolves the route again); the first try's upstream filter, at its response
// headers, names the next cluster in filter state and marks the try retriable. Which
// cluster the retry goes to depends on the specifier, the flag and the map; every try's
// UpstreamRequest.Cluster is its cluster and every try runs the upstream filter.
func TestRetryRefreshesTheRouteCluster(t *testing.T) {
	matcher := &hostsim.ClusterMatcher{FilterState: "wasm.spillway_target",
		Clusters: map[string]string{"a": "cluster-a", "b": "cluster-b", "c": "cluster-c"}}
	cases := []struct {
		name    string
		rc      hostsim.RouteCluster // the route's cluster specifier
		refresh bool                 // RefreshClusterOnRetry
		next    string               // what try 1's upstream filter writes to spillway_target
		clear   bool                 // the downstream filter edits a request header (clears the route cache)
		want    []string             // each try's cluster, in order
		status  int                  // the client's status
		flags   hostsim.ResponseFlags
		body    string
	}{
		{name: "matcher, refresh: the retry goes to B", rc: hostsim.RouteCluster{Matcher: matcher}, refresh: true,
			next: "b", clear: true, want: []string{"cluster-a", "cluster-b"}, status: 200, body: "upstream 200"},
		{name: "matcher, no refresh: stays on A", rc: hostsim.RouteCluster{Matcher: matcher},
			next: "b", clear: true, want: []string{"cluster-a", "cluster-a"}, status: 200, body: "upstream 200"},
		{name: "cluster_header, refresh: stays on A", rc: hostsim.RouteCluster{Header: "x-cluster"}, refresh: true,
			next: "b", clear: true, want: []string{"cluster-a", "cluster-a"}, status: 200, body: "upstream 200"},
		{name: "no match keeps A", rc: hostsim.RouteCluster{Matcher: matcher}, refresh: true,
			next: "zzz", clear: true, want: []string{"cluster-a", "cluster-a"}, status: 200, body: "upstream 200"},
		{name: "an unknown cluster at the retry: 503 no healthy upstream", rc: hostsim.RouteCluster{Matcher: matcher},
			refresh: true, next: "c", clear: true, want: []string{"cluster-a"}, status: 503,
			flags: hostsim.FlagNoHealthyUpstream, body: "no healthy upstream"},
		{name: "filter state without a route-cache clear: the route was matched before the filter, no cluster",
			rc: hostsim.RouteCluster{Matcher: matcher}, refresh: true, next: "b", want: nil, status: 503,
			flags: hostsim.FlagNoClusterFound, body: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := hostClock()
			var tr tries
			answer := func(n uint32) *hostsim.UpstreamResponse {
				if n == 1 {
					return status("429")
				}
				return status("200")
			}
			down := "request_headers set_property spillway_target a\n"
			if c.clear {
				down += "request_headers replace_header 0 x-routed 1\n"
			}
			up := fmt.Sprintf(`
request_headers get_property upstream.request_attempt_count
response_headers@4 set_property spillway_target %s
response_headers@4 add_header 2 x-spillway-retry 1
`, c.next)
			h := probeUp(t, down, up, hostsim.WithClock(clock), hostsim.WithRetryRandom(fixedRandom(0)),
				hostsim.WithUpstream(tr.upstream(clock, answer)),
				hostsim.WithCluster("cluster-a", "cluster-b"), // cluster-c is not declared
				hostsim.WithRouteCluster(c.rc),
				hostsim.WithRetryPolicy(hostsim.RetryPolicy{RetryOn: "retriable-headers", RefreshClusterOnRetry: c.refresh,
					RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: "x-spillway-retry", Kind: hostsim.RetryHeaderPresent}}}))
			resp := h.RunHTTP(&hostsim.Request{Headers: append(hdrs("x-cluster", "cluster-a"), postReq...), Body: []byte("{}")})

			var got []string
			for _, r := range resp.Tries {
				got = append(got, r.Cluster)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("tries' clusters %q, want %q", got, c.want)
			}
			if resp.StatusCode != c.status || resp.Flags != c.flags || string(resp.Body) != c.body {
				t.Errorf("response %d %v %q, want %d %v %q", resp.StatusCode, resp.Flags, resp.Body, c.status, c.flags, c.body)
			}
			// Every try that went upstream ran the upstream filter (a new context each).
			for i := range c.want {
				ctx := fmt.Sprintf("cb request_headers ctx=%d", 4+i)
				if countLines(h.Host, "worker-0", ctx) != 1 {
					t.Errorf("try %d's upstream filter did not run (%s); trace:\n%s", i+1, ctx, strings.Join(trace(h.Host, "worker-0"), "\n"))
				}
			}
		})
	}
}

// Without WithRouteCluster, UpstreamRequest.Cluster is empty (the upstream function routes).
func TestNoRouteClusterLeavesClusterEmpty(t *testing.T) {
	var tr tries
	clock := hostClock()
	h := probe(t, "", hostsim.WithClock(clock), hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("200") })))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq, Body: []byte("{}")})
	if resp.StatusCode != 200 || len(resp.Tries) != 1 || resp.Tries[0].Cluster != "" {
		t.Fatalf("response %d, tries %d, cluster %q; want 200, one try, no cluster", resp.StatusCode, len(resp.Tries), resp.Upstream.Cluster)
	}
}

// A RouteCluster Envoy would reject is New's error.
func TestInvalidRouteCluster(t *testing.T) {
	bad := []hostsim.RouteCluster{
		{}, // no specifier
		{Header: "x-cluster", Matcher: &hostsim.ClusterMatcher{FilterState: "wasm.k", OnNoMatch: "a"}},  // both
		{Matcher: &hostsim.ClusterMatcher{FilterState: "wasm.k", RequestHeader: "x-k", OnNoMatch: "a"}}, // two inputs
		{Matcher: &hostsim.ClusterMatcher{OnNoMatch: "a"}},                                              // no input
		{Matcher: &hostsim.ClusterMatcher{FilterState: "wasm.k"}},                                       // nothing to pick
		{Matcher: &hostsim.ClusterMatcher{RequestHeader: "x-k", Clusters: map[string]string{"v": ""}}},  // empty cluster
	}
	wasm := hostsimtest.Guest(t, "probe")
	for i, rc := range bad {
		if _, err := hostsim.New(wasm, hostsim.WithRouteCluster(rc)); !errors.Is(err, hostsim.ErrInvalidRouteCluster) {
			t.Errorf("case %d: New: %v, want ErrInvalidRouteCluster", i, err)
		}
	}
}

// An upstream filter's request headers are writable only until it continues them
// (Context::decodeHeaders nulls request_headers_ on Continue; getMap then answers nullptr
// and every write is BadArgument), as the downstream filter's are: from on_response_headers
// every request-header read and write fails, while filter state still works.
func TestRequestHeadersAreGoneAtTheResponse(t *testing.T) {
	ops := `
response_headers get_header 0 :path
response_headers add_header 0 x-late 1
response_headers replace_header 0 x-late 1
response_headers remove_header 0 :path
response_headers set_pairs 0 x-late=1
response_headers set_property late 1
`
	clock := hostClock()
	var tr tries
	h := probeUp(t, ops, ops, hostsim.WithClock(clock),
		hostsim.WithUpstream(tr.upstream(clock, func(uint32) *hostsim.UpstreamResponse { return status("200") })))
	resp := h.RunHTTP(&hostsim.Request{Headers: postReq, Body: []byte("{}")})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	for _, ctx := range []string{"4", "3"} { // the upstream filter's response runs first
		requireTrace(t, h.Host, "worker-0",
			"cb response_headers ctx="+ctx,
			"op get_header 0 :path -> BadArgument",
			"op add_header 0 x-late 1 -> BadArgument",
			"op replace_header 0 x-late 1 -> BadArgument",
			"op remove_header 0 :path -> BadArgument",
			"op set_pairs 0 x-late=1 -> BadArgument",
			"op set_property late 1 -> Ok")
	}
	if _, ok := headerValue(tr.reqs[0].Headers, "x-late"); ok {
		t.Errorf("a response-time write reached the request: %v", tr.reqs[0].Headers)
	}
}
