package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// faultCase is one scripted fault of TestScriptedFaultsThroughServe.
type faultCase struct {
	name      string // also its model, connections and keys (spaces as dashes)
	anthropic bool   // on fake-anthropic (/v1/messages), else fake-openai (/v1/chat/completions)
	provider  string // provider id; "" for one of its own ("agentrouter" has the built-in restatement)
	fault     fakeprovider.Fault
	stream    bool // "stream": true
	// What the client gets when the faulted connection is the only target, with
	// resilience.failover.maxAttempts 1: the fault as the fake produced it.
	status       int
	body         []string // substrings of what the client read
	notBody      string   // must not appear
	header       string   // a header the client got
	restatedFrom string   // x-spillway-restated-from ("" : not restated)
	cut          bool     // the body ends in a read error (reset)
	logStatus    string   // the access line's status field ("" : the status)
	flags        string   // the access line's response flags, alone and with a spare ("" : none)
	details      string   // the access line's details alone ("" : via_upstream)
	// failsOver: the fault came before anything reached the client, so with a spare
	// connection after the faulted one Spillway answers from the spare (attempts 2) and the
	// client never sees the fault. Otherwise the spare is never asked and the client sees
	// what it sees alone.
	failsOver bool
}

func (c *faultCase) slug() string { return strings.ReplaceAll(c.name, " ", "-") }

// faultKey is the credential of a case's connection n (1: the faulted one, 2: the spare).
func (c *faultCase) faultKey(n int) string { return "key-" + c.connection(n) }

// connection is the id of a case's connection n.
func (c *faultCase) connection(n int) string { return c.slug() + "-" + strconv.Itoa(n) }

// The response code details of an upstream's answer, and of the local reply that carries
// a failover attempt's answer to the client.
const (
	viaUpstreamDetails = "via_upstream"
	localReplyDetails  = "spillway_local_reply"
)

