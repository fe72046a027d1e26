package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/istio"
	"github.com/spillwayproxy/spillway/plugin/stats"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// istioDigest stands in for the manifest digest `make oci` prints (istio/examples use it).
const istioDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// istioImageArgs and istioUpstreamArgs render the demo policy the way istio/examples are
// rendered: the image, OpenAI and Anthropic outside the mesh, the demo's OpenAI-compatible
// fallback a gateway inside it.
var (
	istioImageArgs    = []string{"-image", "oci://ghcr.io/spillwayproxy/spillway:0.1.0", "-image-digest", istioDigest}
	istioUpstreamArgs = []string{
		"-upstream", "fake-openai=https://api.openai.com",
		"-upstream", "fake-anthropic=https://api.anthropic.com",
		"-upstream", "fake-openrouter=http://litellm.llm.svc.cluster.local:80",
	}
	istioUpstreams = map[string]string{
		"fake-openai":     "https://api.openai.com",
		"fake-anthropic":  "https://api.anthropic.com",
		"fake-openrouter": "http://litellm.llm.svc.cluster.local:80",
	}
)

// demoIstioArgs are the demo's image and upstreams after args.
func demoIstioArgs(args ...string) []string {
	return slices.Concat(args, istioImageArgs, istioUpstreamArgs)
}

// demoIstioOptions are the demo's image and upstreams with o.
func demoIstioOptions(o istio.Options) istio.Options {
	o.Image, o.ImageDigest, o.Upstreams = "oci://ghcr.io/spillwayproxy/spillway:0.1.0", istioDigest, istioUpstreams
	return o
}

// manifestBody is a render istio output without its header comment.
func manifestBody(t *testing.T, out string) string {
	t.Helper()
	for strings.HasPrefix(out, "#") {
		_, out, _ = strings.Cut(out, "\n")
	}
	if !strings.HasPrefix(out, "apiVersion: ") {
		t.Fatalf("the output does not start with a resource after its header:\n%.300s", out)
	}
	return out
}

