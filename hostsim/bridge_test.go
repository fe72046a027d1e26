package hostsim_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// The ABI bridge's defences (plugin/_bridge): a panic that reaches an export is recovered,
// reported through proxy_log with its message and stack, counted, and the stream it hit
// passes through; an address the host writes back that the guest's allocator did not hand
// out is refused. The panicky guest panics where its configuration says.

// abiPanics is the bridge's counter.
const abiPanics = "spillway_abi_panics_total"

// panicky starts the panicky guest with config and an upstream that echoes.
func panicky(t *testing.T, config string, opts ...hostsim.Option) *hostsimtest.Host {
	t.Helper()
	all := append([]hostsim.Option{hostsim.WithPluginConfiguration([]byte(config)),
		hostsim.WithUpstream(echoUpstream(nil))}, opts...)
	return hostsimtest.New(t, hostsimtest.Guest(t, "panicky"), all...)
}

func counter(t *testing.T, h *hostsimtest.Host, name string) uint64 {
	t.Helper()
	v, err := h.GetCounterMetric(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// requirePanicLog fails unless a critical log line reports the panic in callback with the
// guest's message and a stack naming where it happened.
func requirePanicLog(t *testing.T, h *hostsimtest.Host, callback, message, frame string) {
	t.Helper()
	for _, l := range h.GetCriticalLogs() {
		if strings.HasPrefix(l, "spillway: panic in "+callback+" (context ") &&
			strings.Contains(l, "recovered at the ABI edge: "+message+"\n") &&
			strings.Contains(l, "goroutine ") && strings.Contains(l, frame) {
			return
		}
	}
	t.Fatalf("no critical log of the panic in %s (%q at %s):\n%s", callback, message, frame,
		strings.Join(h.GetCriticalLogs(), "\n---\n"))
}

// Without a panic the guest's stream callbacks run, and the counter, defined at VM start,
// reads 0.
func TestBridgeWithoutPanics(t *testing.T) {
	h := panicky(t, "")
	if h.StartPlugin() != types.OnPluginStartStatusOK {
		t.Fatal("plugin did not start")
	}
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Body: []byte("hi")})
	if v, _ := headerOf(resp.Headers, "x-panicky"); resp.StatusCode != 200 || v != "seen" {
		t.Fatalf("%d, x-panicky %q", resp.StatusCode, v)
	}
	if n := counter(t, h, abiPanics); n != 0 {
		t.Fatalf("%s = %d", abiPanics, n)
	}
}

// A panic in NewHttpContext (proxy_on_context_create) does not trap the VM: the stream
// passes through untouched to the upstream and back, once per stream, and the VM serves the
// next one.
func TestBridgePanicInNewHttpContextFailsOpen(t *testing.T) {
	h := panicky(t, "new_http_context")
	if h.StartPlugin() != types.OnPluginStartStatusOK {
		t.Fatal("plugin did not start")
	}
	for i := 1; i <= 2; i++ {
		resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Body: []byte("hi")})
		if resp.StatusCode != 200 || string(resp.Body) != "echo:hi" || resp.Upstream == nil {
			t.Fatalf("request %d: %d %q, upstream %v", i, resp.StatusCode, resp.Body, resp.Upstream)
		}
		if v, ok := headerOf(resp.Headers, "x-panicky"); ok {
			t.Fatalf("request %d: the guest's callbacks ran for a stream it has no context for (x-panicky %q)", i, v)
		}
		if n := counter(t, h, abiPanics); n != uint64(i) {
			t.Fatalf("after request %d: %s = %d", i, abiPanics, n)
		}
	}
	requirePanicLog(t, h, "proxy_on_context_create", "panicky: NewHttpContext", "main.(*pluginContext).NewHttpContext")
	if n := h.LiveStreams(); n != 0 {
		t.Fatalf("%d streams left", n)
	}
}

