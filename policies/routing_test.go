package policies

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// manyPaths makes n distinct routed paths.
func manyPaths(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = "/v1/p" + strconv.Itoa(i)
	}
	return out
}

func TestRoutingValidationRules(t *testing.T) {
	tests := []struct {
		name    string // the rule
		set     string // dotted path to change in richBase
		value   any    // new value (remove{} deletes the field)
		path    string // expected problem path
		message string // substring of the expected message
	}{
		// providers[].api
		{"api known", "providers.0.api", "gemini", "providers[0].api", `unknown API "gemini" (want openai or anthropic)`},
		{"api lower-case", "providers.0.api", "OpenAI", "providers[0].api", "unknown API"},
		// routing.clusterHeader
		{"cluster header not pseudo", "routing.clusterHeader", ":authority", "routing.clusterHeader", "pseudo header"},
		{"cluster header token", "routing.clusterHeader", "x cluster", "routing.clusterHeader", "invalid header name"},
		{"cluster header not empty-ish", "routing.clusterHeader", "x-cluster\r\n", "routing.clusterHeader", "invalid header name"},
		{"cluster header bounded", "routing.clusterHeader", "x-" + strings.Repeat("c", 127), "routing.clusterHeader", "longer than 128"},
		{"cluster header not hop-by-hop", "routing.clusterHeader", "Connection", "routing.clusterHeader", "hop-by-hop, framing or routing"},
		{"cluster header not framing", "routing.clusterHeader", "transfer-encoding", "routing.clusterHeader", "hop-by-hop, framing or routing"},
		{"cluster header not host", "routing.clusterHeader", "host", "routing.clusterHeader", "hop-by-hop, framing or routing"},
		{"cluster header not authorization", "routing.clusterHeader", "Authorization", "routing.clusterHeader", "carries credentials"},
		{"cluster header not x-api-key", "routing.clusterHeader", "x-api-key", "routing.clusterHeader", "carries credentials"},
		{"cluster header not api-key", "routing.clusterHeader", "api-key", "routing.clusterHeader", "carries credentials"},
		{"cluster header not x-goog-api-key", "routing.clusterHeader", "X-Goog-Api-Key", "routing.clusterHeader", "carries credentials"},
		{"cluster header not session", "routing.clusterHeader", "x-codex-session-id", "routing.clusterHeader", "session header"},
		{"cluster header not a response header", "routing.clusterHeader", "x-spillway-provider", "routing.clusterHeader", "Spillway's response headers"},
		{"cluster header not restated-from", "routing.clusterHeader", "x-spillway-restated-from", "routing.clusterHeader", "Spillway's response headers"},
		{"cluster header not x-envoy", "routing.clusterHeader", "x-envoy-upstream-cluster", "routing.clusterHeader", "x-envoy- namespace"},
		// routing.paths
		{"path starts with slash", "routing.paths.openai", []any{"v1/chat/completions"}, "routing.paths.openai[0]", "must start with '/'"},
		{"path empty", "routing.paths.anthropic", []any{""}, "routing.paths.anthropic[0]", "must start with '/'"},
		{"path without query", "routing.paths.openai", []any{"/v1/chat/completions?x=1"}, "routing.paths.openai[0]", "query or fragment"},
		{"path without fragment", "routing.paths.anthropic", []any{"/v1/messages#a"}, "routing.paths.anthropic[0]", "query or fragment"},
		{"path bounded", "routing.paths.openai", []any{"/" + strings.Repeat("p", 256)}, "routing.paths.openai[0]", "longer than 256 bytes"},
		{"path without spaces", "routing.paths.openai", []any{"/v1/chat completions"}, "routing.paths.openai[0]", "spaces or control"},
		{"path without controls", "routing.paths.openai", []any{"/v1/chat\tcompletions"}, "routing.paths.openai[0]", "spaces or control"},
		{"path unique in a list", "routing.paths.openai", []any{"/v1/a", "/v1/a"}, "routing.paths.openai[1]", `duplicate path "/v1/a" (also routing.paths.openai[0])`},
		{"path unique across lists", "routing.paths", map[string]any{"openai": []any{"/v1/a"}, "anthropic": []any{"/v1/b", "/v1/a"}},
			"routing.paths.anthropic[1]", "a path belongs to one API"},
		{"path not in the other API's default list", "routing.paths.anthropic", []any{"/v1/messages", "/v1/chat/completions"},
			"routing.paths.anthropic[1]", `duplicate path "/v1/chat/completions" (also the default routing.paths.openai; set that list to change it)`},
		{"paths bounded per API", "routing.paths.openai", manyPaths(33), "routing.paths.openai", "at most 32 paths, got 33"},
		{"path not under the admin prefix", "routing.paths.openai", []any{"/admin/v1/chat"}, "routing.paths.openai[0]", `under the admin API's prefix "/admin/"`},
		{"path not under the admin prefix in another case", "routing.paths.openai", []any{"/ADMIN/v1/chat"}, "routing.paths.openai[0]", `under the admin API's prefix "/admin/"`},
		{"path canonical: no escape", "routing.paths.openai", []any{"/v1/chat%2Fcompletions"}, "routing.paths.openai[0]", "canonical path"},
		{"path canonical: no dot-dot", "routing.paths.openai", []any{"/v1/x/../admin/v1"}, "routing.paths.openai[0]", "canonical path"},
		{"path canonical: no merged slashes", "routing.paths.openai", []any{"/v1//chat"}, "routing.paths.openai[0]", "canonical path"},
		{"path canonical: ASCII", "routing.paths.openai", []any{"/\u017fpillway/v1"}, "routing.paths.openai[0]", "canonical path"},
		// routing.bodyWaitMs
		{"body wait at least 1 s", "routing.bodyWaitMs", 999, "routing.bodyWaitMs", "between 1 s and 10 min, got 999 ms"},
		{"body wait at most 10 min", "routing.bodyWaitMs", 600001, "routing.bodyWaitMs", "between 1 s and 10 min"},
		// resilience.streamRecovery.firstEvent
		{"first event bytes at least 1 KiB", "resilience.streamRecovery.firstEvent.maxBytes", 1023, "resilience.streamRecovery.firstEvent.maxBytes", "between 1024 and 1048576, got 1023"},
		{"first event bytes at most 1 MiB", "resilience.streamRecovery.firstEvent.maxBytes", 1048577, "resilience.streamRecovery.firstEvent.maxBytes", "between 1024 and 1048576"},
		{"first event timeout at least 100 ms", "resilience.streamRecovery.firstEvent.timeoutMs", 99, "resilience.streamRecovery.firstEvent.timeoutMs", "between 100 ms and 5 min, got 99 ms"},
		{"first event timeout at most 5 min", "resilience.streamRecovery.firstEvent.timeoutMs", 300001, "resilience.streamRecovery.firstEvent.timeoutMs", "between 100 ms and 5 min"},
		// resilience.streamRecovery.contentStall
		{"content stall at least 1 s", "resilience.streamRecovery.contentStall.timeoutMs", 999, "resilience.streamRecovery.contentStall.timeoutMs", "between 1 s and 1 h, got 999 ms"},
		{"content stall at most 1 h", "resilience.streamRecovery.contentStall.timeoutMs", 3600001, "resilience.streamRecovery.contentStall.timeoutMs", "between 1 s and 1 h"},
		// resilience.quotaResetTimeZone
		{"zone not IANA", "resilience.quotaResetTimeZone", "Asia/Shanghai", "resilience.quotaResetTimeZone", `"Asia/Shanghai": want UTC or a fixed offset ±HH:MM such as +08:00 (IANA names are not supported)`},
		{"zone UTC spelt exactly", "resilience.quotaResetTimeZone", "utc", "resilience.quotaResetTimeZone", "want UTC or a fixed offset"},
		{"zone two-digit hours", "resilience.quotaResetTimeZone", "+8:00", "resilience.quotaResetTimeZone", "want UTC or a fixed offset"},
		{"zone needs a sign", "resilience.quotaResetTimeZone", "08:00", "resilience.quotaResetTimeZone", "want UTC or a fixed offset"},
		{"zone needs minutes", "resilience.quotaResetTimeZone", "+0800", "resilience.quotaResetTimeZone", "want UTC or a fixed offset"},
		{"zone minutes below 60", "resilience.quotaResetTimeZone", "+08:60", "resilience.quotaResetTimeZone", "want UTC or a fixed offset"},
		{"zone digits only", "resilience.quotaResetTimeZone", "+0a:00", "resilience.quotaResetTimeZone", "want UTC or a fixed offset"},
		{"zone at most +14:00", "resilience.quotaResetTimeZone", "+14:01", "resilience.quotaResetTimeZone", "between -12:00 and +14:00"},
		{"zone at least -12:00", "resilience.quotaResetTimeZone", "-12:30", "resilience.quotaResetTimeZone", "between -12:00 and +14:00"},
		// resilience.modelLockout.errorCodes
		{"lockout codes not empty", "resilience.modelLockout.errorCodes", []any{}, "resilience.modelLockout.errorCodes", "to turn model lockout off, set enabled: false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, mutate(t, tt.set, tt.value), ParseOptions{})
			if !hasProblem(errs, tt.path, tt.message) {
				t.Errorf("want %s: ...%s..., got:\n%v", tt.path, tt.message, errs)
			}
		})
	}
}

