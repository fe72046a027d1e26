package istio

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/spillwayproxy/spillway/internal/failurepolicy"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// Mode is how the filter is attached to the proxy.
type Mode string

const (
	// ModeFull attaches the filter with an EnvoyFilter: an EXTENSION_CONFIG (the typed Wasm
	// configuration with allow_on_headers_stop_iteration: true) served over ECDS and an
	// HTTP_FILTER that reads it through config_discovery. Every Spillway feature works.
	ModeFull Mode = "full"
	// ModeWasmPlugin attaches it with a WasmPlugin (extensions.istio.io/v1alpha1, Istio ≥
	// 1.12), which cannot set allow_on_headers_stop_iteration: the policy must run the
	// filter's header-routed mode.
	ModeWasmPlugin Mode = "wasmplugin"
	// ModeTrafficExtension attaches it with a TrafficExtension (extensions.istio.io/v1alpha1,
	// Istio ≥ 1.30), WasmPlugin's successor, with the same limits.
	ModeTrafficExtension Mode = "trafficextension"
)

// Modes lists every mode, in a stable order.
var Modes = []Mode{ModeFull, ModeWasmPlugin, ModeTrafficExtension}

// Attach is which proxy runs the filter.
type Attach string

const (
	// AttachGateway runs it in an ingress gateway (EnvoyFilter context GATEWAY): clients
	// call the gateway's hosts.
	AttachGateway Attach = "gateway"
	// AttachSidecar runs it in the client workload's own sidecar (context
	// SIDECAR_OUTBOUND): the application calls a mesh-internal frontend host over plain
	// HTTP and its sidecar routes the call.
	AttachSidecar Attach = "sidecar"
)

// Attachments lists every attachment, in a stable order.
var Attachments = []Attach{AttachGateway, AttachSidecar}

// FailurePolicy is what the proxy does with requests once the filter's VM has failed
// (Envoy's PluginConfig.failure_policy; WasmPlugin's failStrategy).
type FailurePolicy string

const (
	// FailReload starts a fresh VM for the next request (Envoy FAIL_RELOAD, WasmPlugin
	// FAIL_RELOAD), DefaultFailurePolicy. Shared data, where Spillway keeps its state, survives.
	FailReload FailurePolicy = "reload"
	// FailClosed answers every request 503 until the proxy restarts (FAIL_CLOSED /
	// FAIL_CLOSE).
	FailClosed FailurePolicy = "closed"
	// FailOpen passes requests through without the filter (FAIL_OPEN). Render refuses it
	// (ErrFailOpen): istiod's routes find a provider by :authority and the cluster header,
	// which a client can send as well as the filter.
	FailOpen FailurePolicy = "open"
)

// FailurePolicies lists every failure policy, in a stable order.
var FailurePolicies = []FailurePolicy{FailReload, FailClosed, FailOpen}

// DefaultFailurePolicy is the failure policy whose failure_policy is the one Spillway ships
// (internal/failurepolicy.Default), as the standalone bootstrap and hostsim default to it.
var DefaultFailurePolicy = func() FailurePolicy {
	for _, f := range FailurePolicies {
		if envoyFailurePolicy(f).String() == failurepolicy.Default {
			return f
		}
	}
	panic("istio: no failure policy is " + failurepolicy.Default)
}()

// errFailOpen is why Render refuses FailOpen, in every mode: the routes are istiod's, built
// from VirtualServices that find a provider's route by :authority and match the cluster
// header (routing.clusterHeader) the filter sets, and a client can send both headers. Once
// a VM failure makes Envoy skip the filter (FAIL_OPEN; WasmPlugin and TrafficExtension
// failStrategy FAIL_OPEN), nothing removes a client's values, so the client would pick the
// provider and reach it without Spillway. The standalone bootstrap routes on filter state
// instead, which no client can write (envoy.Bootstrap), and allows it.
const errFailOpen = `"open" (fail-open) is refused for Istio: istiod's routes pick a provider by the :authority and ` +
	`cluster header the filter sets, which a client can send too, so with the filter skipped after a VM failure a client ` +
	`would choose the provider; use reload (the default) or closed`