var faultCases = []faultCase{
	{name: "rate limit", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit}, status: 429,
		body: []string{`"rate_limit_error"`}, header: "X-Ratelimit-Reset", failsOver: true},
	{name: "anthropic rate limit", anthropic: true, fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit}, status: 429,
		body: []string{`"rate_limit_error"`}, header: "Anthropic-Ratelimit-Requests-Reset", failsOver: true},
	{name: "concurrency limit", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioConcurrencyLimit}, status: 429,
		body: []string{"Too many concurrent requests"}, failsOver: true},
	{name: "quota", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioQuota}, status: 429,
		body: []string{"daily quota"}, failsOver: true},
	{name: "503", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable}, status: 503,
		body: []string{"unavailable"}, failsOver: true},
	{name: "529 overloaded", anthropic: true, fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioOverloaded}, status: 529,
		body: []string{`"overloaded_error"`}, failsOver: true},
	// agentrouter's quota shortage (403 额度不足) is restated to 429 with the rule's
	// Retry-After (the built-in rule of the provider with id agentrouter, guide §7).
	{name: "agentrouter quota", provider: "agentrouter", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioAgentrouterQuota},
		status: 429, body: []string{"额度不足"}, header: "Retry-After", restatedFrom: "403", failsOver: true},
	// No access to the model (无权访问模型) is permanent: never restated.
	{name: "agentrouter no access", provider: "agentrouter", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioAgentrouterNoAccess},
		status: 403, body: []string{"无权访问模型 agentrouter-no-access"}, failsOver: true},
	{name: "credits", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioCredits}, status: 429,
		body: []string{`"insufficient_quota"`}, failsOver: true},
	{name: "anthropic credits", anthropic: true, fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioCredits}, status: 400,
		body: []string{"credit balance is too low"}, failsOver: true},
	// A 200 stream whose first event is an error is held until that event, so it is a
	// failed attempt like an HTTP error. Its end can reach the filter while the failover
	// attempt runs; the failed stream must stay held all the same.
	{name: "error first in a 200 stream", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorFirst}, stream: true,
		status: 200, body: []string{`data: {"error":{`}, notBody: `"content"`, failsOver: true},
	// Once a content event went to the client, nothing can be retried.
	{name: "error after content", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorMid}, stream: true,
		status: 200, body: []string{`"content":"Hello"`, `data: {"error":{`}, notBody: "[DONE]"},
	{name: "anthropic error event", anthropic: true, fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorMid}, stream: true,
		status: 200, body: []string{"event: content_block_delta",
			"event: error\n" + `data: {"error":{"message":"Overloaded","type":"overloaded_error"},"type":"error"}`},
		notBody: "message_stop"},
	// A clean end without [DONE]: the filter ends the stream with its error event (code
	// stream_truncated, then [DONE]); the fake's own last chunk never came.
	{name: "truncated stream", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioTruncate}, stream: true,
		status: 200, body: []string{`"content":" from"`, `"code":"stream_truncated"`}, notBody: `"finish_reason":"stop"`},
	{name: "reset mid-stream", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioReset, AfterEvents: 1}, stream: true,
		status: 200, body: []string{`"content":"Hello"`}, notBody: "[DONE]", cut: true,
		logStatus: "reset(upstream_reset_after_response_started{connection_termination})", flags: "UC",
		details: "upstream_reset_after_response_started{connection_termination}"},
	// A reset before any answer is the router's 503 for the client, and the provider's
	// transport failure for Spillway. The router's flag stays on the stream when Spillway
	// answers from the spare.
	{name: "reset before the answer", fault: fakeprovider.Fault{Scenario: fakeprovider.ScenarioReset}, status: 503,
		body:  []string{"upstream connect error or disconnect/reset before headers. reset reason: connection termination"},
		flags: "UC", details: "upstream_reset_before_response_started{connection_termination}", failsOver: true},
	{name: "custom status and message", fault: fakeprovider.Fault{Status: 502, Message: "bad gateway upstream", RetryAfter: "3"},
		status: 502, body: []string{"bad gateway upstream"}, header: "Retry-After", failsOver: true},
}

// faultPolicy is a policy for faultCases: each case's model routes to its own connection
// ("<name>-1", key "key-<name>-1"), so no case's cooldowns, lockouts or breaker affect
// another's. With spare, the route has a second target on a second connection after it;
// without, it has one and failover.maxAttempts is 1: Spillway can do nothing but pass the
// fault on.
func faultPolicy(t *testing.T, cases []faultCase, spare bool) string {
	t.Helper()
	type conn struct {
		ID         string            `json:"id"`
		Credential map[string]string `json:"credential"`
	}
	type provider struct {
		ID          string `json:"id"`
		Profile     string `json:"profile"`
		API         string `json:"api"`
		Cluster     string `json:"cluster"`
		Connections []conn `json:"connections"`
	}
	var providers []*provider
	byID := map[string]*provider{}
	var routes []map[string]any
	for i := range cases {
		c := &cases[i]
		id := c.provider
		if id == "" {
			id = "p-" + c.slug()
		}
		p := byID[id]
		if p == nil {
			p = &provider{ID: id, Profile: "apikey", API: "openai", Cluster: "fake-openai"}
			if c.anthropic {
				p.API, p.Cluster = "anthropic", "fake-anthropic"
			}
			byID[id] = p
			providers = append(providers, p)
		}
		n := 1
		if spare {
			n = 2
		}
		var targets []map[string]string
		for k := 1; k <= n; k++ {
			cred := map[string]string{"header": "authorization", "value": "Bearer " + c.faultKey(k)}
			if c.anthropic {
				cred = map[string]string{"header": "x-api-key", "value": c.faultKey(k)}
			}
			cid := c.connection(k)
			p.Connections = append(p.Connections, conn{ID: cid, Credential: cred})
			targets = append(targets, map[string]string{"provider": id, "connection": cid})
		}
		routes = append(routes, map[string]any{"model": c.slug(), "strategy": "priority", "targets": targets})
	}
	// The spare hides a fault by a callout, whose answer the access line names as
	// Spillway's local reply (requireFaultAccessLine): via: callout, said explicitly since
	// an unset via fails over through the router.
	failover := map[string]any{"via": "callout"}
	if !spare {
		failover["maxAttempts"] = 1
	}
	doc := map[string]any{"providers": providers, "routes": routes, "resilience": map[string]any{"failover": failover}}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "faults.json", string(b))
}