func TestClusterHeaderNotACredentialHeader(t *testing.T) {
	doc := mutate(t, "providers.0.connections.1.credential", map[string]any{"header": "X-Route-Key", "value": "k"})
	doc = mutateDoc(t, doc, "routing.clusterHeader", "x-route-key")
	errs := parseErrors(t, doc, ParseOptions{})
	if !hasProblem(errs, "routing.clusterHeader", "credential header of providers[0].connections[1]") {
		t.Errorf("cluster header equal to a connection's credential header accepted: %v", errs)
	}
}

// TestRouterFailoverNeedsBodyMode: router-mode failover in header-routed mode is refused on
// the failover path's field, and an unknown path is refused too.
func TestRouterFailoverNeedsBodyMode(t *testing.T) {
	doc := mutate(t, "resilience.failover.via", "router")
	doc = mutateDoc(t, doc, "routing.mode", "headers")
	doc = mutateDoc(t, doc, "routing.defaultModel", "gpt-4o")
	if errs := parseErrors(t, doc, ParseOptions{}); !hasProblem(errs, "resilience.failover.via", "needs body-routed mode") {
		t.Errorf("router failover in header-routed mode accepted: %v", errs)
	}
	if errs := parseErrors(t, mutate(t, "resilience.failover.via", "retries"), ParseOptions{}); !hasProblem(errs,
		"resilience.failover.via", `unknown failover path "retries" (want callout or router)`) {
		t.Errorf("unknown failover path accepted: %v", errs)
	}
	for _, via := range []string{"callout", "router"} {
		doc := mutate(t, "resilience.failover", map[string]any{"via": via, "holdTries": true, "crossCluster": true})
		p := mustParse(t, doc, ParseOptions{})
		r := p.Resolved()
		if want := via == "router"; r.Failover.ViaRouter != want || r.Failover.HoldTries != want || r.Failover.CrossCluster != want {
			t.Errorf("via %s: %+v", via, r.Failover)
		}
		for _, field := range []string{"holdTries", "crossCluster"} {
			warned := false
			for _, w := range p.Warnings {
				warned = warned || strings.Contains(w.Error(), "resilience.failover."+field)
			}
			if warned != (via == "callout") {
				t.Errorf("via %s: %s warning %v, want it only without router mode (%v)", via, field, warned, p.Warnings)
			}
		}
	}
}

