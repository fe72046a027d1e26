package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// Manifests are the Istio resources of one policy, ready for kubectl apply.
type Manifests struct {
	// Objects are the resources in apply order.
	Objects []Object
	// PluginConfig is the policy JSON the filter receives: the operator's policy with every
	// provider's cluster replaced by its Istio cluster name and its authority by its
	// ServiceEntry host. ${ENV} references are kept; the filter expands them from its VM
	// environment.
	PluginConfig []byte
	// HostEnv are the VM environment variables the proxy must read from its container's
	// environment (the policy's ${NAME} references less Options.InlineEnv), sorted.
	HostEnv []string
	// Clusters maps each policy cluster name to the Istio cluster it became.
	Clusters map[string]string
	// Warnings are the policy's warnings (values clamped, doubtful settings), each with its
	// field path: the policy is valid, but may not do what its author meant.
	Warnings policies.Errors
	// Failover is how the filter fails over as rendered (the plugin configuration's
	// resilience.failover, settled for the mode and Options.IstioMinor).
	Failover policies.FailoverSettings
}

// YAML writes the resources as one multi-document stream.
func (m *Manifests) YAML() ([]byte, error) { return EncodeYAML(m.Objects) }

// Render turns a policy document (YAML or JSON, as policies/policyfile reads it) into
// the Istio resources that run it: the filter's attachment (Options.Mode), and for every
// provider its ServiceEntry, DestinationRule (TLS origination) and routes. The result is
// validated as Validate does before it is returned.
//
// How the filter's choice reaches istiod's routes: the filter sets the chosen provider's
// :authority (its ServiceEntry host) and the cluster header. ABI 0.2.0 header edits clear
// Envoy's route cache, so the router matches the request again, now in the provider
// host's virtual host, whose generated VirtualService route requires the cluster header
// to name that host's Istio cluster and sends the request there with the header removed.
// Failover callouts name the same cluster (outbound|<port>||<host>) and :authority.
func Render(policyDoc []byte, opts Options) (*Manifests, error) {
	s, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	doc, err := policyfile.ToJSON(policyDoc)
	if err != nil {
		return nil, fmt.Errorf("istio: policy: %w", err)
	}
	env := &envRecorder{inline: s.InlineEnv, seen: map[string]bool{}}
	p, err := policies.Parse(doc, policies.ParseOptions{LookupEnv: env.lookup})
	if err != nil {
		return nil, fmt.Errorf("istio: policy: %w", err)
	}
	// The failover path as the mode runs it, written into the plugin configuration: the Full
	// mode attaches the upstream filter (router, unless the policy says callout), the
	// WasmPlugin and TrafficExtension modes run header-routed policies (callout).
	if doc, p, err = envoyrelease.Settle(doc, p, s.deployment()); err != nil {
		return nil, fmt.Errorf("istio: policy: %w", err)
	}
	res := p.Resolved()
	if (s.Mode == ModeWasmPlugin || s.Mode == ModeTrafficExtension) && !res.Routing.HeaderRouted() {
		// Neither resource can set allow_on_headers_stop_iteration: a body-routed filter would
		// hold every request's headers for a body that never comes (its missing-option
		// detector answers 500 spillway_misconfigured after routing.bodyWaitMs).
		return nil, fmt.Errorf("istio: mode %s needs a policy with routing.mode: headers (a %s cannot set "+
			"allow_on_headers_stop_iteration; use mode %s for a body-routed policy)", s.Mode, s.Mode, ModeFull)
	}
	if err := s.mapUpstreams(doc, res); err != nil {
		return nil, err
	}
	pluginConfig, clusters, err := s.meshPolicy(doc, res)
	if err != nil {
		return nil, err
	}
	m := &Manifests{PluginConfig: pluginConfig, Clusters: clusters, Warnings: p.Warnings, Failover: res.Failover}
	for name := range env.seen {
		if _, inline := s.InlineEnv[name]; !inline {
			m.HostEnv = append(m.HostEnv, name)
		}
	}
	slices.Sort(m.HostEnv)
	b := &builder{s: s, res: res, pluginConfig: pluginConfig, hostEnv: m.HostEnv}
	if m.Objects, err = b.objects(); err != nil {
		return nil, err
	}
	out, err := m.YAML()
	if err != nil {
		return nil, err
	}
	if err := Validate(out); err != nil {
		return nil, fmt.Errorf("istio: rendered manifests fail validation (a Spillway bug): %w", err)
	}
	return m, nil
}

