package istio

import (
	"fmt"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/internal/routerretry"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// What the object pass collects for the cross checks.
type (
	// extensionRef is an EXTENSION_CONFIG ADD; wasm is its Wasm plugin config, if any.
	extensionRef struct {
		object, path string
		wasm         *wasmv3.PluginConfig
	}
	// filterRef is an HTTP filter reading an extension config over ECDS; downstream for
	// the HTTP connection manager's (an HTTP_FILTER patch), with its default state.
	filterRef struct {
		object, path, name   string
		downstream, disabled bool
	}
	// vhostPatch is a VIRTUAL_HOST patch on the virtual host "<host>:<port>" (name).
	vhostPatch struct {
		object, path, name string
		ctx                networking.EnvoyFilter_PatchContext
		port               uint32
		vh                 *routev3.VirtualHost
	}
	// routePatch is an HTTP_ROUTE patch.
	routePatch struct {
		object, path string
		route        *routev3.Route
	}
	// providerRoute is a VirtualService route that sends the requests whose cluster header
	// names a provider cluster to it.
	providerRoute struct {
		object, path, host, name, header string
		unreachable                      bool // a route matching every request comes first
		retries                          *networking.HTTPRetry
	}
)

// crossChecks are Spillway's rules between objects: every extension config read over ECDS
// is added (istiod serves nothing else under that name:
// pilot/pkg/networking/core/envoyfilter/extension_configuration_patch.go,
// InsertedExtensionConfigurations); every provider cluster is reached by its route
// (providerRoutes); the filter's virtual hosts are Spillway's (virtualHosts); and failover
// through the router has its patches (routerPatches).
func (v *validator) crossChecks(objects []Object) {
	for _, ref := range v.filterRefs {
		if _, ok := v.extensionConfigs[ref.name]; !ok {
			v.failAt(ref.object, ref.path, "config_discovery names %q, which no EnvoyFilter EXTENSION_CONFIG ADD provides: the listener would wait for it forever", ref.name)
		}
	}
	if len(v.policies) == 0 {
		return
	}
	routes, hosts := v.providerRoutes(objects)
	port := v.virtualHosts(hosts)
	v.routerPatches(routes, port)
}

// providerRoutes checks that every provider cluster of a policy is the destination of a
// VirtualService route on the cluster's host that matches the policy's cluster header on
// exactly that cluster (HTTP header names are case-insensitive: Envoy matches them lower-cased,
// source/common/http/header_utility.h, HeaderData), that no route before it matches every
// request (istiod only warns of an unreachable route), and that it turns Istio's retries
// off: without retries istiod writes its default retry policy (two retries on 503 and
// resets: pilot/pkg/networking/core/route/retry/retry.go, DefaultPolicy), and a provider's
// 503 would go to the same connection again before Spillway saw it; attempts: 0 writes none
// (ConvertPolicy). It returns the routes by cluster, and every VirtualService host.
func (v *validator) providerRoutes(objects []Object) (map[string]providerRoute, []string) {
	routes := map[string]providerRoute{}
	var hosts []string
	for i := range objects {
		vs, ok := objects[i].Spec.(*networking.VirtualService)
		if !ok {
			continue
		}
		for _, h := range vs.Hosts {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		catchAll := false
		for j, r := range vs.Http {
			if d := r.GetRoute(); len(d) == 1 && d[0].GetDestination() != nil && slices.Contains(vs.Hosts, d[0].Destination.Host) {
				cn := clusterName(d[0].Destination.GetPort().GetNumber(), d[0].Destination.Host)
				for _, m := range r.Match {
					for name, sm := range m.GetHeaders() {
						if sm.GetExact() == cn {
							routes[cn] = providerRoute{object: objects[i].ID(), path: fmt.Sprintf("spec.http[%d]", j),
								host: d[0].Destination.Host, name: r.Name, header: name, unreachable: catchAll, retries: r.Retries}
						}
					}
				}
			}
			catchAll = catchAll || len(r.GetMatch()) == 0
		}
	}
	for _, p := range v.policies {
		seen := map[string]bool{}
		for _, pv := range p.res.Providers {
			if _, _, err := parseClusterName(pv.Cluster); err != nil || seen[pv.Cluster] {
				continue // a cluster that is not Istio's is reported by policy
			}
			seen[pv.Cluster] = true
			r, ok := routes[pv.Cluster]
			switch {
			case !ok:
				v.failAt(p.object, p.path, "cluster %q: no VirtualService for its host routes the cluster header's value %q to it (want Istio's outbound|<port>||<host> name, as Render derives it)", pv.Cluster, pv.Cluster)
				continue
			case !strings.EqualFold(r.header, p.res.Routing.ClusterHeader):
				v.failAt(r.object, r.path, "matches the header %q, but the filter names the cluster in %q (routing.clusterHeader)", r.header, p.res.Routing.ClusterHeader)
			case r.unreachable:
				v.failAt(r.object, r.path, "unreachable: a route before it matches every request, so cluster %q is never reached", pv.Cluster)
			}
			if r.retries == nil || r.retries.Attempts != 0 {
				v.failAt(r.object, r.path+".retries", "want attempts: 0: otherwise istiod's retry policy resends a provider's 503 on the same connection before Spillway sees it")
			}
		}
	}
	return routes, hosts
}

// virtualHosts checks the VIRTUAL_HOST patches against Spillway's virtual hosts, the hosts of
// its VirtualServices on one port ("<host>:<port>", Istio's virtual host names:
// pilot/pkg/networking/util, DomainName): each has a request_body_buffer_limit above every
// policy's maxRequestBodyBytes (else Envoy answers its own 413 before Spillway reads the
// body), no other host is patched, and where the EnvoyFilter inserts the HTTP filter (the
// Full mode) it is disabled by default and enabled on each of them (enableFilter), so no
// other host of a shared gateway or listener runs it. It returns the port.
func (v *validator) virtualHosts(hosts []string) uint32 {
	p := v.policies[0]
	if len(v.vhostPatches) == 0 {
		v.failAt(p.object, "", "no VIRTUAL_HOST patch: Spillway's virtual hosts keep Envoy's body buffer limit, below the policy's maxRequestBodyBytes")
		return 0
	}
	port := v.vhostPatches[0].port
	var downstream *filterRef
	for i := range v.filterRefs {
		if v.filterRefs[i].downstream {
			downstream = &v.filterRefs[i]
		}
	}
	if downstream != nil && !downstream.disabled {
		v.failAt(downstream.object, downstream.path, "want the filter disabled: true, enabled on Spillway's virtual hosts only: else it runs on every host of the listener")
	}
	limits, enabled := map[string]uint64{}, map[string]bool{}
	for _, vp := range v.vhostPatches {
		name := strings.TrimSuffix(vp.name, fmt.Sprintf(":%d", port))
		switch {
		case vp.port != port:
			v.failAt(vp.object, vp.path+".match.routeConfiguration.portNumber", "%d: Spillway's virtual hosts are on one port, %d", vp.port, port)
		case vp.name == name || !slices.Contains(hosts, name):
			v.failAt(vp.object, vp.path+".match.routeConfiguration.vhost.name", "%q is not one of Spillway's virtual hosts (its VirtualServices' hosts on port %d)", vp.name, port)
		}
		limits[vp.name] = max(limits[vp.name], vp.vh.GetRequestBodyBufferLimit().GetValue())
		if downstream != nil && enables(vp.vh, downstream.name) {
			enabled[vp.name] = true
		}
	}
	for _, h := range hosts {
		name := fmt.Sprintf("%s:%d", h, port)
		for _, p := range v.policies {
			if limit := limits[name]; limit <= uint64(p.res.MaxRequestBodyBytes) {
				v.failAt(p.object, p.path, "virtual host %s: request_body_buffer_limit %d is not above maxRequestBodyBytes %d: Envoy would answer its own 413 first", name, limit, p.res.MaxRequestBodyBytes)
			}
		}
		if downstream != nil && !enabled[name] {
			v.failAt(downstream.object, downstream.path, "virtual host %s: no VIRTUAL_HOST patch enables the filter there (typed_per_filter_config[%s])", name, downstream.name)
		}
	}
	return port
}

// enables reports whether a virtual host's typed_per_filter_config enables the filter: an
// entry for it that is not a disabled FilterConfig (per_filter_config.cc).
func enables(vh *routev3.VirtualHost, filter string) bool {
	a, ok := vh.GetTypedPerFilterConfig()[filter]
	if !ok {
		return false
	}
	fc := new(routev3.FilterConfig)
	return a.GetTypeUrl() != filterConfigTypeURL || a.UnmarshalTo(fc) != nil || !fc.Disabled
}

// routerPatches checks, for a policy failing over through the router, the patches
// routerPatches (router.go) writes: the upstream instance's extension config (root_id
// rootid.Upstream, the downstream's vm_config, so both share each worker's VM and its shared
// data), on every provider cluster an upstream chain that reads it, and on every provider
// route the bootstrap's retry policy, a body limit that keeps every accepted body replayable,
// and the marker header removed.
func (v *validator) routerPatches(routes map[string]providerRoute, port uint32) {
	var downstream, upstream []string // extension config names
	for name, ec := range v.extensionConfigs {
		switch {
		case ec.wasm == nil:
		case ec.wasm.RootId == rootid.Upstream:
			upstream = append(upstream, name)
		default:
			downstream = append(downstream, name)
		}
	}
	for _, p := range v.policies {
		if !p.res.Failover.ViaRouter {
			continue
		}
		if len(upstream) == 0 {
			v.failAt(p.object, p.path, "failover through the router needs Spillway's upstream instance: an EXTENSION_CONFIG ADD with root_id %s", rootid.Upstream)
			continue
		}
		for _, up := range upstream {
			for _, down := range downstream {
				if !proto.Equal(v.extensionConfigs[up].wasm.GetVmConfig(), v.extensionConfigs[down].wasm.GetVmConfig()) {
					ec := v.extensionConfigs[up]
					v.failAt(ec.object, ec.path+".patch.value.typed_config.config.vm_config", "differs from %s's: the two instances would run in different VMs, without each other's shared data", down)
				}
			}
		}
		seen := map[string]bool{}
		for _, pv := range p.res.Providers {
			r, ok := routes[pv.Cluster]
			if !ok || seen[pv.Cluster] {
				continue // reported by providerRoutes
			}
			seen[pv.Cluster] = true
			if !slices.ContainsFunc(v.clusterPatches[pv.Cluster], func(f string) bool { return slices.Contains(upstream, f) }) {
				v.failAt(p.object, p.path, "cluster %q: no CLUSTER MERGE puts Spillway's upstream instance (%s) in its upstream filters", pv.Cluster, strings.Join(upstream, ", "))
			}
			key := fmt.Sprintf("%s:%d/%s", r.host, port, r.name)
			rp, ok := v.routePatches[key]
			if !ok {
				v.failAt(p.object, p.path, "cluster %q: no HTTP_ROUTE MERGE on its route %s gives it the router's retry policy", pv.Cluster, key)
				continue
			}
			path := rp.path + ".patch.value"
			if !proto.Equal(rp.route.GetRoute().GetRetryPolicy(), envoy.RouterRetryPolicy(p.res)) {
				v.failAt(rp.object, path+".route.retry_policy", "want the standalone bootstrap's (envoy.RouterRetryPolicy): retry on %s and nothing else", routerretry.MarkerHeader)
			}
			if got, want := rp.route.GetRequestBodyBufferLimit().GetValue(), envoylimits.RetryBufferLimit(p.res); got < want {
				v.failAt(rp.object, path+".request_body_buffer_limit", "%d, below %d: a body the policy accepts would not be replayable for a retry (envoylimits.RetryBufferLimit)", got, want)
			}
			if !slices.Contains(rp.route.GetResponseHeadersToRemove(), routerretry.MarkerHeader) {
				v.failAt(rp.object, path+".response_headers_to_remove", "must hold %s: the marker must never reach a client", routerretry.MarkerHeader)
			}
		}
	}
}
