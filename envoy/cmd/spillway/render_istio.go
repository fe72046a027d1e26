package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/istio"
	"github.com/spillwayproxy/spillway/plugin/stats"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// istioOptionFlags name the flag that sets each field of istio.Options, so a problem with
// an option names the flag to change (a test keeps every field covered).
var istioOptionFlags = map[string]string{
	"Mode":                "mode",
	"Attach":              "attach",
	"Namespace":           "namespace",
	"Name":                "name",
	"Image":               "image",
	"ImageDigest":         "image-digest",
	"ImagePullSecret":     "image-pull-secret",
	"Selector":            "selector",
	"Hosts":               "host",
	"Gateway":             "gateway",
	"GatewayPort":         "gateway-port",
	"GatewayListenerPort": "gateway-listener-port",
	"GatewayCredential":   "gateway-credential",
	"Port":                "port",
	"Upstreams":           "upstream",
	"FailurePolicy":       "failure-policy",
	"InlineEnv":           "inline-env",
	"StatsTags":           "stats-bootstrap-override",
	"IstioMinor":          "istio-version",
}

// istioFlags are the command line of render istio: istio.Options, the policy and the
// output file.
type istioFlags struct {
	policy, out string
	opts        istio.Options
	statsTags   bool // -stats-bootstrap-override
}

func newIstioFlags(stderr io.Writer) (*flag.FlagSet, *istioFlags) {
	fs := newFlagSet("spillway render istio",
		"spillway render istio -namespace NS -image oci://REF -image-digest sha256:HEX [-host HOST]... [-upstream CLUSTER=URL]... [-policy FILE] [-o FILE] [flags]", stderr)
	f := &istioFlags{opts: istio.Options{
		Mode:          istio.ModeFull,
		Attach:        istio.AttachGateway,
		FailurePolicy: istio.DefaultFailurePolicy,
		Upstreams:     map[string]string{},
		InlineEnv:     map[string]string{},
		Selector:      map[string]string{},
		IstioMinor:    envoyrelease.OldestIstio,
	}}
	o := &f.opts
	fs.StringVar(&f.policy, "policy", "", "the policy, YAML or JSON (`FILE`; default: the embedded demo policy)")
	fs.StringVar(&f.out, "o", "", "write the manifests to `FILE` (default: standard output)")
	fs.Var(&enumFlag[istio.Mode]{&o.Mode, istio.Modes}, "mode", "how the filter is attached, `MODE`: full (an EnvoyFilter; every feature), wasmplugin or trafficextension (Istio's extension APIs; the policy's header-routed mode only)")
	fs.Var(&enumFlag[istio.Attach]{&o.Attach, istio.Attachments}, "attach", "the `PROXY` that runs the filter: gateway (an ingress gateway) or sidecar (the client workload's own)")
	fs.StringVar(&o.Namespace, "namespace", "", "the `NAMESPACE` of every resource: the gateway's, or the client workload's for a sidecar (required)")
	fs.StringVar(&o.Name, "name", istio.DefaultName, "the `NAME` every resource name starts with")
	fs.StringVar(&o.Image, "image", "", "the module's OCI image, `oci://REF` (required); make oci OCI_PUSH=... prints it pinned by digest")
	fs.StringVar(&o.ImageDigest, "image-digest", "", "the image's manifest digest, `sha256:HEX`, as make oci prints it (required unless -image names it with @sha256:...)")
	fs.StringVar(&o.ImagePullSecret, "image-pull-secret", "", "a docker-registry `SECRET` in the namespace for a private registry (wasmplugin and trafficextension only)")
	fs.Var(labelsFlag(o.Selector), "selector", "the labels of the pods that run the filter, `KEY=VALUE[,KEY=VALUE]` (repeatable; gateway default istio=ingressgateway; required for a sidecar)")
	fs.Var((*hostsFlag)(&o.Hosts), "host", "a `HOST` clients call Spillway on (repeatable): the gateway's hosts (required), or a sidecar's frontend (default "+istio.DefaultSidecarHost+")")
	fs.StringVar(&o.Gateway, "gateway", "", "bind to this existing Gateway, `NAMESPACE/NAME`, instead of emitting one")
	fs.Var(portFlag{&o.GatewayPort}, "gateway-port", "the `PORT` of the emitted Gateway's server (default 80, or 443 with -gateway-credential)")
	fs.Var(portFlag{&o.GatewayListenerPort}, "gateway-listener-port", "the `PORT` the gateway's listener for -gateway-port binds, its Service's targetPort (default -gateway-port, as the gateway Helm chart; 8080 for 80 on istioctl's istio-ingressgateway)")
	fs.StringVar(&o.GatewayCredential, "gateway-credential", "", "make the emitted Gateway terminate TLS with this `SECRET` (credentialName)")
	fs.Var(portFlag{&o.Port}, "port", "the ServiceEntry `PORT` of the external providers; for a sidecar also the frontend's port (default 80)")
	fs.Var(clusterFlags(o.Upstreams), "upstream", "a provider cluster's upstream, `CLUSTER=URL` (repeatable): https://host[:port] outside the mesh, http://host:port for a Service in it (default https://<the provider's authority>)")
	fs.Var(&istioFailureFlag{&o.FailurePolicy}, "failure-policy", "what the proxy does after a VM failure, `POLICY`: fail-reload (a fresh VM) or fail-closed (503); fail-open is refused (istiod's routes match headers a client can send)")
	fs.Var(envFlags(o.InlineEnv), "inline-env", "set a VM environment variable in the resource itself, `NAME=VALUE` (repeatable; readable by anyone who can read the resource: never a credential)")
	fs.Var(&istioReleaseFlag{releaseFlag{minor: envoyrelease.OldestIstio, oldest: envoyrelease.OldestIstio}, &o.IstioMinor}, "istio-version",
		"the Istio `RELEASE` (1.N) the resources are for: in full mode failover's holdTries is switched on from 1.29 (Envoy 1.37) where the policy leaves it unset")
	fs.BoolVar(&f.statsTags, "stats-bootstrap-override", false, "also emit Spillway's stats_tags as a bootstrap-override ConfigMap (for proxies whose extraStatTags you cannot set; never both)")
	return fs, f
}

