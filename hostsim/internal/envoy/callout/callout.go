// Package callout is the model of a plugin's HTTP callouts (proxy_http_call): which calls
// Envoy accepts and what it sends (Context::httpCall in source/extensions/common/wasm/
// context.cc), the calls pending by token, and what the plugin reads of an answer in
// proxy_on_http_call_response, including the cluster's async client's own answer to a
// timeout. It knows no VM: the host keeps the table under its lock and runs the callback.
package callout

import (
	"sort"
	"strconv"
	"time"

	"github.com/spillwayproxy/spillway/hostsim/internal/abi"
)

// Response answers a callout.
type Response struct {
	// Headers must include ":status".
	Headers, Trailers [][2]string
	Body              []byte
	// Delay is how long after the call the response arrives (virtual time with a virtual clock).
	Delay time.Duration
	// Fail makes the callout fail (stream reset): the plugin gets zero counts and
	// proxy_get_status answers BrokenConnection, "reset".
	Fail bool
}

// Check validates a call as Context::httpCall does: a cluster the host knows (clusters
// empty: any cluster), :path, :method and :authority present, a timeout that is not
// negative. Anything else is BadArgument. Present is all Envoy checks: httpCall builds the
// header map from the pairs (buildRequestHeaderMapFromPairs adds every pair, an empty value
// too) and refuses the call only when headers().Path(), Method() or Host() is nullptr, so a
// present but empty :authority (the SDK's multiple_dispatches example sends one) is sent.
func Check(cluster []byte, clusters map[string]bool, headers [][2]string, timeoutMs int32) abi.Status {
	if len(clusters) > 0 && !clusters[string(cluster)] {
		return abi.StatusBadArgument
	}
	for _, k := range [...]string{":path", ":method", ":authority"} {
		if _, ok := abi.HeaderValue(headers, k); !ok {
			return abi.StatusBadArgument
		}
	}
	if timeoutMs < 0 {
		return abi.StatusBadArgument
	}
	return abi.StatusOK
}

// Request is what Envoy sends for a call: the body copied out of guest memory and, when
// there is one, the headers given its content-length; the timeout in milliseconds as a
// duration (0: none).
func Request(headers [][2]string, body []byte, timeoutMs int32) ([][2]string, []byte, time.Duration) {
	body = append([]byte(nil), body...)
	if len(body) > 0 {
		headers = abi.SetHeader(headers, "content-length", strconv.Itoa(len(body)))
	}
	return headers, body, time.Duration(timeoutMs) * time.Millisecond
}

// TimeoutResponse is the async client's router answering a callout that timed out with a
// local 504 "upstream request timeout".
func TimeoutResponse() *Response {
	return &Response{Headers: [][2]string{{":status", "504"}, {"content-length", "24"},
		{"content-type", "text/plain"}}, Body: []byte("upstream request timeout")}
}

// Received is what the plugin reads of an answer in proxy_on_http_call_response, and the
// status proxy_get_status reports: nil with BrokenConnection "reset" for a failed (or
// missing) answer, which the plugin sees as zero counts; otherwise a copy with header keys
// lower-cased (headers never nil) and OK.
func Received(resp *Response) (*Response, abi.Status, string) {
	if resp == nil || resp.Fail {
		return nil, abi.StatusBrokenConnection, "reset"
	}
	r := &Response{Headers: abi.LowerKeys(resp.Headers), Trailers: abi.LowerKeys(resp.Trailers),
		Body: append([]byte(nil), resp.Body...)}
	if r.Headers == nil {
		r.Headers = [][2]string{}
	}
	return r, abi.StatusOK, ""
}

// Pending is the calls waiting for an answer, by token; the caller locks it.
type Pending[C any] struct {
	last  uint32
	calls map[uint32]C
}

// NewToken allocates the next token: counting up from 1, never 0 (which the ABI reads as
// no call).
func (p *Pending[C]) NewToken() uint32 {
	p.last++
	if p.last == 0 {
		p.last = 1
	}
	return p.last
}

// Add records c as pending under token.
func (p *Pending[C]) Add(token uint32, c C) {
	if p.calls == nil {
		p.calls = map[uint32]C{}
	}
	p.calls[token] = c
}

// Get returns the call pending under token.
func (p *Pending[C]) Get(token uint32) (C, bool) {
	c, ok := p.calls[token]
	return c, ok
}

// Remove forgets the call under token (answered, failed or timed out).
func (p *Pending[C]) Remove(token uint32) { delete(p.calls, token) }

// All returns the pending calls, lowest token (oldest) first.
func (p *Pending[C]) All() []C {
	tokens := make([]uint32, 0, len(p.calls))
	for t := range p.calls {
		tokens = append(tokens, t)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	out := make([]C, len(tokens))
	for i, t := range tokens {
		out[i] = p.calls[t]
	}
	return out
}
