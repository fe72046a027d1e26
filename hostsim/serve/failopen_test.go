package serve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
	"github.com/spillwayproxy/spillway/hostsim/hostsimtest"
)

// TestAFailedVMLetsNoClientPickTheCluster is issue 18's attack with a VM failed on purpose:
// the filter (the probe guest, trapping at every request's headers) fails, Envoy then skips
// it under FAIL_OPEN, and a request naming another provider's cluster in x-spillway-cluster
// goes where an unrouted request goes, the default cluster, without that header; the
// other provider sees nothing. Under FAIL_CLOSED the failed VM answers 503. serve's route is
// the generated bootstrap's (TestRouteIsTheGeneratedBootstraps), so this is what the
// bootstrap's route does with such a request; with a cluster_header route the client's
// header would pick the cluster.
func TestAFailedVMLetsNoClientPickTheCluster(t *testing.T) {
	for _, tc := range []struct {
		policy     hostsim.FailurePolicy
		wantStatus int // the request after the VM failed
		toDefault  int // requests the default cluster gets (both requests carry the attack)
	}{
		// Skipped filter: the route's on_no_match, the default cluster, for the trapping
		// request and the next.
		{hostsim.FailOpen, 200, 2},
		// The failed VM answers everything 503 itself.
		{hostsim.FailClosed, 503, 0},
	} {
		t.Run(FailurePolicyName(tc.policy), func(t *testing.T) {
			fakes := map[string]*fakeprovider.Server{}
			var clusters []Cluster
			for _, name := range []string{"up", "other"} {
				p, err := fakeprovider.New(fakeprovider.OpenAI, name)
				if err != nil {
					t.Fatal(err)
				}
				f, err := fakeprovider.Start(p, "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				fakes[name] = f
				clusters = append(clusters, Cluster{name, f.URL})
			}
			srv, err := New(Config{Wasm: hostsimtest.Guest(t, "probe"), PluginConfig: []byte("request_headers trap"),
				Clusters: clusters, DefaultCluster: "up", Workers: 1, FailurePolicy: tc.policy, Timeout: time.Minute,
				Runtime: hostsimtest.Runtime(t)})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			t.Cleanup(func() {
				hs.Close()
				srv.Close()
			})
			attack := func() (int, error) {
				req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("content-type", "application/json")
				req.Header.Set(HeaderCluster, "other")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			_, _ = attack() // the VM traps here (how this stream ends is the trap's, not the route's)
			if srv.Host().Worker(0).Err() == nil {
				t.Fatal("the VM did not fail")
			}
			if status, err := attack(); err != nil || status != tc.wantStatus {
				t.Fatalf("after the failure: %d, %v; want %d", status, err, tc.wantStatus)
			}
			if n := len(fakes["other"].Requests()); n != 0 {
				t.Errorf("the client's cluster got %d requests, want none", n)
			}
			got := fakes["up"].Requests()
			if len(got) != tc.toDefault {
				t.Fatalf("the default cluster got %d requests, want %d", len(got), tc.toDefault)
			}
			for _, r := range got {
				if v := r.Header.Get(HeaderCluster); v != "" {
					t.Errorf("%s: %q reached the provider", HeaderCluster, v)
				}
			}
		})
	}
}

// TestAFilterStateTheRouteLacksIsNoRoute: a filter that names a cluster the route does not
// map (a policy the bootstrap was not rendered for) gets the router's 503 NC, never the
// default cluster: the credential it set for that cluster must not reach another provider.
func TestAFilterStateTheRouteLacksIsNoRoute(t *testing.T) {
	p, err := fakeprovider.New(fakeprovider.OpenAI, "up")
	if err != nil {
		t.Fatal(err)
	}
	up, err := fakeprovider.Start(p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	access := &logBuf{}
	script := "request_headers set_property spillway_target ghost\n" +
		"request_headers replace_header 0 authorization ghost-credential\n" // a header edit clears the route cache
	srv, err := New(Config{Wasm: hostsimtest.Guest(t, "probe"), PluginConfig: []byte(script),
		Clusters: []Cluster{{"up", up.URL}}, DefaultCluster: "up", Workers: 1, Timeout: time.Minute,
		AccessLog: access, Runtime: hostsimtest.Runtime(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	status, _, body := post(t, hs.URL+"/v1/chat/completions", chatBody, nil)
	if status != 503 || body != "" {
		t.Errorf("%d %q, want the router's 503 with an empty body", status, body)
	}
	requireOneLine(t, access, "flags=NC details=cluster_not_found")
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the default cluster got %d requests, want none", n)
	}
}
