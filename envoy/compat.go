package envoy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// Fits reports whether a new policy can replace base's in a running Envoy whose bootstrap
// was rendered from base, so that only the filter's configuration changes (ECDS): the
// bootstrap fixes the clusters (the route's matcher maps each), the request and connection
// buffer limits and the failover path (resilience.failover.via: the upstream filter and
// the routed route's retry policy, num_retries from failover.maxAttempts).
// The error lists each conflict as a policies.FieldError; the warnings say where Envoy's
// idle timer would now end a request before the filter's own bounds do.
func Fits(base, next *Policy) (warnings []string, err error) {
	// Both as the control plane serves them, to a bootstrap without the upstream filter.
	if base, err = base.forECDS(Options{}); err != nil {
		return nil, err
	}
	if next, err = next.forECDS(Options{}); err != nil {
		return nil, err
	}
	var errs policies.Errors
	known := make(map[string]bool)
	var names []string
	for i := range base.Resolved.Providers {
		c := base.Resolved.Providers[i].Cluster
		if !known[c] {
			known[c] = true
			names = append(names, strconv.Quote(c))
		}
	}
	for i := range next.Resolved.Providers {
		if c := next.Resolved.Providers[i].Cluster; !known[c] {
			errs = append(errs, policies.FieldError{Path: "providers[" + strconv.Itoa(i) + "].cluster",
				Message: "cluster " + strconv.Quote(c) + " is not in Envoy's bootstrap (" + strings.Join(names, ", ") +
					"): render a new bootstrap and restart Envoy to add a cluster"})
		}
	}
	if b, n := base.Resolved.MaxRequestBodyBytes, next.Resolved.MaxRequestBodyBytes; n > b {
		errs = append(errs, policies.FieldError{Path: "maxRequestBodyBytes",
			Message: "raised from " + strconv.FormatInt(b, 10) + " to " + strconv.FormatInt(n, 10) +
				" bytes, above the buffer limit in Envoy's bootstrap (Envoy would answer its own 413 first): render a new bootstrap and restart Envoy to raise it"})
	}
	if b, n := base.Resolved.Failover.ViaRouter, next.Resolved.Failover.ViaRouter; b != n {
		errs = append(errs, policies.FieldError{Path: "resilience.failover.via",
			Message: "changed from " + via(b) + " to " + via(n) + ", but the upstream filter and the routed route's retry policy " +
				"(router) are part of Envoy's bootstrap, rendered for " + via(b) + ": render a new bootstrap and restart Envoy to change it"})
	} else if b && base.Resolved.Failover.MaxAttempts != next.Resolved.Failover.MaxAttempts {
		errs = append(errs, policies.FieldError{Path: "resilience.failover.maxAttempts",
			Message: "changed from " + strconv.Itoa(base.Resolved.Failover.MaxAttempts) + " to " + strconv.Itoa(next.Resolved.Failover.MaxAttempts) +
				", but the route's num_retries in Envoy's bootstrap is " + strconv.FormatUint(uint64(envoylimits.RetryNumRetries(base.Resolved)), 10) +
				": render a new bootstrap and restart Envoy to change it"})
	}
	if b, n := envoylimits.IdleTimeout(base.Resolved), envoylimits.IdleTimeout(next.Resolved); n > b {
		warnings = append(warnings, "the policy's waits now add up to "+n.String()+" of silence, more than Envoy's idle timeout of "+
			b.String()+": Envoy may end such a request (408/504) before Spillway answers; render a new bootstrap to match")
	}
	slices.Sort(warnings)
	if len(errs) > 0 {
		return warnings, errs
	}
	return warnings, nil
}

func via(router bool) string {
	if router {
		return string(policies.FailoverViaRouter)
	}
	return string(policies.FailoverViaCallout)
}

// EnvoyFeature is something the generated configuration relies on and the first Envoy
// release that has it (minor version of 1.x).
type EnvoyFeature struct {
	What  string
	Since int // Envoy 1.Since
}

