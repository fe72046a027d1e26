package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestPickWorkerPrefersTheLeastBusy(t *testing.T) {
	tests := []struct {
		name  string
		loads []int64 // requests in flight per worker
		rr    uint64  // round-robin counter before the pick
		want  int
	}{
		{"idle: round-robin start", []int64{0, 0, 0}, 1, 2},
		{"idle: next start", []int64{0, 0, 0}, 2, 0},
		{"one busy worker is skipped", []int64{0, 3, 0}, 0, 2},
		{"least busy wins over the start", []int64{2, 1, 3}, 2, 1},
		{"ties go to the first from the start", []int64{1, 1, 0, 0}, 1, 2},
		{"single worker", []int64{9}, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{load: make([]atomic.Int64, len(tt.loads))}
			for i, l := range tt.loads {
				s.load[i].Store(l)
			}
			s.rr.Store(tt.rr)
			if got := s.pickWorker(); got != tt.want {
				t.Errorf("picked %d, want %d", got, tt.want)
			}
		})
	}
}

func TestRequestHeadersLookLikeEnvoys(t *testing.T) {
	r := httptest.NewRequest("POST", "http://proxy.local:10000/v1/chat/completions?x=1", nil)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Connection", "keep-alive, x-drop")
	r.Header.Set("X-Request-Id", "client-chosen")
	r.Header.Set("Content-Length", "999")
	r.Header.Add("X-Multi", "a")
	r.Header.Add("X-Multi", "b")
	h := requestHeaders(r, "rid", 12)
	want := map[string][]string{
		":authority": {"proxy.local:10000"}, ":path": {"/v1/chat/completions?x=1"}, ":method": {"POST"},
		":scheme": {"http"}, "content-type": {"application/json"}, "x-multi": {"a", "b"},
		"content-length": {"12"}, "x-forwarded-proto": {"http"}, "x-request-id": {"rid"},
	}
	got := map[string][]string{}
	for i, kv := range h {
		if strings.HasPrefix(kv[0], ":") && i > 3 {
			t.Errorf("pseudo-header %s after regular headers", kv[0])
		}
		got[kv[0]] = append(got[kv[0]], kv[1])
	}
	if len(got) != len(want) {
		t.Errorf("headers %v, want %v", got, want)
	}
	for k, vs := range want {
		if strings.Join(got[k], "|") != strings.Join(vs, "|") {
			t.Errorf("%s = %v, want %v", k, got[k], vs)
		}
	}
}

func TestUpstreamRequest(t *testing.T) {
	headers := [][2]string{{":method", "POST"}, {":path", "/v1/messages?beta=true"}, {":authority", "proxy.local"},
		{":scheme", "http"}, {"x-api-key", "k"}, {HeaderCluster, "anthropic"}, {"content-length", "2"},
		{"transfer-encoding", "chunked"}, {"x-request-id", "rid"}}
	tests := []struct {
		name       string
		authority  string // :authority the filter left
		downstream string // the downstream's own authority
		wantHost   string
	}{
		{"authority untouched: the cluster's host", "proxy.local", "proxy.local", "api.example:8443"},
		{"authority rewritten by the filter", "api.anthropic.com", "proxy.local", "api.anthropic.com"},
		{"callout (no downstream)", "up.example", "", "up.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := append([][2]string(nil), headers...)
			h[2][1] = tt.authority
			req, err := newUpstreamRequest(context.Background(), "https://api.example:8443", h, strings.NewReader("{}"), tt.downstream, HeaderCluster)
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.String() != "https://api.example:8443/v1/messages?beta=true" || req.Method != "POST" {
				t.Errorf("request %s %s", req.Method, req.URL)
			}
			host := req.Host
			if host == "" {
				host = req.URL.Host
			}
			if host != tt.wantHost {
				t.Errorf("Host %q, want %q", host, tt.wantHost)
			}
			if req.ContentLength != 2 || req.Header.Get("x-api-key") != "k" || req.Header.Get("x-request-id") != "rid" {
				t.Errorf("length %d headers %v", req.ContentLength, req.Header)
			}
			for _, k := range []string{HeaderCluster, "transfer-encoding", "content-length", ":method"} {
				if _, ok := req.Header[http.CanonicalHeaderKey(k)]; ok {
					t.Errorf("%s forwarded", k)
				}
			}
		})
	}
	for _, bad := range [][2]string{{"", "/x"}, {"GET", ""}, {"GET", "relative"}} {
		if _, err := newUpstreamRequest(context.Background(), "http://h", [][2]string{{":method", bad[0]}, {":path", bad[1]}}, nil, "", HeaderCluster); err == nil {
			t.Errorf("accepted %q %q", bad[0], bad[1])
		}
	}
}
