package hostsim_test

// The proxy-wasm Go SDK's end-to-end suite, against hostsim. The SDK (tetratelabs/
// proxy-wasm-go-sdk v0.24.0) runs each of its examples in a real Envoy
// (`envoy -c examples/<name>/envoy.yaml --concurrency 1`) and asserts what Envoy logs and
// answers (e2e/e2e_test.go, in the module cache). The guest here, testdata/guests/sdkexamples,
// does what each example does, written anew (root_id names the example); each test sets up
// hostsim as the example's envoy.yaml sets up Envoy and asserts what the SDK's test asserts
// for it — each such assertion is a call to sdkAssert — and, where that assertion proves too
// little, something that could fail (marked "beyond the SDK").
//
// Covered, with the SDK's runnable assertions (70 in all, all here):
//
//	dispatch_call_on_tick    4  two plugins on one VM, each ticking and calling out
//	foreign_call_on_tick     1  + beyond the SDK: compress's result decodes, uncompress round trip
//	helloworld               2
//	http_auth_random         3  + the 403's body and header, the granted request's upstream
//	http_body               16  main and echo filters sharing a VM; the echo listener's answer is
//	                            the echo plugin's own (a nested exchange through it)
//	http_headers             7  + the request header the filter set reached the upstream
//	http_routing             2  (virtual hosts by domain modelled as a matcher on :authority)
//	json_validation          2  + a body without a required key is refused
//	metrics                  4  (counters read by name: Envoy's stats tag rules, which turn the
//	                            name into custom_header_value_counts{value=...}, are not modelled)
//	multiple_dispatches     11  (10 callouts with an empty :authority) + the header the last added
//	postpone_requests        2  + the request resumes at the first tick, a second later
//	properties               8  route metadata read as xds.route_metadata...: the example reads
//	                            top-level route_metadata, removed in Envoy 1.33 (NotFound there and
//	                            here); hostsim has one route, so each request's route metadata is
//	                            set before it
//	shared_data              2  (over two workers)
//	shared_queue             4  sender and receiver VMs in one process, the receiver's three plugins
//	                            on one VM (on every VM: a bootstrap singleton runs on the main
//	                            thread alone, and hostsim has no bootstrap extensions)
//	vm_plugin_configuration  2
//
// Beyond the e2e suite: http_body_chunk, which it does not run, with assertions of our own.
//
// Left out: network (its 11 assertions; a TCP filter: hostsim has no network filters), and
// shared_queue's TCP half (2: the tcp listener's answer and the tcp_data_hashes queue).

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// sdkAssert is one of the SDK e2e suite's assertions: it fails the test when ok is false.
func sdkAssert(t *testing.T, ok bool, what string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf("SDK e2e: "+what, args...)
	}
}

// sdkExample starts the examples guest with root_id example (and opts), configured as the
// examples' envoy.yaml configure Envoy: without allow_on_headers_stop_iteration, so a headers
// Pause stops all iteration until the filter continues.
func sdkExample(t *testing.T, example string, opts ...hostsim.Option) *hostsimtest.Host {
	t.Helper()
	opts = append([]hostsim.Option{hostsim.WithRootID(example), hostsim.WithoutAllowOnHeadersStopIteration()}, opts...)
	h := hostsimtest.New(t, hostsimtest.Guest(t, "sdkexamples"), opts...)
	if !h.StartPlugin() {
		t.Fatalf("%s did not start:\n%s", example, dump(h.Host))
	}
	return h
}

// logged reports whether a log line of vm ("": any VM) contains sub.
func logged(h *hostsim.Host, vm, sub string) bool {
	for _, l := range h.Logs() {
		if (vm == "" || l.VM == vm) && strings.Contains(l.Message, sub) {
			return true
		}
	}
	return false
}

// staticReply answers like the examples' staticreply listener, an Envoy direct_response.
func staticReply(status, body string) *hostsim.UpstreamResponse {
	return &hostsim.UpstreamResponse{Headers: hdrs(":status", status, "content-type", "text/plain",
		"content-length", fmt.Sprint(len(body)), "server", "envoy"), Body: []byte(body)}
}

func upstreamReply(status, body string) hostsim.UpstreamFunc {
	return func(context.Context, *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		return staticReply(status, body), nil
	}
}

