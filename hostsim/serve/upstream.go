package serve

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
)

// headerValue returns the first value of a lower-case header name.
func headerValue(h [][2]string, name string) string {
	for _, kv := range h {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// forward is the hostsim upstream: it sends what passed the filter to the cluster named by
// x-spillway-cluster (or the default cluster). An unknown cluster is answered here, like
// Envoy's router; a transport failure is returned as an error, which hostsim turns into
// Envoy's 503 "upstream connect error" on the filter's response path. ctx is the
// exchange's: Do's reset (timeout, client gone) cancels the call, and it carries the
// downstream :authority.
func (s *Server) forward(ctx context.Context, req *hostsim.UpstreamRequest) (*hostsim.UpstreamResponse, error) {
	authority, _ := ctx.Value(authorityKey{}).(string)
	name := headerValue(req.Headers, HeaderCluster)
	if name == "" {
		name = s.cfg.DefaultCluster
	}
	base, ok := s.clusters[name]
	if !ok {
		body := errorBody("cluster_not_found", fmt.Sprintf("upstream cluster %q not found", name))
		return &hostsim.UpstreamResponse{Headers: [][2]string{{":status", "503"},
			{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))},
			{"x-hostsim-details", "cluster_not_found"}}, Body: body}, nil
	}
	hreq, err := newUpstreamRequest(ctx, base, req.Headers, req.Body, authority)
	if err != nil {
		return nil, fmt.Errorf("serve: cluster %s: %w", name, err)
	}
	resp, err := s.transport.RoundTrip(hreq)
	if err != nil {
		return nil, fmt.Errorf("serve: cluster %s: %w", name, err)
	}
	headers, body, trailers, err := readUpstream(resp)
	if err != nil {
		return nil, fmt.Errorf("serve: cluster %s: %w", name, err)
	}
	return &hostsim.UpstreamResponse{Headers: headers, Body: body, Trailers: trailers}, nil
}

// newUpstreamRequest builds the HTTP request for a cluster from proxy-wasm headers. The
// Host is the :authority the filter left, unless it is still the downstream's own, in
// which case the cluster's host is used (Envoy's auto_host_rewrite, which clusters for
// external providers set). x-spillway-cluster and hop-by-hop headers are not sent.
func newUpstreamRequest(ctx context.Context, base string, headers [][2]string, body []byte, downstreamAuthority string) (*http.Request, error) {
	method, path := headerValue(headers, ":method"), headerValue(headers, ":path")
	if method == "" || path == "" || path[0] != '/' {
		return nil, fmt.Errorf("bad request line %q %q", method, path)
	}
	u, err := url.Parse(base + path)
	if err != nil {
		return nil, fmt.Errorf("bad path %q: %w", path, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if a := headerValue(headers, ":authority"); a != "" && a != downstreamAuthority {
		hreq.Host = a
	}
	for _, kv := range headers {
		k := kv[0]
		if strings.HasPrefix(k, ":") || hopByHop[k] || k == "content-length" || k == HeaderCluster {
			continue
		}
		hreq.Header.Add(k, kv[1])
	}
	hreq.ContentLength = int64(len(body))
	if len(body) == 0 {
		hreq.Body = http.NoBody
	}
	return hreq, nil
}

// readUpstream reads a whole upstream response into proxy-wasm headers, body and trailers.
func readUpstream(resp *http.Response) (headers [][2]string, body []byte, trailers [][2]string, err error) {
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the response: %w", err)
	}
	if len(body) > MaxResponseBytes {
		return nil, nil, nil, fmt.Errorf("response body larger than %d bytes", MaxResponseBytes)
	}
	headers = append(make([][2]string, 0, len(resp.Header)+2), [2]string{":status", strconv.Itoa(resp.StatusCode)})
	for k, vs := range resp.Header {
		lk := strings.ToLower(k)
		if hopByHop[lk] || lk == "content-length" {
			continue
		}
		for _, v := range vs {
			headers = append(headers, [2]string{lk, v})
		}
	}
	headers = append(headers, [2]string{"content-length", strconv.Itoa(len(body))})
	for k, vs := range resp.Trailer {
		for _, v := range vs {
			trailers = append(trailers, [2]string{strings.ToLower(k), v})
		}
	}
	return headers, body, trailers, nil
}

// calloutGrace is how long a callout's HTTP call may outlive the callout's timeout, so the
// guest always sees Envoy's 504 for a timeout, never a reset.
const calloutGrace = time.Second

// callout answers a proxy_http_call by calling the named cluster for real, within the
// callout's timeout (0: none, bounded by the Server's Timeout). A failure is reported as
// Envoy does: the plugin gets zero counts.
func (s *Server) callout(ctx context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
	base, ok := s.clusters[c.Upstream]
	if !ok {
		s.logf("serve: callout to unknown cluster %q", c.Upstream)
		return &hostsim.CalloutResponse{Fail: true}
	}
	timeout := s.cfg.Timeout
	if c.Timeout > 0 {
		// hostsim answers the callout's own timeout (the async client's 504) on its clock;
		// this later deadline only stops the abandoned HTTP call.
		timeout = c.Timeout + calloutGrace
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := newUpstreamRequest(ctx, base, c.Headers, c.Body, "")
	if err == nil {
		var resp *http.Response
		if resp, err = s.transport.RoundTrip(hreq); err == nil {
			var cr hostsim.CalloutResponse
			if cr.Headers, cr.Body, cr.Trailers, err = readUpstream(resp); err == nil {
				return &cr
			}
		}
	}
	s.logf("serve: callout %d to cluster %s failed: %v", c.Token, c.Upstream, err)
	return &hostsim.CalloutResponse{Fail: true}
}
