package filter

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/spillwayproxy/spillway/policies"
)

func TestRequestHeaderTable(t *testing.T) {
	long := "x-" + strings.Repeat("c", maxIndexedName) // past the length index
	cases := []struct {
		cluster string        // the policy's cluster header
		header  string        // a request header's name
		kind    reqHeaderKind // what the request path does with it (0: nothing)
		index   uint8         // its list position, for session and credential headers
	}{
		{"x-spillway-cluster", ":path", reqPath, 0},
		{"x-spillway-cluster", ":method", reqMethod, 0},
		{"x-spillway-cluster", "accept-encoding", reqAcceptEncoding, 0},
		{"x-spillway-cluster", "content-length", reqContentLength, 0},
		{"x-spillway-cluster", "x-request-id", reqRequestID, 0},
		{"x-spillway-cluster", "x-spillway-cluster", reqCluster, 0},
		{"x-spillway-cluster", "x-session-id", reqSession, 0},
		{"x-spillway-cluster", "x-omniroute-session", reqSession, 2},
		{"x-spillway-cluster", "authorization", reqCredential, 0},
		{"x-spillway-cluster", "api-key", reqCredential, 2}, // the length of :method
		{"x-spillway-cluster", "x-goog-api-key", reqCredential, 3},
		{"x-spillway-cluster", ":authority", 0, 0},
		{"x-spillway-cluster", "content-type", 0, 0}, // the length of x-request-id
		{"x-spillway-cluster", "", 0, 0},
		{"x-spillway-cluster", long, 0, 0},
		// The cluster header takes precedence over the session and credential lists, as the
		// switch it replaces did; the fixed names over it.
		{"x-session-id", "x-session-id", reqCluster, 0},
		{"content-length", "content-length", reqContentLength, 0},
		{long, long, reqCluster, 0},
		{long, long + "x", 0, 0},
	}
	for _, c := range cases {
		tbl := newReqHeaderTable(c.cluster)
		n := tbl.lookup(c.header)
		var kind reqHeaderKind
		var index uint8
		if n != nil {
			kind, index = n.kind, n.index
		}
		if kind != c.kind || index != c.index {
			t.Errorf("cluster header %q: %q looks up as kind %d index %d, want %d %d", c.cluster, c.header, kind, index, c.kind, c.index)
		}
	}
	if got := len(newReqHeaderTable("x-spillway-cluster").names); got != 6+len(policies.SessionAffinityHeaders)+4 {
		t.Errorf("%d names, want every fixed, session and credential header once", got)
	}
}

func TestAPIOfAgreesWithThePolicy(t *testing.T) {
	res, err := policies.Parse(policyJSON(t, testPolicy), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Resolved()
	p := &pluginContext{res: r, paths: newRoutedPaths(&r.Routing)}
	if p.paths == nil {
		t.Fatal("the default paths are not listed")
	}
	full := &pluginContext{res: r} // no list: the policy's own lookup
	for _, path := range []string{"/v1/chat/completions", "/v1/chat/completions?x=1#y", "/v1/messages#f?g",
		"/v1/embeddings?", "/v1/responses", "/v1/completions", "/v1/chat", "/", "", "?/v1/messages", "/V1/messages"} {
		api, ok := p.apiOf(path)
		wantAPI, wantOK := full.apiOf(path)
		if api != wantAPI || ok != wantOK {
			t.Errorf("apiOf(%q) = %q %v, the policy says %q %v", path, api, ok, wantAPI, wantOK)
		}
	}
}

// intern hands back the policy's own copy of a model it names, and a copy of any other, with
// the names listed or in the map alike.
func TestInternKeepsNoBodyAlive(t *testing.T) {
	res, err := policies.Parse(policyJSON(t, testPolicy), policies.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	models := internTable(res.Resolved())
	listed := &pluginContext{models: models}
	for m := range models {
		listed.modelList = append(listed.modelList, m)
	}
	for _, p := range []*pluginContext{listed, {models: models}} {
		for _, name := range []string{"gpt-4o", "openai/gpt-4o-mini", "claude-*", "claude-3-opus", "gpt-4"} {
			body := []byte(`{"model":"` + name + `"}`)
			got := p.intern(unsafe.String(&body[10], len(name))) // aliases body, as a parsed model does
			if got != name {
				t.Fatalf("intern(%q) = %q", name, got)
			}
			body[10] = '#' // the body's memory is reused: the interned name must not change
			if got != name {
				t.Fatalf("intern(%q) aliases the body", name)
			}
			if own, ok := models[name]; ok && unsafe.StringData(own) != unsafe.StringData(got) {
				t.Fatalf("intern(%q) is not the policy's copy", name)
			}
		}
	}
}

// parseStatus reads what strconv.Atoi reads, three digits without it.
func TestParseStatus(t *testing.T) {
	for _, v := range []string{"200", "429", "099", "999", "000", "20", "2000", "+20", "-99", "2x0", "", " 200", "１２３"} {
		want, _ := strconv.Atoi(v)
		if got := parseStatus(v); got != want {
			t.Errorf("parseStatus(%q) = %d, strconv reads %d", v, got, want)
		}
	}
}