var sdkGet = hdrs(":method", "GET", ":path", "/", ":authority", "localhost:18000", ":scheme", "http")

func sdkRequest(method, path string, kv ...string) [][2]string {
	return append(hdrs(":method", method, ":path", path, ":authority", "localhost:18000", ":scheme", "http"), hdrs(kv...)...)
}

// Two filters of one vm_config ("plugin1", "plugin2") on one VM, root contexts 1 and 2:
// each ticks every 100 ms and calls web_service, /ok (200) and /fail (503) in turn.
func TestSDKDispatchCallOnTick(t *testing.T) {
	h := sdkExample(t, "dispatch_call_on_tick", hostsim.WithPluginConfiguration([]byte("plugin1")),
		hostsim.WithPlugin(hostsim.PluginConfig{Name: "plugin2", RootID: "dispatch_call_on_tick", Configuration: []byte("plugin2")}),
		hostsim.WithCluster("web_service"),
		hostsim.WithCalloutHandler(func(_ context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
			if p, _ := headerOf(c.Headers, ":path"); p == "/fail" {
				return &hostsim.CalloutResponse{Headers: hdrs(":status", "503", "server", "envoy")}
			}
			return &hostsim.CalloutResponse{Headers: hdrs(":status", "200", "content-length", "13", "server", "envoy"),
				Body: []byte("example body\n")}
		}))
	h.Advance(500 * time.Millisecond)
	for n := 1; n <= 5; n++ {
		sdkAssert(t, logged(h.Host, "worker-0", fmt.Sprintf("called %d for contextID=1", n)), "call %d answered on root 1", n)
		sdkAssert(t, logged(h.Host, "worker-0", fmt.Sprintf("called %d for contextID=2", n)), "call %d answered on root 2", n)
	}
	sdkAssert(t, logged(h.Host, "worker-0", "response header for the dispatched call: :status: 200"), ":status: 200 logged")
	sdkAssert(t, logged(h.Host, "worker-0", "response header for the dispatched call: :status: 503"), ":status: 503 logged")
}

// compress through Envoy's foreign function every millisecond. The SDK's test looks for the
// "called: N" log line alone, which appears when compress fails too.
func TestSDKForeignCallOnTick(t *testing.T) {
	h := sdkExample(t, "foreign_call_on_tick")
	h.Advance(5 * time.Millisecond)
	for n := 1; n <= 5; n++ {
		sdkAssert(t, logged(h.Host, "worker-0", fmt.Sprintf("foreign function (compress) called: %d", n)), "compress call %d", n)
	}
	// Beyond the SDK: the result is a zlib stream of the input, and uncompress gives it back.
	const prefix = "foreign function (compress) called: 5, result: "
	var result string
	for _, l := range h.Logs() {
		if r, ok := strings.CutPrefix(l.Message, prefix); ok && l.VM == "worker-0" {
			result = r
		}
	}
	z, err := hex.DecodeString(result)
	if err != nil || len(z) == 0 {
		t.Fatalf("compress result %q: want a non-empty hex string", result)
	}
	r, err := zlib.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatalf("compress result is not zlib: %v", err)
	}
	if b, err := io.ReadAll(r); err != nil || string(b) != "hello world!" {
		t.Fatalf("compress result decodes to %q, %v", b, err)
	}
	if !logged(h.Host, "worker-0", "foreign function (uncompress) called: 5, result: hello world!") {
		t.Fatalf("uncompress did not give the input back:\n%s", dump(h.Host))
	}
}

func TestSDKHelloworld(t *testing.T) {
	h := sdkExample(t, "helloworld")
	h.Advance(time.Second)
	sdkAssert(t, logged(h.Host, "", "OnPluginStart from Go!"), "start logged")
	sdkAssert(t, logged(h.Host, "worker-0", "It's "), "tick logged")
}