// TestRenderIstio renders the demo policy in every mode and attachment, and with every
// other flag, and checks that the flags reach istio.Options as documented: the output is
// istio.Render's for the Options written out here, and where istio/examples holds the
// same rendering, byte for byte that file's resources.
func TestRenderIstio(t *testing.T) {
	sidecar := istio.Options{Attach: istio.AttachSidecar, Namespace: "agents", Selector: map[string]string{"app": "agent"}}
	sidecarArgs := []string{"-attach", "sidecar", "-namespace", "agents", "-selector", "app=agent"}
	gateway := istio.Options{Namespace: "istio-ingress", Hosts: []string{"llm.example.com"}}
	gatewayArgs := []string{"-namespace", "istio-ingress", "-host", "llm.example.com"}
	with := func(o istio.Options, edit func(*istio.Options)) istio.Options { edit(&o); return o }

	tests := []struct {
		name    string
		args    []string      // after render istio; the demo's image and upstreams follow
		opts    istio.Options // what they mean; the demo's image and upstreams are filled in
		example string        // the file under istio/examples with the same resources, or ""
	}{
		{"gateway, full", gatewayArgs, gateway, "gateway.yaml"},
		{"gateway, wasmplugin", append([]string{"-mode", "wasmplugin"}, gatewayArgs...),
			with(gateway, func(o *istio.Options) { o.Mode = istio.ModeWasmPlugin }), "gateway-wasmplugin.yaml"},
		{"gateway, trafficextension", append([]string{"-mode", "trafficextension"}, gatewayArgs...),
			with(gateway, func(o *istio.Options) { o.Mode = istio.ModeTrafficExtension }), "gateway-trafficextension.yaml"},
		{"sidecar, full", sidecarArgs, sidecar, "sidecar.yaml"},
		{"sidecar, wasmplugin", append([]string{"-mode", "wasmplugin"}, sidecarArgs...),
			with(sidecar, func(o *istio.Options) { o.Mode = istio.ModeWasmPlugin }), ""},
		{"sidecar, trafficextension", append([]string{"-mode", "trafficextension"}, sidecarArgs...),
			with(sidecar, func(o *istio.Options) { o.Mode = istio.ModeTrafficExtension }), ""},
		{"explicit defaults", append([]string{"-mode", "full", "-attach", "gateway", "-failure-policy", "fail-reload", "-name", "spillway", "-port", "80"}, gatewayArgs...),
			gateway, "gateway.yaml"},
		{"every gateway flag", append([]string{"-name", "llm", "-gateway-port", "8443", "-gateway-listener-port", "9443",
			"-gateway-credential", "llm-tls", "-port", "8080",
			"-failure-policy", "fail-closed", "-inline-env", "RATE_LIMIT_MAX_WAIT_MS=3000", "-inline-env", "RATE_LIMIT_MAX_QUEUE_DEPTH=",
			"-selector", "istio=ingressgateway,app=llm-gw", "-host", "api.llm.example.com", "-stats-bootstrap-override"}, gatewayArgs...),
			with(gateway, func(o *istio.Options) {
				o.Name, o.GatewayPort, o.GatewayListenerPort, o.GatewayCredential, o.Port, o.FailurePolicy = "llm", 8443, 9443, "llm-tls", 8080, istio.FailClosed
				o.InlineEnv = map[string]string{"RATE_LIMIT_MAX_WAIT_MS": "3000", "RATE_LIMIT_MAX_QUEUE_DEPTH": ""}
				o.Selector = map[string]string{"istio": "ingressgateway", "app": "llm-gw"}
				o.Hosts = []string{"api.llm.example.com", "llm.example.com"}
				for _, tag := range stats.Tags() {
					o.StatsTags = append(o.StatsTags, istio.StatsTag{Name: tag.Name, Regex: tag.Regex})
				}
			}), ""},
		{"an existing gateway", append([]string{"-gateway", "istio-ingress/public", "-failure-policy", "fail-closed"}, gatewayArgs...),
			with(gateway, func(o *istio.Options) { o.Gateway, o.FailurePolicy = "istio-ingress/public", istio.FailClosed }), ""},
		{"a private image", append([]string{"-mode", "wasmplugin", "-image-pull-secret", "regcred", "-selector", "tier=web",
			"-host", "llm.agents.svc.cluster.local"}, sidecarArgs...),
			with(sidecar, func(o *istio.Options) {
				o.Mode, o.ImagePullSecret, o.Hosts = istio.ModeWasmPlugin, "regcred", []string{"llm.agents.svc.cluster.local"}
				o.Selector = map[string]string{"app": "agent", "tier": "web"}
			}), ""},
	}
	// The WasmPlugin modes need a header-routed policy: the demo with routing.mode: headers.
	headerRouted := headerRoutedDemo(t)
	headerRoutedPath := filepath.Join(t.TempDir(), "demo-headers.json")
	if err := os.WriteFile(headerRoutedPath, headerRouted, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := examples.Demo()
			if tt.opts.Mode == istio.ModeWasmPlugin || tt.opts.Mode == istio.ModeTrafficExtension {
				tt.args = append([]string{"-policy", headerRoutedPath}, tt.args...)
				policy = headerRouted
			}
			args := demoIstioArgs(tt.args...)
			code, stdout, stderr := runCLI(t, append([]string{"render", "istio"}, args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if stderr != "" {
				t.Errorf("stderr: %s (the demo policy has no warnings)", stderr)
			}
			if !strings.Contains(stdout, "\n#   spillway render istio "+strings.Join(args, " ")+"\n") {
				t.Errorf("the header does not give the command that renders the file:\n%.600s", stdout)
			}
			got := manifestBody(t, stdout)
			m, err := istio.Render(policy, demoIstioOptions(tt.opts))
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.YAML()
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("the flags did not give istio.Render the Options %+v:\n%s", tt.opts, firstDifference(got, string(want)))
			}
			if tt.example == "" {
				return
			}
			example, err := os.ReadFile(filepath.Join("..", "..", "..", "istio", "examples", tt.example))
			if err != nil {
				t.Fatal(err)
			}
			if body := manifestBody(t, string(example)); got != body {
				t.Errorf("the output differs from istio/examples/%s:\n%s", tt.example, firstDifference(got, body))
			}
		})
	}
}

// headerRoutedDemo is the demo policy in JSON with routing.mode: headers, as istio/examples
// render the WasmPlugin modes.
func headerRoutedDemo(t *testing.T) []byte {
	t.Helper()
	doc, err := policyfile.ToJSON(examples.Demo())
	if err == nil {
		doc, err = sjson.SetBytes(doc, "routing.mode", "headers")
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  got:  %s\n  want: %s", i+1, gl, wl)
		}
	}
	return "(equal)"
}