// TestFailoverPathDefault: how failover reaches its target for every via and routing mode.
// The oracle is design.md §4's decision (turn 3): "failover that streams is the default ...
// unless the policy says via: callout; header-routed mode stays on callout".
func TestFailoverPathDefault(t *testing.T) {
	tests := []struct {
		name    string // the policy's choice
		via     string // resilience.failover.via ("" unset)
		headers bool   // routing.mode: headers
		router  bool   // want router-mode failover
		warns   bool   // want holdTries and crossCluster (both set true) warned as unread
	}{
		{"unset, body-routed: router", "", false, true, false},
		{"unset, header-routed: callout", "", true, false, true},
		{"callout, body-routed", "callout", false, false, true},
		{"callout, header-routed", "callout", true, false, true},
		{"router, body-routed", "router", false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failover := map[string]any{"holdTries": true, "crossCluster": true}
			if tt.via != "" {
				failover["via"] = tt.via
			}
			doc := mutate(t, "resilience.failover", failover)
			if tt.headers {
				doc = mutateDoc(t, doc, "routing", map[string]any{"mode": "headers", "defaultModel": "gpt-4o"})
			}
			p := mustParse(t, doc, ParseOptions{})
			r := p.Resolved().Failover
			if r.ViaRouter != tt.router || r.HoldTries != tt.router || r.CrossCluster != tt.router {
				t.Errorf("failover %+v, want router %v (and its switches with it)", r, tt.router)
			}
			for _, field := range []string{"holdTries", "crossCluster"} {
				warned := false
				for _, w := range p.Warnings {
					warned = warned || w.Path == "resilience.failover."+field
				}
				if warned != tt.warns {
					t.Errorf("%s warned %v, want %v (%v)", field, warned, tt.warns, p.Warnings)
				}
			}
		})
	}
}

