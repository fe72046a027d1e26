package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/internal/manualclock"
	"github.com/spillwayproxy/spillway/plugin/internal/affinity"
	"github.com/spillwayproxy/spillway/plugin/internal/engine"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
	"github.com/spillwayproxy/spillway/plugin/internal/state"
	"github.com/spillwayproxy/spillway/policies"
	"github.com/spillwayproxy/spillway/policies/policyfile"
)

const token = "admin-token-0123456789"

// testPolicy: a provider with two keys (one capped) and a backup; model lockout on.
const testPolicy = `
providers:
  - id: acme
    cluster: acme
    connections:
      - id: acme-a
        credential: {header: authorization, value: "Bearer sk-acme-a-secret"}
        maxConcurrent: 2
        modelConcurrency: {m1: 1}
      - id: acme-b
        credential: {header: authorization, value: "Bearer sk-acme-b-secret"}
  - id: backup
    cluster: backup
    connections:
      - id: backup-a
        credential: {header: x-api-key, value: "sk-backup-secret"}
routes:
  - model: m1
    targets:
      - {provider: acme}
      - {provider: backup}
resilience:
  modelLockout: {enabled: true}
  requestQueue: {maxQueueDepth: 8}
admin: {token: "` + token + `"}
`

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type fixture struct {
	s     *Server
	e     *engine.Engine
	p     *policies.Policy
	clock *manualclock.Clock
}

