package serve

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
	"github.com/spillwayproxy/spillway/policies/examples"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

// Policy is a policy ready for the plugin.
type Policy struct {
	// Source says where it came from ("embedded demo policy" or the file path).
	Source string
	// JSON is the plugin configuration, ${ENV} references kept: the filter expands them
	// from the VM environment.
	JSON []byte
	// Parsed is the policy as the filter will read it with the same environment.
	Parsed *policies.Policy
	// Resolved is Parsed with every default applied, as the filter runs it.
	Resolved *policies.Resolved
}

// PolicyError is a policy that does not validate: every problem with its field path.
type PolicyError struct {
	Source string
	Fields policies.Errors
}

// Error lists every problem, one per line.
func (e *PolicyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "serve: invalid policy %s:", e.Source)
	for _, f := range e.Fields {
		b.WriteString("\n  ")
		b.WriteString(f.Error())
	}
	return b.String()
}

// LoadPolicy reads the policy file at path (YAML or JSON; "" for the embedded demo
// policy), converts it to the plugin's JSON and validates it the way the filter will, with
// env as the VM environment. An invalid policy is a *PolicyError.
func LoadPolicy(path string, env []EnvVar) (*Policy, error) {
	p := &Policy{Source: "embedded demo policy"}
	data := examples.Demo()
	if path != "" {
		p.Source = path
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("serve: policy: %w", err)
		}
		data, err = io.ReadAll(io.LimitReader(f, policies.MaxPolicyBytes+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("serve: policy %s: %w", path, err)
		}
	}
	doc, err := policyfile.ToJSON(data)
	if err == nil {
		p.JSON = doc
		p.Parsed, err = policies.Parse(doc, policies.ParseOptions{LookupEnv: lookupIn(env)})
	}
	if err != nil {
		var fields policies.Errors
		if errors.As(err, &fields) {
			return nil, &PolicyError{Source: p.Source, Fields: fields}
		}
		return nil, fmt.Errorf("serve: policy %s: %w", p.Source, err)
	}
	p.Resolved = p.Parsed.Resolved()
	if p.Resolved.Routing.ClusterByHeader {
		return nil, &PolicyError{Source: p.Source, Fields: policies.Errors{ErrClusterHeader}}
	}
	return p, nil
}

// For returns the policy as serve runs it for Envoy 1.minor (0: envoyrelease.Oldest), which
// is how the generated bootstrap runs it there (envoy.Policy.For): the failover switches it
// leaves unset written into its JSON — via router (serve attaches the upstream filter),
// holdTries from 1.37, crossCluster from 1.39 (serve's route refreshes its cluster as the
// bootstrap's does) — and the ones it sets checked against that release. An invalid choice
// is a *PolicyError; p is not changed.
func (p *Policy) For(minor int) (*Policy, error) {
	doc, parsed, err := envoyrelease.Settle(p.JSON, p.Parsed, envoyrelease.Deployment{Envoy: minor, UpstreamFilter: true,
		CrossClusterRoute: true, Flag: "-envoy-version"})
	if err != nil {
		var fields policies.Errors
		if errors.As(err, &fields) {
			return nil, &PolicyError{Source: p.Source, Fields: fields}
		}
		return nil, fmt.Errorf("serve: policy %s: %w", p.Source, err)
	}
	out := *p
	out.JSON, out.Parsed, out.Resolved = doc, parsed, parsed.Resolved()
	return &out, nil
}

// ErrClusterHeader refuses a policy that routes by header (routing.clusterHeader), as
// `spillway render envoy` does (envoy.ErrClusterHeader): serve's route, the generated
// bootstrap's, reads the cluster from the filter state the filter would then not write.
var ErrClusterHeader = policies.FieldError{
	Path: "routing.clusterHeader",
	Message: "names the header Istio's routes match the cluster on; serve's route, as the generated Envoy bootstrap's, " +
		"reads the cluster from filter state, which a client cannot write: remove it",
}

// lookupIn looks names up in env the way the filter's os.LookupEnv sees the VM environment.
func lookupIn(env []EnvVar) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for _, e := range env {
			if e.Key == name {
				return e.Value, true
			}
		}
		return "", false
	}
}

// Clusters lists the clusters the policy's providers use, in provider order, once each.
func (p *Policy) Clusters() []string {
	var out []string
	seen := map[string]bool{}
	for _, pr := range p.Parsed.Providers {
		if !seen[pr.Cluster] {
			seen[pr.Cluster] = true
			out = append(out, pr.Cluster)
		}
	}
	return out
}

// DefaultCluster is where a request goes when the filter names no cluster (a request
// Spillway does not route, such as GET /v1/models): the first provider's, as a catch-all
// route to it would.
func (p *Policy) DefaultCluster() string {
	if len(p.Parsed.Providers) == 0 {
		return ""
	}
	return p.Parsed.Providers[0].Cluster
}

// FakePrefix marks the cluster names built-in fake providers serve when no -cluster is
// given.
const FakePrefix = "fake-"

// fakeKindFor is the one place that decides which API the built-in fake for a cluster
// speaks (ok false: the cluster is not a fake's). The API of the first provider that uses
// the cluster decides (its policy api: openai or anthropic), since that is what the filter
// sends there; a fake-* cluster no provider names falls back to its name: one containing
// "anthropic" gets the Anthropic fake, any other the OpenAI one.
func (p *Policy) fakeKindFor(cluster string) (fakeprovider.Kind, bool) {
	if !strings.HasPrefix(cluster, FakePrefix) {
		return "", false
	}
	for i := range p.Resolved.Providers {
		if pr := &p.Resolved.Providers[i]; pr.Cluster == cluster {
			if pr.API == policies.APIAnthropic {
				return fakeprovider.Anthropic, true
			}
			return fakeprovider.OpenAI, true
		}
	}
	if strings.Contains(strings.ToLower(cluster), "anthropic") {
		return fakeprovider.Anthropic, true
	}
	return fakeprovider.OpenAI, true
}

// missingClusters checks that every cluster the policy uses is known; the error names
// each missing one and the provider that needs it.
func (p *Policy) missingClusters(known map[string]bool, fakesAllowed bool) error {
	var lines []string
	for _, pr := range p.Parsed.Providers {
		if known[pr.Cluster] {
			continue
		}
		hint := fmt.Sprintf("give -cluster %s=http://host:port", pr.Cluster)
		if fakesAllowed {
			hint += fmt.Sprintf(" (built-in fakes only serve %s* names)", FakePrefix)
		}
		lines = append(lines, fmt.Sprintf("  provider %s uses cluster %s: %s", pr.ID, pr.Cluster, hint))
	}
	if lines == nil {
		return nil
	}
	return fmt.Errorf("serve: the policy's clusters are not all defined:\n%s", strings.Join(lines, "\n"))
}
