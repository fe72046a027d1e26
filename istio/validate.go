package istio

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	typeapi "istio.io/api/type/v1beta1"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
)

// Problem is one thing wrong with a resource: which object, the field path inside it
// ("spec.configPatches[1].patch.value.typed_config"), and what.
type Problem struct {
	Object  string
	Path    string
	Message string
}

func (p Problem) Error() string {
	if p.Path == "" {
		return p.Object + ": " + p.Message
	}
	return p.Object + ": " + p.Path + ": " + p.Message
}

// Problems are every problem of a manifest set, in document order.
type Problems []Problem

func (ps Problems) Error() string {
	var b strings.Builder
	b.WriteString("istio: ")
	if len(ps) == 1 {
		b.WriteString(ps[0].Error())
		return b.String()
	}
	b.WriteString(strconv.Itoa(len(ps)))
	b.WriteString(" problems:")
	for _, p := range ps {
		b.WriteString("\n")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Validate checks a multi-document manifest stream: strict decoding with istio.io/api and
// istio.io/client-go types (DecodeYAML), then the rules istiod's validation webhook and
// its config translation enforce for the fields Spillway uses (each rule cites the istio
// function it follows), then Spillway's own: the filter's configuration is complete (the
// ECDS Wasm config sets allow_on_headers_stop_iteration, an explicit failure policy, a
// pinned oci:// module and a valid policy), a raised virtual host buffer limit for a filter
// that holds request headers comes with a listener buffer limit at least as large on a
// named port, and every cluster the policy names is routed by a VirtualService to that
// cluster. Every problem is reported, as
// Problems.
func Validate(manifests []byte) error {
	objects, err := DecodeYAML(manifests)
	if err != nil {
		return err
	}
	return ValidateObjects(objects)
}

// ValidateObjects runs Validate's rules on decoded objects.
func ValidateObjects(objects []Object) error {
	v := &validator{}
	for i := range objects {
		v.object(&objects[i])
	}
	v.crossChecks(objects)
	if len(v.problems) > 0 {
		return v.problems
	}
	return nil
}

type validator struct {
	problems Problems
	cur      string
	// collected across objects for the cross checks
	extensionConfigs map[string]bool // EXTENSION_CONFIG names added by EnvoyFilters
	filterRefs       []filterRef     // HTTP_FILTERs that read an extension config
	policies         []policyRef     // the policies the filter attachments carry
}

type filterRef struct{ object, path, name string }

type policyRef struct {
	object, path string
	clusters     []string // the providers' cluster names
}

func (v *validator) fail(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Object: v.cur, Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) failErr(path string, err error) {
	if err != nil {
		v.fail(path, "%v", err)
	}
}

func (v *validator) object(o *Object) {
	v.cur = o.ID()
	v.metadata(o)
	switch spec := o.Spec.(type) {
	case *networking.ServiceEntry:
		v.serviceEntry(spec)
	case *networking.DestinationRule:
		v.destinationRule(spec)
	case *networking.VirtualService:
		v.virtualService(spec)
	case *networking.Gateway:
		v.gateway(spec)
	case *networking.EnvoyFilter:
		v.envoyFilter(spec)
	case *extensionsapi.WasmPlugin:
		v.wasmPlugin(spec)
	case *extensionsapi.TrafficExtension:
		v.trafficExtension(spec)
	case nil:
		v.configMap(o)
	}
}

// metadata: Kubernetes names (the API server's rules: a DNS-1123 subdomain name, a
// DNS-1123 label namespace, qualified label keys and valid label values).
func (v *validator) metadata(o *Object) {
	if o.Name == "" {
		v.fail("metadata.name", "required")
	}
	for _, msg := range k8svalidation.IsDNS1123Subdomain(o.Name) {
		if o.Name != "" {
			v.fail("metadata.name", "%s", msg)
		}
	}
	if o.Namespace == "" {
		v.fail("metadata.namespace", "required (Spillway's resources are exported to their own namespace)")
	}
	for _, msg := range k8svalidation.IsDNS1123Label(o.Namespace) {
		if o.Namespace != "" {
			v.fail("metadata.namespace", "%s", msg)
		}
	}
	for k, val := range o.Labels {
		for _, msg := range k8svalidation.IsQualifiedName(k) {
			v.fail("metadata.labels", "%q: %s", k, msg)
		}
		for _, msg := range k8svalidation.IsValidLabelValue(val) {
			v.fail("metadata.labels["+k+"]", "%s", msg)
		}
	}
}

// exportTo follows validateExportTo (pkg/config/validation/validation.go): ".", "*" or
// namespace names, no duplicates, "*" alone.
func (v *validator) exportTo(exportTo []string) {
	seen := map[string]bool{}
	for i, e := range exportTo {
		path := fmt.Sprintf("spec.exportTo[%d]", i)
		if seen[e] {
			v.fail(path, "duplicate entry %q", e)
		}
		seen[e] = true
		if e != "." && e != "*" && dnsLabel(e) != "" {
			v.fail(path, "%q: want \".\", \"*\" or a namespace", e)
		}
	}
	if seen["*"] && len(exportTo) > 1 {
		v.fail("spec.exportTo", "\"*\" must be the only entry")
	}
}

// host checks a service host (agent.ValidateWildcardDomain): a host name, optionally with
// a leading "*." wildcard.
func (v *validator) host(path, h string, wildcardOK bool) {
	name := h
	if wildcardOK {
		name = strings.TrimPrefix(h, "*.")
	}
	if h == "*" {
		v.fail(path, "the host \"*\" is not allowed")
		return
	}
	if msg := fqdn(name); msg != "" {
		v.fail(path, "%q: %s", h, msg)
	}
}

func (v *validator) port(path string, n uint32) {
	if n == 0 || n > 65535 {
		v.fail(path, "port %d: must be 1-65535", n)
	}
}

// serviceProtocols are the ServiceEntry port protocols istiod accepts (ValidateProtocol,
// pkg/config/protocol).
var serviceProtocols = []string{"HTTP", "HTTPS", "HTTP2", "HTTP_PROXY", "GRPC", "GRPC-WEB", "TCP", "TLS", "MONGO", "REDIS", "MYSQL", "UDP"}

// serviceEntry follows ValidateServiceEntry.
func (v *validator) serviceEntry(se *networking.ServiceEntry) {
	v.exportTo(se.ExportTo)
	if len(se.Hosts) == 0 {
		v.fail("spec.hosts", "a service entry must have at least one host")
	}
	for i, h := range se.Hosts {
		v.host(fmt.Sprintf("spec.hosts[%d]", i), h, true)
		if strings.HasPrefix(h, "*") && (se.Resolution == networking.ServiceEntry_DNS || se.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN) && len(se.Endpoints) == 0 {
			v.fail(fmt.Sprintf("spec.hosts[%d]", i), "hosts must be FQDN if no endpoints are provided for resolution %s", se.Resolution)
		}
	}
	if se.WorkloadSelector != nil && len(se.Endpoints) > 0 {
		v.fail("spec", "only one of workloadSelector or endpoints is allowed")
	}
	if se.Resolution == networking.ServiceEntry_NONE && len(se.Endpoints) > 0 {
		v.fail("spec.endpoints", "no endpoints should be provided for resolution type NONE")
	}
	names, numbers := map[string]bool{}, map[uint32]bool{}
	for i, p := range se.Ports {
		path := fmt.Sprintf("spec.ports[%d]", i)
		if p == nil {
			v.fail(path, "may not be null")
			continue
		}
		if names[p.Name] {
			v.fail(path+".name", "port name %q already defined", p.Name)
		}
		if numbers[p.Number] {
			v.fail(path+".number", "port %d already defined", p.Number)
		}
		names[p.Name], numbers[p.Number] = true, true
		v.port(path+".number", p.Number)
		if p.TargetPort != 0 {
			v.port(path+".targetPort", p.TargetPort)
		}
		if msg := dnsLabel(p.Name); msg != "" {
			v.fail(path+".name", "%q: %s", p.Name, msg)
		}
		if !slices.Contains(serviceProtocols, strings.ToUpper(p.Protocol)) {
			v.fail(path+".protocol", "unrecognized protocol %q", p.Protocol)
		}
	}
}

// destinationRule follows ValidateDestinationRule and validatePortTrafficPolicies,
// validateTLS.
func (v *validator) destinationRule(dr *networking.DestinationRule) {
	v.exportTo(dr.ExportTo)
	if dr.Host == "" {
		v.fail("spec.host", "required")
	} else {
		v.host("spec.host", dr.Host, true)
	}
	tp := dr.TrafficPolicy
	if tp == nil {
		return
	}
	v.clientTLS("spec.trafficPolicy.tls", tp.Tls)
	seen := map[uint32]bool{}
	for i, pl := range tp.PortLevelSettings {
		path := fmt.Sprintf("spec.trafficPolicy.portLevelSettings[%d]", i)
		if pl == nil {
			v.fail(path, "may not be null")
			continue
		}
		if pl.Port == nil {
			v.fail(path+".port", "portLevelSettings must specify port")
			continue
		}
		v.port(path+".port.number", pl.Port.Number)
		if seen[pl.Port.Number] {
			v.fail(path+".port.number", "port %d has two portLevelSettings", pl.Port.Number)
		}
		seen[pl.Port.Number] = true
		if pl.LoadBalancer == nil && pl.ConnectionPool == nil && pl.OutlierDetection == nil && pl.Tls == nil {
			v.fail(path, "port traffic policy must have at least one field")
		}
		v.clientTLS(path+".tls", pl.Tls)
	}
}

// clientTLS follows validateTLS: MUTUAL needs a credential or certificate files, a
// credentialName excludes the files, and a SIMPLE origination to an external host must
// say which name to verify (Spillway's rule: without sni and subjectAltNames Istio checks
// the chain against the system roots but not the name, cluster_tls.go constructUpstreamTLS).
func (v *validator) clientTLS(path string, tls *networking.ClientTLSSettings) {
	if tls == nil {
		return
	}
	if tls.CredentialName != "" && (tls.ClientCertificate != "" || tls.PrivateKey != "" || tls.CaCertificates != "") {
		v.fail(path, "cannot specify client certificates or CA certificate files with credentialName")
	}
	switch tls.Mode {
	case networking.ClientTLSSettings_MUTUAL:
		if tls.CredentialName == "" && (tls.ClientCertificate == "" || tls.PrivateKey == "") {
			v.fail(path, "client certificate and private key required for MUTUAL")
		}
	case networking.ClientTLSSettings_SIMPLE:
		if tls.Sni == "" {
			v.fail(path+".sni", "required: the name TLS is originated to")
		}
		if len(tls.SubjectAltNames) == 0 && !tls.GetInsecureSkipVerify().GetValue() {
			v.fail(path+".subjectAltNames", "required: without it the server certificate's name is not verified")
		}
	}
}

// gateway follows ValidateGateway and validateServer, validateTLSOptions.
func (v *validator) gateway(gw *networking.Gateway) {
	if len(gw.Servers) == 0 {
		v.fail("spec.servers", "gateway must have at least one server")
	}
	for k, val := range gw.Selector {
		if k == "" || strings.Contains(k, "*") || strings.Contains(val, "*") {
			v.fail("spec.selector", "%q=%q: empty keys and wildcards are not supported", k, val)
		}
	}
	portNames := map[string]bool{}
	for i, s := range gw.Servers {
		path := fmt.Sprintf("spec.servers[%d]", i)
		if s == nil {
			v.fail(path, "server may not be null")
			continue
		}
		if len(s.Hosts) == 0 {
			v.fail(path+".hosts", "server config must contain at least one host")
		}
		for j, h := range s.Hosts {
			hp := fmt.Sprintf("%s.hosts[%d]", path, j)
			ns, host, ok := strings.Cut(h, "/")
			if !ok {
				host = ns
			} else if ns != "." && ns != "*" && dnsLabel(ns) != "" {
				v.fail(hp, "%q: namespace must be \".\", \"*\" or a namespace", h)
			}
			if host != "*" {
				v.host(hp, host, true)
			}
		}
		if s.Port == nil {
			v.fail(path+".port", "required")
			continue
		}
		v.port(path+".port.number", s.Port.Number)
		if s.Port.Name == "" {
			v.fail(path+".port.name", "required")
		} else if portNames[s.Port.Name] {
			v.fail(path+".port.name", "port names in servers must be unique: duplicate %q", s.Port.Name)
		}
		portNames[s.Port.Name] = true
		proto := strings.ToUpper(s.Port.Protocol)
		if !slices.Contains(serviceProtocols, proto) {
			v.fail(path+".port.protocol", "unrecognized protocol %q", s.Port.Protocol)
		}
		if proto == "HTTPS" {
			switch {
			case s.Tls == nil:
				v.fail(path+".tls", "server must have TLS settings for HTTPS/TLS protocols")
			case s.Tls.Mode == networking.ServerTLSSettings_SIMPLE && s.Tls.CredentialName == "" && len(s.Tls.CredentialNames) == 0 && (s.Tls.ServerCertificate == "" || s.Tls.PrivateKey == ""):
				v.fail(path+".tls", "SIMPLE TLS requires a credentialName or a server certificate and private key")
			}
		}
	}
}

// validHeaderName is a lower-case HTTP header token (validHeaderNameRegex in istio's
// validation.go).
var validHeaderName = regexp.MustCompile("^[-_A-Za-z0-9]+$")

// virtualService follows ValidateVirtualService, validateHTTPRoute,
// validateHTTPRouteConflict, validateHTTPRouteMatchRequest, validateGatewayNames,
// validateHTTPRouteDestinations and validateHTTPDirectResponse, and treats what istiod
// reports as an unreachable rule (analyzeUnreachableHTTPRules) as an error.
func (v *validator) virtualService(vs *networking.VirtualService) {
	v.exportTo(vs.ExportTo)
	mesh := len(vs.Gateways) == 0 || slices.Contains(vs.Gateways, "mesh")
	if len(vs.Hosts) == 0 {
		v.fail("spec.hosts", "required (Spillway uses no delegate VirtualServices)")
	}
	for i, h := range vs.Hosts {
		if h == "*" && mesh {
			v.fail(fmt.Sprintf("spec.hosts[%d]", i), "wildcard host * is not allowed for virtual services bound to the mesh gateway")
			continue
		}
		v.host(fmt.Sprintf("spec.hosts[%d]", i), h, true)
	}
	if dup := firstDuplicate(vs.Hosts); dup != "" {
		v.fail("spec.hosts", "duplicate host %q", dup)
	}
	for i, g := range vs.Gateways {
		if g == "mesh" {
			continue
		}
		ns, name, ok := strings.Cut(g, "/")
		if !ok || dnsLabel(ns) != "" || dnsLabel(name) != "" {
			v.fail(fmt.Sprintf("spec.gateways[%d]", i), "%q: want <namespace>/<name> or mesh", g)
		}
	}
	if len(vs.Http) == 0 && len(vs.Tcp) == 0 && len(vs.Tls) == 0 {
		v.fail("spec", "http, tcp or tls must be provided in virtual service")
	}
	catchAll := -1
	for i, r := range vs.Http {
		path := fmt.Sprintf("spec.http[%d]", i)
		if r == nil {
			v.fail(path, "http route may not be null")
			continue
		}
		if catchAll >= 0 {
			v.fail(path, "unreachable: rule %d matches every request before it", catchAll)
		}
		if len(r.Match) == 0 && catchAll < 0 {
			catchAll = i
		}
		v.httpRoute(path, r)
	}
}

func (v *validator) httpRoute(path string, r *networking.HTTPRoute) {
	switch {
	case r.Redirect != nil && (len(r.Route) > 0 || r.DirectResponse != nil):
		v.fail(path, "HTTP route cannot contain both redirect and route or direct_response")
	case r.DirectResponse != nil && len(r.Route) > 0:
		v.fail(path, "HTTP route cannot contain both route and direct_response")
	case r.DirectResponse != nil && r.Rewrite != nil:
		v.fail(path, "HTTP route rule cannot contain both rewrite and direct_response")
	case r.Redirect == nil && r.DirectResponse == nil && len(r.Route) == 0:
		v.fail(path, "HTTP route, redirect or direct_response is required")
	}
	for j, m := range r.Match {
		for name, sm := range m.GetHeaders() {
			hp := fmt.Sprintf("%s.match[%d].headers[%s]", path, j, name)
			if !validHeaderName.MatchString(name) || strings.ToLower(name) != name {
				v.fail(hp, "header name %q is not a valid lower-case header name", name)
			}
			if sm == nil || sm.MatchType == nil {
				v.fail(hp, "header match cannot be empty")
			}
		}
	}
	v.headerOps(path+".headers", r.Headers)
	for j, d := range r.Route {
		dp := fmt.Sprintf("%s.route[%d]", path, j)
		if d.GetDestination() == nil {
			v.fail(dp+".destination", "destination is required")
			continue
		}
		v.host(dp+".destination.host", d.Destination.Host, true)
		if d.Destination.Port != nil {
			v.port(dp+".destination.port.number", d.Destination.Port.Number)
		}
		if d.Weight < 0 || d.Weight > 100 {
			v.fail(dp+".weight", "must be 0-100")
		}
		v.headerOps(dp+".headers", d.Headers)
	}
	if dr := r.DirectResponse; dr != nil {
		if dr.Status < 200 || dr.Status > 599 {
			v.fail(path+".directResponse.status", "%d: must be 200-599", dr.Status)
		}
		if n := len(dr.GetBody().GetString_()) + len(dr.GetBody().GetBytes()); n > 1<<20 {
			v.fail(path+".directResponse.body", "direct responses must be less than 1MB")
		}
	}
	if r.Timeout != nil && (r.Timeout.Seconds < 0 || r.Timeout.Nanos < 0) {
		v.fail(path+".timeout", "must not be negative")
	}
}

// headerOps follows ValidateHTTPHeaderOperationName: no pseudo headers and no Host.
func (v *validator) headerOps(path string, h *networking.Headers) {
	check := func(p string, ops *networking.Headers_HeaderOperations) {
		names := slices.Concat(ops.GetRemove(), sortedKeys(ops.GetSet()), sortedKeys(ops.GetAdd()))
		for _, name := range names {
			switch {
			case name == "":
				v.fail(p, "header name cannot be empty")
			case strings.EqualFold(name, "host") || strings.HasPrefix(name, ":"):
				v.fail(p, "invalid header %q: cannot change Host or a pseudo header", name)
			}
		}
	}
	check(path+".request", h.GetRequest())
	check(path+".response", h.GetResponse())
}

// wasmEnv follows validateWasmPluginVMConfig and the CRD limits (at most 256 variables,
// names of at most 256 and values of at most 2048 characters), plus istio-agent's:
// variables named ISTIO_META_* are deleted before Envoy sees them (pkg/wasm/convert.go,
// rewriteVMConfig), so the filter would never read them.
func (v *validator) wasmEnv(path string, vm *extensionsapi.VmConfig) []string {
	if len(vm.GetEnv()) > 256 {
		v.fail(path, "at most 256 environment variables")
	}
	seen := map[string]bool{}
	var names []string
	for i, e := range vm.GetEnv() {
		p := fmt.Sprintf("%s[%d]", path, i)
		if e == nil {
			v.fail(p, "may not be null")
			continue
		}
		v.envVar(p, e.Name, e.Value)
		if seen[e.Name] {
			v.fail(p+".name", "duplicate env %q", e.Name)
		}
		seen[e.Name] = true
		if e.ValueFrom != extensionsapi.EnvValueSource_INLINE && e.Value != "" {
			v.fail(p+".value", "value may only be set when valueFrom is INLINE")
		}
		names = append(names, e.Name)
	}
	return names
}

func (v *validator) envVar(path, name, value string) {
	switch {
	case name == "":
		v.fail(path+".name", "required")
	case len(name) > 256:
		v.fail(path+".name", "must be at most 256 characters")
	case strings.HasPrefix(name, "ISTIO_META_"):
		v.fail(path+".name", "%q: istio-agent strips ISTIO_META_* variables before the VM starts", name)
	}
	if len(value) > 2048 {
		v.fail(path+".value", "must be at most 2048 characters")
	}
}

// selectorOrTargetRefs follows validateOneOfSelectorType, validateWorkloadSelector and
// validatePolicyTargetReference(s): at most one of selector and targetRefs, no empty keys
// or wildcards, same-namespace targets of the kinds istiod attaches to.
func (v *validator) selectorOrTargetRefs(selector *typeapi.WorkloadSelector, targetRef *typeapi.PolicyTargetReference, targetRefs []*typeapi.PolicyTargetReference) {
	set := 0
	if selector != nil {
		set++
	}
	if targetRef != nil {
		set++
	}
	if len(targetRefs) > 0 {
		set++
	}
	if set > 1 {
		v.fail("spec", "only one of targetRefs or selector can be set")
	}
	if set == 0 {
		v.fail("spec", "neither selector nor targetRefs is set: the plugin would run in every workload of the namespace")
	}
	if selector != nil {
		if len(selector.MatchLabels) == 0 {
			v.fail("spec.selector", "workload selector specified without labels")
		}
		for k, val := range selector.MatchLabels {
			if k == "" || strings.Contains(k, "*") || strings.Contains(val, "*") {
				v.fail("spec.selector.matchLabels", "%q=%q: empty keys and wildcards are not supported", k, val)
			}
		}
	}
	refs := targetRefs
	if targetRef != nil {
		refs = append(refs, targetRef)
	}
	for i, r := range refs {
		p := fmt.Sprintf("spec.targetRefs[%d]", i)
		if r.Name == "" {
			v.fail(p+".name", "targetRef name must be set")
		}
		if r.Namespace != "" {
			v.fail(p+".namespace", "must not be set; cross namespace referencing is not supported")
		}
		group := r.Group
		if group == "" {
			group = "core"
		}
		ok := (group == "gateway.networking.k8s.io" && (r.Kind == "Gateway" || r.Kind == "GatewayClass")) ||
			(group == "core" && r.Kind == "Service") || (group == "networking.istio.io" && r.Kind == "ServiceEntry")
		if !ok {
			v.fail(p, "targetRef must be to a Gateway, GatewayClass, Service or ServiceEntry, not %s/%s", r.Group, r.Kind)
		}
	}
}

// wasmModule follows validateWasmPluginURL and the sha256 rules of the WasmPlugin API (a
// url that names a digest must agree with sha256), and Spillway's rule: the module comes from an
// oci:// image pinned by its sha256.
func (v *validator) wasmModule(path, url, sha string) {
	if url == "" {
		v.fail(path+".url", "url field needs to be set")
	} else if !strings.HasPrefix(url, ociScheme) {
		v.fail(path+".url", "%q: Spillway's module is an oci:// image (make oci)", url)
	}
	if _, pinned, ok := strings.Cut(url, "@sha256:"); ok && sha != "" && pinned != sha {
		v.fail(path+".sha256", "%q differs from the digest the url names (%s): istio-agent would refuse the module", sha, pinned)
	}
	switch {
	case sha == "":
		v.fail(path+".sha256", "required: pin the image's manifest digest")
	case !isSHA256Hex(sha):
		v.fail(path+".sha256", "sha256 field must match [a-f0-9]{64} pattern")
	}
}

// wasmPlugin follows ValidateWasmPlugin.
func (v *validator) wasmPlugin(wp *extensionsapi.WasmPlugin) {
	v.selectorOrTargetRefs(wp.Selector, wp.TargetRef, wp.TargetRefs)
	v.wasmFields("spec", wasmFields{url: wp.Url, sha: wp.Sha256, pullSecret: wp.ImagePullSecret,
		pluginName: wp.PluginName, typ: wp.Type, vm: wp.VmConfig, config: wp.PluginConfig,
		matchPorts: portsOf(wp.Match)})
}

// trafficExtension follows ValidateTrafficExtension.
func (v *validator) trafficExtension(te *extensionsapi.TrafficExtension) {
	v.selectorOrTargetRefs(te.Selector, nil, te.TargetRefs)
	wasm := te.GetWasm()
	if wasm == nil {
		v.fail("spec.wasm", "required: exactly one of wasm or lua must be set, and Spillway is Wasm")
		return
	}
	v.wasmFields("spec.wasm", wasmFields{url: wasm.Url, sha: wasm.Sha256, pullSecret: wasm.ImagePullSecret,
		pluginName: wasm.PluginName, typ: wasm.Type, vm: wasm.VmConfig, config: wasm.PluginConfig,
		matchPorts: portsOf(te.Match)})
}

// wasmFields are the module fields WasmPlugin's spec and TrafficExtension's spec.wasm share.
type wasmFields struct {
	url, sha, pullSecret, pluginName string
	typ                              extensionsapi.PluginType
	vm                               *extensionsapi.VmConfig
	config                           *structpb.Struct
	matchPorts                       [][]*typeapi.PortSelector // spec.match[i].ports, outside base
}

// wasmFields checks the module fields under base as both validations do, in their order:
// the module and its digest, the name limits, spec.match's ports, the filter type, the VM
// environment and the policy.
func (v *validator) wasmFields(base string, f wasmFields) {
	v.wasmModule(base, f.url, f.sha)
	if len(f.pullSecret) > 253 {
		v.fail(base+".imagePullSecret", "must be at most 253 characters")
	}
	if len(f.pluginName) > 256 {
		v.fail(base+".pluginName", "must be at most 256 characters")
	}
	for i, ports := range f.matchPorts {
		for j, p := range ports {
			v.port(fmt.Sprintf("spec.match[%d].ports[%d].number", i, j), p.GetNumber())
		}
	}
	if f.typ == extensionsapi.PluginType_NETWORK {
		v.fail(base+".type", "Spillway is an HTTP filter")
	}
	env := v.wasmEnv(base+".vmConfig.env", f.vm)
	v.pluginConfigStruct(base+".pluginConfig", f.config, env)
}

// portsOf lists the ports of each of a WasmPlugin's or TrafficExtension's spec.match.
func portsOf[S interface {
	GetPorts() []*typeapi.PortSelector
}](match []S) [][]*typeapi.PortSelector {
	ports := make([][]*typeapi.PortSelector, len(match))
	for i, m := range match {
		ports[i] = m.GetPorts()
	}
	return ports
}

// pluginConfigStruct checks a WasmPlugin's pluginConfig as istiod hands it to the filter:
// as JSON (pilot/pkg/model/extensions.go, buildWasmConfig).
func (v *validator) pluginConfigStruct(path string, cfg *structpb.Struct, env []string) {
	if cfg == nil || len(cfg.Fields) == 0 {
		v.fail(path, "required: the Spillway policy")
		return
	}
	js, err := cfg.MarshalJSON()
	if err != nil {
		v.fail(path, "%v", err)
		return
	}
	v.policy(path, string(js), env)
}

// configMap checks the stats bootstrap override.
func (v *validator) configMap(o *Object) {
	raw, ok := o.Data[bootstrapOverrideKey]
	if !ok {
		v.fail("data", "want the key %q (the file istio-proxy reads a bootstrap override from)", bootstrapOverrideKey)
		return
	}
	v.failErr("data["+bootstrapOverrideKey+"]", validateBootstrapOverride(raw))
}

// crossChecks are the rules between objects: an HTTP filter's config_discovery names an
// extension config some EnvoyFilter adds (istiod serves nothing else under that name:
// pilot/pkg/networking/core/envoyfilter/extension_configuration_patch.go,
// InsertedExtensionConfigurations), and every cluster a policy names is the destination of
// a VirtualService route that matches the cluster header on exactly that cluster.
func (v *validator) crossChecks(objects []Object) {
	for _, ref := range v.filterRefs {
		if !v.extensionConfigs[ref.name] {
			v.problems = append(v.problems, Problem{Object: ref.object, Path: ref.path,
				Message: fmt.Sprintf("config_discovery names %q, which no EnvoyFilter EXTENSION_CONFIG ADD provides: the listener would wait for it forever", ref.name)})
		}
	}
	routed := map[string]bool{}
	for i := range objects {
		vs, ok := objects[i].Spec.(*networking.VirtualService)
		if !ok {
			continue
		}
		for _, r := range vs.Http {
			if len(r.GetRoute()) != 1 || r.Route[0].GetDestination() == nil {
				continue
			}
			d := r.Route[0].Destination
			cn := clusterName(d.GetPort().GetNumber(), d.Host)
			for _, m := range r.Match {
				for _, sm := range m.GetHeaders() {
					if sm.GetExact() == cn && slices.Contains(vs.Hosts, d.Host) {
						routed[cn] = true
					}
				}
			}
		}
	}
	for _, p := range v.policies {
		for _, cn := range p.clusters {
			if !routed[cn] {
				v.problems = append(v.problems, Problem{Object: p.object, Path: p.path,
					Message: fmt.Sprintf("cluster %q: no VirtualService for its host routes the cluster header's value %q to it (want Istio's outbound|<port>||<host> name, as Render derives it)", cn, cn)})
			}
		}
	}
}

var errNotIstioCluster = errors.New("not an Istio cluster name")

// parseClusterName reads "outbound|<port>||<host>".
func parseClusterName(cn string) (port uint32, host string, err error) {
	parts := strings.Split(cn, "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[2] != "" {
		return 0, "", errNotIstioCluster
	}
	n, err := strconv.ParseUint(parts[1], 10, 16)
	if err != nil || n == 0 {
		return 0, "", errNotIstioCluster
	}
	return uint32(n), parts[3], nil
}
