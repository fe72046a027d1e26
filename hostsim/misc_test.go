package hostsim_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// Foreign functions: registered ones answer, clear_route_cache is built in, unknown ones
// are NotFound; proxy_done without a pending root is NotFound; header pairs round trip.
func TestForeignDonePairs(t *testing.T) {
	h := probe(t, `
request_headers foreign compress abc
request_headers foreign failing x
request_headers foreign clear_route_cache -
request_headers foreign nope -
request_headers done
request_headers set_pairs 0 :method=PUT,:path=/p,X-A=1
request_headers get_pairs 0
request_headers time_ns
request_headers set_pairs 0 -
request_headers get_pairs 0
`, hostsim.WithForeignFunction("compress", func(b []byte) ([]byte, error) { return append([]byte("z:"), b...), nil }),
		hostsim.WithForeignFunction("failing", func([]byte) ([]byte, error) { return nil, errors.New("boom") }))
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	requireTrace(t, h.Host, "worker-0",
		"op foreign compress abc -> Ok z:abc",
		"op foreign failing x -> InternalFailure",
		"op foreign clear_route_cache - -> Ok",
		"op foreign nope - -> NotFound",
		"op done -> NotFound",
		"op set_pairs 0 :method=PUT,:path=/p,X-A=1 -> Ok",
		"op get_pairs 0 -> Ok n=55 :method=PUT,:path=/p,x-a=1",
		"op time_ns -> Ok "+itoa(h.Clock().Now().UnixNano()),
		"op set_pairs 0 - -> Ok",
		"op get_pairs 0 -> Ok n=0 ")
}

// Envoy's built-in foreign functions (foreign.cc) without any registration: compress and
// uncompress are zlib (uncompress reads C zlib's stream; what compress answers decodes back),
// a stream that is not zlib is SerializationFailure; set_envoy_filter_state stores an object
// made by the key's factory in the stream's filter state, answers NotFound for a key no
// factory has — the filter state Spillway's routes read among them, which must be (and is)
// written with proxy_set_property — and for a root context, which has no stream info.
func TestBuiltinForeignFunctions(t *testing.T) {
	const cZlibABC = "0x789c4b4c4a0600024d0127" // CPython's zlib.compress(b"abc"), C zlib
	setFS := func(key, value string) string {
		b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
		b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), value)
		return fmt.Sprintf("0x%x", b)
	}
	sni := setFS("envoy.network.upstream_server_name", "api.example")
	target := setFS("wasm.spillway_target", "openai")
	h := probe(t, `
request_headers foreign compress abc
request_headers foreign uncompress `+cZlibABC+`
request_headers foreign uncompress abc
request_headers foreign set_envoy_filter_state `+sni+`
request_headers foreign set_envoy_filter_state `+target+`
request_headers foreign set_envoy_filter_state 0xffff
request_headers foreign declare_property -
tick foreign set_envoy_filter_state `+sni+`
`)
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, getReq, true)
	h.Tick()
	requireTrace(t, h.Host, "worker-0",
		"op foreign compress abc -> Ok 0x789c",
		"op foreign uncompress "+cZlibABC+" -> Ok abc",
		"op foreign uncompress abc -> SerializationFailure",
		"op foreign set_envoy_filter_state "+sni+" -> Ok",
		"op foreign set_envoy_filter_state "+target+" -> NotFound",
		"op foreign set_envoy_filter_state 0xffff -> BadArgument",
		"op foreign declare_property - -> NotFound", // not modelled
		"cb tick", "op foreign set_envoy_filter_state "+sni+" -> NotFound")
	var compressed string
	for _, l := range trace(h.Host, "worker-0") {
		if c, ok := strings.CutPrefix(l, "op foreign compress abc -> Ok 0x"); ok {
			compressed = c
		}
	}
	z, err := hex.DecodeString(compressed)
	if err != nil {
		t.Fatalf("compress answered %q", compressed)
	}
	if r, err := zlib.NewReader(bytes.NewReader(z)); err != nil {
		t.Fatalf("compress's answer is not zlib: %v", err)
	} else if b, err := io.ReadAll(r); err != nil || string(b) != "abc" {
		t.Fatalf("compress's answer decodes to %q, %v", b, err)
	}
	if v, ok := h.Worker(0).GetEnvoyFilterState(id, "envoy.network.upstream_server_name"); !ok || string(v) != "api.example" {
		t.Fatalf("filter state object %q, %v", v, ok)
	}
	if _, ok := h.Worker(0).GetFilterState(id, []string{"spillway_target"}); ok {
		t.Fatal("set_envoy_filter_state wrote the filter's own filter state")
	}
}

// Request trailers can be added from the last request body callback (Envoy's
// addDecodedTrailers); a body buffered beyond the connection buffer limit gets a 413.
func TestTrailersFromLastBodyAndBufferLimit(t *testing.T) {
	h := probe(t, "request_body@2 add_header 1 x-trailer t\nrequest_body@3 ret 1",
		hostsim.WithBufferLimit(8), hostsim.WithUpstream(echoUpstream(nil)))
	resp := h.RunHTTP(&hostsim.Request{Headers: getReq, Body: []byte("body")})
	requireTrace(t, h.Host, "worker-0", "op add_header 1 x-trailer t -> Ok")
	if v, _ := headerOf(resp.Upstream.Trailers, "x-trailer"); v != "t" {
		t.Fatalf("upstream trailers %v", resp.Upstream.Trailers)
	}
	resp = h.RunHTTP(&hostsim.Request{Headers: getReq, BodyChunks: [][]byte{[]byte("12345"), []byte("67890")}})
	if resp.StatusCode != 413 || resp.Upstream != nil {
		t.Fatalf("over the buffer limit: %d, upstream %v", resp.StatusCode, resp.Upstream)
	}
}

// With a real clock the host fires ticks itself, on every VM that set a period.
func TestRealClockTicks(t *testing.T) {
	var logs hostsimtest.Lines
	probe(t, "configure tick_period 5", hostsim.WithRealClock(), hostsim.WithLogWriter(&logs))
	if n := len(logs.Wait("worker-0: cb tick ctx=1", 3)); n < 3 {
		t.Fatalf("%d ticks on worker-0 with a real clock, want 3", n)
	}
	if n := len(logs.Wait("main: cb tick ctx=1", 1)); n < 1 {
		t.Fatal("no tick on the main VM with a real clock")
	}
}

// Exchanges can be started and left paused; Advance (here via a queue notification from
// another request) resumes them, as a queue-based admission would.
func TestExchangeResumedByQueue(t *testing.T) {
	h := probe(t, `
configure register_queue wake
request_headers@2 ret 1
request_headers@3 resolve_queue - wake
request_headers@3 enqueue $queue go
queue_ready effective 2
queue_ready continue 0
`, hostsim.WithUpstream(echoUpstream(nil)))
	w := h.Host.Worker(0)
	first, err := w.StartHTTP(&hostsim.Request{Headers: getReq})
	if err != nil {
		t.Fatal(err)
	}
	if first.Done() {
		t.Fatal("first request not paused")
	}
	if _, err := w.RunHTTP(context.Background(), &hostsim.Request{Headers: getReq}); err != nil {
		t.Fatal(err)
	}
	if !first.Done() || first.Response().StatusCode != 200 {
		t.Fatalf("paused request not resumed by the queue notification: %+v", first.Response())
	}
}

func itoa(n int64) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
