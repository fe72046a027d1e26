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
// sees it (hostsim.WithRouteResponseHeadersToRemove), as the bootstrap's route does. Under
// failover.crossCluster the route's matcher (routeCluster) is refreshed before each retry
// (Retry.RefreshClusterOnRetry, Envoy ≥ 1.39), so a retry goes to the cluster the failed
// try's upstream instance named.
type RouterFailover struct {
	// Retry is the routed route's retry policy.
	Retry hostsim.RetryPolicy
	// MaxRetries is each cluster's max_retries circuit breaker.
	MaxRetries uint32
}

// routerFailoverFor returns the router failover a policy asks for, nil when it fails over
// by callout (the default).
func routerFailoverFor(res *policies.Resolved) *RouterFailover {
	if !res.Failover.ViaRouter {
		return nil
	}
	limit := envoylimits.RetryBufferLimit(res)
	return &RouterFailover{
		Retry: hostsim.RetryPolicy{
			RetryOn:          "retriable-headers",
			NumRetries:       hostsim.RetryCount(envoylimits.RetryNumRetries(res)),
			RetriableHeaders: []hostsim.RetryHeaderMatcher{{Name: routerretry.MarkerHeader, Kind: hostsim.RetryHeaderPresent}},
			BaseInterval:     envoylimits.RetryBackOffBase,
			MaxInterval:      envoylimits.RetryBackOffMax,
			BufferLimit:      &limit,
			// refresh_cluster_on_retry, with the matcher (Envoy ≥ 1.39).
			RefreshClusterOnRetry: res.Failover.CrossCluster,
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
	return opts
}