// options are the istio.Options the flags give.
func (f *istioFlags) options() istio.Options {
	o := f.opts
	if f.statsTags {
		for _, t := range stats.Tags() {
			o.StatsTags = append(o.StatsTags, istio.StatsTag{Name: t.Name, Regex: t.Regex})
		}
	}
	return o
}

// renderIstio writes the Istio manifests that run a policy.
func renderIstio(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs, f := newIstioFlags(stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spillway render istio: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	data, source, err := readPolicy(f.policy)
	if err != nil {
		fmt.Fprintf(stderr, "spillway render istio: %v\n", err)
		return exitProblem
	}
	m, err := istio.Render(data, f.options())
	if err != nil {
		printProblems(stderr, source, err)
		return exitProblem
	}
	for _, w := range m.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", source, w.Error())
	}
	body, err := m.YAML()
	if err != nil {
		fmt.Fprintf(stderr, "spillway render istio: %v\n", err)
		return exitProblem
	}
	var doc bytes.Buffer
	fmt.Fprintf(&doc, "# Istio (>= 1.28) manifests for Spillway, generated from %s by:\n#   %s\n", source, commandLine("istio", args))
	why := ""
	if !m.Failover.ViaRouter && f.opts.Mode != istio.ModeFull {
		why = " (header-routed mode, which " + string(f.opts.Mode) + " needs)"
	}
	fmt.Fprintf(&doc, "# Failover: rendered for Istio 1.%d (-istio-version), %s%s.\n", f.opts.IstioMinor, envoyrelease.Streams(m.Failover), why)
	doc.WriteString("# Do not edit: change the policy or the flags and render again. Secrets come from the\n" +
		"# istio-proxy container's environment, never from this file. See istio/README.md.\n")
	if len(m.HostEnv) > 0 {
		fmt.Fprintf(&doc, "# The filter reads from the istio-proxy container's environment: %s\n", strings.Join(m.HostEnv, ", "))
	}
	if f.statsTags {
		doc.WriteString("# The ConfigMap " + f.opts.Name + "-bootstrap holds Spillway's stats_tags: a proxy reads it at start\n" +
			"# once its pod mounts it (istio/README.md, \"Failure policy and metrics\").\n")
	}
	doc.Write(body)
	if f.out == "" {
		_, _ = stdout.Write(doc.Bytes())
		return exitOK
	}
	if err := os.WriteFile(f.out, doc.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "spillway render istio: %v\n", err)
		return exitProblem
	}
	return exitOK
}

