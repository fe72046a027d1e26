package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spillwayproxy/spillway/hostsim/fakeprovider"
)

// Every fault a built-in fake is scripted with reaches the client through serve and the
// filter as the fake produced it: statuses with their bodies and headers, errors inside a
// 200 stream, truncated and reset streams. Scripts are per credential (the key the request
// carries; the filter passes the client's own through until it routes).
func TestScriptedFaultsThroughServe(t *testing.T) {
	d := startDemo(t, nil)
	oa, an := d.fake(t, "fake-openai"), d.fake(t, "fake-anthropic")
	oa.SetPacing(fakeprovider.Pacing{})
	an.SetPacing(fakeprovider.Pacing{})
	const key = "sk-scripted"
	tests := []struct {
		name      string
		anthropic bool
		fault     fakeprovider.Fault
		stream    bool
		status    int
		body      []string // substrings of what the client read
		notBody   string   // must not appear
		header    string   // a header the client got
		cut       bool     // the body ends in a read error (reset)
	}{
		{"rate limit", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit}, false, 429,
			[]string{`"rate_limit_error"`}, "", "X-Ratelimit-Reset", false},
		{"anthropic rate limit", true, fakeprovider.Fault{Scenario: fakeprovider.ScenarioRateLimit}, false, 429,
			[]string{`"rate_limit_error"`}, "", "Anthropic-Ratelimit-Requests-Reset", false},
		{"concurrency limit", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioConcurrencyLimit}, false, 429,
			[]string{"Too many concurrent requests"}, "", "", false},
		{"quota", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioQuota}, false, 429, []string{"daily quota"}, "", "", false},
		{"503", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioUnavailable}, false, 503, []string{"unavailable"}, "", "", false},
		{"529 overloaded", true, fakeprovider.Fault{Scenario: fakeprovider.ScenarioOverloaded}, false, 529,
			[]string{`"overloaded_error"`}, "", "", false},
		{"agentrouter quota", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioAgentrouterQuota}, false, 403,
			[]string{"额度不足"}, "", "", false},
		{"agentrouter no access", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioAgentrouterNoAccess}, false, 403,
			[]string{"无权访问模型 gpt-4o"}, "", "", false},
		{"credits", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioCredits}, false, 429,
			[]string{`"insufficient_quota"`}, "", "", false},
		{"anthropic credits", true, fakeprovider.Fault{Scenario: fakeprovider.ScenarioCredits}, false, 400,
			[]string{"credit balance is too low"}, "", "", false},
		{"error first in a 200 stream", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorFirst}, true, 200,
			[]string{`data: {"error":{`}, `"content"`, "", false},
		{"error after content", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorMid}, true, 200,
			[]string{`"content":"Hello"`, `data: {"error":{`}, "[DONE]", "", false},
		{"anthropic error event", true, fakeprovider.Fault{Scenario: fakeprovider.ScenarioErrorMid}, true, 200,
			[]string{"event: content_block_delta", `event: error` + "\n" + `data: {"error":{"message":"Overloaded","type":"overloaded_error"},"type":"error"}`},
			"message_stop", "", false},
		{"truncated stream", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioTruncate}, true, 200,
			[]string{`"content":" from"`}, "[DONE]", "", false},
		{"reset mid-stream", false, fakeprovider.Fault{Scenario: fakeprovider.ScenarioReset, AfterEvents: 1}, true, 200,
			[]string{`"content":"Hello"`}, "[DONE]", "", true},
		{"custom status and message", false, fakeprovider.Fault{Status: 502, Message: "bad gateway upstream", RetryAfter: "3"}, false, 502,
			[]string{"bad gateway upstream"}, "", "Retry-After", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, path, body, hdr := oa, "/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key}
			if tt.stream {
				body = streamChatBody
			}
			if tt.anthropic {
				fake, path = an, "/v1/messages"
				body = `{"model":"claude-sonnet-4","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]`
				if tt.stream {
					body += `,"stream":true`
				}
				body += "}"
				hdr = map[string]string{"x-api-key": key, HeaderCluster: "fake-anthropic"}
			}
			before := fake.StatsFor(key).Requests
			fake.ScriptFor(key, tt.fault)
			req, _ := http.NewRequest("POST", d.URL()+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, got)
			}
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
			if (rerr != nil) != tt.cut {
				t.Errorf("read error %v, want a cut body: %v", rerr, tt.cut)
			}
			if n := fake.StatsFor(key).Requests - before; n != 1 {
				t.Errorf("the fake counted %d requests for the key, want 1", n)
			}
		})
	}
}
