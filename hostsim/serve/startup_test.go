package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/examples"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPolicy(t *testing.T) {
	demo, err := LoadPolicy("", nil)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if demo.Source != "embedded demo policy" || demo.DefaultCluster() != "fake-openai" ||
		strings.Join(demo.Clusters(), ",") != "fake-openai,fake-openrouter,fake-anthropic" {
		t.Errorf("demo: %s default %s clusters %v", demo.Source, demo.DefaultCluster(), demo.Clusters())
	}
	// ${ENV} stays in the plugin's JSON: the filter expands it from the VM environment.
	if !strings.Contains(string(demo.JSON), "${OPENAI_KEY_A:-demo-key-a}") {
		t.Errorf("the plugin JSON lost its ${ENV} reference")
	}

	yamlPolicy := "providers:\n  - id: p\n    cluster: c\n    connections:\n      - id: k\n        credential: {header: authorization, value: \"Bearer ${KEY}\"}\nroutes:\n  - model: m\n    targets: [{provider: p}]\n"
	tests := []struct {
		name       string
		content    string   // file content ("" : no file at all)
		env        []EnvVar // VM environment
		wantErr    bool
		wantFields []string // field paths the *PolicyError lists
	}{
		{name: "yaml with its env", content: yamlPolicy, env: []EnvVar{{"KEY", "x"}}},
		{name: "yaml without its env", content: yamlPolicy, wantErr: true, wantFields: []string{"providers[0].connections[0].credential.value"}},
		{name: "json", content: `{"providers":[{"id":"p","cluster":"c","connections":[{"id":"k"}]}],"routes":[{"model":"m","targets":[{"provider":"p"}]}]}`},
		{name: "several problems", content: `{"providers":[{"id":"p","connections":[{"id":"k"}]}],"routes":[{"model":"m","targets":[{"provider":"nope"}]}],"bogus":1}`,
			wantErr: true, wantFields: []string{"bogus", "providers[0].cluster", "routes[0].targets[0].provider"}},
		{name: "bad yaml", content: "providers: [", wantErr: true, wantFields: []string{"(root)"}},
		// serve's route, the bootstrap's, reads filter state: a policy routing by header
		// (Istio's) would reach the default cluster only.
		{name: "routing by header", content: yamlPolicy + "routing: {clusterHeader: x-spillway-cluster}\n", env: []EnvVar{{"KEY", "x"}},
			wantErr: true, wantFields: []string{"routing.clusterHeader"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := LoadPolicy(writeFile(t, "policy.yaml", tt.content), tt.env)
			if !tt.wantErr {
				if err != nil || p.DefaultCluster() != "c" {
					t.Fatalf("err %v", err)
				}
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *PolicyError", err)
			}
			for _, f := range tt.wantFields {
				if !strings.Contains(err.Error(), "\n  "+f+": ") {
					t.Errorf("error does not list %s:\n%v", f, err)
				}
			}
		})
	}
	if _, err := LoadPolicy(filepath.Join(t.TempDir(), "missing.yaml"), nil); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// An invalid policy is reported with its field paths before the module is even read.
func TestStartRejectsAnInvalidPolicyBeforeLoadingTheModule(t *testing.T) {
	path := writeFile(t, "bad.yaml", "providers: []\nroutes: []\nresilience: {requestQueue: {maxWaitMs: -5}}\n")
	opts := DefaultOptions()
	opts.Listen, opts.PolicyPath, opts.WasmPath = "", path, "/nonexistent/module.wasm"
	_, err := Start(opts, nil, nil)
	var pe *PolicyError
	if !errors.As(err, &pe) || len(pe.Fields) == 0 {
		t.Fatalf("err = %v, want *PolicyError", err)
	}
	if !strings.Contains(err.Error(), bad(pe.Fields)) {
		t.Errorf("error %q", err)
	}
}

// bad returns the first field path of a policy error.
func bad(fields policies.Errors) string { return fields[0].Path }

