package hostsim_test

import (
	"testing"

	"github.com/spillwayproxy/spillway/hostsim"
)

// Properties as Envoy ≥ 1.33 resolves them: plugin_*, xds.* (configured), request.* and
// response.* from the stream (NotFound in a root context), integers as 8-byte LE, removed
// top-level xDS names NotFound, filter state written by set_property; a path ending in NUL
// (the C++ SDK's form) reads as without it.
func TestProperties(t *testing.T) {
	h := probe(t, `
request_headers get_property plugin_name
request_headers get_property plugin_root_id
request_headers get_property plugin_vm_id
request_headers get_property request.path
request_headers get_property request.url_path
request_headers get_property request.method
request_headers get_property request.host
request_headers get_property request.headers.:scheme
request_headers get_property xds.cluster_name
request_headers get_property cluster_name
request_headers get_property xds.node.metadata.NAMESPACE
request_headers get_property xds.node.metadata.NAMESPACE.
request_headers set_property my.key hello
request_headers get_property my.key
response_headers get_property response.code
tick get_property request.path
tick get_property xds.cluster_name
`, hostsim.WithPluginName("ns.spillway"), hostsim.WithRootID("spillway"), hostsim.WithVMID("vm1"),
		hostsim.WithProperty([]string{"xds", "cluster_name"}, []byte("outbound|443||api")),
		hostsim.WithProperty([]string{"xds", "node", "metadata", "NAMESPACE"}, []byte("llm")))
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	h.CallOnResponseHeaders(id, hdrs(":status", "429"), true)
	h.Tick()
	requireTrace(t, h.Host, "worker-0",
		"op get_property plugin_name -> Ok ns.spillway",
		"op get_property plugin_root_id -> Ok spillway",
		"op get_property plugin_vm_id -> Ok vm1",
		"op get_property request.path -> Ok /v1/models?x=1",
		"op get_property request.url_path -> Ok /v1/models",
		"op get_property request.method -> Ok GET",
		"op get_property request.host -> Ok api.example",
		"op get_property request.headers.:scheme -> Ok https",
		"op get_property xds.cluster_name -> Ok outbound|443||api",
		"op get_property cluster_name -> NotFound", // removed in Envoy 1.33
		"op get_property xds.node.metadata.NAMESPACE -> Ok llm",
		"op get_property xds.node.metadata.NAMESPACE. -> Ok llm", // the C++ SDK's trailing NUL
		"op set_property my.key hello -> Ok",
		"op get_property my.key -> Ok hello",
		"op get_property response.code -> Ok 0xad01000000000000", // 429 as 8-byte little endian
		"cb tick",
		"op get_property request.path -> NotFound", // no stream info in a root context
		"op get_property xds.cluster_name -> Ok outbound|443||api")
	if v, ok := h.Worker(0).GetFilterState(id, []string{"my", "key"}); !ok || string(v) != "hello" {
		t.Fatalf("filter state %q %v", v, ok)
	}
}

// Metrics: counter, gauge, histogram; ids carry the type; wrong operations per type are
// BadArgument; a name is one stat across VMs.
func TestMetrics(t *testing.T) {
	h := probe(t, `
configure define_metric 0 requests_total
request_headers define_metric 0 requests_total
request_headers increment $metric 2
request_headers increment $metric -1
request_headers get_metric $metric
request_headers define_metric 1 inflight
request_headers increment $metric 5
request_headers increment $metric -2
request_headers record $metric 9
request_headers define_metric 2 latency_ms
request_headers record $metric 120
request_headers record $metric 80
request_headers increment $metric 1
request_headers get_metric $metric
request_headers increment 12345 1
request_headers define_metric 7 bad
`, hostsim.WithWorkers(2))
	for i := 0; i < 2; i++ {
		w := h.Worker(i)
		id := w.InitializeHttpContext()
		w.CallOnRequestHeaders(id, getReq, true)
	}
	requireTrace(t, h.Host, "worker-0",
		"op increment $metric 2 -> Ok", "op increment $metric -1 -> BadArgument", "op get_metric $metric -> Ok 2",
		"op increment $metric 1 -> BadArgument", "op get_metric $metric -> BadArgument",
		"op increment 12345 1 -> NotFound", "op define_metric 7 bad -> BadArgument")
	if v, err := h.GetCounterMetric("requests_total"); err != nil || v != 4 {
		t.Fatalf("counter %d %v", v, err)
	}
	if v, err := h.GetGaugeMetric("inflight"); err != nil || v != 9 {
		t.Fatalf("gauge %d %v", v, err)
	}
	if v, err := h.GetHistogramMetric("latency_ms"); err != nil || v != 80 {
		t.Fatalf("histogram %d %v", v, err)
	}
	if vs, _ := h.GetHistogramValues("latency_ms"); len(vs) != 4 {
		t.Fatalf("histogram values %v", vs)
	}
	if _, err := h.GetGaugeMetric("requests_total"); err == nil {
		t.Fatal("a counter read as a gauge")
	}
}