// TestRenderIstioHeader: -o writes the file, whose header says how to render it again
// (without the -o), which variables the proxy must provide and, with the stats override,
// what to do with the ConfigMap; the file validates as written.
func TestRenderIstioHeader(t *testing.T) {
	out := filepath.Join(t.TempDir(), "spillway-istio.yaml")
	args := demoIstioArgs("-namespace", "istio-ingress", "-host", "llm.example.com", "-stats-bootstrap-override")
	code, stdout, stderr := runCLI(t, append([]string{"render", "istio", "-o", out}, args...)...)
	if code != exitOK || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Istio (>= 1.28) manifests for Spillway, generated from the embedded demo policy (policies/examples/demo.yaml) by:\n",
		"#   spillway render istio " + strings.Join(args, " ") + "\n", // without its -o
		"# The filter reads from the istio-proxy container's environment: ANTHROPIC_KEY, OPENAI_KEY_A, OPENAI_KEY_B, OPENROUTER_KEY, SPILLWAY_ADMIN_TOKEN\n",
		"# The ConfigMap spillway-bootstrap holds Spillway's stats_tags",
		"\nkind: ConfigMap\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the file lacks %q:\n%.900s", want, got)
		}
	}
	if err := istio.Validate(got); err != nil {
		t.Errorf("the written file does not validate: %v", err)
	}
	// Which failovers stream, for the Istio release it is rendered for (1.28 by default,
	// Envoy 1.36; from 1.29, Envoy 1.37, held tries too).
	for release, want := range map[string]string{
		"":     "# Failover: rendered for Istio 1.28 (-istio-version), through the router: a try that fails over on its status and headers",
		"1.29": "# Failover: rendered for Istio 1.29 (-istio-version), through the router: a try that fails over on its status, headers, error body or first event",
	} {
		args := demoIstioArgs("-namespace", "istio-ingress", "-host", "llm.example.com")
		if release != "" {
			args = append(args, "-istio-version", release)
		}
		code, stdout, stderr := runCLI(t, append([]string{"render", "istio"}, args...)...)
		if code != exitOK || !strings.Contains(stdout, want) || !strings.Contains(stdout, "a fallback to another provider or model fail") {
			t.Errorf("-istio-version %q: exit %d, stderr %s, header:\n%.1200s", release, code, stderr, stdout)
		}
	}
}

