package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/envoyrelease"
)

// EnvoyVersionFlag is the spillway CLI's flag for Options.EnvoyMinor, named in messages.
const EnvoyVersionFlag = "-envoy-version"

// For returns the policy as a bootstrap rendered with o runs it (envoyrelease.Settle): the
// failover switches it leaves unset written into its JSON — via router, or callout with
// Options.XDS (the bootstrap then has no upstream filter: ErrRouterNeedsInline), holdTries
// and crossCluster on where Options.EnvoyMinor has them — and the ones it sets checked
// against that release. Bootstrap settles the policy it is given this way; RequiredEnvoy
// and Fits read a settled policy. p is not changed.
func (p *Policy) For(o Options) (*Policy, error) {
	return p.settle(envoyrelease.Deployment{Envoy: o.EnvoyMinor, UpstreamFilter: o.XDS == "",
		CrossClusterRoute: true, Flag: EnvoyVersionFlag})
}

// forECDS is p as a control plane serves it (ExtensionConfig, Fits): to a bootstrap with
// Options.XDS, which has no upstream filter.
func (p *Policy) forECDS(o Options) (*Policy, error) {
	o.XDS = "ecds"
	return p.For(o)
}

func (p *Policy) settle(d envoyrelease.Deployment) (*Policy, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, p.JSON); err != nil {
		return nil, fmt.Errorf("envoy: policy JSON: %w", err) // LoadPolicy wrote it
	}
	doc, parsed, err := envoyrelease.Settle(compact.Bytes(), p.Parsed, d)
	if err != nil {
		return nil, fmt.Errorf("envoy: %w", err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, doc, "", "  "); err != nil {
		return nil, fmt.Errorf("envoy: indent policy JSON: %w", err)
	}
	out := *p
	out.JSON, out.Parsed, out.Resolved = indented.Bytes(), parsed, parsed.Resolved()
	return &out, nil
}

// errIfRouterWithoutFilter refuses a settled policy that fails over through the router in
// a deployment without the upstream filter (an explicit via: router with Options.XDS).
func errIfRouterWithoutFilter(p *Policy, o Options) error {
	if p.Resolved.Failover.ViaRouter && o.XDS != "" {
		return fmt.Errorf("envoy: %w", policies.Errors{ErrRouterNeedsInline})
	}
	return nil
}
