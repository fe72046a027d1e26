package serve

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/spillwayproxy/spillway/envoy"
	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/pathnorm"
	"github.com/spillwayproxy/spillway/policies/examples"
)

// TestPathNormalizationIsTheGeneratedBootstraps: serve normalises paths with the
// connection manager settings `spillway render envoy` writes.
func TestPathNormalizationIsTheGeneratedBootstraps(t *testing.T) {
	p, err := envoy.LoadPolicy(examples.Demo(), envoy.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoy.Bootstrap(p, envoy.Options{Upstreams: map[string]string{
		"fake-openai": "http://127.0.0.1:4001", "fake-openrouter": "http://127.0.0.1:4002", "fake-anthropic": "http://127.0.0.1:4003"}})
	if err != nil {
		t.Fatal(err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	actions := map[hcmv3.HttpConnectionManager_PathWithEscapedSlashesAction]pathnorm.EscapedSlashes{
		hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT: pathnorm.KeepUnchanged,
		hcmv3.HttpConnectionManager_KEEP_UNCHANGED:                  pathnorm.KeepUnchanged,
		hcmv3.HttpConnectionManager_REJECT_REQUEST:                  pathnorm.RejectRequest,
		hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT:           pathnorm.UnescapeAndRedirect,
		hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD:            pathnorm.UnescapeAndForward,
	}
	want := pathnorm.Config{NormalizePath: hcm.GetNormalizePath().GetValue(), MergeSlashes: hcm.GetMergeSlashes(),
		EscapedSlashes: actions[hcm.GetPathWithEscapedSlashesAction()]}
	if PathNormalization != want {
		t.Errorf("serve normalises with %+v, the bootstrap with %+v", PathNormalization, want)
	}
}

// rawRequest sends a request line as written (Go's client would clean or escape the path)
// and returns the status.
func rawRequest(t *testing.T, addr, method, target, body string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := method + " " + target + " HTTP/1.1\r\nHost: spillway.local\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeNormalisesPathsAsTheConnectionManager: through serve and the Spillway filter, a
// path with merged slashes or dot segments is the routed path it stands for, and one with an
// escaped slash (an admin-lookalike among them) is refused with the connection manager's 400
// before the filter or any provider sees it.
func TestServeNormalisesPathsAsTheConnectionManager(t *testing.T) {
	d := startDemo(t, nil)
	addr := strings.TrimPrefix(d.URL(), "http://")
	for _, target := range []string{"//v1/chat/completions", "/v1/./chat//completions", "/v1/models/../chat/%63ompletions"} {
		if status := rawRequest(t, addr, "POST", target, chatBody); status != 200 {
			t.Errorf("%s: %d, want 200", target, status)
		}
	}
	// Each was routed by Spillway (the access line names its provider), not passed through.
	if n := len(d.access.await("provider=openai", 3)); n != 3 {
		t.Errorf("%d requests routed to openai, want 3:\n%s", n, d.access.String())
	}
	before := len(d.fake(t, "fake-openai").Requests())
	for _, target := range []string{"/spillway%2Fapi/monitoring/health", "/v1/chat%2fcompletions", `/v1%5Cchat/completions`} {
		if status := rawRequest(t, addr, "POST", target, chatBody); status != 400 {
			t.Errorf("%s: %d, want 400", target, status)
		}
	}
	if n := len(d.access.await("details="+DetailsPathNormalizationFailed, 3)); n != 3 {
		t.Errorf("%d access lines with %s, want 3:\n%s", n, DetailsPathNormalizationFailed, d.access.String())
	}
	if after := len(d.fake(t, "fake-openai").Requests()); after != before {
		t.Errorf("a refused path reached the provider (%d requests, had %d)", after, before)
	}
}
