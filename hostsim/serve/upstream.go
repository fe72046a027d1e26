package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spillwayproxy/spillway/hostsim"
	"github.com/spillwayproxy/spillway/internal/routerretry"
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

// newTransport is the upstream connection pool: clusters are addressed directly (never
// through HTTP_PROXY), bodies pass as they are (no transparent gzip), and connecting is
// bounded by the cluster connect timeout (Envoy's connect_timeout).
func newTransport(connectTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: connectTimeout,
	}
}

// UnknownCluster is where the route sends a request whose filter state names a cluster the
// route does not map, as the bootstrap's does (envoy.UnknownCluster): no cluster has the
// name, so the router answers 503 NC.
const UnknownCluster = "spillway_unknown_cluster"

// routeCluster is the route's cluster specifier, the generated bootstrap's (envoy.Bootstrap,
// routeFor): the matcher on the filter state the filter writes, each cluster to itself, a
// filter state naming another cluster to UnknownCluster, a request without one (one
// Spillway does not route, or one the filter never saw) to defaultCluster. nil when there
// is nothing to route to.
func routeCluster(clusters []string, defaultCluster string) *hostsim.RouteCluster {
	if len(clusters) == 0 && defaultCluster == "" {
		return nil
	}
	m := &hostsim.ClusterMatcher{FilterState: routerretry.TargetFilterStateKey, Clusters: make(map[string]string, len(clusters)),
		OnNoMatch: defaultCluster, OnUnknown: UnknownCluster}
	for _, c := range clusters {
		m.Clusters[c] = c
	}
	return &hostsim.RouteCluster{Matcher: m}
}

// resolveRoute is the router's decision when the request headers pass the filter
// (Router::Filter::decodeHeaders) on the route's cluster: an unknown cluster is NC, a
// cluster without endpoints UH, both answered before any request body.
func (s *Server) resolveRoute(cluster string, _ [][2]string) error {
	base, ok := s.clusters[cluster]
	switch {
	case !ok:
		return hostsim.ErrClusterNotFound
	case base == "":
		return hostsim.ErrNoHealthyUpstream
	}
	return nil
}

// upstream is the router's upstream request for one stream (hostsim's streaming
// upstream): it resolves the cluster, connects, sends the request body as it passes the
// filter, and hands the answer back part by part as it arrives. Failures are the router's:
// an unknown cluster (NC), a cluster without endpoints (UH), a connection that fails or
// times out (UF), an upstream that closes or resets mid-answer (UC).
func (s *Server) upstream(call *hostsim.UpstreamCall) {
	ctx := call.Context()
	headers := call.Headers()
	name := call.Cluster() // the route's pick (routeCluster), refreshed before a retry under crossCluster
	base, ok := s.clusters[name]
	switch {
	case !ok:
		_ = call.Fail(hostsim.ErrClusterNotFound)
		return
	case base == "":
		_ = call.Fail(hostsim.ErrNoHealthyUpstream)
		return
	}
	authority, _ := ctx.Value(authorityKey{}).(string)
	hreq, err := newUpstreamRequest(ctx, base, headers, call.Body(), authority, HeaderCluster)
	if err != nil {
		s.logf("serve: cluster %s: %v", name, err)
		_ = call.Fail(&hostsim.UpstreamReset{Reason: hostsim.ResetLocalReset})
		return
	}
	resp, err := s.transport.RoundTrip(hreq)
	if err != nil {
		if ctx.Err() == nil {
			s.logf("serve: cluster %s: %v", name, err)
			_ = call.Fail(transportFailure(err))
		}
		return
	}
	defer resp.Body.Close()
	noBody := resp.ContentLength == 0 || hreq.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if call.Respond(upstreamHeaders(resp), noBody && len(resp.Trailer) == 0) != nil || noBody {
		return
	}
	buf := make([]byte, readChunk)
	for {
		n, err := resp.Body.Read(buf)
		end := errors.Is(err, io.EOF)
		if n > 0 {
			if call.Data(buf[:n], end && len(resp.Trailer) == 0) != nil {
				return
			}
		}
		switch {
		case end:
			switch {
			case len(resp.Trailer) > 0:
				_ = call.RespondTrailers(trailerPairs(resp.Trailer))
			case n == 0:
				_ = call.Data(nil, true)
			}
			return
		case err != nil:
			if ctx.Err() == nil {
				s.logf("serve: cluster %s: reading the answer: %v", name, err)
				_ = call.Fail(&hostsim.UpstreamReset{Reason: hostsim.ResetConnectionTermination})
			}
			return
		}
	}
}

