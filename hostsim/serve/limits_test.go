package serve

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
	"github.com/spillwayproxy/spillway/internal/rootid"
	"github.com/spillwayproxy/spillway/policies/envoylimits"
)

// By default serve models the bootstrap `spillway render envoy` generates: envoy/envoy.yaml
// is the demo policy rendered (golden-tested in package envoy), and serve on the demo
// policy must buffer, time out and leave timers off exactly as it says.
func TestDefaultsModelTheGeneratedBootstrap(t *testing.T) {
	yaml, err := os.ReadFile(filepath.Join(hostsimtest.ModuleRoot(t), "envoy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	field := func(re string) []string {
		var out []string
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(yaml), -1) {
			out = append(out, m[1])
		}
		return out
	}
	seconds := func(s string) time.Duration {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return time.Duration(n) * time.Second
	}
	demo, err := LoadPolicy("", nil)
	if err != nil {
		t.Fatal(err)
	}
	l := limitsFor(DefaultOptions(), demo)

	// The virtual host's limit and the routed route's retry buffer: the demo leaves
	// failover.via unset, so it fails over through the router in both.
	buffer := field(`request_body_buffer_limit: "(\d+)"`)
	slices.Sort(buffer)
	if l.Router == nil || len(buffer) != 2 || !l.RequestBufferFromPolicy ||
		!slices.Equal(buffer, slices.Sorted(slices.Values([]string{strconv.Itoa(l.RequestBufferLimit), strconv.FormatUint(*l.Router.Retry.BufferLimit, 10)}))) {
		t.Errorf("request body buffer limit %d (from the policy: %v), router %+v, bootstrap %v", l.RequestBufferLimit,
			l.RequestBufferFromPolicy, l.Router, buffer)
	}
	// The listener carries the request limit too, for an Envoy that raises a stream's
	// limit only in the router (before envoyproxy/envoy#42607).
	conn := field(`\n\s+per_connection_buffer_limit_bytes: (\d+)\n`)
	if len(conn) != 1 || conn[0] != strconv.Itoa(l.BufferLimit) || !l.BufferFromPolicy || l.BufferLimit != l.RequestBufferLimit {
		t.Errorf("connection buffer limit %d (from the policy: %v), bootstrap %v: want the request limit %d",
			l.BufferLimit, l.BufferFromPolicy, conn, l.RequestBufferLimit)
	}
	streamIdle, routeIdle := field(`stream_idle_timeout: (\d+)s`), field(`\n\s+idle_timeout: (\d+)s`)
	if len(streamIdle) != 1 || seconds(streamIdle[0]) != l.StreamIdleTimeout || !l.StreamIdleFromPolicy {
		t.Errorf("stream idle timeout %v (from the policy: %v), bootstrap %v", l.StreamIdleTimeout, l.StreamIdleFromPolicy, streamIdle)
	}
	if len(routeIdle) != 1 || seconds(routeIdle[0]) != l.StreamIdleTimeout {
		t.Errorf("route idle timeouts %v, want the route's %v", routeIdle, l.StreamIdleTimeout)
	}
	if timeouts := field(`\n\s+timeout: (\S+)`); len(timeouts) != 1 || timeouts[0] != "0s" || l.RouteTimeout != 0 {
		t.Errorf("route timeouts %v, serve's %v: want none", timeouts, l.RouteTimeout)
	}
	if strings.Contains(string(yaml), "per_try_idle_timeout") || l.IdleTimeout != 0 {
		t.Errorf("upstream idle timeout %v: the bootstrap sets none", l.IdleTimeout)
	}
	// What a worker does once its VM failed, and the plugin name Envoy files the plugin's
	// own stats under (wasm.<name>.vm_reload_success, served by serve's admin).
	// Every plugin's: the HTTP filter's, then the upstream filter's on each provider cluster.
	clusters := len(demo.Clusters())
	fp := field(`\n\s+failure_policy: (\S+)\n`)
	if len(fp) != 1+clusters {
		t.Errorf("failure policies %v, want %d", fp, 1+clusters)
	}
	for _, f := range fp {
		if f != DefaultOptions().FailurePolicy.String() {
			t.Errorf("failure policy %v, bootstrap %v", DefaultOptions().FailurePolicy, fp)
		}
	}
	names := field(`\n\s+name: (\S+)\n\s+root_id: `)
	if len(names) != 1+clusters || names[0] != pluginName {
		t.Errorf("plugin name %q, bootstrap %v", pluginName, names)
	}
	for _, n := range names[min(1, len(names)):] {
		if n != rootid.Upstream {
			t.Errorf("upstream plugin name %q, want %q", n, rootid.Upstream)
		}
	}
}

