// Package retrymarker names the response header that makes Envoy's router retry a try,
// shared by the upstream filter (which sets it on a try that fails over) and the
// configuration generators (whose route retry policy retries on it alone); it imports
// nothing of the module.
package retrymarker

// Header is set on the response of a try Spillway's upstream instance fails over: the
// routed route's retry policy retries on it (retry_on retriable-headers, retriable_headers
// present-match on it) and on nothing else, and the route removes it from every response
// it sends downstream (response_headers_to_remove), so a client never sees it.
const Header = "x-spillway-retry"