// StatsTag is one Envoy stats tag: a tag name and the regex that extracts it from a stat
// name (Envoy's config.metrics.v3.TagSpecifier). The tags for Spillway's metric names come
// from plugin/stats; Render takes them as an option.
type StatsTag struct {
	Name  string
	Regex string
}

// Options say where and how Render attaches the filter.
type Options struct {
	// Mode is the attachment: ModeFull (default), ModeWasmPlugin or ModeTrafficExtension.
	Mode Mode
	// Attach is the proxy: AttachGateway (default) or AttachSidecar.
	Attach Attach
	// Namespace receives every resource (required): the gateway's namespace, or the client
	// workload's namespace for a sidecar. Every resource is exported to it alone.
	Namespace string
	// Name prefixes every resource name and names the filter; default "spillway".
	Name string
	// Image is the module's OCI image, "oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]"
	// (required), as `make oci` pushes it.
	Image string
	// ImageDigest is the image's manifest digest, "sha256:<64 hex>": what istio-agent
	// compares for an oci:// module (pkg/wasm/cache.go, getOrFetch). Required unless
	// Image names its digest; when both are given they must agree.
	ImageDigest string
	// ImagePullSecret names a kubernetes.io/dockerconfigjson Secret in Namespace for a
	// private registry (WasmPlugin and TrafficExtension only: an EnvoyFilter cannot name
	// one; istio-agent then uses its own keychain).
	ImagePullSecret string
	// Selector are the labels of the workload that runs the filter. Gateway default
	// {"istio": "ingressgateway"}; a sidecar must name its workload.
	Selector map[string]string
	// Hosts are the hosts clients call Spillway on. Gateway: the hosts of the Gateway server
	// (required); sidecar: the mesh-internal frontend host (default "spillway.llm").
	Hosts []string
	// Gateway binds to an existing Gateway, "namespace/name"; empty: Render emits one
	// named Name in Namespace. The existing Gateway's server must list every host of Hosts
	// and of the providers.
	Gateway string
	// GatewayPort is the port of the Gateway server clients reach (default 80, or 443
	// with GatewayCredential).
	GatewayPort uint32
	// GatewayListenerPort is the port the gateway's Envoy listener for GatewayPort binds:
	// the gateway Service's targetPort for it, since istiod binds gateway listeners to the
	// target port (pilot/pkg/model/gateway.go, resolvePorts). Spillway raises that
	// listener's per_connection_buffer_limit_bytes. Default GatewayPort, as the gateway Helm
	// chart maps its ports (manifests/charts/gateway/values.yaml: 80 to 80, 443 to 443);
	// the istio-ingressgateway istioctl installs maps 80 to 8080 and 443 to 8443
	// (manifests/charts/gateways/istio-ingress/values.yaml).
	GatewayListenerPort uint32
	// GatewayCredential makes the emitted Gateway terminate TLS (HTTPS on GatewayPort)
	// with this Secret (credentialName); empty: plain HTTP.
	GatewayCredential string
	// Port is the ServiceEntry port of every external provider, the port in its Istio
	// cluster name outbound|Port||host; traffic leaves on the provider's own port (443)
	// with TLS originated by the DestinationRule. For a sidecar it is also the frontend's
	// port: the outbound listener the filter runs on. Default 80.
	Port uint32
	// Upstreams maps a policy cluster name to its upstream: "https://host[:port]" for an
	// external provider (ServiceEntry + DestinationRule with TLS origination), or
	// "http://host:port" for a provider inside the mesh (a Kubernetes Service; nothing
	// emitted for it). Default for a provider with an authority: https://<authority>.
	Upstreams map[string]string
	// FailurePolicy is FailReload, FailClosed or FailOpen (default DefaultFailurePolicy).
	FailurePolicy FailurePolicy
	// InlineEnv sets VM environment variables in the resource itself (visible to anyone
	// who can read it: never a credential). Every other variable the policy references
	// (${NAME}) is read from the proxy container's environment (host_env_keys).
	InlineEnv map[string]string
	// StatsTags, when set, are emitted as Envoy stats_tags in a bootstrap-override
	// ConfigMap (annotation sidecar.istio.io/bootstrapOverride on the proxy's pod).
	StatsTags []StatsTag
	// IstioMinor is the Istio release the resources are for, 1.IstioMinor (flag
	// -istio-version). In the Full mode, where failover goes through the router unless the
	// policy says callout, the switches the policy leaves unset are chosen for the Envoy that
	// release ships (envoyrelease.IstioEnvoy; holdTries from Istio 1.29, Envoy 1.37) and the
	// ones it sets are checked against it; crossCluster is refused in every release (see
	// Render). Default envoyrelease.OldestIstio (1.28, Envoy 1.36), the oldest supported: a
	// default never switches on what a supported proxy runs as undefined behaviour.
	IstioMinor int
}

