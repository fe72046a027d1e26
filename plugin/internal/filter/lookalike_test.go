package filter

import (
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"
)

// Issue 18's client-input points on the filter side: a client's x-spillway-* request headers
// never reach an upstream, and the admin token never leaves the proxy — not on a lookalike of
// the admin path, not as a client credential anywhere else.

const lookalikeToken = "lookalike-admin-token-0123456789"

// adminTestPolicy is testPolicy with the admin API on.
var adminTestPolicy = testPolicy + `admin: {token: "` + lookalikeToken + `"}
`

// clientSpillwayHeaders are x-spillway-* headers a hostile client sends: Spillway's
// response headers, the router's retry marker, and names no one defined.
var clientSpillwayHeaders = [][2]string{
	{"x-spillway-provider", "evil"}, {"x-spillway-connection", "evil"}, {"x-spillway-model", "evil"},
	{"x-spillway-attempts", "9"}, {"x-spillway-retry", "1"}, {"x-spillway-anything", "evil"},
	{"x-spillway-", "evil"}, {"x-spillway-provider", "evil-again"},
}

// noClientSpillwayHeader fails unless every x-spillway-* header in hs is the filter's own
// cluster header, with the cluster it chose (cluster "" for none).
func noClientSpillwayHeader(t *testing.T, what string, hs [][2]string, cluster string) {
	t.Helper()
	for _, kv := range hs {
		name := strings.ToLower(kv[0])
		if !strings.HasPrefix(name, "x-spillway-") {
			continue
		}
		if name != "x-spillway-cluster" || cluster == "" || kv[1] != cluster {
			t.Errorf("%s: %s=%q reaches the upstream", what, kv[0], kv[1])
		}
	}
}

func TestClientSpillwayHeadersNeverReachTheUpstream(t *testing.T) {
	t.Run("routed", func(t *testing.T) {
		host, _ := newHost(t, policyJSON(t, testPolicy), nil)
		id := host.InitializeHttpContext()
		hs := chatHeaders("/v1/chat/completions", append([][2]string{{"x-spillway-cluster", "attacker"}}, clientSpillwayHeaders...)...)
		host.CallOnRequestHeaders(id, hs, false)
		if a := host.CallOnRequestBody(id, []byte(`{"model":"gpt-4o","messages":[]}`), true); a != types.ActionContinue {
			t.Fatalf("body action %v, local reply %+v", a, host.GetSentLocalResponse(id))
		}
		noClientSpillwayHeader(t, "routed", host.GetCurrentRequestHeaders(id), "openai")
		// The 429 fails over by callout: the callout copies the client's headers, not these.
		host.CallOnResponseHeaders(id, [][2]string{{":status", "429"}, {"retry-after", "120"}, {"content-type", "application/json"}}, false)
		host.CallOnResponseBody(id, []byte(`{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}`), true)
		callouts := host.GetCalloutAttributesFromContext(id)
		if len(callouts) != 1 {
			t.Fatalf("%d callouts, want 1", len(callouts))
		}
		noClientSpillwayHeader(t, "callout", callouts[0].Headers, "")
		if v, _ := header(callouts[0].Headers, "content-type"); v != "application/json" {
			t.Errorf("callout lost the client's content-type: %q", v)
		}
		host.CompleteHttpContext(id)
	})
	t.Run("pass-through", func(t *testing.T) {
		host, _ := newHost(t, policyJSON(t, testPolicy), nil)
		id := host.InitializeHttpContext()
		hs := append([][2]string{{":method", "GET"}, {":path", "/v1/models"}, {":authority", "a"}, {"user-agent", "u"}},
			append(clientSpillwayHeaders, [2]string{"x-spillway-request-model", "gpt-4o"})...)
		if a := host.CallOnRequestHeaders(id, hs, true); a != types.ActionContinue {
			t.Fatalf("action %v, want Continue", a)
		}
		req := host.GetCurrentRequestHeaders(id)
		noClientSpillwayHeader(t, "pass-through", req, "")
		if v, _ := header(req, "user-agent"); v != "u" {
			t.Errorf("an ordinary header was touched: user-agent %q", v)
		}
		host.CompleteHttpContext(id)
	})
	t.Run("header mode", func(t *testing.T) {
		host, _ := newHost(t, policyJSON(t, testPolicy+"routing: {mode: headers}\n"), nil)
		id := host.InitializeHttpContext()
		hs := chatHeaders("/v1/chat/completions", append([][2]string{{"x-spillway-request-model", "gpt-4o"}}, clientSpillwayHeaders...)...)
		if a := host.CallOnRequestHeaders(id, hs, false); a != types.ActionContinue {
			t.Fatalf("header-routed action %v, want Continue with the target; local reply %+v", a, host.GetSentLocalResponse(id))
		}
		noClientSpillwayHeader(t, "header mode", host.GetCurrentRequestHeaders(id), "openai")
		host.CompleteHttpContext(id)
	})
}

