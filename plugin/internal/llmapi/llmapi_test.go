package llmapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestParseRequest(t *testing.T) {
	cases := []struct {
		name   string // what the body shows
		body   string // request body
		model  string // expected model ("" when an error is expected)
		stream bool   // expected stream flag
		err    error  // expected error
	}{
		{"chat completion", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "gpt-4o", false, nil},
		{"stream after messages", `{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}],"model":"gpt-4o","stream":true}`, "gpt-4o", true, nil},
		{"stream false", `{"model":"m","stream":false}`, "m", false, nil},
		{"stream not a bool is not a stream", `{"model":"m","stream":"yes"}`, "m", false, nil},
		{"escaped model", `{"model":"claude-\u0033-opus"}`, "claude-3-opus", false, nil},
		{"unicode model", `{"model":"模型-1"}`, "模型-1", false, nil},
		{"first model wins", `{"model":"a","model":"b"}`, "a", false, nil},
		{"nested model is not the model", `{"metadata":{"model":"x"}}`, "", false, ErrNoModel},
		{"not JSON", `{"model":`, "", false, ErrNotJSON},
		{"the rest is the provider's to judge", `{"model":"m","messages":[}`, "m", false, nil},
		{"truncated before the model", `{"messages":[],"mod`, "", false, ErrNotJSON},
		{"array", `[{"model":"m"}]`, "", false, ErrNotJSON},
		{"empty body", ``, "", false, ErrNotJSON},
		{"null model", `{"model":null}`, "", false, ErrNoModel},
		{"number model", `{"model":4}`, "", false, ErrModelNotText},
		{"object model", `{"model":{"a":1}}`, "", false, ErrModelNotText},
		{"empty model", `{"model":""}`, "", false, ErrModelNotPrint},
		{"CRLF injection", `{"model":"gpt-4o\r\nset-cookie: x=1"}`, "", false, ErrModelNotPrint},
		{"NUL", `{"model":"a\u0000b"}`, "", false, ErrModelNotPrint},
		{"too long", `{"model":"` + strings.Repeat("m", MaxModelLength+1) + `"}`, "", false, ErrModelTooLong},
		{"longest allowed", `{"model":"` + strings.Repeat("m", MaxModelLength) + `"}`, strings.Repeat("m", MaxModelLength), false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(c.body))
			if !errors.Is(err, c.err) {
				t.Fatalf("error %v, want %v", err, c.err)
			}
			if req.Model != c.model || req.Stream != c.stream {
				t.Fatalf("got model %q stream %v, want %q %v", req.Model, req.Stream, c.model, c.stream)
			}
		})
	}
}