// Each request's headers go to httpbin in a callout; the FNV-1a hash of the answer's body
// grants (even) or refuses (odd, 403) the request.
func TestSDKHTTPAuthRandom(t *testing.T) {
	parity := func(s string) uint32 { h := fnv.New32a(); h.Write([]byte(s)); return h.Sum32() % 2 }
	bodies := map[uint32]string{}
	for i := 0; len(bodies) < 2; i++ {
		b := fmt.Sprintf(`{"uuid": "%d"}`, i)
		bodies[parity(b)] = b
	}
	var calls int
	h := sdkExample(t, "http_auth_random", hostsim.WithCluster("httpbin"),
		hostsim.WithCalloutHandler(func(context.Context, *hostsim.Callout) *hostsim.CalloutResponse {
			calls++
			return &hostsim.CalloutResponse{Headers: hdrs(":status", "200", "content-type", "application/json"),
				Body: []byte(bodies[uint32(calls%2)])} // odd first, then even
		}),
		hostsim.WithUpstream(upstreamReply("200", "uuid\n")))
	req := sdkRequest("GET", "/uuid", "this-is-key", "this-is-value")
	refused, granted := h.RunHTTP(&hostsim.Request{Headers: req}), h.RunHTTP(&hostsim.Request{Headers: req})
	sdkAssert(t, logged(h.Host, "", "access forbidden"), "a request refused")
	sdkAssert(t, logged(h.Host, "", "access granted"), "a request granted")
	sdkAssert(t, logged(h.Host, "", "response header from httpbin: :status: 200"), "the callout's status logged")
	// Beyond the SDK: what each client got.
	if v, _ := headerOf(refused.Headers, "powered-by"); refused.StatusCode != 403 || string(refused.Body) != "access forbidden" ||
		v != "proxy-wasm-go-sdk!!" || refused.Upstream != nil {
		t.Errorf("refused request: %d %q powered-by %q, upstream %v", refused.StatusCode, refused.Body, v, refused.Upstream != nil)
	}
	if granted.StatusCode != 200 || granted.Upstream == nil {
		t.Errorf("granted request: %d, upstream %v", granted.StatusCode, granted.Upstream != nil)
	}
}

// The main listener's filter ("body-set") changes the request's or the response's body; its
// upstream is the echo listener, whose filter — the same vm_config with "echo", on the same
// VM — answers the request's body back.
func TestSDKHTTPBody(t *testing.T) {
	var h *hostsimtest.Host
	echoListener := func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
		resp := h.Worker(0).RunHTTP(&hostsim.Request{Headers: r.Headers, Body: r.Body, Plugin: "echo"})
		return &hostsim.UpstreamResponse{Headers: resp.Headers, Body: resp.Body}, nil
	}
	h = sdkExample(t, "http_body", hostsim.WithPluginConfiguration([]byte("body-set")),
		hostsim.WithPlugin(hostsim.PluginConfig{Name: "echo", RootID: "http_body", Configuration: []byte("echo")}),
		hostsim.WithUpstream(echoListener))
	for _, mode := range []string{"request", "response"} {
		for _, tc := range []struct {
			op, want string // buffer-operation, the body the client gets
		}{
			{"append", "[original body][this is appended body]"},
			{"prepend", "[this is prepended body][original body]"},
			{"replace", "[this is replaced body]"},
			{"invalid", "[this is replaced body]"}, // anything else replaces
		} {
			h.ResetLogs()
			body := "[original body]"
			resp := h.RunHTTP(&hostsim.Request{Headers: sdkRequest("PUT", "/anything", "content-length", fmt.Sprint(len(body)),
				"buffer-replace-at", mode, "buffer-operation", tc.op), Body: []byte(body)})
			sdkAssert(t, string(resp.Body) == tc.want, "%s %s: body %q, want %q", mode, tc.op, resp.Body, tc.want)
			sdkAssert(t, logged(h.Host, "worker-0", "original "+mode+" body: [original body]"), "%s %s: original body logged", mode, tc.op)
		}
	}
}

