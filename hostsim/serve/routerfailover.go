package serve

import (
	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// RouterFailover is what the generated Envoy bootstrap (package envoy) writes for a policy
// that fails over through the router (resilience.failover.via: router), as hostsim models
// it: the module also runs as every cluster's upstream HTTP filter under rootid.Upstream,
// with the same plugin configuration (hostsim.WithUpstreamFilter), the route retries on the
// marker header alone (hostsim.WithRetryPolicy) and the clusters' max_retries circuit
// breaker is raised (hostsim.WithMaxRetries). Every number comes from policies/envoylimits,
// as the bootstrap's do.
//
// The route removes the marker from every upstream response before the downstream filter
// sees it (hostsim.WithRouteResponseHeadersToRemove), as the bootstrap's routed route does.
// One difference from the bootstrap, without effect on what a client sees: hostsim has one
// route, so the retry policy covers the requests the bootstrap's passthrough route takes
// too (the upstream instance never marks a try the downstream instance did not route, so
// the router never retries one).
type RouterFailover struct {
	// Retry is the routed route's retry policy.
	Retry hostsim.RetryPolicy
	// MaxRetries is each cluster's max_retries circuit breaker.
	MaxRetries uint32
	// Cluster, under failover.crossCluster, is how the routed route picks its cluster: the
	// matcher cluster specifier on the filter state the filter writes
	// (routerretry.TargetFilterStateKey), refreshed before each retry
	// (Retry.RefreshClusterOnRetry), instead of the cluster header. nil: the cluster header.
	Cluster *hostsim.RouteCluster
}

// routerFailoverFor returns the router failover a policy asks for, nil when it fails over
// by callout (the default). defaultCluster is where unrouted requests go: under
// crossCluster the matcher sends a request without the filter state there (hostsim has one
// route, where the bootstrap has a passthrough route to that cluster for the requests the
// filter does not route; the routed route's matcher has no on_no_match).
func routerFailoverFor(res *policies.Resolved, defaultCluster string) *RouterFailover {
	if !res.Failover.ViaRouter {
		return nil
	}
	limit := envoylimits.RetryBufferLimit(res)
	var cluster *hostsim.RouteCluster
	if res.Failover.CrossCluster {
		m := &hostsim.ClusterMatcher{FilterState: routerretry.TargetFilterStateKey, Clusters: map[string]string{},
			OnNoMatch: defaultCluster}
		for i := range res.Providers {
			m.Clusters[res.Providers[i].Cluster] = res.Providers[i].Cluster
		}
		cluster = &hostsim.RouteCluster{Matcher: m}
	}
	return &RouterFailover{
		Cluster: cluster,
		Retry: hostsim.RetryPolicy{
			RetryOn:          "retriable-headers",
			NumRetries:       hostsim.RetryCount(envoylimits.RetryNumRetries(res)),
			RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: routerretry.MarkerHeader, Kind: hostsim.RetryHeaderPresent}},
			BaseInterval:     envoylimits.RetryBackOffBase,
			MaxInterval:      envoylimits.RetryBackOffMax,
			BufferLimit:      &limit,
			// refresh_cluster_on_retry, with the matcher (Envoy ≥ 1.39).
			RefreshClusterOnRetry: cluster != nil,
		},
		MaxRetries: envoylimits.ClusterMaxRetries,
	}
}

// options are the hostsim options that run it, with the plugin configuration the
// downstream instance gets.
func (r *RouterFailover) options(pluginConfig []byte) []hostsim.Option {
	if r == nil {
		return nil
	}
	opts := []hostsim.Option{
		hostsim.WithUpstreamFilter(rootid.Upstream, pluginConfig),
		hostsim.WithRetryPolicy(r.Retry),
		hostsim.WithMaxRetries(r.MaxRetries),
		hostsim.WithRouteResponseHeadersToRemove(routerretry.MarkerHeader),
	}
	if r.Cluster != nil {
		opts = append(opts, hostsim.WithRouteCluster(*r.Cluster))
	}
	return opts
}
