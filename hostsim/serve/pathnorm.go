package serve

import (
	"net/http"

	"github.com/spillwayproxy/spillway/hostsim/internal/envoy/pathnorm"
)

// PathNormalization is the connection manager's path normalisation the generated
// bootstrap sets (envoy.Bootstrap: normalize_path, merge_slashes, path_with_escaped_slashes_action
// REJECT_REQUEST; TestPathNormalizationIsTheGeneratedBootstraps compares them), which serve
// applies to every request before the filter sees it (hostsim/internal/envoy/pathnorm).
var PathNormalization = pathnorm.Config{NormalizePath: true, MergeSlashes: true, EscapedSlashes: pathnorm.RejectRequest}

// DetailsPathNormalizationFailed is the code details of the connection manager's 400 for a
// path it refuses (StreamInfo::ResponseCodeDetails::PathNormalizationFailed).
const DetailsPathNormalizationFailed = "path_normalization_failed"

// normalizePath rewrites the request's :path in h as the connection manager does before
// any filter runs (ActiveStream::decodeHeaders → maybeNormalizePath). A path it refuses is
// answered there: 400 with an empty body, or, under UNESCAPE_AND_REDIRECT, 307 to the
// unescaped path; ok is false then and res holds the reply.
func (s *Server) normalizePath(h [][2]string, out client, res *Result) (ok bool) {
	for i := range h {
		if h[i][0] != ":path" {
			continue
		}
		path, action := pathnorm.Normalize(h[i][1], PathNormalization)
		switch action {
		case pathnorm.Continue:
			h[i][1] = path
			return true
		case pathnorm.Redirect:
			res.Status, res.Header = http.StatusTemporaryRedirect, http.Header{"Location": {path}, "Content-Length": {"0"}}
		default:
			res.Status, res.Header = http.StatusBadRequest, http.Header{"Content-Length": {"0"}}
		}
		res.Details = DetailsPathNormalizationFailed
		_ = out.headers(res.Status, res.Header)
		return false
	}
	return true
}