func TestSDKHTTPHeaders(t *testing.T) {
	h := sdkExample(t, "http_headers",
		hostsim.WithPluginConfiguration([]byte(`{"header": "x-wasm-header", "value": "demo-wasm"}`)),
		hostsim.WithUpstream(upstreamReply("200", "example body\n")))
	resp := h.RunHTTP(&hostsim.Request{Headers: sdkRequest("GET", "/uuid", "this-is-key", "this-is-value")})
	v1, _ := headerOf(resp.Headers, "x-wasm-header")
	v2, _ := headerOf(resp.Headers, "x-proxy-wasm-go-sdk-example")
	sdkAssert(t, v1 == "demo-wasm", "x-wasm-header %q", v1)
	sdkAssert(t, v2 == "http_headers", "x-proxy-wasm-go-sdk-example %q", v2)
	for _, s := range []string{"this-is-key", "this-is-value", "server: envoy", "x-wasm-header", "x-proxy-wasm-go-sdk-example"} {
		sdkAssert(t, logged(h.Host, "worker-0", s), "%q logged", s)
	}
	// Beyond the SDK: the request header the filter set reached the upstream.
	if v, _ := headerOf(resp.Upstream.Headers, "test"); v != "best" {
		t.Errorf("upstream got test: %q, want best", v)
	}
}

// The route picks canary for an :authority ending in -canary (the example's virtual host
// "*-canary"; here a matcher on :authority, exact for the one authority the test sends),
// primary otherwise; the filter appends -canary to about half the requests, which clears
// the route cache.
func TestSDKHTTPRouting(t *testing.T) {
	h := sdkExample(t, "http_routing", hostsim.WithCluster("primary", "canary"),
		hostsim.WithRouteCluster(hostsim.RouteCluster{Matcher: &hostsim.ClusterMatcher{RequestHeader: ":authority",
			Clusters: map[string]string{"localhost:18000-canary": "canary"}, OnNoMatch: "primary"}}),
		hostsim.WithUpstream(func(_ context.Context, r *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
			return staticReply("200", "hello from "+r.Cluster+"!\n"), nil
		}))
	var primary, canary bool
	for i := 0; i < 64 && !(primary && canary); i++ { // a fair coin: both within 64 draws but for 2^-63
		resp := h.RunHTTP(&hostsim.Request{Headers: sdkGet})
		primary = primary || strings.Contains(string(resp.Body), "primary")
		canary = canary || strings.Contains(string(resp.Body), "canary")
	}
	sdkAssert(t, primary, "a request reached primary")
	sdkAssert(t, canary, "a request reached canary")
}

func TestSDKJSONValidation(t *testing.T) {
	h := sdkExample(t, "json_validation", hostsim.WithPluginConfiguration([]byte(`{ "requiredKeys": ["id", "token"] }`)),
		hostsim.WithUpstream(upstreamReply("200", "hello from the server\n")))
	plain := h.RunHTTP(&hostsim.Request{Headers: sdkGet})
	sdkAssert(t, plain.StatusCode == 403, "a request without content-type: %d, want 403", plain.StatusCode)
	json := sdkRequest("POST", "/", "content-type", "application/json")
	ok := h.RunHTTP(&hostsim.Request{Headers: json, Body: []byte(`{"id": "abc123", "token": "xyz456"}`)})
	sdkAssert(t, ok.StatusCode == 200, "a valid payload: %d, want 200", ok.StatusCode)
	// Beyond the SDK: a payload without a required key is refused before the upstream.
	bad := h.RunHTTP(&hostsim.Request{Headers: json, Body: []byte(`{"id": "abc123"}`)})
	if bad.StatusCode != 403 || string(bad.Body) != "invalid payload" || bad.Upstream != nil {
		t.Errorf("a payload without token: %d %q, upstream %v", bad.StatusCode, bad.Body, bad.Upstream != nil)
	}
}

func TestSDKMetrics(t *testing.T) {
	h := sdkExample(t, "metrics", hostsim.WithUpstream(upstreamReply("200", "example body\n")))
	for _, tc := range []struct {
		value string // my-custom-header
		n     int    // requests carrying it
	}{{"foo", 3}, {"bar", 5}} {
		all200 := true
		for i := 0; i < tc.n; i++ {
			resp := h.RunHTTP(&hostsim.Request{Headers: sdkRequest("GET", "/", "my-custom-header", tc.value)})
			all200 = all200 && resp.StatusCode == 200
		}
		sdkAssert(t, all200, "requests with %s answered 200", tc.value)
	}
	for _, tc := range []struct {
		value string // my-custom-header
		want  uint64 // the counter
	}{{"foo", 3}, {"bar", 5}} {
		got, err := h.GetCounterMetric("custom_header_value_counts_value=" + tc.value + "_reporter=wasmgosdk")
		sdkAssert(t, err == nil && got == tc.want, "counter for %s: %d (%v), want %d", tc.value, got, err, tc.want)
	}
}