// transportFailure is the reset a failed round trip is for Envoy's router: a refused or
// failed connect is a remote connection failure with Envoy's transport failure reason, a
// connect that timed out a connection timeout (both flag UF), and a connection closed before
// the answer a connection termination (UC).
func transportFailure(err error) *hostsim.UpstreamReset {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if op.Timeout() {
			return &hostsim.UpstreamReset{Reason: hostsim.ResetConnectionTimeout}
		}
		reason := "delayed connect error: "
		var errno syscall.Errno
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			reason += "Connection refused"
		case errors.As(err, &errno):
			reason += errnoText(errno)
		default:
			reason += op.Err.Error()
		}
		return &hostsim.UpstreamReset{Reason: hostsim.ResetRemoteConnectionFailure, TransportFailure: reason}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &hostsim.UpstreamReset{Reason: hostsim.ResetConnectionTimeout}
	}
	return &hostsim.UpstreamReset{Reason: hostsim.ResetConnectionTermination}
}

// errnoText is strerror's text with a capital, as Envoy's errorDetails prints it.
func errnoText(e syscall.Errno) string {
	s := e.Error()
	if s == "" {
		return "errno " + strconv.Itoa(int(e))
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// upstreamHeaders turns an upstream's answer into proxy-wasm headers: :status first, names
// lower-cased, hop-by-hop headers dropped (the content length stays: the filter must fix it
// if it changes the body, as in Envoy).
func upstreamHeaders(resp *http.Response) [][2]string {
	h := append(make([][2]string, 0, len(resp.Header)+2), [2]string{":status", strconv.Itoa(resp.StatusCode)})
	for k, vs := range resp.Header {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range vs {
			h = append(h, [2]string{lk, v})
		}
	}
	if resp.ContentLength >= 0 && headerValue(h, "content-length") == "" {
		h = append(h, [2]string{"content-length", strconv.FormatInt(resp.ContentLength, 10)})
	}
	return h
}

// newUpstreamRequest builds the HTTP request for a cluster from proxy-wasm headers, with
// body streaming the request body. The Host is the :authority the filter left, unless it is
// still the downstream's own, in which case the cluster's host is used (Envoy's
// auto_host_rewrite, which clusters for external providers set). Hop-by-hop headers and
// removed (the route's request_headers_to_remove: HeaderCluster; a callout, which no route
// takes, removes nothing) are not sent; the content length is the filter's (chunked when it
// set none).
func newUpstreamRequest(ctx context.Context, base string, headers [][2]string, body io.Reader, downstreamAuthority, removed string) (*http.Request, error) {
	method, path := headerValue(headers, ":method"), headerValue(headers, ":path")
	if method == "" || path == "" || path[0] != '/' {
		return nil, fmt.Errorf("bad request line %q %q", method, path)
	}
	u, err := url.Parse(base + path)
	if err != nil {
		return nil, fmt.Errorf("bad path %q: %w", path, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if a := headerValue(headers, ":authority"); a != "" && a != downstreamAuthority {
		hreq.Host = a
	}
	for _, kv := range headers {
		k := kv[0]
		if strings.HasPrefix(k, ":") || hopByHop[k] || k == "content-length" || k == removed {
			continue
		}
		hreq.Header.Add(k, kv[1])
	}
	hreq.ContentLength = -1
	if v := headerValue(headers, "content-length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad content-length %q", v)
		}
		hreq.ContentLength = n
	}
	if hreq.ContentLength == 0 || body == nil {
		hreq.ContentLength, hreq.Body = 0, http.NoBody
	}
	return hreq, nil
}

// readUpstream reads a whole upstream response (a callout's) into proxy-wasm headers, body
// and trailers; bodies over the async client's limit are an error.
func readUpstream(resp *http.Response) (headers [][2]string, body []byte, trailers [][2]string, err error) {
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxCalloutBytes+1))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the response: %w", err)
	}
	if len(body) > MaxCalloutBytes {
		return nil, nil, nil, fmt.Errorf("response body larger than %d bytes", MaxCalloutBytes)
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
	return headers, body, trailerPairs(resp.Trailer), nil
}

// MaxCalloutBytes is Envoy's async-client response buffer limit (32 MiB): a callout answer
// larger than that fails.
const MaxCalloutBytes = 32 << 20

// calloutGrace is how long a callout's HTTP call may outlive the callout's timeout, so the
// guest always sees Envoy's 504 for a timeout, never a reset.
const calloutGrace = time.Second

// callout answers a proxy_http_call by calling the named cluster for real, within the
// callout's timeout (0: none, bounded by the Server's Timeout). A failure is reported as
// Envoy does: the plugin gets zero counts.
func (s *Server) callout(ctx context.Context, c *hostsim.Callout) *hostsim.CalloutResponse {
	base, ok := s.clusters[c.Upstream]
	if !ok || base == "" {
		s.logf("serve: callout to cluster %q, which has no endpoint", c.Upstream)
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
	var body io.Reader
	if len(c.Body) > 0 {
		body = strings.NewReader(string(c.Body))
	}
	hreq, err := newUpstreamRequest(ctx, base, c.Headers, body, "", "")
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