func newFixture(t testing.TB, yaml string) *fixture {
	t.Helper()
	p, err := policyfile.Parse([]byte(yaml), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{p: p, clock: manualclock.New(start)}
	if f.e, err = engine.New(p, state.NewCache(state.NewMemStore(), nil), f.clock, engine.Options{Random: rand.NewPCG(1, 2)}); err != nil {
		t.Fatal(err)
	}
	if f.s = New(p.Resolved().Admin, f.e); f.s == nil {
		t.Fatal("admin API off with a token configured")
	}
	return f
}

// fail records one upstream outcome on a connection for m1.
func (f *fixture) fail(t testing.TB, conn string, o engine.Outcome) {
	t.Helper()
	pv, cn, ok := f.p.Resolved().Connection(conn)
	if !ok {
		t.Fatalf("no connection %s", conn)
	}
	d := engine.Dispatch{Target: engine.Target{Provider: pv.Index, Connection: cn.Index, Model: "m1"}, Started: f.clock.Now()}
	if r := f.e.Record(d, o, nil); r.Errors != nil {
		t.Fatal(r.Errors)
	}
}

var (
	rateLimited = engine.Outcome{Status: 429, Headers: [][2]string{{"retry-after", "30"}},
		Body: []byte(`{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`)}
	creditsGone = engine.Outcome{Status: 400,
		Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}`)}
	authFailed = engine.Outcome{Status: 401, Body: []byte(`{"error":{"message":"Incorrect API key provided"}}`)}
	overloaded = engine.Outcome{Status: 503, Body: []byte(`upstream overloaded`)}
)

// call serves one authorized request and decodes its reply.
func (f *fixture) call(t testing.TB, method, path, body string) (Response, gjson.Result) {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r := f.s.Serve(method, "/spillway/api/"+path, b)
	if !gjson.ValidBytes(r.Reply.Body) {
		t.Fatalf("%s %s: reply is not JSON: %s", method, path, r.Reply.Body)
	}
	if ct := header(r.Reply.Headers, "content-type"); ct != "application/json" {
		t.Fatalf("%s %s: content-type %q", method, path, ct)
	}
	return r, gjson.ParseBytes(r.Reply.Body)
}

func header(hs [][2]string, name string) string {
	for _, kv := range hs {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

func TestNewIsOffWithoutAToken(t *testing.T) {
	p, err := policyfile.Parse([]byte(strings.Replace(testPolicy, `admin: {token: "`+token+`"}`, "", 1)), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(p.Resolved().Admin, nil)
	if s != nil || s.Matches("/spillway/api/monitoring/health") {
		t.Fatal("the admin API is on without a token; its paths must pass through")
	}
}

func TestMatches(t *testing.T) {
	f := newFixture(t, testPolicy)
	for path, want := range map[string]bool{
		"/spillway/api/monitoring/health":           true,
		"/spillway/api/anything":                    true, // answered 404 after auth: the prefix is the API's
		"/spillway/api/resilience/cooldowns?x=1":    true,
		"/spillway/api":                             true, // answered 404: the token stays here
		"/spillway/api?x":                           true,
		"/spillway/apis":                            false,
		"/v1/chat/completions":                      false,
		"/api/monitoring/health":                    false,
		"/spillway/apix/monitoring/health":          false,
		"/other/spillway/api/monitoring/health":     false,
		"/SPILLWAY/API/monitoring/health":           false,
		"/spillway/api/../../v1/chat/completions":   true,
		"/spillway/api/monitoring/health/":          true,
		"/spillway/api/resilience/model-cooldowns/": true,
	} {
		if got := f.s.Matches(path); got != want {
			t.Errorf("Matches(%q) = %v, want %v", path, got, want)
		}
	}
}

// The bearer token: 401 without one (or with another scheme), 403 with a wrong one, through
// with the policy's, compared in constant time over hashes (so a token of another length is
// just wrong).
func TestAuthorize(t *testing.T) {
	f := newFixture(t, testPolicy)
	for _, tc := range []struct {
		name    string // the case
		header  string // the Authorization value
		present bool   // the request has the header
		status  int    // 0 = authorized
	}{
		{name: "no header", status: 401},
		{name: "empty header", header: "", present: true, status: 401},
		{name: "basic scheme", header: "Basic " + token, present: true, status: 401},
		{name: "bearer without a token", header: "Bearer", present: true, status: 401},
		{name: "bearer with blanks", header: "Bearer    ", present: true, status: 401},
		{name: "token alone, no scheme", header: token, present: true, status: 401},
		{name: "wrong token", header: "Bearer not-the-token-at-all", present: true, status: 403},
		{name: "prefix of the token", header: "Bearer " + token[:len(token)-1], present: true, status: 403},
		{name: "token plus a byte", header: "Bearer " + token + "x", present: true, status: 403},
		{name: "right token", header: "Bearer " + token, present: true},
		{name: "scheme in lower case", header: "bearer " + token, present: true},
		{name: "extra blanks", header: "  Bearer   " + token + "  ", present: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := f.s.Authorize(tc.header, tc.present)
			if tc.status == 0 {
				if !ok {
					t.Fatalf("refused %d: %s", r.Status, r.Body)
				}
				return
			}
			if ok || r.Status != tc.status {
				t.Fatalf("ok=%v status %d, want %d", ok, r.Status, tc.status)
			}
			code := gjson.GetBytes(r.Body, "error.code").Str
			if want := map[int]string{401: replies.CodeUnauthorized, 403: replies.CodeForbidden}[tc.status]; code != want {
				t.Fatalf("code %q, want %q", code, want)
			}
			if tc.status == 401 && header(r.Headers, "www-authenticate") == "" {
				t.Fatal("401 without www-authenticate")
			}
			if strings.Contains(string(r.Body), token) {
				t.Fatal("the refusal echoes the token")
			}
		})
	}
	if dump := fmt.Sprintf("%#v %+v", *f.s, *f.s); strings.Contains(dump, token) || !strings.Contains(dump, "/spillway/api/") {
		t.Fatalf("the server keeps the token itself (or the dump is not of it): %s", dump)
	}
}

// IsToken finds the admin token as any client credential header may carry it: the whole
// value, or after a Bearer scheme as Authorize reads it; any other value is not it.
func TestIsToken(t *testing.T) {
	f := newFixture(t, testPolicy)
	for _, tc := range []struct {
		value string // a credential header's value
		want  bool   // it is the admin token
	}{
		{token, true},                               // x-api-key, api-key, or authorization without a scheme
		{"Bearer " + token, true},                   // authorization
		{"bearer " + token, true},                   // the scheme in any case
		{"  BEARER   " + token + "  ", true},        // blanks around
		{"Basic " + token, false},                   // another scheme: not the token
		{token[:len(token)-1], false},               // a prefix of it
		{token + "x", false},                        // one byte more
		{"Bearer " + token[1:], false},              // one byte less
		{"Bearer sk-some-provider-key-0123", false}, // a client's own key
		{"", false},
		{"Bearer", false},
		{strings.ToUpper(token), false}, // the token is case-sensitive
	} {
		if got := f.s.IsToken(tc.value); got != tc.want {
			t.Errorf("IsToken(%q) = %v, want %v", tc.value, got, tc.want)
		}
	}
	var off *Server
	if off.IsToken(token) {
		t.Fatal("with the API off there is no token")
	}
	// Asked of every credential header of every request: it allocates nothing.
	if n := testing.AllocsPerRun(100, func() { f.s.IsToken("Bearer sk-some-provider-key-0123") }); n != 0 {
		t.Fatalf("IsToken allocates %v times", n)
	}
	// The lookalike refusal says nothing of why.
	r := f.s.LookalikeReply()
	if r.Status != 404 || gjson.GetBytes(r.Body, "error.code").Str != CodeNotFound || strings.Contains(string(r.Body), token) ||
		gjson.GetBytes(r.Body, "error.message").Str != "not found" {
		t.Fatalf("lookalike reply %d %s", r.Status, r.Body)
	}
}

func TestHealthReply(t *testing.T) {
	f := newFixture(t, testPolicy)
	for i := 0; i < 7; i++ {
		f.fail(t, "acme-b", overloaded) // acme degrades at 7 (apikey profile); m1 locked on acme-b
	}
	f.fail(t, "acme-a", authFailed)    // acme-a cools (a connection-scoped 401)
	f.fail(t, "backup-a", creditsGone) // terminal
	f.clock.Advance(time.Second)
	plan, err := f.e.Plan("m1", policies.APIOpenAI, affinity.Key{}, &engine.Buffers{})
	if err != nil || len(plan.Targets) != 0 {
		t.Fatalf("plan %v %v", err, plan.Targets) // every target is out
	}
	r, h := f.call(t, "GET", "monitoring/health", "")
	if r.Reply.Status != 200 || r.Log != "" || r.Errors != nil {
		t.Fatalf("health: %d log %q errors %v", r.Reply.Status, r.Log, r.Errors)
	}
	for path, want := range map[string]string{
		"status":                                      "healthy",
		"timestamp":                                   "2026-11-29T12:00:01.000Z",
		"circuitBreakers.total":                       "2",
		"circuitBreakers.closed":                      "2", // DEGRADED counts as closed, as in OmniRoute
		"circuitBreakers.degraded":                    "1",
		"circuitBreakers.open":                        "0",
		"providerHealth.acme.state":                   "DEGRADED",
		"providerHealth.acme.failures":                "7",
		"providerHealth.acme.lastFailure":             "2026-11-29T12:00:00.000Z",
		"providerHealth.acme.lastFailureKind":         "server_error",
		"providerHealth.acme.profile":                 "apikey",
		"providerHealth.backup.state":                 "CLOSED",
		"providerHealth.backup.lastFailure":           "",
		"connections.#":                               "3",
		"connections.0.id":                            "acme-a",
		"connections.0.status":                        "cooling_down",
		"connections.0.testStatus":                    "unavailable",
		"connections.0.errorCode":                     "401",
		"connections.0.lastErrorType":                 "auth_error",
		"connections.1.status":                        "model_locked",
		"connections.1.testStatus":                    "active",
		"connections.1.lockouts.0.model":              "m1",
		"connections.1.lockouts.0.status":             "503",
		"connections.2.status":                        "terminal",
		"connections.2.testStatus":                    "credits_exhausted",
		"connections.2.terminalSince":                 "2026-11-29T12:00:00.000Z",
		"lockouts.#":                                  "1",
		"lockouts.0.provider":                         "acme",
		"lockouts.0.connectionId":                     "acme-b",
		"lockouts.0.connection":                       "acme-b",
		"rateLimitStatus.acme:acme-a.maxConcurrent":   "2",
		"rateLimitStatus.acme:acme-a.maxQueueDepth":   "8",
		"rateLimitStatus.acme:acme-a.models.m1.limit": "1",
		"rateLimitStatus.acme:acme-a.running":         "0",
		"rateLimitStatus.acme:acme-b":                 "", // no cap: nothing counted
		"settings.modelLockout":                       "true",
		"errors.#":                                    "0",
	} {
		if got := h.Get(strings.ReplaceAll(path, "acme:acme-a", `acme\:acme-a`)).String(); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
}

func TestCooldownsListAndClear(t *testing.T) {
	f := newFixture(t, testPolicy)
	f.fail(t, "acme-a", rateLimited)   // locks m1 on acme-a (lockout on) for the Retry-After
	f.fail(t, "acme-a", authFailed)    // and cools acme-a
	f.fail(t, "backup-a", creditsGone) // terminal
	_, l := f.call(t, "GET", "resilience/cooldowns?provider=acme", "")
	if l.Get("connections.#").Int() != 2 || l.Get("connections.0.lockouts.0.remainingMs").Int() != 30000 ||
		l.Get("generatedAt").Str != "2026-11-29T12:00:00.000Z" {
		t.Fatalf("listing %s", l.Raw)
	}
	r, c := f.call(t, "POST", "resilience/cooldowns", `{"all": true}`)
	if r.Reply.Status != 200 || c.Get("ok").Bool() != true || c.Get("cleared").Int() != 1 || c.Get("unchanged").Int() != 1 ||
		c.Get("skippedTerminal").Int() != 1 || c.Get("lockoutsCleared").Int() != 1 ||
		c.Get("connections.skippedTerminal.0").Str != "backup-a" {
		t.Fatalf("clear all: %d %s", r.Reply.Status, c.Raw)
	}
	if !strings.Contains(r.Log, "cleared [acme-a]") || !strings.Contains(r.Log, "skipped terminal [backup-a]") ||
		!strings.Contains(r.Log, "/spillway/api/resilience/cooldowns") {
		t.Fatalf("log %q", r.Log)
	}
	_, l = f.call(t, "GET", "resilience/cooldowns", "")
	if l.Get("connections.0.status").Str != "healthy" || l.Get("connections.2.status").Str != "terminal" {
		t.Fatalf("after the clear: %s", l.Raw)
	}
}

func TestModelCooldowns(t *testing.T) {
	f := newFixture(t, testPolicy)
	f.fail(t, "acme-a", rateLimited)
	f.fail(t, "acme-b", rateLimited)
	f.clock.Advance(10 * time.Second)
	_, l := f.call(t, "GET", "resilience/model-cooldowns", "")
	if l.Get("items.#").Int() != 2 || l.Get("items.0.remainingMs").Int() != 20000 || l.Get("items.0.reason").Str != "rate_limit" ||
		l.Get("items.0.expiresAt").Str != "2026-11-29T12:00:30.000Z" || l.Get("items.0.until").Int() != start.Add(30*time.Second).UnixMilli() {
		t.Fatalf("items %s", l.Raw)
	}
	r, d := f.call(t, "DELETE", "resilience/model-cooldowns", `{"provider":"acme","connection":"acme-a","model":"m1"}`)
	if r.Reply.Status != 200 || d.Get("removed").Int() != 1 || !strings.Contains(r.Log, `model "m1" on acme/acme-a: 1 model lockout(s) removed`) {
		t.Fatalf("delete: %s log %q", d.Raw, r.Log)
	}
	_, d = f.call(t, "DELETE", "resilience/model-cooldowns", `{"provider":"acme","connectionId":"acme-b","model":"m1"}`)
	if d.Get("removed").Int() != 1 {
		t.Fatalf("delete by connectionId: %s", d.Raw)
	}
	_, l = f.call(t, "GET", "resilience/model-cooldowns?provider=backup", "")
	if l.Get("items.#").Int() != 0 {
		t.Fatalf("items %s", l.Raw)
	}
	_, d = f.call(t, "DELETE", "resilience/model-cooldowns", `{"all":true}`)
	if d.Get("removed").Int() != 0 || !d.Get("clearedAll").Bool() {
		t.Fatalf("delete all: %s", d.Raw)
	}
}

func TestResetReply(t *testing.T) {
	f := newFixture(t, testPolicy)
	for i := 0; i < 12; i++ {
		f.fail(t, "acme-b", overloaded) // acme OPEN
	}
	f.fail(t, "backup-a", creditsGone)
	r, b := f.call(t, "POST", "resilience/reset", "")
	if r.Reply.Status != 200 || b.Get("resetCount").Int() != 2 || b.Get("breakersReset").Int() != 1 ||
		b.Get("terminalCleared.0").Str != "backup-a" || b.Get("lockoutsCleared").Int() != 1 || b.Get("message").Str != "Reset 2 provider(s)" {
		t.Fatalf("reset: %d %s", r.Reply.Status, b.Raw)
	}
	if !strings.Contains(r.Log, "reset acme, backup: 1 breaker(s)") || !strings.Contains(r.Log, "(terminal [backup-a])") {
		t.Fatalf("log %q", r.Log)
	}
	_, h := f.call(t, "GET", "monitoring/health", "")
	if h.Get("providerHealth.acme.state").Str != "CLOSED" || h.Get("connections.2.status").Str != "healthy" {
		t.Fatalf("after reset: %s", h.Raw)
	}
	r, b = f.call(t, "POST", "resilience/reset", `{"provider":"backup"}`)
	if r.Reply.Status != 200 || b.Get("providers.#").Int() != 1 || b.Get("breakersReset").Int() != 0 {
		t.Fatalf("reset one: %s", b.Raw)
	}
}

// Ids the policy does not configure are typed 400s naming the field.
func TestUnknownIDs(t *testing.T) {
	f := newFixture(t, testPolicy)
	for _, tc := range []struct {
		method, path, body string // the request (path under the prefix)
		code, param        string // the 400's error.code and error.param
	}{
		{"GET", "monitoring/health?provider=azure", "", CodeUnknownProvider, "provider"},
		{"GET", "resilience/cooldowns?provider=azure", "", CodeUnknownProvider, "provider"},
		{"GET", "resilience/model-cooldowns?provider=azure", "", CodeUnknownProvider, "provider"},
		{"POST", "resilience/reset", `{"provider":"azure"}`, CodeUnknownProvider, "provider"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["acme-a","nope"]}`, CodeUnknownConnection, "connectionIds"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["acme-a"],"provider":"backup"}`, CodeUnknownConnection, "connectionIds"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","connection":"backup-a","model":"m1"}`, CodeUnknownConnection, "connection"},
	} {
		r, b := f.call(t, tc.method, tc.path, tc.body)
		if r.Reply.Status != 400 || b.Get("error.code").Str != tc.code || b.Get("error.param").Str != tc.param || r.Log != "" {
			t.Errorf("%s %s %s: %d %s log %q, want 400 %s", tc.method, tc.path, tc.body, r.Reply.Status, b.Raw, r.Log, tc.code)
		}
	}
}