// At the response headers, ten callouts with an empty :authority (Context::httpCall checks
// only that it is present); the response waits for all ten.
func TestSDKMultipleDispatches(t *testing.T) {
	h := sdkExample(t, "multiple_dispatches", hostsim.WithCluster("httpbin"),
		hostsim.WithCalloutHandler(func(context.Context, *hostsim.Callout) *hostsim.CalloutResponse {
			return &hostsim.CalloutResponse{Headers: hdrs(":status", "200")}
		}),
		hostsim.WithUpstream(upstreamReply("200", "{}\n")))
	resp := h.RunHTTP(&hostsim.Request{Headers: sdkGet})
	sdkAssert(t, resp.StatusCode == 200, "status %d, want 200", resp.StatusCode)
	for n := 9; n >= 1; n-- {
		sdkAssert(t, logged(h.Host, "worker-0", fmt.Sprintf("pending dispatched requests: %d", n)), "%d pending logged", n)
	}
	sdkAssert(t, logged(h.Host, "worker-0", "response resumed after processed 10 dispatched request"), "resume logged")
	// Beyond the SDK: the last answer's header is on the response.
	if v, _ := headerOf(resp.Headers, "total-dispatched"); v != "10" {
		t.Errorf("total-dispatched %q, want 10", v)
	}
}

// Every request waits at its headers for the root's next one-second tick.
func TestSDKPostponeRequests(t *testing.T) {
	h := sdkExample(t, "postpone_requests", hostsim.WithUpstream(upstreamReply("200", "example body\n")))
	start := h.Clock().Now()
	ex, err := h.Worker(0).StartHTTP(&hostsim.Request{Headers: sdkGet})
	if err != nil {
		t.Fatal(err)
	}
	h.Advance(time.Second)
	resp, err := ex.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sdkAssert(t, logged(h.Host, "worker-0", "postpone request with contextID=2"), "postponed")
	sdkAssert(t, logged(h.Host, "worker-0", "resume request with contextID=2"), "resumed")
	// Beyond the SDK: it resumed at the tick, a second after it came.
	if first, ok := resp.TimeToFirstByte(); resp.StatusCode != 200 || !ok || first != time.Second || resp.Start != start {
		t.Errorf("response %d after %v (%v), want 200 after 1s", resp.StatusCode, first, ok)
	}
}

// The route's metadata names the header a request needs (401 without it); a route without
// the metadata lets requests through.
func TestSDKProperties(t *testing.T) {
	h := sdkExample(t, "properties", hostsim.WithUpstream(upstreamReply("200", "example body\n")))
	auth := []string{"xds", "route_metadata", "filter_metadata", "envoy.filters.http.wasm", "auth"}
	for _, tc := range []struct {
		path, meta string    // the route and its metadata's auth ("": none; hostsim has one route, set before)
		header     [2]string // the header sent (empty: none)
		want       int       // the status
	}{
		{"/three", "", [2]string{}, 200},
		{"/one", "cookie", [2]string{}, 401},
		{"/one", "cookie", [2]string{"cookie", "value"}, 200},
		{"/two", "authorization", [2]string{}, 401},
		{"/two", "authorization", [2]string{"authorization", "token"}, 200},
	} {
		if tc.meta != "" {
			if err := h.SetProperty(auth, []byte(tc.meta)); err != nil {
				t.Fatal(err)
			}
		}
		req := sdkRequest("GET", tc.path)
		if tc.header[0] != "" {
			req = append(req, tc.header)
		}
		resp := h.RunHTTP(&hostsim.Request{Headers: req})
		sdkAssert(t, resp.StatusCode == tc.want, "%s with %q: %d, want %d", tc.path, tc.header[0], resp.StatusCode, tc.want)
	}
	for _, s := range []string{`auth header is "cookie"`, `auth header is "authorization"`, "no auth header for route"} {
		sdkAssert(t, logged(h.Host, "worker-0", s), "%q logged", s)
	}
}