// optionProblem words a problem with an istio option as a problem with its flag.
func optionProblem(e istio.OptionError) string {
	name, ok := istioOptionFlags[e.Option]
	if !ok {
		return e.Error()
	}
	if e.Key != "" {
		return "-" + name + " " + e.Key + ": " + e.Message
	}
	return "-" + name + ": " + e.Message
}

// enumFlag accepts one of a list of values.
type enumFlag[T ~string] struct {
	v     *T
	allow []T
}

func (f *enumFlag[T]) String() string {
	if f.v == nil {
		return ""
	}
	return string(*f.v)
}

func (f *enumFlag[T]) Set(s string) error {
	if !slices.Contains(f.allow, T(s)) {
		want := make([]string, len(f.allow))
		for i, a := range f.allow {
			want[i] = string(a)
		}
		return fmt.Errorf("want %s", strings.Join(want, ", "))
	}
	*f.v = T(s)
	return nil
}

// istioFailureFlag reads the failure policy with render envoy's names.
type istioFailureFlag struct{ v *istio.FailurePolicy }

var istioFailurePolicies = map[string]istio.FailurePolicy{
	"fail-reload": istio.FailReload,
	"fail-closed": istio.FailClosed,
	"fail-open":   istio.FailOpen,
}

func (f *istioFailureFlag) String() string {
	for name, p := range istioFailurePolicies {
		if f.v != nil && p == *f.v {
			return name
		}
	}
	return ""
}

func (f *istioFailureFlag) Set(s string) error {
	p, ok := istioFailurePolicies[s]
	if !ok {
		return errors.New("want fail-reload, fail-closed or fail-open")
	}
	*f.v = p
	return nil
}

// portFlag reads a TCP port, 1 to 65535.
type portFlag struct{ v *uint32 }

func (f portFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(*f.v), 10)
}

func (f portFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return errors.New("want a port number, 1 to 65535")
	}
	*f.v = uint32(n)
	return nil
}

// hostsFlag collects -host HOST.
type hostsFlag []string

func (f *hostsFlag) String() string { return strings.Join(*f, ",") }

func (f *hostsFlag) Set(s string) error {
	if s == "" {
		return errors.New("want a host name")
	}
	*f = append(*f, s)
	return nil
}

// labelsFlag collects -selector KEY=VALUE[,KEY=VALUE].
type labelsFlag map[string]string

func (f labelsFlag) String() string { return clusterFlags(f).String() }

func (f labelsFlag) Set(s string) error {
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" || v == "" {
			return errors.New("want KEY=VALUE[,KEY=VALUE], e.g. app=agent")
		}
		if _, dup := f[k]; dup {
			return fmt.Errorf("label %q given twice", k)
		}
		f[k] = v
	}
	return nil
}

// envFlags collect -inline-env NAME=VALUE (the value may hold '=' and be empty).
type envFlags map[string]string

func (f envFlags) String() string { return "" } // values stay off the usage text

func (f envFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return errors.New("want NAME=VALUE, e.g. RATE_LIMIT_MAX_WAIT_MS=3000")
	}
	if _, dup := f[k]; dup {
		return fmt.Errorf("variable %q given twice", k)
	}
	f[k] = v
	return nil
}

// istioReleaseFlag is -istio-version: a releaseFlag that writes istio.Options.IstioMinor.
type istioReleaseFlag struct {
	releaseFlag
	to *int
}

func (f *istioReleaseFlag) Set(s string) error {
	if err := f.releaseFlag.Set(s); err != nil {
		return err
	}
	*f.to = f.minor
	return nil
}
