package lint

import "github.com/spillwayproxy/spillway/policies"

// NoticeRouterDefault is the notice for a body-routed policy that leaves
// resilience.failover.via unset: it fails over through the router since failover that
// streams became the default (README, "Changes"); until then it meant callout.
const NoticeRouterDefault = "unset, so failover goes through Envoy's router (the default now; it was callout " +
	"before, see the README's \"Changes\"): a failover attempt streams where the proxy has Spillway's upstream " +
	"filter, which spillway render envoy, render istio's full mode and hostsim serve write; a proxy without it " +
	"is detected (spillway_router_unlinked_total) and fails over by callout. Set via: callout to keep the callout path"

// NoticeHeaderRoutedCallout is the notice for a header-routed policy that leaves via unset:
// it fails over by callout, as it always did.
const NoticeHeaderRoutedCallout = "unset: header-routed mode (routing.mode: headers) fails over by callout, " +
	"so a failover attempt's response reaches the client whole once complete; failover that streams needs " +
	"body-routed mode"

// Notices says what a valid policy does that its author may not expect, with the field
// path it is about: neither a problem nor a warning (the policy does what the
// documentation says), and not counted by `spillway lint -strict`. Today: how failover
// reaches its target when the policy does not say (policies.ViaRouter).
func Notices(p *policies.Policy) policies.Errors {
	if p.Resilience.Failover.Via != "" {
		return nil
	}
	msg := NoticeHeaderRoutedCallout
	if policies.ViaRouter("", p.Routing.Mode) {
		msg = NoticeRouterDefault
	}
	return policies.Errors{{Path: "resilience.failover.via", Message: msg}}
}
