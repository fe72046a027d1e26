package filter

import (
	"strings"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/spillwayproxy/spillway/plugin/hostabi"
	"github.com/spillwayproxy/spillway/plugin/internal/admin"
	"github.com/spillwayproxy/spillway/plugin/internal/replies"
)

// The admin API (plugin/internal/admin) as local replies: a request under admin.pathPrefix,
// when the policy sets an admin token, never goes upstream. Its bearer token is checked at
// the request headers (401/403 at once, before any body is read); a GET is answered there;
// a POST or DELETE is held, as an LLM request is, until its body has arrived, then answered.
// Every reset is logged at info with the path it came on and what it cleared, never a
// credential or the token.
//
// Nor does the token go upstream on any other request: a path whose canonical form is under
// the prefix without being so byte for byte (admin.Server.Classify), and a request anywhere
// else whose client credential header holds the token (admin.Server.IsToken, asked of each
// one as the request headers are read), are answered 404 at their headers, counted in
// spillway_admin_lookalikes_total and logged at warn (the header's name, never its value).

// adminCall is an admin request held for its body ("" path: none).
type adminCall struct {
	method, path string
}

// maxKeptPathBuf bounds the canonical-path buffer kept from one request to the next.
const maxKeptPathBuf = 4 << 10

// adminGate runs the admin check on a request's headers and reports whether the request
// stops here (answered, or held for its body): the admin API's own, a lookalike of it, or a
// request with the admin token in a client credential header (tokenHeader, "" for none). It
// is false at once with the admin API off. A path that is one of the policy's routed paths
// (routedPath, as apiOf reads it) is spelled no further: the policy's validation makes each
// canonical and not under the admin prefix in any case (policies, isCanonicalPath), so its
// canonical form is never the API's, and the routed success path pays nothing for the
// canonicalisation.
func (h *httpContext) adminGate(hdrs [][2]string, method, path string, routedPath, endOfStream bool, tokenHeader string) bool {
	p := h.plugin
	if p.admin == nil {
		return false
	}
	kind := admin.PathOther
	if !routedPath {
		var buf []byte
		kind, buf = p.admin.Classify(path, p.pathBuf)
		if cap(buf) > maxKeptPathBuf {
			buf = nil
		}
		p.pathBuf = buf
	}
	switch {
	case kind == admin.PathAdmin:
		h.adminRequest(hdrs, method, path, endOfStream)
	case kind == admin.PathLookalike:
		h.refuseLookalike(method, path, "its path is the admin API's spelled otherwise")
	case tokenHeader != "":
		h.refuseLookalike(method, path, "its "+tokenHeader+" header holds the admin token")
	default:
		return false
	}
	return true
}

// refuseLookalike answers a request that must not go upstream with the admin token or as
// the admin API 404, counted and logged at warn with why (the path without its query,
// clipped; never a header's value).
func (h *httpContext) refuseLookalike(method, path, why string) {
	p := h.plugin
	p.metrics.adminLookalikes.Increment(1)
	where, _, _ := strings.Cut(path, "?")
	if len(where) > maxLoggedPath {
		where = where[:maxLoggedPath] + "…"
	}
	proxywasm.LogWarnf("spillway: %.16q %q looks like the admin API without being it: %s; answered 404, not forwarded",
		method, where, why)
	h.replyAdmin(p.admin.LookalikeReply())
}

// maxLoggedPath bounds the path a lookalike's log line shows.
const maxLoggedPath = 128

// adminRequest answers a request under the admin prefix now, or holds it (phaseBody) until
// endOfRequest. hdrs are the request headers as read.
func (h *httpContext) adminRequest(hdrs [][2]string, method, path string, endOfStream bool) {
	p := h.plugin
	authorization, present := "", false
	for _, kv := range hdrs {
		if kv[0] == "authorization" {
			authorization, present = kv[1], true
			break
		}
	}
	if present {
		// Whatever happens next (a panic fails the stream open), the token never goes
		// upstream.
		removeRequestHeader("authorization")
	}
	if r, ok := p.admin.Authorize(authorization, present); !ok {
		h.replyAdmin(r)
		return
	}
	if endOfStream || !admin.HasBody(method) {
		h.serveAdmin(method, path, nil)
		return
	}
	h.admin = adminCall{method: strings.Clone(method), path: strings.Clone(path)}
	h.phase = phaseBody
	if !p.optionProven {
		h.heldAt = p.clock() // the missing-option detector holds for admin bodies too
		p.watch(h)
	}
}

// endOfAdminRequest reads a held admin request's body and answers it.
func (h *httpContext) endOfAdminRequest(bodySize int) step {
	var body []byte
	if bodySize > 0 {
		if cap(h.bufs.body) < bodySize {
			h.bufs.body = make([]byte, 0, bodySize)
		}
		b, err := hostabi.ReadBuffer(hostabi.RequestBody, 0, bodySize, h.bufs.body)
		if err != nil {
			proxywasm.LogWarnf("spillway: admin %s: read body: %v", h.admin.method, err)
			h.replyAdmin(replies.Internal())
			return stepAnswered
		}
		h.bufs.body, body = b, b
	}
	h.serveAdmin(h.admin.method, h.admin.path, body)
	return stepAnswered
}

// serveAdmin runs an authorized admin call and answers it. A panic in the call is answered
// 500 rather than failing open: an admin request has nowhere upstream to go.
func (h *httpContext) serveAdmin(method, path string, body []byte) {
	defer func() {
		if r := recover(); r != nil {
			h.plugin.metrics.panics.Increment(1)
			proxywasm.LogErrorf("spillway: panic in admin %s %q: %v", method, path, r)
			h.replyAdmin(replies.Internal())
		}
	}()
	res := h.plugin.admin.Serve(method, path, body)
	if res.Errors != nil {
		proxywasm.LogWarnf("spillway: admin %s %s: %v", method, res.Call.Endpoint, res.Errors)
	}
	if res.Log != "" {
		proxywasm.LogInfof("spillway: %s", res.Log)
	}
	h.replyAdmin(res.Reply)
}

// replyAdmin sends an admin reply: a local reply like Spillway's others, without the
// x-spillway-* routing headers (nothing was routed).
func (h *httpContext) replyAdmin(r replies.Reply) {
	h.phase = phaseAnswered
	h.plugin.unwatch(h)
	if err := hostabi.SendLocalResponse(uint32(r.Status), localReplyDetails, r.Body, r.Headers, &h.bufs.scratch); err != nil {
		proxywasm.LogErrorf("spillway: send admin reply %d: %v", r.Status, err)
	}
}