// Every fault a built-in fake is scripted with is produced as scripted (the fake counts one
// request from the faulted connection's key, never the client's own) and reaches the client
// as Spillway's routing makes it: alone, unchanged (a rule's restatement aside); with a
// spare connection, hidden behind the spare's answer when it came before anything reached
// the client. The access log names the connection and attempts of each.
func TestScriptedFaultsThroughServe(t *testing.T) {
	for _, spare := range []bool{false, true} {
		name := "alone"
		if spare {
			name = "with a spare"
		}
		t.Run(name, func(t *testing.T) {
			d := startDemo(t, func(o *Options) { o.PolicyPath = faultPolicy(t, faultCases, spare) })
			oa, an := d.fake(t, "fake-openai"), d.fake(t, "fake-anthropic")
			if oa.Kind() != fakeprovider.OpenAI || an.Kind() != fakeprovider.Anthropic {
				t.Fatalf("fakes speak %s and %s", oa.Kind(), an.Kind())
			}
			oa.SetPacing(fakeprovider.Pacing{})
			an.SetPacing(fakeprovider.Pacing{})
			for _, tt := range faultCases {
				t.Run(tt.name, func(t *testing.T) {
					fake := oa
					if tt.anthropic {
						fake = an
					}
					fake.ScriptFor(tt.faultKey(1), tt.fault)
					got, resp, rerr := sendFaultCase(t, d, &tt)
					hidden := spare && tt.failsOver
					wantStatus, wantConn, wantAttempts, spareAsked := tt.status, tt.connection(1), "1", 0
					if hidden {
						wantStatus, wantConn, wantAttempts, spareAsked = 200, tt.connection(2), "2", 1
					}
					if resp.StatusCode != wantStatus {
						t.Fatalf("status %d, want %d: %s", resp.StatusCode, wantStatus, got)
					}
					if c, a := resp.Header.Get("x-spillway-connection"), resp.Header.Get("x-spillway-attempts"); c != wantConn || a != wantAttempts {
						t.Errorf("answered by %s after %s attempts, want %s after %s", c, a, wantConn, wantAttempts)
					}
					if hidden {
						requireSpareAnswer(t, &tt, resp, got)
					} else {
						requireFaultSeen(t, &tt, resp, got, rerr)
					}
					// The fault was produced: the faulted key asked once, the spare only to hide it.
					if n := fake.StatsFor(tt.faultKey(1)).Requests; n != 1 {
						t.Errorf("the fake counted %d requests from %s, want 1", n, tt.faultKey(1))
					}
					if n := fake.StatsFor(tt.faultKey(2)).Requests; n != spareAsked {
						t.Errorf("the fake counted %d requests from the spare, want %d", n, spareAsked)
					}
					requireFaultAccessLine(t, d, &tt, wantStatus, wantConn, wantAttempts, hidden)
				})
			}
			// The filter injected each connection's key in place of the client's.
			if n := oa.StatsFor(clientKey).Requests + an.StatsFor(clientKey).Requests; n != 0 {
				t.Errorf("the client's own key reached a fake %d times", n)
			}
		})
	}
}

// clientKey is the credential the fault tests' client sends; the filter replaces it.
const clientKey = "sk-client-key"