// deployment is what the resources are for, as envoyrelease settles a policy's failover
// for it: the Envoy of Options.IstioMinor, the upstream filter in the Full mode only, and no
// route that refreshes its cluster on retry (crossCluster is refused, see mapUpstreams).
func (s *settings) deployment() envoyrelease.Deployment {
	envoy := envoyrelease.IstioEnvoy(s.IstioMinor)
	return envoyrelease.Deployment{Envoy: envoy, UpstreamFilter: s.Mode == ModeFull,
		Name: "Istio 1." + strconv.Itoa(s.IstioMinor) + " (Envoy 1." + strconv.Itoa(envoy) + ")", Flag: "-istio-version"}
}

// envPlaceholder is the value of every ${NAME} the proxy's environment will hold: a valid
// header value and credential, long enough for the admin token's 16-character minimum, so
// that no check or warning of the policy is about the placeholder instead of the policy.
const envPlaceholder = "spillway-env-placeholder"

// envRecorder is the environment a policy is parsed against at render time: it records
// every ${NAME} the policy reads and answers a placeholder, since the real values live in
// the proxy's environment. The request-queue variables (RATE_LIMIT_*) are optional and
// read only from Options.InlineEnv.
type envRecorder struct {
	inline map[string]string
	seen   map[string]bool
}

func (e *envRecorder) lookup(name string) (string, bool) {
	if v, ok := e.inline[name]; ok {
		e.seen[name] = true
		return v, true
	}
	switch name {
	case policies.EnvRequestQueueMaxWait, policies.EnvRequestQueueExecutionMaxWait, policies.EnvRequestQueueMaxDepth:
		return "", false
	}
	e.seen[name] = true
	return envPlaceholder, true
}

