// Package envoyrelease says what each supported Envoy release lets failover through the
// router do, and settles the failover switches a policy leaves unset for the release and
// deployment a configuration is rendered for, so that render envoy, render istio and
// hostsim serve write one choice into the policy they ship (README, "Supported Envoy and
// Istio versions", has the table).
package envoyrelease

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/sjson"

	"github.com/spillwayproxy/spillway/policies"
)

// The releases (Envoy 1.N, as N) that decide what router-mode failover can do.
const (
	// Oldest is the oldest supported Envoy (design.md §4: Envoy ≥ 1.36, Istio ≥ 1.28), and the
	// release a configuration is rendered for unless told otherwise: a default must never
	// write a configuration, or switch on a behaviour, that a supported Envoy refuses or
	// runs as undefined behaviour.
	Oldest = 36
	// HoldTries is the first release on which failover.holdTries is safe: releasing a try
	// the upstream filter held (StopIteration in encodeHeaders) for a retry is undefined
	// behaviour before envoyproxy/envoy#41879 (changelogs/1.37.0.yaml, router: "Fixed an
	// upstream HTTP filter issue when a route retried on 5xx and the filter returned
	// FilterHeadersStatus::StopIteration in encodeHeaders()").
	HoldTries = 37
	// CrossCluster is the first release with RetryPolicy.refresh_cluster_on_retry
	// (changelogs/1.39.0.yaml, envoyproxy/envoy#44719), which failover.crossCluster needs: a
	// retry re-runs the route's matcher cluster specifier and goes to the cluster the
	// failed try named.
	CrossCluster = 39
	// OldestIstio is the oldest supported Istio (1.28, which ships Envoy 1.36).
	OldestIstio = 28
)

// IstioEnvoy is the Envoy release Istio 1.istio ships: 1.28 → 1.36, 1.29 → 1.37, 1.30 → 1.38,
// 1.31 → 1.39 (Istio's supported-releases table pairs each release with its Envoy). For a
// later Istio, not in that table here, it answers 1.39: its Envoy is at least that new,
// which is all the switches ask.
func IstioEnvoy(istio int) int {
	if istio > 31 {
		return CrossCluster
	}
	return istio + 8
}

// ParseMinor reads a release given as "1.N" or "1.N.P" (what `envoy --version` and
// `istioctl version` print) and returns N, refusing one older than oldest.
func ParseMinor(s string, oldest int) (int, error) {
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "1" {
		return 0, fmt.Errorf("release %q: want 1.N or 1.N.P", s)
	}
	var n int
	for i, p := range parts[1:] {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || strconv.Itoa(v) != p {
			return 0, fmt.Errorf("release %q: want 1.N or 1.N.P", s)
		}
		if i == 0 {
			n = v
		}
	}
	if n < oldest {
		return 0, fmt.Errorf("release %q is not supported (1.%d or newer)", s, oldest)
	}
	return n, nil
}

// Deployment is what a configuration is rendered for.
type Deployment struct {
	// Envoy is the Envoy release (1.Envoy); 0 is Oldest.
	Envoy int
	// Name says what the configuration is for, in messages: "Envoy 1.36", "Istio 1.28 (Envoy
	// 1.36)". Empty: "Envoy 1.<Envoy>".
	Name string
	// UpstreamFilter: the deployment attaches Spillway's upstream HTTP filter and the route's
	// retry policy to a policy that fails over through the router. Without it an unset via
	// is settled to callout (an explicit router is the caller's to refuse: it knows why the
	// filter is missing).
	UpstreamFilter bool
	// CrossClusterRoute: the deployment's route can re-pick the cluster before a retry (the
	// matcher cluster specifier on filter state with refresh_cluster_on_retry, as render
	// envoy and hostsim serve write it). Without it an unset crossCluster is settled to
	// false; an explicit true is the caller's to refuse.
	CrossClusterRoute bool
	// Flag names the option that sets the release, for messages ("-envoy-version").
	Flag string
}

func (d Deployment) envoy() int {
	if d.Envoy == 0 {
		return Oldest
	}
	return d.Envoy
}

func (d Deployment) name() string {
	if d.Name != "" {
		return d.Name
	}
	return "Envoy 1." + strconv.Itoa(d.envoy())
}

