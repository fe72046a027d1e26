package filter

import (
	"math/bits"
	"strings"

	"github.com/spillwayproxy/spillway/plugin/internal/llmapi"
	"github.com/spillwayproxy/spillway/policies"
)

// reqHeaderKind is what OnHttpRequestHeaders does with a request header it knows.
type reqHeaderKind uint8

const (
	reqPath           reqHeaderKind = iota + 1 // :path
	reqMethod                                  // :method
	reqAcceptEncoding                          // dropped from a routed request
	reqContentLength                           // rewritten with a new body
	reqRequestID                               // x-request-id, for the decision log
	reqCluster                                 // the policy's cluster header: a client's is removed
	reqSession                                 // a session affinity header (index: its position)
	reqCredential                              // a client credential header (index: its position)
)

// reqHeaderName is one header name the request path acts on.
type reqHeaderName struct {
	name  string
	kind  reqHeaderKind
	index uint8 // position in policies.SessionAffinityHeaders or llmapi.CredentialHeaders
}

// reqHeaderTable finds the names OnHttpRequestHeaders acts on among a request's headers, built
// once per policy. Most headers are none of them, and a Go wasm module pays for every string
// comparison, so names are grouped by length: a header whose length no name has costs one
// table read, one that shares a length costs only the comparisons with names of that length.
type reqHeaderTable struct {
	names []reqHeaderName // in precedence order: the first name that matches is the header's
	// byLen[n] has bit i set when names[i] is n bytes long (names of maxIndexedName bytes
	// or more are in long).
	byLen [maxIndexedName]uint64
	long  []int
}

const maxIndexedName = 64

// newReqHeaderTable lists the names in the order the request path gives them precedence:
// the pseudo and framing headers, the request id, the cluster header, then the session and
// credential headers (two lists with no name in common).
func newReqHeaderTable(clusterHeader string) *reqHeaderTable {
	t := &reqHeaderTable{}
	add := func(name string, kind reqHeaderKind, index int) {
		for _, n := range t.names {
			if n.name == name {
				return // an earlier kind takes it, as an earlier case of a switch would
			}
		}
		i := len(t.names)
		t.names = append(t.names, reqHeaderName{name: name, kind: kind, index: uint8(index)})
		if len(name) < maxIndexedName {
			t.byLen[len(name)] |= 1 << i
		} else {
			t.long = append(t.long, i)
		}
	}
	add(":path", reqPath, 0)
	add(":method", reqMethod, 0)
	add("accept-encoding", reqAcceptEncoding, 0)
	add("content-length", reqContentLength, 0)
	add("x-request-id", reqRequestID, 0)
	add(clusterHeader, reqCluster, 0)
	for i, name := range policies.SessionAffinityHeaders {
		add(name, reqSession, i)
	}
	for i, name := range llmapi.CredentialHeaders {
		add(name, reqCredential, i)
	}
	if len(t.names) > 64 {
		panic("filter: more than 64 request header names")
	}
	return t
}

// lookup returns the name k is, or nil.
func (t *reqHeaderTable) lookup(k string) *reqHeaderName {
	if len(k) >= maxIndexedName {
		for _, i := range t.long {
			if t.names[i].name == k {
				return &t.names[i]
			}
		}
		return nil
	}
	for m := t.byLen[len(k)]; m != 0; m &= m - 1 {
		if n := &t.names[bits.TrailingZeros64(m)]; n.name == k {
			return n
		}
	}
	return nil
}

// spillwayHeaderPrefix is Spillway's header namespace, in which no request header is a
// client's to send: OnHttpRequestHeaders removes every one it finds, on routed and
// pass-through requests alike, before anything else reads or forwards the request, and a
// failover callout (calloutHeaders) copies none. The names the filter owns in it are
// handled as their role says: the policy's cluster header (default x-spillway-cluster) is a
// reqCluster name, removed as such and set again on a routed request; header mode's model
// header (default x-spillway-request-model) is read from the headers as they were read, so
// it is removed with the rest. Either may be named outside the namespace: then only its own
// handling removes it. A router retry (router.go) needs nothing more: every try reads the
// router's one request header map, the one the filter chain left (source/common/router/
// upstream_request.cc, UpstreamRequest::acceptHeadersFromRouter passes
// *parent_.downstreamHeaders()), which only the upstream instance edits after that.
const spillwayHeaderPrefix = "x-spillway-"

// isSpillwayHeader reports whether a lower-case request header name is in Spillway's
// namespace. It runs on every request header no table name matched: the first byte is
// tested before the comparison (a call in a Go wasm module).
func isSpillwayHeader(name string) bool {
	const n = len(spillwayHeaderPrefix)
	return len(name) >= n && name[0] == 'x' && name[:n] == spillwayHeaderPrefix
}

// routedPath is one of the policy's LLM API paths.
type routedPath struct {
	path string
	api  policies.API
}

// maxListedPaths is the most paths apiOf compares one by one; past it the policy's map is
// faster.
const maxListedPaths = 8

// newRoutedPaths lists the policy's paths when they are few (nil otherwise).
func newRoutedPaths(r *policies.RoutingSettings) []routedPath {
	if len(r.Paths) > maxListedPaths {
		return nil
	}
	out := make([]routedPath, 0, len(r.Paths))
	for path, api := range r.Paths {
		out = append(out, routedPath{path: path, api: api})
	}
	return out
}

// apiOf is policies.RoutingSettings.APIOf without its map lookup (string hashing is slow in a
// Go wasm module) when the policy routes few paths.
func (p *pluginContext) apiOf(path string) (policies.API, bool) {
	if p.paths == nil {
		return p.res.Routing.APIOf(path)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	for i := range p.paths {
		if p.paths[i].path == path {
			return p.paths[i].api, true
		}
	}
	return "", false
}
