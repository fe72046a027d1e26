package filter

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
	"github.com/tidwall/gjson"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

// FuzzRequestBody drives whole requests with fuzzed bodies through the filter under
// proxytest (testPolicy): a body encoding/json reads as the README's rules accept
// (testfixture.ReadRequest) goes to its model's target with that target's model in the body
// and nothing else changed, a model no route serves is 404 model_not_found, every other body
// is 400 invalid_request; no callback panics. The corpus starts with issue 18's families.
func FuzzRequestBody(f *testing.F) {
	for _, b := range testfixture.HostileBodies() {
		f.Add(b)
	}
	for _, s := range []string{`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"mapped","stream":true,"messages":[]}`, `{"model":"map\u0070ed"}`, `{"model":"claude-x","max_tokens":1}`,
		`{"model":"llama-3"}`, `{"model":"mapped","MODEL":"gpt-4o"}`} {
		f.Add([]byte(s))
	}
	host, _, st := newClockedHost(f, policyJSON(f, testPolicy), nil)
	if st != types.OnPluginStartStatusOK {
		f.Fatalf("start: %v", st)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o := testfixture.ReadRequest(body)
		path := "/v1/chat/completions"
		if strings.HasPrefix(o.Model, "claude-") {
			path = "/v1/messages" // the route's provider speaks Anthropic's API
		}
		id := host.InitializeHttpContext()
		host.CallOnRequestHeaders(id, chatHeaders(path, [2]string{"content-length", strconv.Itoa(len(body))}), false)
		action := host.CallOnRequestBody(id, body, true)
		lr := host.GetSentLocalResponse(id)
		target, routed := map[string]string{"gpt-4o": "gpt-4o", "mapped": "openai/gpt-4o-mini"}[o.Model]
		if strings.HasPrefix(o.Model, "claude-") {
			target, routed = o.Model, true
		}
		switch {
		case !o.OK || !routed:
			want, code := uint32(400), "invalid_request"
			if o.OK {
				want, code = 404, "model_not_found"
			}
			if lr == nil || lr.StatusCode != want || gjson.GetBytes(lr.Data, "error.code").Str != code {
				t.Fatalf("body %q (%s): action %v, reply %+v; want %d %s", body, o.Why, action, lr, want, code)
			}
		default:
			if action != types.ActionContinue || lr != nil {
				t.Fatalf("body %q for %q: action %v, reply %+v; want it routed", body, o.Model, action, lr)
			}
			sent := host.GetCurrentRequestBody(id)
			if target == o.Model && !bytes.Equal(sent, body) {
				t.Fatalf("body %q went upstream as %q: it names its target's model already", body, sent)
			}
			var got, want map[string]any
			if err := json.Unmarshal(sent, &got); err != nil {
				t.Fatalf("body %q went upstream as %q: %v", body, sent, err)
			}
			_ = json.Unmarshal(body, &want)
			want["model"] = target
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("body %q went upstream as %q; want only the model changed to %q", body, sent, target)
			}
			if cl, _ := header(host.GetCurrentRequestHeaders(id), "content-length"); cl != strconv.Itoa(len(sent)) {
				t.Fatalf("content-length %s for the %d bytes sent", cl, len(sent))
			}
			host.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
			host.CallOnResponseBody(id, []byte(`{"id":"x"}`), true)
		}
		host.CompleteHttpContext(id)
		host.Tick()
		if n, _ := host.GetCounterMetric("spillway_panics_total"); n != 0 {
			t.Fatalf("body %q: a callback panicked: %v", body, host.GetErrorLogs())
		}
	})
}
