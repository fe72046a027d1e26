package hostsim

import (
	"fmt"
	"strings"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/route"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/router"
)

// RouteCluster is how the route picks its cluster (RouteAction's cluster specifier, as
// hostsim/internal/envoy/route models it), for WithRouteCluster: exactly one of Header and
// Matcher.
type RouteCluster struct {
	// Header is cluster_header: the first value of this request header names the cluster
	// (HeaderClusterSpecifierPlugin::route), resolved once per request and never refreshed.
	Header string
	// Matcher is the matcher cluster specifier plugin
	// (envoy.router.cluster_specifier_plugin.matcher, MatcherClusterSpecifierPlugin).
	Matcher *ClusterMatcher
}

// ClusterMatcher is a MatcherClusterSpecifier with one exact_match_map over one input:
// exactly one of FilterState and RequestHeader.
type ClusterMatcher struct {
	// FilterState is the key of an envoy.matching.inputs.filter_state input
	// (FilterStateInput.key). A Wasm filter's proxy_set_property(["spillway_target"], v)
	// is key "wasm.spillway_target" with the raw bytes v as its value.
	FilterState string
	// RequestHeader is the header_name of an envoy.matching.inputs.request_headers input:
	// all the header's values joined with ",".
	RequestHeader string
	// Clusters is exact_match_map: input value → the ClusterAction's cluster.
	Clusters map[string]string
	// OnNoMatch is on_no_match's cluster ("": none; a request whose first pick matches
	// nothing then has no cluster: 503 NC cluster_not_found).
	OnNoMatch string
	// OnUnknown, when set, is the cluster of an input whose value Clusters lacks, OnNoMatch
	// then taking only an input without a value: on_no_match as a nested matcher_list with
	// one single_predicate on the input matching any non-empty value (route.Matcher).
	OnUnknown string
}

// ErrInvalidRouteCluster is wrapped by New's error for a RouteCluster Envoy (or hostsim)
// would reject.
var ErrInvalidRouteCluster = route.ErrInvalid

// WithRouteCluster gives the route a cluster specifier. The router picks the cluster when
// the request headers reach it (Router::Filter::decodeHeaders → the route's
// ClusterSpecifierPlugin::route) and hands it to the upstream as UpstreamRequest.Cluster
// (UpstreamCall.Cluster): a cluster not declared with WithCluster (when any is declared),
// or no cluster at all, is the router's 503 NC cluster_not_found before any try. With
// RetryPolicy.RefreshClusterOnRetry a matcher re-picks before each retry. See
// "Router retries and upstream filters" in the package doc for what the pick sees.
// Without WithRouteCluster, UpstreamRequest.Cluster is empty and the upstream function
// routes on its own.
func WithRouteCluster(rc RouteCluster) Option {
	return func(c *config) {
		r := rc
		if m := rc.Matcher; m != nil {
			mm := *m
			mm.Clusters = make(map[string]string, len(m.Clusters))
			for k, v := range m.Clusters {
				mm.Clusters[k] = v
			}
			r.Matcher = &mm
		}
		c.routeCluster = &r
	}
}

// specifier converts rc to the model's Specifier and validates it.
func (rc RouteCluster) specifier() (*route.Specifier, error) {
	s := &route.Specifier{Header: rc.Header}
	if m := rc.Matcher; m != nil {
		in := route.Input{Kind: route.InputFilterState, Name: m.FilterState}
		switch {
		case m.FilterState != "" && m.RequestHeader != "":
			return nil, fmt.Errorf("hostsim: route cluster: %w: a matcher on both filter state and a request header", ErrInvalidRouteCluster)
		case m.RequestHeader != "":
			in = route.Input{Kind: route.InputRequestHeader, Name: strings.ToLower(m.RequestHeader)}
		}
		s.Matcher = &route.Matcher{Input: in, Exact: m.Clusters, OnNoMatch: m.OnNoMatch, OnUnknown: m.OnUnknown}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("hostsim: route cluster: %w", err)
	}
	return s, nil
}

// knownCluster reports whether the cluster manager has cluster name
// (ClusterManager::getThreadLocalCluster): one declared with WithCluster, or, when none is
// declared, any name but "".
func (h *Host) knownCluster(name string) bool {
	if name == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.cfg.clusters) == 0 || h.cfg.clusters[name]
}

// routeData is what the route's matcher reads now: the router's request headers and the
// downstream stream's filter state (HttpMatchingDataImpl over the downstream StreamInfo,
// which upstream filters write too). Before a clear of the route cache it is what the
// connection manager matched the route on: the client's headers, before any filter ran
// (ActiveStream::decodeHeaders → refreshCachedRoute), with no filter state.
func (ex *Exchange) routeData(cached bool) route.Data {
	if cached {
		return route.Data{Headers: ex.clientHeaders}
	}
	s := ex.s
	return route.Data{Headers: s.Req.Headers, FilterState: func(key string) ([]byte, bool) {
		name, ok := strings.CutPrefix(key, route.FilterStatePrefix)
		if !ok {
			return nil, false // only a Wasm filter's keys are modelled
		}
		v, ok := s.FilterState[name]
		return v, ok
	}}
}

// pickCluster is the route's cluster as the router gets it at the request headers
// (Filter::decodeHeaders → callbacks_->route()): the connection manager's pick, unless the
// downstream filter cleared the route cache (a request-header write or clear_route_cache),
// in which case the route is resolved again on the headers and filter state as they are
// now. False when the router answered: no such cluster (503 NC).
func (ex *Exchange) pickCluster() bool {
	spec := ex.vm.host.routeSpec
	if spec == nil {
		return true
	}
	cached := ex.s.RouteCacheClears == 0
	ex.routeEntry = spec.Route(ex.routeData(cached))
	if c := ex.routeEntry.Cluster(); !ex.vm.host.knownCluster(c) {
		ex.vm.host.log(ex.vm, LogDebug, fmt.Sprintf("router: unknown cluster %q", c))
		ex.up.Failed(ErrClusterNotFound)
		return false
	}
	return true
}

// refreshCluster is the retry's refresh of the route's cluster (Filter::doRetry with
// refresh_cluster_on_retry → refreshRouteCluster on the current request headers and
// filter state), after the attempt count is set and before the router writes
// x-envoy-attempt-count into the headers; then the retry's cluster lookup: a cluster the
// cluster manager does not have is sendNoHealthyUpstreamResponse (503 "no healthy
// upstream", UH), the request's end. False when the router answered.
func (ex *Exchange) refreshCluster(t *upTry) bool {
	e := ex.routeEntry
	if e == nil {
		return true
	}
	if rs := ex.vm.host.retries; rs != nil && rs.refreshCluster {
		before := e.Cluster()
		if e.Refresh(ex.routeData(false)) {
			ex.vm.host.log(ex.vm, LogDebug, fmt.Sprintf("router: try %d: cluster %q → %q", t.n, before, e.Cluster()))
		}
	}
	if ex.vm.host.knownCluster(e.Cluster()) {
		return true
	}
	ex.upTry = t
	t.cluster = e.Cluster()
	r, _ := router.FailureReply(ErrNoHealthyUpstream, false)
	ex.routerReply(r, false)
	return false
}
