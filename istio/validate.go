package istio

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	extensionsapi "istio.io/api/extensions/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"

	"github.com/spillwayproxy/spillway/policies"
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

// Validate checks a multi-document manifest stream for what a unit test can check without
// Istio: strict decoding with istio.io/api and istio.io/client-go types (DecodeYAML); the
// Kubernetes API server's rules istioctl does not run (metadata names, the Istio CRDs' size
// limits and one-of rules Spillway's resources come near); every EnvoyFilter patch value
// decoded as istiod decodes it into go-control-plane's Envoy types, then held to Envoy's
// protoc-gen-validate rules (which istiod never runs) and to Envoy's rules on
// typed_per_filter_config; and Spillway's own invariants, what Render promises: the filter's
// configuration (allow_on_headers_stop_iteration, an explicit failure policy that is not
// fail-open, a pinned oci:// module, a policy that parses against the VM environment), the
// filter enabled on exactly Spillway's virtual hosts with a body buffer limit above the
// policy's, every provider cluster reachable by its route with Istio's retries off, and in
// router mode the upstream filter's patches. istiod's own validation is not restated:
// Istio's istioctl judges every rendering in CI (make istio-check; istio/README.md,
// "Validation"). Every problem is reported, as Problems.
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
	// Collected across objects for the cross checks (validate_mesh.go).
	extensionConfigs map[string]extensionRef // EXTENSION_CONFIG ADDs by name
	filterRefs       []filterRef             // HTTP filters that read an extension config
	policies         []policyRef             // the policies the filter attachments carry
	vhostPatches     []vhostPatch            // VIRTUAL_HOST MERGEs
	clusterPatches   map[string][]string     // CLUSTER MERGEs by cluster: their upstream ECDS filters
	routePatches     map[string]routePatch   // HTTP_ROUTE MERGEs by "<virtual host>/<route>"
	ef               envoyFilterPatches      // of the EnvoyFilter being checked
}

func (v *validator) fail(path, format string, args ...any) {
	v.failAt(v.cur, path, format, args...)
}

func (v *validator) failAt(object, path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Object: object, Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) failErr(path string, err error) {
	if err != nil {
		v.fail(path, "%v", err)
	}
}

// object checks one resource. ServiceEntry and Gateway carry no rule of Spillway's (istiod's
// are istioctl's); a VirtualService's are cross checks.
func (v *validator) object(o *Object) {
	v.cur = o.ID()
	v.metadata(o)
	switch spec := o.Spec.(type) {
	case *networking.DestinationRule:
		v.destinationRule(spec)
	case *networking.EnvoyFilter:
		v.envoyFilter(spec)
	case *extensionsapi.WasmPlugin:
		v.scoped(spec.Selector.GetMatchLabels(), spec.Selector != nil, spec.TargetRef != nil || len(spec.TargetRefs) > 0)
		v.wasmFields("spec", wasmFields{url: spec.Url, sha: spec.Sha256, typ: spec.Type, fail: spec.FailStrategy,
			vm: spec.VmConfig, config: spec.PluginConfig})
	case *extensionsapi.TrafficExtension:
		v.scoped(spec.Selector.GetMatchLabels(), spec.Selector != nil, len(spec.TargetRefs) > 0)
		w := spec.GetWasm()
		if w == nil {
			v.fail("spec.wasm", "required: Spillway is a Wasm filter")
			return
		}
		v.wasmFields("spec.wasm", wasmFields{url: w.Url, sha: w.Sha256, typ: w.Type, fail: w.FailStrategy,
			vm: w.VmConfig, config: w.PluginConfig})
	case nil:
		v.configMap(o)
	}
}