// Defaults of Options.
const (
	DefaultName         = "spillway"
	DefaultSidecarHost  = "spillway.llm"
	DefaultPort         = 80
	defaultHTTPGateway  = 80
	defaultHTTPSGateway = 443
)

// settings are Options with every default applied and every value checked.
type settings struct {
	Options
	imageRef    string // the image reference without "oci://": REPOSITORY:TAG or REPOSITORY@sha256:DIGEST
	digestHex   string // the manifest digest's 64 hex digits
	gatewayRef  string // the Gateway the VirtualServices bind to, "namespace/name"
	emitGateway bool
	upstreams   map[string]upstream // by policy cluster name
}

// upstream is where one policy cluster's requests go in the mesh.
type upstream struct {
	host     string // the ServiceEntry host, also the request's :authority
	port     uint32 // the port traffic leaves on (443 for an external HTTPS provider)
	external bool   // an external HTTPS provider: ServiceEntry + DestinationRule
}

// clusterName is Istio's cluster for an upstream (pilot/pkg/model, BuildSubsetKey:
// "outbound|<port>|<subset>|<host>"), where svcPort is the ServiceEntry or Service port.
func clusterName(svcPort uint32, host string) string {
	return "outbound|" + strconv.FormatUint(uint64(svcPort), 10) + "||" + host
}

func (s *settings) servicePort(u upstream) uint32 {
	if u.external {
		return s.Port
	}
	return u.port
}

// OptionError is a problem with one field of Options. Render reports every problem it
// finds, each its own error (errors.Join), after "istio: options: ".
type OptionError struct {
	// Option is the Options field: "Namespace", "ImageDigest", "Upstreams".
	Option string
	// Key is the entry of a map option (a cluster of Upstreams, a name of InlineEnv) the
	// problem is about, or "".
	Key string
	// Message says what is wrong and what is wanted.
	Message string
}

// Error formats the problem as `Option: message`, or `Option["key"]: message`.
func (e OptionError) Error() string {
	if e.Key != "" {
		return e.Option + "[" + strconv.Quote(e.Key) + "]: " + e.Message
	}
	return e.Option + ": " + e.Message
}

// optionProblems collects the OptionErrors of one check.
type optionProblems []error

func (p *optionProblems) bad(option, format string, args ...any) {
	*p = append(*p, OptionError{Option: option, Message: fmt.Sprintf(format, args...)})
}

func (p *optionProblems) badKey(option, key, format string, args ...any) {
	*p = append(*p, OptionError{Option: option, Key: key, Message: fmt.Sprintf(format, args...)})
}