// The flags override the policy's values; the request side never buffers less than the
// connection.
func TestLimitsFor(t *testing.T) {
	demo, err := LoadPolicy("", nil)
	if err != nil {
		t.Fatal(err)
	}
	derivedBuffer := int(envoylimits.RequestBodyBufferLimit(demo.Resolved))
	derivedIdle := envoylimits.IdleTimeout(demo.Resolved)
	tests := []struct {
		name        string
		change      func(*Options)
		wantConn    int           // Limits.BufferLimit
		wantRequest int           // Limits.RequestBufferLimit
		wantIdle    time.Duration // Limits.StreamIdleTimeout
		fromPolicy  [3]bool       // BufferFromPolicy, RequestBufferFromPolicy, StreamIdleFromPolicy
	}{
		// The bootstrap's: the connection's limit is the request limit.
		{"defaults", func(*Options) {}, derivedBuffer, derivedBuffer, derivedIdle, [3]bool{true, true, true}},
		// A request limit from a flag is the connection's too, by the same rule.
		{"flags", func(o *Options) { o.RequestBufferLimit, o.StreamIdleTimeout = 2<<20, time.Minute },
			2 << 20, 2 << 20, time.Minute, [3]bool{true, false, false}},
		{"idle timer off", func(o *Options) { o.StreamIdleTimeout = 0 }, derivedBuffer, derivedBuffer, 0, [3]bool{true, true, false}},
		// Envoy's 1 MiB default: the bootstrap before the listener carried the request limit.
		{"Envoy's connection default", func(o *Options) { o.BufferLimit = DefaultBufferLimit },
			1 << 20, derivedBuffer, derivedIdle, [3]bool{false, true, true}},
		{"request limit below the connection's", func(o *Options) { o.RequestBufferLimit, o.BufferLimit = 4096, 65536 },
			65536, 65536, derivedIdle, [3]bool{false, false, true}},
		{"a larger connection limit raises the derived one", func(o *Options) { o.BufferLimit = 16 << 20 },
			16 << 20, 16 << 20, derivedIdle, [3]bool{false, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			tt.change(&o)
			l := limitsFor(o, demo)
			if l.BufferLimit != tt.wantConn || l.RequestBufferLimit != tt.wantRequest || l.StreamIdleTimeout != tt.wantIdle ||
				[3]bool{l.BufferFromPolicy, l.RequestBufferFromPolicy, l.StreamIdleFromPolicy} != tt.fromPolicy {
				t.Errorf("limits %+v", l)
			}
		})
	}
}

// On the demo policy (maxRequestBodyBytes 8 MiB) a 2 MiB request, over Envoy's 1 MiB
// default, reaches the provider: Spillway holds the whole body under the raised request
// limit. One over 8 MiB gets Spillway's own typed 413, not Envoy's untyped one: the 1 MiB
// headroom lets the filter see the chunk that passes its limit.
func TestDemoBuffersLargeRequests(t *testing.T) {
	d := startDemo(t, nil)
	d.fake(t, "fake-openai").SetPacing(fakeprovider.Pacing{})
	body := func(n int) string {
		return `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`
	}
	status, _, got := post(t, d.URL()+"/v1/chat/completions", body(2<<20), nil)
	if status != 200 {
		t.Fatalf("2 MiB request: %d %.200s", status, got)
	}
	status, _, got = post(t, d.URL()+"/v1/chat/completions", body(8<<20+64<<10), nil)
	if status != 413 || !strings.Contains(got, `"code":"request_too_large"`) {
		t.Fatalf("request over maxRequestBodyBytes: %d %.200s", status, got)
	}
	if len(d.access.await("413 ", 1)) != 1 || len(d.access.lines("details=spillway_local_reply")) == 0 {
		t.Errorf("access log:\n%s", d.access)
	}
}