// metadata holds names and labels to the API server's rules, which istioctl does not run
// (k8s.io/apimachinery validation: a DNS-1123 subdomain name, a DNS-1123 label namespace,
// qualified label keys, valid label values).
func (v *validator) metadata(o *Object) {
	for _, msg := range k8svalidation.IsDNS1123Subdomain(o.Name) {
		v.fail("metadata.name", "%q: %s", o.Name, msg)
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

// destinationRule: Spillway's rule on TLS origination. istiod accepts a SIMPLE origination
// without sni and subjectAltNames, and then checks the provider's chain against the system
// roots but not its name (pilot/pkg/networking/core/cluster_tls.go, constructUpstreamTLS).
func (v *validator) destinationRule(dr *networking.DestinationRule) {
	check := func(path string, tls *networking.ClientTLSSettings) {
		if tls.GetMode() != networking.ClientTLSSettings_SIMPLE {
			return
		}
		if tls.Sni == "" {
			v.fail(path+".sni", "required: the name TLS is originated to")
		}
		if len(tls.SubjectAltNames) == 0 && !tls.GetInsecureSkipVerify().GetValue() {
			v.fail(path+".subjectAltNames", "required: without it the server certificate's name is not verified")
		}
	}
	check("spec.trafficPolicy.tls", dr.GetTrafficPolicy().GetTls())
	for i, pl := range dr.GetTrafficPolicy().GetPortLevelSettings() {
		check(fmt.Sprintf("spec.trafficPolicy.portLevelSettings[%d].tls", i), pl.GetTls())
	}
}

// scoped is Spillway's rule on what an attachment applies to: named workloads, never every
// workload of the namespace (istiod takes a missing or empty selector to mean all of them,
// and only warns), and, as the CRDs' validation rules say (the API server's, not istiod's),
// not both a selector and targetRefs.
func (v *validator) scoped(labels map[string]string, selector, targetRefs bool) {
	switch {
	case selector && targetRefs:
		v.fail("spec", "only one of targetRefs or selector can be set")
	case !selector && !targetRefs:
		v.fail("spec", "neither a selector nor targetRefs is set: it would apply to every workload of the namespace")
	case selector && len(labels) == 0:
		v.fail("spec", "a selector without labels applies to every workload of the namespace")
	}
}

// wasmFields are the fields of WasmPlugin's spec and TrafficExtension's spec.wasm Spillway
// holds to its rules.
type wasmFields struct {
	url, sha string
	typ      extensionsapi.PluginType
	fail     extensionsapi.FailStrategy
	vm       *extensionsapi.VmConfig
	config   *structpb.Struct
}

// wasmFields checks the header-routed attachment: Spillway's module, an HTTP filter, not
// fail-open (Options.FailurePolicy says why), the VM environment, and the policy, which
// istiod hands the filter as JSON (pilot/pkg/model/extensions.go, buildWasmConfig).
func (v *validator) wasmFields(base string, f wasmFields) {
	v.wasmModule(base, f.url, f.sha)
	if f.typ == extensionsapi.PluginType_NETWORK {
		v.fail(base+".type", "Spillway is an HTTP filter")
	}
	if f.fail == extensionsapi.FailStrategy_FAIL_OPEN {
		v.fail(base+".failStrategy", "FAIL_OPEN: %s", errFailOpen)
	}
	env := v.wasmEnv(base+".vmConfig.env", f.vm)
	if len(f.config.GetFields()) == 0 {
		v.fail(base+".pluginConfig", "required: the Spillway policy")
		return
	}
	js, err := f.config.MarshalJSON()
	if err != nil {
		v.fail(base+".pluginConfig", "%v", err)
		return
	}
	if ref := v.policy(base+".pluginConfig", string(js), env); ref != nil {
		v.policies = append(v.policies, *ref)
	}
}

// wasmEnv holds a VmConfig's env to the CRD's limits (the API server's: at most 256
// variables, values of at most 2048 characters; istiod checks names itself) and to
// istio-agent's rule (envVar), and returns the names.
func (v *validator) wasmEnv(path string, vm *extensionsapi.VmConfig) []string {
	if len(vm.GetEnv()) > 256 {
		v.fail(path, "at most 256 environment variables")
	}
	var names []string
	for i, e := range vm.GetEnv() {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.envVar(p, e.GetName())
		if len(e.GetValue()) > 2048 {
			v.fail(p+".value", "must be at most 2048 characters")
		}
		names = append(names, e.GetName())
	}
	return names
}

// envVar: istio-agent deletes variables named ISTIO_META_* before Envoy sees them
// (pkg/wasm/convert.go, rewriteVMConfig), so the filter would never read them.
func (v *validator) envVar(path, name string) {
	if strings.HasPrefix(name, "ISTIO_META_") {
		v.fail(path+".name", "%q: istio-agent strips ISTIO_META_* variables before the VM starts", name)
	}
}

// wasmModule is Spillway's rule on the module: an oci:// image pinned by its manifest digest
// (istio-agent compares the image's with sha256: pkg/wasm/imagefetcher.go, PrepareFetch), and
// a url that names a digest names the same one.
func (v *validator) wasmModule(path, url, sha string) {
	if !strings.HasPrefix(url, ociScheme) {
		v.fail(path+".url", "%q: Spillway's module is an oci:// image (make oci)", url)
	}
	if _, pinned, ok := strings.Cut(url, "@sha256:"); ok && sha != "" && pinned != sha {
		v.fail(path+".sha256", "%q differs from the digest the url names (%s): istio-agent would refuse the module", sha, pinned)
	}
	if !isSHA256Hex(sha) {
		v.fail(path+".sha256", "%q: pin the image's manifest digest (sha256 in hex, [a-f0-9]{64})", sha)
	}
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

// policyRef is a policy a filter attachment carries, parsed.
type policyRef struct {
	object, path string
	res          *policies.Resolved
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
