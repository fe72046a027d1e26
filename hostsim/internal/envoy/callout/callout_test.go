package callout

import (
	"reflect"
	"testing"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

func TestCheck(t *testing.T) {
	ok := [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}
	for _, tc := range []struct {
		name     string
		cluster  string          // the cluster called
		clusters map[string]bool // the host's clusters (empty: any)
		headers  [][2]string     // the call's headers
		timeout  int32           // its timeout in ms
		want     abi.Status      // what proxy_http_call answers
	}{
		{"any cluster", "x", nil, ok, 0, abi.StatusOK},
		{"known cluster", "a", map[string]bool{"a": true}, ok, 100, abi.StatusOK},
		{"unknown cluster", "b", map[string]bool{"a": true}, ok, 0, abi.StatusBadArgument},
		{"no :authority", "x", nil, ok[:2], 0, abi.StatusBadArgument},
		{"no :path", "x", nil, [][2]string{{":method", "GET"}, {":authority", "a"}}, 0, abi.StatusBadArgument},
		{"no :method", "x", nil, [][2]string{{":path", "/"}, {":authority", "a"}}, 0, abi.StatusBadArgument},
		// Envoy checks presence only (headers().Host() != nullptr): empty values are sent.
		{"empty :authority", "x", nil, [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", ""}}, 0, abi.StatusOK},
		{"empty :path", "x", nil, [][2]string{{":method", "GET"}, {":path", ""}, {":authority", "a"}}, 0, abi.StatusOK},
		{"negative timeout", "x", nil, ok, -1, abi.StatusBadArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Check([]byte(tc.cluster), tc.clusters, tc.headers, tc.timeout); got != tc.want {
				t.Fatalf("Check = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequestCopiesTheBodyAndSetsItsLength(t *testing.T) {
	guest := []byte("hello")
	h, body, d := Request([][2]string{{":path", "/"}, {"content-length", "99"}}, guest, 1500)
	guest[0] = 'X' // guest memory changes after the call
	if string(body) != "hello" || d != 1500*time.Millisecond {
		t.Fatalf("body %q, timeout %v", body, d)
	}
	if want := [][2]string{{":path", "/"}, {"content-length", "5"}}; !reflect.DeepEqual(h, want) {
		t.Fatalf("headers %q, want %q", h, want)
	}
	if h, _, _ := Request([][2]string{{":path", "/"}}, nil, 0); len(h) != 1 {
		t.Fatalf("a call without body got headers %q", h)
	}
}

func TestReceived(t *testing.T) {
	for _, resp := range []*Response{nil, {Fail: true, Headers: [][2]string{{":status", "200"}}}} {
		if r, st, msg := Received(resp); r != nil || st != abi.StatusBrokenConnection || msg != "reset" {
			t.Fatalf("failed answer %+v: %+v, %v, %q", resp, r, st, msg)
		}
	}
	in := &Response{Headers: [][2]string{{"X-A", "1"}}, Trailers: [][2]string{{"Grpc-Status", "0"}}, Body: []byte("b")}
	r, st, _ := Received(in)
	in.Body[0] = 'X'
	if st != abi.StatusOK || r.Headers[0][0] != "x-a" || r.Trailers[0][0] != "grpc-status" || string(r.Body) != "b" {
		t.Fatalf("answer read as %+v, %v", r, st)
	}
	if r, _, _ := Received(&Response{}); r.Headers == nil {
		t.Fatal("an answer without headers reads as nil headers, want an empty map")
	}
	if r, _, _ := Received(TimeoutResponse()); r.Headers[0] != [2]string{":status", "504"} || string(r.Body) != "upstream request timeout" {
		t.Fatalf("timeout answer %+v", r)
	}
}

func TestPending(t *testing.T) {
	var p Pending[string]
	if a, b := p.NewToken(), p.NewToken(); a != 1 || b != 2 {
		t.Fatalf("tokens %d, %d; want 1, 2", a, b)
	}
	p.last = ^uint32(0)
	if tok := p.NewToken(); tok != 1 {
		t.Fatalf("token after wrap %d, want 1 (never 0)", tok)
	}
	p.Add(7, "seven")
	p.Add(3, "three")
	if got := p.All(); !reflect.DeepEqual(got, []string{"three", "seven"}) {
		t.Fatalf("All = %q, want oldest first", got)
	}
	p.Remove(3)
	if _, ok := p.Get(3); ok {
		t.Fatal("removed call still pending")
	}
	if c, ok := p.Get(7); !ok || c != "seven" {
		t.Fatalf("Get(7) = %q, %v", c, ok)
	}
}