// Ten requests, over two workers, each add one to a counter in shared data with a CAS.
func TestSDKSharedData(t *testing.T) {
	h := sdkExample(t, "shared_data", hostsim.WithWorkers(2), hostsim.WithUpstream(upstreamReply("200", "example body\n")))
	all200 := true
	for i := 0; i < 10; i++ {
		all200 = all200 && h.RunHTTP(&hostsim.Request{Headers: sdkGet}).StatusCode == 200
	}
	sdkAssert(t, all200, "ten requests answered 200")
	sdkAssert(t, logged(h.Host, "", "shared value: 10"), "the tenth request counted 10")
}

// The sender's HTTP filter (vm_id sender) enqueues every request and response header to
// queues the receiver (vm_id receiver, three plugins on one VM) registered; the receiver
// dequeues and logs them.
func TestSDKSharedQueue(t *testing.T) {
	proc := hostsim.NewProcess()
	recv := sdkExample(t, "shared_queue_receiver", hostsim.WithProcess(proc), hostsim.WithVMID("receiver"),
		hostsim.WithPluginConfiguration([]byte("http_request_headers")),
		hostsim.WithPlugin(hostsim.PluginConfig{Name: "response", RootID: "shared_queue_receiver", Configuration: []byte("http_response_headers")}),
		hostsim.WithPlugin(hostsim.PluginConfig{Name: "tcp", RootID: "shared_queue_receiver", Configuration: []byte("tcp_data_hashes")}))
	send := sdkExample(t, "shared_queue_sender", hostsim.WithProcess(proc), hostsim.WithVMID("sender"),
		hostsim.WithPluginConfiguration([]byte("http")), hostsim.WithUpstream(upstreamReply("200", "example body\n")))
	resp := send.RunHTTP(&hostsim.Request{Headers: sdkGet})
	sdkAssert(t, resp.StatusCode == 200, "the http listener: %d, want 200", resp.StatusCode)
	sdkAssert(t, logged(send.Host, "", `enqueued data: {"key": ":method","value": "GET"}`), "a request header enqueued")
	sdkAssert(t, logged(recv.Host, "", "dequeued data from http_request_headers"), "request headers dequeued")
	sdkAssert(t, logged(recv.Host, "", "dequeued data from http_response_headers"), "response headers dequeued")
}

func TestSDKVMPluginConfiguration(t *testing.T) {
	h := sdkExample(t, "vm_plugin_configuration",
		hostsim.WithVMConfiguration([]byte("{\n  \"name\": \"vm configuration\"\n}\n")),
		hostsim.WithPluginConfiguration([]byte("{\n  \"name\": \"plugin configuration\"\n}\n")))
	sdkAssert(t, logged(h.Host, "", `name": "vm configuration`), "the VM configuration logged")
	sdkAssert(t, logged(h.Host, "", `name": "plugin configuration`), "the plugin configuration logged")
}

// http_body_chunk, which the SDK's e2e suite does not run: the body is read chunk by chunk as
// it arrives; a chunk with "pattern" is refused (403 naming the chunk), a body without one
// goes to the upstream whole.
func TestSDKHTTPBodyChunk(t *testing.T) {
	h := sdkExample(t, "http_body_chunk", hostsim.WithUpstream(echoUpstream(nil)))
	req := sdkRequest("POST", "/anything")
	refused := h.RunHTTP(&hostsim.Request{Headers: req, BodyChunks: [][]byte{[]byte("aaa"), []byte("bb pattern bb"), []byte("cc")}})
	if refused.StatusCode != 403 || string(refused.Body) != "pattern found in chunk: 2" || refused.Upstream != nil {
		t.Errorf("a body with the pattern in chunk 2: %d %q, upstream %v", refused.StatusCode, refused.Body, refused.Upstream != nil)
	}
	ok := h.RunHTTP(&hostsim.Request{Headers: req, BodyChunks: [][]byte{[]byte("aaa"), []byte("bbb")}})
	if ok.StatusCode != 200 || ok.Upstream == nil || string(ok.Upstream.Body) != "aaabbb" {
		t.Errorf("a body without the pattern: %d, upstream %v", ok.StatusCode, ok.Upstream != nil)
	}
	if !logged(h.Host, "worker-0", "read chunk size: 3") || !logged(h.Host, "worker-0", "pattern not found") {
		t.Errorf("chunks not read one by one:\n%s", dump(h.Host))
	}
}
