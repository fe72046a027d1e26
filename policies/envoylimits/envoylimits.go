// Package envoylimits derives from a resolved policy the limits Envoy must allow a request
// that Spillway handles: the request body and connection buffer limits, the stream idle
// timeout and, for failover through the router (failover.via: router), the retry count,
// back-off, retry body buffer and the clusters' retry circuit breaker. The generated Envoy
// bootstrap (package envoy), the Istio manifests (package istio) and hostsim serve all take
// them from here, so the proxies Spillway ships and the one it is tested under cannot drift
// apart.
package envoylimits

import (
	"math"
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// BufferHeadroom is what Envoy may buffer beyond the policy's maxRequestBodyBytes. Spillway
// answers 413 request_too_large itself once the body it holds passes the policy's limit;
// Envoy adds each chunk to the buffered body before the filter sees it, so it must let the
// chunk that passes the policy's limit in, or Envoy's own untyped 413 (filter manager,
// ActiveStreamDecoderFilter::requestDataTooLarge) answers first. A body within the policy's
// limit never meets Envoy's 413, whatever the chunk sizes. One MiB covers the chunk when a
// read hands the filter at most 1 MiB: one read of the connection stops once the read
// buffer holds per_connection_buffer_limit_bytes (source/common/network/
// raw_buffer_socket.cc, RawBufferSocket::doRead, ConnectionImpl::shouldDrainReadBuffer),
// and in practice at what the kernel's socket buffer holds. With ConnectionBufferLimit a
// client that lands more than 1 MiB in one read can meet Envoy's untyped 413 for a body
// that is over the policy's limit anyway.
const BufferHeadroom = 1 << 20

// RequestBodyBufferLimit is the request_body_buffer_limit for every route a request
// Spillway holds can match: the bytes Envoy buffers for a request whose filter holds it.
// The bootstrap sets it on the virtual host, not the LLM route alone, because the filter
// starts holding a request before it has chosen a cluster, while the request still matches
// the default route.
func RequestBodyBufferLimit(res *policies.Resolved) uint64 {
	return uint64(res.MaxRequestBodyBytes) + BufferHeadroom
}

// DefaultConnectionBufferLimit is Envoy's per_connection_buffer_limit_bytes when a listener
// sets none (1 MiB: source/common/listener_manager/listener_impl.cc, ListenerImpl).
const DefaultConnectionBufferLimit = 1 << 20

// ConnectionBufferLimit is the per_connection_buffer_limit_bytes of the listener Spillway
// runs on: RequestBodyBufferLimit, so that an Envoy that applies the route's
// request_body_buffer_limit only in the router filter still lets Spillway buffer the
// whole body.
//
// A stream starts with its codec stream's buffer limit (source/common/http/
// conn_manager_impl.cc, ConnectionManagerImpl::newStream): over HTTP/1.1 the connection's
// (http1/codec_impl.cc, StreamEncoderImpl::bufferLimit), over HTTP/2 the stream's initial
// window (initial_stream_window_size, 256 MiB by default). The route's limit raises it:
// before envoyproxy/envoy#42607 (Envoy 1.37.0) only when the request headers reach the
// router (source/common/router/router.cc, Filter::decodeHeaders, setDecoderBufferLimit),
// which for a request Spillway holds at its headers is after the whole body was
// buffered; an HTTP/1.1 body over 1 MiB then got Envoy's 413. From 1.37 the limit is
// applied when the route is matched, and this value changes nothing for requests.
//
// What else it changes, per connection of the listener (source/common/network/
// connection_impl.cc, ConnectionImpl::setBufferLimits): a read takes up to this much from
// the socket before the connection manager parses it, and the write buffer's high
// watermark rises to it, so up to this much of a response can wait for a slow client
// before Envoy stops reading the upstream. Over HTTP/1.1 a stream's single buffer limit,
// which covers the response body a filter buffers as well as the request's
// (FilterManager::setBufferLimit), starts there. None of it is allocated up front: it is
// a bound on what a connection may hold, and the cost of raising it is that bound times
// the connections that use it.
func ConnectionBufferLimit(res *policies.Resolved) uint32 {
	return uint32(min(RequestBodyBufferLimit(res), math.MaxUint32))
}

// IdleSlack is how long Envoy's idle timer outlives the filter's own bounds: the filter
// answers with its typed reply first, Envoy's timer is the backstop.
const IdleSlack = 30 * time.Second

// IdleTimeout is the route's idle_timeout and the connection manager's
// stream_idle_timeout: the longest a request may go without a byte in either direction
// under the policy's own bounds, plus IdleSlack. A request can be silent while it waits
// for its body (routing.bodyWaitMs), then in a connection's queue (requestQueue.maxWaitMs
// or a connection's override), then waiting out short cooldowns (comboCooldownWait's
// budget), then on its attempts: each bounded by the connection's executionMaxWaitMs (a
// non-streaming answer from a reasoning model can take minutes before its first byte), all
// of them by failover.budgetMs. Envoy's 15 s route timeout covers the whole response
// instead, which a long stream outlives, so the generated route turns it off and relies on
// this.
func IdleTimeout(res *policies.Resolved) time.Duration {
	var queueWait, execWait time.Duration
	for i := range res.Providers {
		for _, c := range res.Providers[i].Connections {
			queueWait = max(queueWait, c.QueueMaxWait)
			execWait = max(execWait, c.ExecutionMaxWait)
		}
	}
	attempts := min(res.Failover.Budget, time.Duration(res.Failover.MaxAttempts)*execWait)
	var comboWait time.Duration
	if res.ComboCooldownWait.Enabled {
		comboWait = res.ComboCooldownWait.Budget
	}
	return max(res.Routing.BodyWait, queueWait+comboWait+attempts) + IdleSlack
}
