// Package hostabi is the filter's direct line to the proxy-wasm host for the calls on its
// hot path — header maps, bodies, shared data, properties, local replies, continue, metrics,
// the decision log —
// without the allocations the SDK's getters make (their out-parameters escape through the
// SDK's host interface, and every buffer the host hands over is a fresh allocation).
//
// In the wasm build (wasip1) the functions call the proxy_* imports themselves and receive
// the host's data in a reusable arena: proxy_on_memory_allocate, which this package
// exports, serves a host call made from here out of the arena instead of the Go heap, and
// the data is copied into (or parsed in) the caller's reusable buffer before the next call.
// Natively the same functions go through the SDK, so the filter runs unchanged under its
// proxytest host.
//
// Data returned here aliases a buffer the caller passed in (or a Pairs the caller owns) and
// stays valid until the caller reuses it.
package hostabi

import (
	"errors"
	"unsafe"

	"github.com/spillwayproxy/spillway/internal/pairs"
)

// MapType is a header map of the ABI.
type MapType uint32

// Header maps (proxy-wasm ABI 0.2.1).
const (
	RequestHeaders          MapType = 0
	RequestTrailers         MapType = 1
	ResponseHeaders         MapType = 2
	ResponseTrailers        MapType = 3
	HTTPCallResponseHeaders MapType = 6
)

// BufferType is a buffer of the ABI.
type BufferType uint32

// Buffers (proxy-wasm ABI 0.2.1).
const (
	RequestBody          BufferType = 0
	ResponseBody         BufferType = 1
	HTTPCallResponseBody BufferType = 4
)

// StreamType is a stream direction of proxy_continue_stream.
type StreamType uint32

// Streams (proxy-wasm ABI 0.2.0).
const (
	StreamRequest  StreamType = 0
	StreamResponse StreamType = 1
)

// LogLevel is a proxy_log level (Envoy maps 0..5 to trace..critical).
type LogLevel uint32

// The levels the filter's decision log writes at.
const (
	LogDebug LogLevel = 1
	LogInfo  LogLevel = 2
)

var errUnknownStatus = errors.New("hostabi: unknown status from host")

// ErrForeignAddress is a host call whose answer the host wrote at an address the guest's
// allocator did not hand out for it (wasm only): the data is not read.
var ErrForeignAddress = errors.New("hostabi: the host returned data at an address the guest did not allocate")

// Pairs is a header map read from the host, kept in memory the caller reuses: after a read,
// its pairs' strings alias its own buffer until the next read into it.
type Pairs struct {
	buf []byte
	kv  [][2]string
}

// All returns the pairs (names lower case, as Envoy keeps them).
func (p *Pairs) All() [][2]string { return p.kv }

// Get returns the first value of name (lower case).
func (p *Pairs) Get(name string) (string, bool) {
	for _, kv := range p.kv {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// Reset empties p, keeping its memory.
func (p *Pairs) Reset() { p.buf, p.kv = p.buf[:0], p.kv[:0] }

// Clone returns a copy of the pairs that does not alias p.
func (p *Pairs) Clone() [][2]string {
	out := make([][2]string, len(p.kv))
	for i, kv := range p.kv {
		out[i] = [2]string{string([]byte(kv[0])), string([]byte(kv[1]))}
	}
	return out
}

// setFrom copies an encoded map into p and parses it (internal/pairs), the pairs aliasing
// p's copy. A malformed encoding reads as an empty map.
func (p *Pairs) setFrom(encoded []byte) {
	p.buf = append(p.buf[:0], encoded...)
	p.kv, _ = pairs.Decode(p.kv[:0], p.buf, unsafeString)
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// JoinPath encodes a property path (segments joined by NUL) into dst.
func JoinPath(dst []byte, path ...string) []byte {
	for i, s := range path {
		if i > 0 {
			dst = append(dst, 0)
		}
		dst = append(dst, s...)
	}
	return dst
}