// A panic in a stream callback that escaped the filter hands the stream to the bridge: the
// callback continues, the stream's later callbacks pass through (no x-panicky on the
// response), and only that one panic is counted.
func TestBridgePanicInAStreamCallbackFailsOpenForThatStream(t *testing.T) {
	h := panicky(t, "request_headers")
	if h.StartPlugin() != types.OnPluginStartStatusOK {
		t.Fatal("plugin did not start")
	}
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Body: []byte("hi")})
	if resp.StatusCode != 200 || string(resp.Body) != "echo:hi" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Body)
	}
	if v, ok := headerOf(resp.Headers, "x-panicky"); ok {
		t.Fatalf("the stream's response callbacks still reached the guest (x-panicky %q)", v)
	}
	if n := counter(t, h, abiPanics); n != 1 {
		t.Fatalf("%s = %d, want 1", abiPanics, n)
	}
	requirePanicLog(t, h, "proxy_on_request_headers", "panicky: OnHttpRequestHeaders", "main.(*httpContext).OnHttpRequestHeaders")
	if n := h.LiveStreams(); n != 0 {
		t.Fatalf("%d streams left", n)
	}
}

// A panic in OnPluginStart is the plugin refusing to start, reported, not a trap.
func TestBridgePanicInPluginStartRefusesToStart(t *testing.T) {
	h := panicky(t, "plugin_start")
	if h.StartPlugin() != types.OnPluginStartStatusFailed {
		t.Fatal("the plugin started")
	}
	requirePanicLog(t, h, "proxy_on_configure", "panicky: OnPluginStart", "main.(*pluginContext).OnPluginStart")
}

// A panic in a tick is counted each time; the VM goes on ticking and serving.
func TestBridgePanicInATick(t *testing.T) {
	h := panicky(t, "tick")
	if h.StartPlugin() != types.OnPluginStartStatusOK {
		t.Fatal("plugin did not start")
	}
	before := counter(t, h, abiPanics)
	h.Worker(0).Tick()
	h.Worker(0).Tick()
	if n := counter(t, h, abiPanics) - before; n != 2 {
		t.Fatalf("%d panics counted for 2 ticks", n)
	}
	requirePanicLog(t, h, "proxy_on_tick", "panicky: OnTick", "main.(*pluginContext).OnTick")
	if resp := h.RunHTTP(&hostsim.Request{Headers: getReq}); resp.StatusCode != 200 {
		t.Fatalf("after the ticks: %d", resp.StatusCode)
	}
}

// A host that writes its answers at addresses the guest's allocator did not return gets
// them refused, through the SDK (InternalFailure, with a warning saying why) and through
// hostabi (ErrForeignAddress), instead of the guest reading memory it never handed out.
func TestBridgeRefusesAddressesItDidNotHandOut(t *testing.T) {
	tests := []struct {
		name    string           // the host
		opts    []hostsim.Option // how it hands data over
		sdk     string           // what the guest's SDK read of :path logged
		hostabi string           // what its hostabi read logged
		refused bool             // whether the bridge warned of a refused address
	}{
		{"Envoy-like", nil, "panicky: sdk read: /v1/models?x=1", "panicky: hostabi read: /v1/models?x=1", false},
		{"foreign addresses", []hostsim.Option{hostsim.WithForeignAddresses()},
			"panicky: sdk read: error: error status returned by host: internal failure",
			"panicky: hostabi read: error: hostabi: the host returned data at an address the guest did not allocate", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := panicky(t, "", tt.opts...)
			if h.StartPlugin() != types.OnPluginStartStatusOK {
				t.Fatal("plugin did not start")
			}
			h.RunHTTP(&hostsim.Request{Headers: getReq})
			if infos := h.GetInfoLogs(); !slices.Contains(infos, tt.sdk) || !slices.Contains(infos, tt.hostabi) {
				t.Errorf("guest logs:\n%s\nwant %q and %q", strings.Join(infos, "\n"), tt.sdk, tt.hostabi)
			}
			refused := hostsimtest.ContainsLine(h.GetWarnLogs(), "spillway: bridge: refused the host's answer at 0x",
				"proxy_on_memory_allocate did not hand that memory out")
			if refused != tt.refused {
				t.Errorf("bridge warned of a refusal: %v, want %v; warnings: %q", refused, tt.refused, h.GetWarnLogs())
			}
			if n := counter(t, h, abiPanics); n != 0 {
				t.Errorf("%s = %d: a refusal is not a panic", abiPanics, n)
			}
		})
	}
}