// lookalikePaths spell the admin prefix otherwise; each canonicalises under it.
var lookalikePaths = []string{
	"/SPILLWAY/api/monitoring/health",
	"/spillway%2Fapi/monitoring/health",
	"/spillway%5Capi/monitoring/health",
	"//spillway/api/monitoring/health",
	"/x/../spillway/api/monitoring/health",
	"/x/%2e%2e/spillway/api/monitoring/health",
	"/spillway%2fAPI/resilience/cooldowns?provider=openai", // mixed case in the escape and the path
	"/spillway/x/../api/.",                                 // a trailing dot segment
	"/Spillway/api",
}

func TestAdminLookalikesAndTheTokenNeverGoUpstream(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, adminTestPolicy), nil)
	refused := 0
	check := func(what string, hs [][2]string, eos bool) {
		t.Helper()
		id := host.InitializeHttpContext()
		if a := host.CallOnRequestHeaders(id, hs, eos); a != types.ActionPause {
			t.Errorf("%s: action %v, want Pause (answered)", what, a)
		}
		lr := host.GetSentLocalResponse(id)
		if lr == nil || lr.StatusCode != 404 || gjson.GetBytes(lr.Data, "error.code").Str != "not_found" {
			t.Errorf("%s: local reply %+v, want 404 not_found", what, lr)
		} else if strings.Contains(string(lr.Data), lookalikeToken) {
			t.Errorf("%s: the reply holds the token", what)
		}
		host.CompleteHttpContext(id)
		refused++
	}
	for _, path := range lookalikePaths {
		check(path, [][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"},
			{"authorization", "Bearer " + lookalikeToken}}, true)
		check(path+" without the token", [][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"}}, true)
	}
	for _, cred := range [][2]string{
		{"authorization", "Bearer " + lookalikeToken}, {"authorization", lookalikeToken}, {"x-api-key", lookalikeToken},
		{"api-key", lookalikeToken}, {"x-goog-api-key", lookalikeToken},
	} {
		check("pass-through with "+cred[0], [][2]string{{":method", "GET"}, {":path", "/v1/models"}, {":authority", "a"}, cred}, true)
		check("routed with "+cred[0], chatHeaders("/v1/chat/completions", cred), false)
	}
	// The real admin path still answers, and an ordinary request with another key goes on.
	id := host.InitializeHttpContext()
	host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/spillway/api/monitoring/health"}, {":authority", "a"},
		{"authorization", "Bearer " + lookalikeToken}}, true)
	if lr := host.GetSentLocalResponse(id); lr == nil || lr.StatusCode != 200 || gjson.GetBytes(lr.Data, "status").Str != "healthy" {
		t.Fatalf("the admin API: %+v", lr)
	}
	host.CompleteHttpContext(id)
	id = host.InitializeHttpContext()
	if a := host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/v1/models"}, {":authority", "a"},
		{"authorization", "Bearer " + lookalikeToken + "x"}}, true); a != types.ActionContinue || host.GetSentLocalResponse(id) != nil {
		t.Fatalf("a request with another key: %v, %+v", a, host.GetSentLocalResponse(id))
	}
	host.CompleteHttpContext(id)

	host.Tick()
	if n, err := host.GetCounterMetric("spillway_admin_lookalikes_total"); err != nil || n != uint64(refused) {
		t.Errorf("spillway_admin_lookalikes_total = %d (%v), want %d", n, err, refused)
	}
	warns := host.GetWarnLogs()
	if len(warns) < refused {
		t.Errorf("%d warn lines for %d refusals", len(warns), refused)
	}
	for _, l := range append(warns, host.GetInfoLogs()...) {
		if strings.Contains(l, lookalikeToken) {
			t.Fatalf("a log line holds the token: %q", l)
		}
	}
	if !strings.Contains(strings.Join(warns, "\n"), "its x-api-key header holds the admin token") {
		t.Errorf("no warn line names the header: %q", warns)
	}
}

// Without an admin token nothing is refused: the lookalike paths are ordinary requests.
func TestWithoutTheAdminAPINothingLooksLikeIt(t *testing.T) {
	host, _ := newHost(t, policyJSON(t, testPolicy), nil)
	for _, path := range lookalikePaths {
		id := host.InitializeHttpContext()
		if a := host.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", path}, {":authority", "a"},
			{"authorization", "Bearer " + lookalikeToken}}, true); a != types.ActionContinue || host.GetSentLocalResponse(id) != nil {
			t.Errorf("%s: %v, local reply %+v", path, a, host.GetSentLocalResponse(id))
		}
		host.CompleteHttpContext(id)
	}
}