// Failover is the failover path a deployment runs a policy with: what Settle writes.
func (d Deployment) Failover(p *policies.Policy) policies.Failover {
	f := p.Resilience.Failover
	if f.Via == "" {
		f.Via = policies.FailoverViaCallout
		if d.UpstreamFilter && policies.ViaRouter("", p.Routing.Mode) {
			f.Via = policies.FailoverViaRouter
		}
	}
	if f.Via != policies.FailoverViaRouter {
		return f // the switches are router mode's: an unset one stays unset (and unread)
	}
	if f.HoldTries == nil {
		f.HoldTries = new(d.envoy() >= HoldTries)
	}
	if f.CrossCluster == nil {
		f.CrossCluster = new(d.CrossClusterRoute && d.envoy() >= CrossCluster)
	}
	return f
}

// Settle returns the policy document doc (JSON, as p was parsed from it) with
// resilience.failover's via, holdTries and crossCluster written out as deployment d runs
// them, and p with the same block (a copy: p is not changed; its Resolved is the filter's).
// What the policy sets is kept and checked: a switch that needs a newer Envoy than d's is
// a policies.FieldError at its path. What it leaves unset is chosen (Failover): via is
// router where d attaches the upstream filter and the policy is body-routed
// (policies.ViaRouter), else callout; under router, holdTries is on from HoldTries and
// crossCluster from CrossCluster where d's route can refresh its cluster. Settling a
// settled policy for the same deployment changes nothing.
func Settle(doc []byte, p *policies.Policy, d Deployment) ([]byte, *policies.Policy, error) {
	given, f := p.Resilience.Failover, d.Failover(p)
	var errs policies.Errors
	if f.Via == policies.FailoverViaRouter {
		errs = append(errs, d.needs("holdTries", given.HoldTries, HoldTries, "releasing a try the upstream filter held for a retry "+
			"is undefined behaviour before envoyproxy/envoy#41879")...)
		if d.CrossClusterRoute {
			errs = append(errs, d.needs("crossCluster", given.CrossCluster, CrossCluster, "a retry to another cluster needs "+
				"RetryPolicy.refresh_cluster_on_retry")...)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	out := doc
	set := func(field string, value any, was bool) {
		var err error
		if !was && out != nil {
			out, err = sjson.SetBytes(out, "resilience.failover."+field, value)
			if err != nil {
				errs = append(errs, policies.FieldError{Path: "resilience.failover." + field, Message: err.Error()})
			}
		}
	}
	set("via", string(f.Via), given.Via != "")
	if f.Via == policies.FailoverViaRouter {
		set("holdTries", *f.HoldTries, given.HoldTries != nil)
		set("crossCluster", *f.CrossCluster, given.CrossCluster != nil)
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("envoyrelease: write the failover path: %w", errs)
	}
	settled := *p
	settled.Resilience.Failover = f
	return out, &settled, nil
}

// needs refuses a switch set true that needs Envoy 1.since on a deployment older than it.
func (d Deployment) needs(field string, given *bool, since int, why string) policies.Errors {
	if given == nil || !*given || d.envoy() >= since {
		return nil
	}
	msg := "needs Envoy ≥ 1." + strconv.Itoa(since) + " (" + why + "), and this configuration is for " + d.name()
	if d.Flag != "" {
		msg += ": give " + d.Flag + " for the release you run, or drop it"
	} else {
		msg += ": drop it"
	}
	return policies.Errors{{Path: "resilience.failover." + field, Message: msg}}
}

// Streams says in a sentence which failovers of a resolved policy stream to the client and
// which arrive whole, for the banners and notes of the tools that render or run it (the
// README's "Supported Envoy and Istio versions" has the same as a table per release).
func Streams(f policies.FailoverSettings) string {
	if !f.ViaRouter {
		return "by callout: every failover attempt's response reaches the client whole, once complete"
	}
	on := "its status and headers (a 429, a 5xx)"
	if f.HoldTries {
		on = "its status, headers, error body or first event (an error event in a 200 stream too)"
	}
	to := "another connection of the same cluster and model"
	if f.CrossCluster {
		to = "any target, another provider or model included"
	}
	s := "through the router: a try that fails over on " + on + " is retried on " + to + ", and the retry streams"
	var whole []string
	if !f.HoldTries {
		whole = append(whole, "a failure only its body shows (an error event in a 200 stream)")
	}
	if !f.CrossCluster {
		whole = append(whole, "a fallback to another provider or model")
	}
	switch len(whole) {
	case 1:
		s += "; " + whole[0] + " fails over by callout and arrives whole"
	case 2:
		s += "; " + whole[0] + " and " + whole[1] + " fail over by callout and arrive whole"
	}
	return s
}
