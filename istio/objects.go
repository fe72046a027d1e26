package istio

import (
	"fmt"
	"maps"
	"slices"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/spillwayproxy/spillway/policies"
)

// builder builds the resources of one rendering.
type builder struct {
	s            *settings
	res          *policies.Resolved
	pluginConfig []byte
	hostEnv      []string
}

const (
	exportHere = "." // every resource is visible in its own namespace only
	// notRoutedBody answers a request the filter did not route: a path or method Spillway
	// does not route, or the filter skipped (failure policy open). It is the OpenAI error
	// shape Spillway answers in, sent by the generated route, not by the filter.
	notRoutedBody  = `{"error":{"message":"spillway: no provider route for this request (Spillway routes POST requests on the LLM API paths of its policy)","type":"invalid_request_error","code":"not_routed"}}`
	managedByLabel = "app.kubernetes.io/managed-by"
	partOfLabel    = "app.kubernetes.io/part-of"
)

// objects returns every resource, in apply order.
func (b *builder) objects() ([]Object, error) {
	var out []Object
	hosts := b.providerHosts()
	for _, h := range hosts {
		if u := b.upstreamOf(h); u.external {
			out = append(out, b.serviceEntry(u))
		}
	}
	if b.s.Attach == AttachSidecar {
		out = append(out, b.frontendServiceEntry())
	}
	for _, h := range hosts {
		if u := b.upstreamOf(h); u.external {
			out = append(out, b.destinationRule(u))
		}
	}
	if b.s.emitGateway {
		out = append(out, b.gateway(hosts))
	}
	out = append(out, b.frontendVirtualService())
	for _, h := range hosts {
		out = append(out, b.providerVirtualService(b.upstreamOf(h)))
	}
	attach, err := b.attachment(hosts)
	if err != nil {
		return nil, err
	}
	out = append(out, attach...)
	if len(b.s.StatsTags) > 0 {
		cm, err := b.statsConfigMap()
		if err != nil {
			return nil, err
		}
		out = append(out, cm)
	}
	return out, nil
}

// providerHosts are the distinct upstream hosts, sorted.
func (b *builder) providerHosts() []string {
	set := map[string]bool{}
	for _, u := range b.s.upstreams {
		set[u.host] = true
	}
	return slices.Sorted(maps.Keys(set))
}

func (b *builder) upstreamOf(host string) upstream {
	for _, cluster := range slices.Sorted(maps.Keys(b.s.upstreams)) {
		if u := b.s.upstreams[cluster]; u.host == host {
			return u
		}
	}
	panic("istio: no upstream for host " + host) // providerHosts lists only known hosts
}

func (b *builder) object(kind, name string) Object {
	return Object{
		APIVersion: kinds[kind].apiVersion,
		Kind:       kind,
		Name:       name,
		Namespace:  b.s.Namespace,
		Labels:     map[string]string{managedByLabel: "spillway", partOfLabel: b.s.Name},
	}
}

// serviceEntry declares an external provider host. Its port is an HTTP port (Options.Port)
// whose traffic leaves on the provider's HTTPS port: the DestinationRule originates TLS,
// the pattern of Istio's egress TLS origination. An HTTP port (not HTTPS) lets the router
// route on the request and gives the host a virtual host on that port's route
// configuration, where the filter's re-routed request is matched.
func (b *builder) serviceEntry(u upstream) Object {
	o := b.object("ServiceEntry", b.s.Name+"-"+u.host)
	o.Spec = &networking.ServiceEntry{
		Hosts:      []string{u.host},
		ExportTo:   []string{exportHere},
		Location:   networking.ServiceEntry_MESH_EXTERNAL,
		Resolution: networking.ServiceEntry_DNS,
		Ports: []*networking.ServicePort{{
			Number:     b.s.Port,
			Name:       "http-spillway",
			Protocol:   "HTTP",
			TargetPort: u.port,
		}},
	}
	return o
}

// frontendServiceEntry is the host a sidecar's application calls. No request ever
// reaches an endpoint of it: the filter re-routes each LLM request to a provider and the
// frontend's only route answers every other request (STATIC resolution, no endpoints).
// The application resolves the name through Istio's DNS proxy.
func (b *builder) frontendServiceEntry() Object {
	o := b.object("ServiceEntry", b.s.Name+"-frontend")
	o.Spec = &networking.ServiceEntry{
		Hosts:      b.s.Hosts,
		ExportTo:   []string{exportHere},
		Location:   networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{
			Number:   b.s.Port,
			Name:     "http-spillway",
			Protocol: "HTTP",
		}},
	}
	return o
}

// destinationRule originates TLS to an external provider: SNI and the certificate's
// subject alternative name are the provider's host, the CA the proxy's system roots
// (Istio's default when caCertificates is unset: pilot/pkg/networking/core/cluster_tls.go,
// constructUpstreamTLS). Without subjectAltNames Istio would check the chain but not the
// name.
func (b *builder) destinationRule(u upstream) Object {
	o := b.object("DestinationRule", b.s.Name+"-"+u.host)
	o.Spec = &networking.DestinationRule{
		Host:     u.host,
		ExportTo: []string{exportHere},
		TrafficPolicy: &networking.TrafficPolicy{
			PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{{
				Port: &networking.PortSelector{Number: b.s.Port},
				Tls: &networking.ClientTLSSettings{
					Mode:            networking.ClientTLSSettings_SIMPLE,
					Sni:             u.host,
					SubjectAltNames: []string{u.host},
				},
			}},
		},
	}
	return o
}

