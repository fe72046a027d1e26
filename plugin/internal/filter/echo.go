package filter

import "github.com/spillwayproxy/spillway/plugin/internal/classify/textscan"

// sent is what the client sent on this stream's request, as classification reads it to tell
// the provider's own words from an echo of the client's input (classify's package doc,
// "Echoes"): the body as the filter holds it (the client's, not the copy rewritten for a
// target's model), the requested model, and the request headers as the client sent them. It
// is a view, nothing is copied: valid while the stream's buffers are (the request's life).
//
// Every path that classifies a failure passes it — the first attempt's response and its
// first event (response.go recordFailure), callout failover answers (failover.go, through
// recordFailure), router-mode tries (router.go tryFailed: a try reaches its request's context
// through the link), header-routed mode (headermode.go). In header-routed mode a failure can
// arrive before the body: h.body is then nil and the view holds the model header and the
// other headers only, which is all the upstream has seen — the body is held until its end
// before any of it goes upstream (headermode.go), so there is no body to echo yet.
func (h *httpContext) sent() textscan.Sent {
	return textscan.Sent{Body: h.body, Model: h.model, Headers: h.reqHeaders}
}