// checkOptions applies the defaults and checks every option.
func checkOptions(o Options) (*settings, error) {
	s := &settings{Options: o}
	var errs optionProblems
	bad := errs.bad

	if s.Mode == "" {
		s.Mode = ModeFull
	}
	if !slices.Contains(Modes, s.Mode) {
		bad("Mode", "%q: want one of %s", s.Mode, joinQuoted(Modes))
	}
	if s.Attach == "" {
		s.Attach = AttachGateway
	}
	if !slices.Contains(Attachments, s.Attach) {
		bad("Attach", "%q: want one of %s", s.Attach, joinQuoted(Attachments))
	}
	if s.FailurePolicy == "" {
		s.FailurePolicy = DefaultFailurePolicy
	}
	switch {
	case s.FailurePolicy == FailOpen:
		bad("FailurePolicy", "%s", errFailOpen)
	case !slices.Contains(FailurePolicies, s.FailurePolicy):
		bad("FailurePolicy", "%q: want one of %s", s.FailurePolicy, joinQuoted(FailurePolicies))
	}
	if s.IstioMinor == 0 {
		s.IstioMinor = envoyrelease.OldestIstio
	}
	if s.IstioMinor < envoyrelease.OldestIstio {
		bad("IstioMinor", "Istio 1.%d is not supported (1.%d or newer)", s.IstioMinor, envoyrelease.OldestIstio)
	}
	if s.Name == "" {
		s.Name = DefaultName
	}
	if msg := dnsLabel(s.Name); msg != "" {
		bad("Name", "%q: %s", s.Name, msg)
	}
	if s.Namespace == "" {
		bad("Namespace", "required")
	} else if msg := dnsLabel(s.Namespace); msg != "" {
		bad("Namespace", "%q: %s", s.Namespace, msg)
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	if s.Port > 65535 {
		bad("Port", "%d: not a port number", s.Port)
	}
	s.Selector = maps.Clone(s.Selector)
	if len(s.Selector) == 0 {
		if s.Attach == AttachSidecar {
			bad("Selector", "a sidecar must name its workload's labels")
		} else {
			s.Selector = map[string]string{"istio": "ingressgateway"}
		}
	}
	s.Hosts = slices.Clone(s.Hosts)
	if len(s.Hosts) == 0 {
		if s.Attach == AttachSidecar {
			s.Hosts = []string{DefaultSidecarHost}
		} else {
			bad("Hosts", "a gateway needs the hosts clients call it on")
		}
	}
	for _, h := range s.Hosts {
		if msg := fqdn(h); msg != "" {
			bad("Hosts", "%q: %s", h, msg)
		}
	}
	if dup := firstDuplicate(s.Hosts); dup != "" {
		bad("Hosts", "%q listed twice", dup)
	}
	s.checkGateway(bad)
	s.checkImage(bad)
	if s.ImagePullSecret != "" && s.Mode == ModeFull {
		bad("ImagePullSecret", "an EnvoyFilter cannot name one (istio-agent pulls with its own keychain); use a public image or the WasmPlugin modes")
	}
	if _, ok := s.InlineEnv[""]; ok {
		bad("InlineEnv", "a variable without a name")
	}
	for i, t := range s.StatsTags {
		if t.Name == "" || t.Regex == "" {
			bad("StatsTags", "entry %d: name and regex are required", i)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("istio: options: %w", errors.Join(errs...))
	}
	return s, nil
}

func (s *settings) checkGateway(bad func(string, string, ...any)) {
	if s.Attach == AttachSidecar {
		for _, o := range []struct {
			option string
			set    bool
		}{{"Gateway", s.Gateway != ""}, {"GatewayPort", s.GatewayPort != 0}, {"GatewayListenerPort", s.GatewayListenerPort != 0},
			{"GatewayCredential", s.GatewayCredential != ""}} {
			if o.set {
				bad(o.option, "only for a gateway attachment")
			}
		}
		s.gatewayRef = "mesh"
		return
	}
	if s.GatewayPort == 0 {
		s.GatewayPort = defaultHTTPGateway
		if s.GatewayCredential != "" {
			s.GatewayPort = defaultHTTPSGateway
		}
	}
	if s.GatewayPort > 65535 {
		bad("GatewayPort", "%d: not a port number", s.GatewayPort)
	}
	if s.GatewayListenerPort == 0 {
		s.GatewayListenerPort = s.GatewayPort
	}
	if s.GatewayListenerPort > 65535 {
		bad("GatewayListenerPort", "%d: not a port number", s.GatewayListenerPort)
	}
	if s.Gateway == "" {
		s.emitGateway = true
		s.gatewayRef = s.Namespace + "/" + s.Name
		return
	}
	if s.GatewayCredential != "" {
		bad("GatewayCredential", "only for the Gateway Render emits (the existing %q has its own)", s.Gateway)
	}
	ns, gw, ok := strings.Cut(s.Gateway, "/")
	if !ok || dnsLabel(ns) != "" || dnsLabel(gw) != "" {
		bad("Gateway", "%q: want namespace/name", s.Gateway)
	}
	s.gatewayRef = s.Gateway
}

func (s *settings) checkImage(bad func(string, string, ...any)) {
	ref, ok := strings.CutPrefix(s.Image, ociScheme)
	if !ok {
		bad("Image", "%q: want oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]", s.Image)
		return
	}
	parsed, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		bad("Image", "%q: %v", s.Image, err)
		return
	}
	digest := ""
	if d, isDigest := parsed.(name.Digest); isDigest {
		// Keep the digest in the reference: istio-agent fetches what the URL names, and a
		// repository without tag or digest would be read as :latest
		// (pkg/wasm/imagefetcher.go, PrepareFetch; name.ParseReference).
		digest = d.DigestStr()
		ref = d.Context().Name() + "@" + digest
	}
	if s.ImageDigest != "" {
		if digest != "" && digest != s.ImageDigest {
			bad("ImageDigest", "%q differs from the image's %q", s.ImageDigest, digest)
		}
		digest = s.ImageDigest
	}
	hex, ok := strings.CutPrefix(digest, "sha256:")
	switch {
	case digest == "":
		bad("ImageDigest", "required (the manifest digest `make oci` prints) unless the image names it (@sha256:...)")
	case !ok || !isSHA256Hex(hex):
		bad("ImageDigest", "%q: want sha256:<64 lower-case hex digits>", digest)
	}
	s.imageRef, s.digestHex = ref, hex
}

// parseUpstream reads an Upstreams value.
func parseUpstream(raw string) (upstream, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return upstream{}, fmt.Errorf("want https://host[:port] or http://host:port")
	}
	host := u.Hostname()
	if msg := fqdn(host); msg != "" {
		return upstream{}, fmt.Errorf("host %q: %s", host, msg)
	}
	port := uint32(443)
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return upstream{}, fmt.Errorf("port %q: not a port number", p)
		}
		port = uint32(n)
	}
	switch u.Scheme {
	case "https":
		return upstream{host: host, port: port, external: true}, nil
	case "http":
		if u.Port() == "" {
			return upstream{}, fmt.Errorf("an in-mesh upstream names its Service port (http://host:port)")
		}
		return upstream{host: host, port: port}, nil
	}
	return upstream{}, fmt.Errorf("scheme %q: want https (external, TLS originated) or http (a Service in the mesh)", u.Scheme)
}

// dnsLabel checks a Kubernetes namespace or resource name (RFC 1123 label).
func dnsLabel(s string) string {
	if len(s) == 0 || len(s) > 63 {
		return "must be 1 to 63 characters"
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '-' || i == 0 || i == len(s)-1) {
			return "must be lower-case letters, digits and '-', starting and ending with a letter or digit"
		}
	}
	return ""
}

// fqdn checks a host name: dot-separated RFC 1123 labels, no wildcard, at most 253
// characters.
func fqdn(h string) string {
	if len(h) == 0 || len(h) > 253 {
		return "must be 1 to 253 characters"
	}
	for _, label := range strings.Split(h, ".") {
		if msg := dnsLabel(label); msg != "" {
			return "not a host name (each dot-separated part " + msg + ")"
		}
	}
	return ""
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func firstDuplicate(xs []string) string {
	seen := make(map[string]bool, len(xs))
	for _, x := range xs {
		if seen[x] {
			return x
		}
		seen[x] = true
	}
	return ""
}

func joinQuoted[T ~string](xs []T) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(string(x))
	}
	return strings.Join(q, ", ")
}
