package filter

import (
	"errors"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/plugin/hostabi"
)

// role is what a plugin context does, chosen by its root id at start.
type role uint8

const (
	// roleDownstream is the HTTP connection manager's filter: everything the package doc
	// describes. Every root id but rootid.Upstream, "" included, is this role.
	roleDownstream role = iota
	// roleUpstream is the provider cluster's upstream HTTP filter (root id rootid.Upstream),
	// whose streams are the router's tries: under failover.via router a try of a linked
	// request acts on that request's state (router.go), every other try passes through
	// untouched (passTry).
	roleUpstream
)

// roleOf maps a root id to its role.
func roleOf(rootID string) role {
	if rootID == rootid.Upstream {
		return roleUpstream
	}
	return roleDownstream
}

var propPluginRootID = hostabi.JoinPath(nil, "plugin_root_id")

// readRootID reads the plugin's root id. Envoy answers plugin_root_id in every context,
// the root's too (source/extensions/common/wasm/context.cc, Context::findValue,
// PropertyToken::PLUGIN_ROOT_ID: root_id(), "" when the plugin sets none); a host that does
// not know the property (NotFound) has no root id. Any other failure is logged and read as
// no root id too: the plugin then keeps the downstream role it has always had.
func readRootID() string {
	v, err := hostabi.GetProperty(propPluginRootID, nil)
	if err != nil {
		if !errors.Is(err, types.ErrorStatusNotFound) {
			proxywasm.LogWarnf("spillway: read plugin_root_id: %v; starting as the downstream filter", err)
		}
		return ""
	}
	return string(v)
}

var propPluginName = hostabi.JoinPath(nil, "plugin_name")

// readPluginName reads the plugin's name, half of the namespace of its policy's own shared
// state (state.NamespaceID; the root id is the other half). Envoy answers plugin_name in
// every context (context.cc, Context::findValue, PropertyToken::PLUGIN_NAME: the filter
// config's name; Istio's is the WasmPlugin's <namespace>.<name>). A host that does not know
// it reads as "", as a failure does after a log line: the policy then shares its own records
// with every other such plugin of its root id, as every plugin did before namespaces.
func readPluginName() string {
	v, err := hostabi.GetProperty(propPluginName, nil)
	if err != nil {
		if !errors.Is(err, types.ErrorStatusNotFound) {
			proxywasm.LogWarnf("spillway: read plugin_name: %v; its state namespace is its root id alone", err)
		}
		return ""
	}
	return string(v)
}

// startUpstream finishes the start of an upstream-role plugin context, once the policy has
// been parsed and validated as the downstream role's is. Its VM is shared with the
// downstream plugin (one VM per worker per vm_config, whatever the root ids), so it starts
// nothing that plugin owns per VM: no tick, no wake queue or entry in the VM directory, no
// admin API, no metric definitions, no shared-data write, no engine or cache over shared
// data; and its policy warnings are left to the downstream plugin, which logs them for the
// same configuration. Everything it keeps is its own context's, so the downstream plugin
// on the VM is the same whether this one starts before it, after it or not at all. Its
// tries reach the downstream plugin's state through the VM's links (vmContext.links) and
// use that plugin's engine, cache and metrics.
func (p *pluginContext) startUpstream() types.OnPluginStartStatus {
	p.role = roleUpstream
	p.engine, p.cache = nil, nil
	if f := p.res.Failover; f.ViaRouter {
		on, to := "its status and headers", "a connection of the same cluster with the same model"
		if f.HoldTries {
			on = "its status, headers, error body or first event"
		}
		if f.CrossCluster {
			to = "any target (the route refreshes its cluster)"
		}
		proxywasm.LogInfof("spillway: upstream filter (root_id %s): a try of a request routed on this VM fails over "+
			"as the router's retry, on %s, to %s", rootid.Upstream, on, to)
	} else {
		proxywasm.LogInfof("spillway: upstream filter (root_id %s): every try passes through untouched "+
			"(failover goes by callout: resilience.failover.via is callout, or the policy routes by header)", rootid.Upstream)
	}
	return types.OnPluginStartStatusOK
}

// passTry is an upstream-role stream under a policy that fails over by callout: one try of
// the router. It continues at every callback and reads or writes nothing
// (types.DefaultHttpContext's callbacks all continue), so the try reaches the provider and
// its response the router exactly as without the filter. Being empty (zero-size), it costs
// no allocation per try. Under failover via router a try is an upstreamTry (router.go).
type passTry struct{ types.DefaultHttpContext }