// The plugin refusing its configuration stops serve with the guest's critical log.
func TestModuleThatRefusesToStart(t *testing.T) {
	_, err := New(Config{
		Wasm:         hostsimtest.ReadModule(t, "build/spillway.wasm"),
		PluginConfig: []byte(`{"providers":[{"id":"p","connections":[{"id":"k"}]}],"routes":[]}`),
		Runtime:      hostsimtest.Runtime(t),
	})
	var se *StartError
	if !errors.As(err, &se) || !errors.Is(err, hostsim.ErrStartRefused) {
		t.Fatalf("err = %v, want a *StartError wrapping hostsim.ErrStartRefused", err)
	}
	for _, want := range []string{"refused to start", "spillway: refusing to start", "providers[0].cluster"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestStartErrors(t *testing.T) {
	wasm := spillwayWasm(t)
	policy := writeFile(t, "real.yaml", `{"providers":[{"id":"openai","cluster":"openai","connections":[{"id":"k"}]},`+
		`{"id":"local","cluster":"fake-local","connections":[{"id":"l"}]}],"routes":[{"model":"m","targets":[{"provider":"openai"}]}]}`)
	tests := []struct {
		name   string
		change func(o *Options)
		want   []string // substrings of the error
	}{
		{"missing module", func(o *Options) { o.WasmPath = filepath.Join(t.TempDir(), "none.wasm") },
			[]string{"none.wasm not found", "run make build"}},
		{"not a module", func(o *Options) { o.WasmPath = writeFile(t, "x.wasm", "nope") }, []string{"load the module"}},
		{"real cluster without -cluster", func(o *Options) { o.PolicyPath = policy },
			[]string{"provider openai uses cluster openai", "-cluster openai=http://host:port", "built-in fakes only serve fake-*"}},
		{"-cluster given but incomplete", func(o *Options) {
			o.PolicyPath = policy
			o.Clusters = []Cluster{{"openai", "http://127.0.0.1:1"}}
		}, []string{"provider local uses cluster fake-local"}},
		{"bad listen address", func(o *Options) { o.Listen = "256.0.0.1:1" }, []string{"listen"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := DefaultOptions()
			opts.Listen, opts.WasmPath, opts.Runtime = "", wasm, hostsimtest.Runtime(t)
			tt.change(&opts)
			inst, err := Start(opts, nil, nil)
			if err == nil {
				inst.Shutdown(t.Context())
				t.Fatal("Start succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestBannerListsWhatRuns(t *testing.T) {
	d := startDemo(t, func(o *Options) { o.Workers = 3 })
	b := d.Banner()
	for _, want := range []string{
		d.URL(),
		"embedded demo policy (3 providers, 4 routes)",
		"fake-openai     -> " + d.Fakes["fake-openai"].URL + "  (built-in fake openai provider)  (default)",
		"fake-openrouter -> " + d.Fakes["fake-openrouter"].URL + "  (built-in fake openai provider)",
		"fake-anthropic  -> " + d.Fakes["fake-anthropic"].URL + "  (built-in fake anthropic provider)",
		"routing:   the route takes the cluster Spillway names in filter state wasm.spillway_target (no client header names one; x-spillway-cluster is removed); unrouted requests go to fake-openai\n",
		"fakes:     misbehave on x-fake-* request headers (hostsim/cmd/hostsim/README.md)\n",
		"3 VMs, WASI envoy133, fail-reload, allow_on_headers_stop_iteration on",
		"timeouts:  stream idle 8m5s (the policy's longest silence + 30s, as the generated bootstrap), route none, " +
			"upstream idle none, connect 5s, overall 10m0s\n",
		"buffers:   route 9437184 bytes (maxRequestBodyBytes + 1 MiB, as the generated bootstrap), applied when the route " +
			"is matched (Envoy ≥ 1.37); connection 9437184 bytes (the request limit, as the generated bootstrap)\n",
		"curl -si " + d.URL() + "/v1/chat/completions",
		"curl -N " + d.URL() + "/v1/chat/completions",
		`"model":"gpt-4o"`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("banner lacks %q:\n%s", want, b)
		}
	}
	if n := len(d.Server.Host().Workers()); n != 3 {
		t.Errorf("%d workers", n)
	}
}

// The banner prints every policy warning (values the parser clamped), with its field path.
func TestBannerPrintsPolicyWarnings(t *testing.T) {
	demo := strings.Replace(string(examples.Demo()), "maxWaitMs: 5000", "maxWaitMs: 0", 1)
	if demo == string(examples.Demo()) {
		t.Fatal("the demo policy no longer sets requestQueue.maxWaitMs: adjust this test")
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(demo), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDemo(t, func(o *Options) { o.PolicyPath = path; o.AllowOnHeadersStopIteration = false })
	if len(d.Policy.Parsed.Warnings) == 0 {
		t.Fatal("the policy parsed without warnings")
	}
	b := d.Banner()
	for _, w := range d.Policy.Parsed.Warnings {
		if !strings.Contains(b, "  warning:   "+w.Error()+"\n") {
			t.Errorf("banner lacks warning %q:\n%s", w.Error(), b)
		}
	}
	if !strings.Contains(b, "resilience.requestQueue.maxWaitMs") {
		t.Errorf("banner does not name the clamped field:\n%s", b)
	}
	if !strings.Contains(b, "allow_on_headers_stop_iteration off") {
		t.Errorf("banner does not say the option is off:\n%s", b)
	}
}

// The built-in fake's API is the API of the provider whose cluster it serves; the name
// decides only for a fake-* cluster no provider names.
func TestFakeKindForCluster(t *testing.T) {
	path := writeFile(t, "kinds.yaml", `
providers:
  - {id: claude, api: anthropic, cluster: fake-claude, connections: [{id: c}]}
  - {id: compat, api: openai, cluster: fake-anthropic-compatible, connections: [{id: o}]}
  - {id: both-first, api: anthropic, cluster: fake-shared, connections: [{id: s1}]}
  - {id: both-second, api: openai, cluster: fake-shared, connections: [{id: s2}]}
  - {id: default-api, cluster: fake-plain, connections: [{id: d}]}
  - {id: real, api: anthropic, cluster: anthropic, connections: [{id: r}]}
routes:
  - {model: m, targets: [{provider: claude}]}
`)
	p, err := LoadPolicy(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cluster string
		kind    fakeprovider.Kind // "" with ok false: no fake
		ok      bool
	}{
		{"fake-claude", fakeprovider.Anthropic, true},            // the provider's api, whatever the name
		{"fake-anthropic-compatible", fakeprovider.OpenAI, true}, // the api wins over the name
		{"fake-shared", fakeprovider.Anthropic, true},            // the first provider on the cluster
		{"fake-plain", fakeprovider.OpenAI, true},                // api defaults to openai
		{"anthropic", "", false},                                 // not a fake-* name
		{"fake-anthropic", fakeprovider.Anthropic, true},         // no provider: the name rule
		{"fake-Anthropic-eu", fakeprovider.Anthropic, true},      // ...case-insensitively
		{"fake-openrouter", fakeprovider.OpenAI, true},           // ...any other fake-* is OpenAI
		{"openai", "", false},
	} {
		if kind, ok := p.fakeKindFor(c.cluster); kind != c.kind || ok != c.ok {
			t.Errorf("%s: %q %v, want %q %v", c.cluster, kind, ok, c.kind, c.ok)
		}
	}
}

// The route takes the cluster the filter names in filter state, never a client's header:
// the route's provider is not the first one, and the client asks for the first one's
// cluster, so a serve routing on the header would send the request there.
func TestFilterStateRoutesAndTheClientHeaderDoesNot(t *testing.T) {
	path := writeFile(t, "routes.yaml", `
providers:
  - {id: first, cluster: fake-first, connections: [{id: f}]}
  - {id: second, cluster: fake-second, connections: [{id: s}]}
routes:
  - {model: m, targets: [{provider: second}]}
`)
	d := startDemo(t, func(o *Options) { o.PolicyPath = path })
	status, h, body := post(t, d.URL()+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`,
		map[string]string{HeaderCluster: "fake-first"})
	if status != 200 || h.Get("x-spillway-provider") != "second" {
		t.Fatalf("%d %v %s", status, h, body)
	}
	first, second := d.fake(t, "fake-first").Requests(), d.fake(t, "fake-second").Requests()
	if len(first) != 0 || len(second) != 1 {
		t.Fatalf("fake-first got %d requests, fake-second %d; want 0 and 1", len(first), len(second))
	}
	if v := second[0].Header.Get(HeaderCluster); v != "" {
		t.Errorf("%s = %q reached the upstream", HeaderCluster, v)
	}
}