// Spillway holds a request at its headers while it reads the body's model, so Envoy 1.36,
// which applies the route's request_body_buffer_limit only once the headers reach the
// router (before envoyproxy/envoy#42607), buffers the body under the connection's limit.
// With the listener's limit at the request limit, as the generated bootstrap sets it, a
// 2 MiB request reaches the provider there as on Envoy ≥ 1.37; at Envoy's 1 MiB default
// (the bootstrap before it carried the limit) 1.36 answers its own untyped 413 first, and
// only 1.37+ gets the request through. A body over maxRequestBodyBytes still gets
// Spillway's typed 413 on 1.36.
func TestLargeRequestsOnEverySupportedEnvoy(t *testing.T) {
	tests := []struct {
		name        string
		atRouter    bool   // -route-buffer-limit-at-router: Envoy 1.36
		defaultConn bool   // -buffer-limit 1048576: the listener at Envoy's default
		size        int    // the prompt's bytes
		wantStatus  int    // the client's status
		wantBody    string // in the client's body
		wantDetails string // the access line's response code details
		wantUp      int    // requests the provider saw
	}{
		{"1.36 with the shipped limits", true, false, 2 << 20, 200, `"object":"chat.completion"`, "details=via_upstream", 1},
		{"1.36 at Envoy's connection default", true, true, 2 << 20, 413, "Payload Too Large", "details=request_payload_too_large", 0},
		{"1.37 at Envoy's connection default", false, true, 2 << 20, 200, `"object":"chat.completion"`, "details=via_upstream", 1},
		{"1.36 over maxRequestBodyBytes", true, false, 8<<20 + 64<<10, 413, `"code":"request_too_large"`, "details=spillway_local_reply", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startDemo(t, func(o *Options) {
				o.RouteBufferLimitAtRouter = tt.atRouter
				if tt.defaultConn {
					o.BufferLimit = DefaultBufferLimit
				}
			})
			up := d.fake(t, "fake-openai")
			up.SetPacing(fakeprovider.Pacing{})
			body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", tt.size) + `"}]}`
			status, _, got := post(t, d.URL()+"/v1/chat/completions", body, nil)
			if status != tt.wantStatus || !strings.Contains(got, tt.wantBody) {
				t.Fatalf("%d %.200s, want %d with %s", status, got, tt.wantStatus, tt.wantBody)
			}
			if lines := d.access.await(" "+strconv.Itoa(tt.wantStatus)+" ", 1); len(lines) != 1 || !strings.HasSuffix(lines[0], tt.wantDetails) {
				t.Errorf("access log %q, want %s", lines, tt.wantDetails)
			}
			if n := len(up.Requests()); n != tt.wantUp {
				t.Errorf("the provider saw %d requests, want %d", n, tt.wantUp)
			}
		})
	}
}

// The stream idle timeout through serve: an upstream that never answers gets Envoy's 504
// "stream timeout" (the request was complete); a stream that stalls after its headers is
// reset. Both flag SI with details stream_idle_timeout.
func TestStreamIdleTimeoutThroughServe(t *testing.T) {
	p := probeStream(t, "", func(c *Config) { c.StreamIdleTimeout = 300 * time.Millisecond })
	p.up.SetPacing(fakeprovider.Pacing{})

	status, _, body := post(t, p.url+"/v1/chat/completions", chatBody, map[string]string{"x-fake-scenario": "timeout"})
	if status != 504 || body != "stream timeout" {
		t.Errorf("silent upstream: %d %q", status, body)
	}
	waitUntil(t, func() bool { return len(p.access.lines(" 504 ")) == 1 })
	if l := p.access.lines(" 504 ")[0]; !strings.Contains(l, "flags=SI details=stream_idle_timeout") {
		t.Errorf("access line %q", l)
	}

	_, events, _ := sseRead(t, http.DefaultClient, p.url+"/v1/chat/completions", streamChatBody,
		map[string]string{"x-fake-scenario": "stall", "x-fake-after-events": "1"})
	if n := len(events); n != 2 {
		t.Errorf("stalled stream: %d events before the idle timeout", n)
	}
	waitUntil(t, func() bool { return len(p.access.lines("reset(stream_idle_timeout)")) == 1 })
	if l := p.access.lines("reset(stream_idle_timeout)")[0]; !strings.Contains(l, "flags=SI details=stream_idle_timeout") {
		t.Errorf("access line %q", l)
	}
}