// gateway is the ingress Gateway server: the client-facing hosts and every provider host
// (the filter re-routes a request into its provider host's virtual host on this server).
func (b *builder) gateway(providerHosts []string) Object {
	o := b.object("Gateway", b.s.Name)
	var hosts []string
	for _, h := range slices.Concat(b.s.Hosts, providerHosts) {
		hosts = append(hosts, exportHere+"/"+h)
	}
	server := &networking.Server{
		Port:  &networking.Port{Number: b.s.GatewayPort, Name: "http-spillway", Protocol: "HTTP"},
		Hosts: hosts,
	}
	if b.s.GatewayCredential != "" {
		server.Port = &networking.Port{Number: b.s.GatewayPort, Name: "https-spillway", Protocol: "HTTPS"}
		server.Tls = &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_SIMPLE, CredentialName: b.s.GatewayCredential}
	}
	o.Spec = &networking.Gateway{Selector: b.s.Selector, Servers: []*networking.Server{server}}
	return o
}

// notRoutedRoute answers what the filter did not route, with the OpenAI error shape.
func notRoutedRoute() *networking.HTTPRoute {
	return &networking.HTTPRoute{
		Name: "not-routed",
		DirectResponse: &networking.HTTPDirectResponse{
			Status: 404,
			Body:   &networking.HTTPBody{Specifier: &networking.HTTPBody_String_{String_: notRoutedBody}},
		},
		Headers: &networking.Headers{Response: &networking.Headers_HeaderOperations{
			Set: map[string]string{"content-type": "application/json"},
		}},
	}
}

// frontendVirtualService holds the client-facing hosts. A request arrives here; the filter
// either re-routes it to a provider's host or leaves it to the not-routed answer.
func (b *builder) frontendVirtualService() Object {
	o := b.object("VirtualService", b.s.Name)
	o.Spec = &networking.VirtualService{
		Hosts:    b.s.Hosts,
		Gateways: []string{b.s.gatewayRef},
		ExportTo: []string{exportHere},
		Http:     []*networking.HTTPRoute{notRoutedRoute()},
	}
	return o
}

// providerVirtualService routes the requests the filter sent to one provider host: the
// cluster header must name the host's Istio cluster (the filter sets it and removes any
// value a client sent), the header is removed before the request leaves, and no route
// timeout applies (Istio sets none unless asked; streams last minutes).
func (b *builder) providerVirtualService(u upstream) Object {
	header := b.res.Routing.ClusterHeader
	svcPort := b.s.servicePort(u)
	o := b.object("VirtualService", b.s.Name+"-"+u.host)
	o.Spec = &networking.VirtualService{
		Hosts:    []string{u.host},
		Gateways: []string{b.s.gatewayRef},
		ExportTo: []string{exportHere},
		Http: []*networking.HTTPRoute{
			{
				Name: providerRouteName(u.host),
				Match: []*networking.HTTPMatchRequest{{
					Headers: map[string]*networking.StringMatch{
						header: {MatchType: &networking.StringMatch_Exact{Exact: clusterName(svcPort, u.host)}},
					},
				}},
				Route: []*networking.HTTPRouteDestination{{
					Destination: &networking.Destination{Host: u.host, Port: &networking.PortSelector{Number: svcPort}},
				}},
				Headers: &networking.Headers{Request: &networking.Headers_HeaderOperations{Remove: []string{header}}},
				Retries: b.providerRetries(),
			},
			b.providerFallback(u, svcPort),
		},
	}
	return o
}

// providerRetries turns Istio's own retries off on every provider route. Without it istiod
// gives the route its default retry policy (pilot/pkg/networking/core/route/retry/retry.go,
// DefaultPolicy: two retries on connect-failure, refused-stream, unavailable, cancelled and
// a 503), so a provider's 503 would go to the same connection again, with the same
// credential, before Spillway saw it: a failing key takes the request twice and Spillway
// records one failure. Spillway fails over itself (by callout, or through the retry policy
// the EnvoyFilter merges in for router mode, which istiod leaves room for at attempts 0:
// see routerPatches).
func (b *builder) providerRetries() *networking.HTTPRetry {
	return &networking.HTTPRetry{Attempts: 0}
}

// providerFallback answers a request on a provider host that the filter did not route.
// An external provider, or any provider on a gateway, gets the not-routed answer, so an
// ingress gateway never relays to a provider without Spillway. An in-mesh provider seen
// from a sidecar keeps its ordinary route: the VirtualService applies to every workload
// of the namespace, and the others still call that Service directly.
func (b *builder) providerFallback(u upstream, svcPort uint32) *networking.HTTPRoute {
	if u.external || b.s.Attach == AttachGateway {
		return notRoutedRoute()
	}
	return &networking.HTTPRoute{
		Name: "direct",
		Route: []*networking.HTTPRouteDestination{{
			Destination: &networking.Destination{Host: u.host, Port: &networking.PortSelector{Number: svcPort}},
		}},
	}
}

// spillwayVirtualHosts are the Envoy virtual hosts the filter serves, by Istio's name
// "<host>:<port>" (pilot/pkg/networking/util, DomainName): the frontend hosts and every
// provider host, on the Gateway server's port or the sidecar's outbound port.
func (b *builder) spillwayVirtualHosts(providerHosts []string) (port uint32, names []string) {
	port = b.s.Port
	if b.s.Attach == AttachGateway {
		port = b.s.GatewayPort
	}
	for _, h := range slices.Concat(b.s.Hosts, providerHosts) {
		names = append(names, fmt.Sprintf("%s:%d", h, port))
	}
	return port, names
}