func TestRoutingAcceptedEdgeValues(t *testing.T) {
	tests := []struct {
		name  string // what is accepted
		set   string // dotted path to change in richBase
		value any    // new value
	}{
		{"api openai", "providers.0.api", "openai"},
		{"api anthropic on a provider of its own route", "providers.1.api", "anthropic"},
		{"count truncated streams off", "providers.0.countTruncatedStreams", false},
		{"cluster header of 128 characters", "routing.clusterHeader", "x-" + strings.Repeat("c", 126)},
		{"cluster header with token punctuation", "routing.clusterHeader", "x-route.cluster_name~1"},
		{"explicit empty openai paths", "routing.paths.openai", []any{}},
		{"both lists empty", "routing.paths", map[string]any{"openai": []any{}, "anthropic": []any{}}},
		{"32 paths", "routing.paths.openai", manyPaths(32)},
		{"path of 256 bytes", "routing.paths.openai", []any{"/" + strings.Repeat("p", 255)}},
		{"root path", "routing.paths.openai", []any{"/"}},
		{"path beside the admin prefix", "routing.paths.openai", []any{"/admin"}},
		{"body wait 1 s", "routing.bodyWaitMs", 1000},
		{"body wait 10 min", "routing.bodyWaitMs", 600000},
		{"first event 1 KiB, 100 ms", "resilience.streamRecovery.firstEvent", map[string]any{"maxBytes": 1024, "timeoutMs": 100}},
		{"first event 1 MiB, 5 min", "resilience.streamRecovery.firstEvent", map[string]any{"maxBytes": 1 << 20, "timeoutMs": 300000}},
		{"content stall 1 s", "resilience.streamRecovery.contentStall", map[string]any{"enabled": true, "timeoutMs": 1000}},
		{"content stall 1 h", "resilience.streamRecovery.contentStall", map[string]any{"enabled": true, "timeoutMs": 3600000}},
		{"zone UTC", "resilience.quotaResetTimeZone", "UTC"},
		{"zone +14:00", "resilience.quotaResetTimeZone", "+14:00"},
		{"zone -12:00", "resilience.quotaResetTimeZone", "-12:00"},
		{"zone +05:45", "resilience.quotaResetTimeZone", "+05:45"},
		{"zone -00:00", "resilience.quotaResetTimeZone", "-00:00"},
		{"one lockout code", "resilience.modelLockout.errorCodes", []any{429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, mutate(t, tt.set, tt.value), ParseOptions{})
		})
	}
}