// mapUpstreams finds every provider cluster's upstream: Options.Upstreams, else the
// provider's authority as an external HTTPS host. A problem with the policy is a
// policies.FieldError at its path, one with the options an OptionError.
func (s *settings) mapUpstreams(doc []byte, res *policies.Resolved) error {
	var errs optionProblems
	policyProblem := func(path, format string, args ...any) {
		errs = append(errs, policies.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	s.upstreams = map[string]upstream{}
	if res.Failover.CrossCluster {
		// A retry to another provider needs refresh_cluster_on_retry (Envoy 1.39) and a route
		// that may reach every provider's cluster; a mesh routes each provider on a virtual
		// host of its own, found by :authority (see routerPatches), and Istio 1.28 ships 1.36.
		policyProblem("resilience.failover.crossCluster", "not rendered for Istio: a retry to another provider needs Envoy ≥ 1.39 "+
			"and one route that reaches every provider's cluster, where a mesh gives each provider a virtual host of its own; "+
			"drop it (cross-provider failover then goes by callout)")
	}
	for _, cluster := range slices.Sorted(maps.Keys(s.Upstreams)) {
		if !slices.ContainsFunc(res.Providers, func(pv policies.ResolvedProvider) bool { return pv.Cluster == cluster }) {
			errs.badKey("Upstreams", cluster, "no provider has this cluster")
		}
	}
	for i := range res.Providers {
		pv := &res.Providers[i]
		path := "providers[" + strconv.Itoa(i) + "]"
		for _, field := range []string{"cluster", "authority"} {
			if strings.Contains(gjson.GetBytes(doc, "providers."+strconv.Itoa(i)+"."+field).String(), "${") {
				policyProblem(path+"."+field, "must be literal in a mesh (Render replaces it with Istio's name)")
			}
		}
		var u upstream
		if raw, ok := s.Upstreams[pv.Cluster]; ok {
			parsed, err := parseUpstream(raw)
			if err != nil {
				errs.badKey("Upstreams", pv.Cluster, "%q: %v", raw, err)
				continue
			}
			u = parsed
		} else if pv.Authority != "" {
			parsed, err := parseUpstream("https://" + pv.Authority)
			if err != nil {
				policyProblem(path+".authority", "%v", err)
				continue
			}
			u = parsed
		} else {
			policyProblem(path+".cluster", "cluster %q has no upstream: give it one in Upstreams (-upstream %s=https://host) or set the provider's authority", pv.Cluster, pv.Cluster)
			continue
		}
		if auth := pv.Authority; auth != "" && auth != u.host {
			policyProblem(path+".authority", "%q must be its upstream's host %q in a mesh, where the router finds a provider's route by its authority", auth, u.host)
		}
		if !u.external && s.Attach == AttachSidecar && u.port != s.Port {
			errs.badKey("Upstreams", pv.Cluster, "a sidecar reaches an in-mesh provider only on Port %d (the outbound listener the filter runs on), not %d", s.Port, u.port)
		}
		if prev, ok := s.upstreams[pv.Cluster]; ok && prev != u {
			policyProblem(path+".authority", "cluster %q already has another upstream (%s)", pv.Cluster, describeUpstreams(prev, u))
		}
		s.upstreams[pv.Cluster] = u
	}
	byHost := map[string]upstream{}
	for _, cluster := range slices.Sorted(maps.Keys(s.upstreams)) {
		u := s.upstreams[cluster]
		if prev, ok := byHost[u.host]; ok && prev != u {
			errs.badKey("Upstreams", cluster, "host %q: two clusters reach it differently (%s)", u.host, describeUpstreams(prev, u))
		}
		byHost[u.host] = u
		if slices.Contains(s.Hosts, u.host) {
			errs.bad("Hosts", "%q is also a provider's upstream host", u.host)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("istio: %w", errors.Join(errs...))
	}
	return nil
}

func describeUpstreams(a, b upstream) string {
	d := func(u upstream) string {
		scheme := "http"
		if u.external {
			scheme = "https"
		}
		return scheme + "://" + u.host + ":" + strconv.FormatUint(uint64(u.port), 10)
	}
	return d(a) + " and " + d(b)
}

// meshPolicy rewrites the policy document for the mesh: each provider's cluster becomes
// its Istio cluster name, its authority its upstream host, and routing.clusterHeader is set
// (to policies.RoutingClusterHeader unless the policy names another): istiod's routes match
// that header, so the filter names the cluster there (policies.RoutingSettings.
// ClusterByHeader) instead of in the filter state a standalone bootstrap's route reads. The
// result is parsed again.
func (s *settings) meshPolicy(doc []byte, res *policies.Resolved) ([]byte, map[string]string, error) {
	clusters := map[string]string{}
	out, err := sjson.SetBytes(doc, "routing.clusterHeader", res.Routing.ClusterHeader)
	if err != nil {
		return nil, nil, fmt.Errorf("istio: policy: %w", err)
	}
	for i := range res.Providers {
		pv := &res.Providers[i]
		u := s.upstreams[pv.Cluster]
		cn := clusterName(s.servicePort(u), u.host)
		clusters[pv.Cluster] = cn
		path := "providers." + strconv.Itoa(i)
		if out, err = sjson.SetBytes(out, path+".cluster", cn); err != nil {
			return nil, nil, fmt.Errorf("istio: policy: %w", err)
		}
		if out, err = sjson.SetBytes(out, path+".authority", u.host); err != nil {
			return nil, nil, fmt.Errorf("istio: policy: %w", err)
		}
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		return nil, nil, fmt.Errorf("istio: policy: %w", err)
	}
	out = pretty.Bytes()
	env := &envRecorder{inline: s.InlineEnv, seen: map[string]bool{}}
	if _, err := policies.Parse(out, policies.ParseOptions{LookupEnv: env.lookup}); err != nil {
		return nil, nil, fmt.Errorf("istio: the policy with Istio's cluster names: %w", err)
	}
	return out, clusters, nil
}