// No reply carries a credential, the admin token or a credential fingerprint, whatever the
// state: every endpoint is called with state in every layer.
func TestRepliesCarryNoSecret(t *testing.T) {
	f := newFixture(t, testPolicy)
	f.fail(t, "acme-a", rateLimited)
	f.fail(t, "acme-b", authFailed)
	f.fail(t, "backup-a", creditsGone)
	var secrets []string
	res := f.p.Resolved()
	for i := range res.Providers {
		for _, c := range res.Providers[i].Connections {
			v := c.CredentialValue.Reveal()
			sum := sha256.Sum256([]byte(c.CredentialHeader + "\x00" + v)) // the engine's fingerprint
			secrets = append(secrets, v, strings.TrimPrefix(v, "Bearer "), hex.EncodeToString(sum[:8]), hex.EncodeToString(sum[:]))
		}
	}
	secrets = append(secrets, token)
	hexRun := regexp.MustCompile(`[0-9a-f]{16,}`)
	calls := [][3]string{
		{"GET", "monitoring/health", ""}, {"GET", "resilience/cooldowns", ""}, {"GET", "resilience/model-cooldowns", ""},
		{"POST", "resilience/cooldowns", `{"connectionIds":["acme-a"]}`},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":"m1"}`},
		{"POST", "resilience/reset", `{}`}, {"GET", "monitoring/health", ""},
		{"POST", "resilience/cooldowns", `{"connectionIds":["sk-acme-a-secret"]}`}, // an error echoing client text
	}
	for _, c := range calls {
		r, _ := f.call(t, c[0], c[1], c[2])
		all := string(r.Reply.Body) + r.Log
		for _, kv := range r.Reply.Headers {
			all += kv[0] + kv[1]
		}
		for _, s := range secrets[:len(secrets)-1] {
			if c[2] != "" && strings.Contains(c[2], s) {
				continue // the request itself carried it (an id a client typed)
			}
			if strings.Contains(all, s) {
				t.Fatalf("%s %s: reply holds %q: %s", c[0], c[1], s, all)
			}
		}
		if strings.Contains(all, token) || hexRun.MatchString(all) {
			t.Fatalf("%s %s: reply holds the token or a fingerprint-like hex run: %s", c[0], c[1], all)
		}
	}
}

// A write that could not reach some layer is a 500 that still reports what it did.
func TestWriteErrorsAre500s(t *testing.T) {
	rep := engine.ClearReport{Cleared: []string{"acme-a"},
		Errors: []engine.LayerError{{Provider: "acme", Connection: "acme-b", Layer: engine.LayerLockout, Err: errString("boom spw1:ml:acme:acme-b")}}}
	r := renderClear(rep)
	b := gjson.ParseBytes(r.Body)
	if r.Status != 500 || b.Get("ok").Bool() || b.Get("cleared").Int() != 1 || b.Get("errors.0.layer").Str != "model_lockout" ||
		b.Get("errors.0.connection").Str != "acme-b" || strings.Contains(string(r.Body), "boom") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