func TestRoutingWarnings(t *testing.T) {
	tests := []struct {
		name    string // the situation
		set     string // dotted path to change in richBase
		value   any    // new value
		path    string // expected warning path ("" = no warning at all)
		message string // the warning's exact message
	}{
		{"route over both APIs", "providers.1.api", "anthropic", "routes[0]",
			"targets speak openai and anthropic: a request skips the targets whose provider does not speak its API"},
		{"route over one API", "providers.0.api", "openai", "", ""},
		{"anthropic provider with no anthropic paths", "routing.paths.anthropic", []any{}, "", ""}, // every provider speaks openai: no warning
		{"openai providers with no openai paths", "routing.paths.openai", []any{}, "providers[0].api",
			"routing.paths.openai is empty, so no request reaches this openai provider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, mutate(t, tt.set, tt.value), ParseOptions{})
			if tt.path == "" {
				if len(p.Warnings) != 0 {
					t.Errorf("warnings = %v, want none", p.Warnings)
				}
				return
			}
			for _, w := range p.Warnings {
				if w.Path == tt.path && w.Message == tt.message {
					return
				}
			}
			t.Errorf("warnings = %v, want %s: %s", p.Warnings, tt.path, tt.message)
		})
	}
}

func TestRoutingDefaults(t *testing.T) {
	r := mustParse(t, richBase, ParseOptions{}).Resolved()
	checks := []struct {
		name      string // setting
		got, want any    // effective and default value
	}{
		{"cluster header", r.Routing.ClusterHeader, "x-spillway-cluster"},
		// Unset: the cluster is named in filter state, which no client can write.
		{"cluster by header", r.Routing.ClusterByHeader, false},
		{"paths", r.Routing.Paths, map[string]API{
			"/v1/chat/completions": APIOpenAI, "/v1/completions": APIOpenAI, "/v1/embeddings": APIOpenAI,
			"/v1/responses": APIOpenAI, "/v1/messages": APIAnthropic}},
		{"body wait", r.Routing.BodyWait, 10 * time.Second},
		{"first event", r.FirstEvent, FirstEventSettings{MaxBytes: 65536, Timeout: 10 * time.Second}},
		{"quota reset zone", r.QuotaResetTimeZone, time.UTC},
		{"body limit", r.MaxRequestBodyBytes, int64(8 << 20)},
		{"failover", r.Failover, FailoverSettings{MaxAttempts: 3, Budget: 10 * time.Minute, ViaRouter: true}}, // design.md §4
		{"provider API", r.Providers[0].API, APIOpenAI},
		{"truncated streams count", r.Providers[0].CountTruncatedStreams, true},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestRoutingOverrides(t *testing.T) {
	doc := mutate(t, "routing", map[string]any{"clusterHeader": "X-Upstream-Cluster", "bodyWaitMs": 2500,
		"paths": map[string]any{"anthropic": []any{"/anthropic/v1/messages", "/v1/messages"}}})
	doc = mutateDoc(t, doc, "providers.1.api", "anthropic")
	doc = mutateDoc(t, doc, "providers.1.countTruncatedStreams", false)
	doc = mutateDoc(t, doc, "resilience.streamRecovery", map[string]any{"firstEvent": map[string]any{"maxBytes": 4096, "timeoutMs": 1500}})
	doc = mutateDoc(t, doc, "resilience.quotaResetTimeZone", "+08:00")
	doc = mutateDoc(t, doc, "maxRequestBodyBytes", 1<<20)
	doc = mutateDoc(t, doc, "resilience.failover", map[string]any{"maxAttempts": 5, "budgetMs": 60000, "via": "router"})
	r := mustParse(t, doc, ParseOptions{}).Resolved()
	if r.Routing.ClusterHeader != "x-upstream-cluster" || !r.Routing.ClusterByHeader {
		t.Errorf("cluster header = %q, by header %v: want it lower-cased, and set", r.Routing.ClusterHeader, r.Routing.ClusterByHeader)
	}
	if r.Routing.BodyWait != 2500*time.Millisecond {
		t.Errorf("body wait = %v", r.Routing.BodyWait)
	}
	if want := (FirstEventSettings{MaxBytes: 4096, Timeout: 1500 * time.Millisecond}); r.FirstEvent != want {
		t.Errorf("first event = %+v, want %+v", r.FirstEvent, want)
	}
	if r.MaxRequestBodyBytes != 1<<20 || r.Failover != (FailoverSettings{MaxAttempts: 5, Budget: time.Minute, ViaRouter: true}) {
		t.Errorf("body limit %d, failover %+v", r.MaxRequestBodyBytes, r.Failover)
	}
	azure := r.Providers[1]
	if azure.API != APIAnthropic || azure.CountTruncatedStreams {
		t.Errorf("azure api %q, count truncated %v; want anthropic, false", azure.API, azure.CountTruncatedStreams)
	}
	if r.Providers[0].API != APIOpenAI || !r.Providers[0].CountTruncatedStreams {
		t.Errorf("openai provider changed by another provider's settings: %+v", r.Providers[0])
	}
	// Beijing midnight is 16:00 UTC the day before.
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, r.QuotaResetTimeZone)
	if got := midnight.UTC(); got != time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC) {
		t.Errorf("+08:00 midnight = %v in UTC", got)
	}
	if name, offset := midnight.Zone(); name != "+08:00" || offset != 8*3600 {
		t.Errorf("zone = %s %d", name, offset)
	}
}

