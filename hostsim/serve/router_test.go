package serve

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// routerPolicy has one provider per way the router can fail to reach a provider's cluster,
// each alone on a route and before a working provider on another: ghost's cluster
// "nowhere" is not defined, drained's "empty" has no endpoints, down-1's and down-2's
// "dead" refuses connections; good's "up" is a fake that answers.
const routerPolicy = `{
  "providers": [
    {"id": "ghost", "cluster": "nowhere", "connections": [{"id": "ghost-1"}]},
    {"id": "drained", "cluster": "empty", "connections": [{"id": "drained-1"}]},
    {"id": "down-1", "cluster": "dead", "connections": [{"id": "down-1-a"}]},
    {"id": "down-2", "cluster": "dead", "connections": [{"id": "down-2-a"}]},
    {"id": "good", "cluster": "up", "connections": [{"id": "good-1"}]}
  ],
  "routes": [
    {"model": "ghost-only", "targets": [{"provider": "ghost"}]},
    {"model": "ghost-then-good", "strategy": "priority", "targets": [{"provider": "ghost"}, {"provider": "good"}]},
    {"model": "drained-only", "targets": [{"provider": "drained"}]},
    {"model": "drained-then-good", "strategy": "priority", "targets": [{"provider": "drained"}, {"provider": "good"}]},
    {"model": "down-only", "targets": [{"provider": "down-1"}]},
    {"model": "down-then-good", "strategy": "priority", "targets": [{"provider": "down-2"}, {"provider": "good"}]}
  ]
}`

// The router's replies through Spillway: a client can no longer choose a cluster, so each
// failure comes from a provider whose cluster serve cannot reach. serve itself refuses to
// start a policy naming a cluster it does not define (TestStartErrors), so the Server is
// built directly, as an Envoy whose configuration lacks the cluster would run it.
//
// Envoy's own replies, "cluster not found" (503 with an empty body, NC) and "no healthy
// upstream" (503, UH), are not the provider's outcome: Spillway records nothing, passes
// the reply on when there is no other candidate and fails over when there is, and the
// next request tries the same provider again. A connection the router could not make
// (503 "upstream connect error ...", UF) is the provider's transport failure: recorded, so
// the connection cools down and the next request skips it, or, with no other candidate,
// is answered by Spillway itself.
func TestClusterNotFoundAndUpstreamDown(t *testing.T) {
	p, err := fakeprovider.New(fakeprovider.OpenAI, "up")
	if err != nil {
		t.Fatal(err)
	}
	up, err := fakeprovider.Start(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	access, logs := &logBuf{}, &logBuf{}
	srv, err := New(Config{Wasm: hostsimtest.ReadModule(t, "build/spillway.wasm"), PluginConfig: []byte(routerPolicy),
		Clusters:       []Cluster{{"up", up.URL}, {"empty", ""}, {"dead", refusedURL}},
		RouteClusters:  []string{"nowhere", "empty", "dead", "up"}, // the policy's, as the bootstrap's route maps them
		DefaultCluster: "up", Workers: 2, Timeout: time.Minute, AccessLog: access, GuestLog: logs,
		Runtime: hostsimtest.Runtime(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	const refused = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, " +
		"transport failure reason: delayed connect error: Connection refused"
	tests := []struct {
		model string // the route
		// Each request to the route is sent twice: the first and second answers.
		status        [2]int
		body          [2]string // the whole body, or with a "~" prefix a substring of it
		connection    [2]string // x-spillway-connection
		attempts      [2]string // x-spillway-attempts
		flagsDetails  [2]string // the end of the access line
		goodRequested int       // requests good-1 got from both
	}{
		{model: "ghost-only", status: [2]int{503, 503}, body: [2]string{"", ""},
			connection: [2]string{"ghost-1", "ghost-1"}, attempts: [2]string{"1", "1"},
			flagsDetails: [2]string{"flags=NC details=cluster_not_found", "flags=NC details=cluster_not_found"}},
		{model: "ghost-then-good", status: [2]int{200, 200}, body: [2]string{"~answering as ghost-then-good", "~answering as ghost-then-good"},
			connection: [2]string{"good-1", "good-1"}, attempts: [2]string{"2", "2"},
			flagsDetails:  [2]string{"flags=NC details=spillway_local_reply", "flags=NC details=spillway_local_reply"},
			goodRequested: 2},
		{model: "drained-only", status: [2]int{503, 503}, body: [2]string{"no healthy upstream", "no healthy upstream"},
			connection: [2]string{"drained-1", "drained-1"}, attempts: [2]string{"1", "1"},
			flagsDetails: [2]string{"flags=UH details=no_healthy_upstream", "flags=UH details=no_healthy_upstream"}},
		{model: "drained-then-good", status: [2]int{200, 200}, body: [2]string{"~answering as drained-then-good", "~answering as drained-then-good"},
			connection: [2]string{"good-1", "good-1"}, attempts: [2]string{"2", "2"},
			flagsDetails:  [2]string{"flags=UH details=spillway_local_reply", "flags=UH details=spillway_local_reply"},
			goodRequested: 2},
		// The second request finds down-1-a cooling down after its transport failure.
		{model: "down-only", status: [2]int{503, 503}, body: [2]string{refused, `~"code":"all_targets_cooling_down"`},
			connection: [2]string{"down-1-a", "-"}, attempts: [2]string{"1", "0"},
			flagsDetails: [2]string{"flags=UF details=upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}",
				"flags=- details=spillway_local_reply"}},
		{model: "down-then-good", status: [2]int{200, 200}, body: [2]string{"~answering as down-then-good", "~answering as down-then-good"},
			connection: [2]string{"good-1", "good-1"}, attempts: [2]string{"2", "1"},
			flagsDetails:  [2]string{"flags=UF details=spillway_local_reply", "flags=- details=via_upstream"},
			goodRequested: 2},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			before := up.StatsFor("").Requests
			body := `{"model":"` + tt.model + `","messages":[{"role":"user","content":"Hello"}]}`
			for i := range 2 {
				status, h, got := post(t, hs.URL+"/v1/chat/completions", body, nil)
				want, sub := strings.CutPrefix(tt.body[i], "~")
				if status != tt.status[i] || (sub && !strings.Contains(got, want)) || (!sub && got != want) {
					t.Errorf("request %d: %d %q, want %d %q", i+1, status, got, tt.status[i], tt.body[i])
				}
				if c, a := h.Get("x-spillway-connection"), h.Get("x-spillway-attempts"); c != tt.connection[i] || a != tt.attempts[i] {
					t.Errorf("request %d: connection %s after %s attempts, want %s after %s", i+1, c, a, tt.connection[i], tt.attempts[i])
				}
				lines := access.await(" model="+tt.model+" ", i+1)
				if len(lines) != i+1 || !strings.HasSuffix(lines[i], " "+tt.flagsDetails[i]) {
					t.Errorf("request %d: access line %q, want it to end in %q", i+1, lines, tt.flagsDetails[i])
				}
			}
			if n := up.StatsFor("").Requests - before; n != tt.goodRequested {
				t.Errorf("good-1 got %d requests, want %d", n, tt.goodRequested)
			}
		})
	}
	if len(logs.lines("serve: cluster dead: ")) == 0 {
		t.Errorf("the transport error is not logged:\n%s", logs)
	}
}