// TestRenderIstioRefusals: bad flags are usage errors; options and policies Render refuses
// are problems, each on its own line, named by the flag to change or the policy's field.
func TestRenderIstioRefusals(t *testing.T) {
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badPolicy, []byte("providers: [{id: p, cluster: c, authority: api.example.com, connections: [{id: a}]}]\n"+
		"routes: [{model: m, targets: [{provider: q}]}]\nresilience: {bogus: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gateway := []string{"-namespace", "istio-ingress", "-host", "llm.example.com"}
	tests := []struct {
		name string
		args []string // after render istio
		code int      // exit status
		want []string // lines (or line parts) stderr must hold
	}{
		{"nothing given", nil, exitProblem, []string{
			": 3 problem(s):\n", "  -namespace: required\n", "  -host: a gateway needs the hosts clients call it on\n",
			"  -image: \"\": want oci://REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]\n"}},
		{"no digest", append([]string{"-image", "oci://ghcr.io/spillwayproxy/spillway:0.1.0"}, append(gateway, istioUpstreamArgs...)...), exitProblem, []string{
			"1 problem(s):\n", "  -image-digest: required (the manifest digest `make oci` prints) unless the image names it (@sha256:...)\n"}},
		{"the demo's clusters without upstreams", slices.Concat(gateway, istioImageArgs), exitProblem, []string{
			"3 problem(s):\n",
			`  providers[0].cluster: cluster "fake-openai" has no upstream: give it one in Upstreams (-upstream fake-openai=https://host) or set the provider's authority` + "\n"}},
		{"an upstream no provider has", demoIstioArgs(append([]string{"-upstream", "fake-azure=https://x.example.com"}, gateway...)...), exitProblem, []string{
			"  -upstream fake-azure: no provider has this cluster\n"}},
		{"an upstream with a path", slices.Concat(gateway, istioImageArgs, []string{"-upstream", "fake-openai=https://api.openai.com/v1",
			"-upstream", "fake-anthropic=https://api.anthropic.com", "-upstream", "fake-openrouter=https://openrouter.ai"}), exitProblem, []string{
			"  -upstream fake-openai: \"https://api.openai.com/v1\": want https://host[:port] or http://host:port\n"}},
		{"fail-open", demoIstioArgs(append([]string{"-failure-policy", "fail-open"}, gateway...)...), exitProblem, []string{
			"  -failure-policy: \"open\" (fail-open) is refused for Istio: istiod's routes pick a provider by the :authority and cluster header"}},
		{"a pull secret in full mode", demoIstioArgs(append([]string{"-image-pull-secret", "regcred"}, gateway...)...), exitProblem, []string{
			"  -image-pull-secret: an EnvoyFilter cannot name one"}},
		{"gateway flags on a sidecar", demoIstioArgs("-attach", "sidecar", "-namespace", "agents", "-selector", "app=agent", "-gateway", "istio-ingress/public", "-gateway-credential", "tls"), exitProblem, []string{
			"2 problem(s):\n", "  -gateway: only for a gateway attachment\n", "  -gateway-credential: only for a gateway attachment\n"}},
		{"a sidecar without selector", demoIstioArgs("-attach", "sidecar", "-namespace", "agents"), exitProblem, []string{
			"  -selector: a sidecar must name its workload's labels\n"}},
		{"a bad host", demoIstioArgs("-namespace", "istio-ingress", "-host", "llm_example.com"), exitProblem, []string{
			"  -host: \"llm_example.com\": not a host name"}},
		{"an invalid policy", demoIstioArgs(append([]string{"-policy", badPolicy}, gateway...)...), exitProblem, []string{
			badPolicy + ": ", "  resilience.bogus: unknown field\n", "  routes[0].targets[0].provider: unknown provider \"q\"\n"}},
		{"a missing policy", demoIstioArgs(append([]string{"-policy", filepath.Join(dir, "nope.yaml")}, gateway...)...), exitProblem, []string{
			"spillway render istio: open ", "nope.yaml: no such file or directory\n"}},
		{"unknown mode", []string{"-mode", "lua"}, exitUsage, []string{`invalid value "lua" for flag -mode: want full, wasmplugin, trafficextension`}},
		{"unknown attachment", []string{"-attach", "waypoint"}, exitUsage, []string{`invalid value "waypoint" for flag -attach: want gateway, sidecar`}},
		{"unknown failure policy", []string{"-failure-policy", "reload"}, exitUsage, []string{`invalid value "reload" for flag -failure-policy: want fail-reload, fail-closed or fail-open`}},
		{"port out of range", []string{"-port", "70000"}, exitUsage, []string{`invalid value "70000" for flag -port: want a port number, 1 to 65535`}},
		{"gateway port zero", []string{"-gateway-port", "0"}, exitUsage, []string{`for flag -gateway-port: want a port number`}},
		{"selector without a value", []string{"-selector", "app"}, exitUsage, []string{`for flag -selector: want KEY=VALUE[,KEY=VALUE]`}},
		{"selector label twice", []string{"-selector", "app=a,app=b"}, exitUsage, []string{`label "app" given twice`}},
		{"upstream without URL", []string{"-upstream", "fake-openai"}, exitUsage, []string{`for flag -upstream: want NAME=URL`}},
		{"inline env without a name", []string{"-inline-env", "=3000"}, exitUsage, []string{`for flag -inline-env: want NAME=VALUE`}},
		{"an empty host", []string{"-host", ""}, exitUsage, []string{`for flag -host: want a host name`}},
		{"an unknown flag", []string{"-cluster", "fake-openai=https://api.openai.com"}, exitUsage, []string{"flag provided but not defined: -cluster"}},
		{"stray argument", []string{"extra"}, exitUsage, []string{`spillway render istio: unexpected argument "extra"`}},
		{"an unsupported Istio", []string{"-istio-version", "1.27"}, exitUsage, []string{`for flag -istio-version: release "1.27" is not supported (1.28 or newer)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"render", "istio"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if stdout != "" {
				t.Errorf("a refused render wrote to standard output:\n%.300s", stdout)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestRenderIstioWarns: a policy's warnings reach stderr with their field paths, and the
// manifests are still written.
func TestRenderIstioWarns(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "doubtful.yaml")
	if err := os.WriteFile(policy, []byte("providers: [{id: p, cluster: c, authority: api.example.com, connections: [{id: a}]}]\n"+
		"routes: [{model: m, targets: [{provider: p}]}]\nresilience: {modelLockout: {baseCooldownMs: 5}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, append([]string{"render", "istio", "-policy", policy, "-namespace", "istio-ingress", "-host", "llm.example.com"}, istioImageArgs...)...)
	if code != exitOK || !strings.Contains(stdout, "kind: EnvoyFilter") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if want := policy + ": warning: resilience.modelLockout.baseCooldownMs: clamped 5 ms"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q lacks %q", stderr, want)
	}
}

// TestIstioFlagsMirrorOptions: every field of istio.Options has its flag, so a problem
// Render finds with an option names the flag to change, and every flag named exists.
func TestIstioFlagsMirrorOptions(t *testing.T) {
	fs, _ := newIstioFlags(io.Discard)
	typ := reflect.TypeOf(istio.Options{})
	fields := map[string]bool{}
	for i := 0; i < typ.NumField(); i++ {
		name := typ.Field(i).Name
		fields[name] = true
		flagName, ok := istioOptionFlags[name]
		if !ok {
			t.Errorf("istio.Options.%s has no flag in istioOptionFlags", name)
			continue
		}
		if fs.Lookup(flagName) == nil {
			t.Errorf("istio.Options.%s: render istio has no flag -%s", name, flagName)
		}
	}
	for name := range istioOptionFlags {
		if !fields[name] {
			t.Errorf("istioOptionFlags names %s, which istio.Options does not have", name)
		}
	}
}

// readmePlaceholders stand in for what a reader fills in, in the READMEs' render istio
// commands.
var readmePlaceholders = strings.NewReplacer(
	"sha256:<manifest digest>", istioDigest, // the digest make oci prints
	"OWNER", "owner", // the reader's registry namespace
)

// readmeIstioPolicy is a policy of real providers, for the READMEs' my-policy.yaml.
const readmeIstioPolicy = `providers:
- {id: openai, cluster: openai, authority: api.openai.com, connections: [{id: openai-a, credential: {header: authorization, value: "Bearer ${OPENAI_KEY_A}"}}]}
- {id: anthropic, api: anthropic, cluster: anthropic, authority: api.anthropic.com, connections: [{id: anthropic-a, credential: {header: x-api-key, value: "${ANTHROPIC_KEY}"}}]}
routes:
- {model: gpt-4o, targets: [{provider: openai}]}
- {model: claude-sonnet-4-5, targets: [{provider: anthropic}]}
`

// TestReadmeIstioCommandsRun runs every `spillway render istio` command the READMEs show
// (placeholders filled in, my-policy.yaml a policy of real providers): each must render.
func TestReadmeIstioCommandsRun(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "my-policy.yaml")
	if err := os.WriteFile(policy, []byte(readmeIstioPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, readme := range []string{"README.md", filepath.Join("istio", "README.md")} {
		doc, err := os.ReadFile(filepath.Join("..", "..", "..", readme))
		if err != nil {
			t.Fatal(err)
		}
		commands := renderIstioCommands(string(doc))
		if len(commands) == 0 {
			t.Errorf("%s shows no render istio command", readme)
		}
		for _, c := range commands {
			args := strings.Fields(readmePlaceholders.Replace(c))
			for i, a := range args {
				if a == "my-policy.yaml" {
					args[i] = policy
				}
			}
			args = append(args, "-o", filepath.Join(dir, "out.yaml"))
			code, _, stderr := runCLI(t, append([]string{"render", "istio"}, args...)...)
			if code != exitOK {
				t.Errorf("%s: spillway render istio %s\nexit %d: %s", readme, c, code, stderr)
			}
		}
	}
}

// renderIstioCommands are the arguments of each `spillway render istio` (or
// `build/spillway render istio`) command in doc: continuation lines joined, up to a pipe,
// a redirection or a comment.
func renderIstioCommands(doc string) []string {
	var out []string
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(strings.TrimPrefix(lines[i], "build/"), "spillway render istio ")
		if !ok {
			continue
		}
		cmd := rest
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, "\\") + " " + lines[i]
		}
		for _, end := range []string{" | ", " > ", " #"} {
			cmd, _, _ = strings.Cut(cmd, end)
		}
		out = append(out, strings.TrimSpace(cmd))
	}
	return out
}