func TestRoutingPathsKeepOtherDefault(t *testing.T) {
	tests := []struct {
		name  string         // case
		paths map[string]any // routing.paths
		want  map[string]API // resolved path table
	}{
		{"only anthropic set", map[string]any{"anthropic": []any{"/anthropic/v1/messages"}},
			map[string]API{"/anthropic/v1/messages": APIAnthropic, "/v1/chat/completions": APIOpenAI,
				"/v1/completions": APIOpenAI, "/v1/embeddings": APIOpenAI, "/v1/responses": APIOpenAI}},
		{"a default path moved to the other API", map[string]any{"openai": []any{"/v1/chat/completions"},
			"anthropic": []any{"/v1/messages", "/v1/completions"}},
			map[string]API{"/v1/chat/completions": APIOpenAI, "/v1/messages": APIAnthropic, "/v1/completions": APIAnthropic}},
		{"only openai set", map[string]any{"openai": []any{"/openai/v1/chat/completions"}},
			map[string]API{"/openai/v1/chat/completions": APIOpenAI, "/v1/messages": APIAnthropic}},
		{"anthropic not routed", map[string]any{"anthropic": []any{}},
			map[string]API{"/v1/chat/completions": APIOpenAI, "/v1/completions": APIOpenAI,
				"/v1/embeddings": APIOpenAI, "/v1/responses": APIOpenAI}},
		{"nothing routed", map[string]any{"openai": []any{}, "anthropic": []any{}}, map[string]API{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, mutate(t, "routing.paths", tt.paths), ParseOptions{}).Resolved()
			if !reflect.DeepEqual(r.Routing.Paths, tt.want) {
				t.Errorf("paths = %v, want %v", r.Routing.Paths, tt.want)
			}
		})
	}
}

func TestAPIOf(t *testing.T) {
	r := mustParse(t, richBase, ParseOptions{}).Resolved()
	tests := []struct {
		path string // the request's :path
		api  API    // expected API ("" = not routed)
	}{
		{"/v1/chat/completions", APIOpenAI},
		{"/v1/chat/completions?stream=true", APIOpenAI}, // query ignored
		{"/v1/messages?beta=true", APIAnthropic},
		{"/v1/messages#x", APIAnthropic},
		{"/v1/responses", APIOpenAI},
		{"/v1/chat/completions/", ""}, // exact: no trailing-slash folding
		{"/V1/messages", ""},          // exact: no case folding
		{"/v1/chat", ""},              // exact: no prefix matching
		{"/v1/models", ""},
		{"", ""},
		{"?", ""},
	}
	for _, tt := range tests {
		api, ok := r.Routing.APIOf(tt.path)
		if api != tt.api || ok != (tt.api != "") {
			t.Errorf("APIOf(%q) = %q, %v; want %q", tt.path, api, ok, tt.api)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { r.Routing.APIOf("/v1/chat/completions?stream=true") }); allocs != 0 {
		t.Errorf("APIOf allocates %v times", allocs)
	}
}