// releaseInVersion finds the release in `envoy --version`'s output
// ("envoy  version: <sha>/1.36.2/Clean/RELEASE/BoringSSL").
var releaseInVersion = regexp.MustCompile(`/1\.(\d+)\.\d+/`)

// VersionMinor reads the minor number of the Envoy release from the output of
// `envoy --version`, for comparing a binary with RequiredEnvoy.
func VersionMinor(versionOutput []byte) (int, error) {
	m := releaseInVersion.FindSubmatch(versionOutput)
	if m == nil {
		return 0, fmt.Errorf("envoy: no release in the version output %q", versionOutput)
	}
	return strconv.Atoi(string(m[1]))
}

// SupportedEnvoyMinor is the oldest supported Envoy, 1.36 (envoyrelease.Oldest): every
// configuration this package generates for it needs nothing newer, and it is the release
// Options.EnvoyMinor defaults to.
const SupportedEnvoyMinor = envoyrelease.Oldest

// RequiredEnvoy says which Envoy release the configuration rendered for a policy needs
// (1.minor) and why: each feature it relies on with the release that introduced it. Only
// the policy decides (a settled one, see Policy.For): failover through the router adds the
// upstream filter and the route's retry buffer, holdTries needs 1.37, crossCluster 1.39
// (envoyrelease.HoldTries, envoyrelease.CrossCluster).
func RequiredEnvoy(p *Policy) (minor int, features []EnvoyFeature) {
	features = []EnvoyFeature{
		// proxy-wasm-cpp-host #427 (fd_fdstat_set_flags, sched_yield, poll_oneoff).
		{"a Go wasip1 module loads", 33},
		{"PluginConfig.allow_on_headers_stop_iteration", 35},
		// envoyproxy/envoy#40254 (data-plane-api 92df27d6).
		{"VirtualHost.request_body_buffer_limit", 36},
		// The route's cluster comes from the filter state the filter writes (routeFor):
		// the matcher cluster specifier, envoyproxy/envoy#39227 and #39816 (in
		// go-control-plane's envoy/v1.35.0 API), over the filter-state input, which a
		// route's matcher accepts from envoyproxy/envoy#33175 (1.31).
		{"the matcher cluster specifier on filter state (envoy.router.cluster_specifier_plugin.matcher)", 35},
	}
	if p.Resolved.Failover.ViaRouter {
		features = append(features,
			// changelogs/1.31.0.yaml: "Update WASM filter to support use as an upstream
			// filter" (envoyproxy/envoy#34253).
			EnvoyFeature{"envoy.filters.http.wasm as an upstream HTTP filter (HttpProtocolOptions.http_filters)", 31},
			// The same change as the virtual host's field (envoyproxy/envoy#40254).
			EnvoyFeature{"Route.request_body_buffer_limit (the retry buffer)", 36},
		)
	}
	if p.Resolved.Failover.HoldTries {
		// changelogs/1.37.0.yaml, router: "Fixed an upstream HTTP filter issue when a route
		// retried on 5xx and the filter returned FilterHeadersStatus::StopIteration in
		// encodeHeaders()" (envoyproxy/envoy#41879); before it the release is undefined
		// behaviour. The configuration is the same: only the plugin acts differently.
		features = append(features, EnvoyFeature{"a try held by the upstream filter released for a retry (failover.holdTries)", envoyrelease.HoldTries})
	}
	if p.Resolved.Failover.CrossCluster {
		// changelogs/1.39.0.yaml: refresh_cluster_on_retry (envoyproxy/envoy#44719).
		features = append(features, EnvoyFeature{"RetryPolicy.refresh_cluster_on_retry with the matcher cluster specifier (failover.crossCluster)", envoyrelease.CrossCluster})
	}
	for _, f := range features {
		minor = max(minor, f.Since)
	}
	return minor, features
}
