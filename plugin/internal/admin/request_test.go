package admin

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spillwayproxy/spillway/plugin/internal/testfixture"
)

const prefix = "/spillway/api/"

func TestParse(t *testing.T) {
	big := `{"connectionIds":["` + strings.Repeat("a", MaxBodyBytes) + `"]}`
	many := `{"connectionIds":[` + strings.TrimSuffix(strings.Repeat(`"c",`, MaxConnectionIDs+1), ",") + `]}`
	for _, tc := range []struct {
		method, path, body string // the request (path under the prefix)
		want               string // the call's salient fields, or the refusal's "status code param"
	}{
		// Every endpoint and method.
		{"GET", "monitoring/health", "", "monitoring/health GET p= c= m= ids=[] all=false"},
		{"GET", "monitoring/health/", "", "monitoring/health GET p= c= m= ids=[] all=false"},
		{"GET", "monitoring/health?deep=1", "", "monitoring/health GET p= c= m= ids=[] all=false"},
		{"GET", "monitoring/health?provider=acme", "", "monitoring/health GET p=acme c= m= ids=[] all=false"},
		{"GET", "resilience/cooldowns?provider=", "", "resilience/cooldowns GET p= c= m= ids=[] all=false"},
		{"GET", "resilience/cooldowns?provider=ac%6De", "", "resilience/cooldowns GET p=acme c= m= ids=[] all=false"},
		{"GET", "resilience/model-cooldowns?provider=acme", "", "resilience/model-cooldowns GET p=acme c= m= ids=[] all=false"},
		{"POST", "resilience/reset", "", "resilience/reset POST p= c= m= ids=[] all=false"},
		{"POST", "resilience/reset", " \n", "resilience/reset POST p= c= m= ids=[] all=false"},
		{"POST", "resilience/reset", "{}", "resilience/reset POST p= c= m= ids=[] all=false"},
		{"POST", "resilience/reset", `{"provider":"acme"}`, "resilience/reset POST p=acme c= m= ids=[] all=false"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["a","b","a"]}`, "resilience/cooldowns POST p= c= m= ids=[a b] all=false"},
		{"POST", "resilience/cooldowns", `{"all":true}`, "resilience/cooldowns POST p= c= m= ids=[] all=true"},
		{"POST", "resilience/cooldowns", `{"all":true,"provider":"acme","connectionIds":[]}`, "resilience/cooldowns POST p=acme c= m= ids=[] all=true"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["a"],"provider":"acme"}`, "resilience/cooldowns POST p=acme c= m= ids=[a] all=false"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","connection":"a","model":"gpt-4o"}`, "resilience/model-cooldowns DELETE p=acme c=a m=gpt-4o ids=[] all=false"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","connectionId":"a","model":"x/y:z"}`, "resilience/model-cooldowns DELETE p=acme c=a m=x/y:z ids=[] all=false"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","connection":"a","connectionId":"a","model":"m"}`, "resilience/model-cooldowns DELETE p=acme c=a m=m ids=[] all=false"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":"m"}`, "resilience/model-cooldowns DELETE p=acme c= m=m ids=[] all=false"},
		{"DELETE", "resilience/model-cooldowns", `{"all":true}`, "resilience/model-cooldowns DELETE p= c= m= ids=[] all=true"},
		{"DELETE", "resilience/model-cooldowns", `{"all":true,"provider":"acme"}`, "resilience/model-cooldowns DELETE p=acme c= m= ids=[] all=true"},

		// Paths and methods.
		{"GET", "", "", "404 not_found "},
		{"GET", "monitoring", "", "404 not_found "},
		{"GET", "monitoring/health/x", "", "404 not_found "},
		{"GET", "Monitoring/Health", "", "404 not_found "},
		{"GET", "resilience", "", "404 not_found "},
		{"POST", "monitoring/health", "{}", "405 method_not_allowed "},
		{"DELETE", "monitoring/health", "", "405 method_not_allowed "},
		{"GET", "resilience/reset", "", "405 method_not_allowed "},
		{"PUT", "resilience/cooldowns", "{}", "405 method_not_allowed "},
		{"get", "monitoring/health", "", "405 method_not_allowed "},
		{"POST", "resilience/model-cooldowns", "{}", "405 method_not_allowed "},

		// Queries.
		{"GET", "resilience/cooldowns?provider=%zz", "", "400 invalid_query provider"},
		{"GET", "resilience/cooldowns?provider=a&provider=b", "", "400 invalid_query provider"},
		{"GET", "resilience/cooldowns?provider=a%20b", "", "400 invalid_query provider"},
		{"GET", "resilience/cooldowns?provider=" + strings.Repeat("a", 129), "", "400 invalid_query provider"},

		// Bodies.
		{"POST", "resilience/reset", big, "413 request_too_large "},
		{"POST", "resilience/reset", "{", "400 invalid_json "},
		{"POST", "resilience/reset", "[]", "400 invalid_json "},
		{"POST", "resilience/reset", `"acme"`, "400 invalid_json "},
		{"POST", "resilience/reset", "null", "400 invalid_json "},
		{"POST", "resilience/reset", `{"provider":"acme"} {}`, "400 invalid_json "},
		{"POST", "resilience/reset", `{"provider":1}`, "400 invalid_field provider"},
		{"POST", "resilience/reset", `{"provider":null}`, "400 invalid_field provider"},
		{"POST", "resilience/reset", `{"provider":""}`, "400 invalid_field provider"},
		{"POST", "resilience/reset", `{"provider":"a b"}`, "400 invalid_field provider"},
		{"POST", "resilience/reset", `{"providers":["acme"]}`, "400 unknown_field providers"},
		{"POST", "resilience/reset", `{"provider":"a","provider":"b"}`, "400 invalid_field provider"},
		{"POST", "resilience/cooldowns", "", "400 invalid_json "},
		{"POST", "resilience/cooldowns", "{}", "400 missing_field connectionIds"},
		{"POST", "resilience/cooldowns", `{"connectionIds":[]}`, "400 missing_field connectionIds"},
		{"POST", "resilience/cooldowns", `{"all":false}`, "400 missing_field connectionIds"},
		{"POST", "resilience/cooldowns", `{"all":"true"}`, "400 invalid_field all"},
		{"POST", "resilience/cooldowns", `{"all":1}`, "400 invalid_field all"},
		{"POST", "resilience/cooldowns", `{"all":true,"connectionIds":["a"]}`, "400 invalid_field all"},
		{"POST", "resilience/cooldowns", `{"connectionIds":"a"}`, "400 invalid_field connectionIds"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["a",2]}`, "400 invalid_field connectionIds[1]"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["a",""]}`, "400 invalid_field connectionIds[1]"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["a\u0000"]}`, "400 invalid_field connectionIds[0]"},
		{"POST", "resilience/cooldowns", many, "400 invalid_field connectionIds"},
		{"POST", "resilience/cooldowns", `{"connectionIds":["a"],"dryRun":true}`, "400 unknown_field dryRun"},
		{"DELETE", "resilience/model-cooldowns", "", "400 invalid_json "},
		{"DELETE", "resilience/model-cooldowns", `{"model":"m"}`, "400 missing_field provider"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme"}`, "400 missing_field model"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":""}`, "400 invalid_field model"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":"m\n"}`, "400 invalid_field model"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":"` + strings.Repeat("m", 257) + `"}`, "400 invalid_field model"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":5}`, "400 invalid_field model"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","connection":"a","connectionId":"b","model":"m"}`, "400 invalid_field connectionId"},
		{"DELETE", "resilience/model-cooldowns", `{"all":true,"model":"m"}`, "400 invalid_field all"},
		{"DELETE", "resilience/model-cooldowns", `{"all":true,"connection":"a"}`, "400 invalid_field all"},
		{"DELETE", "resilience/model-cooldowns", `{"provider":"acme","model":"m","reason":"x"}`, "400 unknown_field reason"},
	} {
		c, err := Parse(prefix, tc.method, prefix+tc.path, []byte(tc.body))
		got := ""
		if err != nil {
			got = fmt.Sprintf("%d %s %s", err.Status, err.Code, err.Param)
			if err.Status == 405 && err.Allow == "" {
				t.Errorf("%s %s: 405 without Allow", tc.method, tc.path)
			}
		} else {
			got = fmt.Sprintf("%s %s p=%s c=%s m=%s ids=%v all=%v", c.Endpoint, c.Method, c.Provider, c.Connection, c.Model,
				c.ConnectionIDs, c.All)
		}
		if got != tc.want {
			t.Errorf("%s %s %.60q:\n got %s\nwant %s", tc.method, tc.path, tc.body, got, tc.want)
		}
	}
}

// The 405 names the methods the endpoint answers, and every refusal renders as the OpenAI
// error shape with its code and param.
func TestErrorReply(t *testing.T) {
	_, err := Parse(prefix, "PATCH", prefix+"resilience/cooldowns", nil)
	r := err.Reply()
	if r.Status != 405 || header(r.Headers, "allow") != "GET, POST" || r.Code != CodeMethodNotAllowed {
		t.Fatalf("%d %v %s", r.Status, r.Headers, r.Body)
	}
	_, err = Parse(prefix, "POST", prefix+"resilience/cooldowns", []byte(`{"connectionIds":[1]}`))
	if got := string(err.Reply().Body); got != `{"error":{"message":"connectionIds[0] must be a string","type":"invalid_request_error","code":"invalid_field","param":"connectionIds[0]"}}` {
		t.Fatalf("body %s", got)
	}
}

// FuzzParse: whatever arrives, Parse returns a call or a typed refusal — never a panic —
// and what it accepts is within the limits the engine relies on. `go test` runs the seeds in
// testdata/fuzz/FuzzParse (a request of every endpoint and the awkward cases: duplicate
// keys, invalid UTF-8, escaped NULs, deep nesting, bad escapes); `go test -fuzz FuzzParse`
// explores from them.
func FuzzParse(f *testing.F) {
	codes := []string{CodeInvalidJSON, CodeUnknownField, CodeInvalidField, CodeMissingField, CodeInvalidQuery, CodeNotFound,
		CodeMethodNotAllowed, "request_too_large"}
	for _, b := range testfixture.HostileBodies() { // issue 18's families
		f.Add("POST", "resilience/cooldowns", b)
	}
	f.Fuzz(func(t *testing.T, method, rest string, body []byte) {
		c, err := Parse(prefix, method, prefix+rest, body)
		if err != nil {
			if !slices.Contains(codes, err.Code) || (err.Status != 400 && err.Status != 404 && err.Status != 405 && err.Status != 413) {
				t.Fatalf("refusal %+v", err)
			}
			if r := err.Reply(); r.Status != err.Status || !utf8.Valid(r.Body) {
				t.Fatalf("reply %d %q", r.Status, r.Body)
			}
			return
		}
		if c.Endpoint == 0 || (c.Method != "GET" && c.Method != "POST" && c.Method != "DELETE") || len(body) > MaxBodyBytes {
			t.Fatalf("accepted %+v", c)
		}
		for _, id := range append([]string{c.Provider, c.Connection}, c.ConnectionIDs...) {
			if len(id) > maxIDBytes || strings.ContainsAny(id, " \x00\n") {
				t.Fatalf("accepted id %q", id)
			}
		}
		if len(c.ConnectionIDs) > MaxConnectionIDs || (c.All && len(c.ConnectionIDs) > 0) {
			t.Fatalf("accepted selection %+v", c)
		}
		if c.Method == "DELETE" && !c.All && (c.Provider == "" || c.Model == "" || len(c.Model) > maxModelBytes) {
			t.Fatalf("accepted lockout delete %+v", c)
		}
	})
}
