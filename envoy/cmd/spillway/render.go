package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/plugin/stats"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// statsTags are the stats_tags every rendered bootstrap carries: the tags plugin/stats
// encodes in Spillway's stat names, which Envoy takes out again as labels. The bootstrap
// sets no stats_matcher, so Envoy keeps every stat; one that did would have to include
// stats.InclusionPrefix.
func statsTags() []envoy.StatsTag {
	tags := stats.Tags()
	out := make([]envoy.StatsTag, len(tags))
	for i, t := range tags {
		out[i] = envoy.StatsTag{Name: t.Name, Regex: t.Regex}
	}
	return out
}

// renderEnvoy writes a standalone Envoy bootstrap for a policy.
func renderEnvoy(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("spillway render envoy", "spillway render envoy [-policy FILE] [-o FILE] [-cluster NAME=URL]... [flags]", stderr)
	policyPath := fs.String("policy", "", "the policy, YAML or JSON (`FILE`; default: the embedded demo policy)")
	out := fs.String("o", "", "write the bootstrap to `FILE` (default: standard output)")
	clusters := clusterFlags{}
	fs.Var(clusters, "cluster", "a provider cluster's upstream, `NAME=URL` (scheme://host[:port]; repeatable; default https://<the provider's authority>)")
	defaultCluster := fs.String("default-cluster", "", "the cluster of requests Spillway does not route (`NAME`; default: the first provider's)")
	listen := fs.String("listen", envoy.DefaultListen, "the listener's `HOST:PORT` (0.0.0.0 for every interface)")
	admin := fs.String("admin", envoy.DefaultAdmin, "Envoy's admin `HOST:PORT` (keep it on loopback)")
	nodeID := fs.String("node-id", envoy.DefaultNodeID, "the bootstrap's node `ID`")
	ca := fs.String("ca", envoy.DefaultCAFile, "the PEM `FILE` of CAs that TLS upstreams are verified against")
	xdsAddr := fs.String("xds", "", "take the filter's configuration from `HOST:PORT`, a spillway xds control plane, over ECDS (instead of inline)")
	release := releaseFlag{minor: envoy.SupportedEnvoyMinor, oldest: envoy.SupportedEnvoyMinor}
	fs.Var(&release, "envoy-version", "the Envoy `RELEASE` (1.N) the bootstrap is for: failover's holdTries (1.37) and crossCluster (1.39) "+
		"are switched on where it has them and the policy leaves them unset")
	var mod moduleFlags
	mod.register(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spillway render envoy: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	data, source, err := readPolicy(*policyPath)
	if err != nil {
		fmt.Fprintf(stderr, "spillway render envoy: %v\n", err)
		return exitProblem
	}
	p, err := envoy.LoadPolicy(data, envoy.LoadOptions{})
	if err != nil {
		printProblems(stderr, source, err)
		return exitProblem
	}
	for _, w := range p.Parsed.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", source, w.Error())
	}
	opts := envoy.Options{
		Module:         mod.module(),
		Upstreams:      clusters,
		DefaultCluster: *defaultCluster,
		Listen:         *listen,
		Admin:          *admin,
		NodeID:         *nodeID,
		FailurePolicy:  envoyFailurePolicy(mod.failure),
		CAFile:         *ca,
		StatsTags:      statsTags(),
		XDS:            *xdsAddr,
		EnvoyMinor:     release.minor,
	}
	if p, err = p.For(opts); err != nil {
		printProblems(stderr, source, err)
		return exitProblem
	}
	b, err := envoy.Bootstrap(p, opts)
	if err != nil {
		printProblems(stderr, source, err)
		return exitProblem
	}
	body, err := envoy.MarshalYAML(b)
	if err != nil {
		fmt.Fprintf(stderr, "spillway render envoy: %v\n", err)
		return exitProblem
	}
	var doc bytes.Buffer
	minor, features := envoy.RequiredEnvoy(p)
	fmt.Fprintf(&doc, "# Envoy (>= 1.%d) bootstrap for Spillway, generated from %s by:\n#   %s\n", minor, source, commandLine("envoy", args))
	for _, f := range features {
		if f.Since > envoy.SupportedEnvoyMinor {
			fmt.Fprintf(&doc, "# Needs Envoy 1.%d for %s.\n", f.Since, f.What)
		}
	}
	fmt.Fprintf(&doc, "# Failover: %s.\n", failoverSummary(p, opts))
	doc.WriteString("# Do not edit: change the policy or the flags and render again. Secrets come from Envoy's\n" +
		"# environment (host_env_keys), never from this file. See envoy/README.md.\n")
	doc.Write(body)
	if *out == "" {
		_, _ = stdout.Write(doc.Bytes())
		return exitOK
	}
	if err := os.WriteFile(*out, doc.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "spillway render envoy: %v\n", err)
		return exitProblem
	}
	return exitOK
}

// commandLine is the render command that writes the same file, without its -o.
func commandLine(target string, args []string) string {
	parts := []string{"spillway", "render", target}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" || a == "--o":
			i++
		case strings.HasPrefix(a, "-o=") || strings.HasPrefix(a, "--o="):
		default:
			parts = append(parts, a)
		}
	}
	return strings.Join(parts, " ")
}

// failoverSummary is the rendered bootstrap's note on failover: the release it is for, what
// streams there, and why a policy that leaves via unset fails over by callout.
func failoverSummary(p *envoy.Policy, o envoy.Options) string {
	s := "rendered for Envoy 1." + strconv.Itoa(o.EnvoyMinor) + " (" + envoy.EnvoyVersionFlag + "), " + envoyrelease.Streams(p.Resolved.Failover)
	switch {
	case p.Resolved.Failover.ViaRouter:
	case p.Resolved.Routing.HeaderRouted():
		s += " (header-routed mode)"
	case o.XDS != "":
		s += " (a bootstrap fed over ECDS has no upstream filter)"
	}
	return s
}