// sendFaultCase sends a case's request and reads the answer (rerr: the read's error).
func sendFaultCase(t *testing.T, d *demo, tt *faultCase) (got []byte, resp *http.Response, rerr error) {
	t.Helper()
	path, stream := "/v1/chat/completions", ""
	if tt.stream {
		stream = `,"stream":true`
	}
	body := `{"model":"` + tt.slug() + `","messages":[{"role":"user","content":"Hello"}]` + stream + `}`
	if tt.anthropic {
		path = "/v1/messages"
		body = `{"model":"` + tt.slug() + `","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]` + stream + `}`
	}
	req, _ := http.NewRequest("POST", d.URL()+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tt.anthropic {
		req.Header.Set("x-api-key", clientKey)
	} else {
		req.Header.Set("Authorization", "Bearer "+clientKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, rerr = io.ReadAll(resp.Body)
	resp.Body.Close()
	return got, resp, rerr
}

// requireFaultSeen checks the client got the fault as the fake produced it.
func requireFaultSeen(t *testing.T, tt *faultCase, resp *http.Response, got []byte, rerr error) {
	t.Helper()
	for _, want := range tt.body {
		if !strings.Contains(string(got), want) {
			t.Errorf("body lacks %q:\n%s", want, got)
		}
	}
	if tt.notBody != "" && strings.Contains(string(got), tt.notBody) {
		t.Errorf("body has %q:\n%s", tt.notBody, got)
	}
	if tt.header != "" && resp.Header.Get(tt.header) == "" {
		t.Errorf("no %s header: %v", tt.header, resp.Header)
	}
	if r := resp.Header.Get("x-spillway-restated-from"); r != tt.restatedFrom {
		t.Errorf("x-spillway-restated-from %q, want %q", r, tt.restatedFrom)
	}
	if (rerr != nil) != tt.cut {
		t.Errorf("read error %v, want a cut body: %v", rerr, tt.cut)
	}
}

// requireSpareAnswer checks the client got the spare's normal answer, whole, and nothing
// of the fault.
func requireSpareAnswer(t *testing.T, tt *faultCase, resp *http.Response, got []byte) {
	t.Helper()
	want := "answering as " + tt.slug()
	if tt.stream {
		// A failover attempt's answer is buffered and sent in one piece, still an event stream.
		want = "data: [DONE]"
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Errorf("content type %q, want the event stream's", resp.Header.Get("Content-Type"))
		}
	}
	if !strings.Contains(string(got), want) {
		t.Errorf("body lacks %q:\n%s", want, got)
	}
	for _, fault := range tt.body {
		if strings.Contains(string(got), fault) {
			t.Errorf("the client saw the fault %q:\n%s", fault, got)
		}
	}
	if r := resp.Header.Get("x-spillway-restated-from"); r != "" {
		t.Errorf("x-spillway-restated-from %q on the spare's answer", r)
	}
}

// requireFaultAccessLine checks the case's access line (its model is its own).
func requireFaultAccessLine(t *testing.T, d *demo, tt *faultCase, status int, conn, attempts string, hidden bool) {
	t.Helper()
	lines := d.access.await(" model="+tt.slug()+" ", 1)
	if len(lines) != 1 {
		t.Fatalf("%d access lines for model %s:\n%s", len(lines), tt.slug(), d.access)
	}
	logStatus, flags, details := tt.logStatus, tt.flags, tt.details
	switch {
	case hidden:
		logStatus, details = strconv.Itoa(status), localReplyDetails
	case logStatus == "":
		logStatus = strconv.Itoa(status)
	}
	if flags == "" {
		flags = "-"
	}
	if details == "" {
		details = viaUpstreamDetails
	}
	for _, want := range []string{" " + logStatus + " ", " connection=" + conn + " ", " attempts=" + attempts + " "} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("access line lacks %q: %s", want, lines[0])
		}
	}
	if want := " flags=" + flags + " details=" + details; !strings.HasSuffix(lines[0], want) {
		t.Errorf("access line does not end in %q: %s", want, lines[0])
	}
}