func TestRewriteModel(t *testing.T) {
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"the model is gpt-4o"}],"metadata":{"model":"keep"}}`)
	orig := string(body)
	out, err := RewriteModel(body, "openai/gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != orig {
		t.Fatal("RewriteModel modified its input")
	}
	if got := gjson.GetBytes(out, "model").Str; got != "openai/gpt-4o" {
		t.Fatalf("model = %q", got)
	}
	for path, want := range map[string]string{"messages.0.content": "the model is gpt-4o", "metadata.model": "keep"} {
		if got := gjson.GetBytes(out, path).Str; got != want {
			t.Errorf("%s = %q, want %q (only the top-level model may change)", path, got, want)
		}
	}
	if !gjson.ValidBytes(out) {
		t.Fatalf("rewritten body is not valid JSON: %s", out)
	}
}

func TestCredentialAndHopByHopHeaders(t *testing.T) {
	for _, h := range []string{"authorization", "x-api-key", "api-key", "x-goog-api-key"} {
		if !IsCredentialHeader(h) {
			t.Errorf("%s is not treated as a credential header", h)
		}
	}
	for _, h := range []string{"content-type", "anthropic-version", "openai-organization"} {
		if IsCredentialHeader(h) {
			t.Errorf("%s is treated as a credential header", h)
		}
	}
	for _, h := range []string{"connection", "transfer-encoding", "content-length", "upgrade"} {
		if !IsHopByHop(h) {
			t.Errorf("%s is not treated as hop-by-hop", h)
		}
	}
	if IsHopByHop("accept") {
		t.Error("accept is treated as hop-by-hop")
	}
}

func TestValidModelAgreesWithParseRequest(t *testing.T) {
	cases := []struct {
		name  string // what the name shows
		model string // the model a client sent in a header
		valid bool   // accepted
	}{
		{"plain", "gpt-4o", true},
		{"with a slash", "openai/gpt-4o", true},
		{"unicode", "模型-1", true},
		{"longest allowed", strings.Repeat("m", MaxModelLength), true},
		{"empty", "", false},
		{"too long", strings.Repeat("m", MaxModelLength+1), false},
		{"tab", "gpt\t4o", false},
		{"DEL", "gpt\x7f", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ValidModel(c.model); got != c.valid {
				t.Fatalf("ValidModel(%q) = %v, want %v", c.model, got, c.valid)
			}
			// The same name in a body: ParseRequest accepts exactly the valid ones.
			body, _ := RewriteModel([]byte(`{"model":"x"}`), c.model)
			if _, err := ParseRequest(body); (err == nil) != c.valid {
				t.Fatalf("ParseRequest of a body naming %q: %v, want valid=%v", c.model, err, c.valid)
			}
		})
	}
}

// scanRequestCases are bodies the fast scan must read as gjson does, or leave to it.
var scanRequestCases = []string{
	`{"model":"gpt-4o","stream":false,"messages":[{"role":"user","content":"hello"}]}`,
	`{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}],"model":"gpt-4o","stream":true}`,
	` { "model" : "m" , "stream" : true } `,
	`{"model":"m"}`,
	`{"model":"m"} `,
	`{"model":"m"}{"stream":true}`,
	`{"model":"m"} "stream":true`,
	`{"stream":true}`,
	`{"model":"m","stream":1}`,
	`{"model":"m","stream":"true"}`,
	`{"model":"m","stream":tru}`,
	`{"model":"m","stream":truex}`,
	`{"model":"m","stream":null,"stream":true}`,
	`{"stream":true,"stream":false,"model":"m"}`,
	`{"model":"a","model":"b"}`,
	`{"model":null,"model":"b"}`,
	`{"model":"claude-\u0033-opus"}`,
	`{"mod\u0065l":"m"}`,
	`{"a":"\\","model":"m"}`,
	`{"a":"\\\"","model":"m"}`,
	`{"a":"\"","model":"m"}`,
	`{"a":[1,{"b":[]}],"model":"m"}`,
	`{"a":[}],"model":"m"}`,
	`{"a":(1),"model":"m"}`,
	`{"a":-1.5e+3,"model":"m"}`,
	`{"a":1x,"model":"m"}`,
	`{"a":true,"b":false,"c":null,"model":"m"}`,
	`{"model":"m","messages":[}`,
	`{"model":"m",`,
	`{"model":"m"`,
	`{"model":"`,
	`{"model":""}`,
	`{"model":"a` + "\r\n" + `b"}`,
	`{"model":"` + strings.Repeat("m", MaxModelLength+1) + `"}`,
	`{"model":4}`,
	"{\"model\":\"m\"\x01}",
	"\x01{\"model\":\"m\"}",
	`[{"model":"m"}]`,
	``,
	`{`,
	`{}`,
	`{"metadata":{"model":"x"}}`,
	`{"model":"m","x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `,"stream":true}`,
}

func TestScanRequestAgreesWithGJSON(t *testing.T) {
	for _, body := range scanRequestCases {
		checkScanRequest(t, []byte(body))
	}
	// The bodies the scan must not leave to gjson: plain, well-formed requests.
	for _, body := range scanRequestCases[:5] {
		if _, ok := scanRequest([]byte(body)); !ok {
			t.Errorf("scanRequest(%q) left a plain body to gjson", body)
		}
	}
}

func FuzzScanRequestAgreesWithGJSON(f *testing.F) {
	for _, body := range scanRequestCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScanRequest(t, body) })
}

// checkScanRequest fails when the fast scan reads body and gjson reads it otherwise (or
// refuses it).
func checkScanRequest(t *testing.T, body []byte) {
	t.Helper()
	got, ok := scanRequest(body)
	if !ok {
		return
	}
	want, err := parseRequestGJSON(body)
	if err != nil || got != want {
		t.Fatalf("scanRequest(%q) = %+v; gjson reads %+v, %v", body, got, want, err)
	}
}
